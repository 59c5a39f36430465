"""Measured GPU costs through CuPy: cuBLAS matrix products, cuDNN convolutions and pools, CuPy kernels for the rest.

CuPy is imported lazily: this module imports (and the rest of eqsat works) without CuPy or a GPU.
Convolutions and pools go through cuDNN, as TASO's do: through CuPy's wrapper up to CuPy 13 (``auto_tune=True``,
so cuDNN picks its fastest algorithm), or, from CuPy 14 (which removed its cuDNN support), through PyTorch's where
PyTorch is installed (``torch.backends.cudnn.benchmark``, the same autotuning), on the same arrays through DLPack.
Transposed-operand products (``matmul_t``) go through cuBLAS with the transpose flags their layout implies. A fused
bias and relu is measured as the convolution plus an in-place relu, a residual add (``conv2d_add``) as an in-place
add; through PyTorch in float32 (TF32 off; CuPy's wrapper leaves cuDNN's default math). Each configuration is
warmed up, then timed with CUDA events over repeated launches; the median is reported, once per configuration. As
on the CPU, what is priced is what export writes: an NHWC convolution, which ONNX cannot express, as its transposes
and NCHW convolution, and onnxruntime's fused kernels (which CuPy cannot run) as the operators they fuse.

An operator with no kernel here (a reference numpy cannot run on CuPy arrays, a convolution with no cuDNN at
hand) is priced by a roofline of this GPU, calibrated when the model is made: the bandwidth a large element-wise
add reaches, the FP32 rate of a large matrix product and the time of an empty launch (:func:`calibrate`). The CPU
analytic model, which it replaced, priced such operators tens of times above the measured ones beside them.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eqsat import ops
from eqsat.costs.analytic import kernel_as_parts
from eqsat.costs.base import CostModel
from eqsat.costs.gpu_sim import GpuSimCostModel
from eqsat.ops import CostKey


def _cupy() -> Any:
    try:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
        return cupy
    except Exception as e:  # ImportError, CUDARuntimeError, missing driver...
        raise RuntimeError(f"CuPy/CUDA not available: {type(e).__name__}: {e}. Install eqsat[gpu] on a machine "
                           "with an NVIDIA GPU, or use --costs analytic|measured") from None


def _cudnn() -> Any:
    """CuPy's cuDNN wrapper, or None (CuPy 14 removed it; an older CuPy built without cuDNN lacks it too)."""
    try:
        from cupyx import cudnn
    except ImportError:
        try:
            from cupy import cudnn
        except ImportError:
            return None
    return cudnn


def _torch_cuda() -> Any:
    """PyTorch with CUDA and cuDNN, set to autotune its convolution algorithms; None where it is not installed or
    has no GPU."""
    try:
        import torch
    except ImportError:
        return None
    if not (torch.cuda.is_available() and torch.backends.cudnn.is_available()):
        return None
    torch.backends.cudnn.benchmark = True  # cuDNN picks its fastest algorithm per shape, as CuPy's auto_tune did
    torch.backends.cudnn.allow_tf32 = False  # float32 arithmetic, as the model's and CuPy's products are
    return torch


def nhwc_conv_as_written(key: CostKey) -> tuple[CostKey, CostKey, CostKey]:
    """The configurations an NHWC convolution's export writes: a transpose to NCHW, the NCHW convolution (its
    activation included) and a transpose back."""
    n, h, w, c = key.input_shapes[0]
    on, oh, ow, oc = key.output_shape
    params = dict(key.params)
    conv, tr = ops.get("conv2d"), ops.get("transpose")
    into = tr.cost_key({"perm": (0, 3, 1, 2)}, [(n, h, w, c)], (n, c, h, w))
    nchw = conv.cost_key(params, [(n, c, h, w), *key.input_shapes[1:]], (on, oc, oh, ow), weights=key.weights)
    back = tr.cost_key({"perm": (0, 2, 3, 1)}, [(on, oc, oh, ow)], (on, oh, ow, oc))
    return into, nchw, back


@dataclass(frozen=True)
class Calibration:
    """What this GPU reaches, measured: FP32 matrix-product rate, memory bandwidth, one empty launch."""

    gflops: float
    bandwidth_gbs: float
    launch_ms: float
    resident_threads: int

    def roofline(self) -> GpuSimCostModel:
        """The roofline of :mod:`eqsat.costs.gpu_sim` at these figures: the measured bandwidth as reached (memory
        efficiency 1); products and convolutions still at their efficiency of the measured product rate."""
        return GpuSimCostModel(peak_gflops=self.gflops, bandwidth_gbs=self.bandwidth_gbs,
                               launch_overhead_ms=self.launch_ms, memory_efficiency=1.0,
                               resident_threads=self.resident_threads)


def calibrate(cp: Any, timer: Callable[[Callable[[], Any]], float]) -> Calibration:
    """Time a 4096-cube float32 product, an add of two vectors of 2^26 floats (two read, one written) and an add
    of one float on the current GPU (``timer(fn)``: the median ms of ``fn``)."""
    n = 4096
    a, b = cp.ones((n, n), dtype=cp.float32), cp.ones((n, n), dtype=cp.float32)
    gemm_ms = timer(lambda: cp.matmul(a, b))
    x, y = cp.ones(1 << 26, dtype=cp.float32), cp.ones(1 << 26, dtype=cp.float32)
    add_ms = timer(lambda: cp.add(x, y))
    one = cp.ones(1, dtype=cp.float32)
    launch_ms = timer(lambda: cp.add(one, one))
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    threads = int(props["multiProcessorCount"]) * int(props["maxThreadsPerMultiProcessor"])
    return Calibration(gflops=2 * n ** 3 / (gemm_ms * 1e6), bandwidth_gbs=3 * x.nbytes / (add_ms * 1e6),
                       launch_ms=launch_ms, resident_threads=threads)


def _symmetric_pads(cp: Any, x: Any, pads: tuple[int, ...], fill: float) -> tuple[Any, tuple[int, int]]:
    """ONNX pads (top, left, bottom, right) as cuDNN's symmetric (h, w) pads: asymmetric ones are applied to
    the input first (filled with ``fill``), leaving zero pads for cuDNN."""
    if pads[0] != pads[2] or pads[1] != pads[3]:
        x = cp.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])), constant_values=fill)
        return x, (0, 0)
    return x, (pads[0], pads[1])


def _transposed(xs: list[Any], p: dict[str, Any]) -> tuple[Any, Any]:
    """A product's two operands with the transposes its ``trans_a``/``trans_b`` flags ask for, as views:
    Fortran-ordered, so that cuBLAS gets them with transpose flags and no copy."""
    a = xs[0].swapaxes(-1, -2) if p.get("trans_a") else xs[0]
    b = xs[1].swapaxes(-1, -2) if p.get("trans_b") else xs[1]
    return a, b


class CupyCostModel(CostModel):
    """Median CUDA-event time (ms) of each configuration on the current GPU."""

    name = "cupy-gpu"
    is_measured = True

    def __init__(self, warmup: int = 5, repeats: int = 20, replayed: int = 0) -> None:
        self.cp = _cupy()
        self.warmup = warmup
        self.repeats = repeats
        #: with ``replayed`` > 0, each configuration is timed as a CUDA graph runs it, as a deployment that
        #: captures the model does: that many launches captured in one graph, the replay's time divided by it
        #: (no launch from Python in it; a configuration whose capture fails is timed as launched, and counted)
        self.replayed = replayed
        self.capture_failures = 0
        self._cudnn = _cudnn()
        self._torch = None if self._cudnn is not None else _torch_cuda()
        if replayed and self._torch is None:
            raise RuntimeError("timing in a CUDA graph needs PyTorch (torch.cuda.CUDAGraph)")
        self.calibration = calibrate(self.cp, self._time)
        self._fallback = self.calibration.roofline()
        #: each configuration's first timing, reused: a fused form priced from its parts then sees the same
        #: values as the graph's own copies of them, not new timings that differ by more than any margin
        self._timed: dict[CostKey, float] = {}

    @property
    def cudnn_backend(self) -> str:
        """Which cuDNN convolutions and pools run through: ``"cupy"``, ``"torch"``, or ``""`` (the roofline)."""
        return "cupy" if self._cudnn is not None else "torch" if self._torch is not None else ""

    def _kernel(self, key: CostKey) -> Any:
        """What to time for ``key``: its kernel here (:data:`KERNELS`), else its registry reference on CuPy arrays;
        None where neither runs."""
        cp = self.cp
        p = dict(key.params)
        rng = cp.random.default_rng(0)
        xs = [rng.standard_normal(s, dtype=cp.float32) for s in key.input_shapes]
        build = KERNELS.get(key.op)
        return build(self, key, xs, p) if build is not None else self._reference(key, xs)

    def _matmul(self, key: CostKey, xs: list[Any], p: dict[str, Any]) -> Callable[[], Any]:
        """A matrix product through cuBLAS: CuPy's, or PyTorch's when timed in a CUDA graph (CuPy's cuBLAS calls
        are not captured)."""
        a, b = _transposed(xs, p)
        if self.replayed:
            torch = self._torch
            ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
            return lambda: torch.matmul(ta, tb)
        cp = self.cp
        return lambda: cp.matmul(a, b)

    def _gemm(self, key: CostKey, xs: list[Any], p: dict[str, Any]) -> Callable[[], Any]:
        """A product plus a bias: its registry reference on CuPy arrays, or PyTorch's ``addmm`` (one cuBLAS call)
        when timed in a CUDA graph (CuPy's cuBLAS calls are not captured)."""
        if not self.replayed:
            return self._reference(key, xs)
        torch = self._torch
        ta, tb, tc = (torch.from_dlpack(v) for v in (*_transposed(xs, p), xs[2]))
        return lambda: torch.addmm(tc, ta, tb)

    def _any_pool(self, key: CostKey, xs: list[Any], p: dict[str, Any], maximum: bool) -> Any:
        """A 2-D pool through cuDNN (CuPy's, else PyTorch's; None without either); another rank runs the
        reference."""
        if len(key.input_shapes[0]) != 4:
            return self._reference(key, xs)
        if self._cudnn is not None:
            return self._pool(key, xs[0], p, maximum)
        return self._torch_pool(key, xs[0], p, maximum) if self._torch is not None else None

    def _piece(self, key: CostKey, xs: list[Any], p: dict[str, Any]) -> Callable[[], Any]:
        """A split's piece, copied out (the reference's slice is a view, which times nothing)."""
        cp = self.cp
        idx = [slice(None)] * len(key.input_shapes[0])
        idx[p["axis"]] = slice(p["start"], p["start"] + p["size"])
        return lambda: cp.ascontiguousarray(xs[0][tuple(idx)])

    @staticmethod
    def _reference(key: CostKey, xs: list[Any]) -> Any:
        """Any other operator runs its registry reference on CuPy arrays (numpy functions dispatch to CuPy
        through ``__array_function__``); one whose reference cannot run there is left to the fallback."""
        if key.is_opaque:
            return None
        spec = ops.get(key.op)
        params = spec.normalize(dict(key.params))

        def run() -> Any:
            return spec.numpy_fn(params, *xs)

        try:
            out = run()
        except Exception:  # noqa: BLE001 - a reference using numpy-only code (np.vectorize, say)
            return None
        return run if type(out).__module__.startswith("cupy") else None

    def _conv(self, key: CostKey, xs: list[Any], p: dict[str, Any]) -> Callable[[], Any] | None:
        """A cuDNN convolution, then a residual add (``conv2d_add``) and the fused relu: CuPy's cuDNN, else
        PyTorch's; None without cuDNN."""
        cp = self.cp
        x, w, b, *residual = xs
        x, pad = _symmetric_pads(cp, x, p["pads"], 0.0)
        relu = p["act"] == 1
        if self._cudnn is not None:
            cudnn = self._cudnn
            y = cp.empty(key.output_shape, dtype=cp.float32)

            def conv() -> None:
                cudnn.convolution_forward(x, w, b, y, pad, p["strides"], p["dilations"], p["groups"],
                                          auto_tune=True, tensor_core="auto")
                if residual:
                    cp.add(y, residual[0], out=y)
                if relu:
                    cp.maximum(y, 0, out=y)

            return conv
        torch = self._torch
        if torch is None:
            return None
        tx, tw, tb = (torch.from_dlpack(a) for a in (x, w, b))
        tz = torch.from_dlpack(residual[0]) if residual else None
        f = torch.nn.functional

        def torch_conv() -> Any:  # the result (a test checks its shape)
            with torch.no_grad():
                y = f.conv2d(tx, tw, tb, tuple(p["strides"]), pad, tuple(p["dilations"]), p["groups"])
                if tz is not None:
                    y.add_(tz)
                if relu:
                    y.relu_()
            return y

        return torch_conv

    def _torch_pool(self, key: CostKey, x: Any, p: dict[str, Any], maximum: bool) -> Callable[[], Any]:
        """PyTorch's cuDNN pooling, max or average (asymmetric pads applied to the input first, see
        :func:`_symmetric_pads`)."""
        cp, torch = self.cp, self._torch
        x, pad = _symmetric_pads(cp, x, p["pads"], -cp.inf if maximum else 0.0)
        tx, f = torch.from_dlpack(x), torch.nn.functional
        if maximum:
            return lambda: f.max_pool2d(tx, tuple(p["kernel"]), tuple(p["strides"]), pad)
        return lambda: f.avg_pool2d(tx, tuple(p["kernel"]), tuple(p["strides"]), pad,
                                    count_include_pad=bool(p["count_include_pad"]))

    def _pool(self, key: CostKey, x: Any, p: dict[str, Any], maximum: bool) -> Any:
        """cuDNN pooling, max or average (asymmetric pads applied to the input first, see :func:`_symmetric_pads`)."""
        cp, cudnn = self.cp, self._cudnn
        try:
            from cupy_backends.cuda.libs import cudnn as libcudnn
        except ImportError:
            from cupy.cuda import cudnn as libcudnn

        x, pad = _symmetric_pads(cp, x, p["pads"], -cp.inf if maximum else 0.0)
        if maximum:
            mode = libcudnn.CUDNN_POOLING_MAX
        elif p["count_include_pad"]:
            mode = libcudnn.CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
        else:
            mode = libcudnn.CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING
        y = cp.empty(key.output_shape, dtype=cp.float32)
        return lambda: cudnn.pooling_forward(x, y, tuple(p["kernel"]), tuple(p["strides"]), pad, mode)

    def cost(self, key: CostKey) -> float:
        """Measure one configuration (ms); operators without a GPU kernel here are priced by this GPU's
        calibrated roofline."""
        if ops.get(key.op).view:  # no kernel runs
            return 0.0
        written = AS_WRITTEN.get(key.op)
        if written is not None:
            return sum(self.cost(k) for k in written(key))
        # onnxruntime's own kernel, which CuPy cannot run: what it fuses, so that a cost of another kind (the
        # roofline's) never makes it look cheaper than its timed parts
        kernel = kernel_as_parts(key, self.cost)
        if kernel is not None:
            return kernel
        if key not in self._timed:
            fn = self._kernel(key) if not key.is_opaque else None
            self._timed[key] = self._fallback.cost(key) if fn is None else self._time(fn)
        return self._timed[key]

    def _time(self, fn: Callable[[], Any]) -> float:
        """The median ms of ``fn`` over ``repeats`` launches after ``warmup``, by CUDA events on the default
        stream (which PyTorch's kernels run on too); in a CUDA graph with ``replayed``."""
        if self.replayed:
            try:
                return self._time_replayed(fn)
            except Exception:  # a kernel that cannot be captured (it allocates, or synchronises): as launched
                self.capture_failures += 1
                self._torch.cuda.synchronize()
        cp = self.cp
        for _ in range(self.warmup):
            fn()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        times = []
        for _ in range(max(self.repeats, 1)):
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end))
        return float(statistics.median(times))

    def _time_replayed(self, fn: Callable[[], Any]) -> float:
        """The median ms of one ``fn`` in a CUDA graph of ``replayed`` of them, over ``repeats`` replays: captured
        by PyTorch on a side stream that CuPy's kernels run on too, after ``warmup`` launches on that stream (so
        that CuPy's memory pool holds the blocks the captured launches take)."""
        cp, torch = self.cp, self._torch
        side = torch.cuda.Stream()
        with torch.cuda.stream(side), cp.cuda.ExternalStream(side.cuda_stream):
            for _ in range(self.warmup):
                fn()
        side.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side), cp.cuda.ExternalStream(side.cuda_stream):
            for _ in range(self.replayed):
                fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        graph.replay()
        times = []
        for _ in range(max(self.repeats, 1)):
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / self.replayed)
        del graph
        return float(statistics.median(times))

    def device_identity(self) -> dict[str, str]:
        """GPU name, driver, CUDA runtime, cuDNN and CuPy versions."""
        cp = self.cp
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        if self._cudnn is not None:
            cudnn_version = f"cupy {self._cudnn.get_build_version()}"
        elif self._torch is not None:
            cudnn_version = f"torch {self._torch.__version__}, cuDNN {self._torch.backends.cudnn.version()}"
        else:
            cudnn_version = "none (convolutions and pools priced by the calibrated roofline)"
        return {"model": self.name, "gpu": props["name"].decode() if isinstance(props["name"], bytes)
                else str(props["name"]), "driver": str(cp.cuda.runtime.driverGetVersion()),
                "cuda_runtime": str(cp.cuda.runtime.runtimeGetVersion()), "cudnn": cudnn_version,
                "cupy": cp.__version__,
                # what a key is priced as (cached costs of another method are not reused): NHWC convolutions and
                # onnxruntime's kernels as what export writes, float32 convolutions through PyTorch
                "method": "as-written-fp32-calibrated-roofline"
                + (f"-cuda-graph-{self.replayed}" if self.replayed else "")}


class CupyGraphCostModel(CupyCostModel):
    """Each configuration timed as a CUDA graph of ``replayed`` launches runs it (``eqsat --costs gpu-graph``):
    the costs of a deployment that captures the model, where the Python launch that :class:`CupyCostModel`'s
    times hold (about 10 µs an operator on an H200) does not exist. On an H200 they rank whole models timed under
    CUDA graphs with a Spearman correlation of 0.94 where the launched times reach 0.72
    (``benchmarks/results/gpu_e2e.md``)."""

    name = "cupy-gpu-graph"

    def __init__(self, warmup: int = 5, repeats: int = 20, replayed: int = 20) -> None:
        super().__init__(warmup, repeats, replayed)


Kernel = Callable[[CupyCostModel, CostKey, list[Any], dict[str, Any]], Callable[[], Any] | None]
"""How the GPU model times one operator: ``(model, key, inputs on the GPU, parameters)`` -> the function to time,
or None where it cannot run here (the calibrated roofline prices it)."""


def _on_gpu(f: Callable[[Any, list[Any], dict[str, Any]], Any]) -> Kernel:
    """A kernel that is one CuPy expression ``f(cp, inputs, params)``."""
    def build(m: CupyCostModel, key: CostKey, xs: list[Any], p: dict[str, Any]) -> Callable[[], Any]:
        cp = m.cp
        return lambda: f(cp, xs, p)

    return build


#: The operators with a kernel of their own here, by registry name (CuPy's, cuBLAS's and cuDNN's, as TASO times
#: them); any other runs its registry reference on CuPy arrays.
KERNELS: dict[str, Kernel] = {
    "conv2d": CupyCostModel._conv, "conv2d_add": CupyCostModel._conv,
    "matmul": CupyCostModel._matmul,
    "matmul_t": CupyCostModel._matmul,
    "gemm": CupyCostModel._gemm,
    "ewadd": _on_gpu(lambda cp, xs, p: cp.add(xs[0], xs[1])),
    "ewmul": _on_gpu(lambda cp, xs, p: cp.multiply(xs[0], xs[1])),
    "smul": _on_gpu(lambda cp, xs, p: cp.multiply(xs[0], xs[1])),
    "relu": _on_gpu(lambda cp, xs, p: cp.maximum(xs[0], 0)),
    "sigmoid": _on_gpu(lambda cp, xs, p: 1 / (1 + cp.exp(-xs[0]))),
    "tanh": _on_gpu(lambda cp, xs, p: cp.tanh(xs[0])),
    "transpose": _on_gpu(lambda cp, xs, p: cp.ascontiguousarray(cp.transpose(xs[0], p.get("perm")))),
    "concat": _on_gpu(lambda cp, xs, p: cp.concatenate(xs, axis=p.get("axis", 0))),
    "maxpool": lambda m, key, xs, p: m._any_pool(key, xs, p, maximum=True),
    "avgpool": lambda m, key, xs, p: m._any_pool(key, xs, p, maximum=False),
    "split": CupyCostModel._piece,
}

#: Operators ONNX cannot express, priced as the configurations export writes them as: an NHWC convolution as its
#: transposes and NCHW convolution.
AS_WRITTEN: dict[str, Callable[[CostKey], tuple[CostKey, ...]]] = {"conv2d_nhwc": nhwc_conv_as_written}
