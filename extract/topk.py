"""Several distinct near-optimal extractions, cheapest first: CP-SAT with no-good cuts.

A cost model is an estimate; the fastest graph on the real runtime is often not the one it ranks first. So
the caller can time a few good candidates and keep the fastest. The first candidate is
:func:`extract_cpsat`'s answer. Each further one is the cheapest selection (within ``within`` of the first
one's cost) that leaves out at least one *costed* node of every candidate found so far: a no-good cut
``sum(x[n] for n in S) <= |S| - 1`` over the costed nodes of each earlier selection S. Selections that
differ only in free nodes (weight transforms that export precomputes, reshapes) would run as the same
graph, so they do not count as different. The model is built once; each cut is added to it and it is
solved again.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

from .cpsat import ExtractionModel, build_model, cp_sat, decode, extract_cpsat, prune, solve_model
from .egraph_json import SerializedEGraph
from .result import Extraction
from .validate import InvalidExtraction, validate_selection

__all__ = ["extract_top_k"]


def extract_top_k(eg: SerializedEGraph, k: int, *, time_limit: float = 60.0, within: float = 0.25,
                  num_workers: int = 8, random_seed: int | None = None,
                  start: Mapping[str, str] | None = None,
                  progress: Callable[[str], None] | None = None) -> list[Extraction]:
    """Up to ``k`` distinct acyclic extractions, cheapest first; :func:`extract_cpsat`'s answer is one of them.

    ``within`` bounds the others: cost at most ``(1 + within)`` times the first's (for costs >= 0). The first
    solve gets 60 % of ``time_limit`` when ``k > 1``; the others share the rest, each at most a quarter of the
    first solve's time (at least 1 s), and fewer than ``k`` come back when no other selection is within the bound
    or time runs out. Every selection is checked by the independent validator, which also recomputes its cost.
    Only the first carries a bound and gap (a bound of a model with cuts is not a bound on the e-graph).
    ``start`` (a known valid selection) goes to the first solve, which is then never worse than it.
    ``progress`` gets :func:`extract_cpsat`'s lines for the first solve and one line per further extraction.
    Ctrl-C raises :class:`KeyboardInterrupt` promptly.

    Raises:
        ValueError: ``k < 1`` or ``within < 0``; NoFiniteChoice: no extraction exists.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if within < 0:
        raise ValueError(f"within must be >= 0, got {within}")
    began = time.perf_counter()
    first = extract_cpsat(eg, time_limit=time_limit if k == 1 else 0.6 * time_limit, num_workers=num_workers,
                          random_seed=random_seed, start=start, progress=progress)
    # an alternative gets at most a quarter of the first solve's time (at least 1 s): a big e-graph whose
    # first solve used its whole budget does not spend k times that on the others
    per_alternative = max(1.0, 0.25 * first.seconds)
    found = [first]
    if k == 1:
        return found
    nonneg = min(eg.node_cost, default=0.0) >= 0
    limit = first.cost * (1 + within) if nonneg else None
    em = build_model(eg, prune(eg, limit))
    objective = sum(round(eg.node_cost[n] * em.scale) * x for n, x in em.node_vars.items())
    if limit is not None:
        em.model.add(objective <= math.floor(limit * em.scale + 0.5 * len(em.node_vars)))
    _cut(em, eg, first.selection)
    cp_model = cp_sat()
    while len(found) < k:
        left = time_limit - (time.perf_counter() - began)
        if left <= 0.01:
            break
        solver, status = solve_model(em, time_limit=min(per_alternative, left / (k - len(found))),
                                     num_workers=num_workers,
                                     random_seed=random_seed, log_progress=False)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            break  # none left within the bound, or none found in time
        selection = decode(em, eg, solver)
        try:
            cost = validate_selection(eg, selection)
        except InvalidExtraction:  # a model bug must not end the caller's run; stop offering alternatives
            break
        if limit is not None and cost > limit * (1 + 1e-9) + 1e-12:
            break
        found.append(Extraction(selection=selection, cost=cost,
                                status="optimal" if status == cp_model.OPTIMAL else "feasible",
                                bound=None, gap=None, seconds=time.perf_counter() - began, solver="cpsat",
                                greedy_cost=first.greedy_cost))
        if progress is not None:
            progress(f"cpsat: extraction {len(found)} of up to {k}: cost {cost:.6g}, "
                     f"{time.perf_counter() - began:.1f} s")
        _cut(em, eg, selection)
    return sorted(found, key=lambda e: e.cost)


def _cut(em: ExtractionModel, eg: SerializedEGraph, selection: dict[str, str]) -> None:
    """Forbid every selection that keeps all costed nodes of ``selection`` (all its nodes if none costs)."""
    nodes = [eg.node_index[n] for n in selection.values()]
    costed = [n for n in nodes if round(eg.node_cost[n] * em.scale) != 0] or nodes
    xs = [em.node_vars[n] for n in costed if n in em.node_vars]
    if len(xs) < len(costed):  # a node outside the model: no selection of the model can keep them all
        return
    em.model.add(sum(xs) <= len(xs) - 1)
