"""Research comparisons: eqsat against TASO's backtracking, OCGGS's sampling search and AutoGraph's search on the
same model, rules and cost model (a sum of operator costs, or with ``parallel`` AutoGraph's mixed critical-path
cost for that many branches at once).

Every method starts from the same imported graph and gets the same wall-time budget, both counted from its call
with the ONNX model: each imports the model within its own time (``optimize`` does; a search's runner does before
it searches), and its anytime trace counts from there. Its final graph is
exported to ONNX and judged by the same two functions whatever the method: :func:`model_cost` prices the
exported model (never a search's own bookkeeping) and :func:`eqsat.pipeline.check.check_equal` compares it with the
original under onnxruntime.

By default the import folds what onnxruntime fuses when it loads a model (a BatchNormalization into the Conv before
it, a residual Add and a Relu into the Conv), so every method starts from, and is judged as, the model as it runs.
With ``as_written`` every method starts from the model as written, as TASO and Tensat import it, with the rules that
make those folds added to its rules, and the original and each result are priced as written: the speedups are then
from the same original as theirs, and a fold counts only where a method made it.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from eqsat import onnx_io
from eqsat.costs import CostModel, Objective, get_cost_model
from eqsat.errors import UsageError
from eqsat.extract import ParallelCost
from eqsat.ir.symbols import graph_size_inputs
from eqsat.pipeline import default_rules, optimize
from eqsat.pipeline.check import NumericReport, check_equal, sizes_to_check
from eqsat.pipeline.choices import with_fold_rules
from eqsat.search import searches as search
from eqsat.search.autograph import autograph
from eqsat.search.searches import check_limits
from eqsat.search.traces import reach_fields

METHODS = ("eqsat", "backtracking", "sampling", "autograph")
#: the methods compared when none are named (AutoGraph's search is asked for by name, with ``parallel``)
DEFAULT_METHODS = ("eqsat", "backtracking", "sampling")


@dataclass
class MethodResult:
    """One method's result on one model."""

    method: str
    cost: float  # of the exported model, by model_cost
    seconds: float  # the whole run: import, search, export
    seconds_to_best: float  # when the graph written was found (eqsat: by its anytime trace)
    trace: list[tuple[float, float]]  # (seconds from the call, best cost so far); starts at (0, original cost)
    work: int  # graphs expanded (searches) or e-nodes of the saturated e-graph (eqsat)
    status: str  # "ok", or why the result cannot be trusted ("MISMATCH: ...", "error: ...")
    model: onnx.ModelProto | None = None
    numeric: NumericReport | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (no model)."""
        def num(x: float) -> float | None:  # strict JSON has no NaN (a method that failed has no cost)
            return None if math.isnan(x) else x

        return {"cost": num(self.cost), "seconds": self.seconds, "seconds_to_best": num(self.seconds_to_best),
                "status": self.status, "work": self.work, "trace": [list(p) for p in self.trace],
                **self.details}


@dataclass
class ComparisonResult:
    """Every method's result on one model."""

    model: str
    original_cost: float
    cost_model: str
    budget: float
    methods: dict[str, MethodResult]
    as_written: bool = False  # every method started from the model as written, and was judged as written

    def speedup(self, method: str) -> float:
        """Original cost over the method's cost."""
        c = self.methods[method].cost
        if math.isnan(c):
            return math.nan  # the method failed
        return self.original_cost / c if c > 0 else math.inf

    def as_dict(self) -> dict[str, Any]:
        """The JSON form written by ``eqsat compare --json``. Besides each method's own fields, its
        ``seconds_to_backtracking_best`` and ``seconds_to_eqsat_best``: when its curve first reached that
        method's final cost (null: never; the key is absent when that method did not run or failed), and its
        ``start_nodes``: the nodes of the imported graph it started from, the same for every method."""
        methods = {k: v.as_dict() for k, v in self.methods.items()}
        for name, fields in reach_fields(methods).items():
            methods[name].update(fields)
        return _strict({"model": self.model, "original_cost": self.original_cost, "cost_model": self.cost_model,
                        "budget": self.budget, "as_written": self.as_written, "methods": methods})

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ComparisonResult:
        """The result :meth:`as_dict` wrote (no models, no numeric reports; a null cost or time is NaN)."""
        def num(x: float | None) -> float:
            return math.nan if x is None else float(x)

        methods = {}
        for name, m in d["methods"].items():
            own = {"cost", "seconds", "seconds_to_best", "status", "work", "trace"}
            methods[name] = MethodResult(name, num(m["cost"]), float(m["seconds"]), num(m["seconds_to_best"]),
                                         [(float(t), float(c)) for t, c in m["trace"]], int(m["work"]), m["status"],
                                         details={k: v for k, v in m.items() if k not in own})
        return cls(d["model"], float(d["original_cost"]), d["cost_model"], float(d["budget"]), methods,
                   bool(d.get("as_written")))

    def table(self) -> str:
        """A plain-text table: method, cost, speedup, seconds to its best, to backtracking's and to eqsat's final
        cost ("never": not reached; "-": that method did not run), total seconds, work, status."""
        def secs(m: dict[str, Any], key: str) -> str:
            if key not in m:
                return "-"
            return "never" if m[key] is None else f"{m[key]:.2f}"

        rows = [("method", "cost (ms)", "speedup", "to best (s)", "to bt's best (s)", "to eqsat's best (s)",
                 "total (s)", "work", "status")]
        original = "original (as written)" if self.as_written else "original"
        rows.append((original, f"{self.original_cost:.6g}", "1.000x", "-", "-", "-", "-", "-", ""))
        as_json = self.as_dict()["methods"]
        for name, r in self.methods.items():
            sp = self.speedup(name)
            shown = "-" if math.isnan(sp) else "inf" if math.isinf(sp) else f"{sp:.3f}x"
            m = as_json[name]
            rows.append((name, f"{r.cost:.6g}", shown, f"{r.seconds_to_best:.2f}",
                         secs(m, "seconds_to_backtracking_best"), secs(m, "seconds_to_eqsat_best"),
                         f"{r.seconds:.2f}", str(r.work), r.status))
        widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def _strict(x: Any) -> Any:
    """``x`` with every NaN or infinite float replaced by None: strict JSON has neither."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _strict(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_strict(v) for v in x]
    return x


def model_cost(model: onnx.ModelProto, cost_model: CostModel, parallel: ParallelCost | None = None,
               as_written: bool = False) -> float:
    """The cost of an ONNX model under ``cost_model`` (the sum of its operators' costs, or with ``parallel`` the
    mixed critical-path cost): the one function every method's result is judged by. ``as_written``: of the model
    imported without the import's folds (:func:`eqsat.onnx_io.load_model`)."""
    graph = onnx_io.load_with_axes(model, label="model", as_written=as_written)[0]
    return Objective(parallel)(graph, cost_model)  # at price points


def compare(model: str | Path | bytes | onnx.ModelProto, methods: Sequence[str] = DEFAULT_METHODS,
            budget: float = 60.0, cost_model: CostModel | None = None, *, alpha: float = 1.05, seed: int = 0,
            rules: Sequence[Any] | None = None, check: bool = True, progress: Callable[[str], None] | None = None,
            name: str | None = None, parallel: int | None = None, as_written: bool = False) -> ComparisonResult:
    """Run each of ``methods`` on ``model`` with the same rules, cost model and wall-time ``budget`` (seconds).

    Methods: ``eqsat`` (saturation + CP-SAT, :func:`eqsat.optimize` unchanged), ``backtracking`` (TASO's
    search, relaxation ``alpha``), ``sampling`` (OCGGS's sampling search, seeded by ``seed``) and ``autograph``
    (AutoGraph's windowed backtracking under the mixed cost, :mod:`eqsat.search.autograph`). With ``parallel`` (a
    number of branches run at once) every result is judged by AutoGraph's mixed cost for that runtime and eqsat
    optimizes for it (``optimize(parallel=...)``, without the executors' race); else by the sum. Each result's
    cost is recomputed by :func:`model_cost` from its exported model, and (unless ``check`` is False) the model
    is compared with the original by onnxruntime; a result that differs is reported with status ``MISMATCH``.
    ``name`` labels the model in the result (default: the file name, or the graph's name). With ``as_written``
    every method starts from the model imported as written (``optimize(as_written=True)``), the rules relating the
    import's folds to the nodes it folds are added to ``rules`` (:func:`eqsat.pipeline.choices.with_fold_rules`),
    and the original and every result are priced as written (:func:`model_cost`).
    """
    methods = [methods] if isinstance(methods, str) else list(dict.fromkeys(methods))
    if parallel is not None and (isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1):
        raise UsageError(f"parallel must be a number of branches run at once (>= 1), got {parallel!r}")
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise UsageError(f"unknown method(s) {unknown or '(none given)'}; choose from {', '.join(METHODS)}")
    if "autograph" in methods and parallel is None:
        raise UsageError("autograph searches under the mixed critical-path cost: give the branches the runtime runs "
                         "at once (--parallel N, Python: parallel=N), by which every method is then judged")
    check_limits(alpha, None, budget)  # before any method runs, not after eqsat has used its budget
    mixed = None if parallel is None else ParallelCost(branches=parallel)
    say = progress or (lambda msg: None)
    cost_model = cost_model or get_cost_model("analytic")
    proto, label = onnx_io.read_model(model)
    # dynamic axes as symbols, at their price points; every method starts from this graph (eqsat imports the same)
    graph, _ = onnx_io.load_with_axes(proto, label=label, as_written=as_written)
    sizes, shapes = sizes_to_check(graph)
    label = name or (label if isinstance(model, str | Path) else proto.graph.name or label)
    rules = list(rules) if rules is not None else default_rules()
    rules = with_fold_rules(rules) if as_written else rules
    original_cost = model_cost(proto, cost_model, mixed, as_written)
    results: dict[str, MethodResult] = {}
    for method in methods:
        say(f"{method}: running for up to {budget:g} s")
        gc.collect()  # the garbage of the method before is collected before this one's clock starts, not during it
        t = time.perf_counter()
        try:
            out, trace, work, details = _RUNNERS[method](proto, graph, rules, cost_model, budget, alpha, seed, say,
                                                         mixed, as_written)
        except Exception as e:  # one failing method must not lose the others' results
            if not isinstance(e, Exception) or isinstance(e, UsageError):
                raise
            results[method] = MethodResult(method, math.nan, time.perf_counter() - t, math.nan, [], 0,
                                           f"error: {type(e).__name__}: {e}")
            say(f"{method}: error: {e}")
            continue
        seconds = time.perf_counter() - t
        cost = model_cost(out, cost_model, mixed, as_written)
        if mixed is not None and method in ("backtracking", "sampling"):
            # these search by the sum: their traces are sums, so only what their final graph costs, when they
            # found it, is in the units the comparison judges by
            found = trace[-1][0] if len(trace) > 1 else 0.0
            trace = [(0.0, original_cost)] + ([(found, cost)] if cost < original_cost else [])
        status, numeric = "ok", None
        if check:
            numeric = check_equal(proto, out, reference=f"the original model ({label})", sizes=sizes,
                                  input_shapes=shapes, size_inputs=graph_size_inputs(graph))
            if not numeric.ran:
                status = "unchecked: " + "; ".join(numeric.problems)
            elif not numeric.ok:
                status = "MISMATCH: " + numeric.summary()
        best_at = next((s for s, c in trace if c <= cost * (1 + 1e-9)), trace[-1][0] if trace else seconds)
        results[method] = MethodResult(method, cost, seconds, min(best_at, seconds), trace, work, status, out,
                                       numeric, details)
        say(f"{method}: cost {cost:.6g} in {seconds:.1f} s ({status})")
    judged = cost_model.name if mixed is None else f"{cost_model.name}, {Objective(mixed).name}"
    return ComparisonResult(label, original_cost, judged, budget, results, as_written)


Runner = Callable[..., tuple[onnx.ModelProto, list[tuple[float, float]], int, dict[str, Any]]]


def _run_eqsat(proto: onnx.ModelProto, graph: Any, rules: list[Any], cost_model: CostModel, budget: float, alpha: float,
               seed: int, say: Callable[[str], None], mixed: ParallelCost | None, as_written: bool
               ) -> tuple[onnx.ModelProto, list[tuple[float, float]], int, dict[str, Any]]:
    for_parallel = {} if mixed is None else {"parallel": mixed.branches, "critical_path_weight": mixed.alpha}
    res = optimize(proto, cost_model=cost_model, rules=rules, time_limit=budget, check=False, verify_latency=False,
                   cache=False,  # a search, timed: never a stored transformation replayed
                   as_written=as_written, **for_parallel)
    enodes = res.iterations[-1].enodes if res.iterations else 0
    details = {"stop_reason": res.stop_reason, "solver_status": res.solver_status,
               "iterations": len(res.iterations) - 1, "stage_seconds": res.stage_seconds,
               "best_source": res.best_source, "start_nodes": len(res.original.nodes)}
    # the anytime trace: when each better graph was found, in seconds from the run's start (the import counts)
    return res.model, list(res.trace), enodes, details


def _run_search(kind: str) -> Runner:
    def run(proto: onnx.ModelProto, graph: Any, rules: list[Any], cost_model: CostModel, budget: float, alpha: float,
            seed: int, say: Callable[[str], None], mixed: ParallelCost | None, as_written: bool
            ) -> tuple[onnx.ModelProto, list[tuple[float, float]], int, dict[str, Any]]:
        # the clock starts at the call, with the model, as eqsat's does (its trace counts its import): a search
        # imports the model too (as asked: as written or folded), and its time counts
        began = time.perf_counter()
        graph = onnx_io.load_with_axes(proto, label="model", as_written=as_written)[0]
        imported = time.perf_counter() - began
        seconds = max(budget - imported, 1e-3)  # the same budget from the call
        if kind == "autograph":
            assert mixed is not None  # compare asks for parallel with autograph
            res = autograph(graph, rules, cost_model, parallel=mixed, seconds=seconds, progress=say)
        elif kind == "backtracking":
            res = search.backtracking(graph, rules, cost_model, alpha=alpha, seconds=seconds, progress=say)
        else:
            res = search.sampling(graph, rules, cost_model, seed=seed, seconds=seconds, progress=say)
        trace = [(0.0, res.trace[0][1])] + [(t + imported, c) for t, c in res.trace[1:]]
        details = {"stop_reason": res.stop_reason, "graphs_generated": res.graphs_generated,
                   "rules_applied": len(res.applied), "search_seconds": res.seconds, "import_seconds": imported,
                   "start_nodes": len(graph.nodes)}
        return onnx_io.to_onnx(res.graph), trace, res.expansions, details

    return run


_RUNNERS: dict[str, Runner] = {"eqsat": _run_eqsat, "backtracking": _run_search("backtracking"),
                               "sampling": _run_search("sampling"), "autograph": _run_search("autograph")}
