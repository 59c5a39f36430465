"""The end-to-end check of an optimized model: it and the other extracted candidates are timed against the
original in onnxruntime, the fastest is raced against the original once more, and it is kept only if it
wins both times by the latency margin (:func:`race`)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import onnx

from eqsat import onnx_io
from eqsat.costs import CostModel, graph_cost
from eqsat.costs.measured_cpu import end_to_end_rounds
from eqsat.engine.egraph import EGraph
from eqsat.engine.readback import graph_from_selection
from eqsat.extract import Extraction
from eqsat.ir.graph import Graph, graph_hash
from eqsat.pipeline.result import CandidateTiming

#: Graphs extracted and timed end to end when the latency check runs and ``candidates`` is not given.
DEFAULT_CANDIDATES = 4
#: About how long the end-to-end timing of the original and the candidates takes (fewer rounds for large
#: models, never fewer than 7)
LATENCY_BUDGET_S = 2.0


@dataclass(frozen=True)
class Candidate:
    """One extracted graph as written, with its cost and its ONNX model."""

    rank: int  # its extraction's place, 0 = the cost model's first choice
    graph: Graph
    cost: float
    model: onnx.ModelProto


@dataclass(frozen=True)
class Race:
    """What timing the candidates against the original found."""

    winner: Candidate  # the candidate that ran fastest against the original
    latency: tuple[float, float]  # median ms of the original and of the winner, in the race
    timings: list[CandidateTiming]  # every candidate's, when there were several
    confirmed: float | None  # the winner's speedup when timed again; None if it lost the race
    faster: bool  # the winner beat the original by the margin both times


def latencies(models: list[onnx.ModelProto], graph: Graph, cost_model: CostModel) -> list[list[float]]:
    """End-to-end latencies (ms) of ``models`` per interleaved round, with the cost model's threads (what the
    user will run)."""
    feeds = onnx_io.random_feeds(graph, seed=0)
    return end_to_end_rounds(models, [feeds] * len(models), threads=cost_model.threads, budget_s=LATENCY_BUDGET_S)


def round_ratio(original: Sequence[float], candidate: Sequence[float]) -> float:
    """How much faster a candidate ran: the median over rounds of original / candidate time (drift during the
    timing hits both alike within a round)."""
    return statistics.median(a / b for a, b in zip(original, candidate, strict=True))


def other_candidates(extractions: Sequence[Extraction], egraph: EGraph, names: Mapping[str, str], original: Graph,
                     first: Graph, cost_before: float, cost_model: CostModel) -> list[Candidate]:
    """The extractions after the first (``extractions``, ranked from 1) as candidates: distinct graphs no
    costlier than the original."""
    seen = {graph_hash(first)}
    out = []
    for rank, e in enumerate(extractions, start=1):
        _, g = graph_from_selection(egraph, e.selection, original, names)
        h = graph_hash(g)
        cost = graph_cost(g, cost_model)
        if h in seen or cost > cost_before:
            continue
        seen.add(h)
        out.append(Candidate(rank, g, cost, onnx_io.to_onnx(g)))
    return out


def race(original: onnx.ModelProto, candidates: Sequence[Candidate], graph: Graph, cost_model: CostModel,
         margin: float, say: Callable[[str], None]) -> Race:
    """Time ``candidates`` (the first choice first) against ``original`` end to end; the one with the best
    round-by-round ratio to the original wins, and if it beats the original by ``margin`` it is timed against it
    once more, in rounds of its own, and must beat it again."""
    rounds = latencies([original] + [c.model for c in candidates], graph, cost_model)
    times = [statistics.median(r) for r in rounds]
    # each candidate against the original round by round (drift during the timing hits both alike)
    ratios = [round_ratio(rounds[0], r) for r in rounds[1:]]
    best = max(range(len(candidates)), key=ratios.__getitem__)
    timings = [CandidateTiming(c.rank, c.cost, times[k + 1], k == best) for k, c in enumerate(candidates)]
    latency = (times[0], times[best + 1])
    say(f"end to end: original {latency[0]:.4f} ms, optimized {latency[1]:.4f} ms")
    confirmed = None
    if ratios[best] * (1 - margin) >= 1:  # again, apart from the race it won
        confirmed = round_ratio(*latencies([original, candidates[best].model], graph, cost_model))
        say(f"end to end, again: {confirmed:.3f}x")
    faster = confirmed is not None and confirmed * (1 - margin) >= 1
    return Race(candidates[best], latency, timings if len(candidates) > 1 else [], confirmed, faster)
