"""eqsat against AutoGraph's search under AutoGraph's mixed critical-path cost, on TASO's seven graphs.

For each graph: ``eqsat.compare(model, ["eqsat", "autograph"], parallel=N)`` (same rules, same analytic costs,
the same wall-time budget each; every result priced from its exported model by the mixed cost and checked
numerically against the original). The table gives each method's mixed cost, when it found its best, and when
eqsat's anytime curve first reached AutoGraph's final cost. Targets (issue 41): eqsat's cost never above
AutoGraph's, and AutoGraph's final cost reached sooner by eqsat than by AutoGraph. Saves ``autograph.{md,json}``.

Usage: python benchmarks/autograph.py [MODEL ...] [--parallel 2] [--budget 30] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _common import ran_as, save_results

from eqsat import models
from eqsat.search.comparison import compare
from eqsat.search.traces import method_reach


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", default=list(models.TASO_SUITE))
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--budget", type=float, default=30.0)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    builders = models.builtin_models()
    rows = []
    for name in args.models:
        res = compare(builders[name](), ["eqsat", "autograph"], budget=args.budget, parallel=args.parallel,
                      name=name, progress=lambda msg: print(msg, file=sys.stderr, flush=True))
        d = res.as_dict()
        eq, ag = d["methods"]["eqsat"], d["methods"]["autograph"]
        row = {"model": name, "original": d["original_cost"], "eqsat": eq["cost"], "autograph": ag["cost"],
               "eqsat_best_s": eq["seconds_to_best"], "autograph_best_s": ag["seconds_to_best"],
               "eqsat_to_autograph_final_s": method_reach(eq, ag["cost"]),
               "statuses": [eq["status"], ag["status"]], "methods": d["methods"]}
        rows.append(row)
        print(f"{name}: original {row['original']:.6g}, eqsat {row['eqsat']:.6g} (best at "
              f"{row['eqsat_best_s']:.2f} s), autograph {row['autograph']:.6g} (best at "
              f"{row['autograph_best_s']:.2f} s)", flush=True)
    head = (f"# eqsat against AutoGraph's search, under the mixed critical-path cost\n\n{ran_as()}; analytic "
            f"costs, alpha 0.25, {args.parallel} branches at once, {args.budget:g} s per method; every result "
            "priced from its exported model and checked numerically.\n\n")
    table = ["| graph | original | eqsat | AutoGraph | eqsat's best at (s) | AutoGraph's best at (s) | eqsat reached "
             "AutoGraph's final cost at (s) | checked |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        reach = r["eqsat_to_autograph_final_s"]
        table.append(f"| {r['model']} | {r['original']:.6g} | {r['eqsat']:.6g} | {r['autograph']:.6g} | "
                     f"{r['eqsat_best_s']:.2f} | {r['autograph_best_s']:.2f} | "
                     f"{'never' if reach is None else f'{reach:.2f}'} | {', '.join(r['statuses'])} |")
    never_worse = all(r["eqsat"] <= r["autograph"] * (1 + 1e-9) for r in rows)
    sooner = all(r["eqsat_to_autograph_final_s"] is not None
                 and r["eqsat_to_autograph_final_s"] <= r["autograph_best_s"] for r in rows)
    table += ["", f"eqsat never worse than AutoGraph: {'yes' if never_worse else 'no'}; reached AutoGraph's final "
              f"cost no later than AutoGraph on every graph: {'yes' if sooner else 'no'}."]
    print("\n".join(table))
    save_results(args.out, "autograph", head, "\n".join(table), rows)


if __name__ == "__main__":
    main()
