"""Sweeps of the research comparison: a grid of models x budgets x cost models x repetitions, one task each.

Each unit of the grid is one :func:`eqsat.search.comparison.compare` run (every method, one after the other,
each with its wall-time budget), so a unit's figures are those of a comparison run alone. Units run on an
executor of :mod:`eqsat.rules.distributed` (a local process pool, Ray tasks on this machine or on a cluster, or
one after the other here), each asking for the CPUs it uses; each result is written to the sweep's folder as
it finishes, one JSON file per unit named by its settings, and a sweep started again over the same folder runs
only the units without a file (a damaged file is run again). :func:`aggregate` folds the repetitions of a
setting into one result: the repetition with the median eqsat cost (else the first method's) stands for them,
and each method gains ``spread``, the minimum, median and maximum of its figures over the repetitions.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["SPREAD_FIELDS", "SweepUnit", "aggregate", "grid", "run_sweep", "run_unit"]

#: the figures of a method whose spread over repetitions :func:`aggregate` gives
SPREAD_FIELDS = ("cost", "seconds_to_best", "seconds_to_backtracking_best", "seconds_to_eqsat_best")


@dataclass(frozen=True)
class SweepUnit:
    """One comparison of the grid: ``model`` (a built-in name or an ONNX file), its budget per method, the cost
    model by name, the repetition (the sampling search's seed), and the comparison's settings."""

    model: str
    budget: float
    costs: str
    repetition: int
    methods: tuple[str, ...]
    alpha: float = 1.05
    parallel: int | None = None
    as_written: bool = False

    def key(self) -> str:
        """The unit's file name in a sweep's folder: readable, and a digest of every setting."""
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]
        stem = f"{Path(self.model).stem}_{self.costs}_{self.budget:g}s_r{self.repetition}"
        return "".join(c if c.isalnum() or c in "._-" else "-" for c in stem) + f"_{digest}"


def grid(models: Iterable[str], budgets: Iterable[float], costs: Iterable[str], repetitions: int,
         methods: Sequence[str], *, alpha: float = 1.05, parallel: int | None = None,
         as_written: Iterable[bool] = (False,)) -> list[SweepUnit]:
    """Every unit of the grid, repetitions innermost (so that a partial sweep has whole settings first)."""
    return [SweepUnit(m, float(b), c, r, tuple(methods), alpha, parallel, w)
            for m in models for w in as_written for c in costs for b in budgets for r in range(repetitions)]


def run_unit(unit: SweepUnit, load: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """Run one unit (in a worker): the comparison's JSON (``eqsat compare --json``) with the unit's settings.
    ``load`` gives the model a unit names (a built-in model by name: :func:`eqsat.models.registry.builtin_model`;
    picklable, as the executor sends it to the workers); by default the unit's model is an ONNX file."""
    from eqsat.costs import get_cost_model
    from eqsat.search.comparison import compare

    model = unit.model if load is None else load(unit.model)
    res = compare(model, unit.methods, budget=unit.budget, cost_model=get_cost_model(unit.costs), alpha=unit.alpha,
                  seed=unit.repetition, name=unit.model, parallel=unit.parallel, as_written=unit.as_written)
    return {**res.as_dict(), "costs": unit.costs, "repetition": unit.repetition, "unit": unit.key()}


def _read(path: Path) -> dict[str, Any] | None:
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # damaged (a run killed while writing it, before atomic writes): run again
    return saved if isinstance(saved, dict) and "methods" in saved and "model" in saved else None


def _write(path: Path, result: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(result, f, indent=1, allow_nan=False)
    os.replace(tmp, path)  # atomic: a reader sees the whole file or none


def run_sweep(units: Sequence[SweepUnit], folder: str | Path, executor: Any = None,
              progress: Callable[[str], None] | None = None,
              runner: Callable[[SweepUnit], dict[str, Any]] = run_unit) -> list[dict[str, Any]]:
    """Run the units without a result in ``folder`` on ``executor`` (an :class:`eqsat.rules.distributed.Executor`;
    default: one after the other, here), writing each result as it finishes; returns every unit's result, in the
    order of ``units``. ``progress`` gets a line per unit run or found."""
    from eqsat.rules.distributed import Executor

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda msg: None)
    results: dict[str, dict[str, Any]] = {}
    todo = []
    for u in units:
        found = _read(folder / f"{u.key()}.json")
        if found is None:
            todo.append(u)
        else:
            results[u.key()] = found
    if results:
        say(f"resumed: {len(results)} of {len(units)} units already in {folder}")
    executor = executor or Executor(workers=1, backend="serial")
    for done, (i, result) in enumerate(executor.imap(runner, len(todo), lambda i: todo[i]), 1):
        u = todo[i]
        _write(folder / f"{u.key()}.json", result)
        results[u.key()] = result
        say(f"[{done}/{len(todo)}] {u.model}, {u.costs}, {u.budget:g} s, repetition {u.repetition}: done")
    return [results[u.key()] for u in units]


def _setting(r: dict[str, Any]) -> tuple[Any, ...]:
    return r["model"], bool(r.get("as_written")), r.get("costs", r.get("cost_model")), r.get("budget")


def _finite(x: float) -> float | None:
    return None if x == float("inf") else x  # strict JSON: never reached is null, as in a method's own fields


def _median_index(values: list[float | None]) -> int:
    known = sorted((v, k) for k, v in enumerate(values) if v is not None)
    return known[(len(known) - 1) // 2][1] if known else 0


def aggregate(results: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One result per setting (model, import, cost model, budget), in first-seen order: the repetition with the
    median eqsat cost (the first method's, without eqsat) with ``repetitions`` (their number) and, per method,
    ``spread``: ``{field: [min, median, max]}`` over the repetitions of each of :data:`SPREAD_FIELDS` it has
    (``None`` for a figure no repetition reached; a time never reached counts as infinite)."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault(_setting(r), []).append(r)
    out = []
    for reps in groups.values():
        lead = "eqsat" if "eqsat" in reps[0]["methods"] else next(iter(reps[0]["methods"]))
        chosen = reps[_median_index([r["methods"].get(lead, {}).get("cost") for r in reps])]
        merged = {**chosen, "repetitions": len(reps), "methods": {}}
        for name, m in chosen["methods"].items():
            spread = {}
            for field in SPREAD_FIELDS:
                if field not in m:
                    continue
                vals = [r["methods"].get(name, {}).get(field) for r in reps]
                nums = [float("inf") if v is None and field != "cost" else v for v in vals]
                nums = [v for v in nums if v is not None]
                spread[field] = [_finite(min(nums)), _finite(statistics.median(nums)), _finite(max(nums))] \
                    if nums else None
            merged["methods"][name] = {**m, "spread": spread}
        out.append(merged)
    return out
