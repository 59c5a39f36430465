"""Exact DAG extraction with OR-Tools CP-SAT (topological levels inside SCCs, greedy hint and fallback).

Pipeline (each step its own function): greedy DAG solution (upper bound and hint) -> pruning -> model
building -> solving -> decoding -> independent validation -> pick the better of solver and greedy.

Model: a boolean per kept e-node and per kept e-class; root classes active; an active class picks exactly
one node; a chosen node activates each of its child classes (``add_implication``). Acyclicity uses an
integer level per class, only for classes inside a non-trivial strongly connected component (SCC) of the
class graph and only for edges inside that SCC: ``level[c] > level[d]`` enforced by the node's literal
(no big-M). With negative costs every active non-root class must also have a chosen parent, so that
"active" equals "reachable" and the objective equals the DAG cost. Costs are scaled to integers; the
reported cost is recomputed exactly from the chosen nodes.
"""

from __future__ import annotations

import functools
import math
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ortools.sat.python import cp_model

from .egraph_json import SerializedEGraph
from .greedy import greedy_choices, strongly_connected_components
from .result import Extraction
from .validate import InvalidExtraction, reachable_part, validate_selection

__all__ = ["ExtractionModel", "Incumbent", "extract_cpsat", "incumbent", "prune", "build_model", "solve_model",
           "decode", "add_hint"]

MAX_SCALE = 1e6
# keep |sum of scaled costs| well inside int64 and exactly representable in a double
_SCALED_LIMIT = 2.0**52
_Choice = tuple[dict[str, str], float, str, "float | None"]  # selection, cost, status, bound


def cp_sat() -> ModuleType:
    """OR-Tools' CP-SAT module, imported when a model is first built or solved: it imports pandas (about 0.25 s
    together), which the command line's start and ``import eqsat.engine`` do without."""
    from ortools.sat.python import cp_model  # heavy: see above

    return cp_model


# ------------------------------------------------------------------------------------------ pruning
def _usable_nodes(eg: SerializedEGraph, allowed: list[bool]) -> list[bool]:
    """Allowed nodes whose child classes all have an acyclic derivation from allowed nodes."""
    pending = [len(k) for k in eg.node_children]
    parents: list[list[int]] = [[] for _ in range(eg.num_classes)]
    for n, kids in enumerate(eg.node_children):
        for d in kids:
            parents[d].append(n)
    grounded = [False] * eg.num_classes
    usable = [False] * eg.num_nodes
    stack = [n for n in range(eg.num_nodes) if allowed[n] and pending[n] == 0]
    while stack:
        n = stack.pop()
        usable[n] = True
        c = eg.node_class[n]
        if grounded[c]:
            continue
        grounded[c] = True
        for p in parents[c]:
            pending[p] -= 1
            if pending[p] == 0 and allowed[p]:
                stack.append(p)
    return usable


def prune(eg: SerializedEGraph, upper_bound: float | None) -> dict[int, list[int]]:
    """Kept classes (reachable from the roots through usable nodes) -> their kept node indices.

    Drops self-loop nodes, nodes that depend on a class without an acyclic derivation, classes not
    reachable from the roots, and -- only when ``upper_bound`` is given and every cost is non-negative --
    nodes whose own cost exceeds ``upper_bound``.
    """
    costs = eg.node_cost
    limit = upper_bound if upper_bound is not None and min(costs) >= 0 else math.inf
    allowed = [eg.node_class[n] not in kids and costs[n] <= limit for n, kids in enumerate(eg.node_children)]
    usable = _usable_nodes(eg, allowed)
    kept: dict[int, list[int]] = {}
    stack = list(eg.roots)
    for r in stack:
        kept[r] = []
    while stack:
        c = stack.pop()
        for n in eg.class_nodes[c]:
            if usable[n]:
                kept[c].append(n)
                for d in eg.node_children[n]:
                    if d not in kept:
                        kept[d] = []
                        stack.append(d)
    return kept


# -------------------------------------------------------------------------------------------- model
@dataclass
class ExtractionModel:
    """A built CP-SAT model plus the variable maps needed to decode and hint it."""

    model: cp_model.CpModel
    node_vars: dict[int, cp_model.IntVar]
    class_vars: dict[int, cp_model.IntVar]
    level_vars: dict[int, cp_model.IntVar]
    component: dict[int, int]
    scale: float
    stats: dict[str, int] = field(default_factory=dict)


def cost_scale(costs: list[float]) -> float:
    """Factor turning costs into integers: 1 if all are integral, else 1e6 (smaller if it could overflow)."""
    if not costs:
        return 1.0
    biggest = max(abs(c) for c in costs)
    scale = 1.0 if all(float(c).is_integer() for c in costs) else MAX_SCALE
    while scale > 1e-6 and biggest * scale * len(costs) > _SCALED_LIMIT:
        scale /= 10.0
    return scale


def build_model(eg: SerializedEGraph, kept: dict[int, list[int]]) -> ExtractionModel:
    """Build the CP-SAT model over the kept classes / nodes (see the module docstring)."""
    m = cp_sat().CpModel()
    avar = {c: m.new_bool_var(f"a{c}") for c in kept}
    xvar = {n: m.new_bool_var(f"x{n}") for ns in kept.values() for n in ns}
    for r in eg.roots:
        m.add(avar[r] == 1)
    succ: dict[int, list[int]] = {c: [] for c in kept}
    for c, ns in kept.items():
        m.add(sum(xvar[n] for n in ns) == avar[c])
        targets: dict[int, None] = {}
        for n in ns:
            for d in eg.node_children[n]:
                m.add_implication(xvar[n], avar[d])
                targets[d] = None
        succ[c] = list(targets)
    comp = {v: i for i, members in enumerate(strongly_connected_components(succ)) for v in members}
    levels, n_order = _add_order_constraints(eg, m, kept, xvar, comp)
    if any(eg.node_cost[n] < 0 for n in xvar):
        _add_parent_constraints(eg, m, kept, xvar, avar)
    scale = cost_scale([eg.node_cost[n] for n in xvar])
    m.minimize(sum(round(eg.node_cost[n] * scale) * x for n, x in xvar.items()))
    stats = {"nodes": len(xvar), "classes": len(avar), "scc_classes": len(levels),
             "order_constraints": n_order}
    return ExtractionModel(m, xvar, avar, levels, comp, scale, stats)


def _add_order_constraints(eg: SerializedEGraph, m: cp_model.CpModel, kept: dict[int, list[int]],
                           xvar: dict[int, cp_model.IntVar],
                           comp: dict[int, int]) -> tuple[dict[int, cp_model.IntVar], int]:
    """Levels for classes in non-trivial SCCs; ``level[c] > level[d]`` if a node of c using d is chosen.

    Returns the level variables and the number of order constraints.
    """
    sizes: dict[int, int] = {}
    for k in comp.values():
        sizes[k] = sizes.get(k, 0) + 1
    levels = {c: m.new_int_var(0, sizes[comp[c]] - 1, f"l{c}") for c in kept if sizes[comp[c]] > 1}
    count = 0
    for c, ns in kept.items():
        if c not in levels:
            continue
        for n in ns:
            for d in eg.node_children[n]:
                if comp[d] == comp[c]:
                    m.add(levels[c] > levels[d]).only_enforce_if(xvar[n])
                    count += 1
    return levels, count


def _add_parent_constraints(eg: SerializedEGraph, m: cp_model.CpModel, kept: dict[int, list[int]],
                            xvar: dict[int, cp_model.IntVar], avar: dict[int, cp_model.IntVar]) -> None:
    """An active non-root class needs a chosen parent node (so active == reachable; needed for costs < 0)."""
    parents: dict[int, list[int]] = {c: [] for c in kept}
    for ns in kept.values():
        for n in ns:
            for d in eg.node_children[n]:
                parents[d].append(n)
    roots = set(eg.roots)
    for c, ps in parents.items():
        if c not in roots:
            m.add_bool_or([xvar[p] for p in ps]).only_enforce_if(avar[c])


def add_hint(em: ExtractionModel, eg: SerializedEGraph, selection: dict[int, int]) -> None:
    """Hint a complete solution: the given (acyclic) selection, with consistent levels."""
    chosen = set(selection.values())
    for n, x in em.node_vars.items():
        em.model.add_hint(x, n in chosen)
    for c, a in em.class_vars.items():
        em.model.add_hint(a, c in selection)
    levels = _selection_levels(eg, selection, em.component)
    for c, lv in em.level_vars.items():
        em.model.add_hint(lv, levels.get(c, 0))


def _selection_levels(eg: SerializedEGraph, selection: dict[int, int],
                      comp: dict[int, int]) -> dict[int, int]:
    """Longest path (in edges) to a sink of the selection, counting only edges inside an SCC."""
    level: dict[int, int] = {}
    for root in eg.roots:
        stack = [(root, False)]
        while stack:
            c, expanded = stack.pop()
            if c in level:
                continue
            kids = eg.node_children[selection[c]]
            if not expanded:
                stack.append((c, True))
                stack.extend((d, False) for d in kids if d not in level)
                continue
            level[c] = max((level[d] + 1 for d in kids if comp.get(d) == comp.get(c)), default=0)
    return level


# -------------------------------------------------------------------------------------------- solve
#: seconds between two progress lines about improving solutions (the final line always comes)
PROGRESS_EVERY = 0.5


@functools.cache
def _solution_times() -> type:
    """The solution callback class (built once, on first use: its base class is CP-SAT's)."""

    class SolutionTimes(cp_sat().CpSolverSolutionCallback):  # type: ignore[misc]
        """Records when CP-SAT reports each solution (``perf_counter`` time) and passes its objective and bound
        (scaled, as the model has them) to ``on_solution``."""

        def __init__(self, on_solution: Callable[[float, float, float], None] | None = None) -> None:
            super().__init__()
            self.times: list[float] = []
            self.on_solution = on_solution

        def on_solution_callback(self) -> None:
            """Called by CP-SAT for each solution it finds: note the time."""
            now = time.perf_counter()
            self.times.append(now)
            if self.on_solution is not None:
                self.on_solution(now, self.objective_value, self.best_objective_bound)

    return SolutionTimes


def solve_model(em: ExtractionModel, *, time_limit: float, num_workers: int, random_seed: int | None,
                log_progress: bool, solution_times: list[float] | None = None,
                on_solution: Callable[[float, float, float], None] | None = None
                ) -> tuple[cp_model.CpSolver, int]:
    """Run CP-SAT on the model; returns the solver and its status. With ``solution_times`` (a list), the
    ``perf_counter`` time of each solution the solver reports is appended to it (the last is the solution
    it returns); ``on_solution(time, objective, bound)`` is called for each one (from a solver thread), with
    the objective and bound as the model has them (scaled by ``em.scale``).

    Ctrl-C stops the solve and raises :class:`KeyboardInterrupt` (CP-SAT's own handler would take it as "stop
    searching" and return the solution so far as if time had run out)."""
    solver = cp_sat().CpSolver()
    p = solver.parameters
    p.max_time_in_seconds = max(0.01, float(time_limit))
    p.num_workers = max(1, int(num_workers))
    if random_seed is not None:
        p.random_seed = int(random_seed)
    p.log_search_progress = bool(log_progress)
    p.catch_sigint_signal = False
    if solution_times is None and on_solution is None:
        return solver, _solve_interruptibly(solver, em.model, None)
    times: Any = _solution_times()(on_solution)
    status = _solve_interruptibly(solver, em.model, times)
    if solution_times is not None:
        solution_times.extend(times.times)
    return solver, status


def _solve_interruptibly(solver: cp_model.CpSolver, model: cp_model.CpModel,
                         callback: cp_model.CpSolverSolutionCallback | None) -> int:
    """``solver.solve(model, callback)``; in the main thread, one that Ctrl-C stops within a fraction of a second.

    Python runs its SIGINT handler only in the main thread, between bytecodes, never while that thread is
    inside the solver: so the solve runs in a worker thread while the main thread waits in short slices, and on
    KeyboardInterrupt the search is stopped, the worker waited for and the interrupt raised again."""
    if threading.current_thread() is not threading.main_thread():
        return solver.solve(model, callback)
    outcome: list[int | BaseException] = []
    done = threading.Event()

    def work() -> None:
        try:
            outcome.append(solver.solve(model, callback))
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            outcome.append(e)
        finally:
            done.set()

    # not a daemon: the interpreter must not exit (and abort) while the solver's threads still run. The main
    # thread waits on an Event, not in join(): in Python < 3.13 a join interrupted by Ctrl-C can mark the
    # thread as ended while it still runs
    worker = threading.Thread(target=work, name="cpsat-solve")
    try:
        worker.start()
        while not done.wait(0.1):
            pass
    except KeyboardInterrupt:
        # stop_search does nothing until solve() has set the search up: ask again until the solve returns
        give_up = time.monotonic() + 1.5
        while not done.is_set() and worker.is_alive() and time.monotonic() < give_up:
            solver.stop_search()
            done.wait(0.05)
        raise
    worker.join()
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result


def decode(em: ExtractionModel, eg: SerializedEGraph, solver: cp_model.CpSolver) -> dict[str, str]:
    """The solver's chosen nodes, restricted to the classes reachable from the roots."""
    values = solver.response_proto.solution
    chosen = {eg.node_class[n]: n for n, x in em.node_vars.items() if values[x.index]}
    selection: dict[str, str] = {}
    stack = list(eg.roots)
    seen = set(stack)
    while stack:
        c = stack.pop()
        n = chosen.get(c)
        if n is None:  # invalid; the validator will say so
            continue
        selection[eg.class_ids[c]] = eg.node_ids[n]
        for d in eg.node_children[n]:
            if d not in seen:
                seen.add(d)
                stack.append(d)
    return selection


def _rounding_slack(em: ExtractionModel, selection: dict[str, str]) -> float:
    """How much integer rounding of the costs can hide: half a unit per chosen node, plus float noise."""
    return (0.0 if em.scale == 1.0 else 0.5 * len(selection) / em.scale) + 1e-9


def _relative_gap(cost: float, bound: float) -> float:
    diff = max(0.0, cost - bound)
    denom = max(abs(cost), abs(bound))
    return 0.0 if diff == 0.0 else diff / denom


def _choose(em: ExtractionModel, eg: SerializedEGraph, solver: cp_model.CpSolver, status: int,
            kept_sel: dict[str, str], kept_cost: float) -> _Choice:
    """Pick the solver's solution or the incumbent (greedy's, or the caller's start where cheaper): (selection,
    cost, status, bound); status ``"greedy"`` means the incumbent was kept."""
    cp_model = cp_sat()
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return kept_sel, kept_cost, "greedy", None
    bound: float | None = solver.best_objective_bound / em.scale
    cp_sel = decode(em, eg, solver)
    try:
        cp_cost = validate_selection(eg, cp_sel)
    except InvalidExtraction as e:  # a model bug must never cost the caller a valid answer
        warnings.warn(f"CP-SAT solution rejected by the validator ({e}); keeping the incumbent",
                      RuntimeWarning, stacklevel=3)
        return kept_sel, kept_cost, "greedy", None
    if status == cp_model.OPTIMAL:
        if cp_cost > kept_cost + _rounding_slack(em, cp_sel):
            warnings.warn(f"CP-SAT 'optimal' cost {cp_cost} exceeds the incumbent's cost {kept_cost}; "
                          "keeping the incumbent", RuntimeWarning, stacklevel=3)
            return kept_sel, kept_cost, "greedy", None
        # equal up to cost rounding: whichever is cheaper is optimal
        return (cp_sel, cp_cost, "optimal", cp_cost) if cp_cost <= kept_cost else \
            (kept_sel, kept_cost, "optimal", kept_cost)
    if bound is not None and not math.isfinite(bound):
        bound = None
    if cp_cost < kept_cost:
        return cp_sel, cp_cost, "feasible", bound
    return kept_sel, kept_cost, "greedy", bound


# ----------------------------------------------------------------------------------------- progress
class _ProgressLines:
    """Progress lines of one extraction: the solver's improving solutions (at most one every
    :data:`PROGRESS_EVERY` seconds) and the outcome, each with the time since ``began``."""

    def __init__(self, say: Callable[[str], None], scale: float, began: float) -> None:
        self.say, self.scale, self.began = say, scale, began
        self.last = -math.inf

    def solution(self, now: float, objective: float, bound: float) -> None:
        """An improving solution of the solver (objective and bound scaled as the model has them)."""
        if now - self.last < PROGRESS_EVERY:
            return
        self.last = now
        cost, low = objective / self.scale, bound / self.scale
        low = min(low, cost) if math.isfinite(low) else None  # cost rounding can put the bound a hair above
        self.say(f"cpsat: cost {cost:.6g} ({_bound_text(cost, low)}), {now - self.began:.1f} s")

    def outcome(self, cost: float, status: str, bound: float | None) -> None:
        """The extraction returned: its cost and status."""
        self.say(f"cpsat: done, cost {cost:.6g} ({status}; {_bound_text(cost, bound)}), "
                 f"{time.perf_counter() - self.began:.1f} s")


def _bound_text(cost: float, bound: float | None) -> str:
    if bound is None:
        return "no bound"
    return f"bound {bound:.6g}, gap {_relative_gap(cost, bound):.1%}"


# ------------------------------------------------------------------------------------------- driver
@dataclass(frozen=True)
class Incumbent:
    """The answer before solving: greedy's selection, or the caller's start where that is cheaper."""

    choices: dict[int, int]  # class index -> node index: the solver's hint
    selection: dict[str, str]
    cost: float
    status: str  # "greedy" or "start"
    greedy_cost: float


def incumbent(eg: SerializedEGraph, start: Mapping[str, str] | None,
              cost_of: Callable[[Mapping[str, str]], float] | None = None) -> Incumbent:
    """Greedy's selection, or the part of ``start`` reachable from the roots where that costs less under
    ``cost_of`` (a selection's cost; the validator's DAG cost by default). An invalid ``start`` raises
    :class:`InvalidExtraction`."""
    price = cost_of or (lambda sel: validate_selection(eg, sel))
    greedy = greedy_choices(eg)
    greedy_sel = {eg.class_ids[c]: eg.node_ids[n] for c, n in greedy.items()}
    greedy_cost = price(greedy_sel)
    if start is not None:
        start_sel = reachable_part(eg, start)
        start_cost = price(start_sel)
        if start_cost < greedy_cost:
            choices = {eg.class_index[c]: eg.node_index[n] for c, n in start_sel.items()}
            return Incumbent(choices, start_sel, start_cost, "start", greedy_cost)
    return Incumbent(greedy, greedy_sel, greedy_cost, "greedy", greedy_cost)


def extract_cpsat(eg: SerializedEGraph, *, time_limit: float = 60.0, num_workers: int = 8,
                  random_seed: int | None = None, log_progress: bool = False,
                  start: Mapping[str, str] | None = None,
                  progress: Callable[[str], None] | None = None) -> Extraction:
    """Minimum-DAG-cost acyclic extraction with CP-SAT, never worse than the greedy DAG extraction, nor than
    ``start`` when one is given.

    ``start`` is a known valid selection (class id -> node id, e.g. the input graph's own term): when it is
    cheaper than greedy's it is the incumbent, the solver's hint and the answer unless CP-SAT improves on it
    (status ``"start"``). An invalid ``start`` raises :class:`InvalidExtraction` before any solving.

    ``time_limit`` (seconds) covers the whole call: greedy, pruning and model building use part of it and
    the solver gets the rest. The returned cost is recomputed by the independent validator. Status is
    ``"optimal"`` when CP-SAT proved optimality, ``"feasible"`` when it found a strictly cheaper
    unproven solution, ``"start"`` when ``start`` was cheaper than greedy and is returned, else ``"greedy"``
    (greedy selection returned); ``bound`` is still reported when known.

    ``progress`` gets one-line messages: the model's size before solving, each improving solution of the
    solver (at most one every :data:`PROGRESS_EVERY` seconds; from a solver thread) and the outcome, e.g.
    ``cpsat: cost 12.34 (bound 11.9, gap 3.6%), 1.2 s``. Ctrl-C raises :class:`KeyboardInterrupt` promptly
    (:func:`solve_model`).

    Raises:
        NoFiniteChoice: a class needed from a root has no acyclic choice (so no extraction exists).
    """
    began = time.perf_counter()
    first = incumbent(eg, start)
    best, best_sel, best_cost, best_status = first.choices, first.selection, first.cost, first.status

    em = build_model(eg, prune(eg, best_cost))
    add_hint(em, eg, best)
    remaining = time_limit - (time.perf_counter() - began)
    lines = None if progress is None else _ProgressLines(progress, em.scale, began)
    if progress is not None:
        progress(f"cpsat: {em.stats['nodes']} e-nodes, {em.stats['classes']} e-classes after pruning; start "
                 f"cost {best_cost:.6g} ({best_status}); solving for up to {max(0.0, remaining):.1f} s")
    times: list[float] = []
    solver, status = solve_model(em, time_limit=remaining, num_workers=num_workers, random_seed=random_seed,
                                 log_progress=log_progress, solution_times=times,
                                 on_solution=None if lines is None else lines.solution)

    selection, cost, result_status, bound = _choose(em, eg, solver, status, best_sel, best_cost)
    if result_status == "greedy":  # _choose kept the incumbent
        result_status = best_status
    if bound is not None:
        bound = min(bound, cost)  # rounding of the scaled costs must not report a bound above the cost
    gap = None if bound is None else _relative_gap(cost, bound)
    # the solver's own solution (not the incumbent kept) was found when it reported its last one
    found = times[-1] - began if times and selection is not best_sel else None
    if lines is not None:
        lines.outcome(cost, result_status, bound)
    return Extraction(selection=selection, cost=cost, status=result_status, bound=bound, gap=gap,
                      seconds=time.perf_counter() - began, solver="cpsat", greedy_cost=first.greedy_cost,
                      found_after=found)
