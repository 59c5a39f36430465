"""The end-to-end pipeline: ONNX -> IR -> e-graph -> costs -> extraction -> IR -> ONNX, numerically checked."""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from eqsat import engine, onnx_io
from eqsat.engine.egraph import EGraph
from eqsat.errors import EqsatError
from eqsat.inspect.dump import EGraphDump, build_dump
from eqsat.ir.graph import Graph, flatten_concats
from eqsat.ops import CostKey
from eqsat.pipeline.check import NumericCheckUnavailable, NumericReport, check_equal
from eqsat.rules.rule import Rule


class NumericMismatch(EqsatError, RuntimeError):
    """The optimized model does not compute what the original computes. Nothing was written."""


#: Graphs extracted and timed end to end when the latency check runs and ``candidates`` is not given.
DEFAULT_CANDIDATES = 4
#: About how long the end-to-end timing of the original and the candidates takes (fewer rounds for large
#: models, never fewer than 7)
LATENCY_BUDGET_S = 2.0


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
    iterations: list[engine.IterationStats]
    stop_reason: str
    rules_fired: dict[str, int]
    solver_status: str
    solver_bound: float | None
    solver_gap: float | None
    extraction_cost: float
    stage_seconds: dict[str, float] = field(default_factory=dict)
    numeric: NumericReport | None = None
    cost_model: str = ""
    kept_original: bool = False
    latency_ms: tuple[float, float] | None = None  # measured end to end (original, optimized) when verified
    onnx_nodes: tuple[int, int] = (0, 0)  # nodes of the original ONNX model and of the written one
    cost_notes: list[str] = field(default_factory=list)  # why the final cost differs from the extraction's
    egraph_dump: EGraphDump | None = None  # the e-graph with costs and choice, when optimize(dump_egraph=...)
    candidates: list[CandidateTiming] = field(default_factory=list)  # with candidates > 1: each one timed

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
            ("end-to-end latency", "-" if self.latency_ms is None else
             f"{self.latency_ms[0]:.4f} ms -> {self.latency_ms[1]:.4f} ms (onnxruntime CPU, median)"),
            ("numeric check", "not run (check=False)" if self.numeric is None else self.numeric.summary()),
        ]
        if self.candidates:
            rows.append(("candidates timed", ", ".join(
                f"#{c.rank} {c.cost:.4g} ms est. / {c.latency_ms:.4f} ms" + (" (chosen)" if c.chosen else "")
                for c in self.candidates)))
        from eqsat.onnx_io import opaque_reasons

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


def graph_cost_keys(graph: Graph) -> list[tuple[CostKey, ...]]:
    """Cost keys of each node of an IR graph (what it runs as once exported); none for work on weights only,
    which export precomputes."""
    shapes = graph.shapes
    const = set(graph.weights)
    keys: list[tuple[CostKey, ...]] = []
    for n in graph.nodes:
        if n.op != "opaque" and all(i in const for i in n.inputs):  # constants and weight transforms
            const.add(n.output)
            keys.append(())
        else:
            keys.append(n.spec.cost_keys(n.p, [shapes[i] for i in n.inputs], shapes[n.output],
                                         weights=[k for k, i in enumerate(n.inputs) if i in const]))
    return keys


def graph_cost(graph: Graph, cost_model: Any) -> float:
    """Sum of per-node costs of an IR graph under ``cost_model``."""
    keys = [k for ks in graph_cost_keys(graph) for k in ks]
    costs = cost_model.costs(set(keys))
    return float(sum(costs[k] for k in keys))


def _progress_every(say: Callable[[str], None], total: int) -> Callable[[int, int], None]:
    step = max(1, total // 10)

    def report(done: int, total: int) -> None:
        if done % step == 0 or done == total:
            say(f"  priced {done}/{total}")

    return report


def graph_from_selection(egraph: EGraph, selection: Mapping[str, str], original: Graph,
                         tensor_names: Mapping[str, str]) -> tuple[Graph, Graph]:
    """The IR graph an extraction chose (``selection``: e-class -> node id of ``egraph``), as
    read back (binary concats, as the e-graph has them) and as written (n-ary concats, dead nodes dropped),
    both validated. Tensors keep their names from ``tensor_names`` (e-class -> name) where one is known."""
    extracted = engine.selection_to_graph(egraph, selection, original, tensor_names, flatten=False).validate()
    return extracted, flatten_concats(extracted).live().validate()


def default_rules(layouts: bool = True, max_ops: int = 3) -> list[Rule]:
    """The rules :func:`optimize` (and the CLI) use by default: the verified corpus and the hand-written
    extra rules, plus the data-layout rules unless ``layouts`` is False. ``max_ops=4`` adds the proved rules of
    four operators the corpus cannot derive (``optimize(model, rules=default_rules(max_ops=4))``, or
    ``eqsat optimize --rules size4``)."""
    from eqsat.rules import corpus_or_starter
    from eqsat.rules.layout import LAYOUT_RULES

    return corpus_or_starter(max_ops) + (list(LAYOUT_RULES) if layouts else [])


def optimize(model_or_path: str | Path | bytes | onnx.ModelProto, *, cost_model: Any = None,
             rules: Sequence[Rule] | None = None, time_limit: float = 60.0, node_limit: int = 50_000,
             iter_limit: int = 10, multi_iters: int = 1, solver: str = "cpsat",
             input_shapes: Mapping[str, tuple[int, ...]] | None = None, check: bool = True,
             dump_egraph: str | Path | bool | None = None, memory_limit_mb: int = 8192, layouts: bool = True,
             verify_latency: bool | None = None, latency_margin: float = 0.02, provenance: bool = False,
             candidates: int | None = None, progress: Callable[[str], None] | None = None) -> OptimizeResult:
    """Optimize an ONNX model by equality saturation and exact DAG extraction.

    ``time_limit`` (seconds) bounds the whole run: 40 % for saturation and 50 % for extraction.
    ``node_limit`` / ``iter_limit`` bound the e-graph. ``rules`` defaults to the verified corpus plus, with
    ``layouts``, the data-layout rules (transposed-operand matmuls, NHWC convolutions). The result is never
    costlier than the input under ``cost_model`` (the analytic roofline model by default), and its outputs
    are checked against the original with onnxruntime (rtol 1e-4) unless ``check`` is False; a mismatch
    raises :class:`NumericMismatch` naming the rewrites that fired. With ``verify_latency`` (default: when the cost
    model measures onnxruntime) both models are also timed end to end and the original is kept unless the optimized
    one is faster by more than ``latency_margin`` (a fraction, judged on the median over interleaved rounds of the
    ratio of their times; gains inside timing noise do not count). With
    ``candidates`` > 1 and that latency check, CP-SAT extracts up to that many distinct near-optimal graphs
    (:func:`eqsat.extract.extract_top_k`), all are timed with the original, and the fastest is the one compared
    with the original (``result.candidates`` lists them); by default 4 with the latency check, else 1. A model
    that passes is timed against the original once more, in rounds of their own, and must pass again: the
    fastest of several timings is the one noise favoured most. With
    ``dump_egraph`` (a path, or True for the object only) the result carries the saturated e-graph with costs,
    input terms, tensor names and the extraction's choice (``result.egraph_dump``, an
    :class:`eqsat.inspect.dump.EGraphDump`), written to the path (missing folders created) once the run has
    succeeded. With ``provenance`` as well, the engine records which rule built each e-node in which iteration and
    the dump has it (``first_iteration`` and ``rules`` per e-node); it costs saturation time and memory (the README
    gives measurements), and without ``dump_egraph`` nothing is recorded.
    """
    from eqsat.costs import get_cost_model
    from eqsat.extract import extract, extract_top_k

    say = progress or (lambda msg: None)
    cost_model = cost_model or get_cost_model("analytic")
    stages: dict[str, float] = {}
    # limits are checked before the model is read, so a bad one fails at once
    engine.check_seconds("time_limit", time_limit)
    if candidates is not None and candidates < 1:
        raise ValueError(f"candidates must be at least 1, got {candidates}")
    limits = engine.Limits(iter_limit=iter_limit, node_limit=node_limit, time_limit=0.4 * time_limit,
                           multi_iters=multi_iters, memory_limit_mb=memory_limit_mb)
    start = t = time.perf_counter()
    original_proto, label = onnx_io.read_model(model_or_path)  # the reference for every check: the model as given
    graph = onnx_io.load_model(original_proto, input_shapes=dict(input_shapes) if input_shapes else None,
                               label=label)
    stages["import"] = time.perf_counter() - t
    say(f"imported {len(graph.nodes)} nodes ({sum(1 for n in graph.nodes if n.op == 'opaque')} opaque)")

    rules = list(rules) if rules is not None else default_rules(layouts)
    # each stage ends by its share's deadline from the start (saturation 40 %, extraction 50 %), so time a stage
    # overran comes out of the next one and the run stays within time_limit
    limits = dataclasses.replace(limits, time_limit=max(0.0, start + 0.4 * time_limit - time.perf_counter()))
    t = time.perf_counter()
    sat = engine.saturate(graph, rules, limits, provenance=bool(provenance and dump_egraph), progress=lambda it: say(
        f"  iteration {it.iteration}: {it.enodes} e-nodes, {it.eclasses} e-classes ({it.seconds:.2f} s)"))
    stages["saturate"] = time.perf_counter() - t

    t = time.perf_counter()
    # measured models time each operator with the model's weights in play (cache-resident or not, as it runs)
    if hasattr(cost_model, "in_context"):
        cost_model = cost_model.in_context(graph.weight_bytes)
    keys = engine.node_cost_keys(sat.egraph)
    unique = {k for ks in keys.values() for k in ks}
    say(f"costing {len(unique)} operator configurations with {getattr(cost_model, 'name', cost_model)}")
    costs = cost_model.costs(unique, progress=_progress_every(say, len(unique))) if progress else \
        cost_model.costs(unique)
    node_costs = {nid: float(sum(costs[k] for k in ks)) for nid, ks in keys.items()}
    stages["cost"] = time.perf_counter() - t

    t = time.perf_counter()
    eg = sat.egraph.with_costs(node_costs).to_serialized()
    # what follows (export, numeric check) keeps at least 10 %; about 0.5 ms a node on 2 cores for large graphs
    after = max(0.1 * time_limit, 0.5e-3 * len(graph.nodes))
    extract_time = max(0.05, min(0.5 * time_limit, start + time_limit - after - time.perf_counter()))
    if verify_latency is None:
        verify_latency = "onnxruntime" in getattr(cost_model, "name", "")
    if candidates is None:
        candidates = DEFAULT_CANDIDATES if verify_latency else 1
    if candidates > 1 and verify_latency and solver == "cpsat":
        exts = extract_top_k(eg, candidates, time_limit=extract_time)
        ext = exts[0]
        say(f"extracted {len(exts)} candidates: costs " + ", ".join(f"{e.cost:.6g}" for e in exts))
    else:
        kw: dict[str, Any] = {"time_limit": extract_time} if solver == "cpsat" else {}
        ext = extract(eg, solver=solver, **kw)
        exts = [ext]
    stages["extract"] = time.perf_counter() - t
    say(f"extracted: cost {ext.cost:.6g} ({ext.status})")

    t = time.perf_counter()
    names = engine.tensor_names_by_class(sat)
    extracted, new_graph = graph_from_selection(sat.egraph, ext.selection, graph, names)
    cost_before = graph_cost(graph, cost_model)
    cost_after = graph_cost(new_graph, cost_model)
    notes = _cost_notes(ext.cost, graph_cost(extracted, cost_model), cost_after, extracted, new_graph)
    kept = cost_after > cost_before
    if kept:  # never return a costlier model
        notes.append(f"the extracted graph costs {cost_after:.6g} as written, more than the original: original kept")
        new_graph, cost_after = graph, cost_before
    # a kept original is the model exactly as given (a re-export of its import can run slower than it), unless
    # input_shapes fixed its dimensions: then the import with those shapes is the model asked for
    as_given = original_proto if not input_shapes else None
    model = as_given if kept and as_given is not None else onnx_io.to_onnx(new_graph)
    stages["export"] = time.perf_counter() - t

    latency = None
    timings: list[CandidateTiming] = []
    chosen_ext = ext  # the extraction written out (the solver's status and bound stay the first one's)
    if verify_latency and not kept:
        t = time.perf_counter()
        others = _other_candidates(exts[1:], sat.egraph, names, graph, new_graph, cost_before, cost_model)
        models = [original_proto, model] + [m for _, _, _, m in others]
        rounds = _latencies(models, graph, cost_model)
        stages["latency"] = time.perf_counter() - t
        times = [statistics.median(r) for r in rounds]
        # each candidate against the original round by round (drift during the timing hits both alike)
        ratio = [1.0] + [_round_ratio(rounds[0], r) for r in rounds[1:]]
        best = max(range(1, len(times)), key=ratio.__getitem__)
        ranks = [0] + [rank for rank, _, _, _ in others]
        costs = [cost_after] + [cost for _, _, cost, _ in others]
        timings = [CandidateTiming(r, c, ms, k + 1 == best) for k, (r, c, ms) in enumerate(
            zip(ranks, costs, times[1:], strict=True))] if others else []
        if best > 1:  # a later candidate ran fastest: it is the optimized model
            _, chosen, cost_after, model = others[best - 2]
            chosen_ext = exts[ranks[best - 1]]
            new_graph = chosen
            notes.append(f"candidate #{ranks[best - 1]} of {len(times) - 1} timed fastest "
                         f"({times[best]:.4f} ms, first choice {times[1]:.4f} ms)")
        latency = (times[0], times[best])
        say(f"end to end: original {latency[0]:.4f} ms, optimized {latency[1]:.4f} ms")
        confirmed = None
        if ratio[best] * (1 - latency_margin) >= 1:  # again, apart from the race it won
            t = time.perf_counter()
            again = _latencies([original_proto, model], graph, cost_model)
            stages["latency"] += time.perf_counter() - t
            confirmed = _round_ratio(*again)
            say(f"end to end, again: {confirmed:.3f}x")
        if confirmed is None or confirmed * (1 - latency_margin) < 1:  # the estimate did not hold: keep the original
            new_graph, cost_after, kept = graph, cost_before, True
            notes.append(f"end to end not faster by {latency_margin:.0%}" + (
                f" when timed again ({confirmed:.3f}x)" if confirmed is not None else "") + ": original kept")
            model = as_given if as_given is not None else onnx_io.to_onnx(graph)

    numeric = None
    if check:
        t = time.perf_counter()
        numeric = check_equal(original_proto, model, reference=_reference(model_or_path))
        stages["check"] = time.perf_counter() - t
        if not numeric.ran:
            raise NumericCheckUnavailable(
                f"the numeric check cannot run: {'; '.join(numeric.problems)}. Nothing was written; pass "
                "--no-check (Python: check=False) to accept the optimized model without the check")
        if numeric.saturated:
            say("numeric check: saturated output(s): " + "; ".join(f"{c.name} ({c.saturated})"
                                                               for c in numeric.saturated))
        if not numeric.ok:
            fired = ", ".join(f"{k} ({v})" for k, v in sorted(sat.rules_fired.items()))
            raise NumericMismatch(f"optimized model differs from the original: {numeric.summary()}; "
                                  f"rewrites involved: {fired or 'none'}. Nothing was written.")
    dump = None
    if dump_egraph:
        t = time.perf_counter()
        dump = build_dump(sat, graph, node_costs, source=label,
                          cost_model=getattr(cost_model, "name", type(cost_model).__name__),
                          rules=len(rules), limits=limits, extraction=chosen_ext, kept_original=kept)
        if dump_egraph is not True:
            dump.write(dump_egraph)
        stages["dump"] = time.perf_counter() - t
    return OptimizeResult(model, new_graph, graph, cost_before, cost_after, sat.iterations, sat.stop_reason,
                          sat.rules_fired, ext.status, ext.bound, ext.gap, chosen_ext.cost, stages, numeric,
                          getattr(cost_model, "name", type(cost_model).__name__), kept, latency,
                          (len(original_proto.graph.node), len(model.graph.node)), notes, dump, timings)


def _latencies(models: list[onnx.ModelProto], graph: Graph, cost_model: Any) -> list[list[float]]:
    """End-to-end latencies (ms) of ``models`` per interleaved round, with the cost model's threads (what the
    user will run)."""
    from eqsat.costs.measured_cpu import end_to_end_rounds

    feeds = onnx_io.random_feeds(graph, seed=0)
    threads = getattr(getattr(cost_model, "inner", cost_model), "threads", 0)
    return end_to_end_rounds(models, [feeds] * len(models), threads=threads, budget_s=LATENCY_BUDGET_S)


def _round_ratio(original: Sequence[float], candidate: Sequence[float]) -> float:
    """How much faster a candidate ran: the median over rounds of original / candidate time (drift during the
    timing hits both alike within a round)."""
    return statistics.median(a / b for a, b in zip(original, candidate, strict=True))


def _other_candidates(exts: Sequence[Any], egraph: EGraph, names: Mapping[str, str], original: Graph, first: Graph,
                      cost_before: float, cost_model: Any) -> list[tuple[int, Graph, float, onnx.ModelProto]]:
    """The extractions after the first as (rank, written graph, cost, model): distinct graphs no costlier than
    the original."""
    from eqsat.search.matching import graph_hash

    seen = {graph_hash(first)}
    out = []
    for rank, e in enumerate(exts, start=1):
        _, g = graph_from_selection(egraph, e.selection, original, names)
        h = graph_hash(g)
        cost = graph_cost(g, cost_model)
        if h in seen or cost > cost_before:
            continue
        seen.add(h)
        out.append((rank, g, cost, onnx_io.to_onnx(g)))
    return out


def _reference(src: str | Path | bytes | onnx.ModelProto) -> str:
    """How the report names the model the optimized one was checked against: the original as given."""
    if isinstance(src, onnx.ModelProto):
        return "the original model (ModelProto as given)"
    if isinstance(src, bytes):
        return "the original model (bytes as given)"
    return f"the original model as given ({src})"


def _cost_notes(extraction_cost: float, extracted_cost: float, final_cost: float, extracted: Graph,
                final: Graph) -> list[str]:
    """Why the final cost differs from the extraction's objective, one note per cause."""
    notes = []
    tol = 1e-9 * max(1.0, abs(extraction_cost))
    if abs(extracted_cost - extraction_cost) > tol:
        aliases = sum(1 for n in extracted.nodes if n.op == "reshape" and n.output in extracted.outputs
                      and n.p["shape"] == extracted.shapes[n.inputs[0]])
        why = f"{aliases} identity node(s) for outputs that share a tensor" if aliases else "graph read-back"
        notes.append(f"{extracted_cost - extraction_cost:+.4g} ms: {why}")
    if abs(final_cost - extracted_cost) > tol:
        merged = sum(1 for n in extracted.nodes if n.op == "concat") - sum(1 for n in final.nodes if n.op == "concat")
        notes.append(f"{final_cost - extracted_cost:+.4g} ms: {merged} binary concat(s) merged into n-ary ones")
    return notes
