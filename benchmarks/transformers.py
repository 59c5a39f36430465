"""The models users export today, as exported (dynamic axes kept): what stays opaque, how long optimizing takes,
and is the optimized model faster end to end than the original under onnxruntime?

For each ONNX file (the exports ``benchmarks/export_dynamic.py`` writes: BERT, GPT-2, a LLaMA-style decoder and
ViT, 2 layers each, with torch's dynamo and TorchScript exporters): the opaque operator types that compute float
tensors (integer and boolean size and mask arithmetic is counted apart: it stays computed at run time with
dynamic axes), ``eqsat.optimize`` with analytic costs (its time and stop reason), then with measured CPU costs
(its time, what it wrote), and the written model timed against the original end to end at the representative
sizes in onnxruntime at its default level (``ORT_ENABLE_ALL``), with 1 and 2 intra-op threads (median of the
per-round ratios in interleaved rounds, 95 % interval). Targets of issue 29: no opaque float operator but
``Gather``; a geometric-mean speedup of at least 1.3x, none below 0.99x; optimize time at most 30 s.

Saves ``transformers.{md,json}``.

Usage: python benchmarks/transformers.py EXPORTS/*.onnx [--dims batch=1,sequence=128] [--time-limit 60]
       [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import datetime
import math
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _common import git_commit, parse_sizes, save_results

import eqsat
from eqsat.costs.measured_cpu import end_to_end_rounds
from eqsat.ir.symbols import graph_symbols
from eqsat.onnx_io import load_with_axes, read_model
from eqsat.pipeline.candidates import speedup
from eqsat.pipeline.check import trial_feeds


def opaque_float_ops(graph: Any) -> tuple[Counter[str], Counter[str]]:
    """Opaque operator types by whether they compute float tensors (the model's math) or not (sizes, masks)."""
    floats, others = Counter(), Counter()
    for n in {n.p["key"]: n for n in graph.nodes if n.op == "opaque"}.values():
        kind = n.p["op_type"] if n.p["domain"] in ("", "ai.onnx") else f"{n.p['domain']}:{n.p['op_type']}"
        (floats if str(n.p["dtype"]).startswith("float") else others)[kind] += 1
    return floats, others


def run(path: str, dims: dict[str, int], time_limit: float) -> dict[str, Any]:
    """One model: opaque operators, both optimizations, and the end-to-end timings."""
    model, label = read_model(path)
    graph, fixed = load_with_axes(model, label=label)
    symbols = set(graph_symbols(graph).generic)
    at = {k: v for k, v in dims.items() if k in symbols}
    floats, others = opaque_float_ops(graph)
    t = time.perf_counter()
    analytic = eqsat.optimize(model, dims=at or None, time_limit=time_limit)
    analytic_s = time.perf_counter() - t
    t = time.perf_counter()
    measured = eqsat.optimize(model, dims=at or None, cost_model="measured", time_limit=time_limit)
    measured_s = time.perf_counter() - t
    feeds = trial_feeds(model, 0, sizes=measured.dims or at)
    speedups = {}
    for threads in (1, 2):
        times = end_to_end_rounds([model, measured.model], [feeds] * 2, threads=threads, rounds=31, budget_s=20.0)
        s = speedup(times[0], times[1])
        speedups[threads] = [s.median, s.low, s.high]
    return {"model": Path(path).stem, "dims": measured.dims, "axes": measured.dynamic_axes or "static model",
            "fixed_because": fixed, "opaque_float": dict(floats), "opaque_sizes_masks": sum(others.values()),
            "analytic": {"seconds": analytic_s, "stop": str(analytic.stop_reason), "cost_before": analytic.cost_before,
                         "cost_after": analytic.cost_after},
            "measured": {"seconds": measured_s, "cost_before": measured.cost_before,
                         "cost_after": measured.cost_after, "written": measured.decision},
            "speedup": speedups}


def table(rows: list[dict[str, Any]]) -> str:
    """The results as a markdown table, with the geometric means."""
    out = ["| model | opaque float ops | size/mask ops | analytic: s, stop, predicted | measured: s, written "
           "| e2e 1 thread | e2e 2 threads |", "|---" * 7 + "|"]
    for r in rows:
        a, m = r["analytic"], r["measured"]
        ops = ", ".join(f"{k} {v}" for k, v in sorted(r["opaque_float"].items(), key=lambda kv: -kv[1])) or "none"
        e1, e2 = r["speedup"][1], r["speedup"][2]
        out.append(f"| {r['model']} | {ops} | {r['opaque_sizes_masks']} "
                   f"| {a['seconds']:.1f} s, {a['stop']}, {a['cost_before']:.4g} -> {a['cost_after']:.4g} ms "
                   f"| {m['seconds']:.1f} s, {m['written']} "
                   f"| {e1[0]:.3f}x [{e1[1]:.3f}, {e1[2]:.3f}] | {e2[0]:.3f}x [{e2[1]:.3f}, {e2[2]:.3f}] |")
    for threads in (1, 2):
        values = [r["speedup"][threads][0] for r in rows]
        if values:
            gm = math.exp(sum(math.log(v) for v in values) / len(values))
            out.append(f"\nGeometric mean, {threads} thread(s): {gm:.3f}x over {len(values)} models "
                       f"(lowest {min(values):.3f}x).")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--dims", default="batch=1,sequence=128", help="representative sizes, NAME=SIZE,...")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    dims = parse_sizes(args.dims)
    rows = []
    for m in args.models:
        print(f"{m} ...", file=sys.stderr, flush=True)
        rows.append(run(m, dims, args.time_limit))
    text = table(rows)
    print(text)
    head = (f"# The models users export today\n\nCommand: `python benchmarks/transformers.py "
            f"{' '.join(sys.argv[1:])}` at commit {git_commit(True)}, {datetime.date.today()}; time limit "
            f"{args.time_limit:g} s per run. End-to-end: the original and the written model (measured costs) in "
            "interleaved rounds at the sizes given, onnxruntime at its default level, median of the per-round "
            "ratios [95 % interval].\n\n")
    save_results(args.out, "transformers", head, text, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
