"""Figures of the report computed from the graphs a run compared: the costs before and after at each price point of
a model with dynamic axes, and the total, critical path and mixed cost of a run for parallel execution."""

from __future__ import annotations

from eqsat.costs import CostModel, graph_cost, graph_parallel_cost
from eqsat.ir.graph import Graph
from eqsat.ir.symbols import POINTS_KEY
from eqsat.ir.symbols import price_points as points_of
from eqsat.pipeline.records import Decision, Loaded, Run
from eqsat.pipeline.result import ParallelReport, PricePoint


def parallel_report(run: Run, loaded: Loaded, decision: Decision, cost_model: CostModel) -> ParallelReport | None:
    """The total, critical path and mixed cost before and after, for a run optimizing for parallel execution."""
    p = run.objective.parallel
    if p is None:
        return None
    race = decision.executors
    return ParallelReport(run.objective.name, p.branches or 0, p.alpha,
                          graph_parallel_cost(loaded.graph, cost_model, p),
                          graph_parallel_cost(decision.graph, cost_model, p),
                          executors="" if race is None else race.verdict, written="" if race is None else race.written,
                          medians={} if race is None else dict(race.medians),
                          session_options={} if race is None else dict(race.session_options))


def price_points(loaded: Loaded, decision: Decision, cost_model: CostModel) -> list[PricePoint]:
    """The costs before and after at each price point of a model priced at several (none: one point)."""
    points = points_of(loaded.graph)
    if len(points) < 2 and not points[0][0]:
        return []

    def at(graph: Graph, point: tuple[str, dict[str, int]]) -> float:
        return graph_cost(Graph(graph.inputs, graph.weights, graph.nodes, graph.outputs, graph.name,
                                {**graph.meta, POINTS_KEY: [point]}), cost_model)

    return [PricePoint(label, sizes, at(loaded.graph, (label, sizes)), at(decision.graph, (label, sizes)))
            for label, sizes in points]
