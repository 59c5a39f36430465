"""Every option of :func:`eqsat.pipeline.optimize` in one frozen object, :class:`OptimizeOptions`, validated once
when it is made: a bad limit or name fails there, before any model is read. It is the one place an option's
default is written (the e-graph limits' are the engine's :class:`~eqsat.engine.Limits`, read from there); the
command line takes its defaults from it, and :class:`OptimizeKeywords` types ``optimize``'s keywords."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from eqsat.costs import CostModel, check_cost_model_name
from eqsat.engine.limits import Limits, check_seconds
from eqsat.extract.parallel import DEFAULT_ALPHA
from eqsat.ir.rule import Rule
from eqsat.pipeline.choices import SOLVERS, TARGETS, choose


@dataclass(frozen=True)
class TimeShares:
    """How a run divides ``time_limit``, as fractions of it: saturation ends by ``saturation`` from the start,
    pricing by ``costs`` (a measured model times operators until then and estimates the rest), extraction takes
    at most ``extraction`` and leaves ``after`` for what follows (export, the end-to-end timings, the numeric
    check). A stage that ends early leaves its time to the next."""

    saturation: float
    costs: float
    extraction: float
    after: float


#: computed costs: pricing is instant; saturation ends by 40 %, extraction by 90 %, export and check keep 10 %
COMPUTED_SHARES = TimeShares(saturation=0.4, costs=0.4, extraction=0.5, after=0.1)
#: measured costs: saturation ends by 25 %, the operators are timed until 60 % (a larger e-graph would only
#: have more of them estimated), extraction ends by 75 % and the end-to-end timings and the check keep 25 %
MEASURED_SHARES = TimeShares(saturation=0.25, costs=0.6, extraction=0.5, after=0.25)
#: measured costs with the input graph's operators all in the cache (a model optimized before): little is left
#: to time, so saturation gets the computed costs' 40 % and what it adds is timed until 60 %
MEASURED_WARM_SHARES = TimeShares(saturation=0.4, costs=0.6, extraction=0.5, after=0.25)


def time_shares(measured: bool, warm: bool = False) -> TimeShares:
    """The shares of a run under a measured (True) or computed cost model; ``warm``: a measured model's cache
    holds the input graph's operators."""
    if not measured:
        return COMPUTED_SHARES
    return MEASURED_WARM_SHARES if warm else MEASURED_SHARES

#: Control-flow bodies (each optimized as a model of its own before the main graph) take at most this share
BODY_SHARE = 0.2
#: With ``anytime``, CP-SAT's time on each snapshot of the e-graph, as a share of ``time_limit`` (within saturation's)
SNAPSHOT_EXACT_SHARE = 0.05
#: With ``anytime`` and an exact solver, growth pauses once at this many e-nodes (``Limits.stage_nodes``) and CP-SAT
#: gets the stage's e-graph for up to STAGE_EXACT_SHARE of ``time_limit`` while the engine grows it on: measured
#: on NasRNN as written (gpu-sim, 2 cores), CP-SAT proves a 10 k e-node e-graph optimal in about 1.5 s and a 20 k
#: one in 7 s, and finds nothing better than its start on the 49 k one a 30 s run grows, in 14 s
STAGE_NODES = 10_000
STAGE_EXACT_SHARE = 0.25


#: the engine's default limits, which the options' e-graph limits take
_LIMITS = Limits()


@dataclass(frozen=True)
class OptimizeOptions:
    """How :func:`eqsat.pipeline.optimize` runs. Every field has the default ``optimize`` has.

    ``time_limit`` (seconds) bounds the whole run, measuring included (:func:`time_shares`): under computed
    costs 40 % for saturation and 50 % for extraction; under measured costs saturation ends by 25 % (40 % when
    the cache holds the input graph's operators), operators are timed until 60 % (the most expensive first; the
    rest are estimated from the analytic model scaled to the timed ones, :func:`eqsat.costs.price_within`) and
    extraction ends by 75 %.
    ``node_limit`` / ``iter_limit`` (and ``multi_iters``, ``memory_limit_mb``) bound the e-graph (see
    :class:`eqsat.engine.Limits`, whose defaults they take). ``rules`` defaults to the verified corpus plus,
    with ``layouts``, the data-layout rules (transposed-operand matmuls, NHWC convolutions):
    :func:`~eqsat.pipeline.default_rules`. The result is never costlier than the input under ``cost_model`` (a
    :class:`~eqsat.costs.CostModel`, or a name for :func:`eqsat.costs.get_cost_model`; the analytic roofline
    model by default), and its outputs are checked against the original with onnxruntime (rtol 1e-4) unless
    ``check`` is False; a mismatch raises :class:`NumericMismatch` naming the rewrites that fired. ``solver`` is
    the extraction's (``cpsat`` or ``greedy``: :data:`eqsat.pipeline.choices.SOLVERS`).

    A model with dynamic axes keeps them (``dynamic``, the default): each dynamic dimension is a symbol (its
    ``dim_param``), the optimized model declares the same symbolic dimensions and computes its reshape targets
    from its inputs' shapes, rewrites fire only where they hold for every size of the symbols, operators are
    costed at representative sizes (``dims``, e.g. ``{"batch": 8, "seq": 128}``, and the sizes ``input_shapes``
    gives a dynamic input's symbols; 1 for any other symbol), and the numeric check runs at those sizes and at
    other ones. With ``dynamic=False``, ``input_shapes`` and ``dims`` fix the dimensions and the optimized model is
    static (``result.signature_changes`` says how it differs). Where a size cannot be followed in the symbols,
    the run optimizes at those sizes fixed, to report what that would gain, and keeps the original: the written
    model's signature changes only with ``dynamic=False``.

    With ``verify_latency`` (default: when the cost model's runtime times whole models,
    ``CostModel.times_end_to_end``) both models are also timed end to end and the original is kept unless the
    optimized one is faster by more than ``latency_margin`` (a fraction, judged on the median over interleaved
    rounds of the ratio of their times; gains inside timing noise do not count). With ``candidates`` > 1 and that
    latency check, CP-SAT extracts up to that many distinct near-optimal graphs
    (:func:`eqsat.extract.extract_top_k`), all are timed with the original, and the fastest is the one compared
    with the original (``result.candidates`` lists them); by default 4 with the latency check, else 1. A model
    that passes is timed against the original once more, in rounds of their own, and must pass again: the
    fastest of several timings is the one noise favoured most.

    With ``anytime`` (the default) the best graph so far is kept from the start: each snapshot of the e-graph
    while it saturates is extracted greedily, warm-started from that graph, then the final e-graph greedily and
    exactly (:mod:`eqsat.pipeline.anytime`); ``result.trace`` records when each better graph was found.
    Snapshots are not extracted under a measured cost model (its timings would share the CPU with the engine).
    Without it, the final e-graph alone is extracted, warm-started from the input graph.

    With ``first_answer`` (the default; with ``anytime``) the run has better graphs before the e-graph exists
    (:mod:`eqsat.pipeline.descent`): right after the import, the registry's sibling merges (matrix products or
    convolutions sharing an input, merged n-way) where they lower the cost; then, while the engine starts and
    saturates, a greedy descent over the rules in this process, each improving rewrite applied at once, until a
    local optimum or until the e-graph's extractions are cheaper. Their graphs join ``result.trace`` and are written
    when nothing later beats them, checked like any other. Not under a measured cost model, with ``parallel``, with
    ``dump_egraph`` (the dump shows the e-graph's choice) nor for a mixed-precision model.

    With ``reuse_blocks`` (the default), a model of repeated blocks (a transformer's layers: the same operators
    and shapes, each with its own weights) has one of them saturated and extracted, and the result written for
    every one (:mod:`eqsat.ir.blocks`); rewrites across a block's boundary are not tried, and the report says
    so. Not with ``dump_egraph``, whose e-graph is the whole model's.

    With ``dump_egraph`` (a path, or True for the object only) the result carries the saturated e-graph with
    costs, input terms, tensor names and the extraction's choice (``result.egraph_dump``, an
    :class:`eqsat.inspect.dump.EGraphDump`), written to the path (missing folders created) once the run has
    succeeded. With ``provenance`` as well, the engine records which rule built each e-node in which iteration
    and the dump has it (``first_iteration`` and ``rules`` per e-node); it costs saturation time and memory (the
    README gives measurements), and without ``dump_egraph`` nothing is recorded. ``progress`` receives one line
    of text per step, for a user watching.

    ``target`` is what the optimized model is written for: ``"onnx"`` (the default), standard ONNX any runtime
    loads; or ``"onnxruntime"``, where onnxruntime's fused kernels (``SkipLayerNormalization``,
    ``SkipSimplifiedLayerNormalization``, ``BiasGelu``, ``FastGelu``, ``MultiHeadAttention``:
    :mod:`eqsat.ops.ort_kernels`) join the e-graph as alternatives equal to their decompositions, with the
    target's rules (:data:`eqsat.pipeline.choices.TARGETS`) added to ``rules``; the written model holds a kernel
    only where the cost model finds it cheaper (a measured model times it; the analytic one cannot and keeps the
    portable form), and then runs only on onnxruntime.

    With ``cache`` (the default) what a run writes is kept as a transformation of the model's structure
    (:mod:`eqsat.pipeline.transforms`: the operators, edges, shapes; not the names, not the weights) under these
    options, the rules and the cost model, in the folder measured costs use; a later run on a model of the same
    structure (a fine-tune, a re-export) replays it instead of searching, and checks it as always. Not with
    ``dump_egraph``, which needs the e-graph a search builds.

    With ``parallel`` (a number N), the run optimizes for a runtime that runs up to N independent operators at once
    (onnxruntime's parallel executor with N inter-op threads): graphs are compared by AutoGraph's mixed cost,
    their total plus ``critical_path_weight`` (alpha, 0.25 by default) times their span, the longer of their
    critical path (the dearest chain of dependent operators) and total / N, and CP-SAT extracts the graph of least
    mixed cost (:func:`eqsat.extract.extract_cpsat_parallel`); ``result.parallel`` gives the total, critical
    path and mixed cost before and after. Then the run races, end to end, the original under both of onnxruntime's
    executors, that graph under the parallel one and the graph of least summed cost under the sequential one
    (:mod:`eqsat.pipeline.executors`; not with ``verify_latency=False``): the first is written, with the session
    options to run it by in its metadata, only where that executor pays; else the second where it is faster, else
    the original. Without ``parallel`` (the default) a graph costs the sum of its operators' costs.

    With ``as_written`` the model is imported as written: the import folds nothing into a convolution (by default
    it folds what onnxruntime fuses when it loads a model: a BatchNormalization into the kernel and bias, a
    residual Add as ``conv2d_add``, a Relu as the conv's activation), and the rules relating those folds to the
    separate nodes (:func:`eqsat.pipeline.choices.with_fold_rules`) join any rule set, so the search chooses them.
    ``result.cost_before`` is then the cost of the model as TASO and Tensat import it, the original their speedups
    are reported from (:mod:`eqsat.search.comparison`).

    With ``pet`` (off by default) PET's corrected mutants of the graph's convolutions and chains of two
    (:mod:`eqsat.rules.pet`: a batch folded into the width or height, tiles or phase images on the batch, each
    with the correction of the region where it differs, or a fold with zero gaps between the images that needs
    none; checked equal at every position) join the e-graph beside
    the convolutions they compute again, so the extraction may choose them where the cost model finds them
    cheaper. A dynamic batch is searched at a few images; a subprogram over a dynamic height or width is left out.

    Invalid values raise ValueError (a negative, NaN or infinite limit: :class:`eqsat.engine.LimitError`, which
    names the limit and what it allows); a ``cost_model`` of another type raises TypeError.
    """

    cost_model: CostModel | str | None = "analytic"  # None: get_cost_model's default
    rules: Sequence[Rule] | None = None
    time_limit: float = 60.0
    node_limit: int = _LIMITS.node_limit
    iter_limit: int = _LIMITS.iter_limit
    multi_iters: int = _LIMITS.multi_iters
    solver: str = "cpsat"
    input_shapes: Mapping[str, tuple[int, ...]] | None = None
    dims: Mapping[str, int] | None = None
    dynamic: bool = True
    check: bool = True
    dump_egraph: str | Path | bool | None = None
    memory_limit_mb: int = _LIMITS.memory_limit_mb
    layouts: bool = True
    verify_latency: bool | None = None
    latency_margin: float = 0.02
    provenance: bool = False
    candidates: int | None = None
    progress: Callable[[str], None] | None = None
    anytime: bool = True
    reuse_blocks: bool = True
    target: str = "onnx"
    cache: bool = True
    parallel: int | None = None
    critical_path_weight: float = DEFAULT_ALPHA
    as_written: bool = False
    pet: bool = False
    first_answer: bool = True

    def __post_init__(self) -> None:
        check_seconds("time_limit", self.time_limit)
        choose(TARGETS, self.target, "target")
        if self.candidates is not None and self.candidates < 1:
            raise ValueError(f"candidates must be at least 1, got {self.candidates}")
        self.saturation_limits()  # checks the e-graph's limits
        choose(SOLVERS, self.solver, "extraction solver")
        if not math.isfinite(self.latency_margin):
            raise ValueError(f"latency_margin must be a finite fraction, got {self.latency_margin!r}")
        if isinstance(self.cost_model, str):
            check_cost_model_name(self.cost_model)
        elif self.cost_model is not None and not isinstance(self.cost_model, CostModel):
            raise TypeError(f"cost_model must be a CostModel (eqsat.costs), a cost model's name or None, got "
                            f"{type(self.cost_model).__name__}")
        for name, size in (self.dims or {}).items():
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"dims: the size of {name!r} must be a positive integer, got {size!r}")
        if self.parallel is not None and (isinstance(self.parallel, bool) or not isinstance(self.parallel, int)
                                          or self.parallel < 1):
            raise ValueError(f"parallel must be a number of branches run at once (>= 1) or None, got "
                             f"{self.parallel!r}")
        if not (isinstance(self.critical_path_weight, int | float) and 0 <= self.critical_path_weight < math.inf):
            raise ValueError(f"critical_path_weight must be a finite number >= 0, got {self.critical_path_weight!r}")
        if self.rules is not None:  # an iterator is read once, here
            object.__setattr__(self, "rules", tuple(self.rules))

    def saturation_limits(self, shares: TimeShares = COMPUTED_SHARES) -> Limits:
        """The e-graph's limits, with saturation's share of the time limit (the run shortens it by the time the
        import took)."""
        return Limits(iter_limit=self.iter_limit, node_limit=self.node_limit,
                      time_limit=shares.saturation * self.time_limit, multi_iters=self.multi_iters,
                      memory_limit_mb=self.memory_limit_mb)


class OptimizeKeywords(TypedDict, total=False):
    """The keyword arguments of :func:`eqsat.optimize`, typed for editors and type checkers: the fields of
    :class:`OptimizeOptions`, whose docstring says what each does and whose defaults apply (a test keeps the two
    alike)."""

    cost_model: CostModel | str | None
    rules: Sequence[Rule] | None
    time_limit: float
    node_limit: int
    iter_limit: int
    multi_iters: int
    solver: str
    input_shapes: Mapping[str, tuple[int, ...]] | None
    dims: Mapping[str, int] | None
    dynamic: bool
    check: bool
    dump_egraph: str | Path | bool | None
    memory_limit_mb: int
    layouts: bool
    verify_latency: bool | None
    latency_margin: float
    provenance: bool
    candidates: int | None
    progress: Callable[[str], None] | None
    anytime: bool
    reuse_blocks: bool
    target: str
    cache: bool
    parallel: int | None
    critical_path_weight: float
    as_written: bool
    pet: bool
    first_answer: bool


OPTION_NAMES = frozenset(f.name for f in dataclasses.fields(OptimizeOptions))


def resolve_options(options: OptimizeOptions | None, overrides: Mapping[str, Any]) -> OptimizeOptions:
    """``options`` (the defaults when None) with ``overrides`` (keyword arguments of ``optimize``) applied, and
    validated."""
    unknown = sorted(set(overrides) - OPTION_NAMES)
    if unknown:
        raise TypeError(f"optimize() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}; its "
                        f"options are the fields of OptimizeOptions: {', '.join(sorted(OPTION_NAMES))}")
    if options is None:
        return OptimizeOptions(**overrides)
    return dataclasses.replace(options, **overrides) if overrides else options
