"""The end-to-end check of an optimized model: it and the other extracted candidates are timed against the
original in onnxruntime, in interleaved rounds, and the one chosen is timed against the original once more; it is
kept only if both timings show a measurable gain by the latency margin (:func:`race`). A speedup is the median of
the round-by-round ratios with a distribution-free confidence interval (:func:`median_interval`)."""

from __future__ import annotations

import math
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
from eqsat.onnx_io.export import as_written
from eqsat.pipeline.result import CandidateTiming, LatencyCheck, Speedup

#: Graphs extracted and timed end to end when the latency check runs and ``candidates`` is not given.
DEFAULT_CANDIDATES = 4
#: About how long one end-to-end timing of the original and the candidates takes (fewer rounds for large
#: models, never fewer than 7; more, up to MAX_ROUNDS, for small ones)
LATENCY_BUDGET_S = 2.0
MAX_ROUNDS = 21
#: the fewest runs one end-to-end timing gives a model, however large: the run that allocates, the one that sizes
#: the rounds, 2 warm-ups and 7 rounds (:func:`eqsat.costs.measured_cpu.end_to_end_rounds`)
RUNS_PER_MODEL = 11
#: the confidence of the speedups' intervals
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Candidate:
    """One extracted graph as written, with its cost and its ONNX model."""

    rank: int  # its extraction's place, 0 = the cost model's first choice
    graph: Graph
    cost: float
    model: onnx.ModelProto


@dataclass(frozen=True)
class Race:
    """What timing the candidates against the original found (:func:`race`)."""

    winner: Candidate  # the candidate timed against the original again: the first choice unless one beat it
    check: LatencyCheck  # the timings, their intervals and the verdict
    timings: list[CandidateTiming]  # every candidate's, when there were several

    @property
    def faster(self) -> bool:
        """The winner beat the original measurably, by the margin, both times."""
        return self.check.accepted


def latencies(models: list[onnx.ModelProto], graph: Graph, cost_model: CostModel,
              budget_s: float = LATENCY_BUDGET_S) -> list[list[float]]:
    """End-to-end latencies (ms) of ``models`` per interleaved round, with the cost model's threads (what the
    user will run), in about ``budget_s`` seconds."""
    feeds = onnx_io.random_feeds(graph, seed=0)
    return end_to_end_rounds(models, [feeds] * len(models), threads=cost_model.threads, budget_s=budget_s,
                             rounds=MAX_ROUNDS)


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(low, median, high): the median of ``values`` and a distribution-free confidence interval for it, between
    two order statistics whose ranks the binomial distribution gives (the narrowest symmetric pair that covers
    the median with probability ``confidence``; with too few values for that, the smallest and the largest).
    Robust to the odd slow round a busy machine produces, which a mean's interval is not."""
    xs = sorted(values)
    n = len(xs)

    def coverage(k: int) -> float:  # P(the k-th smallest <= median <= the k-th largest)
        return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n

    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(k + 1) >= confidence:
        k += 1
    return xs[k - 1], float(statistics.median(xs)), xs[n - k]


def speedup(original: Sequence[float], candidate: Sequence[float]) -> Speedup:
    """How much faster a candidate ran than the original: per round, original time / candidate time (drift during
    the timing hits both alike within a round); their median and its confidence interval."""
    ratios = [a / b for a, b in zip(original, candidate, strict=True)]
    low, median, high = median_interval(ratios)
    return Speedup(median, low, high, len(ratios))


def other_candidates(extractions: Sequence[Extraction], egraph: EGraph, names: Mapping[str, str], original: Graph,
                     first: Graph, cost_before: float, cost_model: CostModel,
                     stitch: Callable[[Graph], Graph] | None = None) -> list[Candidate]:
    """The extractions after the first (``extractions``, ranked from 1) as candidates: distinct graphs no
    costlier than the original (``original``: the graph the e-graph was built from; ``stitch``: that graph's
    read-backs as the whole model, where it is a reduction, :mod:`eqsat.ir.blocks`)."""
    seen = {graph_hash(as_written(first))}  # graphs written alike (or alike but for Gemm's name) are one
    out = []
    for rank, e in enumerate(extractions, start=1):
        _, g = graph_from_selection(egraph, e.selection, original, names)
        g = stitch(g) if stitch else g
        cost = graph_cost(g, cost_model)
        if cost > cost_before:
            continue
        h = graph_hash(as_written(g))
        if h in seen:
            continue
        seen.add(h)
        out.append(Candidate(rank, g, cost, onnx_io.to_onnx(g)))
    return out


def models_timeable(left_s: float, run_s: float, models: int) -> int:
    """How many of ``models`` (the original and the candidates) one :func:`race` can time within ``left_s``
    seconds when a model runs ``run_s`` seconds: each takes at least :data:`RUNS_PER_MODEL` runs, and the winner
    is timed once more against the original. 0 where not even the original and one candidate fit."""
    for k in range(models, 1, -1):
        if RUNS_PER_MODEL * (k + 2) * run_s <= left_s:
            return k
    return 0


def race(original: onnx.ModelProto, candidates: Sequence[Candidate], graph: Graph, cost_model: CostModel,
         margin: float, say: Callable[[str], None], budget_s: float = LATENCY_BUDGET_S) -> Race:
    """Time ``candidates`` (the first choice first) against ``original`` end to end, in interleaved rounds.

    The first choice is the one raced unless another candidate ran faster than it by the margin, measurably (the
    interval of their round-by-round ratio at or above ``1 + margin``); of several, the one with the best speedup
    over the original. So candidates that run alike (equal-cost graphs differ by a fraction of a percent, if at
    all) never swap places from one run to the next. If the winner's speedup over the original is at
    least ``1 + margin`` it is timed against the original once more, in rounds of its own, and is accepted only
    if that speedup's interval lies above 1 (a measurable gain) and its median is at least ``1 + margin``: the
    best of several timings is the one noise favoured most."""
    rounds = latencies([original] + [c.model for c in candidates], graph, cost_model, budget_s)
    times = [statistics.median(r) for r in rounds]
    ups = [speedup(rounds[0], r) for r in rounds[1:]]
    best = 0
    for k in range(1, len(candidates)):  # faster than the first choice by the margin, beyond the noise
        if speedup(rounds[1], rounds[k + 1]).low >= 1 + max(margin, 0.0) and ups[k].median > ups[best].median:
            best = k
    timings = [CandidateTiming(c.rank, c.cost, times[k + 1], k == best, ups[k]) for k, c in enumerate(candidates)]
    say(f"end to end: original {times[0]:.4f} ms, candidate #{candidates[best].rank} {times[best + 1]:.4f} ms, "
        f"speedup {ups[best]}")
    again = None
    if ups[best].median >= 1 + margin:  # again, apart from the race it won
        again = speedup(*latencies([original, candidates[best].model], graph, cost_model, budget_s))
        say(f"end to end, timed again: speedup {again}")
    check = LatencyCheck(times[0], times[best + 1], candidates[best].rank, ups[best], again, margin,
                         cost_model.threads)
    return Race(candidates[best], check, timings if len(candidates) > 1 else [])
