"""Where eqsat's first fraction of a second goes on TASO's seven graphs, and when each method has its first better
graph.

For each model, ``eqsat.optimize`` runs ``--repeats`` times with the first answer (the default) and as many without
it (``first_answer=False``), and backtracking (``eqsat.search.searches.backtracking``) as many times after importing
the model itself, as ``eqsat compare`` runs it. Every time is counted from the call with the ONNX model, the import
included, and the table gives medians (the machine is shared: single runs vary by tens of milliseconds). The
eqsat events are timed by wrapping the functions that make them: the import (``load_with_axes``), the sibling
merges, the engine process's fork, the program's compilation, the first step of the descent, the engine's
report of iteration 0 (the e-graph of the input graph exists) and the end of the first snapshot's extraction.
Saves ``start.{md,json}``.

Usage: python benchmarks/start.py [MODEL ...] [--repeats 5] [--time-limit 10] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import datetime
import functools
import gc
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _common import git_commit

TASO = ["taso_bert", "taso_nasrnn", "taso_resnext50", "taso_nasnet_a", "taso_inception_v3", "taso_squeezenet",
        "taso_vgg19"]
#: the events timed, in the order a run meets them, and their columns
EVENTS = {"imported": "import done", "merged": "merges done", "forked": "engine forked",
          "compiled": "program compiled", "descending": "descent's first step", "iteration0": "iteration 0 reported",
          "snapshot": "1st snapshot extracted"}


class Clock:
    """The first time each event happened since ``start`` (seconds)."""

    def __init__(self) -> None:
        self.start = 0.0
        self.events: dict[str, float] = {}

    def mark(self, name: str) -> None:
        self.events.setdefault(name, time.perf_counter() - self.start)

    def after(self, obj: Any, attr: str, name: str) -> None:
        """Mark ``name`` when ``obj.attr`` (a function) returns."""
        f = getattr(obj, attr)

        @functools.wraps(f)
        def wrapped(*a: Any, **k: Any) -> Any:
            out = f(*a, **k)
            self.mark(name)
            return out

        setattr(obj, attr, wrapped)

    def before(self, obj: Any, attr: str, name: str) -> None:
        """Mark ``name`` when ``obj.attr`` (a function) is called."""
        f = getattr(obj, attr)

        @functools.wraps(f)
        def wrapped(*a: Any, **k: Any) -> Any:
            self.mark(name)
            return f(*a, **k)

        setattr(obj, attr, wrapped)


def instrument(clock: Clock) -> None:
    """Wrap the functions whose calls or returns are the events (once per process)."""
    import eqsat.engine.saturation as saturation
    import eqsat.pipeline.anytime as anytime
    import eqsat.pipeline.descent as descent
    import eqsat.pipeline.stages as stages

    clock.after(stages.onnx_io, "load_with_axes", "imported")
    clock.after(stages, "first_merges", "merged")
    clock.after(saturation, "_start_child", "forked")
    clock.after(saturation, "compile_program", "compiled")
    clock.before(descent.Descent, "step", "descending")
    clock.after(anytime.Anytime, "on_snapshot", "snapshot")


def first_better(trace: list, original: float) -> float | None:
    """When a trace first went below the original cost."""
    return next((t for t, c in trace if c < original * (1 - 1e-6)), None)


def eqsat_run(name: str, first_answer: bool, time_limit: float, clock: Clock) -> dict[str, Any]:
    """One optimize run: its events, its first better graph and what found it."""
    from eqsat import models
    from eqsat.costs import get_cost_model
    from eqsat.pipeline import optimize

    model = models.builtin_models()[name]()
    said: list[tuple[float, str]] = []
    gc.collect()
    clock.events = {}
    clock.start = time.perf_counter()
    res = optimize(model, cost_model=get_cost_model("analytic"), time_limit=time_limit, check=False, cache=False,
                   verify_latency=False, first_answer=first_answer,
                   progress=lambda msg: said.append((time.perf_counter() - clock.start, msg)))
    events = dict(clock.events)
    events["iteration0"] = next((t for t, m in said if m.lstrip().startswith("iteration 0:")), None)
    sources = [m for _, m in said if "best so far" in m]
    return {"events": events, "first": first_better(res.trace, res.cost_before), "cost": res.cost_after,
            "first_source": sources[0].split("(", 1)[1].split(",")[0].split(":")[0] if sources else "",
            "original": res.cost_before}


def backtracking_run(name: str, seconds: float) -> dict[str, Any]:
    """Backtracking as eqsat compare runs it: the model imported inside the timed run."""
    from eqsat import models, onnx_io
    from eqsat.costs import get_cost_model
    from eqsat.pipeline import default_rules
    from eqsat.search import searches

    model, rules = models.builtin_models()[name](), default_rules()
    gc.collect()
    t = time.perf_counter()
    graph = onnx_io.load_with_axes(model, label=name)[0]
    imported = time.perf_counter() - t
    res = searches.backtracking(graph, rules, get_cost_model("analytic"), seconds=seconds)
    first = first_better(res.trace, res.original_cost)
    return {"imported": imported, "first": None if first is None else first + imported}


def median(values: list[float | None]) -> float | None:
    """The median of the values that exist (None: none does)."""
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def ms(t: float | None) -> str:
    return "-" if t is None else f"{t * 1000:.0f}"


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The medians, one row per model and eqsat mode, and backtracking's."""
    head = ["model", "run", *EVENTS.values(), "first better graph", "by"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        for mode in ("with first answer", "without"):
            runs = r[mode]
            cells = [ms(median([x["events"].get(k) for x in runs])) for k in EVENTS]
            by = statistics.mode([x["first_source"] for x in runs]) if runs else ""
            lines.append(f"| {r['model']} | eqsat, {mode} | " + " | ".join(cells) +
                         f" | {ms(median([x['first'] for x in runs]))} | {by or '-'} |")
        bt = r["backtracking"]
        lines.append(f"| {r['model']} | backtracking | {ms(median([x['imported'] for x in bt]))} | " +
                     " | ".join("-" for _ in list(EVENTS)[1:]) + f" | {ms(median([x['first'] for x in bt]))} | |")
    return lines


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """Per model: eqsat's first better graph against backtracking's, in how many of the repeats it came first."""
    out = []
    for r in rows:
        eq, bt = [x["first"] for x in r["with first answer"]], [x["first"] for x in r["backtracking"]]
        if all(b is None for b in bt) and all(e is None for e in eq):
            out.append(f"- {r['model']}: neither has a better graph.")
            continue
        pairs = list(zip(eq, bt, strict=True))
        first = sum(1 for e, b in pairs if e is not None and (b is None or e <= b))
        out.append(f"- {r['model']}: eqsat's first better graph at {ms(median(eq))} ms (median), backtracking's at "
                   f"{ms(median(bt))} ms; eqsat's came first in {first} of {len(pairs)} paired runs.")
    return out


def main(argv: list[str] | None = None) -> int:
    """Time the models named (TASO's seven by default), print the table and save it."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=TASO)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--time-limit", type=float, default=10.0, help="eqsat's time limit (the events come early)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = ap.parse_args(argv)
    commit = git_commit(mark_uncommitted=True)
    clock = Clock()
    instrument(clock)
    rows = []
    for name in args.models:
        row: dict[str, Any] = {"model": name, "with first answer": [], "without": [], "backtracking": []}
        for _ in range(args.repeats):  # interleaved, so that a busy spell of the machine hits all three alike
            row["with first answer"].append(eqsat_run(name, True, args.time_limit, clock))
            row["without"].append(eqsat_run(name, False, args.time_limit, clock))
            row["backtracking"].append(backtracking_run(name, 2.0))
        rows.append(row)
        print("\n".join(table([row])[2:]), file=sys.stderr, flush=True)
    command = "python benchmarks/start.py" + ("" if args.models == TASO else " " + " ".join(args.models)) + (
        f" --repeats {args.repeats}" if args.repeats != 5 else "") + (
        f" --time-limit {args.time_limit:g}" if args.time_limit != 10 else "")
    meta = {"commit": commit, "date": datetime.date.today().isoformat(),
            "machine": f"{platform.machine()} {__import__('os').cpu_count()} cores (shared)",
            "python": platform.python_version(), "command": command}
    md = ["# eqsat's start: where the first fraction of a second goes (analytic costs)", "",
          f"commit {meta['commit']}, {meta['date']}, {meta['machine']}, Python {meta['python']}", "",
          f"Command: `{command}`", "",
          f"Milliseconds from the call with the ONNX model (import included), medians of {args.repeats} runs each, "
          "the three kinds of run interleaved. eqsat's columns are when each step of its start ended; backtracking's "
          "first column is its own import; the last two, when the method first had a graph cheaper than the original "
          "and, for eqsat, what found it most often.", "", *table(rows), "", *summary(rows), ""]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "start.md").write_text("\n".join(md))
    (args.out / "start.json").write_text(json.dumps({"meta": meta, "models": rows}, indent=1))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
