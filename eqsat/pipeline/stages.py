"""The stages of an optimization run, in order, and the runner that times them.

Each stage is a function ``(state) -> None`` that reads what the stages before it set on the :class:`State`
and sets its own part: load (ONNX -> IR), rules, saturate (the e-graph; with ``anytime`` its snapshots are
extracted meanwhile, :mod:`eqsat.pipeline.anytime`), cost (every e-node priced), extract (the cheapest graph, or
several candidates), export (IR -> ONNX, the cheapest graph found, never costlier than the original), latency
(the candidates timed end to end), signature (the original file's description carried onto a rewritten model),
check (the numeric check), dump (the e-graph dump) and report (the
:class:`~eqsat.pipeline.result.OptimizeResult`). :func:`run_stages` runs the ones that apply, logs each one's
time and records it in ``result.stage_seconds`` under the stage's key.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx

from eqsat import engine, onnx_io
from eqsat.costs import (
    AnalyticCostModel,
    CostModel,
    PricedCostModel,
    Pricing,
    get_cost_model,
    graph_cost,
    graph_cost_keys,
    price_within,
)
from eqsat.extract import (
    Extraction,
    InvalidExtraction,
    SerializedEGraph,
    extract,
    extract_top_k,
    validate_selection,
)
from eqsat.inspect.dump import EGraphDump, build_dump
from eqsat.ir.blocks import Reduction, reduce_repeats
from eqsat.ir.graph import Graph
from eqsat.ir.symbols import SymbolicShapeError, graph_symbols, representative
from eqsat.ops import CostKey
from eqsat.ops.ort_kernels import kernel_type
from eqsat.pipeline import candidates
from eqsat.pipeline.anytime import REL_EPS, Anytime, node_cost_keys, opaque_cost_keys, price_nodes
from eqsat.pipeline.bodies import BodyResult, optimize_bodies
from eqsat.pipeline.check import (
    NumericCheckUnavailable,
    NumericMismatch,
    NumericReport,
    check_equal,
    describe_reference,
    sizes_to_check,
)
from eqsat.pipeline.options import (
    BODY_SHARE,
    SNAPSHOT_EXACT_SHARE,
    OptimizeOptions,
    default_rules,
    target_rules,
    time_shares,
)
from eqsat.pipeline.result import CandidateTiming, CostCounts, LatencyCheck, OptimizeResult
from eqsat.rules.rule import Rule

log = logging.getLogger(__name__)


class State:
    """One run: its options, and what the stages have found so far (each attribute below is set by the stages
    named beside it; a later stage reads it)."""

    original: onnx.ModelProto  # load: the model as given, the reference for every check
    given: onnx.ModelProto  # load: the model the main graph is imported from (the original, its bodies optimized)
    bodies: list[BodyResult]  # load: the control-flow bodies optimized
    label: str  # load: how messages name the model
    external_data: bool  # load: the file kept its weights as external data
    graph: Graph  # load: the imported model
    engine_graph: Graph  # load: the graph the engine saturates: the imported one, or its reduction (below)
    reduction: Reduction | None = None  # load: the model's repeated blocks, one of them in the engine's graph
    input_keys: list[tuple[CostKey, ...]]  # load: the cost keys of its nodes (eqsat.costs.graph_cost_keys)
    anytime: Anytime  # load: the best graph so far and the trace; saturate, extract and export improve it
    rules: list[Rule]  # rules
    limits: engine.Limits  # saturate: the limits it ran under
    sat: engine.SaturationResult  # saturate
    pricing: Pricing | None  # cost: a measured model's configurations, which were measured and which estimated
    node_costs: dict[str, float]  # cost: e-node id -> ms
    costed: SerializedEGraph  # extract: the e-graph with those costs, as the extractors see it
    extractions: list[Extraction]  # extract: the first choice first
    chosen: Extraction  # extract, latency: the extraction written out
    names: dict[str, str]  # extract: e-class -> tensor name
    new_graph: Graph  # export, latency: the graph written
    model: onnx.ModelProto  # export, latency: the model written
    as_given: onnx.ModelProto | None  # export: what a kept original is written as (None: re-exported)
    cost_before: float  # export
    cost_after: float  # export, latency
    kept: bool  # export, latency: the original is written
    kept_reason: str = ""  # export, latency: why
    notes: list[str]  # export: why the final cost differs from the extraction's
    latency: LatencyCheck | None = None  # latency: the end-to-end timings and their verdict
    timings: list[CandidateTiming]  # latency
    numeric: NumericReport | None = None  # check
    fixed_shapes: bool = False  # load: the import fixed the inputs' dynamic dimensions
    static_reason: str = ""  # load: why the dynamic axes could not be kept (empty: kept, or none)
    dump: EGraphDump | None = None  # dump
    result: OptimizeResult  # report

    def __init__(self, source: str | Path | bytes | onnx.ModelProto, options: OptimizeOptions) -> None:
        self.source = source
        self.options = options
        self.say: Callable[[str], None] = options.progress or (lambda msg: None)
        cm = options.cost_model
        #: the cost model; the cost stage puts it in the model's context (:meth:`CostModel.in_context`)
        self.cost_model: CostModel = cm if isinstance(cm, CostModel) else get_cost_model(cm or "analytic")
        #: when each stage must end (:func:`eqsat.pipeline.options.time_shares`)
        self.shares = time_shares(self.cost_model.is_measured)
        self.verify_latency: bool = (options.verify_latency if options.verify_latency is not None
                                     else self.cost_model.times_end_to_end)
        self.candidate_count: int = (options.candidates if options.candidates is not None
                                     else candidates.DEFAULT_CANDIDATES if self.verify_latency else 1)
        self.timings = []
        self.stage_seconds: dict[str, float] = {}
        self.start = time.perf_counter()  # the time limit counts from here

    def stitch(self, graph: Graph) -> Graph:
        """A graph read back from the engine's e-graph as the whole model: with repeated blocks, the optimized
        block once per instance (:meth:`eqsat.ir.blocks.Reduction.stitch`); else the graph itself."""
        return graph if self.reduction is None else self.reduction.stitch(graph)


def load(s: State) -> None:
    """Read the model (kept as given: the reference of every check), import it into the IR, and start the
    anytime record with it as the best graph so far."""
    s.original, s.label, s.external_data = onnx_io.read_model_stored(s.source)
    # control-flow bodies first, each a model of its own; the main graph comes from the model with them optimized.
    # They take at most half of saturation's share; not under an end-to-end check, which could not time a body's
    # rewrite apart from the main graph's (the original would be kept, or the bodies' rewrites written untimed)
    budget = 0.0 if s.verify_latency else min(BODY_SHARE, s.shares.saturation / 2) * s.options.time_limit
    s.given, s.bodies = optimize_bodies(s.original, s.options, budget)
    for b in s.bodies:
        s.say(f"control-flow body optimized: {b}")
    s.graph = _import(s)
    s.say(f"imported {len(s.graph.nodes)} nodes ({sum(1 for n in s.graph.nodes if n.is_opaque)} opaque)")
    s.engine_graph, s.reduction = s.graph, None
    # one instance of repeated blocks stands for all (not with a dump: it would hold the reduced graph's e-graph)
    if s.options.reuse_blocks and not s.options.dump_egraph:
        s.reduction = reduce_repeats(s.graph)
        if s.reduction is not None:
            s.engine_graph = s.reduction.reduced
            s.say(s.reduction.describe())
    # measured models time each operator with the model's weights in play (cache-resident or not, as it runs)
    s.cost_model = s.cost_model.in_context(s.graph.weight_bytes)
    s.input_keys = graph_cost_keys(s.graph)
    if s.cost_model.is_measured:  # a model optimized before: its operators are cached, saturation can take more
        first = {k for ks in s.input_keys for k in ks}
        s.shares = time_shares(True, warm=len(s.cost_model.cached(first)) == len(first))
    o = s.options
    # exact extraction of each snapshot: at most 5 % of the time limit (2 s under the 60 s default) each, within
    # saturation's share; CP-SAT's portfolio often proves a small e-graph optimal in a fraction of that. A measured
    # model prices the input in the cost stage, with the e-graph's configurations and within their time
    s.anytime = Anytime(s.engine_graph, AnalyticCostModel() if s.cost_model.is_measured else s.cost_model,
                        s.start, exact_seconds=SNAPSHOT_EXACT_SHARE * o.time_limit if o.solver == "cpsat" else 0.0,
                        deadline=s.start + s.shares.saturation * o.time_limit, written=s.stitch)


def _import(s: State) -> Graph:
    """The model's graph: with its dynamic axes as symbols (``dynamic``), costed at the sizes ``dims`` and
    ``input_shapes`` give them; else, or where a size cannot be followed in the symbols, with them fixed."""
    o = s.options
    graph, s.static_reason = onnx_io.load_with_axes(s.given, label=s.label, input_shapes=o.input_shapes,
                                                    dims=o.dims, dynamic=o.dynamic)
    s.fixed_shapes = not graph_symbols(graph)
    if s.static_reason:  # a size not followed in the symbols, or one the model fixes (a reshape to batch 1)
        log.warning("%s; optimizing with the dimensions fixed", s.static_reason)
        s.say(f"dynamic axes fixed: {s.static_reason}")
    elif graph_symbols(graph):
        s.say("dynamic axes kept: " + ", ".join(f"{k} (costed at {v})" for k, v in representative(graph).items()))
    return graph


def choose_rules(s: State) -> None:
    """The rules given, or the default ones, and the target's."""
    s.rules = list(s.options.rules) if s.options.rules is not None else default_rules(s.options.layouts)
    names = {r.name for r in s.rules}
    s.rules += [r for r in target_rules(s.options.target) if r.name not in names]


def saturate(s: State) -> None:
    """Saturate the e-graph of the imported graph under the limits; with ``anytime``, extract each snapshot of
    it meanwhile, greedily and then briefly by CP-SAT (:mod:`eqsat.pipeline.anytime`)."""
    o = s.options
    # each stage ends by its share's deadline from the start (State.shares), so time a stage overran comes out of
    # the next one and the run stays within time_limit
    deadline = s.start + s.shares.saturation * o.time_limit
    s.limits = dataclasses.replace(o.saturation_limits(s.shares),
                                   time_limit=max(0.0, deadline - time.perf_counter()))
    s.sat = engine.saturate(s.engine_graph, s.rules, s.limits, provenance=bool(o.provenance and o.dump_egraph),
                            progress=lambda it: s.say(f"  iteration {it.iteration}: {it.enodes} e-nodes, "
                                                      f"{it.eclasses} e-classes ({it.seconds:.2f} s)"),
                            on_snapshot=_on_snapshot(s) if _snapshots_pay(s) else None)


def _snapshots_pay(s: State) -> bool:
    """Whether to extract snapshots during saturation: with ``anytime``, and only under computed costs (a
    measured model would time operators on a core the engine is using, and the timings would show it)."""
    return s.options.anytime and not s.cost_model.is_measured


def _on_snapshot(s: State) -> Callable[[engine.Snapshot], None]:
    def take(snap: engine.Snapshot) -> None:
        before = s.anytime.best.cost
        s.anytime.on_snapshot(snap)
        if s.anytime.best.cost < before:
            s.say(f"  best so far: {s.anytime.best.cost:.6g} ({s.anytime.best.source}, "
                  f"{s.anytime.best.seconds:.2f} s)")

    return take


def cost(s: State) -> None:
    """Price every e-node: the operator configurations it runs as, under the cost model. A measured model times
    the input graph's configurations first, then the others by analytic cost, until the costs' share of the
    time limit, and the rest are estimated (:func:`eqsat.costs.price_within`); every later figure of the run is
    read from that one pricing."""
    engine_keys = s.input_keys if s.reduction is None else graph_cost_keys(s.engine_graph)
    keys = node_cost_keys(s.sat.egraph, s.engine_graph, opaque_cost_keys(s.engine_graph, engine_keys))
    first = {k for ks in s.input_keys for k in ks}
    unique = {k for ks in keys.values() for k in ks} | first
    s.say(f"costing {len(unique)} operator configurations with {s.cost_model.name}")
    s.pricing = None
    if s.cost_model.is_measured:  # a computed model prices everything at once, below
        s.pricing = p = price_within(s.cost_model, unique, first=first,
                                     deadline=s.start + s.shares.costs * s.options.time_limit,
                                     progress=_progress_every(s.say) if s.options.progress else None)
        s.cost_model = PricedCostModel(p, s.cost_model)
        s.anytime.reprice(s.cost_model)
        s.say(f"priced {len(unique)} configurations in {p.seconds:.1f} s: {p.measured} measured "
              f"({p.cached} from the cache), {len(p.estimated)} estimated (analytic, scaled to the measured)")
    s.node_costs = price_nodes(s.sat.egraph, s.cost_model, keys=keys)


def extract_graphs(s: State) -> None:
    """Extract the cheapest graph from the costed e-graph (CP-SAT, or greedy), or with candidates > 1 and the
    latency check that many distinct near-optimal graphs."""
    o = s.options
    s.costed = eg = s.sat.egraph.with_costs(s.node_costs).to_serialized()
    # what follows (export, the timings, the check) keeps its share; about 0.5 ms a node on 2 cores for large graphs
    after = max(s.shares.after * o.time_limit, 0.5e-3 * len(s.graph.nodes))
    seconds = max(0.05, min(s.shares.extraction * o.time_limit,
                            s.start + o.time_limit - after - time.perf_counter()))
    # the best graph so far (or the input graph's own term) is a valid extraction: the answer is never costlier
    began = time.perf_counter()
    s.names = names = engine.tensor_names_by_class(s.sat)
    start = _start(s, eg)
    if o.anytime and o.solver == "cpsat":  # the cheap answer first: greedy on the final e-graph
        s.anytime.greedy(s.sat.egraph, eg, names, "greedy, final e-graph", start)
        start = _start(s, eg)
    seconds = max(0.05, seconds - (time.perf_counter() - began))
    began = time.perf_counter()
    progress = (lambda line: s.say(f"  {line}")) if o.progress else None  # the solver's lines, indented
    if s.candidate_count > 1 and s.verify_latency and o.solver == "cpsat":
        s.extractions = extract_top_k(eg, s.candidate_count, time_limit=seconds, start=start, progress=progress)
        s.say(f"extracted {len(s.extractions)} candidates: costs " + ", ".join(f"{e.cost:.6g}" for e in s.extractions))
    else:
        s.extractions = [extract(eg, solver=o.solver, start=start, progress=progress,
                                 **({"time_limit": seconds} if o.solver == "cpsat" else {}))]
    s.chosen = s.extractions[0]
    found = None if s.chosen.found_after is None else began - s.start + s.chosen.found_after
    s.anytime.offer(s.sat.egraph, s.chosen.selection, names, s.chosen.solver, found)
    s.say(f"extracted: cost {s.chosen.cost:.6g} ({s.chosen.status})")


def _start(s: State, eg: SerializedEGraph) -> dict[str, str] | None:
    """The warm start of the final extraction: the best graph so far, or the input graph's term."""
    best = s.anytime.start_for(s.sat.egraph)
    if best is not None:
        try:
            validate_selection(eg, best)
            return best
        except InvalidExtraction as e:  # never expected: relocation keeps the terms and their order
            log.warning("the best graph so far is no valid extraction of the final e-graph (%s)", e)
    return _input_start(s, eg)


def _input_start(s: State, eg: SerializedEGraph) -> dict[str, str] | None:
    """The input graph's term as a selection of the costed e-graph, or None where it is not a complete, valid
    one (an e-graph that lost a term; never for the engine's own)."""
    start = s.anytime.input_selection(s.sat.egraph)
    if start is None:
        return None
    try:
        validate_selection(eg, start)
    except InvalidExtraction as e:
        log.warning("the input graph's term is no valid extraction (%s); extracting without it", e)
        return None
    return start


def export(s: State) -> None:
    """Read the first choice back into the IR, price it as written and export it to ONNX; a graph costlier than
    the original is not written: the original is kept."""
    # a kept original is the model exactly as given (a re-export of its import can run slower than it), unless
    # the user fixed its dynamic dimensions: then the import with those shapes is the model asked for
    s.as_given = s.given if s.options.dynamic or not s.options.input_shapes and not s.options.dims else None
    lost = engine.input_terms(s.sat.egraph, s.engine_graph).missing
    if lost:  # never expected: the e-graph holds every term of its input graph; without them, no read-back is sound
        log.warning("the e-graph lost %d input term(s) (%s); the original is kept", len(lost), ", ".join(lost[:3]))
        s.cost_before = s.cost_after = s.anytime.cost_before
        s.new_graph, s.notes, s.kept = s.graph, [], True
        s.kept_reason = f"the e-graph lost {len(lost)} of the input graph's terms (an engine fault; e.g. {lost[0]})"
        s.model = s.as_given if s.as_given is not None else onnx_io.to_onnx(s.graph)
        return
    extracted, written = engine.graph_from_selection(s.sat.egraph, s.chosen.selection, s.engine_graph, s.names)
    s.new_graph = s.stitch(written)
    s.cost_before = s.anytime.cost_before
    s.cost_after = graph_cost(s.new_graph, s.cost_model)
    s.notes = []
    if _prefer_best_so_far(s):
        extracted, written = engine.graph_from_selection(s.sat.egraph, s.chosen.selection, s.engine_graph,
                                                         s.names)
    # the notes compare the extraction with the graph it chose, as the engine saw it (one block of repeated ones)
    written_cost = graph_cost(written, s.cost_model)
    s.notes[:0] = _cost_notes(s.chosen.cost, graph_cost(extracted, s.cost_model), written_cost, extracted, written)
    if s.reduction is not None:
        more = s.reduction.repeats.count - 1
        s.notes.append(f"{s.cost_after - written_cost:+.4g} ms: {more} more instance(s) of the repeated block, "
                       "which the extraction priced once")
    # never return a costlier model, nor rewrite one for no gain (a rewrite at equal cost is work for nothing:
    # weight transforms, a re-export, and a model the user has to check again)
    s.kept = not s.cost_after < s.cost_before * (1 - REL_EPS)
    if s.kept:
        s.kept_reason = (f"the extracted graph costs {s.cost_after:.6g} ms as written, more than the original"
                         if s.cost_after > s.cost_before * (1 + REL_EPS) else "no cheaper graph found")
        s.new_graph, s.cost_after = s.graph, s.cost_before
    if not s.kept:
        try:
            s.model = onnx_io.to_onnx(s.new_graph)
        except SymbolicShapeError as e:  # a size the rewritten graph would write where ONNX needs a constant
            s.kept, s.kept_reason = True, f"the optimized graph cannot keep the dynamic axes ({e})"
            s.new_graph, s.cost_after = s.graph, s.cost_before
    if s.kept:
        s.model = s.as_given if s.as_given is not None else onnx_io.to_onnx(s.new_graph)


def _prefer_best_so_far(s: State) -> bool:
    """Choose (and return True) the best graph found earlier where it is cheaper as written than the final
    extraction's (the extraction objective prices binary concat chains, the written graph n-ary concats, so a
    start the solver did not improve on can still be the cheaper one written). It is chosen as a selection of
    the final e-graph, so the dump shows it and its tensors get the final e-graph's names."""
    best = s.anytime.best
    if best.egraph is None or not best.cost < s.cost_after * (1 - REL_EPS):
        return False
    selection = s.anytime.start_for(s.sat.egraph)
    if selection is None:  # never expected: the final e-graph holds every earlier term
        log.warning("the best graph so far is not in the final e-graph; writing the final extraction's")
        return False
    _, graph = engine.graph_from_selection(s.sat.egraph, selection, s.engine_graph, s.names)
    graph = s.stitch(graph)
    cost = graph_cost(graph, s.cost_model)
    if cost < s.cost_after:
        s.chosen = dataclasses.replace(s.chosen, selection=selection, status="start", found_after=None,
                                       cost=validate_selection(s.costed, selection))
        s.extractions[0] = s.chosen
        s.new_graph, s.cost_after = graph, cost
        s.notes.append(f"the graph {best.source} found at {best.seconds:.2f} s costs {cost:.6g} as written, less "
                       "than the final extraction's: it is written")
        return True
    return False


def time_latency(s: State) -> None:
    """Time the first choice and the other candidates against the original end to end; write the one raced
    against the original if it wins measurably, twice, else the original (:func:`candidates.race`)."""
    first = candidates.Candidate(0, s.new_graph, s.cost_after, s.model)
    others = candidates.other_candidates(s.extractions[1:], s.sat.egraph, s.names, s.engine_graph, s.new_graph,
                                         s.cost_before, s.cost_model, stitch=s.stitch)
    # two timings share what the time limit leaves after the check (about as long as one timing)
    left = s.start + s.options.time_limit - time.perf_counter()
    budget = max(0.5, min(candidates.LATENCY_BUDGET_S, left / 4))
    race = candidates.race(s.original, [first, *others], s.graph, s.cost_model, s.options.latency_margin, s.say,
                           budget)
    s.latency, s.timings = race.check, race.timings
    if race.faster:
        if race.winner is not first:  # another candidate ran measurably faster than the first choice
            s.new_graph, s.cost_after, s.model = race.winner.graph, race.winner.cost, race.winner.model
            s.chosen = s.extractions[race.winner.rank]
    else:
        s.new_graph, s.cost_after, s.kept = s.graph, s.cost_before, True
        s.kept_reason = race.check.verdict
        s.model = s.as_given if s.as_given is not None else onnx_io.to_onnx(s.graph)


def keep_signature(s: State) -> None:
    """Give the written model what the original says about itself (producer, doc strings, metadata, the
    declared types of intermediate tensors that still exist): it replaces the original in a deployment."""
    s.model = onnx_io.carry_signature(s.original, s.model, s.new_graph, dims=not s.fixed_shapes)


def check(s: State) -> None:
    """Check that the written model computes what the original, as given, computes; raise if it does not, or if
    the check cannot run."""
    # with dynamic axes, at the representative sizes and at others: a rewrite right only at batch 1 shows
    sizes, shapes = sizes_to_check(s.graph)
    s.numeric = numeric = check_equal(s.original, s.model, reference=describe_reference(s.source), sizes=sizes,
                                      input_shapes=shapes)
    if not numeric.ran:
        at = "" if not sizes[0] else (" at " + ", ".join(f"{k}={v}" for k, v in sizes[0].items()) + " (give sizes it "
                                  "runs at with --dim, Python: dims=)")
        raise NumericCheckUnavailable(
            f"the numeric check cannot run{at}: {'; '.join(numeric.problems)}. Nothing was written; pass "
            "--no-check (Python: check=False) to accept the optimized model without the check")
    if numeric.saturated:
        s.say("numeric check: saturated output(s): " + "; ".join(f"{c.name} ({c.saturated})"
                                                             for c in numeric.saturated))
    if not numeric.ok:
        fired = ", ".join(f"{k} ({v})" for k, v in sorted(s.sat.rules_fired.items()))
        raise NumericMismatch(f"optimized model differs from the original: {numeric.summary()}; "
                              f"rewrites involved: {fired or 'none'}. Nothing was written.")


def dump(s: State) -> None:
    """The e-graph dump with costs and the choice written out, written to the path given (if one was)."""
    s.dump = build_dump(s.sat, s.engine_graph, s.node_costs, source=s.label, cost_model=s.cost_model.name,
                        rules=len(s.rules), limits=s.limits, extraction=s.chosen, kept_original=s.kept)
    if s.options.dump_egraph is not True:  # a path
        s.dump.write(s.options.dump_egraph)


def report(s: State) -> None:
    """The result: the model written and the report of the run."""
    sat, first = s.sat, s.extractions[0]  # the solver's status and bound are the first extraction's
    p = s.pricing
    counts = None if p is None else CostCounts(len(p.costs), p.measured, p.cached, len(p.estimated), p.seconds)
    s.result = OptimizeResult(
        s.model, s.new_graph, s.graph, s.cost_before, s.cost_after, sat.iterations, sat.stop_reason,
        sat.rules_fired, first.status, first.bound, first.gap, s.chosen.cost, stage_seconds=s.stage_seconds,
        numeric=s.numeric, cost_model=s.cost_model.name, kept_original=s.kept and not s.bodies, latency=s.latency,
        onnx_nodes=(len(s.original.graph.node), len(s.model.graph.node)), cost_notes=s.notes, egraph_dump=s.dump,
        candidates=s.timings, trace=list(s.anytime.trace), best_source=s.anytime.best.source,
        snapshots=(s.anytime.snapshots, s.anytime.snapshot_seconds),
        egraph_size=sat.egraph.tensor_size, kept_reason=s.kept_reason,
        cost_counts=counts, bodies=[str(b) for b in s.bodies], dims=representative(s.graph),
        static_reason=s.static_reason, blocks="" if s.reduction is None else s.reduction.describe(),
        external_data=s.external_data, target=s.options.target,
        kernels=_kernels_written(s))


def _kernels_written(s: State) -> dict[str, int]:
    """The runtime kernels the written model holds that this run wrote, by type: the main graph's, unless the
    original was kept, and its control-flow bodies'."""
    counts = Counter() if s.kept else Counter(kernel_type(n.op) for n in s.new_graph.nodes if n.spec.runtime)
    for b in s.bodies:
        counts.update(b.kernels)
    return dict(counts)


@dataclass(frozen=True)
class Stage:
    """One step of the run: ``run`` when ``applies``, its time recorded under ``key`` (None: logged only)."""

    name: str
    run: Callable[[State], None]
    key: str | None
    applies: Callable[[State], bool] = lambda s: True


#: The run, in order. The keys are those of ``OptimizeResult.stage_seconds`` (the report and the benchmarks
#: read them): choosing the rules and assembling the result are not timed there.
STAGES: tuple[Stage, ...] = (
    Stage("load", load, "import"),
    Stage("rules", choose_rules, None),
    Stage("saturate", saturate, "saturate"),
    Stage("cost", cost, "cost"),
    Stage("extract", extract_graphs, "extract"),
    Stage("export", export, "export"),
    Stage("latency", time_latency, "latency", lambda s: s.verify_latency and not s.kept),
    Stage("signature", keep_signature, None, lambda s: s.model is not s.as_given),
    Stage("check", check, "check", lambda s: s.options.check),
    Stage("dump", dump, "dump", lambda s: bool(s.options.dump_egraph)),
    Stage("report", report, None),
)


def run_stages(state: State, stages: Sequence[Stage] = STAGES) -> None:
    """Run the ``stages`` that apply to ``state`` in order; log each one's time (DEBUG on this module's logger)
    and record it in ``state.stage_seconds`` under its key."""
    for stage in stages:
        if not stage.applies(state):
            continue
        t = time.perf_counter()
        stage.run(state)
        seconds = time.perf_counter() - t
        if stage.key is not None:
            state.stage_seconds[stage.key] = seconds
        log.debug("stage %s: %.3f s (%.3f s since the start)", stage.name, seconds, time.perf_counter() - state.start)


def _progress_every(say: Callable[[str], None]) -> Callable[[int, int], None]:
    """A progress callback that says ``timed done/total`` about ten times."""

    def report(done: int, total: int) -> None:
        if done % max(1, total // 10) == 0 or done == total:
            say(f"  timed {done}/{total}")

    return report


def _cost_notes(extraction_cost: float, extracted_cost: float, final_cost: float, extracted: Graph,
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

