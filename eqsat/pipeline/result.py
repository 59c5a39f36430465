"""What :func:`eqsat.pipeline.optimize` returns: the optimized model and the report of the run
(:class:`OptimizeResult`, whose :meth:`~OptimizeResult.summary` is the text the CLI prints)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import onnx

from eqsat.costs import ParallelFigures
from eqsat.engine.saturation import IterationStats
from eqsat.inspect.dump import EGraphDump
from eqsat.ir.graph import Graph
from eqsat.onnx_io import opaque_reasons
from eqsat.pipeline.check import NumericReport


@dataclass(frozen=True)
class Speedup:
    """How much faster one model ran than another end to end: the median over interleaved rounds of the
    round's time ratio, and a confidence interval for that median
    (:func:`eqsat.pipeline.candidates.median_interval`)."""

    median: float
    low: float
    high: float
    rounds: int

    @property
    def measurable(self) -> bool:
        """The interval lies above 1: faster, beyond the timing noise."""
        return self.low > 1.0

    def __str__(self) -> str:
        return f"{self.median:.3f}x [{self.low:.3f}, {self.high:.3f}]"


@dataclass(frozen=True)
class LatencyCheck:
    """The end-to-end check of a run: the original and the candidate raced against it, their median times (ms)
    in the race, the candidate's speedup there and when timed again (None: not timed again, the race showed no
    gain by the margin), the margin, and the onnxruntime threads (0: its default)."""

    original_ms: float
    candidate_ms: float
    candidate_rank: int
    race: Speedup
    again: Speedup | None
    margin: float
    threads: int

    @property
    def accepted(self) -> bool:
        """Both timings show a gain of at least the margin, the second measurable: its interval above 1 (above
        ``1 + margin`` for a negative margin, which accepts a slower model)."""
        goal = 1 + self.margin
        return (self.again is not None and self.again.low > min(1.0, goal) and self.again.median >= goal
                and self.race.median >= goal)

    @property
    def verdict(self) -> str:
        """Why the candidate was or was not written, in a few words."""
        if self.accepted:
            return f"faster end to end, measurably (timed again: {self.again})"
        if self.again is None:
            return f"no gain of {self.margin:.0%} end to end ({self.race})"
        return (f"no measurable gain of {self.margin:.0%} end to end when timed again ({self.again})")

    def describe(self) -> str:
        """The timings in one line."""
        threads = "onnxruntime's default threads" if not self.threads else f"{self.threads} thread(s)"
        text = (f"original {self.original_ms:.4f} ms, candidate #{self.candidate_rank} {self.candidate_ms:.4f} ms "
                f"(medians of {self.race.rounds} interleaved rounds, onnxruntime CPU, {threads}): "
                f"speedup {self.race}")
        if self.again is not None:
            text += f"; timed again {self.again} over {self.again.rounds} rounds"
        return text + f" -> {'written' if self.accepted else 'original kept'}"


@dataclass(frozen=True)
class CandidateTiming:
    """One extracted candidate graph, its estimated cost, its measured end-to-end latency (ms, median) and its
    speedup over the original; ``chosen``: the one timed against the original again."""

    rank: int  # 0 = the cost model's first choice
    cost: float
    latency_ms: float
    chosen: bool = False
    speedup: Speedup | None = None


@dataclass(frozen=True)
class CostCounts:
    """How the run's operator configurations were priced: ``measured`` by the cost model (``cached`` of them
    read from the cache), ``estimated`` from the analytic model scaled to the measured ones."""

    configurations: int
    measured: int
    cached: int
    estimated: int
    seconds: float


@dataclass(frozen=True)
class PricePoint:
    """One set of sizes a model with dynamic axes was priced at (a decode step, a prefill), and its costs there."""

    label: str
    sizes: dict[str, int]
    cost_before: float
    cost_after: float

    def describe(self) -> str:
        """"decode step (batch=1, sequence=1): 1.2 -> 1.1 ms"."""
        at = ", ".join(f"{k}={v}" for k, v in self.sizes.items())
        return f"{self.label} ({at}): {self.cost_before:.4g} -> {self.cost_after:.4g} ms"


@dataclass(frozen=True)
class PetReport:
    """What PET's partially equivalent rewrites did in a run (``optimize(pet=True)``): each corrected mutant found
    joins the e-graph as an alternative of its convolution's tensor; ``chosen`` are those the written graph holds."""

    found: int  # corrected mutants found, all added to the e-graph
    convolutions: int  # the convolutions they compute again
    corrections: int  # their correction kernels, in all
    correction_flops: float  # the corrections' work, in all
    seconds: float  # finding and checking them
    #: (tensor, rewrite name, its correction kernels) of each rewrite the extraction's graph holds
    chosen: tuple[tuple[str, str, int], ...] = ()
    #: whether that graph was written (False: the original was kept, for the reason the report gives)
    written: bool = True

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PetReport:
        """The report back from its fields as a dict (``dataclasses.asdict``, or an e-graph dump's JSON ``pet``)."""
        return cls(**{**d, "chosen": tuple(tuple(c) for c in d.get("chosen") or ())})

    def describe(self) -> str:
        """The report's line."""
        text = (f"{self.found} corrected mutants of {self.convolutions} convolutions in the e-graph "
                f"({self.corrections} correction kernels, {self.correction_flops:.3g} FLOPs; {self.seconds:.2f} s); ")
        if not self.chosen:
            return text + "none chosen"
        return (text + f"{len(self.chosen)} chosen" + ("" if self.written else " by the extraction, not written")
                + ": " + "; ".join(f"{t}: {n}" for t, n, _ in self.chosen))


@dataclass(frozen=True)
class ParallelReport:
    """A run optimized for a runtime that runs independent operators at once: the objective and the graph's
    figures under it before and after."""

    objective: str  # "total + 0.25 x critical path, 2 branches at once"
    branches: int
    alpha: float
    before: ParallelFigures
    after: ParallelFigures
    #: what racing the executors found ("" where they were not raced: ``verify_latency=False``), and what it wrote
    #: ("parallel", "sequential" or "original")
    executors: str = ""
    written: str = ""
    #: each contender's median time in that race (ms), by what it was and how it ran
    medians: dict[str, float] = field(default_factory=dict)
    #: the onnxruntime session options written into the model's metadata, to run it as optimized (empty: none)
    session_options: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        """The report's lines."""
        text = f"{self.objective}: before {self.before.describe()}; after {self.after.describe()}"
        if self.executors:
            text += f"\nexecutors raced, the {self.written} graph written: {self.executors}"
        if self.session_options:
            text += "\nrun it with onnxruntime session options " + ", ".join(
                f"{k}={v}" for k, v in self.session_options.items()) + " (in its metadata)"
        return text


@dataclass
class OptimizeResult:
    """The optimized model and a report of what happened.

    Costs are those of the graphs as written (a fused operator that export writes back as several ONNX
    nodes is priced as those nodes); node counts are those of the ONNX models. Every figure of the report
    (:meth:`summary`, :meth:`to_dict`) is one of these fields, formatted: nothing is computed twice.
    """

    model: onnx.ModelProto
    graph: Graph
    original: Graph
    cost_before: float
    cost_after: float
    iterations: list[IterationStats]
    stop_reason: str
    rules_fired: dict[str, int]
    solver_status: str
    solver_bound: float | None
    solver_gap: float | None
    extraction_cost: float
    stage_seconds: dict[str, float] = field(default_factory=dict)  # stage -> seconds, in the order they ran
    numeric: NumericReport | None = None
    cost_model: str = ""
    kept_original: bool = False
    #: the end-to-end timings and their verdict, when the latency check ran
    latency: LatencyCheck | None = None
    onnx_nodes: tuple[int, int] = (0, 0)  # nodes of the original ONNX model and of the written one
    cost_notes: list[str] = field(default_factory=list)  # why the final cost differs from the extraction's
    egraph_dump: EGraphDump | None = None  # the e-graph with costs and choice, when optimize(dump_egraph=...)
    candidates: list[CandidateTiming] = field(default_factory=list)  # with candidates > 1: each one timed
    #: (seconds since the run started, best cost so far under the cost model), from the input's cost; one point
    #: per better graph found (:mod:`eqsat.pipeline.anytime`). The latency check may still keep the original.
    trace: list[tuple[float, float]] = field(default_factory=list)
    best_source: str = ""  # what found the best graph: "input", "greedy, iteration 2", "cpsat", ...
    #: snapshots of the e-graph extracted while it saturated, and the seconds this process spent on them (beside
    #: the engine's process, so they overlap the saturate stage's time)
    snapshots: tuple[int, float] = (0, 0.0)
    #: e-nodes and e-classes of the saturated e-graph as extracted, dumped and inspected (the engine's own
    #: counts, per iteration in ``iterations``, include terms of no valid shape, which it drops)
    egraph_size: tuple[int, int] = (0, 0)
    #: why the original was kept (empty when the optimized graph is written)
    kept_reason: str = ""
    #: how the operator configurations were priced, under a measured cost model (None: computed costs)
    cost_counts: CostCounts | None = None
    #: the control-flow bodies optimized, each as a model of its own ("If 'choose' then_branch 0.2 -> 0.1 ms");
    #: the costs above are the main graph's
    bodies: list[str] = field(default_factory=list)
    #: the dynamic axes: what each symbol was checked and timed at, and costed at where ``price_points`` is empty
    #: (empty: a static model, or axes fixed)
    dims: dict[str, int] = field(default_factory=dict)
    #: where the user gave no size for some symbol, the points costs were priced at (:mod:`eqsat.ir.price_points`):
    #: (label, sizes, cost before, cost after) each, the costs above their sums
    price_points: list[PricePoint] = field(default_factory=list)
    #: why the model's dynamic axes were fixed for the run (empty: kept, or a static model)
    static_reason: str = ""
    #: the repeated blocks optimized once for all, in words (empty: none; :mod:`eqsat.ir.blocks`)
    blocks: str = ""
    #: the model file kept its weights as external data (the CLI writes the optimized model the same way)
    external_data: bool = False
    #: what the model was written for (``optimize(target=...)``), and the runtime kernels written, by type
    target: str = "onnx"
    kernels: dict[str, int] = field(default_factory=dict)
    #: how the written model's inputs and outputs differ from the original's (empty: a drop-in replacement;
    #: only ``dynamic=False`` changes them, and the report's first line then says so)
    signature_changes: list[str] = field(default_factory=list)
    #: with ``parallel``: the objective and the total, critical path and mixed cost before and after (the costs
    #: above are the mixed ones); None: the costs are sums
    parallel: ParallelReport | None = None
    #: the model was imported as written (``optimize(as_written=True)``): the costs are from the model without the
    #: import's folds, which the search made where they pay
    as_written: bool = False
    #: what the transformation cache did (:mod:`eqsat.pipeline.transforms`): replayed a stored transformation
    #: instead of searching, stored this run's, or nothing ("")
    transformation: str = ""
    #: with ``pet``: PET's corrected mutants found, and those chosen (None: PET was off)
    pet: PetReport | None = None

    @property
    def target_note(self) -> str:
        """What the target changed, in words ("" for portable ONNX)."""
        if self.target == "onnx":
            return ""
        if not self.kernels:
            return f"{self.target}: no fused kernel written (none cheaper than its decomposition under " \
                   f"{self.cost_model or 'the cost model'})"
        return f"{self.target}: wrote " + ", ".join(f"{k} x{n}" for k, n in sorted(self.kernels.items()))

    @property
    def dynamic_axes(self) -> str:
        """What became of the model's dynamic axes, in words ("" for a static model)."""
        if self.static_reason:
            return f"fixed for the run ({self.static_reason})"
        if not self.dims:
            return ""
        at = ", ".join(f"{k}={v}" for k, v in self.dims.items())
        if not self.price_points:
            return f"kept: {', '.join(self.dims)} (costed and timed at {at})"
        points = "; ".join(p.describe() for p in self.price_points)
        return f"kept: {', '.join(self.dims)} (checked and timed at {at}; priced at {points})"

    @property
    def latency_ms(self) -> tuple[float, float] | None:
        """The end-to-end medians (ms) of the original and of the candidate timed against it, when verified."""
        return None if self.latency is None else (self.latency.original_ms, self.latency.candidate_ms)

    @property
    def seconds_to_best(self) -> float:
        """When the best graph under the cost model was found, in seconds since the run started."""
        return self.trace[-1][0] if self.trace else math.nan

    @property
    def speedup(self) -> float:
        """Estimated speedup (cost before / cost after); infinite when no computation is left."""
        if self.cost_after > 0:
            return self.cost_before / self.cost_after
        return math.inf if self.cost_before > 0 else 1.0

    @property
    def decision(self) -> str:
        """Which graph was written and why."""
        bodies = "" if not self.bodies else f"; control-flow bodies optimized: {len(self.bodies)}"
        if self.kept_original:
            return f"the original: {self.kept_reason}"
        if self.kept_reason:  # the main graph kept, its control-flow bodies optimized
            return f"the original main graph ({self.kept_reason}){bodies}"
        text = f"the optimized graph: {self.cost_after:.6g} ms predicted vs {self.cost_before:.6g} ms"
        return text + ("" if self.latency is None else f"; {self.latency.verdict}") + bodies

    def to_dict(self) -> dict[str, Any]:
        """The report's figures as JSON-ready data (the same fields :meth:`summary` formats)."""
        def speed(s: Speedup | None) -> dict[str, float] | None:
            return None if s is None else {"median": s.median, "low": s.low, "high": s.high, "rounds": s.rounds}

        lat = self.latency
        return {
            "cost_model": self.cost_model, "cost_before_ms": self.cost_before, "cost_after_ms": self.cost_after,
            "extraction_cost_ms": self.extraction_cost, "cost_notes": list(self.cost_notes),
            "estimated_speedup": self.speedup, "kept_original": self.kept_original, "kept_reason": self.kept_reason,
            "signature_changes": list(self.signature_changes), "transformation": self.transformation,
            "decision": self.decision, "onnx_nodes": list(self.onnx_nodes), "bodies": list(self.bodies),
            "dynamic_axes": {"dims": dict(self.dims), "fixed_because": self.static_reason,
                             "price_points": [dataclasses.asdict(p) for p in self.price_points]},
            "parallel": None if self.parallel is None else dataclasses.asdict(self.parallel),
            "repeated_blocks": self.blocks, "target": self.target, "kernels": dict(self.kernels),
            "as_written": self.as_written,
            "pet": None if self.pet is None else dataclasses.asdict(self.pet),
            "saturation": {"iterations": max(0, len(self.iterations) - 1), "stop_reason": self.stop_reason},
            "egraph": {"enodes": self.egraph_size[0], "eclasses": self.egraph_size[1]},
            "extraction": {"status": self.solver_status, "bound": self.solver_bound, "gap": self.solver_gap},
            "best_found": None if not self.trace else {"cost_ms": self.trace[-1][1], "seconds": self.seconds_to_best,
                                                       "source": self.best_source, "trace": self.trace},
            "costs": None if self.cost_counts is None else dataclasses.asdict(self.cost_counts),
            "latency": None if lat is None else {
                "original_ms": lat.original_ms, "candidate_ms": lat.candidate_ms, "candidate_rank": lat.candidate_rank,
                "race": speed(lat.race), "again": speed(lat.again), "margin": lat.margin, "threads": lat.threads,
                "accepted": lat.accepted},
            "candidates": [{"rank": c.rank, "cost_ms": c.cost, "latency_ms": c.latency_ms, "chosen": c.chosen,
                            "speedup": speed(c.speedup)} for c in self.candidates],
            "numeric_check": None if self.numeric is None else {"ok": self.numeric.ok,
                                                                "summary": self.numeric.summary()},
            "stage_seconds": dict(self.stage_seconds),
        }

    def summary(self) -> str:
        """A human-readable report table."""
        speedup = ("infinite (no computation left)" if math.isinf(self.speedup) else f"{self.speedup:.3f}x")
        c = self.cost_counts
        rows = [
            *([("SIGNATURE CHANGED", "; ".join(self.signature_changes))] if self.signature_changes else []),
            ("cost model", self.cost_model),
            *([("import", "as written: no fold into a Conv before the search; its rules may fold")]
              if self.as_written else []),
            *([] if c is None else [("costs", f"{c.configurations} operator configurations in {c.seconds:.1f} s: "
                                     f"{c.measured} measured ({c.cached} from the cache), {c.estimated} estimated "
                                     "(analytic, scaled to the measured)")]),
            ("cost before (ms)", f"{self.cost_before:.6g}"),
            ("cost after (ms)", f"{self.cost_after:.6g}" + ("  (original kept)" if self.kept_original else "")),
            ("extraction cost (ms)", f"{self.extraction_cost:.6g}" + ("" if not self.cost_notes else
                                                                     "  (" + "; ".join(self.cost_notes) + ")")),
            ("estimated speedup", speedup),
            ("written", self.decision),
            *([("control-flow bodies", "; ".join(self.bodies))] if self.bodies else []),
            *[("parallel execution" if k == 0 else "", line) for k, line in
              enumerate(self.parallel.describe().splitlines() if self.parallel else [])],
            *([("dynamic axes", self.dynamic_axes)] if self.dynamic_axes else []),
            *([("repeated blocks", self.blocks)] if self.blocks else []),
            *([("cached transformation", self.transformation)] if self.transformation else []),
            *([("partially equivalent", self.pet.describe())] if self.pet is not None else []),
            *([("target", self.target_note)] if self.target_note else []),
            ("ONNX nodes before/after", f"{self.onnx_nodes[0]} / {self.onnx_nodes[1]}"),
            ("saturation", f"{len(self.iterations) - 1} iterations, stopped: {self.stop_reason}" if self.iterations
             else f"none: {self.stop_reason}"),
            ("e-graph", f"{self.egraph_size[0]} e-nodes, {self.egraph_size[1]} e-classes"),
            ("extraction", f"{self.solver_status}, bound {_fmt(self.solver_bound)}, gap {_fmt(self.solver_gap)}"),
            ("best found", "-" if not self.trace else
             f"{self.trace[-1][1]:.6g} ms at {self.seconds_to_best:.2f} s ({self.best_source}); "
             f"{len(self.trace) - 1} improvement(s)"),
            ("end-to-end latency", "-" if self.latency is None else self.latency.describe()),
            ("numeric check", "not run (check=False)" if self.numeric is None else self.numeric.summary()),
        ]
        if self.candidates:
            rows.append(("candidates timed", ", ".join(
                f"#{t.rank} {t.cost:.4g} ms est. / {t.latency_ms:.4f} ms"
                + ("" if t.speedup is None else f" ({t.speedup})") + (" (timed again)" if t.chosen else "")
                for t in self.candidates)))
        rows += [("opaque" if k == 0 else "", f"{op} x{n}: {why}")
                 for k, (op, n, why) in enumerate(opaque_reasons(self.original))]
        rows += [(f"time: {k}", f"{v:.2f} s") for k, v in self.stage_seconds.items()]
        width = max(len(k) for k, _ in rows)
        lines = [f"{k:<{width}}  {v}" for k, v in rows]
        if self.iterations:
            lines.append("")
            lines.append("iter  engine e-nodes  e-classes  seconds   (the engine's counts: with terms of no valid "
                         "shape, which the e-graph above leaves out)")
            lines += [f"{it.iteration:>4}  {it.enodes:>14}  {it.eclasses:>9}  {it.seconds:>7.3f}"
                      for it in self.iterations]
        if self.rules_fired:
            lines.append("")
            lines.append("rules fired (matches): " + ", ".join(
                f"{k}={v}" for k, v in sorted(self.rules_fired.items(), key=lambda kv: -kv[1])))
        return "\n".join(lines)


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.6g}"
