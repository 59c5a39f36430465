"""Anytime curves of the comparison: when a method's best-so-far reaches a cost, and whether one curve stays at
or below another.

A trace is ``[(seconds, best cost so far), ...]``, monotone (time rising, cost never rising), starting at
``(0, original cost)``; between its points it is a step function (the value of the last point at or before
the time). Traces hold a search's own running sums while the final costs are recomputed from the exported
model, so every comparison of costs has the relative tolerance :data:`TOL`.

The functions take the JSON form of the results (:meth:`eqsat.search.comparison.ComparisonResult.as_dict`), so
saved files can be re-read and the figures recomputed from their traces.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from typing import Any

TOL = 1e-6  # relative, on every cost comparison
#: the methods whose final cost the others' curves are timed against, and the JSON key of that time
REFERENCES = {"backtracking": "seconds_to_backtracking_best", "eqsat": "seconds_to_eqsat_best"}

Trace = Sequence[Sequence[float]]


def reaches(cost: float, target: float, tol: float = TOL) -> bool:
    """Whether ``cost`` is at or below ``target`` within the relative tolerance."""
    return cost <= target + tol * abs(target)


def reach_seconds(trace: Trace, target: float, tol: float = TOL) -> float | None:
    """When ``trace`` first reaches ``target`` or less (None: never)."""
    return next((float(s) for s, c in trace if reaches(c, target, tol)), None)


def method_reach(m: Mapping[str, Any], target: float | None, tol: float = TOL) -> float | None:
    """When the method ``m`` (its JSON form: ``cost``, ``seconds_to_best``, ``trace``) first had a graph costing
    ``target`` or less; None when never (also when it failed or ``target`` is None).

    The method's own final cost decides whether it reached ``target`` at all (a trace's running sum may drift a
    little from the recomputed cost); if it did, the time is when its trace first reached ``target``, and at the
    latest when it found its final graph (``seconds_to_best``).
    """
    cost = m.get("cost")
    if target is None or cost is None or math.isnan(cost) or not reaches(cost, target, tol):
        return None
    at = reach_seconds(m.get("trace") or [], target, tol)
    best_at = m.get("seconds_to_best")
    if best_at is not None and not math.isnan(best_at):
        at = best_at if at is None else min(at, best_at)
    return at if at is not None else m.get("seconds")


def reach_fields(methods: Mapping[str, Mapping[str, Any]], tol: float = TOL) -> dict[str, dict[str, float | None]]:
    """For each method: ``seconds_to_backtracking_best`` and ``seconds_to_eqsat_best``, when its curve first reached
    that method's final cost (None: never). A key is left out when that method did not run or has no cost."""
    out: dict[str, dict[str, float | None]] = {name: {} for name in methods}
    for ref, key in REFERENCES.items():
        r = methods.get(ref)
        if r is None or r.get("cost") is None or math.isnan(r["cost"]):
            continue
        for name, m in methods.items():
            out[name][key] = r.get("seconds_to_best") if name == ref else method_reach(m, r["cost"], tol)
    return out


def with_reach_fields(result: dict[str, Any], tol: float = TOL) -> dict[str, Any]:
    """``result`` (one model's JSON) with the reach fields filled in where a method lacks them (files written
    before they existed); its methods' dicts are updated in place."""
    for name, fields in reach_fields(result["methods"], tol).items():
        for key, value in fields.items():
            result["methods"][name].setdefault(key, value)
    return result


def value_at(trace: Trace, t: float) -> float:
    """The step function of ``trace`` at time ``t`` (its first cost before the first point)."""
    times = [p[0] for p in trace]
    i = bisect.bisect_right(times, t) - 1
    return trace[max(i, 0)][1]


def first_time_above(a: Trace, b: Trace, until: float, tol: float = TOL) -> float | None:
    """The first time in ``[0, until]`` at which curve ``a`` is above curve ``b`` (beyond the tolerance), or None
    when ``a`` is at or below ``b`` throughout. Both step functions are evaluated at the union of their
    breakpoints (and 0), which is where either can change."""
    if not a or not b:
        return None
    times = sorted({0.0, *(p[0] for p in a), *(p[0] for p in b)})
    for t in times:
        if t > until:
            break
        if not reaches(value_at(a, t), value_at(b, t), tol):
            return t
    return None


def speedup_percent(original: float, cost: float | None) -> float | None:
    """``(original / cost - 1) * 100``, the speedup as Tensat's plotting script writes it (None: no cost)."""
    if cost is None or math.isnan(cost) or cost <= 0:
        return None
    return (original / cost - 1.0) * 100.0


def geometric_mean(values: Sequence[float], floor: float = 1e-9) -> float:
    """The geometric mean of positive values (each at least ``floor``); NaN for none."""
    if not values:
        return math.nan
    return math.exp(sum(math.log(max(v, floor)) for v in values) / len(values))
