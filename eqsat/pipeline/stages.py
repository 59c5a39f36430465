"""The stages of an optimization run, each a function from the :class:`~eqsat.pipeline.records.Run` and the
records it needs (its parameters, named as the records are) to the record it makes (:mod:`eqsat.pipeline.records`):

load (ONNX -> IR: :class:`Loaded`), rules (the rule set), saturate (the e-graph, :class:`Saturated`; with
``anytime`` its snapshots are extracted meanwhile, :mod:`eqsat.pipeline.anytime`), cost (every e-node priced,
:class:`Priced`), extract (the cheapest graph, or several candidates: :class:`Extracted`), export (IR -> ONNX,
the cheapest graph found, never costlier than the original: a :class:`Decision`), latency (the candidates timed
end to end) and signature (the original file's description carried onto a rewritten model), which refine the
decision, check (the numeric check: a report), dump (the e-graph dump) and report (the
:class:`~eqsat.pipeline.result.OptimizeResult`). :mod:`eqsat.pipeline.run` lists them in order with what each
makes, and runs them.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence

from eqsat import engine, onnx_io
from eqsat.costs import (
    AnalyticCostModel,
    PricedCostModel,
    graph_cost,
    graph_cost_keys,
    price_within,
)
from eqsat.extract import Extraction, validate_selection
from eqsat.inspect.dump import EGraphDump, build_dump
from eqsat.ir.blocks import reduce_repeats
from eqsat.ir.graph import Graph
from eqsat.ir.rule import Rule
from eqsat.ir.symbols import SymbolicShapeError, graph_size_inputs, graph_symbols, representative
from eqsat.pipeline import candidates, executors, figures, transforms
from eqsat.pipeline.anytime import REL_EPS, Anytime, node_cost_keys, opaque_cost_keys, price_nodes
from eqsat.pipeline.bodies import optimize_bodies
from eqsat.pipeline.check import (
    NumericCheckUnavailable,
    NumericMismatch,
    NumericReport,
    check_equal,
    describe_reference,
    sizes_to_check,
)
from eqsat.pipeline.choices import default_rules, in_model_precision, with_fold_rules
from eqsat.pipeline.descent import HEAD_START, MERGES, Descent, first_answer, first_merges
from eqsat.pipeline.options import BODY_SHARE, SNAPSHOT_EXACT_SHARE, STAGE_EXACT_SHARE, STAGE_NODES, time_shares
from eqsat.pipeline.pet_search import pet_search
from eqsat.pipeline.records import Decision, Extracted, Loaded, Priced, Run, Saturated
from eqsat.pipeline.result import (
    CandidateTiming,
    CostCounts,
    LatencyCheck,
    OptimizeResult,
)
from eqsat.pipeline.transforms import Recalled
from eqsat.rules.pet.edges import move_rules

log = logging.getLogger(__name__)


def load(run: Run) -> Loaded:
    """Read the model (kept as given: the reference of every check), import it into the IR, and start the
    anytime record with it as the best graph so far."""
    o = run.options
    # the weights of a model with external data stay in their files: read where needed, never held twice
    original, label, external_data = onnx_io.read_model_stored(run.source, weights_on_disk=True)
    shares = time_shares(run.cost_model.is_measured)
    # control-flow bodies first, each a model of its own; the main graph comes from the model with them optimized.
    # They take at most half of saturation's share; not under an end-to-end check, which could not time a body's
    # rewrite apart from the main graph's (the original would be kept, or the bodies' rewrites written untimed)
    budget = 0.0 if run.verify_latency else min(BODY_SHARE, shares.saturation / 2) * o.time_limit
    given, bodies = optimize_bodies(original, o, budget, run.optimize)
    for b in bodies:
        run.say(f"control-flow body optimized: {b}")
    graph, static_reason = onnx_io.load_with_axes(given, label=label, input_shapes=o.input_shapes, dims=o.dims,
                                                  dynamic=o.dynamic, as_written=o.as_written)
    if static_reason:  # a size not followed in the symbols, or one the model fixes (a reshape to batch 1)
        log.warning("%s; optimizing with the dimensions fixed, to report what that gains; the original is written "
                    "(pass --static to write the model at fixed sizes)", static_reason)
        run.say(f"dynamic axes fixed for the run: {static_reason}")
    elif graph_symbols(graph):
        run.say("dynamic axes kept: " + ", ".join(representative(graph)) + "; " + figures.pricing_words(graph))
    run.say(f"imported {len(graph.nodes)} nodes ({sum(1 for n in graph.nodes if n.is_opaque)} opaque)"
            + (", as written (no folds)" if o.as_written else ""))
    # measured models time each operator with the model's weights in play (cache-resident or not, as it runs)
    cost_model = run.cost_model.in_context(graph.weight_bytes)
    cost_model, said = in_model_precision(cost_model, graph.meta)  # a half-precision model: in its own
    if said:
        run.say(said)
    # the first answer before anything else the run does: the merges that need no search (milliseconds)
    merges = first_merges(graph, cost_model) if first_answer(o, graph, cost_model) else None
    # one instance of repeated blocks stands for all (not with a dump: it would hold the reduced graph's e-graph)
    # (nor for the parallel executor: the reduced graph's pieces have no critical path of the whole model)
    reduction = reduce_repeats(graph) if o.reuse_blocks and not o.dump_egraph and o.parallel is None else None
    if reduction is not None:
        run.say(reduction.describe())
    engine_graph = graph if reduction is None else reduction.reduced
    input_keys = tuple(graph_cost_keys(graph))
    if cost_model.is_measured:  # a model optimized before: its operators are cached, saturation can take more
        first = {k for ks in input_keys for k in ks}
        shares = time_shares(True, warm=len(cost_model.cached(first)) == len(first))
    # a kept original is the model exactly as given (a re-export of its import can run slower than it), unless
    # the user fixed its dynamic dimensions: then the import with those shapes is the model asked for
    as_given = given if o.dynamic or not o.input_shapes and not o.dims else None
    # exact extraction of each snapshot: at most 5 % of the time limit (2 s under the 60 s default) each, within
    # saturation's share; CP-SAT's portfolio often proves a small e-graph optimal in a fraction of that. A measured
    # model prices the input in the cost stage, with the e-graph's configurations and within their time
    anytime = Anytime(engine_graph, AnalyticCostModel() if cost_model.is_measured else cost_model, run.start,
                      exact_seconds=SNAPSHOT_EXACT_SHARE * o.time_limit if run.solver.exact else 0.0,
                      deadline=run.by(shares.saturation), written=None if reduction is None else reduction.stitch,
                      objective=run.objective,
                      stage_seconds=STAGE_EXACT_SHARE * o.time_limit if run.solver.exact else 0.0)
    if merges is not None and anytime.offer_graph(merges.graph, merges.cost, MERGES, merges.at - run.start):
        run.say(f"  best so far: {merges.cost:.6g} ({MERGES}: {merges.groups} group(s), {merges.at - run.start:.3f} s)")
    return Loaded(original=original, given=given, bodies=tuple(bodies), label=label, external_data=external_data,
                  graph=graph, engine_graph=engine_graph, reduction=reduction, input_keys=input_keys,
                  fixed_shapes=not graph_symbols(graph), static_reason=static_reason, as_given=as_given,
                  cost_model=cost_model, shares=shares, anytime=anytime)


def choose_rules(run: Run) -> tuple[Rule, ...]:
    """The rules given, or the default ones, and the target's; as written, the import's folds' too."""
    o = run.options
    rules = list(o.rules) if o.rules is not None else default_rules(o.layouts)
    rules = with_fold_rules(rules) if o.as_written else rules
    names = {r.name for r in rules}
    return tuple(rules + [r for r in run.target.rules() if r.name not in names])


def recall(run: Run, loaded: Loaded, rules: tuple[Rule, ...]) -> Recalled | None:
    """The transformation a run with these rules, cost model and options stored for a model of this one's
    structure, replayed on it (:mod:`eqsat.pipeline.transforms`), or None: then the search runs."""
    key = transforms.run_key(loaded.graph, rules, loaded.cost_model, run.options)
    if key is None:
        return None
    found = transforms.TransformCache().recall(key, loaded.graph)
    if found is not None:
        run.say(f"cached transformation of this structure (stored {found.stored}): no search")
    return found


def saturate(run: Run, loaded: Loaded, rules: tuple[Rule, ...]) -> Saturated:
    """Saturate the e-graph of the imported graph under the limits; with ``anytime``, extract each snapshot of
    it meanwhile, greedily and then briefly by CP-SAT (:mod:`eqsat.pipeline.anytime`)."""
    o = run.options
    # each stage ends by its share's deadline from the start, so time a stage overran comes out of the next one
    # and the run stays within time_limit
    deadline = run.by(loaded.shares.saturation)
    found, pet_seconds = pet_search(loaded.engine_graph, deadline, run.say) if o.pet else ([], 0.0)
    # snapshots are extracted only under computed costs: a measured model would time operators on a core the
    # engine is using, and the timings would show it
    snapshots = o.anytime and not loaded.cost_model.is_measured
    # with exact extraction, growth pauses once at an e-graph CP-SAT can finish (options.STAGE_NODES)
    limits = dataclasses.replace(o.saturation_limits(loaded.shares),
                                 time_limit=max(0.0, deadline - time.perf_counter()),
                                 stage_nodes=STAGE_NODES if snapshots and run.solver.exact else None)
    descent = None  # the descent works while this waits for the engine, from the merges' graph or the input
    if first_answer(o, loaded.graph, loaded.cost_model):
        best = loaded.anytime.best
        descent = Descent(best.graph if best.source == MERGES else loaded.graph, rules, loaded.cost_model,
                          loaded.anytime, deadline=deadline, say=run.say)
    # PET's rewrites come with the rules that join consecutive ones (their moves cancel where they meet)
    engine_rules = [*rules, *(move_rules() if found else ())]
    sat = engine.saturate(loaded.engine_graph, engine_rules, limits, provenance=bool(o.provenance and o.dump_egraph),
                          progress=lambda it: run.say(f"  iteration {it.iteration}: {it.enodes} e-nodes, "
                                                      f"{it.eclasses} e-classes ({it.seconds:.2f} s)"),
                          on_snapshot=_on_snapshot(run, loaded.anytime, descent) if snapshots else None,
                          idle=None if descent is None else descent.step, head_start=HEAD_START,
                          alternatives=[r.alternative for r in found])
    if descent is not None:
        run.say(f"descent: {descent.describe()}")
    return Saturated(limits, sat, tuple(found), pet_seconds)


def _on_snapshot(run: Run, anytime: Anytime, descent: Descent | None) -> Callable[[engine.Snapshot], None]:
    def take(snap: engine.Snapshot) -> None:
        if descent is not None:
            descent.before_snapshot()
        before = anytime.best.cost
        anytime.on_snapshot(snap)
        if anytime.best.cost < before:
            run.say(f"  best so far: {anytime.best.cost:.6g} ({anytime.best.source}, {anytime.best.seconds:.2f} s)")

    return take


def cost(run: Run, loaded: Loaded, saturated: Saturated) -> Priced:
    """Price every e-node: the operator configurations it runs as, under the cost model. A measured model times
    the input graph's configurations first, then the others by analytic cost, until the costs' share of the
    time limit, and the rest are estimated (:func:`eqsat.costs.price_within`); every later figure of the run is
    read from that one pricing."""
    engine_keys = loaded.input_keys if loaded.reduction is None else graph_cost_keys(loaded.engine_graph)
    egraph = saturated.result.egraph
    keys = node_cost_keys(egraph, loaded.engine_graph, opaque_cost_keys(loaded.engine_graph, engine_keys))
    first = {k for ks in loaded.input_keys for k in ks}
    unique = {k for ks in keys.values() for k in ks} | first
    cost_model = loaded.cost_model
    run.say(f"costing {len(unique)} operator configurations with {cost_model.name}")
    pricing = None
    if cost_model.is_measured:  # a computed model prices everything at once, below
        pricing = p = price_within(cost_model, unique, first=first, deadline=run.by(loaded.shares.costs),
                                   progress=_progress_every(run.say) if run.options.progress else None)
        cost_model = PricedCostModel(p, cost_model)
        loaded.anytime.reprice(cost_model)
        run.say(f"priced {len(unique)} configurations in {p.seconds:.1f} s: {p.measured} measured "
                f"({p.cached} from the cache), {len(p.estimated)} estimated (analytic, scaled to the measured)")
    return Priced(cost_model, pricing, price_nodes(egraph, cost_model, keys=keys))


def extract(run: Run, loaded: Loaded, saturated: Saturated, priced: Priced) -> Extracted:
    """Extract the cheapest graph from the costed e-graph (with the run's solver), or with candidates > 1 and the
    latency check that many distinct near-optimal graphs."""
    o, sat, anytime = run.options, saturated.result, loaded.anytime
    eg = sat.egraph.with_costs(priced.node_costs).to_serialized()
    # what follows (export, the timings, the check) keeps its share; about 0.5 ms a node on 2 cores for large graphs
    after = max(loaded.shares.after * o.time_limit, 0.5e-3 * len(loaded.graph.nodes))
    seconds = max(0.05, min(loaded.shares.extraction * o.time_limit, run.left() - after))
    # the best graph so far (or the input graph's own term) is a valid extraction: the answer is never costlier
    began, names = time.perf_counter(), engine.tensor_names_by_class(sat)
    anytime.attach(sat.egraph)  # a first answer no snapshot held: extraction starts from it where this one does
    start = loaded.anytime.warm_start(sat.egraph, eg)
    if o.anytime and run.solver.exact:  # the cheap answer first: greedy on the final e-graph
        anytime.greedy(sat.egraph, eg, names, "greedy, final e-graph", start)
        start = loaded.anytime.warm_start(sat.egraph, eg)
    seconds = max(0.05, seconds - (time.perf_counter() - began))
    began = time.perf_counter()
    progress = (lambda line: run.say(f"  {line}")) if o.progress else None  # the solver's lines, indented
    count = run.candidate_count if run.verify_latency else 1
    extractions = run.solver.extract_several(eg, count, start=start, seconds=seconds, progress=progress)
    if count > 1 and run.solver.exact:
        run.say(f"extracted {len(extractions)} candidates: costs " + ", ".join(f"{e.cost:.6g}" for e in extractions))
    chosen = extractions[0]
    found = None if chosen.found_after is None else began - run.start + chosen.found_after
    anytime.offer(sat.egraph, chosen.selection, names, chosen.solver, found)
    run.say(f"extracted: cost {chosen.cost:.6g} ({chosen.status})")
    return Extracted(eg, tuple(extractions), names)


def keep_original(loaded: Loaded, reason: str, *, cost: float, extractions: tuple[Extraction, ...],
                  chosen: Extraction, notes: Sequence[str] = (), latency: LatencyCheck | None = None,
                  timings: Sequence[CandidateTiming] = ()) -> Decision:
    """The decision to write the original, at its ``cost``, and why: the model as given, or its import where the
    user fixed its dimensions (``Loaded.as_given``). The rest is what the run found, for the report."""
    model = loaded.as_given if loaded.as_given is not None else onnx_io.to_onnx(loaded.graph)
    return Decision(model=model, graph=loaded.graph, cost_before=cost, cost_after=cost, extractions=extractions,
                    chosen=chosen, kept=True, kept_reason=reason, notes=tuple(notes), latency=latency,
                    timings=tuple(timings))


def export(run: Run, loaded: Loaded, saturated: Saturated | None = None, priced: Priced | None = None,
           extracted: Extracted | None = None, recalled: Recalled | None = None) -> Decision:
    """Read the first choice back into the IR (or take the cached transformation's graph), price it as written
    and export it to ONNX; a graph costlier than the original is not written: the original is kept."""
    if recalled is not None:
        return _replay(run, loaded, recalled)
    assert saturated is not None and priced is not None and extracted is not None  # no recall: a search ran
    sat, cost_model, names = saturated.result, priced.cost_model, extracted.names
    chosen = extracted.extractions[0]
    cost_before = loaded.anytime.cost_before
    lost = engine.input_terms(sat.egraph, loaded.engine_graph).missing
    if lost:  # never expected: the e-graph holds every term of its input graph; without them, no read-back is sound
        log.warning("the e-graph lost %d input term(s) (%s); the original is kept", len(lost), ", ".join(lost[:3]))
        return keep_original(loaded, f"the e-graph lost {len(lost)} of the input graph's terms (an engine fault; "
                             f"e.g. {lost[0]})", cost=cost_before, extractions=extracted.extractions, chosen=chosen)
    extracted_graph, written = engine.graph_from_selection(sat.egraph, chosen.selection, loaded.engine_graph, names)
    new_graph = loaded.stitch(written)
    cost_after = run.objective(new_graph, cost_model)
    first = _first_answer_written(run, loaded, priced, extracted, cost_after)
    if first is not None:
        return first
    notes: list[str] = []
    best = _best_so_far(run, loaded, saturated, priced, extracted, cost_after)
    extractions = extracted.extractions
    if best is not None:
        chosen, new_graph, cost_after = best.chosen, best.graph, best.cost
        extractions = (chosen, *extractions[1:])
        notes.append(best.note)
        extracted_graph, written = engine.graph_from_selection(sat.egraph, chosen.selection, loaded.engine_graph,
                                                               names)
    # the notes compare the extraction with the graph it chose, as the engine saw it (one block of repeated ones)
    written_cost = run.objective(written, cost_model)
    notes[:0] = figures.cost_notes(chosen.cost, run.objective(extracted_graph, cost_model), written_cost,
                                   extracted_graph, written)
    if loaded.reduction is not None:
        more = loaded.reduction.repeats.count - 1
        notes.append(f"{cost_after - written_cost:+.4g} ms: {more} more instance(s) of the repeated block, "
                     "which the extraction priced once")
    return _written_or_kept(run, loaded, new_graph, cost_before, cost_after, extractions, chosen, notes)


def _first_answer_written(run: Run, loaded: Loaded, priced: Priced, extracted: Extracted,
                          cost_after: float) -> Decision | None:
    """The decision to write the best graph so far where the first answer found it without an e-graph, no e-graph
    seen since held all its terms, and it costs less as written than the final extraction's graph (the e-graph
    grew under limits that kept the descent's rewrites out); else None."""
    best = loaded.anytime.best
    if best.egraph is not None or best.source == "input" or not best.cost < cost_after * (1 - REL_EPS):
        return None
    cost = run.objective(best.graph, priced.cost_model)
    chosen = Extraction(selection={}, cost=cost, status="start", bound=None, gap=None, seconds=0.0,
                        solver=best.source, greedy_cost=None)
    note = (f"the graph the {best.source} found at {best.seconds:.2f} s costs {cost:.6g} as written, less than the "
            f"final extraction's {cost_after:.6g}: it is written")
    return _written_or_kept(run, loaded, best.graph, loaded.anytime.cost_before, cost, extracted.extractions, chosen,
                            [note])


def _sizes_nobody_chose(run: Run, loaded: Loaded) -> bool:
    """Whether a rewritten graph of this run would fix dynamic axes the user asked to keep (the import could not
    follow them): then only the original is written, as a drop-in is never traded for sizes nobody chose."""
    return bool(loaded.static_reason) and run.options.dynamic


def _written_or_kept(run: Run, loaded: Loaded, new_graph: Graph, cost_before: float, cost_after: float,
                     extractions: tuple[Extraction, ...], chosen: Extraction, notes: Sequence[str]) -> Decision:
    """The decision to write ``new_graph``, exported, or the original where it is no drop-in, no cheaper, or
    cannot be written with the model's dynamic axes."""
    if _sizes_nobody_chose(run, loaded):
        reason = (f"its dynamic axes cannot be kept ({loaded.static_reason}); at fixed sizes the optimized graph "
                  f"would cost {cost_after:.6g} ms against {cost_before:.6g}: pass --static (Python: dynamic=False), "
                  "with --dim for the sizes, to write that")
        return keep_original(loaded, reason, cost=cost_before, extractions=extractions, chosen=chosen, notes=notes)
    # never return a costlier model, nor rewrite one for no gain (a rewrite at equal cost is work for nothing:
    # weight transforms, a re-export, and a model the user has to check again)
    if not cost_after < cost_before * (1 - REL_EPS):
        costlier = cost_after > cost_before * (1 + REL_EPS)
        reason = (f"the extracted graph costs {cost_after:.6g} ms as written, more than the original" if costlier
                  else "no cheaper graph found")
        return keep_original(loaded, reason, cost=cost_before, extractions=extractions, chosen=chosen, notes=notes)
    try:
        model = onnx_io.to_onnx(new_graph)
    except SymbolicShapeError as e:  # a size the rewritten graph would write where ONNX needs a constant
        return keep_original(loaded, f"the optimized graph cannot keep the dynamic axes ({e})", cost=cost_before,
                             extractions=extractions, chosen=chosen, notes=notes)
    except onnx_io.PrecisionError as e:  # a rewrite across a mixed-precision model's regions: never written
        return keep_original(loaded, f"the optimized graph cannot be written in the model's precisions ({e})",
                             cost=cost_before, extractions=extractions, chosen=chosen, notes=notes)
    return Decision(model=model, graph=new_graph, cost_before=cost_before, cost_after=cost_after,
                    extractions=extractions, chosen=chosen, notes=tuple(notes))


def _replay(run: Run, loaded: Loaded, recalled: Recalled) -> Decision:
    """The decision a cached transformation makes for this model: its graph, priced and exported as a search's
    would be (or the original, where the first run kept it)."""
    cost_before = run.objective(loaded.graph, loaded.cost_model)
    cost_after = cost_before if recalled.graph is None else run.objective(recalled.graph, loaded.cost_model)
    # what the report shows of an extraction: there was none; the graph given (a "start") is the cache's
    chosen = Extraction(selection={}, cost=cost_after, status="start", bound=None, gap=None, seconds=0.0,
                        solver="cache", greedy_cost=None)
    if recalled.graph is None:
        return keep_original(loaded, f"{recalled.reason} (a cached transformation of this structure, stored "
                             f"{recalled.stored})", cost=cost_before, extractions=(chosen,), chosen=chosen)
    note = f"the graph a run stored for this structure on {recalled.stored} (a cached transformation)"
    return _written_or_kept(run, loaded, recalled.graph, cost_before, cost_after, (chosen,), chosen, [note])


@dataclasses.dataclass(frozen=True)
class _Best:
    """The best graph found earlier, chosen over the final extraction's: as a selection of the final e-graph."""

    chosen: Extraction
    graph: Graph
    cost: float
    note: str


def _best_so_far(run: Run, loaded: Loaded, saturated: Saturated, priced: Priced, extracted: Extracted,
                 cost_after: float) -> _Best | None:
    """The best graph found earlier where it is cheaper as written than the final extraction's (the extraction
    objective prices binary concat chains, the written graph n-ary concats, so a start the solver did not improve
    on can still be the cheaper one written). It is chosen as a selection of the final e-graph, so the dump shows
    it and its tensors get the final e-graph's names."""
    best, egraph = loaded.anytime.best, saturated.result.egraph
    if best.egraph is None or not best.cost < cost_after * (1 - REL_EPS):
        return None
    selection = loaded.anytime.start_for(egraph)
    if selection is None:  # never expected: the final e-graph holds every earlier term
        log.warning("the best graph so far is not in the final e-graph; writing the final extraction's")
        return None
    _, graph = engine.graph_from_selection(egraph, selection, loaded.engine_graph, extracted.names)
    graph = loaded.stitch(graph)
    cost = run.objective(graph, priced.cost_model)
    if not cost < cost_after:
        return None
    chosen = dataclasses.replace(extracted.extractions[0], selection=selection, status="start", found_after=None,
                                 cost=validate_selection(extracted.costed, selection))
    return _Best(chosen, graph, cost, f"the graph {best.source} found at {best.seconds:.2f} s costs {cost:.6g} as "
                 "written, less than the final extraction's: it is written")


def time_latency(run: Run, loaded: Loaded, decision: Decision, saturated: Saturated | None = None,
                 priced: Priced | None = None, extracted: Extracted | None = None) -> Decision:
    """Time the first choice and the other candidates against the original end to end; write the one raced
    against the original if it wins measurably, twice, else the original (:func:`candidates.race`). A cached
    transformation's graph is the one candidate."""
    first = candidates.Candidate(0, decision.graph, decision.cost_after, decision.model)
    cost_model = loaded.cost_model if priced is None else priced.cost_model
    others = [] if saturated is None or extracted is None else candidates.other_candidates(
        decision.extractions[1:], saturated.result.egraph, extracted.names, loaded.engine_graph, decision.graph,
        decision.cost_before, cost_model, stitch=loaded.stitch)
    # a large model's timing has a floor of runs: time only the candidates that fit in what the time limit leaves
    # after the check (about as long as one timing), and none where even the first does not
    run_s = max(decision.cost_before, decision.cost_after) / 1000
    fit = candidates.models_timeable(0.75 * run.left(), run_s, 2 + len(others))
    if fit < 2:
        return keep_original(loaded, f"not timed end to end: a run takes about {run_s:.2g} s, and timing it against "
                             f"the original about {candidates.RUNS_PER_MODEL * 4 * run_s:.0f} s, more than the time "
                             f"limit leaves ({run.left():.0f} s)", cost=decision.cost_before,
                             extractions=decision.extractions, chosen=decision.chosen, notes=decision.notes)
    others = others[:fit - 2]
    # two timings share what the time limit leaves after the check (about as long as one timing)
    budget = max(0.5, min(candidates.LATENCY_BUDGET_S, run.left() / 4))
    race = candidates.race(loaded.original, [first, *others], loaded.graph, cost_model,
                           run.options.latency_margin, run.say, budget)
    timed = dataclasses.replace(decision, latency=race.check, timings=tuple(race.timings))
    if not race.faster:
        return keep_original(loaded, race.check.verdict, cost=decision.cost_before, extractions=decision.extractions,
                             chosen=decision.chosen, notes=decision.notes, latency=race.check, timings=race.timings)
    if race.winner is first:
        return timed
    # another candidate ran measurably faster than the first choice
    w = race.winner
    return dataclasses.replace(timed, graph=w.graph, cost_after=w.cost, model=w.model,
                               chosen=decision.extractions[w.rank])


def choose_executor(run: Run, loaded: Loaded, decision: Decision, saturated: Saturated | None = None,
                    priced: Priced | None = None, extracted: Extracted | None = None) -> Decision:
    """With ``parallel=N``: race the graph optimized for the parallel executor under it, the graph optimized for
    the sum of costs under the sequential one and the original under both (:mod:`eqsat.pipeline.executors`);
    write the parallel graph (with its session options) where that executor pays, else the sequential graph
    where it is faster, else the original."""
    n = run.options.parallel
    assert n is not None  # the stage applies with parallel only
    sequential = _sum_graph(run, loaded, saturated, priced, extracted)
    cost_model = loaded.cost_model if priced is None else priced.cost_model
    budget = max(0.5, min(candidates.LATENCY_BUDGET_S, run.left() / 4))
    race = executors.race(loaded.original, None if decision.kept else decision.model,
                          None if sequential is None else sequential.model, loaded.graph, n, cost_model.threads,
                          run.options.latency_margin, budget)
    run.say(f"executors: {race.verdict}")
    if race.written == "parallel":
        return dataclasses.replace(decision, executors=race)
    if race.written == "sequential" and sequential is not None:
        note = (f"written: the graph of least summed cost ({sequential.cost:.6g} ms summed), which the sequential "
                "executor runs faster; its mixed cost is the cost after")
        return dataclasses.replace(decision, model=sequential.model, graph=sequential.graph,
                                   cost_after=run.objective(sequential.graph, cost_model), kept=False,
                                   kept_reason="", executors=race, notes=(*decision.notes, note))
    kept = keep_original(loaded, race.verdict, cost=decision.cost_before, extractions=decision.extractions,
                         chosen=decision.chosen, notes=decision.notes)
    return dataclasses.replace(kept, executors=race)


def _sum_graph(run: Run, loaded: Loaded, saturated: Saturated | None, priced: Priced | None,
               extracted: Extracted | None) -> candidates.Candidate | None:
    """The graph the e-graph holds that costs least by the sum of its operators' costs, extracted by the run's
    solver in a short time, where it is cheaper than the original and can be written; else None."""
    # no search ran (never under parallel, which replays no cached transformation; the stage table wants the
    # parameters optional all the same)
    if saturated is None or priced is None or extracted is None or _sizes_nobody_chose(run, loaded):
        return None
    sum_solver = dataclasses.replace(run.solver, parallel=None)
    start = loaded.anytime.valid_input_selection(saturated.result.egraph, extracted.costed)
    seconds = max(0.2, min(2.0, run.left() / 8))
    chosen = sum_solver.extract(extracted.costed, start=start, seconds=seconds, progress=None)
    _, graph = engine.graph_from_selection(saturated.result.egraph, chosen.selection, loaded.engine_graph,
                                           extracted.names)
    graph = loaded.stitch(graph)
    cost = graph_cost(graph, priced.cost_model)
    if not cost < graph_cost(loaded.graph, priced.cost_model) * (1 - REL_EPS):
        return None
    try:
        return candidates.Candidate(0, graph, cost, onnx_io.to_onnx(graph))
    except SymbolicShapeError:
        return None


def keep_signature(run: Run, loaded: Loaded, decision: Decision) -> Decision:
    """Give the written model what the original says about itself (producer, doc strings, metadata, the
    declared types of intermediate tensors that still exist): it replaces the original in a deployment; and the
    session options of the executor it was optimized for, where that is the parallel one."""
    model = onnx_io.carry_signature(loaded.original, decision.model, decision.graph, dims=not loaded.fixed_shapes)
    # the original's record of an executor (an earlier --parallel run's) holds only where this run found it again
    model = executors.with_session_options(model, None if decision.executors is None else
                                           decision.executors.session_options or None)
    return dataclasses.replace(decision, model=model)


def check(run: Run, loaded: Loaded, decision: Decision, saturated: Saturated | None = None) -> NumericReport:
    """Check that the written model computes what the original, as given, computes; raise if it does not, or if
    the check cannot run."""
    # with dynamic axes, at the representative sizes and at others: a rewrite right only at batch 1 shows
    sizes, shapes = sizes_to_check(loaded.graph)
    # a model written in half precision rounds differently once rewritten: a tolerance fit for its precision
    tol = onnx_io.CHECK_TOLERANCE.get(onnx_io.half_type(loaded.graph.meta), 1e-4)
    numeric = check_equal(loaded.original, decision.model, reference=describe_reference(run.source), sizes=sizes,
                          input_shapes=shapes, size_inputs=graph_size_inputs(loaded.graph), rtol=tol, atol=tol,
                          arrays=decision.graph.weights)
    if not numeric.ran:
        at = "" if not sizes[0] else (" at " + ", ".join(f"{k}={v}" for k, v in sizes[0].items()) + " (give sizes it "
                                  "runs at with --dim, Python: dims=)")
        raise NumericCheckUnavailable(
            f"the numeric check cannot run{at}: {'; '.join(numeric.problems)}. Nothing was written; pass "
            "--no-check (Python: check=False) to accept the optimized model without the check")
    if numeric.saturated:
        run.say("numeric check: saturated output(s): " + "; ".join(f"{c.name} ({c.saturated})"
                                                               for c in numeric.saturated))
    if not numeric.ok:
        fired = "a cached transformation's" if saturated is None else \
            ", ".join(f"{k} ({v})" for k, v in sorted(saturated.result.rules_fired.items())) or "none"
        raise NumericMismatch(f"optimized model differs from the original: {numeric.summary()}; "
                              f"rewrites involved: {fired}. Nothing was written.")
    return numeric


def dump(run: Run, loaded: Loaded, rules: tuple[Rule, ...], decision: Decision, saturated: Saturated | None = None,
         priced: Priced | None = None) -> EGraphDump:
    """The e-graph dump with costs and the choice written out, written to the path given (if one was)."""
    assert saturated is not None and priced is not None  # a dump turns the cache off: a search ran
    out = build_dump(saturated.result, loaded.engine_graph, priced.node_costs, source=loaded.label,
                     cost_model=priced.cost_model.name, rules=len(rules), limits=saturated.limits,
                     extraction=decision.chosen, kept_original=decision.kept)
    if run.options.pet:
        out = dataclasses.replace(out, pet=dataclasses.asdict(figures.pet_report(loaded, saturated, decision)))
    if run.options.dump_egraph is not True:  # a path
        out.write(run.options.dump_egraph)
    return out


def remember(run: Run, loaded: Loaded, rules: tuple[Rule, ...], decision: Decision,
             numeric: NumericReport | None = None) -> bool:
    """Keep what this search decided as a transformation of the model's structure, for a later model of the same
    one: the graph written, once the numeric check has passed on it, or that the original was kept."""
    if not decision.kept and (numeric is None or not numeric.ok):
        return False  # unchecked (check=False): a graph is cached only once it is known to compute the same
    key = transforms.run_key(loaded.graph, rules, loaded.cost_model, run.options)
    found = None if decision.kept else decision.graph
    return key is not None and transforms.TransformCache().remember(key, loaded.graph, found,
                                                                    decision.kept_reason or "written")


def report(run: Run, loaded: Loaded, decision: Decision, saturated: Saturated | None = None,
           priced: Priced | None = None, numeric: NumericReport | None = None, egraph_dump: EGraphDump | None = None,
           recalled: Recalled | None = None, remembered: bool = False) -> OptimizeResult:
    """The result: the model written and the report of the run."""
    first, p = decision.extractions[0], None if priced is None else priced.pricing  # the solver's: the first's
    counts = None if p is None else CostCounts(len(p.costs), p.measured, p.cached, len(p.estimated), p.seconds)
    anytime = loaded.anytime
    sat = None if saturated is None else saturated.result
    cost_model = loaded.cost_model if priced is None else priced.cost_model
    cached = ("replayed: the transformation stored " + recalled.stored + " for this structure, no search"
              if recalled is not None else "stored for a later model of this structure" if remembered else "")
    return OptimizeResult(  # a kept original with its weights still on disk is returned with them
        model=onnx_io.with_data(decision.model), graph=decision.graph, original=loaded.graph,
        cost_before=decision.cost_before, cost_after=decision.cost_after,
        iterations=[] if sat is None else sat.iterations,
        stop_reason="no search (a cached transformation)" if sat is None else sat.stop_reason,
        rules_fired={} if sat is None else sat.rules_fired, solver_status=first.status, solver_bound=first.bound,
        solver_gap=first.gap, extraction_cost=decision.chosen.cost, stage_seconds=run.stage_seconds,
        numeric=numeric, cost_model=cost_model.name, kept_original=decision.kept and not loaded.bodies,
        latency=decision.latency, onnx_nodes=(len(loaded.original.graph.node), len(decision.model.graph.node)),
        cost_notes=list(decision.notes), egraph_dump=egraph_dump, candidates=list(decision.timings),
        trace=list(anytime.trace), best_source=anytime.best.source,
        snapshots=(anytime.snapshots, anytime.snapshot_seconds), egraph_size=(0, 0) if sat is None else
        sat.egraph.tensor_size, transformation=cached,
        kept_reason=decision.kept_reason, cost_counts=counts, bodies=[str(b) for b in loaded.bodies],
        dims=representative(loaded.graph), price_points=figures.price_points(loaded, decision, cost_model),
        parallel=figures.parallel_report(run, loaded, decision, cost_model),
        static_reason=loaded.static_reason,
        blocks="" if loaded.reduction is None else loaded.reduction.describe(), external_data=loaded.external_data,
        target=run.target.name, kernels=figures.kernels_written(loaded, decision), as_written=run.options.as_written,
        signature_changes=onnx_io.signature_changes(loaded.original, decision.model),
        pet=None if saturated is None or not run.options.pet else
        figures.pet_report(loaded, saturated, decision, None if egraph_dump is None else egraph_dump.pet))


def _progress_every(say: Callable[[str], None]) -> Callable[[int, int], None]:
    """A progress callback that says ``timed done/total`` about ten times."""

    def progress(done: int, total: int) -> None:
        if done % max(1, total // 10) == 0 or done == total:
            say(f"  timed {done}/{total}")

    return progress
