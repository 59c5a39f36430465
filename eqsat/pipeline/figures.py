"""Figures of the report computed from the graphs a run compared: the costs before and after at each price point of
a model with dynamic axes, the total, critical path and mixed cost of a run for parallel execution, the runtime
kernels written, and why the final cost differs from the extraction's objective."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from eqsat.costs import CostModel, graph_cost, graph_parallel_cost
from eqsat.engine.readback import selection_to_graph
from eqsat.ir.graph import Graph
from eqsat.ir.symbols import POINTS_KEY
from eqsat.ir.symbols import price_points as points_of
from eqsat.ops.ort_kernels import kernel_type
from eqsat.pipeline.records import Decision, Loaded, Run, Saturated
from eqsat.pipeline.result import ParallelReport, PetReport, PricePoint
from eqsat.rules.pet import chosen_rewrites


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


def pet_report(loaded: Loaded, saturated: Saturated, decision: Decision,
               dumped: Mapping[str, Any] | None = None) -> PetReport:
    """PET's corrected mutants of the run, and those the graph chosen holds: the written graph, or where the
    original is kept, the extraction's graph that was not written. ``dumped``: the report the e-graph dump holds
    already (its fields as a dict), read back instead of finding the chosen rewrites again."""
    if dumped:
        return PetReport.from_dict(dumped)
    found = list(saturated.pet)
    graph = decision.graph
    if decision.kept:
        graph = selection_to_graph(saturated.result.egraph, decision.chosen.selection, loaded.engine_graph)
    chosen = chosen_rewrites(graph, found) if found else []
    return PetReport(len(found), len({r.tensor for r in found}), sum(r.fixes for r in found),
                     float(sum(r.correction_flops for r in found)), saturated.pet_seconds,
                     tuple((r.tensor, r.name, r.fixes) for r in chosen), written=not decision.kept)


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


def kernels_written(loaded: Loaded, decision: Decision) -> dict[str, int]:
    """The runtime kernels the written model holds that this run wrote, by type: the main graph's, unless the
    original was kept, and its control-flow bodies'."""
    counts = Counter() if decision.kept else Counter(kernel_type(n.op) for n in decision.graph.nodes
                                                     if n.spec.runtime)
    for b in loaded.bodies:
        counts.update(b.kernels)
    return dict(counts)


def cost_notes(extraction_cost: float, extracted_cost: float, final_cost: float, extracted: Graph,
                final: Graph) -> list[str]:
    """Why the final cost differs from the extraction's objective, one note per cause."""
    notes = []
    tol = 1e-9 * max(1.0, abs(extraction_cost))
    if abs(extracted_cost - extraction_cost) > tol:
        aliases = sum(1 for n in extracted.nodes if n.spec.view and n.output in extracted.outputs
                      and extracted.shapes[n.output] == extracted.shapes[n.inputs[0]])
        why = f"{aliases} identity node(s) for outputs that share a tensor" if aliases else "graph read-back"
        notes.append(f"{extracted_cost - extraction_cost:+.4g} ms: {why}")
    if abs(final_cost - extracted_cost) > tol:
        merged = sum(n.spec.variadic for n in extracted.nodes) - sum(n.spec.variadic for n in final.nodes)
        notes.append(f"{final_cost - extracted_cost:+.4g} ms: {merged} binary concat(s) merged into n-ary ones")
    return notes


def pricing_words(graph: Graph) -> str:
    """Where a graph with symbols is priced, in words."""
    points = points_of(graph)
    text = " and ".join(f"{label} " * bool(label) + ", ".join(f"{k}={v}" for k, v in sizes.items())
                        for label, sizes in points)
    return f"priced at {text}" + (" (each node the sum)" if len(points) > 1 else "")
