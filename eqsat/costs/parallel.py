"""What a whole IR graph costs on a runtime that runs independent operators at once: its total, its critical
path (the dearest chain of dependent operators) and AutoGraph's mixed cost of the two
(:class:`eqsat.extract.ParallelCost`), and the objective an optimization run compares graphs by.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from eqsat.costs.base import CostModel
from eqsat.costs.graph import graph_cost, graph_cost_keys
from eqsat.extract import ParallelCost
from eqsat.ir.graph import Graph


@dataclass(frozen=True)
class ParallelFigures:
    """A graph's total (ms), critical path (ms) and mixed cost under a :class:`ParallelCost`."""

    total: float
    critical_path: float
    mixed: float

    def describe(self) -> str:
        """"total 1.2 ms, critical path 0.8 ms, mixed 1.4"."""
        return f"total {self.total:.4g} ms, critical path {self.critical_path:.4g} ms, mixed {self.mixed:.4g}"


def critical_path(graph: Graph, node_cost: Mapping[str, float]) -> float:
    """The longest path through ``graph`` by its nodes' costs (``node_cost``, by the tensor each computes): each
    node finishes its cost after its inputs' latest finish (a graph input or weight at 0)."""
    finish: dict[str, float] = {}
    for n in graph.nodes:
        finish[n.output] = node_cost[n.output] + max((finish.get(i, 0.0) for i in n.inputs), default=0.0)
    return max((finish.get(o, 0.0) for o in graph.outputs), default=0.0)


def graph_parallel_cost(graph: Graph, cost_model: CostModel, parallel: ParallelCost) -> ParallelFigures:
    """The total, critical path and mixed cost of ``graph``: each node costs what :func:`graph_cost` counts for it
    (work on weights only is free)."""
    keys = graph_cost_keys(graph)
    costs = cost_model.costs({k for ks in keys for k in ks})
    own = {n.output: float(sum(costs[k] for k in ks)) for n, ks in zip(graph.nodes, keys, strict=True)}
    total, critical = sum(own.values()), critical_path(graph, own)
    return ParallelFigures(total, critical, parallel.of(total, critical))


@dataclass(frozen=True)
class Objective:
    """What an optimization run compares graphs by: the sum of their operators' costs, or with ``parallel`` the
    mixed critical-path cost for a runtime that runs that many branches at once."""

    parallel: ParallelCost | None = None

    def __call__(self, graph: Graph, cost_model: CostModel) -> float:
        if self.parallel is None:
            return graph_cost(graph, cost_model)
        return graph_parallel_cost(graph, cost_model, self.parallel).mixed

    @property
    def name(self) -> str:
        """"sum of operator costs" or "total + 0.25 x critical path, 2 branches at once"."""
        if self.parallel is None:
            return "sum of operator costs"
        p = self.parallel
        at_once = "any number of branches" if p.branches is None else \
            f"{p.branches} branch{'es' * (p.branches > 1)}"
        return f"total + {p.alpha:g} x critical path, {at_once} at once"


#: the sum of operator costs (TASO's and Tensat's objective)
SUM = Objective()
