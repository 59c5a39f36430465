"""Inter-operator parallelism (AutoGraph) on branchy models: the graph eqsat writes for onnxruntime's parallel
executor (``optimize(parallel=N)``: AutoGraph's mixed critical-path cost, alpha 0.25), timed under that executor
against the original under the sequential executor and under the parallel one, at batch 1.

For each model: eqsat with ``parallel=N`` (analytic costs, no executor race: the graph its objective chose) and
eqsat with the sum of costs; then, in one set of interleaved rounds, the original under the sequential executor
(``--threads`` intra-op threads), the original under the parallel one (N inter-op threads, ``--parallel-intra``
intra-op threads each), the parallel graph under the parallel one and the sum's graph under the sequential one.
The speedup is the parallel graph's over the faster of the original's two settings (median of per-round ratios,
95 % interval). Target of issue 41: geometric mean >= 1.10x, none slower than that best. Saves ``parallel.{md,json}``.

Usage: python benchmarks/parallel.py [--models NAME ...] [--branches 2] [--threads 2] [--parallel-intra 1]
                                     [--time-limit 30] [--budget 6] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from _common import geomean, ran_as, save_results

import eqsat
from eqsat import models, onnx_io
from eqsat.costs import AnalyticCostModel, graph_parallel_cost
from eqsat.costs.measured_cpu import end_to_end_rounds
from eqsat.extract import ParallelCost
from eqsat.pipeline.candidates import MAX_ROUNDS, speedup

#: branchy models: TASO's three, and the ONNX zoo's GoogLeNet (Inception-v1), Inception-v2 and SqueezeNet
MODELS = {
    "taso_nasnet_a": models.taso_nasnet_a,
    "taso_inception_v3": models.taso_inception_v3,
    "taso_squeezenet": models.taso_squeezenet,
    "inception_v1": lambda: models.load_zoo_model("inception_v1"),
    "inception_v2": lambda: models.load_zoo_model("inception_v2"),
    "squeezenet": lambda: models.load_zoo_model("squeezenet"),
}


def measure(name: str, branches: int, threads: int, parallel_intra: int, time_limit: float, budget: float) -> dict:
    model = MODELS[name]()
    t = time.perf_counter()
    par = eqsat.optimize(model, parallel=branches, time_limit=time_limit, cache=False, verify_latency=False)
    seconds = time.perf_counter() - t
    by_sum = eqsat.optimize(model, time_limit=time_limit, cache=False)
    cost = ParallelCost(branches=branches)
    sum_figures = graph_parallel_cost(by_sum.graph, AnalyticCostModel(), cost)
    graph = onnx_io.load_model(model)
    feeds = onnx_io.random_feeds(graph, seed=0)
    contenders = [("original, sequential", model, 1, threads), ("original, parallel", model, branches, parallel_intra),
                  ("eqsat parallel, parallel", par.model, branches, parallel_intra),
                  ("eqsat sum, sequential", by_sum.model, 1, threads)]
    rounds = end_to_end_rounds([c[1] for c in contenders], [feeds] * 4, threads=threads, budget_s=budget,
                               rounds=MAX_ROUNDS, inter_op=[c[2] for c in contenders],
                               intra_op=[c[3] for c in contenders])
    med = {c[0]: statistics.median(r) for c, r in zip(contenders, rounds, strict=True)}
    best = 0 if med["original, sequential"] <= med["original, parallel"] else 1
    up = speedup(rounds[best], rounds[2])
    assert par.parallel is not None
    return {"model": name, "optimize_s": seconds, "kept": par.kept_original,
            "predicted_before": par.parallel.before.mixed, "predicted_after": par.parallel.after.mixed,
            "critical_before": par.parallel.before.critical_path, "critical_after": par.parallel.after.critical_path,
            "total_before": par.parallel.before.total, "total_after": par.parallel.after.total,
            "sum_graph_mixed": sum_figures.mixed, "medians_ms": med, "best_original": contenders[best][0],
            "speedup": up.median, "low": up.low, "high": up.high,
            "executor_gain": speedup(rounds[0], rounds[1]).median,
            "sum_graph_speedup": speedup(rounds[0], rounds[3]).median}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--branches", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parallel-intra", type=int, default=1)
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--budget", type=float, default=6.0)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    rows = []
    for name in args.models:
        r = measure(name, args.branches, args.threads, args.parallel_intra, args.time_limit, args.budget)
        rows.append(r)
        m = r["medians_ms"]
        print(f"{name}: predicted mixed {r['predicted_before']:.4g} -> {r['predicted_after']:.4g}; original "
              f"{m['original, sequential']:.3f} ms seq / {m['original, parallel']:.3f} ms par; eqsat parallel "
              f"{m['eqsat parallel, parallel']:.3f} ms: {r['speedup']:.3f}x [{r['low']:.3f}, {r['high']:.3f}]",
              flush=True)
    head = (f"# Inter-operator parallelism: eqsat's graph for onnxruntime's parallel executor\n\n{ran_as()}; "
            f"{args.branches} inter-op threads x {args.parallel_intra} intra-op under the parallel executor, "
            f"{args.threads} intra-op threads under the sequential one; batch 1; analytic costs, alpha 0.25, "
            f"time limit {args.time_limit:g} s. Speedup: the parallel graph under the parallel executor against "
            "the original's faster setting (median of per-round ratios [95 % interval]).\n\n")
    table = ["| model | critical path before -> after (ms, predicted) | mixed before -> after | original seq / par "
             "(ms) | parallel executor on the original | eqsat parallel, par (ms) | speedup | sum's graph, seq |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        m = r["medians_ms"]
        table.append(f"| {r['model']} | {r['critical_before']:.4g} -> {r['critical_after']:.4g} | "
                     f"{r['predicted_before']:.4g} -> {r['predicted_after']:.4g} | {m['original, sequential']:.3f} / "
                     f"{m['original, parallel']:.3f} | {r['executor_gain']:.3f}x | "
                     f"{m['eqsat parallel, parallel']:.3f} | {r['speedup']:.3f}x [{r['low']:.3f}, {r['high']:.3f}] | "
                     f"{r['sum_graph_speedup']:.3f}x |")
    table.append("")
    table.append(f"Geometric mean speedup: {geomean([r['speedup'] for r in rows]):.3f}x over {len(rows)} models "
                 f"(lowest {min(r['speedup'] for r in rows):.3f}x).")
    print("\n".join(table))
    save_results(args.out, "parallel", head, "\n".join(table), rows)


if __name__ == "__main__":
    main()
