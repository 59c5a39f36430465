"""Exact extraction under AutoGraph's mixed critical-path cost against the sum of costs: model size and solve time
on the e-graphs of TASO's seven graphs (saturated by eqsat, analytic costs).

For each graph: eqsat saturates it (``optimize(dump_egraph=...)``, the default rules and limits) and the costed
e-graph is extracted three ways, each with the same time limit: CP-SAT under the sum (``extract_cpsat``), and CP-SAT
under the mixed cost with 2 branches at once and with no limit (``extract_cpsat_parallel``, alpha 0.25, warm-started
from the sum's choice as a run is from its best graph so far). The table
gives the e-graph's size, each extraction's status, seconds, total, critical path and mixed cost (2 branches), so
that what the finish-time variables cost in solve time, and what the mixed cost changes in the graph chosen, can
be read side by side. Saves ``parallel_extraction.{md,json}``.

Usage: python benchmarks/parallel_extraction.py [--models NAME ...] [--time-limit 20] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _common import ran_as, save_results

import eqsat
from eqsat import models
from eqsat.extract import ParallelCost, extract_cpsat, extract_cpsat_parallel, load_egraph, parallel_cost_of

TASO = ["taso_bert", "taso_inception_v3", "taso_nasnet_a", "taso_nasrnn", "taso_resnext50", "taso_squeezenet",
        "taso_vgg19"]


def measure(name: str, time_limit: float, workers: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "egraph.json"
        eqsat.optimize(getattr(models, name)(), dump_egraph=path, cache=False, check=False, time_limit=60)
        eg = load_egraph(path)
    two = ParallelCost(branches=2)
    row: dict = {"model": name, "enodes": eg.num_nodes, "eclasses": eg.num_classes}
    by_sum = None
    for label, cost in (("sum", None), ("mixed_2", two), ("mixed_any", ParallelCost())):
        t = time.perf_counter()
        if cost is None:
            ext = by_sum = extract_cpsat(eg, time_limit=time_limit, num_workers=workers)
        else:  # warm-started from the sum's choice, as a run starts from its best graph so far
            ext = extract_cpsat_parallel(eg, cost, time_limit=time_limit, num_workers=workers,
                                         start=None if by_sum is None else by_sum.selection)
        seconds = time.perf_counter() - t
        mixed, total, critical = parallel_cost_of(eg, ext.selection, two)
        row[label] = {"status": ext.status, "seconds": seconds, "total": total, "critical_path": critical,
                      "mixed_2": mixed}
        print(f"{name} {label}: {ext.status} in {seconds:.2f} s, total {total:.4g}, critical path {critical:.4g}, "
              f"mixed(2) {mixed:.4g}", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=TASO, choices=TASO)
    ap.add_argument("--time-limit", type=float, default=20.0)
    ap.add_argument("--workers", type=int, default=8)  # as optimize runs CP-SAT
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    rows = [measure(n, args.time_limit, args.workers) for n in args.models]
    head = (f"# Extraction under the mixed critical-path cost against the sum\n\n{ran_as()}; CP-SAT with "
            f"{args.workers} workers and a {args.time_limit:g} s limit per extraction; e-graphs saturated by eqsat "
            "(analytic costs, default rules and limits). Each cell: status, seconds; total / critical path / mixed "
            "cost with 2 branches at once (ms, alpha 0.25).\n\n")
    table = ["| graph | e-nodes | e-classes | sum | mixed, 2 branches | mixed, any number |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        cells = [f"{r[k]['status']}, {r[k]['seconds']:.2f} s; {r[k]['total']:.4g} / {r[k]['critical_path']:.4g} / "
                 f"{r[k]['mixed_2']:.4g}" for k in ("sum", "mixed_2", "mixed_any")]
        table.append(f"| {r['model']} | {r['enodes']} | {r['eclasses']} | " + " | ".join(cells) + " |")
    print("\n".join(table))
    save_results(args.out, "parallel_extraction", head, "\n".join(table), rows)


if __name__ == "__main__":
    main()
