"""Measured CPU costs: each operator configuration runs as a one-node ONNX model in onnxruntime."""

from __future__ import annotations

import os
import platform
import statistics
import time

import numpy as np

from eqsat import ops
from eqsat.gpu.analytic import AnalyticCostModel
from eqsat.gpu.base import CostModel
from eqsat.ops import CostKey


class _OneNodeExport:
    """The export context a one-node model needs (opset 17)."""

    opset = 17

    def __init__(self) -> None:
        self.initializers: dict[str, np.ndarray] = {}
        self._n = 0

    def add_initializer(self, array: np.ndarray, hint: str) -> str:
        name = self.fresh(hint)
        self.initializers[name] = np.asarray(array)
        return name

    def fresh(self, hint: str) -> str:
        self._n += 1
        return f"{hint}__{self._n}"


def one_node_model(key: CostKey):
    """The ONNX model eqsat's exporter would write for this configuration, inputs as graph inputs."""
    import onnx
    from onnx import helper, numpy_helper

    spec = ops.get(key.op)
    params = dict(key.params)
    ins = [f"in{k}" for k in range(len(key.input_shapes))]
    ctx = _OneNodeExport()
    nodes = [helper.make_node(t, i, o, **a) for t, i, o, a in spec.export_fn(params, ins, ["out"], ctx)]
    dt = helper.np_dtype_to_tensor_dtype(np.dtype(key.dtype))
    g = helper.make_graph(nodes, "one", [helper.make_tensor_value_info(n, dt, list(s))
                                         for n, s in zip(ins, key.input_shapes, strict=True)],
                          [helper.make_tensor_value_info("out", dt, list(key.output_shape))],
                          [numpy_helper.from_array(v, k) for k, v in ctx.initializers.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class OnnxRuntimeCostModel(CostModel):
    """Median wall time of ``session.run`` for a one-node model (CPU provider, fixed thread counts).

    Graph optimizations are enabled (as a deployment would run), so e.g. Conv followed by Relu is measured
    as onnxruntime fuses it. Inputs are random and passed as graph inputs. Opaque operators fall back to the
    analytic model: eqsat never rewrites them, so any consistent value works.
    """

    name = "onnxruntime-cpu"

    def __init__(self, threads: int = 1, warmup: int = 3, repeats: int = 10) -> None:
        self.threads = threads
        self.warmup = warmup
        self.repeats = repeats
        self._fallback = AnalyticCostModel()

    def cost(self, key: CostKey) -> float:
        """Measure one configuration (ms)."""
        if key.op == "opaque":
            return self._fallback.cost(key)
        if key.op == "reshape":
            return 0.0
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = self.threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        sess = ort.InferenceSession(one_node_model(key).SerializeToString(), so, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        feeds = {f"in{k}": rng.standard_normal(s).astype(key.dtype) for k, s in enumerate(key.input_shapes)}
        for _ in range(self.warmup):
            sess.run(None, feeds)
        times = []
        for _ in range(self.repeats):
            t = time.perf_counter()
            sess.run(None, feeds)
            times.append((time.perf_counter() - t) * 1e3)
        return float(statistics.median(times))

    def device_identity(self) -> dict[str, str]:
        """CPU model, core count, onnxruntime version and thread count."""
        import onnxruntime as ort

        return {"model": self.name, "cpu": _cpu_name(), "cores": str(os.cpu_count()),
                "onnxruntime": ort.__version__, "threads": str(self.threads)}
