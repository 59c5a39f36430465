"""eqsat against TASO's backtracking and OCGGS's sampling search on TASO's seven benchmark graphs.

Every method gets the same rules, cost model and wall-time budget per model; costs are recomputed from each
exported model by eqsat.search.comparison.model_cost and every result is checked numerically against the original.
Writes OUT/compare.{md,csv,json,png}: the table (cost, speedup, time to its best, time to backtracking's and to
eqsat's final cost, total), the targets checked, our figures beside Tensat's published ones, and best cost over
time (one panel per model, drawn by eqsat.search.comparison_plot, as eqsat compare --plot draws it).

By default each model is imported as onnxruntime runs it (Conv + BatchNormalization, Add and Relu folded into the
Conv before any search). --as-written imports it as written, as TASO and Tensat do (the folds become rules every
method may apply; the original and the results are priced as written: eqsat.search.comparison), so the speedups are
from the same original as theirs; --both-imports runs each model both ways, and the table's "import" column says
which row is which.

File names: compare.* under the analytic cost model, compare_<costs>.* under any other (compare_gpu-sim.md,
compare_measured.md), so runs under several cost models sit side by side in benchmarks/results; then _as-written
or _both-imports (compare_as-written.md); --tag T adds _T (compare_gpu-sim_60s.md). --render names its files after
the cost model and the imports of the results it reads.

Usage: python benchmarks/compare.py [MODEL ...] [--budget 60] [--methods eqsat,backtracking,sampling]
                                    [--alpha 1.05] [--costs analytic] [--out benchmarks/results] [--tag T]
                                    [--parallel N]   (AutoGraph's mixed cost; --methods may add autograph)
                                    [--as-written | --both-imports]
       python benchmarks/compare.py --render benchmarks/results/compare.json   (tables and plot only)
       python benchmarks/compare.py --render a.json b.json --out DIR   (the files eqsat compare --json wrote)
--costs takes any name eqsat.costs.get_cost_model takes. --render reads files written before the "to bt's
best" / "to eqsat's best" fields existed too (they are computed from the traces).

Targets (issue 14, raised by issue 42): eqsat's cost <= backtracking's on all seven and strictly lower on at least
three; eqsat's best-so-far at or below backtracking's at every time, from the call (both clocks count the import);
eqsat reaches backtracking's final cost >= 20x sooner than backtracking does (geometric mean over the models
backtracking improves) and >= 3x sooner on each of them. The summary also gives each method's first better graph.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import functools
import json
import math
import os
import platform
import re
import sys
from collections.abc import Callable
from pathlib import Path

from _common import git_commit

from eqsat.search.comparison_plot import plot_comparison
from eqsat.search.traces import (
    TOL,
    first_time_above,
    geometric_mean,
    reaches,
    speedup_percent,
    value_at,
    with_reach_fields,
)

# Tensat (Yang, Phothilimthana, Wang, Willsey, Roy, Pienaar: "Equality Saturation for Tensor Graph
# Superoptimization", MLSys 2021), headline table: https://mwillsey.com/papers/tensat
# our model: (Tensat's name, TASO search s, Tensat optimizer s, TASO speedup %, Tensat speedup %)
TENSAT_SOURCE = "https://mwillsey.com/papers/tensat"
TENSAT_PUBLISHED: dict[str, tuple[str, float, float, float, float]] = {
    "taso_bert": ("BERT", 13.6, 1.4, 8.5, 9.2),
    "taso_resnext50": ("ResNeXt-50", 25.3, 0.7, 5.5, 8.8),
    "taso_nasnet_a": ("NasNet-A", 1226, 10.6, 1.9, 7.3),
    "taso_nasrnn": ("NasRNN", 177.3, 0.5, 45.4, 68.9),
    "taso_inception_v3": ("Inception-v3", 68.6, 5.1, 6.3, 10.0),
    "taso_squeezenet": ("SqueezeNet", 16.4, 0.3, 6.7, 24.5),
    "taso_vgg19": ("VGG-19", 8.9, 0.4, 8.9, 8.9),
}
#: what a cost model name means, for the note beside Tensat's figures (longest matching prefix)
COST_MODEL_WORDS = {
    "analytic": "an analytic CPU roofline: FLOPs and bytes moved on a 2-core CPU, nothing measured",
    "gpu-sim": "a simulated GPU roofline, nothing measured",
    "measured": "operator latencies measured on this CPU with onnxruntime",
    "cpu": "operator latencies measured on this CPU with onnxruntime",
    "onnxruntime-cpu": "operator latencies measured on this CPU with onnxruntime",
    "gpu": "operator latencies measured on a GPU with CuPy",
    "cupy-gpu": "operator latencies measured on a GPU with CuPy",
}


def cost_model_words(name: str) -> str:
    """What the cost model ``name`` is, in words (the name itself when unknown)."""
    key = max((k for k in COST_MODEL_WORDS if name.startswith(k)), key=len, default=None)
    return f"the cost model '{name}'" + (f" ({COST_MODEL_WORDS[key]})" if key else "")


#: the imports a run makes, by the name its files carry ("": the default, folded)
IMPORTS = {"": (False,), "as-written": (True,), "both-imports": (False, True)}


def output_stem(costs: str, tag: str | None = None, imports: str = "") -> str:
    """compare, compare_<costs> when not analytic, then _<imports> (a key of :data:`IMPORTS`) and _<tag>; only
    letters, digits, '.', '-', '+', '_'."""
    slug = re.sub(r"[^A-Za-z0-9.+-]+", "-", costs.replace(" (cached)", "")).strip("-")
    parts = (["compare"] + ([slug] if slug and slug != "analytic" else []) + ([imports] if imports else [])
             + ([tag] if tag else []))
    return re.sub(r"[^A-Za-z0-9.+_-]+", "-", "_".join(parts))


def _clock_words(results: list[dict]) -> str:
    """Where the times count from: the call with the model for files whose searches timed their own import (the
    ``import_seconds`` field), else (older files) the start of each method's run, eqsat's import included."""
    searched = [m for r in results for k, m in r["methods"].items() if k != "eqsat"]
    if searched and all("import_seconds" in m for m in searched):
        return "from each method's call with the model, its import included (both clocks)"
    return "from the start of each method's run (eqsat's import included, a search's not)"


def import_name(r: dict) -> str:
    """How a result's model was imported: "as written", or "folded" (as onnxruntime runs it; files from before
    the as-written import have no field and were folded)."""
    return "as written" if r.get("as_written") else "folded"


def shown(r: dict) -> str:
    """A result's model as the summary names it: with " (as written)" where it was imported so."""
    return r["model"] + (" (as written)" if r.get("as_written") else "")


def _never(x: float | None) -> float:
    return math.inf if x is None else x


def rows(results: list[dict]) -> list[dict]:
    """One flat row per (model, method): cost, speedup, the times to its best, to backtracking's and eqsat's final
    cost (inf: never; absent: that method did not run), total. Fills the reach fields of ``results`` where a
    file written before them lacks them."""
    flat = []
    for r in results:
        with_reach_fields(r)
        eq = r["methods"].get("eqsat")
        for method, m in r["methods"].items():
            cost = m["cost"] if m["cost"] is not None else math.nan
            row = {"model": r["model"], "import": import_name(r), "method": method,
                   "original_cost": r["original_cost"], "cost": cost,
                   "speedup": r["original_cost"] / cost if cost and cost > 0 else math.nan,
                   "seconds_to_best": m["seconds_to_best"], "seconds": m["seconds"], "work": m["work"],
                   "status": m["status"]}
            for key in ("seconds_to_backtracking_best", "seconds_to_eqsat_best"):
                if key in m:
                    row[key] = _never(m[key])
            if eq is not None and method != "eqsat" and eq["cost"] is not None:
                row["vs_eqsat_cost"] = cost / eq["cost"]
            if r.get("repetitions", 1) > 1:  # a sweep's repetitions: the figures' spread (eqsat.search.sweep)
                row["repetitions"] = r["repetitions"]
                spread = m.get("spread") or {}
                for key in ("cost", "seconds_to_backtracking_best"):
                    if spread.get(key) is not None:
                        row[f"{key}_range"] = [_never(x) for x in spread[key]]
            flat.append(row)
    return flat


def _improved(r: dict, method: str) -> bool:
    cost = r["methods"][method]["cost"]
    return cost is not None and not reaches(r["original_cost"], cost)


def _secs(x: float | None) -> str:
    return "never" if x is None or math.isinf(x) else f"{x:.2f}"


def summary(results: list[dict]) -> list[str]:
    """The targets, checked on these results: final costs; (a) eqsat's curve at or below backtracking's;
    (b) the time to backtracking's final cost, backtracking's over eqsat's; (c) eqsat's times against Tensat's."""
    lines = []
    both = [with_reach_fields(r) for r in results if {"eqsat", "backtracking"} <= set(r["methods"])
            and all(r["methods"][k]["cost"] is not None for k in ("eqsat", "backtracking"))]
    if both:
        eq_cost = {shown(r): r["methods"]["eqsat"]["cost"] for r in both}
        bt_cost = {shown(r): r["methods"]["backtracking"]["cost"] for r in both}
        le = [m for m in eq_cost if reaches(eq_cost[m], bt_cost[m])]
        lt = [m for m in eq_cost if not reaches(bt_cost[m], eq_cost[m])]
        worse = [f"{m} ({eq_cost[m] / bt_cost[m] - 1:+.3%})" for m in eq_cost if m not in le]
        lines.append(f"- eqsat's cost <= backtracking's on {len(le)} of {len(both)} models (target: all)" +
                     (f"; higher on {', '.join(worse)}" if worse else "") +
                     f". Strictly lower on {len(lt)} (target: at least 3): {', '.join(lt) or 'none'}.")
        lines += [_curve_line(both), *_reach_lines(both)]
        idle = [shown(r) for r in both if not _improved(r, "eqsat") and not _improved(r, "backtracking")]
        if idle:
            lines.append(f"- Neither eqsat nor backtracking improved {', '.join(idle)} under this cost model.")
    lines += _tensat_time_lines(results)
    return lines


def _curve_line(both: list[dict]) -> str:
    """(a): eqsat's best-so-far against backtracking's at the union of their breakpoints, up to the shorter
    run's end."""
    above, sparse = [], []
    for r in both:
        eq, bt = r["methods"]["eqsat"], r["methods"]["backtracking"]
        t = first_time_above(eq["trace"], bt["trace"], min(eq["seconds"], bt["seconds"]))
        if t is not None:
            above.append(f"{shown(r)} (first at {t:.2f} s: {value_at(eq['trace'], t):.6g} against "
                         f"{value_at(bt['trace'], t):.6g})")
            if len(eq["trace"]) <= 2 and "best_source" not in eq:  # a file from before the anytime trace
                sparse.append(shown(r))
    note = (f" (eqsat's curve on {', '.join(sparse)} has only its start and its result: the file was written "
            "before eqsat recorded when it found each better graph)" if sparse else "")
    return (f"- eqsat's best-so-far at or below backtracking's at every time up to the shorter run's end on "
            f"{len(both) - len(above)} of {len(both)} models (target: all)" +
            (f"; above on {', '.join(above)}" if above else "") + note + ".")


#: issue 42's targets for the time to backtracking's final cost: the geometric mean, and each model's
REACH_MEAN_TARGET, REACH_EACH_TARGET = 20.0, 3.0


def _reach_lines(both: list[dict]) -> list[str]:
    """(b): on the models backtracking improves, backtracking's time to its final cost over eqsat's time to it."""
    ratios, never = [], []
    for r in both:
        if not _improved(r, "backtracking"):
            continue
        bt_t = r["methods"]["backtracking"]["seconds_to_backtracking_best"]
        eq_t = r["methods"]["eqsat"]["seconds_to_backtracking_best"]
        if eq_t is None:
            never.append(shown(r))
        else:
            ratios.append((shown(r), max(bt_t, 1e-6) / max(eq_t, 1e-6), bt_t, eq_t))
    if not ratios and not never:
        return ["- Time to backtracking's final cost: no model that backtracking improves."]
    line = "- Time to backtracking's final cost, backtracking's over eqsat's, on the models backtracking improves: "
    if ratios:
        slow = [m for m, x, _, _ in ratios if x < REACH_EACH_TARGET]
        line += (f"geometric mean {geometric_mean([x[1] for x in ratios]):.2f}x (target: >= {REACH_MEAN_TARGET:g}x); "
                 + ", ".join(f"{m} {x:.2f}x ({b:.3f} s / {e:.3f} s)" for m, x, b, e in ratios)
                 + f"; under {REACH_EACH_TARGET:g}x (the target on each): {', '.join(slow) or 'none'}")
    if never:
        line += ("; " if ratios else "") + f"eqsat never reached it on {', '.join(never)} (not in the mean)"
    return [line + ".", _first_line(both)]


def _first_line(both: list[dict]) -> str:
    """When each method had its first graph cheaper than the original (from its trace), and eqsat's source."""
    cells = []
    for r in both:
        firsts = {k: next((t for t, c in r["methods"][k]["trace"] if not reaches(r["original_cost"], c)), None)
                  for k in ("eqsat", "backtracking")}
        cells.append(f"{shown(r)} {_ms(firsts['eqsat'])} against {_ms(firsts['backtracking'])}")
    return ("- First graph cheaper than the original, eqsat against backtracking (from the call, import included): "
            + ", ".join(cells) + ".")


def _ms(t: float | None) -> str:
    return "never" if t is None else f"{t * 1000:.0f} ms"


def _tensat_time_lines(results: list[dict]) -> list[str]:
    """(c): eqsat's time to its best and total time against Tensat's published optimizer time."""
    figures = []
    for r in results:
        eq, pub = r["methods"].get("eqsat"), TENSAT_PUBLISHED.get(r["model"])
        if eq is None or pub is None or eq["cost"] is None:
            continue
        figures.append((shown(r), eq["seconds_to_best"], eq["seconds"], pub[2], _improved(r, "eqsat")))
    if not figures:
        return []
    improved = [f for f in figures if f[4]]  # where eqsat did not improve, its "best" is the start, at 0 s
    to_best = sum(b <= t for _, b, _, t, _ in improved)
    total = sum(s <= t for _, _, s, t, _ in figures)
    return [f"- eqsat's time to its best is within Tensat's published optimizer time on {to_best} of the "
            f"{len(improved)} models it improves, its total time on {total} of {len(figures)} (Tensat's on its own "
            "machine; see the table below): " +
            ", ".join(f"{m} {b:.2f} / {s:.1f} s against {t:g} s" for m, b, s, t, _ in figures) + "."]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def tensat_table(results: list[dict]) -> list[str]:
    """(d): our speedups and eqsat's times beside Tensat's and TASO's published figures, with the note on what
    differs; empty when no model has published figures."""
    mine = [r for r in results if r["model"] in TENSAT_PUBLISHED]
    if not mine:
        return []
    costs = sorted({r.get("cost_model", "?") for r in mine})
    head = _with_import(mine, ["model", "eqsat speedup %", "backtracking speedup %", "eqsat to best (s)",
                               "eqsat total (s)", "Tensat speedup %", "Tensat optimizer (s)", "TASO speedup %",
                               "TASO search (s)"], "import")
    note = (" Import \"as written\": from the model as TASO and Tensat import it, the folds into convolutions left "
            "to the search; \"folded\": from the model as onnxruntime runs it, those folds made."
            if any(r.get("as_written") for r in mine) else "")
    lines = ["## Beside Tensat's published results", "",
             f"Tensat's and TASO's figures are from Tensat's headline table (MLSys 2021, {TENSAT_SOURCE}): "
             "end-to-end inference time measured on a GPU with cuDNN, and optimizer time on the authors' machine. "
             f"Ours are under {'; '.join(cost_model_words(c) for c in costs)} and the times on this machine, "
             "so the columns are set beside each other, not directly comparable. Speedup % is "
             "(original / optimized - 1) * 100, as Tensat's plotting script computes it." + note, "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in mine:
        name, taso_s, tensat_s, taso_pct, tensat_pct = TENSAT_PUBLISHED[r["model"]]
        eq, bt = r["methods"].get("eqsat"), r["methods"].get("backtracking")
        cells = [f"{r['model']} ({name})", _pct(speedup_percent(r["original_cost"], eq and eq["cost"])),
                 _pct(speedup_percent(r["original_cost"], bt and bt["cost"])),
                 "-" if eq is None else _secs(eq["seconds_to_best"]), "-" if eq is None else f"{eq['seconds']:.1f}",
                 f"{tensat_pct:.1f}", f"{tensat_s:g}", f"{taso_pct:.1f}", f"{taso_s:g}"]
        cells = _with_import(mine, cells, import_name(r))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _with_import(results: list[dict], cells: list, value: str) -> list:
    """``cells`` with ``value`` (the "import" column's head or cell) second, where some result was imported as
    written (a table of folded imports alone, as before the as-written import, has no such column)."""
    return cells[:1] + [value] + cells[1:] if any(r.get("as_written") for r in results) else cells


def _range(r: dict, key: str, fmt: Callable[[float], str]) -> str:
    """A figure's median and range over a sweep's repetitions, "-" where it has none."""
    lo_med_hi = r.get(f"{key}_range")
    if lo_med_hi is None:
        return "-"
    lo, med, hi = lo_med_hi
    return f"{fmt(med)} ({fmt(lo)}-{fmt(hi)})"


def table(flat: list[dict]) -> str:
    """Markdown table of the flat rows ("never": not reached; "-": the method timed against did not run). With a
    sweep's repetitions, the row is the repetition with the median eqsat cost, and two more columns give the
    median and range over the repetitions of the cost and of the time to backtracking's final cost."""
    written = [{"as_written": r["import"] == "as written"} for r in flat]
    reps = max((r.get("repetitions", 1) for r in flat), default=1)
    head = _with_import(written, ["model", "method", "cost (ms)", "speedup", "cost / eqsat's", "to best (s)",
                                  "to bt's best (s)", "to eqsat's best (s)", "total (s)", "work", "status"], "import")
    if reps > 1:
        head += [f"cost over {reps} runs: median (range)", "to bt's best: median (range)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in flat:
        vs = r.get("vs_eqsat_cost")
        reach = [("-" if key not in r else _secs(r[key]))
                 for key in ("seconds_to_backtracking_best", "seconds_to_eqsat_best")]
        cells = _with_import(written, [r["model"], r["method"], f"{r['cost']:.5g}", f"{r['speedup']:.3f}x",
                 "-" if vs is None else f"{vs:.4f}",
                 f"{r['seconds_to_best']:.2f}" if r["seconds_to_best"] is not None else "-", *reach,
                 f"{r['seconds']:.1f}", r["work"], r["status"][:60]], r["import"])
        if reps > 1:
            cells += [_range(r, "cost", lambda x: f"{x:.5g}"), _range(r, "seconds_to_backtracking_best", _secs)]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def load_results(paths: list[Path]) -> tuple[list[dict], str, str, str]:
    """(results, meta, command, costs) from saved JSON files: this script's ``compare.json`` (``{"meta",
    "command", "costs", "results"}``; files before ``costs`` was saved have it in each result) or one file per
    model as ``eqsat compare MODEL --json FILE`` writes it (``{"model", "methods", ...}``). ``costs`` names the
    cost model(s), joined by '+', for the output file names."""
    results: list[dict] = []
    metas: list[str] = []
    cli_files: list[str] = []
    settings: dict[str, None] = {}
    costs: dict[str, None] = {}
    command = ""
    for path in paths:
        saved = json.loads(path.read_text())
        if isinstance(saved, dict) and "results" in saved:
            results += saved["results"]
            metas.append(saved.get("meta", ""))
            command = command or saved.get("command", "")
            for name in [saved["costs"]] if "costs" in saved else [r.get("cost_model", "") for r in saved["results"]]:
                costs[name] = None
        elif isinstance(saved, dict) and "model" in saved and "methods" in saved:
            results.append(saved)
            cli_files.append(path.name)
            setting = f"cost model {saved.get('cost_model', '?')}, budget {saved.get('budget', '?')} s per method"
            settings[setting] = None
            costs[saved.get("cost_model", "")] = None
        else:
            raise SystemExit(f"compare.py: error: {path} is neither a compare.json nor an 'eqsat compare --json' "
                             "file; give the files this script or 'eqsat compare --json' wrote")
    if cli_files:
        metas.append(f"from eqsat compare --json ({', '.join(cli_files)}): {'; '.join(settings)}")
        command = command or "python benchmarks/compare.py --render " + " ".join(str(p) for p in paths)
    return results, "; ".join(m for m in metas if m), command, "+".join(c for c in costs if c)


def imports_of(results: list[dict]) -> str:
    """The key of :data:`IMPORTS` the results were imported by (each model both ways: "both-imports")."""
    ways = tuple(sorted({bool(r.get("as_written")) for r in results}))
    return next((k for k, v in IMPORTS.items() if v == ways), "")


def main(argv: list[str] | None = None) -> int:
    """Run the comparison (or read saved results) and write the results files."""
    from eqsat import models as zoo
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", default=list(zoo.TASO_SUITE))
    ap.add_argument("--methods", default="eqsat,backtracking,sampling")
    ap.add_argument("--budget", type=float, default=60.0)
    ap.add_argument("--budgets", help="several budgets, comma-separated: a grid (one set of files each)")
    ap.add_argument("--alpha", type=float, default=1.05)
    ap.add_argument("--costs", default="analytic",
                    help="any name eqsat.costs.get_cost_model takes; several, comma-separated, for a grid")
    ap.add_argument("--repetitions", type=int, default=1,
                    help="runs of each setting (the sampling search seeded by the run's number); the table gives "
                         "the median and range of the cost and of the time to backtracking's final cost")
    ap.add_argument("--workers", type=int, default=1,
                    help="settings x repetitions run at once in a local process pool (default 1: one after "
                         "the other); with --ray, the CPUs of the Ray started here")
    ap.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                    help="run each unit as a Ray task, one CPU each: on the cluster at ADDRESS, else on a Ray "
                         "started here")
    ap.add_argument("--units", metavar="DIR",
                    help="where each unit's result is written as it finishes (default OUT/.sweep/COMMIT): a run "
                         "over a folder again runs only the units without a result")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    ap.add_argument("--tag", help="added to the output file names: compare[_COSTS]_TAG.*")
    ap.add_argument("--parallel", type=int, metavar="N",
                    help="judge every method by AutoGraph's mixed cost for N branches at once (with it, --methods "
                         "may name autograph: eqsat,backtracking,sampling,autograph)")
    written = ap.add_mutually_exclusive_group()
    written.add_argument("--as-written", action="store_const", const="as-written", dest="imports", default="",
                         help="import each model as written, as TASO and Tensat do (default: folded, as onnxruntime "
                              "runs it)")
    written.add_argument("--both-imports", action="store_const", const="both-imports", dest="imports",
                         help="run each model both ways, one table")
    ap.add_argument("--render", metavar="JSON", nargs="+",
                    help="only re-render the tables and plot: a saved compare.json, or files of eqsat compare --json")
    args = ap.parse_args(argv)
    this = "python benchmarks/compare.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.render:
        results, meta, command, costs = load_results([Path(p) for p in args.render])
        render(results, meta, command, costs, args, this)
        return 0
    from eqsat.costs import get_cost_model
    from eqsat.models.registry import builtin_model
    from eqsat.rules.distributed import Executor
    from eqsat.search.sweep import aggregate, grid, run_sweep, run_unit

    cost_names = [c for c in args.costs.split(",") if c]
    for name in cost_names:
        try:  # a wrong name fails here, before any model runs
            get_cost_model(name)
        except (ValueError, RuntimeError) as e:
            raise SystemExit(f"compare.py: error: --costs {name}: {e}") from None
    if args.repetitions < 1 or args.workers < 1:
        raise SystemExit("compare.py: error: --repetitions and --workers must be at least 1")
    budgets = [float(b) for b in args.budgets.split(",") if b] if args.budgets else [args.budget]
    methods = [m for m in args.methods.split(",") if m]
    commit = git_commit(mark_uncommitted=True)  # what is measured: the code as the run starts
    units = grid(args.models, budgets, cost_names, args.repetitions, methods, alpha=args.alpha,
                 parallel=args.parallel, as_written=IMPORTS[args.imports])
    executor = Executor(workers=args.workers, backend="ray", address=args.ray or None) if args.ray is not None \
        else Executor(workers=args.workers, backend="pool") if args.workers > 1 else None
    folder = Path(args.units) if args.units else Path(args.out) / ".sweep" / re.sub(r"\W+", "-", commit)
    print(f"{len(units)} units on {executor.describe() if executor else 'this process, one after the other'}; "
          f"results in {folder}", file=sys.stderr, flush=True)
    every = run_sweep(units, folder, executor, progress=lambda msg: print(msg, file=sys.stderr, flush=True),
                      runner=functools.partial(run_unit, load=builtin_model))
    for name in cost_names:
        for budget in budgets:
            results = aggregate(r for r, u in zip(every, units, strict=True) if u.costs == name and u.budget == budget)
            costs = name if args.parallel is None else f"{name} mixed-{args.parallel}"
            meta = (f"commit {commit}, {datetime.date.today()}, {platform.machine()} "
                    f"{os.cpu_count()} cores, Python {platform.python_version()}, cost model {name}, budget "
                    f"{budget:g} s per method, alpha {args.alpha}, imported "
                    f"{' and '.join(import_name({'as_written': w}) for w in IMPORTS[args.imports])}, "
                    f"{args.repetitions} run(s) of each, on {executor.describe() if executor else 'one process'}")
            tag = "_".join(t for t in (args.tag, f"{budget:g}s" if len(budgets) > 1 else "") if t) or None
            render(results, meta, this, costs, args, this, tag)
    return 0


def render(results: list[dict], meta: str, command: str, costs: str, args: argparse.Namespace, this: str,
           tag: str | None = None) -> None:
    """Write the tables, targets and plot of ``results`` into ``args.out`` (see the module docstring)."""
    flat = rows(results)
    shown = f"Command: `{command}`"
    if args.render and command != this:  # the figures are the run's, the tables this code's
        shown += f"; tables re-rendered by `{this}` at commit {git_commit(mark_uncommitted=True)}"
    md = "\n".join(["# eqsat vs backtracking (TASO) vs sampling (OCGGS)\n", meta, "", shown, "",
                    f"Times in seconds {_clock_words(results)}. \"to bt's best\" / \"to eqsat's "
                    "best\": when the method's best-so-far first reached backtracking's / eqsat's final cost "
                    f"(relative tolerance {TOL:g}; never: not within its run; -: that method did not run).", "",
                    table(flat), "", *summary(results), "", *tensat_table(results), ""])
    print(md)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = output_stem(costs, tag if tag is not None else args.tag, imports_of(results))
    (out / f"{stem}.md").write_text(md)
    saved = {"meta": meta, "command": command, "costs": costs, "results": results}
    (out / f"{stem}.json").write_text(json.dumps(saved, indent=1, allow_nan=False) + "\n")
    with open(out / f"{stem}.csv", "w", newline="") as f:
        fields = ["model", "import", "method", "original_cost", "cost", "speedup", "vs_eqsat_cost", "seconds_to_best",
                  "seconds_to_backtracking_best", "seconds_to_eqsat_best", "seconds", "work", "status",
                  "repetitions", "cost_range", "seconds_to_backtracking_best_range"]
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(flat)
    plot_comparison(results, out / f"{stem}.png", title=meta)
    print(f"wrote {out / stem}.{{md,csv,json,png}}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
