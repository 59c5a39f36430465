"""Anytime optimization: the best graph found so far, and when it was found.

Saturation hands over snapshots of the e-graph while it grows (``on_snapshot`` of :func:`eqsat.engine.saturate`).
Each one is priced and extracted greedily (milliseconds to a fraction of a second), warm-started from the best
graph so far, whose terms every later e-graph holds (:func:`eqsat.engine.relocate_selection`); the graph read
back is kept when it is cheaper as written. The final e-graph goes to the same greedy step, then to exact
extraction warm-started the same way. So the answer is there early, and each later step can only improve it.

:attr:`Anytime.trace` holds (seconds since the run started, best cost so far as written): it starts at the
input graph's cost and only goes down. Costs are those of the graph as written (n-ary concats, dead nodes
dropped), the figure the exported model is judged by.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from eqsat import engine
from eqsat.costs import SUM, CostModel, Objective, graph_cost_keys
from eqsat.engine import EGraph, Snapshot
from eqsat.extract import (
    Extraction,
    InvalidExtraction,
    NoFiniteChoice,
    SerializedEGraph,
    extract_cpsat,
    extract_greedy,
    validate_selection,
)
from eqsat.ir.graph import Graph
from eqsat.ir.precision import in_precision, tensor_precisions
from eqsat.ir.symbols import costed_at
from eqsat.ops import CostKey

__all__ = ["Anytime", "Found", "node_cost_keys", "opaque_cost_keys", "price_nodes"]

log = logging.getLogger(__name__)

#: a graph must be cheaper than the best by this fraction to replace it (float noise is no improvement)
REL_EPS = 1e-9


def opaque_cost_keys(graph: Graph, keys: Sequence[tuple[CostKey, ...]] | None = None
                     ) -> dict[tuple[str, int], tuple[CostKey, ...]]:
    """The cost keys of ``graph``'s opaque nodes by (opaque key, output index), as its e-graphs name them;
    ``keys``: :func:`eqsat.costs.graph_cost_keys` of ``graph`` when the caller has them already."""
    keys = graph_cost_keys(graph) if keys is None else keys
    return {(n.p["key"], n.p["index"]): ks for n, ks in zip(graph.nodes, keys, strict=True) if n.is_opaque}


def node_cost_keys(egraph: EGraph, graph: Graph,
                   opaque: Mapping[tuple[str, int], tuple[CostKey, ...]] | None = None
                   ) -> dict[str, tuple[CostKey, ...]]:
    """:func:`eqsat.engine.node_cost_keys` of an e-graph of ``graph``, its opaque e-nodes keyed as ``graph``'s
    nodes they stand for: the e-graph holds an opaque node's place, not its operator, and would be priced by an
    estimate where the graph written is priced by what the node is (a Gather of token ids: 9.4 ms vs 0.05 ms).
    ``opaque``: :func:`opaque_cost_keys` of ``graph`` when the caller has them already."""
    keys = engine.node_cost_keys(egraph)
    opaque = opaque_cost_keys(graph) if opaque is None else opaque
    at = costed_at(graph)  # an e-graph of a graph with symbols is priced at its price points
    tensors = tensor_precisions(graph)  # a mixed-precision graph: each node in its own
    precision = engine.class_precisions(egraph, graph, tensors) if tensors else {}
    for n in egraph.nodes:
        if n.is_opaque and keys[n.id] and (n.p["key"], n.p["index"]) in opaque:
            keys[n.id] = opaque[(n.p["key"], n.p["index"])]  # priced already
        elif keys[n.id]:
            keys[n.id] = tuple(c for k in in_precision(keys[n.id], precision.get(n.eclass)) for c in at(k))
    return keys


def price_nodes(egraph: EGraph, cost_model: CostModel,
                progress: Callable[[int, int], None] | None = None,
                keys: Mapping[str, tuple[CostKey, ...]] | None = None) -> dict[str, float]:
    """The cost of every e-node (ms): the operator configurations it runs as once exported, under
    ``cost_model``; nothing for leaves, lists and work on weights only. ``keys`` are the e-graph's
    :func:`eqsat.engine.node_cost_keys` when the caller has them already."""
    keys = engine.node_cost_keys(egraph) if keys is None else keys
    unique = {k for ks in keys.values() for k in ks}
    costs = cost_model.costs(unique, progress=progress) if progress else cost_model.costs(unique)
    return {nid: float(sum(costs[k] for k in ks)) for nid, ks in keys.items()}


@dataclass(frozen=True)
class Found:
    """A graph the run found.

    Attributes:
        cost: its cost as written, under the run's cost model.
        graph: the graph as written.
        seconds: when it was found, in seconds since the run started.
        source: what found it: ``"input"``, ``"sibling merges"`` and ``"descent"`` (the first answer, before the
            e-graph exists: :mod:`eqsat.pipeline.descent`), ``"greedy, iteration 3"``, ``"greedy, final e-graph"``,
            ``"cpsat"``.
        egraph: the e-graph ``selection`` chooses from (None for the input graph, and for a graph of the first
            answer until an e-graph holding all its terms is seen).
        selection: e-class -> node id of ``egraph``.
    """

    cost: float
    graph: Graph
    seconds: float
    source: str
    egraph: EGraph | None = None
    selection: Mapping[str, str] | None = None


class Anytime:
    """The best graph of one run so far, improved by each extraction offered (see the module docstring).

    ``start`` is the run's start (``time.perf_counter()``), from which the trace's seconds count. With
    ``exact_seconds`` > 0 each snapshot is also given to CP-SAT for at most that long after its greedy
    extraction, ending by ``deadline`` (a ``perf_counter`` time: when saturation must end). A solve that
    neither improves nor proves optimality halves the time the next snapshots get (it competes with the
    engine for the cores), down to nothing below 0.05 s. The stage's snapshot (where the engine paused growth,
    ``Limits.stage_nodes``: an e-graph CP-SAT can finish) gets up to ``stage_seconds`` instead, while the engine
    grows the e-graph further on the other core; the larger e-graph's extraction then starts from its result.
    """

    def __init__(self, graph: Graph, cost_model: CostModel, start: float, *, exact_seconds: float = 0.0,
                 deadline: float | None = None, written: Callable[[Graph], Graph] | None = None,
                 objective: Objective = SUM, stage_seconds: float = 0.0) -> None:
        self.input = graph
        #: a graph read back from an e-graph of ``graph`` as the model written (the repeated blocks of a reduced
        #: graph put back, :mod:`eqsat.ir.blocks`); graphs are priced as written
        self.written = written or (lambda g: g)
        self.cost_model = cost_model
        #: what graphs are compared by (the sum of their costs, or a mixed critical-path cost)
        self.objective = objective
        self.start = start
        self.exact_seconds = exact_seconds
        self.stage_seconds = stage_seconds
        self.deadline = deadline
        whole = self.written(graph)
        self.best = Found(self.objective(whole, cost_model), whole, 0.0, "input")
        #: (seconds since the start, best cost so far), one point per improvement; the input's cost first, at 0:
        #: until something better is found the input is the answer
        self.trace: list[tuple[float, float]] = [(0.0, self.best.cost)]
        #: snapshots extracted, and the seconds spent on them (in this process, beside the engine's)
        self.snapshots = 0
        self.snapshot_seconds = 0.0
        self._opaque_keys: dict[tuple[str, int], tuple[CostKey, ...]] | None = None
        #: whether the e-graphs are of the whole graph (not of one of its repeated blocks): then a graph found
        #: outside them can be looked up in them
        self._whole = written is None

    def reprice(self, cost_model: CostModel) -> None:
        """Price with ``cost_model`` from now on, the input graph's cost (the trace's start) included: a measured
        model's costs are known only after the cost stage, and the input is priced with the rest there. Only
        before any graph was found (snapshots are not extracted under a measured model)."""
        if len(self.trace) > 1:
            raise RuntimeError("reprice: graphs were already found under the earlier cost model")
        self.cost_model = cost_model
        whole = self.written(self.input)
        self.best = Found(self.objective(whole, cost_model), whole, 0.0, "input")
        self.trace = [(0.0, self.best.cost)]

    def elapsed(self) -> float:
        """Seconds since the run started."""
        return time.perf_counter() - self.start

    @property
    def cost_before(self) -> float:
        """The input graph's cost, as written."""
        return self.trace[0][1]

    def input_selection(self, egraph: EGraph) -> dict[str, str] | None:
        """The input graph's own term as a selection of ``egraph``, or None where some term of it is missing (an
        e-graph from elsewhere; never the engine's own for this graph). Extractors keep the part reachable
        from the outputs."""
        terms = engine.input_terms(egraph, self.input)
        return None if terms.missing else dict(terms.selection)

    def warm_start(self, egraph: EGraph, eg: SerializedEGraph) -> dict[str, str] | None:
        """The warm start of the final extraction: the best graph so far, or the input graph's term."""
        best = self.start_for(egraph)
        if best is not None:
            try:
                validate_selection(eg, best)
                return best
            except InvalidExtraction as e:  # never expected: relocation keeps the terms and their order
                log.warning("the best graph so far is no valid extraction of the final e-graph (%s)", e)
        return self.valid_input_selection(egraph, eg)

    def valid_input_selection(self, egraph: EGraph, eg: SerializedEGraph) -> dict[str, str] | None:
        """The input graph's term as a selection of the costed e-graph, or None where it is not a complete, valid
        one (an e-graph that lost a term; never for the engine's own)."""
        start = self.input_selection(egraph)
        if start is None:
            return None
        try:
            validate_selection(eg, start)
        except InvalidExtraction as e:
            log.warning("the input graph's term is no valid extraction (%s); extracting without it", e)
            return None
        return start

    def start_for(self, egraph: EGraph) -> dict[str, str] | None:
        """The best graph so far as a selection of ``egraph`` (an e-graph holding its terms), or None where the
        best is still the input graph or its terms are not all there."""
        b = self.best
        if b.egraph is None or b.selection is None:
            return None
        if b.egraph is egraph:
            return dict(b.selection)
        return engine.relocate_selection(b.egraph, b.selection, egraph)

    def offer(self, egraph: EGraph, selection: Mapping[str, str], names: Mapping[str, str], source: str,
              found: float | None = None) -> bool:
        """Read ``selection`` of ``egraph`` back and keep it when it is cheaper as written than the best so far
        (``found``: when it was found, seconds since the start; default now). Returns whether it was kept."""
        _, written = engine.graph_from_selection(egraph, selection, self.input, names)
        written = self.written(written)
        cost = self.objective(written, self.cost_model)
        if not cost < self.best.cost * (1 - REL_EPS):
            return False
        at = self.elapsed() if found is None else min(found, self.elapsed())
        at = max(at, self.trace[-1][0])  # the trace is in time order
        self.best = Found(cost, written, at, source, egraph, dict(selection))
        self.trace.append((at, cost))
        log.debug("anytime: %s found cost %.6g at %.2f s", source, cost, at)
        return True

    def offer_graph(self, graph: Graph, cost: float, source: str, found: float | None = None) -> bool:
        """Keep ``graph``, a whole graph as written found without an e-graph (the first answer), when its ``cost``
        under the run's objective is below the best so far (``found``: when, seconds since the start; default
        now). Returns whether it was kept."""
        if not cost < self.best.cost * (1 - REL_EPS):
            return False
        at = self.elapsed() if found is None else min(found, self.elapsed())
        at = max(at, self.trace[-1][0])
        self.best = Found(cost, graph, at, source)
        self.trace.append((at, cost))
        log.debug("anytime: %s found cost %.6g at %.3f s", source, cost, at)
        return True

    def attach(self, egraph: EGraph) -> bool:
        """Carry a best graph found without an e-graph into ``egraph`` as a selection, where ``egraph`` holds all its
        terms (the engine adds the sibling merges from its first iteration; a descent's rewrites come with the
        rules): extraction then starts from it and cannot do worse. Returns whether the best is in ``egraph``."""
        b = self.best
        if b.egraph is not None or b.source == "input" or not self._whole:
            return b.egraph is egraph
        terms = engine.input_terms(egraph, b.graph)
        # every term there, and its outputs known equal to the e-graph's (a rewrite's right-hand side is there before
        # its shape check merges it with the left-hand side)
        if terms.missing or [terms.tensor_class[o] for o in b.graph.outputs] != list(egraph.roots):
            return False
        self.best = replace(b, egraph=egraph, selection=dict(terms.selection))
        return True

    def greedy(self, egraph: EGraph, costed: SerializedEGraph, names: Mapping[str, str], source: str,
               fallback_start: Mapping[str, str] | None = None) -> Extraction | None:
        """Greedy extraction of the costed ``egraph``, warm-started from the best so far (or
        ``fallback_start`` while that is the input); offered, and returned (None if no extraction exists)."""
        start = self.start_for(egraph) or fallback_start
        try:
            ext = extract_greedy(costed, start=start)
        except InvalidExtraction as e:  # a start that is no valid selection here: extract without it
            log.warning("anytime: warm start rejected (%s); extracting without it", e)
            ext = extract_greedy(costed)
        except NoFiniteChoice:
            return None
        self.offer(egraph, ext.selection, names, source)
        return ext

    def exact(self, egraph: EGraph, costed: SerializedEGraph, names: Mapping[str, str], source: str,
              seconds: float, stage: bool = False) -> Extraction | None:
        """CP-SAT on the costed ``egraph`` for at most ``seconds``, warm-started from the best so far (which it
        never returns worse); offered at the time the solver found its solution, and returned. A solve of a
        snapshot (not the ``stage``'s) that neither improves nor proves optimality halves ``exact_seconds``."""
        start = self.start_for(egraph)
        began = time.perf_counter()
        try:
            ext = extract_cpsat(costed, time_limit=seconds, start=start)
        except (InvalidExtraction, NoFiniteChoice) as e:
            log.warning("anytime: exact extraction skipped (%s)", e)
            return None
        found = None if ext.found_after is None else began - self.start + ext.found_after
        if not self.offer(egraph, ext.selection, names, source, found) and ext.status != "optimal" and not stage:
            self.exact_seconds /= 2  # it did not pay: less of the engine's time for the next snapshots
        return ext

    def on_snapshot(self, snap: Snapshot) -> None:
        """Price a snapshot of the saturating e-graph and extract it, greedily, then exactly for at most
        ``exact_seconds`` while saturation's time lasts (the engine's ``on_snapshot``)."""
        t = time.perf_counter()
        if self.deadline is not None and t >= self.deadline:
            return
        eg = snap.egraph
        if self._opaque_keys is None:  # once a run: the input graph's opaque nodes do not change
            self._opaque_keys = opaque_cost_keys(self.input)
        keys = node_cost_keys(eg, self.input, self._opaque_keys)
        costed = eg.with_costs(price_nodes(eg, self.cost_model, keys=keys)).to_serialized()
        names = engine.tensor_names_by_class(snap)
        self.attach(eg)
        # while the best has no term here, the input's own is the start: greedy never does worse than it
        fallback = self.input_selection(eg) if self.best.egraph is None else None
        if self.greedy(eg, costed, names, f"greedy, iteration {snap.iteration}", fallback) is not None:
            seconds = max(self.exact_seconds, self.stage_seconds) if snap.stage else self.exact_seconds
            left = seconds if self.deadline is None else min(seconds, self.deadline - time.perf_counter())
            if left >= 0.05:
                self.exact(eg, costed, names, f"cpsat, iteration {snap.iteration}", left, snap.stage)
        self.snapshots += 1
        self.snapshot_seconds += time.perf_counter() - t
