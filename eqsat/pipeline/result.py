"""What :func:`eqsat.pipeline.optimize` returns: the optimized model and the report of the run
(:class:`OptimizeResult`, whose :meth:`~OptimizeResult.summary` is the text the CLI prints)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import onnx

from eqsat.engine.saturation import IterationStats
from eqsat.inspect.dump import EGraphDump
from eqsat.ir.graph import Graph
from eqsat.onnx_io import opaque_reasons
from eqsat.pipeline.check import NumericReport


@dataclass(frozen=True)
class CandidateTiming:
    """One extracted candidate graph, its estimated cost and its measured end-to-end latency (ms)."""

    rank: int  # 0 = the cost model's first choice
    cost: float
    latency_ms: float
    chosen: bool = False


@dataclass
class OptimizeResult:
    """The optimized model and a report of what happened.

    Costs are those of the graphs as written (a fused operator that export writes back as several ONNX
    nodes is priced as those nodes); node counts are those of the ONNX models.
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
    latency_ms: tuple[float, float] | None = None  # measured end to end (original, optimized) when verified
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

    def summary(self) -> str:
        """A human-readable report table."""
        last = self.iterations[-1] if self.iterations else None
        speedup = ("infinite (no computation left)" if math.isinf(self.speedup) else f"{self.speedup:.3f}x")
        rows = [
            ("cost model", self.cost_model),
            ("cost before (ms)", f"{self.cost_before:.6g}"),
            ("cost after (ms)", f"{self.cost_after:.6g}" + ("  (original kept)" if self.kept_original else "")),
            ("extraction cost (ms)", f"{self.extraction_cost:.6g}" + ("" if not self.cost_notes else
                                                                     "  (" + "; ".join(self.cost_notes) + ")")),
            ("estimated speedup", speedup),
            ("ONNX nodes before/after", f"{self.onnx_nodes[0]} / {self.onnx_nodes[1]}"),
            ("saturation", f"{len(self.iterations) - 1} iterations, stopped: {self.stop_reason}"),
            ("e-graph", f"{last.enodes} e-nodes, {last.eclasses} e-classes" if last else "-"),
            ("extraction", f"{self.solver_status}, bound {_fmt(self.solver_bound)}, gap {_fmt(self.solver_gap)}"),
            ("best found", "-" if not self.trace else
             f"{self.trace[-1][1]:.6g} ms at {self.seconds_to_best:.2f} s ({self.best_source}); "
             f"{len(self.trace) - 1} improvement(s)"),
            ("end-to-end latency", "-" if self.latency_ms is None else
             f"{self.latency_ms[0]:.4f} ms -> {self.latency_ms[1]:.4f} ms (onnxruntime CPU, median)"),
            ("numeric check", "not run (check=False)" if self.numeric is None else self.numeric.summary()),
        ]
        if self.candidates:
            rows.append(("candidates timed", ", ".join(
                f"#{c.rank} {c.cost:.4g} ms est. / {c.latency_ms:.4f} ms" + (" (chosen)" if c.chosen else "")
                for c in self.candidates)))
        rows += [("opaque" if k == 0 else "", f"{op} x{n}: {why}")
                 for k, (op, n, why) in enumerate(opaque_reasons(self.original))]
        rows += [(f"time: {k}", f"{v:.2f} s") for k, v in self.stage_seconds.items()]
        width = max(len(k) for k, _ in rows)
        lines = [f"{k:<{width}}  {v}" for k, v in rows]
        if self.iterations:
            lines.append("")
            lines.append("iter  e-nodes  e-classes  seconds")
            lines += [f"{it.iteration:>4}  {it.enodes:>7}  {it.eclasses:>9}  {it.seconds:>7.3f}"
                      for it in self.iterations]
        if self.rules_fired:
            lines.append("")
            lines.append("rules fired (matches): " + ", ".join(
                f"{k}={v}" for k, v in sorted(self.rules_fired.items(), key=lambda kv: -kv[1])))
        return "\n".join(lines)


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.6g}"
