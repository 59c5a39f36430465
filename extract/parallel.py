"""Extraction for a runtime that runs independent operators at once: AutoGraph's mixed critical-path cost,
minimized exactly with CP-SAT.

A sum of operator costs prices a graph as if its kernels ran one after another. On a runtime that runs
independent branches at once, merging two branches into one larger kernel can lower that sum and still lengthen
the graph's critical path (the most expensive chain of dependent operators), which bounds its latency from below.
AutoGraph's *mixed* cost keeps the total and weighs the critical path in:

    mixed = total + alpha * span,   span = critical path            (any number of branches at once)
                                    span = max(critical path, total / branches)   (at most ``branches`` at once)

With ``branches == 1`` the span is the total, so the mixed cost is ``(1 + alpha) * total`` and orders graphs as
the sum does.

The CP-SAT model is :func:`extract.cpsat.build_model`'s (one e-node per active e-class, acyclic) with a finish
time per kept e-class: at least the chosen node's cost plus each of its child classes' finish times, enforced by
the node's literal. The span is at least every root's finish time (and ``total / branches``), and the objective
is ``total + alpha * span``. Costs must be non-negative (a finish time is a longest path). The answer is never
worse under the mixed cost than the greedy sum-cost selection or ``start``; its total and critical path are
recomputed by the independent validator (:func:`extract.validate.selection_critical_path`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from .cpsat import (
    _ProgressLines,
    _relative_gap,
    add_hint,
    build_model,
    cp_sat,
    decode,
    incumbent,
    prune,
    solve_model,
)
from .egraph_json import SerializedEGraph
from .result import Extraction
from .validate import InvalidExtraction, selection_critical_path, validate_selection

__all__ = ["ParallelCost", "ParallelExtraction", "extract_cpsat_parallel", "parallel_cost_of"]

#: AutoGraph's weight of the critical path
DEFAULT_ALPHA = 0.25


@dataclass(frozen=True)
class ParallelCost:
    """The mixed critical-path cost (see the module docstring): ``alpha`` weighs the span, ``branches`` is how many
    independent operators the runtime runs at once (None: as many as there are)."""

    alpha: float = DEFAULT_ALPHA
    branches: int | None = None

    def __post_init__(self) -> None:
        if not self.alpha >= 0:
            raise ValueError(f"alpha must be >= 0, got {self.alpha!r}")
        if self.branches is not None and self.branches < 1:
            raise ValueError(f"branches must be >= 1 (or None: no limit), got {self.branches!r}")

    def span(self, total: float, critical_path: float) -> float:
        """The time the graph needs at the least on such a runtime."""
        return critical_path if self.branches is None else max(critical_path, total / self.branches)

    def of(self, total: float, critical_path: float) -> float:
        """The mixed cost of a graph of these total and critical path."""
        return total + self.alpha * self.span(total, critical_path)


@dataclass(frozen=True)
class ParallelExtraction(Extraction):
    """An extraction under a :class:`ParallelCost`: ``cost`` (and ``bound``, ``greedy_cost``) are mixed costs;
    ``total`` and ``critical_path`` are the selection's, recomputed by the validator."""

    total: float = 0.0
    critical_path: float = 0.0
    #: the span in the solver's own solution, where that is the selection returned (None: the incumbent was)
    model_span: float | None = None


def parallel_cost_of(eg: SerializedEGraph, selection: Mapping[str, str], cost: ParallelCost
                     ) -> tuple[float, float, float]:
    """(mixed cost, total, critical path) of a valid selection, by the independent validator."""
    total = validate_selection(eg, selection)
    critical = selection_critical_path(eg, selection)
    return cost.of(total, critical), total, critical


def _weights(alpha: float) -> tuple[int, int]:
    """Integer weights (of the total, of the span) in the ratio ``alpha`` (to 1/1000)."""
    f = Fraction(alpha).limit_denominator(1000)
    return f.denominator, f.numerator


def extract_cpsat_parallel(eg: SerializedEGraph, cost: ParallelCost = ParallelCost(), *, time_limit: float = 60.0,
                           num_workers: int = 8, random_seed: int | None = None,
                           start: Mapping[str, str] | None = None,
                           progress: Callable[[str], None] | None = None) -> ParallelExtraction:
    """The acyclic extraction of least mixed cost (see the module docstring), within ``time_limit`` seconds,
    never worse than the greedy sum-cost selection nor than ``start`` (a valid selection, e.g. the input graph's
    term). Status as :func:`extract.extract_cpsat`'s.

    Raises:
        ValueError: a node cost is negative. NoFiniteChoice: no extraction exists.
    """
    if any(c < 0 for c in eg.node_cost):
        raise ValueError("the mixed critical-path cost needs non-negative node costs")
    began = time.perf_counter()
    first = incumbent(eg, start, lambda sel: parallel_cost_of(eg, sel, cost)[0])
    best, best_sel, best_status = first.choices, first.selection, first.status
    best_cost = parallel_cost_of(eg, best_sel, cost)

    # a node dearer than the incumbent's mixed cost is in no better selection (mixed >= total >= its cost)
    kept = prune(eg, best_cost[0])
    em = build_model(eg, kept)
    m, scale = em.model, em.scale
    w_total, w_span = _weights(cost.alpha)
    scaled = {n: round(eg.node_cost[n] * scale) for n in em.node_vars}
    bound_all = sum(scaled.values()) + 1
    finish = {c: m.new_int_var(0, bound_all, f"f{c}") for c in kept}
    for c, ns in kept.items():
        for n in ns:
            m.add(finish[c] >= scaled[n]).only_enforce_if(em.node_vars[n])
            for d in set(eg.node_children[n]):
                m.add(finish[c] >= finish[d] + scaled[n]).only_enforce_if(em.node_vars[n])
    span = m.new_int_var(0, bound_all, "span")
    for r in eg.roots:
        m.add(span >= finish[r])
    total = sum(scaled[n] * x for n, x in em.node_vars.items())
    if cost.branches is not None:
        m.add(cost.branches * span >= total)
    m.minimize(w_total * total + w_span * span)

    add_hint(em, eg, best)
    hinted = _finish_times(eg, best, scaled)
    for c, f in finish.items():
        m.add_hint(f, hinted.get(c, 0))
    hint_span = max((hinted[r] for r in eg.roots), default=0)
    if cost.branches is not None:
        hint_span = max(hint_span, -(-sum(scaled[n] for n in set(best.values()) if n in scaled) // cost.branches))
    m.add_hint(span, hint_span)

    unit = scale * w_total  # objective units per unit of mixed cost
    remaining = time_limit - (time.perf_counter() - began)
    lines = None if progress is None else _ProgressLines(progress, unit, began)
    if progress is not None:
        progress(f"cpsat (critical path, alpha {cost.alpha:g}, branches {cost.branches or 'any'}): "
                 f"{em.stats['nodes']} e-nodes, {em.stats['classes']} e-classes after pruning; start cost "
                 f"{best_cost[0]:.6g} ({best_status}); solving for up to {max(0.0, remaining):.1f} s")
    times: list[float] = []
    solver, status = solve_model(em, time_limit=remaining, num_workers=num_workers, random_seed=random_seed,
                                 log_progress=False, solution_times=times,
                                 on_solution=None if lines is None else lines.solution)
    cp = cp_sat()
    selection, chosen, result_status, bound, model_span = best_sel, best_cost, best_status, None, None
    if status in (cp.OPTIMAL, cp.FEASIBLE):
        bound = solver.best_objective_bound / unit
        try:
            cp_sel = decode(em, eg, solver)
            cp_cost = parallel_cost_of(eg, cp_sel, cost)
        except InvalidExtraction:  # a model bug must never cost the caller a valid answer
            cp_sel = None
        slack = 0.5 * len(kept) * (1 + cost.alpha) / scale + 1e-9  # what rounding the costs can hide
        if cp_sel is not None and cp_cost[0] <= best_cost[0]:
            selection, chosen, model_span = cp_sel, cp_cost, solver.value(span) / scale
            result_status = "optimal" if status == cp.OPTIMAL else "feasible"
        elif cp_sel is not None and status == cp.OPTIMAL and cp_cost[0] <= best_cost[0] + slack:
            result_status = "optimal"  # the incumbent is as good as the proved optimum
    if bound is not None:
        bound = min(bound, chosen[0])
    found = times[-1] - began if times and selection is not best_sel else None
    if lines is not None:
        lines.outcome(chosen[0], result_status, bound)
    return ParallelExtraction(selection=dict(selection), cost=chosen[0], status=result_status, bound=bound,
                              gap=None if bound is None else _relative_gap(chosen[0], bound),
                              seconds=time.perf_counter() - began, solver="cpsat", greedy_cost=first.greedy_cost,
                              found_after=found, total=chosen[1], critical_path=chosen[2], model_span=model_span)


def _finish_times(eg: SerializedEGraph, selection: Mapping[int, int], scaled: Mapping[int, int]) -> dict[int, int]:
    """Each selected class's finish time under the scaled costs (a hint for the solver)."""
    out: dict[int, int] = {}

    def visit(c: int) -> int:
        stack = [c]
        while stack:
            top = stack[-1]
            kids = [d for d in eg.node_children[selection[top]] if d not in out]
            if kids:
                stack.extend(kids)
                continue
            stack.pop()
            n = selection[top]
            out[top] = scaled.get(n, 0) + max((out[d] for d in eg.node_children[n]), default=0)
        return out[c]

    for r in eg.roots:
        visit(r)
    return out
