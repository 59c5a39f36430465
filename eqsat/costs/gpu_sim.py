"""``gpu-sim``: a *simulated* GPU cost model, the analytic roofline with an NVIDIA V100's published figures.

Nothing here runs on a GPU or is measured: it is a formula, for setting eqsat's results on TASO's graphs beside
Tensat's published V100 table (``eqsat.gpu`` is the measured GPU model). It prices the FLOPs and bytes the
analytic model counts (:func:`eqsat.costs.analytic.work`) with

    time = max(FLOPs / (peak x efficiency x occupancy), bytes / (bandwidth x 0.8)) + kernels x launch overhead

The figures and where they come from:

* peak FP32 15.7 TFLOP/s and HBM2 bandwidth 900 GB/s: NVIDIA Tesla V100 datasheet (SXM2 part); 80 SMs of at
  most 2048 resident threads each: NVIDIA Tesla V100 GPU architecture whitepaper (2017).
* launch overhead 5 µs per kernel: an assumption, not a measurement; launching a kernel costs a few µs on a V100
  (NVIDIA's blog "Getting Started with CUDA Graphs", 2019, measures a few µs per short kernel) and 5 µs is the
  figure commonly quoted. Relative to the compute it is what makes fusing and merging kernels pay on a GPU.
* compute efficiency: large cuBLAS SGEMMs are commonly reported at about 14 TFLOP/s on a V100, 0.9 of peak;
  cuDNN's FP32 convolutions reach less, taken as 0.7 (an assumption). The other operators are memory-bound at
  any shape, and their compute term is taken at the bare peak.
* occupancy: a kernel spreads its work over threads by the elements it reads or writes (output tiles, or split-K
  slices of the reduction when the output is small), so a kernel over fewer elements than the 80 x 2048 threads
  the V100 holds resident leaves SMs idle and gets that fraction of its throughput (at most 1).
* memory efficiency 0.8: streaming kernels reach about 80 % of HBM2's peak bandwidth (Jia et al., "Dissecting
  the NVIDIA Volta GPU Architecture via Microbenchmarking", 2018, measure about 750 GB/s of the 900).

Views (reshape, split) cost nothing and a fused form (a conv with relu) is priced as the operators export writes
it as, as in the analytic model, so the same graph is costed alike before and after optimization.
"""

from __future__ import annotations

import math

from eqsat.costs.analytic import AnalyticCostModel
from eqsat.ops import CostKey

#: NVIDIA Tesla V100 SXM2, datasheet: FP32 peak (GFLOP/s) and HBM2 bandwidth (GB/s)
V100_FP32_PEAK_GFLOPS = 15_700.0
V100_HBM2_BANDWIDTH_GBS = 900.0
#: V100 architecture whitepaper: streaming multiprocessors, and resident threads per SM
V100_SMS = 80
V100_THREADS_PER_SM = 2048
#: per-kernel launch overhead (ms): a commonly quoted few µs, assumed (see the module docstring)
LAUNCH_OVERHEAD_MS = 0.005
#: fraction of peak FP32 a large kernel of the op reaches: cuBLAS SGEMM ~14 of 15.7 TFLOP/s; cuDNN convs less
COMPUTE_EFFICIENCY = {"matmul": 0.9, "matmul_t": 0.9, "conv2d": 0.7, "conv2d_nhwc": 0.7}
#: fraction of peak bandwidth a streaming kernel reaches
MEMORY_EFFICIENCY = 0.8


class GpuSimCostModel(AnalyticCostModel):
    """A simulated NVIDIA V100 (SXM2): the analytic roofline with the V100's published peaks, per-op efficiency,
    an occupancy ramp and a GPU kernel-launch overhead. Computed, not measured; see the module docstring for the
    formula and the figures' sources."""

    name = "gpu-sim (simulated V100 roofline)"
    is_measured = False
    times_end_to_end = False

    def __init__(self, peak_gflops: float = V100_FP32_PEAK_GFLOPS, bandwidth_gbs: float = V100_HBM2_BANDWIDTH_GBS,
                 launch_overhead_ms: float = LAUNCH_OVERHEAD_MS, memory_efficiency: float = MEMORY_EFFICIENCY,
                 resident_threads: int = V100_SMS * V100_THREADS_PER_SM):
        super().__init__(peak_gflops, bandwidth_gbs, launch_overhead_ms)
        self.memory_efficiency = memory_efficiency
        self.resident_threads = resident_threads

    def occupancy(self, key: CostKey) -> float:
        """The fraction of the GPU's resident threads the kernel's largest operand or result fills (at most 1)."""
        elements = max(math.prod(s) for s in (*key.input_shapes, key.output_shape))
        return min(1.0, max(elements, 1) / self.resident_threads)

    def kernel_ms(self, key: CostKey, flops: float, nbytes: int, nodes: int) -> float:
        """The roofline at the op's achieved compute and memory rates, plus a launch per kernel."""
        rate = self.peak_gflops * 1e6 * COMPUTE_EFFICIENCY.get(key.op, 1.0) * self.occupancy(key)
        compute_ms = flops / rate
        memory_ms = nbytes / (self.bandwidth_gbs * 1e6 * self.memory_efficiency)
        return max(compute_ms, memory_ms) + nodes * self.launch_overhead_ms

    def device_identity(self) -> dict[str, str]:
        """Parameters of the simulation (it measures nothing)."""
        return {**super().device_identity(), "memory_efficiency": str(self.memory_efficiency),
                "resident_threads": str(self.resident_threads),
                "compute_efficiency": ",".join(f"{k}={v}" for k, v in sorted(COMPUTE_EFFICIENCY.items()))}
