"""Measured GPU costs through CuPy: cuDNN convolutions, cuBLAS matrix products, CuPy kernels for the rest.

CuPy is imported lazily: this module imports (and the rest of eqsat works) without CuPy or a GPU.
Convolutions go through CuPy's cuDNN wrapper with ``auto_tune=True`` so cuDNN picks its fastest algorithm,
as TASO does; pools through cuDNN pooling; transposed-operand products (``matmul_t``) through cuBLAS with
the transpose flags their layout implies. A fused bias and relu is measured as the convolution plus CuPy's
in-place bias/relu kernels (CuPy's wrapper does not expose cuDNN's fused conv+bias+activation call), and
NHWC convolutions fall back to the analytic model (the wrapper only takes NCHW). Each configuration is
warmed up, then timed with CUDA events over repeated launches; the median is reported.
"""

from __future__ import annotations

import statistics
from typing import Any

from eqsat import ops
from eqsat.costs.analytic import AnalyticCostModel
from eqsat.costs.base import CostModel
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
    try:
        from cupyx import cudnn
    except ImportError:
        from cupy import cudnn
    return cudnn


def _symmetric_pads(cp: Any, x: Any, pads: tuple[int, ...], fill: float) -> tuple[Any, tuple[int, int]]:
    """ONNX pads (top, left, bottom, right) as cuDNN's symmetric (h, w) pads: asymmetric ones are applied to
    the input first (filled with ``fill``), leaving zero pads for cuDNN."""
    if pads[0] != pads[2] or pads[1] != pads[3]:
        x = cp.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])), constant_values=fill)
        return x, (0, 0)
    return x, (pads[0], pads[1])


class CupyCostModel(CostModel):
    """Median CUDA-event time (ms) of each configuration on the current GPU."""

    name = "cupy-gpu"
    is_measured = True

    def __init__(self, warmup: int = 5, repeats: int = 20) -> None:
        self.cp = _cupy()
        self.warmup = warmup
        self.repeats = repeats
        self._fallback = AnalyticCostModel()

    def _kernel(self, key: CostKey) -> Any:
        cp = self.cp
        p = dict(key.params)
        rng = cp.random.default_rng(0)
        xs = [rng.standard_normal(s, dtype=cp.float32) for s in key.input_shapes]
        op = key.op
        if op == "conv2d":
            cudnn = _cudnn()
            x, w, b = xs
            y = cp.empty(key.output_shape, dtype=cp.float32)
            x, pad = _symmetric_pads(cp, x, p["pads"], 0.0)

            def conv() -> None:
                cudnn.convolution_forward(x, w, b, y, pad, p["strides"], p["dilations"], p["groups"],
                                          auto_tune=True, tensor_core="auto")
                if p["act"] == 1:
                    cp.maximum(y, 0, out=y)

            return conv
        table = {
            "matmul": lambda: cp.matmul(xs[0], xs[1]),
            "ewadd": lambda: cp.add(xs[0], xs[1]),
            "ewmul": lambda: cp.multiply(xs[0], xs[1]),
            "smul": lambda: cp.multiply(xs[0], xs[1]),
            "relu": lambda: cp.maximum(xs[0], 0),
            "sigmoid": lambda: 1 / (1 + cp.exp(-xs[0])),
            "tanh": lambda: cp.tanh(xs[0]),
            "transpose": lambda: cp.ascontiguousarray(cp.transpose(xs[0], p.get("perm"))),
            "concat": lambda: cp.concatenate(xs, axis=p.get("axis", 0)),
        }
        if op in table:
            return table[op]
        if op == "matmul_t":
            # transposed views are Fortran-ordered: CuPy hands them to cuBLAS with transpose flags, no copy
            a = xs[0].T if p["trans_a"] else xs[0]
            b = xs[1].T if p["trans_b"] else xs[1]
            return lambda: cp.matmul(a, b)
        if op in ("maxpool", "avgpool") and len(key.input_shapes[0]) == 4:
            return self._pool(key, xs[0], p)
        if op == "split":
            idx = [slice(None)] * len(key.input_shapes[0])
            idx[p["axis"]] = slice(p["start"], p["start"] + p["size"])
            return lambda: cp.ascontiguousarray(xs[0][tuple(idx)])
        return self._reference(key, xs)

    @staticmethod
    def _reference(key: CostKey, xs: list[Any]) -> Any:
        """Any other operator runs its registry reference on CuPy arrays (numpy functions dispatch to CuPy
        through ``__array_function__``); one whose reference cannot run there is left to the fallback."""
        if key.op == "opaque":
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

    def _pool(self, key: CostKey, x: Any, p: dict[str, Any]) -> Any:
        """cuDNN pooling (asymmetric pads applied to the input first, see :func:`_symmetric_pads`)."""
        cp, cudnn = self.cp, _cudnn()
        try:
            from cupy_backends.cuda.libs import cudnn as libcudnn
        except ImportError:
            from cupy.cuda import cudnn as libcudnn

        x, pad = _symmetric_pads(cp, x, p["pads"], -cp.inf if key.op == "maxpool" else 0.0)
        if key.op == "maxpool":
            mode = libcudnn.CUDNN_POOLING_MAX
        elif p["count_include_pad"]:
            mode = libcudnn.CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
        else:
            mode = libcudnn.CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING
        y = cp.empty(key.output_shape, dtype=cp.float32)
        return lambda: cudnn.pooling_forward(x, y, tuple(p["kernel"]), tuple(p["strides"]), pad, mode)

    def cost(self, key: CostKey) -> float:
        """Measure one configuration (ms); operators without a GPU kernel here use the analytic model."""
        if key.op == "reshape":
            return 0.0
        fn = self._kernel(key) if key.op != "opaque" else None
        if fn is None:
            return self._fallback.cost(key)
        cp = self.cp
        for _ in range(self.warmup):
            fn()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        times = []
        for _ in range(self.repeats):
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end))
        return float(statistics.median(times))

    def device_identity(self) -> dict[str, str]:
        """GPU name, driver, CUDA runtime, cuDNN and CuPy versions."""
        cp = self.cp
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        try:
            cudnn_version = str(_cudnn().get_build_version())
        except Exception:
            cudnn_version = "unknown"
        return {"model": self.name, "gpu": props["name"].decode() if isinstance(props["name"], bytes)
                else str(props["name"]), "driver": str(cp.cuda.runtime.driverGetVersion()),
                "cuda_runtime": str(cp.cuda.runtime.runtimeGetVersion()), "cudnn": cudnn_version,
                "cupy": cp.__version__}
