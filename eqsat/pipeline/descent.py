"""The first answer: better graphs than the input, found in the driver process before the e-graph exists.

The engine's first e-graph exists only once its process has started and loaded the program (0.1-0.3 s on 2 cores),
while a search that rewrites the graph itself (TASO's backtracking) has its first better graph within milliseconds
of the import. So a run starts with two cheap steps over the imported graph, in this process, priced by the run's
cost model as the searches price (:class:`~eqsat.pipeline.neighbours.GraphCoster`):

1. :func:`first_merges`, right after the import: the registry's sibling merges (``OpSpec.sibling_merge``: matrix
   products or convolutions sharing their first input as one, n-way at once, :func:`eqsat.ir.passes.sibling_merge`),
   each group kept where it lowers the cost. No search and no rule: a few milliseconds. The engine adds the same
   merges to its e-graph as alternatives (groups of three or more), so its extractions start from them too.
2. :class:`Descent`, while the engine starts and saturates (its idle hook, :func:`eqsat.engine.saturate`'s
   ``idle``): a greedy descent over the run's rules (:class:`~eqsat.pipeline.neighbours.Expander`). A pass takes
   each node of the graph as a root in turn and applies the first rewrite rooted there that lowers the cost, at
   once, to the graph as it is then; once a pass finds none, the next ones also take a rewrite that keeps the
   cost where it makes a graph not seen before (a plateau, which backtracking crosses by its relaxation: on
   SqueezeNet two convolutions' relus unfused, at no cost, make one relu after their concatenation possible),
   until a pass lowers the cost again. It ends at a local optimum (a pass that moves nowhere), after
   :data:`STALL_SECONDS` of work and :data:`STALL_PASSES` passes without a cheaper graph as written, once the
   e-graph's extractions are cheaper than its graph, or at saturation's deadline. Matches are met in
   backtracking's order, so from the same graph its first rewrite is backtracking's first better graph; but
   backtracking expands every neighbour of a graph before it moves on (one better graph per expansion), where the
   descent moves at each one. A snapshot of the e-graph waits while the descent keeps finding cheaper graphs
   (milliseconds apart; its extraction takes longer).

Each better graph goes to the anytime record (:meth:`eqsat.pipeline.anytime.Anytime.offer_graph`) at the time it
was found. It is a graph like any other: written when nothing later beats it, through the same export and numeric
check.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass

from eqsat.costs import CostModel
from eqsat.ir import matching as rw
from eqsat.ir.graph import Graph, GraphError, Node, computed_from_weights
from eqsat.ir.passes import flatten_concats, merge_siblings, sibling_groups, sibling_merge
from eqsat.ir.precision import tensor_precisions
from eqsat.ir.rule import Rule
from eqsat.ir.symbols import costed_at
from eqsat.pipeline.anytime import REL_EPS, Anytime
from eqsat.pipeline.neighbours import Either, Expander, GraphCoster
from eqsat.pipeline.options import OptimizeOptions

__all__ = ["DESCENT", "HEAD_START", "MERGES", "Descent", "FirstMerges", "first_answer", "first_merges"]

log = logging.getLogger(__name__)

#: the sources the anytime record names these graphs by
MERGES = "sibling merges"
DESCENT = "descent"
#: the longest a step of the descent works before it hands the driver back (an iteration's report may be waiting)
STEP_SECONDS = 0.005
#: how long the descent runs before the engine's program is compiled, while the engine process loads egglog (its
#: first graphs then do not wait for the compilation: 30-50 ms on 2 cores for TASO's graphs)
HEAD_START = 0.1
#: the descent ends after this much work (this thread's CPU time: a loaded machine does not shorten it) without a
#: cheaper graph as written (rewrites that only lower the cost of the binary concat chains it works on, such as
#: reassociations of a concat, write the same graph)
STALL_SECONDS = 0.1
#: and not before this many passes over the graph without one (a plain pass and a level one)
STALL_PASSES = 2
#: a snapshot of the e-graph waits for the descent while it found a cheaper graph within this much of its work
PATIENCE = 0.02


def first_answer(options: OptimizeOptions, graph: Graph, cost_model: CostModel) -> bool:
    """Whether a run looks for graphs before the e-graph's: with ``first_answer`` and ``anytime``, under a computed
    cost model and the sum of costs (the anytime record is repriced once a measured model's costs are known, and
    the descent prices by the sum), not for a dump (it shows the e-graph's choice) nor for a mixed-precision
    model (the descent prices each operator in one precision)."""
    o = options
    return (o.first_answer and o.anytime and not cost_model.is_measured and o.parallel is None
            and not o.dump_egraph and not tensor_precisions(graph))


@dataclass(frozen=True)
class FirstMerges:
    """The sibling merges that lower the cost: the graph with them, as written, its cost, how many groups were
    merged, and when it was ready (``time.perf_counter()``)."""

    graph: Graph
    cost: float
    groups: int
    at: float


def first_merges(graph: Graph, cost_model: CostModel, coster: GraphCoster | None = None) -> FirstMerges | None:
    """The registry's sibling merges of ``graph`` (pairs included) that lower its cost under ``cost_model``, all
    applied; None where none does. A group's gain is priced locally (its members against the merged node, the
    concatenations and the splits), and so is the graph with every gaining group: the input's cost less what
    the members and the nodes left dead cost, plus what the merges cost (the other nodes read what they read, in
    the shapes they had). A group whose merge would close a cycle is left out, one group at a time."""
    coster = coster or GraphCoster(cost_model, costed_at(graph))
    groups = sibling_groups(graph, min_size=2)
    if not groups:
        return None
    const, costs = coster.node_costs(graph)
    shapes = graph.shapes
    names = rw.name_allocator(graph)
    gaining: list[tuple[Sequence[Node], list[Node]]] = []
    added = 0.0
    for members, plan in groups:
        nodes = sibling_merge(graph, members, plan, names)
        cost = _merged_cost(nodes, shapes, const, coster)
        if cost < sum(costs[m.output] for m in members) * (1 - REL_EPS):
            gaining.append((members, nodes))
            added += cost
    if not gaining:
        return None
    try:  # all at once
        new = merge_siblings(graph, gaining)
    except GraphError:  # a merge that closes a cycle: one group at a time
        new, cost, merged = _one_by_one(graph, gaining, coster)
        return FirstMerges(new, cost, merged, time.perf_counter()) if merged else None
    members = {m.output for group, _ in gaining for m in group}
    kept = {n.output for n in new.nodes} - members  # the members' names are their pieces' now
    cost = sum(c for t, c in costs.items() if t in kept) + added
    return FirstMerges(new, cost, len(gaining), time.perf_counter())


def _merged_cost(nodes: Sequence[Node], shapes: dict[str, tuple[int, ...]], const: set[str],
                 coster: GraphCoster) -> float:
    """What the nodes of one merge cost, given the graph's weight-only tensors (a concatenation of weights is
    free: export computes it)."""
    new_shapes: dict[str, tuple[int, ...]] = {}
    made: set[str] = set()
    total = 0.0
    for n in nodes:
        ins = [new_shapes[i] if i in new_shapes else shapes[i] for i in n.inputs]
        new_shapes[n.output] = n.spec.shape(n.p, ins)
        weight_only = Either(const, made)
        if computed_from_weights(n.op, n.inputs, weight_only):
            made.add(n.output)
            continue
        total += coster.node_cost(n, ins, new_shapes[n.output],
                                  tuple(k for k, i in enumerate(n.inputs) if i in weight_only))
    return total


def _one_by_one(graph: Graph, gaining: list[tuple[Sequence[Node], list[Node]]],
                coster: GraphCoster) -> tuple[Graph, float, int]:
    """The merges of ``gaining`` added one at a time, each kept where the graph with it costs less."""
    kept: list[tuple[Sequence[Node], list[Node]]] = []
    best, cost = graph, coster(graph)
    for merge in gaining:
        try:
            new = merge_siblings(graph, [*kept, merge])
        except GraphError:
            continue
        c = coster(new)
        if c < cost * (1 - REL_EPS):
            kept.append(merge)
            best, cost = new, c
    return best, cost, len(kept)


class _Never:
    """A deadline that never comes: a step of the descent ends between two rewrites tried, which it resumes."""

    def out(self) -> bool:
        return False


class Descent:
    """The greedy descent over ``rules`` from ``graph`` (see the module docstring), run a step at a time by
    :meth:`step`; each better graph is offered to ``anytime`` (and said to ``say``). ``deadline`` (a
    ``perf_counter`` time) ends it."""

    def __init__(self, graph: Graph, rules: Sequence[Rule], cost_model: CostModel, anytime: Anytime, *,
                 deadline: float | None = None, coster: GraphCoster | None = None,
                 say: Callable[[str], None] | None = None) -> None:
        self.anytime = anytime
        self.deadline = deadline
        self.say = say or (lambda line: None)  # a line for each better graph found
        self._start, self._rules = graph, rules
        self.coster = coster or GraphCoster(cost_model, costed_at(graph))
        #: the graph (concats as binary chains, as the rules read them) and its cost in those terms; set by the
        #: first step, so that making a descent costs the engine's start nothing
        self.graph = graph
        self.cost = math.inf
        self.written_cost = self.anytime.best.cost  # the cost as written of the graph it goes on from (the best)
        self._cpu = 0.0  # its CPU seconds of work (steps)
        self._gained_at = 0.0  # its CPU seconds when the cost as written last went down (0: never yet)
        self._passes_at_gain = 0  # the passes finished then
        self._changed_at = 0.0  # perf_counter() when the graph last changed
        self._work = self._passes()
        #: whether it has ended (a local optimum, overtaken by the e-graph, or the deadline), and why
        self.done = False
        self.ended = ""
        #: rewrites applied that lowered the cost and that kept it, passes over the graph finished, seconds worked
        self.applied = 0
        self.level_moves = 0
        self.passes = 0
        self.seconds = 0.0

    def _passes(self) -> Iterator[None]:
        """The descent, yielding after its setup and after each root tried."""
        self.graph = rw.prepare(self._start)
        self.expander = Expander(self.graph, self._rules, self.coster, 2 * max(len(self.graph.nodes), 1))
        self.cost = self._offered = self.coster(self.graph)
        self.eps = REL_EPS * max(abs(self.cost), 1e-9)
        self.hash = rw.structure_hash(self.graph)
        self._seen = {self.hash}
        yield
        level = False  # whether rewrites that keep the cost are taken too: once a pass has found none that lowers it
        while True:
            lowered = kept = False
            for root in [n.output for n in self.graph.nodes]:
                if root in self.graph.producers:
                    moved = yield from self._move_at(root, level)
                    lowered, kept = lowered or moved == "lowered", kept or moved == "kept"
                yield
            self.passes += 1
            if lowered or kept:
                level = not lowered
            elif level:
                return
            else:
                level = True

    def _move_at(self, root: str, level: bool) -> Generator[None, None, str]:
        """Apply the first rewrite rooted at ``root`` that lowers the cost, else, with ``level``, the first that keeps
        it and makes a graph not seen before (unfusing a relu from a convolution is free, and lets two relus become
        one: a plateau backtracking crosses by its relaxation); returns ``"lowered"``, ``"kept"`` or ``""`` (none).
        Yields after each rewrite tried: a root with thousands of matches (a two-output rule over a thousand
        products of one weight) holds no step for long."""
        flat = None
        for _, _, c, hash_of, build in self.expander.neighbours(self.graph, self.cost, self.hash, _Never(),
                                                                roots=[root]):
            if c < self.cost - self.eps:
                if self._apply(c, hash_of, build):
                    self.applied += 1
                    return "lowered"
            elif level and flat is None and c <= self.cost + self.eps:
                h = hash_of()
                if h not in self._seen:
                    flat = (c, lambda h=h: h, build)
            yield
        if flat is not None and self._apply(*flat):
            self.level_moves += 1
            return "kept"
        return ""

    def _apply(self, cost: float, hash_of: Callable[[], int], build: Callable[[], Graph]) -> bool:
        """Move to the neighbour ``build`` makes; False where it cannot be built (a cycle)."""
        h = hash_of()
        try:
            new = build()
        except rw.NotApplicable:  # a two-output rewrite that closes a cycle
            return False
        self.graph, self.cost, self.hash = new, cost, h
        self._seen.add(h)
        self._changed_at = time.perf_counter()
        return True

    def step(self, seconds: float = STEP_SECONDS) -> bool:
        """Work for about ``seconds`` (one rewrite tried at least), offer the graph if it got cheaper, and return
        whether there is more to do."""
        if self.done:
            return False
        began = time.perf_counter()
        if self.deadline is not None and began >= self.deadline:
            return self._end("saturation's deadline")
        if self._overtaken():
            return self._end("the e-graph's extractions are cheaper")
        end = began + seconds
        cpu = time.thread_time()
        try:
            while True:
                next(self._work)
                if time.perf_counter() >= end:
                    break
        except StopIteration:
            self._end("a local optimum")
        self._cpu += time.thread_time() - cpu
        before = self.anytime.best.cost
        if self._offer():
            self._gained_at, self._passes_at_gain = self._cpu, self.passes
            best = self.anytime.best
            if best.cost < before:
                self.say(f"  best so far: {best.cost:.6g} ({best.source}, {best.seconds:.2f} s)")
        self.seconds += time.perf_counter() - began
        # not before a pass that takes only cheaper rewrites and one that takes level ones too have both ended:
        # what a pass meets first depends on the order of the matches, which must not decide where it stops
        if not self.done and self._cpu - self._gained_at > STALL_SECONDS \
                and self.passes - self._passes_at_gain >= STALL_PASSES:
            self._end(f"no cheaper graph as written for {STALL_SECONDS:g} s of work")
        return not self.done

    def _end(self, why: str) -> bool:
        self.done, self.ended = True, why
        log.debug("descent: %s", self.describe())
        return False

    def describe(self) -> str:
        """What it did, in words."""
        return (f"{self.applied} rewrite(s) lowering the cost and {self.level_moves} keeping it in {self.passes} full "
                f"pass(es), {self.seconds:.2f} s"
                + (f"; ended: {self.ended}" if self.ended else "; cut short by the end of saturation"))

    def before_snapshot(self) -> None:
        """Go on while the descent may still find its first cheaper graph (for :data:`STALL_SECONDS` of work: it
        crosses a plateau first on SqueezeNet), or found one within :data:`PATIENCE` of its work: a snapshot of the
        e-graph waits, its extraction taking longer than the descent's next graphs. Otherwise the snapshot goes
        first, and the descent goes on once it is extracted."""
        while (not self._gained_at or self._cpu - self._gained_at < PATIENCE) and self.step():
            pass

    def _overtaken(self) -> bool:
        """Whether the best graph so far is cheaper than the descent's (the e-graph's extractions passed it)."""
        return self.anytime.best.cost < self.written_cost * (1 - REL_EPS)

    def _offer(self) -> bool:
        """Offer the graph as written where it got cheaper since it was last offered; whether its cost as written
        went down."""
        if not self.cost < self._offered - self.eps:
            return False
        self._offered = self.cost
        written = flatten_concats(self.graph).live()
        cost = self.coster(written)
        if not cost < self.written_cost * (1 - REL_EPS):
            return False
        self.written_cost = cost
        self.anytime.offer_graph(written, cost, DESCENT, self._changed_at - self.anytime.start)
        return True
