"""Where eqsat's time goes on TASO's seven graphs, and what the anytime loop changes.

For each model, ``eqsat.optimize`` runs twice under the same cost model and time limit: with ``anytime`` (the
default: snapshots of the e-graph extracted while it saturates, warm-started from the best graph so far) and
without (the final e-graph alone extracted, warm-started from the input graph, as before the anytime loop).
For each run the table gives the final cost, when the best graph was found and by what, when iteration 0 (the
input graph loaded into the engine) ended (seconds from the call, as the trace's), the stages' seconds, the
snapshots extracted and the seconds spent on them (beside the engine, so they overlap the saturate stage) and
the total. Saves ``anytime.{md,json}``.

Usage: python benchmarks/anytime.py [MODEL ...] [--time-limit 60] [--costs analytic] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from _common import git_commit

TASO = ["taso_bert", "taso_nasrnn", "taso_resnext50", "taso_nasnet_a", "taso_inception_v3", "taso_squeezenet",
        "taso_vgg19"]


def profile(name: str, anytime: bool, time_limit: float, costs: str) -> dict[str, Any]:
    """One optimize run of a built-in model: its costs, times and anytime figures."""
    from eqsat import models
    from eqsat.costs import get_cost_model
    from eqsat.pipeline import optimize  # imported here, not on the first call: its import is no part of a run

    model = models.builtin_models()[name]()
    said: list[tuple[float, str]] = []
    t = time.perf_counter()
    res = optimize(model, cost_model=get_cost_model(costs), time_limit=time_limit, check=False, cache=False,
                   verify_latency=False, anytime=anytime, progress=lambda msg: said.append((time.perf_counter(), msg)))
    total = time.perf_counter() - t
    it0 = next((at - t for at, msg in said if msg.lstrip().startswith("iteration 0:")), None)
    return {"model": name, "anytime": anytime, "before": res.cost_before, "after": res.cost_after,
            "best_at": res.seconds_to_best, "best_by": res.best_source, "iteration0_at": it0,
            "iterations": len(res.iterations) - 1, "enodes": res.iterations[-1].enodes if res.iterations else 0,
            "stop": str(res.stop_reason), "solver": res.solver_status, "snapshots": res.snapshots[0],
            "snapshot_seconds": res.snapshots[1], "stages": res.stage_seconds, "total": total,
            "trace": [list(p) for p in res.trace]}


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The markdown table of the runs."""
    lines = ["| model | anytime | cost before | cost after | best at (s) | found by | iteration 0 at (s) | e-nodes "
             "| snapshots (s) | saturate | cost | extract | export | total (s) |", "|" + "---|" * 14]
    for r in rows:
        st = r["stages"]
        lines.append(
            f"| {r['model']} | {'yes' if r['anytime'] else 'no'} | {r['before']:.6g} | {r['after']:.6g} | "
            f"{r['best_at']:.2f} | {r['best_by']} | {r['iteration0_at'] or 0:.2f} | {r['enodes']} | "
            f"{r['snapshots']} ({r['snapshot_seconds']:.2f}) | {st.get('saturate', 0):.2f} | {st.get('cost', 0):.2f} | "
            f"{st.get('extract', 0):.2f} | {st.get('export', 0):.2f} | {r['total']:.1f} |")
    return lines


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """Per model: how much sooner the anytime run reached the cost the run without it ended at."""
    out = []
    by = {(r["model"], r["anytime"]): r for r in rows}
    for name in dict.fromkeys(r["model"] for r in rows):
        a, b = by.get((name, True)), by.get((name, False))
        if a is None or b is None:
            continue
        target = b["after"] * (1 + 1e-6)
        reach = next((s for s, c in a["trace"] if c <= target), None)
        if b["after"] >= b["before"] * (1 - 1e-9):
            out.append(f"- {name}: no cheaper graph without anytime; with it {a['after']:.6g} "
                       f"({'same' if a['after'] >= a['before'] * (1 - 1e-9) else 'cheaper'}).")
        elif reach is None:
            out.append(f"- {name}: the anytime run never reached {b['after']:.6g} (ended at {a['after']:.6g}).")
        else:
            out.append(f"- {name}: {b['after']:.6g} reached at {reach:.2f} s with anytime, {b['best_at']:.2f} s "
                       f"without ({b['best_at'] / max(reach, 1e-9):.1f}x sooner); final {a['after']:.6g} vs "
                       f"{b['after']:.6g}.")
    return out


def main(argv: list[str] | None = None) -> int:
    """Profile the models named (TASO's seven by default), print the table and save it."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=TASO)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--costs", default="analytic")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = ap.parse_args(argv)
    rows = []
    for name in args.models:
        for anytime in (True, False):
            rows.append(profile(name, anytime, args.time_limit, args.costs))
            print(table(rows[-1:])[-1], file=sys.stderr, flush=True)
    command = "python benchmarks/anytime.py" + ("" if args.models == TASO else " " + " ".join(args.models)) + (
        f" --time-limit {args.time_limit:g}" if args.time_limit != 60 else "") + (
        f" --costs {args.costs}" if args.costs != "analytic" else "")
    meta = {"commit": git_commit(mark_uncommitted=True), "date": datetime.date.today().isoformat(),
            "machine": f"{platform.machine()} {__import__('os').cpu_count()} cores",
            "python": platform.python_version(), "costs": args.costs, "time_limit": args.time_limit,
            "command": command}
    md = [f"# Anytime eqsat: where the time goes ({args.costs} costs, time limit {args.time_limit:g} s)", "",
          f"commit {meta['commit']}, {meta['date']}, {meta['machine']}, Python {meta['python']}", "",
          f"Command: `{command}`", "", *table(rows), "", *summary(rows), ""]
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "anytime" if args.costs == "analytic" else f"anytime_{args.costs}"
    (args.out / f"{stem}.md").write_text("\n".join(md))
    (args.out / f"{stem}.json").write_text(json.dumps({"meta": meta, "runs": rows}, indent=1))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
