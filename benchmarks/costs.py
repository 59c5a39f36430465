"""Do measured operator costs predict whole-model latency? And do optimized models run faster end to end?

Part 1 (zoo models): the sum of measured per-operator costs (onnxruntime, CPU, one thread) against the
measured end-to-end latency of the whole model in onnxruntime (same threads): ratio per model and Spearman
rank correlation across models.
Part 2 (built-in BERT attention block and NasRNN cell): optimize with measured CPU costs, then time the
original and optimized models end to end (median of interleaved repeated runs).

Usage: python benchmarks/costs.py [--models ...] [--repeats 30] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from _common import spearman  # the script's folder is on sys.path

ZOO = ["squeezenet", "resnet50", "inception_v1", "densenet121", "shufflenet", "alexnet"]
#: Built-in models, optionally with shape arguments (``name:key=value,...``). The small BERT block shows a
#: case with nothing left to gain on this runtime: onnxruntime's own graph optimizations already fold the
#: scale into the matmul and merge the transposes, and a fused Q/K/V matmul costs a split more than it saves.
BUILTIN = ["bert_attention_block", "bert_attention_block:hidden=256,heads=4", "nasrnn_cell"]


def builtin_model(spec: str) -> Any:
    """A built-in model from ``name`` or ``name:key=value,...`` (integer arguments)."""
    from eqsat import models as zoo
    name, _, args = spec.partition(":")
    kwargs = {k: int(v) for k, v in (a.split("=", 1) for a in args.split(",") if a)}
    return zoo.builtin_models()[name](**kwargs)


def latencies(models: list, rounds: int) -> list[float]:
    """Median end-to-end wall time (ms) of each model (onnxruntime CPU, one thread, interleaved runs)."""
    from eqsat import onnx_io
    from eqsat.costs.measured_cpu import end_to_end_latency

    return end_to_end_latency(models, [onnx_io.random_feeds(m, seed=0) for m in models], rounds=rounds)


def part1(models: list[str], repeats: int) -> tuple[list[dict], float]:
    """Sum of measured op costs vs end-to-end latency for zoo models."""
    from eqsat import models as zoo
    from eqsat import onnx_io
    from eqsat.costs import get_cost_model, graph_cost

    cm = get_cost_model("measured", threads=1)
    rows = []
    for name in models:
        model = zoo.load_zoo_model(name)
        graph = onnx_io.load_model(model)
        predicted = graph_cost(graph, cm)
        (measured,) = latencies([onnx_io.to_onnx(graph)], repeats)
        rows.append({"model": name, "sum_of_ops_ms": predicted, "end_to_end_ms": measured,
                     "ratio": predicted / measured})
        print(f"{name}: ops {predicted:.3f} ms, end to end {measured:.3f} ms", file=sys.stderr)
    rho = spearman([r["sum_of_ops_ms"] for r in rows], [r["end_to_end_ms"] for r in rows])
    return rows, rho


def part2(models: list[str], repeats: int, time_limit: float) -> list[dict]:
    """Optimize with measured CPU costs; time original and optimized end to end."""
    from eqsat.costs import get_cost_model
    from eqsat.pipeline import optimize

    rows = []
    for name in models:
        model = builtin_model(name)
        res = optimize(model, cost_model=get_cost_model("measured", threads=1), time_limit=time_limit, cache=False)
        before, after = latencies([model, res.model], repeats)
        rows.append({"model": name, "predicted_before_ms": res.cost_before, "predicted_after_ms": res.cost_after,
                     "original_ms": before, "optimized_ms": after, "speedup": before / after,
                     "nodes_before": len(res.original.nodes), "nodes_after": len(res.graph.nodes),
                     "kept_original": res.kept_original})
        print(f"{name}: {before:.4f} ms -> {after:.4f} ms", file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run both parts, print tables, save benchmarks/results/costs.{md,json}."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", nargs="*", default=ZOO)
    ap.add_argument("--builtin", nargs="*", default=BUILTIN)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args(argv)
    rows1, rho = part1(args.models, args.repeats)
    rows2 = part2(args.builtin, args.repeats, args.time_limit)
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    from eqsat.costs import OnnxRuntimeCostModel

    ident = OnnxRuntimeCostModel(threads=1).device_identity()
    md = [f"# Measured costs vs end-to-end latency\n\ncommit {commit}, {datetime.date.today()}, "
          f"{ident['cpu']}, onnxruntime {ident['onnxruntime']}, 1 thread\n",
          f"Command: `python benchmarks/costs.py --repeats {args.repeats}`\n",
          "## Sum of measured operator costs vs whole-model latency\n",
          "| model | sum of ops (ms) | end to end (ms) | ratio |", "|---|---|---|---|"]
    md += [f"| {r['model']} | {r['sum_of_ops_ms']:.3f} | {r['end_to_end_ms']:.3f} | {r['ratio']:.3f} |" for r in rows1]
    md += [f"\nSpearman rank correlation across models: {rho:.3f}\n",
           "## Optimized with measured CPU costs, timed end to end (median of interleaved runs)\n",
           "| model | predicted before | predicted after | original (ms) | optimized (ms) | speedup | nodes | result |",
           "|---|---|---|---|---|---|---|---|"]
    md += [f"| {r['model']} | {r['predicted_before_ms']:.4f} | {r['predicted_after_ms']:.4f} | {r['original_ms']:.4f} "
           f"| {r['optimized_ms']:.4f} | {r['speedup']:.3f}x | {r['nodes_before']} -> {r['nodes_after']} | "
           f"{'original kept' if r['kept_original'] else 'optimized'} |" for r in rows2]
    md += ["\nThe optimizer keeps the original when the optimized model is not at least 2 % faster end to end; "
           "the speedup column then compares two runs of the same graph (timing noise)."]
    text = "\n".join(md) + "\n"
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "costs.md").write_text(text)
    (out / "costs.json").write_text(json.dumps({"zoo": rows1, "spearman": rho, "optimized": rows2}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
