"""The graphs one rewrite away from an IR graph, each priced from its parent's costs: the move of the first
answer's descent (:mod:`eqsat.pipeline.descent`) and of the baseline searches (:mod:`eqsat.search`), which share it
so that both apply the same rules, with the same shape guards (:mod:`eqsat.ir.matching`), priced the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from eqsat.costs import CostModel
from eqsat.ir import matching as rw
from eqsat.ir.graph import Graph, computed_from_weights, make_node
from eqsat.ir.rule import Rule
from eqsat.ops import CostKey

__all__ = ["Deadline", "Either", "Expander", "GraphCoster"]


class Deadline(Protocol):
    """When to stop: ``out()`` is true once the time is up."""

    def out(self) -> bool:
        """Whether the time is up."""
        ...


class GraphCoster:
    """Sum of per-node costs, the same as :func:`eqsat.costs.graph_cost`, with each operator configuration
    priced once (work on weights only is free: export precomputes it)."""

    def __init__(self, cost_model: CostModel, at: Callable[[CostKey], tuple[CostKey, ...]] | None = None) -> None:
        self.cost_model = cost_model
        self.at = at or (lambda key: (key,))  # a graph with symbols: keys at its price points (costed_at)
        self._keys: dict[tuple[Any, ...], float] = {}
        self._prices: dict[CostKey, float] = {}

    def node_cost(self, node: Any, in_shapes: Sequence[tuple[int, ...]], out_shape: tuple[int, ...],
                  const_inputs: tuple[int, ...]) -> float:
        """Cost of one node given which inputs are constant."""
        key = (node.op, node.params, tuple(in_shapes), const_inputs)
        c = self._keys.get(key)
        if c is None:
            keys = tuple(c for k in node.spec.cost_keys(node.p, in_shapes, out_shape, weights=const_inputs)
                         for c in self.at(k))
            missing = [k for k in keys if k not in self._prices]
            if missing:
                self._prices.update(self.cost_model.costs(missing))
            c = self._keys[key] = float(sum(self._prices[k] for k in keys))
        return c

    def node_costs(self, graph: Graph) -> tuple[set[str], dict[str, float]]:
        """(the tensors computed from weights only, each node's cost), in one pass over the graph."""
        shapes = graph.shapes
        const = set(graph.weights)
        costs: dict[str, float] = {}
        for n in graph.nodes:
            if computed_from_weights(n.op, n.inputs, const):
                const.add(n.output)
                costs[n.output] = 0.0
            else:
                costs[n.output] = self.node_cost(n, [shapes[i] for i in n.inputs], shapes[n.output],
                                                 tuple(k for k, i in enumerate(n.inputs) if i in const))
        return const, costs

    def __call__(self, graph: Graph) -> float:
        return sum(self.node_costs(graph)[1].values())


class Either:
    """Membership in either of two sets (the weight-only tensors of a graph and of a rewrite's new nodes)."""

    def __init__(self, a: set[str], b: set[str]) -> None:
        self.a, self.b = a, b

    def __contains__(self, name: object) -> bool:
        return name in self.a or name in self.b


class Expander:
    """Generates the graphs one rule application away from a graph, pricing each from its parent's costs
    (only the nodes a rewrite adds or leaves dead change) and building it only when asked."""

    def __init__(self, graph: Graph, rules: Sequence[Rule], coster: GraphCoster, max_nodes: int) -> None:
        self.matcher = rw.Matcher(rules)
        self.coster = coster
        self.max_nodes = max_nodes
        self.names = rw.name_allocator(graph)

    def neighbours(self, graph: Graph, cost: float, ghash: int, clock: Deadline,
                   roots: Sequence[str] | None = None
                   ) -> Iterator[tuple[rw.Match, rw.Rewrite, float, Callable[[], int], Callable[[], Graph]]]:
        """Yields (match, rewrite, cost of the new graph, functions giving its
        :func:`~eqsat.ir.matching.structure_hash` and building it) until the clock runs out; with ``roots``, only
        the rewrites of matches whose first root is one of them."""
        const, costs = self._node_costs(graph)
        shapes = graph.shapes
        for m in self.matcher.matches(graph, roots):
            if clock.out():
                return
            try:
                change = rw.build_rewrite(m, graph, self.names)
            except rw.NotApplicable:
                continue
            dead = rw.dead_after(graph, change)
            gone = change.removed | dead
            if len(graph.nodes) - len(gone) + len(change.added) >= self.max_nodes:
                continue
            new_shapes = dict(change.shapes)
            new_const: set[str] = set()
            weight_only = Either(const, new_const)
            c = cost - sum(costs[t] for t in gone)
            for n in change.added:
                if computed_from_weights(n.op, n.inputs, weight_only):
                    new_const.add(n.output)
                    continue
                ins = [new_shapes.get(i) or shapes[i] for i in n.inputs]
                c += self.coster.node_cost(n, ins, new_shapes[n.output],
                                           tuple(k for k, i in enumerate(n.inputs) if i in weight_only))
            roots_const = [r in const for r in m.roots]
            stands_for = dict(change.replace)
            for o in dict.fromkeys(graph.outputs):  # an output replaced by an existing tensor gets an identity
                if o in stands_for and o not in new_shapes and stands_for[o] not in const:
                    ident = make_node("reshape", {"shape": shapes[o]}, [stands_for[o]], o)
                    c += self.coster.node_cost(ident, [shapes[stands_for[o]]], shapes[o], ())
            now_const = [(stands_for[r] in const) if r in stands_for else (r in new_const) for r in m.roots]
            exact = roots_const == now_const  # else costs downstream change too: price the whole graph

            def build(graph: Graph = graph, change: rw.Rewrite = change, dead: frozenset[str] = dead) -> Graph:
                return rw.apply_rewrite(graph, change, dead)

            if not exact:
                try:
                    new = build()
                except rw.NotApplicable:
                    continue
                c = self.coster(new)

                def build(new: Graph = new) -> Graph:
                    return new

            def hash_of(graph: Graph = graph, change: rw.Rewrite = change, dead: frozenset[str] = dead) -> int:
                return rw.structure_hash_after(graph, ghash, change, dead)

            yield m, change, c, hash_of, build

    def _node_costs(self, graph: Graph) -> tuple[set[str], dict[str, float]]:
        """:meth:`GraphCoster.node_costs` of ``graph``, cached on it (a descent asks once per root)."""
        cached = graph.__dict__.get("_node_costs")
        if cached is None or cached[0] is not self.coster:
            cached = graph.__dict__["_node_costs"] = (self.coster, self.coster.node_costs(graph))
        return cached[1]
