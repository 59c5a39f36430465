"""eqsat against TASO's backtracking and OCGGS's sampling search on TASO's seven benchmark graphs.

Every method gets the same rules, cost model and wall-time budget per model; costs are recomputed from each
exported model by eqsat.search.comparison.model_cost and every result is checked numerically against the original.
Writes benchmarks/results/compare.{md,csv,json} and compare.png (best cost over time, one panel per model).

Usage: python benchmarks/compare.py [MODEL ...] [--budget 60] [--methods eqsat,backtracking,sampling]
                                    [--alpha 1.05] [--costs analytic] [--out benchmarks/results]
       python benchmarks/compare.py --render benchmarks/results/compare.json   (tables and plot only)
       python benchmarks/compare.py --render a.json b.json --out DIR   (the files eqsat compare --json wrote)
Targets (issue 14): eqsat's cost <= backtracking's on all seven and strictly lower on at least three; eqsat
reaches its result >= 10x faster than backtracking reaches the same or worse cost.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import math
import os
import platform
import sys
from pathlib import Path

from _common import git_commit

TOL = 1e-6  # relative: a search's trace holds its own running sums, the costs are recomputed from the model


def reach_seconds(trace: list[list[float]], cost: float) -> float:
    """When a trace first reaches ``cost`` or less (inf if never)."""
    return next((s for s, c in trace if c <= cost * (1 + TOL)), math.inf)


def run(models: list[str], methods: list[str], budget: float, alpha: float, costs: str) -> list[dict]:
    """Compare the methods on each model; one dict per model (the JSON of eqsat compare)."""
    from eqsat import models as zoo
    from eqsat.costs import get_cost_model
    from eqsat.search.comparison import compare

    builders = zoo.builtin_models()
    out = []
    for name in models:
        res = compare(builders[name](), methods, budget=budget, cost_model=get_cost_model(costs), alpha=alpha,
                      name=name, progress=lambda msg: print(msg, file=sys.stderr, flush=True))
        print(res.table(), file=sys.stderr, flush=True)
        out.append(res.as_dict())
    return out


def rows(results: list[dict]) -> list[dict]:
    """One flat row per (model, method), with the comparisons against eqsat."""
    flat = []
    for r in results:
        eq = r["methods"].get("eqsat")
        for method, m in r["methods"].items():
            cost = m["cost"] if m["cost"] is not None else math.nan
            row = {"model": r["model"], "method": method, "original_cost": r["original_cost"], "cost": cost,
                   "speedup": r["original_cost"] / cost if cost and cost > 0 else math.nan,
                   "seconds_to_best": m["seconds_to_best"], "seconds": m["seconds"], "work": m["work"],
                   "status": m["status"]}
            if eq is not None and method != "eqsat" and eq["cost"] is not None:
                # how long this search needed to reach eqsat's cost, and eqsat's own time, for the speed ratio
                row["vs_eqsat_cost"] = cost / eq["cost"]
                row["seconds_to_eqsat_cost"] = reach_seconds(m["trace"], eq["cost"])
            flat.append(row)
    return flat


def summary(results: list[dict]) -> list[str]:
    """The targets, checked on these results."""
    lines = []
    both = [r for r in results if {"eqsat", "backtracking"} <= set(r["methods"])]
    if not both:
        return lines
    eq_cost = {r["model"]: r["methods"]["eqsat"]["cost"] for r in both}
    bt_cost = {r["model"]: r["methods"]["backtracking"]["cost"] for r in both}
    le = [m for m in eq_cost if eq_cost[m] <= bt_cost[m] * (1 + TOL)]
    lt = [m for m in eq_cost if eq_cost[m] < bt_cost[m] * (1 - TOL)]
    worse = [f"{m} ({eq_cost[m] / bt_cost[m] - 1:+.3%})" for m in eq_cost if m not in le]
    lines.append(f"- eqsat's cost <= backtracking's on {len(le)} of {len(both)} models (target: all)" +
                 (f"; higher on {', '.join(worse)}" if worse else "") +
                 f". Strictly lower on {len(lt)} (target: at least 3): {', '.join(lt) or 'none'}.")
    ratios, idle = [], []
    for r in both:
        eq, bt = r["methods"]["eqsat"], r["methods"]["backtracking"]
        if min(eq["cost"], bt["cost"]) >= r["original_cost"] * (1 - TOL):
            idle.append(r["model"])  # neither improved the graph: no time to compare
        elif bt["cost"] >= eq["cost"] * (1 - TOL):  # backtracking ended at the same or a worse cost
            ratios.append((r["model"], bt["seconds_to_best"] / eq["seconds"], bt["seconds_to_best"], eq["seconds"]))
    if ratios:
        gm = math.exp(sum(math.log(max(x[1], 1e-6)) for x in ratios) / len(ratios))
        lines.append("- Where backtracking ended at the same or a worse cost, the time it took to reach its best over "
                     f"eqsat's whole run: geometric mean {gm:.2f}x (target: eqsat >= 10x faster, i.e. >= 10x); " +
                     ", ".join(f"{m} {x:.2f}x ({b:.1f} s / {e:.1f} s)" for m, x, b, e in ratios) + ".")
    if idle:
        lines.append(f"- Neither eqsat nor backtracking improved {', '.join(idle)} under this cost model.")
    return lines


def table(flat: list[dict]) -> str:
    """Markdown table of the flat rows."""
    head = ["model", "method", "cost (ms)", "speedup", "cost / eqsat's", "to best (s)", "to eqsat's cost (s)",
            "total (s)", "work", "status"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in flat:
        vs = r.get("vs_eqsat_cost")
        reach = r.get("seconds_to_eqsat_cost")
        cells = [r["model"], r["method"], f"{r['cost']:.5g}", f"{r['speedup']:.3f}x",
                 "-" if vs is None else f"{vs:.4f}", f"{r['seconds_to_best']:.2f}" if r["seconds_to_best"] is not None
                 else "-", "-" if reach is None else ("never" if math.isinf(reach) else f"{reach:.2f}"),
                 f"{r['seconds']:.1f}", r["work"], r["status"][:60]]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def plot(results: list[dict], path: Path, title: str) -> None:
    """Best cost over time (relative to the original), one panel per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(results)
    cols = min(4, n)
    rows_ = math.ceil(n / cols)
    fig, axes = plt.subplots(rows_, cols, figsize=(4 * cols, 3.2 * rows_), squeeze=False)
    for ax, r in zip(axes.flat, results, strict=False):
        for method, m in r["methods"].items():
            if not m["trace"]:
                continue
            xs = [p[0] for p in m["trace"]] + [m["seconds"]]
            ys = [p[1] / r["original_cost"] for p in m["trace"]] + [m["trace"][-1][1] / r["original_cost"]]
            ax.step(xs, ys, where="post", label=method, marker="o" if method == "eqsat" else None, markersize=4)
        ax.set_title(r["model"])
        ax.set_xlabel("seconds")
        ax.set_ylabel("best cost / original")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def load_results(paths: list[Path]) -> tuple[list[dict], str, str]:
    """(results, meta, command) from saved JSON files: this script's ``compare.json`` (``{"meta", "command",
    "results"}``) or one file per model as ``eqsat compare MODEL --json FILE`` writes it (``{"model",
    "methods", ...}``)."""
    results: list[dict] = []
    metas: list[str] = []
    cli_files: list[str] = []
    settings: dict[str, None] = {}
    command = ""
    for path in paths:
        saved = json.loads(path.read_text())
        if isinstance(saved, dict) and "results" in saved:
            results += saved["results"]
            metas.append(saved.get("meta", ""))
            command = command or saved.get("command", "")
        elif isinstance(saved, dict) and "model" in saved and "methods" in saved:
            results.append(saved)
            cli_files.append(path.name)
            setting = f"cost model {saved.get('cost_model', '?')}, budget {saved.get('budget', '?')} s per method"
            settings[setting] = None
        else:
            raise SystemExit(f"compare.py: error: {path} is neither a compare.json nor an 'eqsat compare --json' "
                             "file; give the files this script or 'eqsat compare --json' wrote")
    if cli_files:
        metas.append(f"from eqsat compare --json ({', '.join(cli_files)}): {'; '.join(settings)}")
        command = command or "python benchmarks/compare.py --render " + " ".join(str(p) for p in paths)
    return results, "; ".join(m for m in metas if m), command


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and write the results files."""
    from eqsat import models as zoo
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", default=list(zoo.TASO_SUITE))
    ap.add_argument("--methods", default="eqsat,backtracking,sampling")
    ap.add_argument("--budget", type=float, default=60.0)
    ap.add_argument("--alpha", type=float, default=1.05)
    ap.add_argument("--costs", default="analytic")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    ap.add_argument("--render", metavar="JSON", nargs="+",
                    help="only re-render the tables and plot: a saved compare.json, or files of eqsat compare --json")
    args = ap.parse_args(argv)
    if args.render:
        results, meta, command = load_results([Path(p) for p in args.render])
    else:
        methods = [m for m in args.methods.split(",") if m]
        commit = git_commit(mark_uncommitted=True)  # what is measured: the code as the run starts
        results = run(args.models, methods, args.budget, args.alpha, args.costs)
        meta = (f"commit {commit}, {datetime.date.today()}, {platform.machine()} "
                f"{os.cpu_count()} cores, Python {platform.python_version()}, cost model {args.costs}, budget "
                f"{args.budget:g} s per method, alpha {args.alpha}")
        command = "python benchmarks/compare.py " + " ".join(argv if argv is not None else sys.argv[1:])
    flat = rows(results)
    md = "\n".join(["# eqsat vs backtracking (TASO) vs sampling (OCGGS)\n", meta, "", f"Command: `{command}`", "",
                    table(flat), "", *summary(results), ""])
    print(md)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.md").write_text(md)
    (out / "compare.json").write_text(json.dumps({"meta": meta, "command": command, "results": results}, indent=1)
                                      + "\n")
    with open(out / "compare.csv", "w", newline="") as f:
        fields = ["model", "method", "original_cost", "cost", "speedup", "vs_eqsat_cost", "seconds_to_best",
                  "seconds_to_eqsat_cost", "seconds", "work", "status"]
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(flat)
    plot(results, out / "compare.png", meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
