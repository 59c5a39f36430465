"""The cost of a whole IR graph: the sum of its nodes' costs, each node priced as what it runs as once exported."""

from __future__ import annotations

from eqsat.costs.base import CostModel
from eqsat.ir.graph import Graph, computed_from_weights
from eqsat.ir.precision import in_precision, tensor_precisions
from eqsat.ir.symbols import costed_at
from eqsat.ops import CostKey


def graph_cost_keys(graph: Graph) -> list[tuple[CostKey, ...]]:
    """Cost keys of each node of an IR graph (what it runs as once exported), in the node's precision; none for
    work on weights only, which export precomputes."""
    shapes = graph.shapes
    const = set(graph.weights)
    at = costed_at(graph)  # a graph with symbols is priced at its price points
    precision = tensor_precisions(graph)  # a mixed-precision graph: each node in its own
    keys: list[tuple[CostKey, ...]] = []
    for n in graph.nodes:
        if computed_from_weights(n.op, n.inputs, const):  # constants and weight transforms
            const.add(n.output)
            keys.append(())
        else:
            own = n.spec.cost_keys(n.p, [shapes[i] for i in n.inputs], shapes[n.output],
                                   weights=[k for k, i in enumerate(n.inputs) if i in const])
            keys.append(tuple(c for k in in_precision(own, precision.get(n.output)) for c in at(k)))
    return keys


def graph_cost(graph: Graph, cost_model: CostModel) -> float:
    """Sum of per-node costs of an IR graph under ``cost_model``."""
    keys = [k for ks in graph_cost_keys(graph) for k in ks]
    costs = cost_model.costs(set(keys))
    return float(sum(costs[k] for k in keys))
