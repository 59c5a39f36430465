"""Saturation: the only module that runs egglog.

:func:`saturate` compiles an IR graph and a rule set (:mod:`eqsat.engine.compile`), runs the program in a child
process under iteration / e-node / wall-time / memory limits (:mod:`eqsat.engine.limits`), applying each rule only
when all its matches fit what the limits still allow, and returns the serialized e-graph
(:mod:`eqsat.engine.serialize`) with the run's report.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import multiprocessing as mp
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eqsat.engine.compile import (
    ITERATION_COUNTER,
    PROVENANCE_PREFIX,
    RuleStep,
    compile_program,
    declarations,
    reachable_ops,
    split_program,
)
from eqsat.engine.egraph import EGraph
from eqsat.engine.errors import EngineError
from eqsat.engine.fallback import Fallback, kill_at, read_fallback
from eqsat.engine.limits import REASON_ORDER, Budget, Limits, StopReason, vm_bytes
from eqsat.engine.reports import IterationStats, SaturationResult, Snapshot
from eqsat.engine.serialize import clean_serialized
from eqsat.ir.graph import Alternative, Graph
from eqsat.ir.rule import Rule

__all__ = ["EGGLOG_VERSION", "IterationStats", "SaturationResult", "Snapshot", "saturate"]

EGGLOG_VERSION = "13.2.0"
log = logging.getLogger(__name__)


def egglog_bindings() -> Any:
    """egglog's compiled core (``egglog.bindings``), loaded on first use so that importing eqsat.engine (the CLI,
    dumps) stays light.

    The only part of egglog the engine uses is this extension module. Importing it through the ``egglog``
    package also runs the package's Python layer (its high-level API, which imports a code formatter): 0.2 s
    of the time to a first e-graph. So the extension is loaded from the package's folder by itself and
    registered under its name, where a later ``import egglog`` finds it; if that fails for any reason the
    package is imported as usual.
    """
    loaded = sys.modules.get("egglog.bindings")
    if loaded is not None:
        return loaded
    try:
        package = importlib.util.find_spec("egglog")
        folder = Path(next(iter(package.submodule_search_locations or ())))  # type: ignore[union-attr]
        path = next(p for p in folder.iterdir() if p.name.startswith("bindings.") and p.suffix in (".so", ".pyd"))
        spec = importlib.util.spec_from_file_location("egglog.bindings", path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        sys.modules["egglog.bindings"] = module
        return module
    except Exception as e:  # noqa: BLE001 - any surprise: the ordinary import
        log.debug("loading egglog.bindings by itself failed (%s); importing the egglog package", e)
        from egglog import bindings

        return bindings


def _sizes(eg: Any, b: Any = None) -> tuple[int, int]:
    (out,) = eg.run_program(*eg.parse_program("(print-size)"))
    sizes = dict(out.sizes)
    skip = {"shape", "pending", "TNil", "TCons", ITERATION_COUNTER}  # and the provenance rows: bookkeeping, not e-nodes
    enodes = sum(v for k, v in sizes.items() if k not in skip and not k.startswith(PROVENANCE_PREFIX))
    return enodes, sizes.get("shape", 0)


def _matches(report: Any) -> dict[str, int]:
    return {str(k): int(v) for k, v in report.num_matches_per_rule.items()}


def _found(report: Any, rule: str) -> int:
    """Matches a rule found, applied or not (``num_matches_per_rule`` counts only applied ones). A scheduled
    run that applies matches reports its search twice, hence the largest per-iteration count."""
    return max((sum(r.num_matches for r in it.rule_set_report.rule_reports.get(rule, ())) for it in report.iterations),
               default=0)



@dataclass
class _Progress:
    """One iteration so far: e-nodes now, how many of them have no shape yet, whether a rule ran, matches."""

    now: int
    pending: int = 0
    ran: bool = False
    matches: dict[str, int] = field(default_factory=dict)



def _serialize_text(eg: Any, b: Any, roots: list[str]) -> str:
    """egglog's serialization as JSON text (cheap: the Python-side reading is left to whoever receives it)."""
    return eg.serialize([b.Var(b.PanicSpan(), r) for r in roots]).to_json()


def _read(text: str) -> EGraph:
    return clean_serialized(json.loads(text))


def _saturate_in_process(program: str, steps: Sequence[RuleStep], roots: list[str], limits: Limits,
                         report: Callable[[str, Any], None], *, deadline: float | None = None,
                         memory_base: int | None = None, snapshot: bool = False, provenance: bool = False,
                         wants_snapshot: Callable[[], bool] | None = None,
                         preloaded: tuple[Any, str] | None = None,
                         fallback: Fallback | None = None) -> None:
    """Load ``program`` and saturate it, reporting ``("iter", IterationStats)`` after each iteration and
    ``("done", (egraph, StopReason))`` at the end. ``("snapshot", (iteration, JSON text))`` is reported after
    iteration 0 with ``snapshot``, and after each later iteration that changed the e-graph when
    ``wants_snapshot()`` says someone is waiting for one (an anytime consumer asks for the next one when it has
    dealt with the last, so a slow consumer costs the engine one serialization per request, not per iteration).
    After a later iteration that no one asked a snapshot of, the e-graph is serialized for ``fallback`` when
    :meth:`~eqsat.engine.fallback.Fallback.due` says so: the parent's fallback if this process has to be killed.

    Every rule has a ruleset of its own. An iteration runs them in groups, under a back-off scheduler whose
    match limit is the number of e-nodes the limits still allow divided by the most e-nodes the group's
    rules can add per match: a rule with more matches is not applied at all (banned for that call), so the
    e-graph cannot grow past the node limit. A rule banned only for the group's share is retried alone with
    the whole allowance; one that does not fit then is held back (and its search skipped while it still
    would not fit). The time and memory limits become e-node allowances the same way, and all limits are
    checked between calls. Whatever stops an iteration, the shapes ruleset is saturated afterwards, so the
    e-graph serialized has only shape-checked merges. A rule held back by a limit makes that limit the stop
    reason when nothing else changes any more.

    With a consumer of snapshots and ``limits.stage_nodes``, the node limit is that stage at first: the
    iteration that reaches it (or holds a rule back for it) ends, its e-graph is reported as a snapshot, asked
    for or not, after ``("stage", iteration)``, and the node limit is ``limits.node_limit`` from the next
    iteration on.

    With ``provenance`` (a program compiled with it) the ``cur_iter`` counter is set to each iteration's number
    before its rules run, so the provenance rows the rules write carry it.

    ``preloaded`` is an egglog e-graph that already ran the program's first chunk (the declarations), with
    that chunk's text; it is used when the program starts with that text.
    """
    b = egglog_bindings()

    t_start = time.perf_counter()
    deadline = t_start + limits.time_limit if deadline is None else deadline
    budget = Budget(limits, deadline, vm_bytes() if memory_base is None else memory_base, provenance)
    graph_chunks, rule_chunks = split_program(program)
    if preloaded is not None and graph_chunks[0] == preloaded[1]:
        eg, graph_chunks = preloaded[0], graph_chunks[1:]
    else:
        eg = b.EGraph()

    def run(text: str) -> Any:
        return eg.run_program(*eg.parse_program(text))

    for chunk in graph_chunks:
        run(chunk)
    run("(run-schedule (saturate (run shapes)))")
    enodes, classes = _sizes(eg)
    report("iter", IterationStats(0, enodes, classes, time.perf_counter() - t_start, {}))
    # the pause: only for a consumer of snapshots (see Limits.stage_nodes), and only on the way up
    stage = limits.stage_nodes if wants_snapshot is not None else None
    if stage is not None and enodes < stage < limits.node_limit:
        budget.node_limit = stage
    reason = StopReason.ITERATION_LIMIT if limits.iter_limit == 0 else budget.out_of(enodes, 0)
    current = None  # the serialization of the e-graph as it is now, if there is one (reused at the end)
    if reason is None and (snapshot or wants_snapshot is not None):  # the fallback if this process dies later
        current = _serialize_text(eg, b, roots)
        report("snapshot", (0, current))
    # rules are loaded after the graph (egglog plans a query with the table sizes it sees, issue #866), and
    # not at all when a limit is already reached
    for chunk in rule_chunks if reason is None else ():
        if chunk:
            run(chunk)
        reason = budget.out_of(enodes, 0)
        if reason is not None:
            break
    held: dict[str, tuple[int, StopReason]] = {}  # rules held back by a limit -> (their matches, the limit)
    groups = [g for kind in (False, True) for g in _groups([st for st in steps if st.multi == kind])]

    def apply(it: _Progress, todo: list[RuleStep], cap: int) -> list[tuple[RuleStep, int]]:
        """Run ``todo`` in turn, each rule applied only if it has at most ``cap`` matches; return the rules
        that had more (not applied) with their match counts."""
        runs = " ".join(f"(run-with bo {st.ruleset})" for st in todo)
        rep = run(f"(run-schedule (let-scheduler bo (back-off :match-limit {cap} :ban-length 1)) {runs})")[-1].report
        it.ran = True
        over, applied_any = [], False
        for st in todo:
            applied = int(rep.num_matches_per_rule.get(st.rule, 0))
            if applied:
                applied_any = True
                held.pop(st.rule, None)
                it.matches[st.rule] = it.matches.get(st.rule, 0) + applied
            elif (found := _found(rep, st.rule)) > cap:
                over.append((st, found))
        if applied_any:
            before = it.now
            it.now, _ = _sizes(eg)  # exact: most matches re-create terms that already exist
            it.pending += max(0, it.now - before)
        return over

    for i in range(1, limits.iter_limit + 1 if reason is None else 1):
        reason = StopReason.ITERATION_LIMIT
        stop = budget.out_of(enodes, 0)
        if stop is not None:
            reason = stop
            break
        t0 = time.perf_counter()
        it = _Progress(enodes)
        if provenance:
            run(f"(set ({ITERATION_COUNTER}) {i})")
        for group in groups:
            group = [st for st in group if not (st.multi and i > limits.multi_iters)]
            if not group:
                continue
            if (stop := budget.out_of(it.now, it.pending)) is not None:
                break
            allow = budget.allowance(it.now, it.pending)
            todo = []
            for st in group:
                found = held.get(st.rule, (0,))[0]
                if found > allow.nodes // st.size:  # held back before and would be again: skip its search
                    held[st.rule] = (found, allow.blocking(found * st.size))
                else:
                    todo.append(st)
            if not todo:
                continue
            # the group's share of the allowance: even if every rule of it applies all its matches, it fits
            over = apply(it, todo, allow.nodes // sum(st.size for st in todo))
            for st, found in over:  # rules with more matches than the group's share: alone, if they fit
                if (stop := budget.out_of(it.now, it.pending)) is not None:
                    break
                allow = budget.allowance(it.now, it.pending)
                if found <= allow.nodes // st.size:
                    again = apply(it, [st], allow.nodes // st.size)
                    if not again:
                        continue
                    found = again[0][1]
                # a scheduled rule finds all its matches every time, so it has at least as many next time
                held[st.rule] = (found, allow.blocking(found * st.size))
            if stop is not None:
                break
        if it.ran:  # shape-check and merge what this (maybe partial) iteration added
            outs = run("(run-schedule (saturate (run shapes)))")
            for k, v in _matches(outs[-1].report).items():
                it.matches[k] = it.matches.get(k, 0) + v
            new_enodes, new_classes = _sizes(eg)
            seconds = time.perf_counter() - t0
            report("iter", IterationStats(i, new_enodes, new_classes, seconds, it.matches))
            current = None
            # at the stage: reached, or a rule held back because its matches would pass it
            paused = budget.node_limit < limits.node_limit and (
                new_enodes >= budget.node_limit or any(w is StopReason.NODE_LIMIT for _, w in held.values()))
            if paused:  # the stage's e-graph goes out whether or not a snapshot was asked for; then on to the limit
                budget.node_limit = limits.node_limit
                stop = None if stop is StopReason.NODE_LIMIT else stop
                if wants_snapshot is not None:
                    wants_snapshot()  # a pending request is answered by this snapshot
            if stop is None and wants_snapshot is not None and (paused or wants_snapshot()):
                current = _serialize_text(eg, b, roots)
                if paused:
                    report("stage", i)  # the snapshot that follows is the stage's
                report("snapshot", (i, current))
            elif stop is None and fallback is not None and fallback.due(seconds, new_enodes):
                current = fallback.save(i, new_enodes, lambda: _serialize_text(eg, b, roots))
        else:
            new_enodes, new_classes = enodes, classes
        if stop is not None:
            reason = stop
            break
        if new_enodes == enodes and new_classes == classes:
            # nothing changed: saturated, unless a limit kept rules with matches from being applied (multi rules
            # held back in their iterations count too: they do not run again)
            reason = min((w for _, w in held.values()), key=REASON_ORDER.index) if held else StopReason.SATURATED
            break
        enodes, classes = new_enodes, new_classes
    reason = reason or StopReason.ITERATION_LIMIT
    log.debug("saturation stopped (%s) after %.2f s", reason, time.perf_counter() - t_start)
    report("done", (_read(current if current is not None else _serialize_text(eg, b, roots)), reason))


def _groups(steps: list[RuleStep], size: int = 16) -> list[list[RuleStep]]:
    """Rules are run a group per egglog call (one call per rule costs ~0.5 ms each, 0.2 s an iteration)."""
    return [steps[k:k + size] for k in range(0, len(steps), size)]



def _explain(e: BaseException) -> str:
    msg = f"{type(e).__name__}: {e}"
    if "Illegal merge" in msg and "shape" in msg:
        return ("shape conflict: two tensors with different shapes ended up in one e-class. This is an eqsat bug "
                f"(a rule or shape rule is wrong); please report it with the model. egglog said: {msg}")
    return msg


def _child_main(conn: Any, limits: Limits, deadline: float, provenance: bool = False,
                anytime: bool = False, operators: frozenset[str] | None = None,
                fallback: Path | None = None) -> None:
    """The engine process: it loads egglog and the declarations while the parent compiles the program, then
    receives ``(program, steps, roots)`` and saturates, sending its reports to ``conn`` and saving e-graphs to
    fall back on to ``fallback`` (:class:`~eqsat.engine.fallback.Fallback`)."""
    # the memory limit is on what the engine adds to what the forked process already maps
    mapped = vm_bytes()
    if mapped is not None:
        try:
            resource.setrlimit(resource.RLIMIT_AS, (mapped + limits.memory_limit_mb * 1024 * 1024,
                                                    resource.RLIM_INFINITY))
        except (ValueError, OSError):  # pragma: no cover - platform without RLIMIT_AS
            pass
    preloaded = None
    try:
        b = egglog_bindings()
        if not provenance:  # with provenance the declarations depend on the rules
            text = declarations(operators=operators)
            eg = b.EGraph()
            eg.run_program(*eg.parse_program(text))
            preloaded = (eg, text)
    except BaseException as e:  # reported once the program is here; the run then starts from scratch
        log.debug("engine process could not preload the declarations: %s", e)
    program, steps, roots = conn.recv()

    def wants_snapshot() -> bool:  # the parent sends a request when it has dealt with the last snapshot
        asked = False
        while conn.poll():
            conn.recv()
            asked = True
        return asked

    try:
        _saturate_in_process(program, steps, roots, limits, lambda kind, payload: conn.send((kind, payload)),
                             deadline=deadline, memory_base=mapped, snapshot=True, provenance=provenance,
                             wants_snapshot=wants_snapshot if anytime else None, preloaded=preloaded,
                             fallback=None if fallback is None else Fallback(fallback, kill_at(deadline, limits),
                                                                              deadline - limits.time_limit))
    except MemoryError:
        conn.send(("error", "memory limit"))
    except BaseException as e:  # egglog errors (and Rust panics) cross the process boundary as text
        conn.send(("error", _explain(e)))
    finally:
        conn.close()


def saturate(graph: Graph, rules: Sequence[Rule], limits: Limits | None = None, *,
             progress: Callable[[IterationStats], None] | None = None, in_process: bool = False,
             provenance: bool = False, on_snapshot: Callable[[Snapshot], None] | None = None,
             alternatives: Sequence[Alternative] = (), idle: Callable[[], bool] | None = None,
             head_start: float = 0.0) -> SaturationResult:
    """Saturate ``graph`` under ``rules`` and return the serialized e-graph.

    The limits hold during iterations (see :func:`_saturate_in_process`): the e-graph returned has at most
    ``node_limit`` e-nodes (unless the input graph alone has more), and the call returns within
    ``time_limit`` seconds plus a small margin. The engine runs in a child process with a memory limit; as a
    last resort, if that process overruns the time limit by more than a margin (a single rule's search is
    still unbounded) it is killed, and if it dies, the latest e-graph it sent or saved is returned with the
    limit as the stop reason, and the iterations up to that one: the last complete iteration's unless the
    iteration killed ran over ten times as long as that one (:class:`~eqsat.engine.fallback.Fallback`), at
    worst iteration 0's (the input graph with its shapes, sent before loading the rules). Loading the graph
    itself is not cut short: without it there is no e-graph to return.

    With ``provenance`` the e-graph's nodes also carry ``rules``: (rule, the first iteration in which that rule
    built the node) pairs (:func:`eqsat.engine.serialize.clean_serialized`); the e-graph is otherwise the same.

    ``on_snapshot`` is called with :class:`Snapshot` s of the e-graph while saturation goes on: after iteration
    0, then, each time the call returns, with the e-graph of the next iteration that ends (in a child process
    the engine keeps saturating meanwhile; in process, after every iteration). It runs in the calling process
    and should return well before the time limit: the engine is only killed between calls.

    ``alternatives`` are other computations of tensors of ``graph`` found for it alone (PET's corrected mutants),
    added beside them before iteration 1 (:func:`~eqsat.engine.compile.compile_graph`).
    ``idle`` is work for the calling process while it waits for the engine process (not in process): called
    whenever no report is waiting, a short step at a time (a few milliseconds: reports wait meanwhile), until it
    returns False (nothing left to do). The first answer's descent runs there (:mod:`eqsat.pipeline.descent`).
    With ``head_start`` (seconds) it also runs right after the engine process is started, before the program is
    compiled, for at most that long: the process loads egglog and the declarations meanwhile, so the engine starts
    later only by what the head start takes beyond that.
    """
    limits = limits or Limits()
    t0 = time.perf_counter()
    deadline = t0 + limits.time_limit
    operators = reachable_ops(graph, rules, alternatives)
    # the engine process starts first: it loads egglog and the declarations while this one compiles
    child = None if in_process else _start_child(limits, deadline, provenance, on_snapshot is not None, operators)
    try:
        if child is not None and idle is not None and head_start > 0:  # the caller's work first, for a while
            until = min(time.perf_counter() + head_start, deadline)
            while time.perf_counter() < until:
                if not idle():
                    idle = None
                    break
        program, cg, steps = compile_program(graph, rules, provenance, operators, alternatives)
    except BaseException:
        if child is not None:
            child[0].kill()
            shutil.rmtree(child[2], ignore_errors=True)
        raise

    def result(egraph: EGraph, iters: list[IterationStats], reason: StopReason) -> SaturationResult:
        return SaturationResult(egraph, iters, reason, time.perf_counter() - t0, program, cg.tensor_of_global)

    staged: list[int] = []  # the iteration whose snapshot is the stage's ("stage" reports)

    def snapshot(iteration: int, text: str) -> Snapshot:
        return Snapshot(iteration, _read(text), time.perf_counter() - t0, cg.tensor_of_global, iteration in staged)

    if in_process:
        msgs: list[tuple[str, Any]] = []

        def rep(kind: str, payload: Any) -> None:
            msgs.append((kind, payload))
            if kind == "iter" and progress:
                progress(payload)
            elif kind == "stage":
                staged.append(payload)
            elif kind == "snapshot" and on_snapshot:
                on_snapshot(snapshot(*payload))

        try:
            _saturate_in_process(program, steps, cg.output_globals, limits, rep, deadline=deadline,
                                 provenance=provenance, wants_snapshot=(lambda: True) if on_snapshot else None)
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # a Rust panic is a BaseException
            raise EngineError(_explain(e)) from e
        iters = [p for k, p in msgs if k == "iter"]
        egraph, reason = msgs[-1][1]
        return result(egraph, iters, reason)

    # the child stops itself before the deadline; past the margin it is killed
    assert child is not None
    iters, latest, done, failure = _run_child(child, (program, steps, cg.output_globals), progress, snapshot,
                                              on_snapshot, kill_at=kill_at(deadline, limits), idle=idle,
                                              staged=staged)
    if done is not None:
        return result(done[0], iters, done[1])
    if latest is None or not latest[0] < len(iters):  # never expected: an iteration is reported before it is saved
        raise EngineError(f"e-graph engine failed before the first iteration: {failure[1]}")
    iteration, egraph = latest[0], latest[1].egraph if isinstance(latest[1], Snapshot) else _read(latest[1])
    log.warning("e-graph engine stopped (%s); keeping the e-graph of iteration %d", failure[1], iteration)
    return result(egraph, iters[:iteration + 1], failure[0])


def _start_child(limits: Limits, deadline: float, provenance: bool, anytime: bool,
                 operators: frozenset[str]) -> tuple[Any, Any, Path]:
    """Fork the engine process (:func:`_child_main`); return it, this end of its pipe and the folder where it
    saves e-graphs to fall back on (:class:`~eqsat.engine.fallback.Fallback`; the caller removes it)."""
    ctx = mp.get_context("fork")
    folder = Path(tempfile.mkdtemp(prefix="eqsat-engine-"))
    parent, child = ctx.Pipe()  # duplex: the child sends its reports, the parent the program and snapshot requests
    proc = ctx.Process(target=_child_main, daemon=True,
                       args=(child, limits, deadline, provenance, anytime, operators, folder / "fallback.json"))
    proc.start()
    child.close()
    return proc, parent, folder


#: the latest e-graph the engine process sent: (iteration, the snapshot a consumer saw, or the JSON text)
_Latest = tuple[int, Snapshot | str]


def _run_child(child: tuple[Any, Any, Path], work: tuple[str, Sequence[RuleStep], list[str]],
               progress: Callable[[IterationStats], None] | None, read: Callable[[int, str], Snapshot],
               on_snapshot: Callable[[Snapshot], None] | None, kill_at: float,
               idle: Callable[[], bool] | None = None, staged: list[int] | None = None
               ) -> tuple[list[IterationStats], _Latest | None, tuple[EGraph, StopReason] | None,
                          tuple[StopReason, str]]:
    """Send the engine process (``child``: the process, this end of its pipe, its fallback folder) its ``work``
    (program, rule steps, roots) and follow it; return (iterations, the latest e-graph it sent or saved, result,
    failure). A snapshot is parsed only for ``on_snapshot``; otherwise its text is kept, to be parsed if it is
    needed. While no report is waiting, ``idle`` steps run (until one returns False). The iterations the child
    reports as its stage are appended to ``staged``. The folder is removed."""
    proc, parent, folder = child
    iters: list[IterationStats] = []
    latest: _Latest | None = None

    def take(kind: str, payload: Any) -> None:
        nonlocal latest
        if kind == "iter":
            iters.append(payload)
            if progress:
                progress(payload)
        elif kind == "snapshot":
            latest = payload
            if on_snapshot is not None:
                snap = read(*payload)
                latest = (snap.iteration, snap)
                on_snapshot(snap)
                try:
                    parent.send("next")  # ask for the e-graph of the next iteration that ends
                except OSError:  # the child has finished (its result is in the pipe) or died
                    pass

    def killed() -> tuple[StopReason, str]:
        nonlocal latest
        proc.kill()
        proc.join(5)
        try:  # the reports sent before the kill (the parent may have been busy with a snapshot meanwhile)
            while parent.poll(0):
                kind, payload = parent.recv()
                if kind == "iter":
                    take(kind, payload)
                elif kind == "snapshot":
                    latest = payload
        except Exception:  # noqa: BLE001 - a report cut short by the kill: the ones before it are kept
            pass
        return StopReason.TIME_LIMIT, "time limit (a rule did not finish in time)"

    def died() -> tuple[StopReason, str]:
        proc.join(1)
        return StopReason.MEMORY_LIMIT, f"engine process died (exit code {proc.exitcode}; likely the memory limit)"

    def failed(failure: tuple[StopReason, str]) -> tuple[list[IterationStats], _Latest | None, None,
                                                          tuple[StopReason, str]]:
        saved = read_fallback(folder / "fallback.json")  # newer than the latest snapshot, if it saved one since
        newest = saved if saved is not None and (latest is None or saved[0] > latest[0]) else latest
        return iters, newest, None, failure

    try:
        parent.send(work)
        while True:
            # before its snapshot the child is loading the graph (bounded work) and there is nothing to fall back on
            remaining = kill_at - time.perf_counter() if latest is not None else 0.25
            if remaining <= 0:
                return failed(killed())
            if idle is not None and not parent.poll(0):  # nothing to read: this process's own work first
                if not idle():
                    idle = None
                continue
            if not parent.poll(min(remaining, 0.25)):
                if not proc.is_alive() and not parent.poll(0):
                    return failed(died())
                continue
            try:
                kind, payload = parent.recv()
            except (EOFError, OSError):  # the process ended (a reset pipe: it died mid-write)
                return failed(died())
            if kind in ("iter", "snapshot"):
                take(kind, payload)
            elif kind == "stage":
                if staged is not None:
                    staged.append(payload)
            elif kind == "done":
                return iters, latest, payload, (StopReason.SATURATED, "")
            elif str(payload).startswith("memory"):
                return failed((StopReason.MEMORY_LIMIT, str(payload)))
            else:
                raise EngineError(payload)
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        parent.close()
        shutil.rmtree(folder, ignore_errors=True)
