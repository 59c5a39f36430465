"""The runtime ``parallel=N`` optimizes for, on the CPU: onnxruntime's parallel executor (``ORT_PARALLEL``, N
inter-op threads), raced against its sequential default.

A graph optimized under the mixed critical-path cost pays only where the runtime does run its branches at once
faster than one after another: a chain, or kernels large enough to fill the cores alone, gain nothing from it. So
the run times, in one set of interleaved rounds, the original under both executors, the graph optimized for the
parallel executor under it, and the graph optimized for the sum of costs under the sequential one, and writes
(:func:`decide`):

- the parallel graph, with the session options it was optimized for in the model's metadata
  (:data:`SESSION_OPTIONS_KEY`), where it runs measurably faster than the original under either executor (by the
  latency margin) and than the sequential graph;
- else the sequential graph, where it runs measurably faster than the original under the sequential executor;
- else the original.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx

from eqsat import onnx_io
from eqsat.costs.measured_cpu import end_to_end_rounds
from eqsat.ir.graph import Graph
from eqsat.pipeline.candidates import LATENCY_BUDGET_S, MAX_ROUNDS, speedup
from eqsat.pipeline.result import Speedup

#: the model metadata key holding the onnxruntime session options a model was optimized for (JSON)
SESSION_OPTIONS_KEY = "eqsat.onnxruntime_session_options"


def intra_op_threads(threads: int, branches: int) -> int:
    """The intra-op threads of each of ``branches`` operators run at once, sharing the ``threads`` cores the
    sequential executor gives one operator (0: every core): so the two executors use the same cores."""
    cores = threads or os.cpu_count() or 1
    return max(1, cores // branches)


def session_options(branches: int, threads: int) -> dict[str, Any]:
    """The onnxruntime session options of the parallel executor with ``branches`` inter-op threads sharing
    ``threads`` cores (0: every core; :func:`intra_op_threads`), as names a user sets them by."""
    return {"execution_mode": "ORT_PARALLEL", "inter_op_num_threads": branches,
            "intra_op_num_threads": intra_op_threads(threads, branches)}


def with_session_options(model: onnx.ModelProto, options: dict[str, Any] | None) -> onnx.ModelProto:
    """``model`` with ``options`` recorded in its metadata, replacing an earlier record (None: with none)."""
    if options is None and not any(p.key == SESSION_OPTIONS_KEY for p in model.metadata_props):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    kept = [p for p in out.metadata_props if p.key != SESSION_OPTIONS_KEY]
    del out.metadata_props[:]
    out.metadata_props.extend(kept)
    if options is not None:
        out.metadata_props.add(key=SESSION_OPTIONS_KEY, value=json.dumps(options, sort_keys=True))
    return out


@dataclass(frozen=True)
class Contender:
    """A model timed in the race: what it is and under which executor (inter-op threads, 1: sequential)."""

    label: str
    model: onnx.ModelProto
    inter_op: int


@dataclass(frozen=True)
class ExecutorRace:
    """What timing the graphs under both executors found, and what is written."""

    written: str  # "parallel", "sequential" or "original"
    verdict: str
    #: each contender's median time (ms), by label
    medians: dict[str, float] = field(default_factory=dict)
    #: the written graph's speedup over the original's faster executor (None: the original is written)
    speedup: Speedup | None = None
    #: the session options written into the model's metadata (empty: none, the sequential default)
    session_options: dict[str, Any] = field(default_factory=dict)


def race(original: onnx.ModelProto, parallel: onnx.ModelProto | None, sequential: onnx.ModelProto | None,
         graph: Graph, branches: int, threads: int, margin: float,
         budget_s: float = LATENCY_BUDGET_S) -> ExecutorRace:
    """Time the original under both executors, ``parallel`` (the graph optimized for ``branches`` at once; None
    where that is the original) under the parallel one and ``sequential`` (the graph optimized for the sum; None
    where that is the original) under the sequential one, in interleaved rounds, and :func:`decide`."""
    contenders = [Contender("original, sequential", original, 1),
                  Contender("original, parallel", original, branches)]
    # the parallel executor's operators share the cores the sequential executor gives one
    intra = intra_op_threads(threads, branches)
    if parallel is not None:
        contenders.append(Contender("optimized for parallel, parallel", parallel, branches))
    if sequential is not None:
        contenders.append(Contender("optimized for the sum, sequential", sequential, 1))
    feeds = onnx_io.random_feeds(graph, seed=0)
    rounds = end_to_end_rounds([c.model for c in contenders], [feeds] * len(contenders), threads=threads,
                               budget_s=budget_s, rounds=MAX_ROUNDS, inter_op=[c.inter_op for c in contenders],
                               intra_op=[intra if c.inter_op > 1 else threads for c in contenders])
    return decide(dict(zip([c.label for c in contenders], rounds, strict=True)), branches, threads, margin)


def decide(rounds: dict[str, Sequence[float]], branches: int, threads: int, margin: float) -> ExecutorRace:
    """What to write from each contender's per-round times (ms, by :func:`race`'s labels): see the module
    docstring."""
    medians = {k: float(statistics.median(v)) for k, v in rounds.items()}
    seq, par = rounds["original, sequential"], rounds["original, parallel"]
    best_original = "original, parallel" if medians["original, parallel"] < medians["original, sequential"] \
        else "original, sequential"

    def gains(up: Speedup) -> bool:
        return up.measurable and up.median >= 1 + margin

    executor_note = f"the original under the parallel executor ({branches} inter-op threads): {speedup(seq, par)} " \
        "against the sequential one"
    p = rounds.get("optimized for parallel, parallel")
    s = rounds.get("optimized for the sum, sequential")
    if p is not None:
        up = speedup(rounds[best_original], p)
        # the sum's graph under the sequential executor beats it only measurably (a noisy median does not)
        beats_sequential = s is None or not speedup(p, s).measurable
        if gains(up) and beats_sequential:
            return ExecutorRace("parallel", f"the graph optimized for the parallel executor runs {up} as fast under "
                                f"it as the original under its faster executor ({best_original.split(', ')[1]}); "
                                f"{executor_note}", medians, up, session_options(branches, threads))
    if s is not None:
        up = speedup(seq, s)
        if gains(up):
            why = "no parallel graph was found" if p is None else "the parallel graph does not pay measurably"
            return ExecutorRace("sequential", f"the graph optimized for the sum of costs runs {up} as fast as the "
                                f"original under the sequential executor; {why}; {executor_note}", medians, up)
    return ExecutorRace("original", f"no graph runs measurably faster (by {margin:.0%}) under either executor; "
                        f"{executor_note}", medians)
