"""Where the measured cost model's latency prediction goes wrong: per operator type, the predicted time (the
sum of the measured per-node costs, as ``optimize(cost_model=measured)`` prices the model) beside the time
onnxruntime's own profiler gives the same operators inside the whole model.

The predicted side uses eqsat's IR operators (a Conv with its fused ReLU is one ``conv2d``); the measured side
lists onnxruntime's kernels after its own graph optimizations (NCHWc ``ReorderInput``/``ReorderOutput``, fused
``Conv``, ``FusedMatMul``...), so the two columns are matched by eye, not by name. Whole-model latency is the
median of interleaved runs without profiling.

Usage: python benchmarks/op_profile.py [--models squeezenet resnet50 ...] [--threads 1] [--runs 50]
Writes benchmarks/results/op_profile.{md,json}.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from _common import git_commit  # the script's folder is on sys.path

DEFAULT = ["squeezenet", "resnet50", "bert_attention_block", "taso_bert"]
OUT = Path(__file__).parent / "results"


def _proto(name: str) -> Any:
    from eqsat import models as zoo
    builders = zoo.builtin_models()
    return builders[name]() if name in builders else zoo.load_zoo_model(name)


def predicted(name: str, threads: int) -> tuple[dict[str, float], Counter[str]]:
    """Predicted milliseconds and node count per IR operator under the measured CPU cost model in context."""
    from eqsat.costs import graph_cost_keys
    from eqsat.costs.measured_cpu import OnnxRuntimeCostModel
    from eqsat.onnx_io import load_model

    graph = load_model(_proto(name))
    cm = OnnxRuntimeCostModel(threads=threads).in_context(graph.weight_bytes)
    keys = graph_cost_keys(graph)
    costs = cm.costs({k for ks in keys for k in ks})
    ms: dict[str, float] = defaultdict(float)
    count: Counter[str] = Counter()
    for node, ks in zip(graph.nodes, keys, strict=True):
        if ks:
            ms[node.op] += sum(costs[k] for k in ks)
            count[node.op] += 1
    return dict(ms), count


def profiled(name: str, threads: int, runs: int) -> tuple[float, dict[str, float], Counter[str]]:
    """Whole-model median milliseconds, and milliseconds and kernel count per onnxruntime operator per run."""
    import onnxruntime as ort

    from eqsat.onnx_io import random_feeds

    proto = _proto(name)
    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        plain = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
        feeds = random_feeds(proto, seed=0)  # typed as the model declares (token ids are int64)
        for _ in range(10):
            plain.run(None, feeds)
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            plain.run(None, feeds)
            times.append(time.perf_counter() - t0)
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tmp, "prof")
        prof = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
        for _ in range(runs):
            prof.run(None, feeds)
        events = json.loads(Path(prof.end_profiling()).read_text())
    ms: dict[str, float] = defaultdict(float)
    count: Counter[str] = Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            ms[e["args"]["op_name"]] += e["dur"] / 1000.0 / runs
            count[e["args"]["op_name"]] += 1
    return float(np.median(times) * 1e3), dict(ms), Counter({k: v // runs for k, v in count.items()})


def main() -> None:
    """Profile each model and write the report."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=DEFAULT)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=50)
    args = ap.parse_args()
    results: dict[str, Any] = {}
    lines = ["# Predicted vs profiled time per operator (CPU, measured costs)", "",
             f"commit {git_commit(True)}, {datetime.datetime.now():%Y-%m-%d %H:%M}, {platform.machine()} "
             f"{os.cpu_count()} cores, {args.threads} thread(s)", "",
             f"Command: `python benchmarks/op_profile.py --models {' '.join(args.models)} --threads {args.threads} "
             f"--runs {args.runs}`", ""]
    for name in args.models:
        pred, pred_n = predicted(name, args.threads)
        whole, prof, prof_n = profiled(name, args.threads, args.runs)
        total = sum(pred.values())
        results[name] = {"whole_ms": whole, "predicted_ms": total, "predicted": pred, "profiled": prof,
                         "predicted_nodes": dict(pred_n), "profiled_kernels": dict(prof_n)}
        lines += [f"## {name}", "",
                  f"Whole model {whole:.3f} ms (median of {args.runs} runs); predicted {total:.3f} ms "
                  f"({100 * (total / whole - 1):+.1f} %); profiled kernels {sum(prof.values()):.3f} ms per run.", "",
                  "| eqsat operator | nodes | predicted ms | | onnxruntime kernel | kernels | profiled ms |",
                  "|---|---|---|---|---|---|---|"]
        left = sorted(pred, key=lambda k: -pred[k])
        right = sorted(prof, key=lambda k: -prof[k])
        for i in range(max(len(left), len(right))):
            a = f"{left[i]} | {pred_n[left[i]]} | {pred[left[i]]:.3f}" if i < len(left) else " | | "
            b = f"{right[i]} | {prof_n[right[i]]} | {prof[right[i]]:.3f}" if i < len(right) else " | | "
            lines.append(f"| {a} | | {b} |")
        lines.append("")
        print("\n".join(lines[-(len(left) + 6):]), flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "op_profile.md").write_text("\n".join(lines))
    (OUT / "op_profile.json").write_text(json.dumps({"threads": args.threads, "runs": args.runs,
                                                     "models": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
