"""A deterministic analytic cost model: a roofline over FLOPs and bytes plus a per-kernel launch overhead.

:func:`work` counts what one configuration does (FLOPs, bytes, kernels); :class:`AnalyticCostModel` prices it
with one device's figures, and :class:`eqsat.costs.gpu_sim.GpuSimCostModel` with a simulated GPU's."""

from __future__ import annotations

import math
from collections.abc import Callable

from eqsat import ops
from eqsat.costs.base import CostModel
from eqsat.ops import CostKey

_BYTES = {"float32": 4, "float16": 2, "float64": 8, "int64": 8, "int32": 4, "bool": 1, "uint8": 1, "int8": 1}
#: how much more than its decomposition a runtime's own kernel costs (:func:`kernel_as_parts`): a tenth
#: of a microsecond, which extraction's integer costs (nanoseconds) still tell apart
KERNEL_MARGIN_MS = 1e-4


def kernel_as_parts(key: CostKey, price: Callable[[CostKey], float]) -> float | None:
    """A runtime's own kernel (``OpSpec.runtime``) priced by a model that does not see its speed: its parts
    (``runs_as``) under ``price`` and a hair more (:data:`KERNEL_MARGIN_MS`), so it is never preferred to them
    by a tie or by pricing of another kind; None for any other configuration."""
    if not ops.get(key.op).runtime:
        return None
    return sum(price(k) for k in ops.runs_as_keys(key)) + KERNEL_MARGIN_MS


def work(key: CostKey) -> tuple[float, int, int]:
    """What one configuration that runs as itself does: its FLOPs, the bytes it reads and writes, and the kernels
    (nodes) it launches. An operator whose export writes several nodes (``OpSpec.decomposition``) launches each,
    and writes and reads back its intermediates; an opaque operator counts a FLOP per output element."""
    size = _BYTES.get(key.dtype, 4)
    nbytes = size * (sum(math.prod(s) for s in key.input_shapes) + math.prod(key.output_shape))
    nodes = 1
    if key.is_opaque:
        flops = float(math.prod(key.output_shape))
    else:
        spec = ops.get(key.op)
        flops = spec.flops(dict(key.params), key.input_shapes, key.output_shape)
        if spec.decomposition is not None:  # several nodes, intermediates written and read back
            nodes, spilled = spec.decomposition(dict(key.params))
            nbytes += 2 * size * spilled * math.prod(key.output_shape)
    return flops, nbytes, nodes


class AnalyticCostModel(CostModel):
    """time = max(FLOPs / peak, bytes / bandwidth) + launch overhead, in milliseconds.

    The defaults describe a 2-core x86 CPU running onnxruntime: about 50 GFLOP/s of float32 compute, about
    10 GB/s of memory bandwidth and 5 µs of per-operator overhead. ``reshape`` and ``split`` are views and
    cost nothing here (the measured models price what onnxruntime really does). Only the ratios matter to extraction;
    the overhead is what makes one larger kernel (e.g. a matmul over concatenated weights) cheaper than two
    small ones, and a conv with fused relu cheaper than a conv and a separate relu.
    """

    name = "analytic"
    is_measured = False

    def __init__(self, peak_gflops: float = 50.0, bandwidth_gbs: float = 10.0, launch_overhead_ms: float = 0.005):
        self.peak_gflops = peak_gflops
        self.bandwidth_gbs = bandwidth_gbs
        self.launch_overhead_ms = launch_overhead_ms

    def cost(self, key: CostKey) -> float:
        """Roofline estimate for one configuration; a fused form (conv with relu) is priced as the operators
        export writes it as, since nothing here models a runtime fusing them."""
        kernel = kernel_as_parts(key, self.cost)  # a runtime's kernel: its speed is not modelled
        if kernel is not None:
            return kernel
        parts = ops.runs_as_keys(key)
        if parts != (key,):
            return sum(self.cost(k) for k in parts)
        spec = ops.get(key.op)
        if spec.view or spec.glue == "cut":  # a runtime can alias a view or a split's piece (as TASO's model does)
            return 0.0
        return self.kernel_ms(key, *work(key))

    def kernel_ms(self, key: CostKey, flops: float, nbytes: int, nodes: int) -> float:
        """The time of ``nodes`` kernels doing ``flops`` FLOPs over ``nbytes`` bytes (what :func:`work` counts
        for ``key``): the slower of compute and memory, plus a launch each."""
        compute_ms = flops / (self.peak_gflops * 1e6)
        memory_ms = nbytes / (self.bandwidth_gbs * 1e6)
        return max(compute_ms, memory_ms) + nodes * self.launch_overhead_ms

    def device_identity(self) -> dict[str, str]:
        """Parameters of the model (it measures nothing)."""
        return {"model": self.name, "peak_gflops": str(self.peak_gflops), "bandwidth_gbs": str(self.bandwidth_gbs),
                "launch_overhead_ms": str(self.launch_overhead_ms)}
