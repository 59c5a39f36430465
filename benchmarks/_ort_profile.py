"""What onnxruntime spends a model's time on, and the most any rewrite of the rest could gain.

A model's products with a weight (MatMul, Gemm, Conv and onnxruntime's fused forms of them, their second input
an initializer) do a fixed number of multiply-adds; on a CPU at one thread they run close to the core's peak, so
no rewrite of the graph makes them much faster. Everything else (element-wise work, normalisations, attention's
activation-by-activation products, copies) is what a graph optimizer can remove. ``ceiling`` is the speedup if
all of it took no time: total kernel time over the weight products' time.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

WEIGHT_PRODUCTS = frozenset({"MatMul", "Gemm", "FusedGemm", "FusedMatMul", "Conv", "FusedConv", "NchwcConv",
                             "MatMulInteger", "QLinearMatMul"})


def kernel_times(model: onnx.ModelProto, feeds: dict[str, np.ndarray], threads: int = 1,
                 runs: int = 20) -> tuple[Counter[str], float]:
    """Per kernel class (an op type; ``weight product`` for the products above with an initializer operand),
    the mean kernel time per run in ms under onnxruntime's default level; and the weight products' share."""
    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3  # not the warning that a saved optimized model is machine-specific
        so.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tmp, "profile")
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        for _ in range(3):
            sess.run(None, feeds)
        for _ in range(runs):
            sess.run(None, feeds)
        events = json.loads(open(sess.end_profiling(), encoding="utf-8").read())
        optimized = onnx.load(so.optimized_model_filepath, load_external_data=False)
    inits = {t.name for t in optimized.graph.initializer}
    weight_nodes = {n.name for n in optimized.graph.node
                    if n.op_type in WEIGHT_PRODUCTS and len(n.input) > 1 and n.input[1] in inits}
    times: Counter[str] = Counter()
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        node = e["name"][: -len("_kernel_time")]
        kind = "weight product" if node in weight_nodes else e["args"]["op_name"]
        times[kind] += e["dur"] / 1000 / (runs + 3)
    total = sum(times.values())
    return times, (times["weight product"] / total if total else 0.0)


def ceiling(weight_share: float) -> float:
    """The speedup if everything but the weight products took no time."""
    return 1 / weight_share if weight_share > 0 else float("inf")


def summary(times: Counter[str], top: int = 4) -> dict[str, Any]:
    """The largest kernel classes besides the weight products, in ms per run."""
    rest = [(k, v) for k, v in times.most_common() if k != "weight product"]
    return {k: round(v, 3) for k, v in rest[:top]}
