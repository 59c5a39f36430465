"""The data of an optimization run: :class:`Run`, what every stage may read (the options and the choices made
from them once, and the clock), and one frozen record per thing a stage makes: :class:`Loaded` (the model read
and imported), :class:`Saturated` (the e-graph), :class:`Priced` (every e-node's cost), :class:`Extracted` (the
cheapest graphs) and :class:`Decision` (what is written, and why). A stage is a function from the records it
needs to the one it makes (:mod:`eqsat.pipeline.stages`); no stage changes a record another one made, but for
one growing record, the best graph so far (``Loaded.anytime``), which the saturate, cost and extract stages
improve.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import onnx

from eqsat import engine
from eqsat.costs import CostModel, Objective, Pricing, get_cost_model
from eqsat.extract import Extraction, ParallelCost, SerializedEGraph
from eqsat.ir.blocks import Reduction
from eqsat.ir.graph import Graph
from eqsat.ops import CostKey
from eqsat.pipeline import candidates
from eqsat.pipeline.anytime import Anytime
from eqsat.pipeline.bodies import BodyResult
from eqsat.pipeline.choices import SOLVERS, TARGETS, Solver, Target
from eqsat.pipeline.executors import ExecutorRace
from eqsat.pipeline.options import OptimizeOptions, TimeShares
from eqsat.pipeline.result import CandidateTiming, LatencyCheck
from eqsat.rules.pet import PetRewrite

if TYPE_CHECKING:
    from eqsat.pipeline.result import OptimizeResult

Source = str | Path | bytes | onnx.ModelProto


@dataclass(frozen=True)
class Run:
    """One run as every stage sees it: the model as given, the options (validated), what was chosen from them
    once, and the clock. ``optimize`` is the function that runs a whole model (the control-flow bodies are each
    optimized by a run of their own); ``stage_seconds`` is where the runner records each stage's time."""

    source: Source
    options: OptimizeOptions
    cost_model: CostModel  # as chosen; the load stage puts it in the model's context
    solver: Solver
    objective: Objective  # what graphs are compared by: the sum of their costs, or the mixed critical-path cost
    target: Target
    verify_latency: bool  # time the candidates against the original end to end
    candidate_count: int  # how many graphs to extract and time (1 without the end-to-end check)
    optimize: Callable[..., OptimizeResult]
    start: float  # the time limit counts from here
    say: Callable[[str], None]
    stage_seconds: dict[str, float] = field(default_factory=dict)

    @classmethod
    def begin(cls, source: Source, options: OptimizeOptions, optimize: Callable[..., OptimizeResult],
              start: float | None = None) -> Run:
        """A run of ``options`` starting at ``start`` (a ``perf_counter`` time; default now): the cost model, solver
        and target chosen from them."""
        cm = options.cost_model
        cost_model = cm if isinstance(cm, CostModel) else get_cost_model(cm) if cm is not None else get_cost_model()
        verify = options.verify_latency if options.verify_latency is not None else cost_model.times_end_to_end
        count = options.candidates if options.candidates is not None else \
            candidates.DEFAULT_CANDIDATES if verify else 1
        parallel = None if options.parallel is None else \
            ParallelCost(alpha=options.critical_path_weight, branches=options.parallel)
        solver = dataclasses.replace(SOLVERS[options.solver], parallel=parallel)
        return cls(source, options, cost_model, solver, Objective(parallel), TARGETS[options.target], verify, count,
                   optimize, time.perf_counter() if start is None else start, options.progress or _silent)

    def by(self, share: float) -> float:
        """The moment ``share`` of the time limit has passed since the start (a stage's deadline)."""
        return self.start + share * self.options.time_limit

    def left(self) -> float:
        """Seconds left of the time limit (negative once it has passed)."""
        return self.start + self.options.time_limit - time.perf_counter()


def _silent(message: str) -> None:
    pass


@dataclass(frozen=True)
class Loaded:
    """The model read and imported: the load stage's record."""

    original: onnx.ModelProto  # the model as given: the reference of every check (large external weights on disk)
    given: onnx.ModelProto  # what the main graph is imported from: the original, its control-flow bodies optimized
    bodies: tuple[BodyResult, ...]  # the control-flow bodies optimized
    label: str  # how messages name the model
    external_data: bool  # the file kept its weights as external data
    graph: Graph  # the imported model
    engine_graph: Graph  # what the engine saturates: the graph, or its reduction to one of its repeated blocks
    reduction: Reduction | None  # the model's repeated blocks, when it has them
    input_keys: tuple[tuple[CostKey, ...], ...]  # the cost keys of the graph's nodes
    fixed_shapes: bool  # the import fixed the inputs' dynamic dimensions
    static_reason: str  # why the dynamic axes could not be kept (empty: kept, or none)
    as_given: onnx.ModelProto | None  # what a kept original is written as (None: the import re-exported)
    cost_model: CostModel  # the run's, in the model's context (a measured model times with its weights in play)
    shares: TimeShares  # how the time limit is divided (a warm cost cache gives saturation more)
    #: the best graph so far and when each better one was found: the run's one growing record, improved by the
    #: saturate (its snapshots), cost (repriced) and extract stages
    anytime: Anytime

    def stitch(self, graph: Graph) -> Graph:
        """A graph read back from the engine's e-graph as the whole model: with repeated blocks, the optimized
        block once per instance (:meth:`eqsat.ir.blocks.Reduction.stitch`); else the graph itself."""
        return graph if self.reduction is None else self.reduction.stitch(graph)


@dataclass(frozen=True)
class Saturated:
    """The saturate stage's record: the limits it ran under and the engine's result (the e-graph, its iterations,
    the rules that fired and why it stopped)."""

    limits: engine.Limits
    result: engine.SaturationResult
    #: with ``pet``: the corrected mutants added to the e-graph, and the seconds finding them took
    pet: tuple[PetRewrite, ...] = ()
    pet_seconds: float = 0.0


@dataclass(frozen=True)
class Priced:
    """The cost stage's record: every e-node's cost (ms) under the cost model that priced it (a measured model
    wrapped in its one pricing: :class:`eqsat.costs.PricedCostModel`), and that pricing."""

    cost_model: CostModel
    pricing: Pricing | None  # which configurations were measured and which estimated (None: computed costs)
    node_costs: dict[str, float]  # e-node id -> ms


@dataclass(frozen=True)
class Extracted:
    """The extract stage's record: the costed e-graph as the extractors see it, the graphs extracted (the
    first choice first) and each e-class's tensor name."""

    costed: SerializedEGraph
    extractions: tuple[Extraction, ...]
    names: dict[str, str]


@dataclass(frozen=True)
class Decision:
    """What the run writes, and why: the export stage makes it and the latency and signature stages refine it.

    ``extractions`` are the extract stage's, the first replaced by the best graph found earlier where that was
    the cheaper one written; ``chosen`` is the one written (or, when the original is kept, the one that was
    not). Costs are of the graphs as written, under the run's cost model."""

    model: onnx.ModelProto
    graph: Graph
    cost_before: float
    cost_after: float
    extractions: tuple[Extraction, ...]
    chosen: Extraction
    kept: bool = False  # the original is written
    kept_reason: str = ""
    notes: tuple[str, ...] = ()  # why the final cost differs from the extraction's
    latency: LatencyCheck | None = None  # the end-to-end timings and their verdict
    timings: tuple[CandidateTiming, ...] = ()
    executors: ExecutorRace | None = None  # with parallel=N: the race of the executors and what it chose

