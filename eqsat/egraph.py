"""The e-graph engine: the only module that talks to egglog.

It compiles the operator registry, an IR graph and a rule set into an egglog program, saturates it under
iteration / e-node / wall-time / memory limits in a child process, and serializes the result to
extraction-gym JSON enriched with what cost models and the IR need (operator parameters, e-class shapes).
:func:`selection_to_graph` turns an extraction back into an IR graph.

Soundness of shapes: a rewrite never unions directly. Its right-hand side is recorded in the ``pending``
relation and merged by the ``shapes`` ruleset only once the registry's shape rules have given it a shape
equal to the left-hand side's; ill-shaped right-hand sides stay unmerged (and without a shape), and the
serializer drops them.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import re
import resource
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eqsat import ops
from eqsat.graph import Graph, Node, make_node
from eqsat.rules.rule import Rule, RuleError, Sexp, Vec, is_var, parse, split_args

EGGLOG_VERSION = "13.2.0"
_SORTS = {"int": "i64", "ints": "IVec", "float": "String", "str": "String", "any": "String"}
_ARITH = {"+", "-", "*"}


class EngineError(RuntimeError):
    """egglog rejected the program or the engine process failed in a way we cannot recover from."""


# ---------------------------------------------------------------------------------------------------------
# literals


def _lit(value: Any, kind: str) -> str:
    if kind == "int":
        return str(int(value))
    if kind == "ints":
        return f"(vec-of {' '.join(str(int(v)) for v in value)})" if len(value) else "(vec-empty)"
    return json.dumps(repr(value) if kind == "float" else str(value))


def _decode_param(value: Any, kind: str) -> Any:
    if kind == "float":
        return float(value)
    if kind == "ints":
        return tuple(value)
    return value


# ---------------------------------------------------------------------------------------------------------
# declarations


def _egglog_params(spec: ops.OpSpec) -> list[tuple[str, str]]:
    return [(n, k) for n, k in spec.params] if spec.name != "opaque" else [("key", "str"), ("index", "int")]


def _egglog_inputs(spec: ops.OpSpec) -> list[str]:
    if spec.name == "opaque":
        return []
    return ["a", "b"] if spec.variadic else list(spec.inputs)


def declarations() -> str:
    """egglog declarations derived from the registry: sorts, constructors, shape analysis, rulesets."""
    lines = ["(sort IVec (Vec i64))", "(sort TList)", "(datatype T", "  (Input String)", "  (Weight String)"]
    for spec in ops.REGISTRY.values():
        sorts = [_SORTS[k] for _, k in _egglog_params(spec)] + ["T"] * len(_egglog_inputs(spec))
        if spec.name == "opaque":
            sorts.append("TList")
        lines.append(f"  ({spec.name} {' '.join(sorts)})")
    lines[-1] += ")"
    lines += [
        "(constructor TNil () TList)",
        "(constructor TCons (T TList) TList)",
        "(function shape (T) IVec :no-merge)",
        "(relation pending (T T))",
        "(ruleset shapes)", "(ruleset rw)", "(ruleset multi)",
        # merge a rewrite's right-hand side only once it is well-shaped with the left-hand side's shape
        '(rule ((pending l r) (= s (shape l)) (= s (shape r))) ((union l r)) :ruleset shapes :name "merge-checked")',
    ]
    for spec in ops.REGISTRY.values():
        lines += _shape_rules(spec)
    return "\n".join(lines)


_TOK = re.compile(r"[()\s]+|[^()\s]+")


def _rename_params(text: str, names: Iterable[str]) -> str:
    names = set(names)
    return "".join(f"p_{t}" if t in names else t for t in _TOK.findall(text))


def _shape_rules(spec: ops.OpSpec) -> list[str]:
    params = [n for n, _ in _egglog_params(spec)]
    inputs = _egglog_inputs(spec)
    pattern = f"(= t ({spec.name} {' '.join([f'p_{p}' for p in params] + [f'i_{i}' for i in inputs])}))"
    binds = [f"(= s_{i} (shape i_{i}))" for i in inputs]
    out = []
    for k, body in enumerate(spec.egglog_shape()):
        lines = body.split("\n")
        assert lines[0] == "PATTERN" and lines[-1].startswith("=> "), body
        facts = [_rename_params(f, params) for f in lines[1:-1]]
        result = _rename_params(lines[-1][3:], params)
        out.append(f"(rule ({pattern} {' '.join(binds + facts)}) ((set (shape t) {result})) "
                   f':ruleset shapes :name "shape-{spec.name}-{k}")')
    return out


# ---------------------------------------------------------------------------------------------------------
# rules


class _RuleCompiler:
    def __init__(self) -> None:
        self.shape_vars: dict[str, str] = {}

    @staticmethod
    def var(v: str) -> str:
        return "v_" + re.sub(r"\W", "_", v[1:])

    def shape_of(self, v: str) -> str:
        return self.shape_vars.setdefault(v, "s_" + self.var(v))

    def param(self, e: Sexp, kind: str) -> str:
        if is_var(e):
            return self.var(e)
        if isinstance(e, int):
            if kind == "ints":
                raise RuleError(f"integer literal {e} where a tuple is expected")
            return str(e)
        if isinstance(e, Vec):
            return f"(vec-of {' '.join(self.expr(i) for i in e.items)})" if e.items else "(vec-empty)"
        return self.expr(e)

    def expr(self, e: Sexp) -> str:
        if is_var(e) or isinstance(e, int):
            return self.var(e) if is_var(e) else str(e)
        if isinstance(e, list):
            head = e[0]
            if head == "dim":
                return f"(vec-get {self.shape_of(e[1])} {self.expr(e[2])})"
            if head == "rank":
                return f"(vec-length {self.shape_of(e[1])})"
            if head == "shape":
                return self.shape_of(e[1])
            if head in _ARITH:
                return f"({head} {' '.join(self.expr(x) for x in e[1:])})"
        raise RuleError(f"bad parameter expression {e!r}")

    def term(self, e: Sexp) -> str:
        if is_var(e):
            return self.var(e)
        spec, params, ins = split_args(e)
        args = [self.param(p, k) for p, (_, k) in zip(params, spec.params, strict=True)]
        args += [self.term(x) for x in ins]
        return f"({spec.name} {' '.join(args)})"

    def condition(self, c: str) -> str:
        e = parse(c)
        if not (isinstance(e, list) and e[0] in ("=", "!=", "<", "<=", ">", ">=") and len(e) == 3):
            raise RuleError(f"bad condition {c!r}")
        return f"({e[0]} {self.expr(e[1])} {self.expr(e[2])})"


def compile_rule(rule: Rule) -> str:
    """Compile one direction of a rule to an egglog ``rule`` command."""
    comp = _RuleCompiler()
    facts = [f"(= __r{k} {comp.term(parse(lhs))})" for k, lhs in enumerate(rule.lhs)]
    facts += [comp.condition(c) for c in rule.conditions]
    actions = [f"(pending __r{k} {comp.term(parse(rhs))})" for k, rhs in enumerate(rule.rhs)]
    facts += [f"(= {s} (shape {comp.var(v)}))" for v, s in comp.shape_vars.items()]
    ruleset = "multi" if rule.multi else "rw"
    return f"(rule ({' '.join(facts)}) ({' '.join(actions)}) :ruleset {ruleset} :name {json.dumps(rule.name)})"


def compile_rules(rules: Iterable[Rule]) -> list[str]:
    """Compile every direction of every rule, deduplicated by text (egglog panics on duplicates)."""
    seen: set[str] = set()
    names: set[str] = set()
    out = []
    for r in rules:
        for d in r.directions():
            text = compile_rule(d)
            body = text.rsplit(":name", 1)[0]
            if body in seen:
                continue
            if d.name in names:
                raise RuleError(f"duplicate rule name {d.name!r}")
            seen.add(body)
            names.add(d.name)
            out.append(text)
    return out


# ---------------------------------------------------------------------------------------------------------
# graph


@dataclass
class CompiledGraph:
    """The egglog text of a graph plus the mapping between tensors and egglog globals."""

    text: str
    tensor_of_global: dict[str, str]
    output_globals: list[str]


def compile_graph(graph: Graph) -> CompiledGraph:
    """One ``let`` per tensor, with the shapes of leaves and opaque outputs given as facts."""
    shapes = graph.shapes
    g: dict[str, str] = {}
    lines: list[str] = []

    def new_global(tensor: str) -> str:
        name = f"$g{len(g)}"
        g[tensor] = name
        return name

    for inp in graph.inputs:
        gl = new_global(inp.name)
        lines.append(f"(let {gl} (Input {json.dumps(inp.name)}))")
        lines.append(f"(set (shape {gl}) {_lit(shapes[inp.name], 'ints')})")
    for w in graph.weights:
        gl = new_global(w)
        lines.append(f"(let {gl} (Weight {json.dumps(w)}))")
        lines.append(f"(set (shape {gl}) {_lit(shapes[w], 'ints')})")
    for n in graph.nodes:
        spec = n.spec
        p = n.p
        if n.op == "opaque":
            lst = "(TNil)"
            for i in reversed(n.inputs):
                lst = f"(TCons {g[i]} {lst})"
            term = f"(opaque {json.dumps(p['key'])} {p['index']} {lst})"
        else:
            args = [_lit(p[name], kind) for name, kind in spec.params]
            ins = [g[i] for i in n.inputs]
            if spec.variadic:  # n-ary concat -> left-nested binary chain
                acc = ins[0]
                for k, x in enumerate(ins[1:]):
                    if k < len(ins) - 2:
                        tmp = f"$c{len(lines)}"
                        lines.append(f"(let {tmp} ({spec.name} {' '.join(args)} {acc} {x}))")
                        acc = tmp
                    else:
                        acc = f"({spec.name} {' '.join(args)} {acc} {x})"
                term = acc if len(ins) > 1 else None
                if term is None:
                    raise EngineError(f"concat {n.output!r} with a single input")
            else:
                term = f"({spec.name} {' '.join(args + ins)})"
        gl = new_global(n.output)
        lines.append(f"(let {gl} {term})")
        if n.op == "opaque":
            lines.append(f"(set (shape {gl}) {_lit(shapes[n.output], 'ints')})")
    return CompiledGraph("\n".join(lines), {v: k for k, v in g.items()}, [g[o] for o in graph.outputs])


# ---------------------------------------------------------------------------------------------------------
# saturation


@dataclass
class Limits:
    """Bounds on saturation. The engine stops at the first one reached, keeping the e-graph so far."""

    iter_limit: int = 10
    node_limit: int = 50_000
    time_limit: float = 30.0  # seconds of saturation
    multi_iters: int = 1  # iterations in which two-output rules run (they feed on their own output)
    memory_limit_mb: int = 8192


@dataclass
class IterationStats:
    """What one saturation iteration did."""

    iteration: int
    enodes: int
    eclasses: int
    seconds: float
    matches: dict[str, int]


@dataclass
class SaturationResult:
    """A serialized e-graph with the run report."""

    egraph: dict[str, Any]
    iterations: list[IterationStats]
    stop_reason: str
    seconds: float
    program: str = ""
    tensor_of_global: dict[str, str] = field(default_factory=dict)

    @property
    def rules_fired(self) -> dict[str, int]:
        """Total matches per rule over all iterations (shape bookkeeping excluded)."""
        out: dict[str, int] = {}
        for it in self.iterations:
            for k, v in it.matches.items():
                if not k.startswith("shape-") and k != "merge-checked" and v:
                    out[k] = out.get(k, 0) + v
        return out


def _sizes(eg: Any, b: Any) -> tuple[int, int]:
    (out,) = eg.run_program(*eg.parse_program("(print-size)"))
    sizes = dict(out.sizes)
    skip = {"shape", "pending", "TNil", "TCons"}
    enodes = sum(v for k, v in sizes.items() if k not in skip)
    return enodes, sizes.get("shape", 0)


def _matches(report: Any) -> dict[str, int]:
    return {str(k): int(v) for k, v in report.num_matches_per_rule.items()}


def _saturate_in_process(program: str, roots: list[str], limits: Limits,
                         report: Callable[[str, Any], None]) -> None:
    from egglog import bindings as b

    eg = b.EGraph()
    t_start = time.perf_counter()
    for chunk in program.split("\n;;CHUNK\n"):
        eg.run_program(*eg.parse_program(chunk))
    eg.run_program(*eg.parse_program("(run-schedule (saturate (run shapes)))"))
    enodes, classes = _sizes(eg, b)
    report("iter", IterationStats(0, enodes, classes, time.perf_counter() - t_start, {}))
    reason = "iteration limit"
    for i in range(1, limits.iter_limit + 1):
        if enodes >= limits.node_limit:
            reason = "node limit"
            break
        if time.perf_counter() - t_start >= limits.time_limit:
            reason = "time limit"
            break
        t0 = time.perf_counter()
        sched = "(run rw)" + (" (run multi)" if i <= limits.multi_iters else "")
        outs = eg.run_program(*eg.parse_program(f"(run-schedule {sched} (saturate (run shapes)))"))
        matches = _matches(outs[-1].report)
        new_enodes, classes = _sizes(eg, b)
        report("iter", IterationStats(i, new_enodes, classes, time.perf_counter() - t0, matches))
        if new_enodes == enodes and not any(v for k, v in matches.items() if k != "merge-checked"):
            reason = "saturated"
            break
        if new_enodes == enodes and i > limits.multi_iters:
            reason = "saturated"
            break
        enodes = new_enodes
    ser = eg.serialize([b.Var(b.PanicSpan(), r) for r in roots])
    report("done", (clean_serialized(json.loads(ser.to_json())), reason))


def _explain(e: BaseException) -> str:
    msg = f"{type(e).__name__}: {e}"
    if "Illegal merge" in msg and "shape" in msg:
        return ("shape conflict: two tensors with different shapes ended up in one e-class. This is an eqsat bug "
                f"(a rule or shape rule is wrong); please report it with the model. egglog said: {msg}")
    return msg


def _child_main(conn: Any, program: str, roots: list[str], limits: Limits) -> None:
    try:
        # the limit is on memory the engine adds to what the forked process already maps
        with open("/proc/self/statm") as f:
            mapped = int(f.read().split()[0]) * resource.getpagesize()
        limit = mapped + limits.memory_limit_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
    except (ValueError, OSError):  # pragma: no cover - platform without /proc or RLIMIT_AS
        pass
    try:
        _saturate_in_process(program, roots, limits, lambda kind, payload: conn.send((kind, payload)))
    except MemoryError:
        conn.send(("error", "memory limit"))
    except BaseException as e:  # egglog errors (and Rust panics) cross the process boundary as text
        conn.send(("error", _explain(e)))
    finally:
        conn.close()


def build_program(graph: Graph, rules: Sequence[Rule]) -> tuple[str, CompiledGraph]:
    """The whole egglog program (declarations, graph, rules) as text chunks joined by ';;CHUNK' lines."""
    cg = compile_graph(graph)
    rule_texts = compile_rules(rules)
    # rules are added after the graph (egglog plans queries with the table sizes it sees, issue #866), in
    # small batches (one big batch costs extra memory)
    chunks = [declarations(), cg.text] + ["\n".join(rule_texts[i:i + 20]) for i in range(0, len(rule_texts), 20)]
    return "\n;;CHUNK\n".join(c for c in chunks if c), cg


def saturate(graph: Graph, rules: Sequence[Rule], limits: Limits | None = None, *,
             progress: Callable[[IterationStats], None] | None = None, in_process: bool = False) -> SaturationResult:
    """Saturate ``graph`` under ``rules`` and return the serialized e-graph.

    The engine runs in a child process with a memory limit. If the child dies or overruns the time limit in
    the middle of an iteration, it is run again with one iteration fewer than it had completed, so the
    result is always the e-graph after the last complete iteration (egglog is deterministic).
    """
    limits = limits or Limits()
    program, cg = build_program(graph, rules)
    t0 = time.perf_counter()
    if in_process:
        msgs: list[tuple[str, Any]] = []

        def rep(kind: str, payload: Any) -> None:
            msgs.append((kind, payload))
            if kind == "iter" and progress:
                progress(payload)

        try:
            _saturate_in_process(program, cg.output_globals, limits, rep)
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # a Rust panic is a BaseException
            raise EngineError(_explain(e)) from e
        iters = [p for k, p in msgs if k == "iter"]
        egraph, reason = msgs[-1][1]
        return SaturationResult(egraph, iters, reason, time.perf_counter() - t0, program, cg.tensor_of_global)

    attempt_limits = limits
    while True:
        # each attempt gets the full allowance: a rerun redoes the iterations that already fitted in it
        iters, done, error = _run_child(program, cg.output_globals, attempt_limits, progress,
                                        deadline=time.perf_counter() + limits.time_limit * 1.5 + 30)
        if done is not None:
            egraph, reason = done
            return SaturationResult(egraph, iters, reason, time.perf_counter() - t0, program, cg.tensor_of_global)
        completed = max((it.iteration for it in iters), default=-1)
        if completed < 0 or attempt_limits.iter_limit == 0:
            raise EngineError(f"e-graph engine failed before the first iteration: {error}")
        # rerun, stopping after the last iteration that completed (or one earlier if serializing it failed)
        attempt_limits = Limits(max(0, min(completed, attempt_limits.iter_limit - 1)), limits.node_limit,
                                limits.time_limit, limits.multi_iters, limits.memory_limit_mb)
        if progress:
            print(f"  engine stopped ({error}); redoing {attempt_limits.iter_limit} iteration(s)")


def _run_child(program: str, roots: list[str], limits: Limits,
               progress: Callable[[IterationStats], None] | None, deadline: float
               ) -> tuple[list[IterationStats], tuple[dict, str] | None, str]:
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child_main, args=(child, program, roots, limits), daemon=True)
    proc.start()
    child.close()
    iters: list[IterationStats] = []
    error = "engine process ended without a result"
    try:
        while True:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                error = "time limit (iteration did not finish)"
                break
            if not parent.poll(min(remaining, 1.0)):
                if not proc.is_alive() and not parent.poll(0):
                    proc.join(1)
                    error = f"engine process died (exit code {proc.exitcode}; likely the memory limit)"
                    break
                continue
            try:
                kind, payload = parent.recv()
            except EOFError:
                proc.join(1)
                error = f"engine process died (exit code {proc.exitcode}; likely the memory limit)"
                break
            if kind == "iter":
                iters.append(payload)
                if progress:
                    progress(payload)
            elif kind == "done":
                return iters, payload, ""
            else:
                error = payload
                if not str(payload).startswith("memory"):
                    raise EngineError(payload)
                break
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        parent.close()
    return iters, None, error


# ---------------------------------------------------------------------------------------------------------
# serialization


def _primitive_value(node: dict[str, Any], nodes: dict[str, Any]) -> Any:
    op = node["op"]
    if op in ("vec-of", "vec-empty"):
        return tuple(_primitive_value(nodes[c], nodes) for c in node["children"])
    if op.startswith('"'):
        return json.loads(op)
    return int(op)


def clean_serialized(raw: dict[str, Any]) -> dict[str, Any]:
    """Reduce egglog's serialized JSON to tensor (``T``) and list (``TList``) e-classes.

    Each kept node gets ``op``, ``params`` (named, decoded), ``children`` (T/TList node ids), ``eclass`` and a
    zero ``cost`` (costs are assigned later); ``class_data[c]`` has ``type`` and, for tensors, ``shape``.
    Tensor classes without a shape (ill-shaped right-hand sides that were never merged) are dropped.
    """
    nodes = raw["nodes"]
    ctype = {c: d.get("type") for c, d in raw.get("class_data", {}).items()}
    prim_of_class: dict[str, Any] = {}
    for n in nodes.values():
        t = ctype.get(n["eclass"])
        if t in ("i64", "IVec", "String") and n["eclass"] not in prim_of_class and n["op"] != "shape":
            if not n["op"].startswith("function") and n.get("children") is not None:
                try:
                    prim_of_class[n["eclass"]] = _primitive_value(n, nodes)
                except (ValueError, KeyError):
                    pass
    shape_of: dict[str, tuple[int, ...]] = {}
    for n in nodes.values():
        if n["op"] == "shape" and n["children"]:
            shape_of[nodes[n["children"][0]]["eclass"]] = tuple(prim_of_class[n["eclass"]])
    keep: dict[str, dict[str, Any]] = {}
    for nid, n in nodes.items():
        t = ctype.get(n["eclass"])
        if t not in ("T", "TList"):
            continue
        op = n["op"]
        spec_params: list[tuple[str, str]] = []
        if op in ("Input", "Weight"):
            spec_params = [("name", "str")]
        elif t == "T":
            spec_params = _egglog_params(ops.get(op))
        params, kids = {}, []
        prim_children = [c for c in n["children"] if ctype.get(nodes[c]["eclass"]) not in ("T", "TList")]
        for (name, kind), c in zip(spec_params, prim_children, strict=True):
            params[name] = _decode_param(prim_of_class[nodes[c]["eclass"]], kind)
        kids = [nodes[c]["eclass"] for c in n["children"] if ctype.get(nodes[c]["eclass"]) in ("T", "TList")]
        keep[nid] = {"op": op, "params": params, "children": kids, "eclass": n["eclass"], "cost": 0.0}
    # drop ill-shaped tensor classes, then (to a fixpoint) nodes that depend on dropped classes
    alive_classes = {n["eclass"] for n in keep.values()
                     if ctype[n["eclass"]] == "TList" or n["eclass"] in shape_of}
    changed = True
    while changed:
        changed = False
        for nid in list(keep):
            n = keep[nid]
            if n["eclass"] not in alive_classes or any(c not in alive_classes for c in n["children"]):
                del keep[nid]
                changed = True
        live = {n["eclass"] for n in keep.values()}
        if live != alive_classes:
            alive_classes = live
            changed = True
    rep = {}
    for nid, n in keep.items():
        rep.setdefault(n["eclass"], nid)
    for n in keep.values():
        n["children"] = [rep[c] for c in n["children"]]
    roots = [c for c in raw.get("root_eclasses", [])]
    missing = [r for r in roots if r not in alive_classes]
    if missing:
        raise EngineError(f"root e-classes lost their shape (engine bug): {missing}")
    class_data = {c: ({"type": ctype[c], "shape": list(shape_of[c])} if ctype[c] == "T" else {"type": "TList"})
                  for c in alive_classes}
    for c, d in raw.get("class_data", {}).items():
        if c in class_data and d.get("let"):
            class_data[c]["let"] = d["let"]
    return {"nodes": keep, "root_eclasses": roots, "class_data": class_data}


# ---------------------------------------------------------------------------------------------------------
# costs and reading an extraction back


def weight_only_classes(egraph: Mapping[str, Any]) -> set[str]:
    """E-classes equal to a constant: a Weight, or computed by some node from weight-only classes."""
    nodes = egraph["nodes"]
    wo: set[str] = set()
    changed = True
    while changed:
        changed = False
        for n in nodes.values():
            c = n["eclass"]
            if c in wo or n["op"] in ("Input", "opaque") or egraph["class_data"][c]["type"] != "T":
                continue
            # a Weight, a constant leaf (no tensor inputs, e.g. const_pool), or work on weight-only classes
            if n["op"] == "Weight" or all(nodes[k]["eclass"] in wo for k in n["children"]):
                wo.add(c)
                changed = True
    return wo


def node_cost_keys(egraph: Mapping[str, Any]) -> dict[str, ops.CostKey | None]:
    """Cost key of every node; ``None`` for nodes that cost nothing (leaves, lists, weight-only work)."""
    nodes, cd = egraph["nodes"], egraph["class_data"]
    wo = weight_only_classes(egraph)
    keys: dict[str, ops.CostKey | None] = {}
    for nid, n in nodes.items():
        kids = [nodes[k]["eclass"] for k in n["children"]]
        if n["op"] in ("Input", "Weight", "TNil", "TCons") or n["eclass"] in wo and all(k in wo for k in kids):
            keys[nid] = None
            continue
        spec = ops.get(n["op"])
        out_shape = tuple(cd[n["eclass"]]["shape"])
        if n["op"] == "opaque":
            params = {"key": n["params"]["key"], "index": n["params"]["index"]}
            keys[nid] = ops.CostKey("opaque", tuple(params.items()), (), out_shape)
            continue
        keys[nid] = spec.cost_key(n["params"], [tuple(cd[k]["shape"]) for k in kids], out_shape,
                                  weights=[i for i, k in enumerate(kids) if k in wo])
    return keys


def selection_to_graph(egraph: Mapping[str, Any], selection: Mapping[str, str], original: Graph,
                       tensor_of_class: Mapping[str, str] | None = None) -> Graph:
    """Build the IR graph chosen by an extraction (``selection``: e-class -> node id).

    Graph inputs, weights, output names and opaque nodes are taken from ``original``. Intermediate tensors
    keep a name from ``tensor_of_class`` where one is known.
    """
    nodes = egraph["nodes"]
    opaque = {(n.p["key"], n.p["index"]): n for n in original.nodes if n.op == "opaque"}
    names: dict[str, str] = {}
    used: set[str] = {i.name for i in original.inputs} | set(original.weights)
    ir: list[Node] = []
    tensor_of_class = dict(tensor_of_class or {})

    def fresh(cls: str) -> str:
        base = tensor_of_class.get(cls) or f"t_{cls}"
        name, k = base, 0
        while name in used:
            k += 1
            name = f"{base}_{k}"
        used.add(name)
        return name

    def list_items(cls: str) -> list[str]:
        out = []
        while True:
            n = nodes[selection[cls]]
            if n["op"] == "TNil":
                return out
            head, tail = (nodes[k]["eclass"] for k in n["children"])
            out.append(visit(head))
            cls = tail

    out_names = {}
    for cls, name in zip(egraph["root_eclasses"], original.outputs, strict=True):
        out_names.setdefault(cls, name)

    def visit(cls: str) -> str:
        # iterative would be nicer for very deep graphs; the recursion limit is raised by the caller
        if cls in names:
            return names[cls]
        n = nodes[selection[cls]]
        op = n["op"]
        if op in ("Input", "Weight"):
            names[cls] = n["params"]["name"]
            return names[cls]
        if op == "opaque":
            orig = opaque[(n["params"]["key"], n["params"]["index"])]
            ins = list_items(nodes[n["children"][0]]["eclass"])
            name = out_names.get(cls) or fresh(cls)
            used.add(name)
            names[cls] = name
            ir.append(Node("opaque", orig.params, tuple(ins), name))
            return name
        ins = [visit(nodes[k]["eclass"]) for k in n["children"]]
        name = out_names.get(cls) or fresh(cls)
        used.add(name)
        names[cls] = name
        ir.append(make_node(op, n["params"], ins, name))
        return name

    import sys

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 20 * len(nodes) + 1000))
    try:
        for cls in egraph["root_eclasses"]:
            visit(cls)
    finally:
        sys.setrecursionlimit(old)
    outputs = []
    for cls, name in zip(egraph["root_eclasses"], original.outputs, strict=True):
        t = names[cls]
        if t != name:  # an output shared with another output, or a leaf: an identity keeps its name
            shape = tuple(egraph["class_data"][cls]["shape"])
            ir.append(make_node("reshape", {"shape": shape}, [t], name))
        outputs.append(name)
    weights = {k: v for k, v in original.weights.items()}
    return flatten_concats(Graph(original.inputs, weights, tuple(ir), tuple(outputs), original.name,
                                 original.meta)).live()


def flatten_concats(graph: Graph) -> Graph:
    """Merge a concat into its only consumer when both concatenate along the same axis."""
    consumers = graph.consumers
    outputs = set(graph.outputs)
    by_out = graph.producers
    merged: dict[str, Node] = {}
    dropped: set[str] = set()
    for n in graph.nodes:
        if n.op != "concat":
            continue
        ins: list[str] = []
        for i in n.inputs:
            src = merged.get(i) or by_out.get(i)
            if (src is not None and src.op == "concat" and src.p["axis"] == n.p["axis"]
                    and len(consumers.get(i, [])) == 1 and i not in outputs):
                ins.extend(src.inputs)
                dropped.add(i)
            else:
                ins.append(i)
        if len(ins) != len(n.inputs):
            merged[n.output] = Node("concat", n.params, tuple(ins), n.output)
    if not merged:
        return graph
    new_nodes = tuple(merged.get(n.output, n) for n in graph.nodes if n.output not in dropped)
    return Graph(graph.inputs, graph.weights, new_nodes, graph.outputs, graph.name, graph.meta)


def tensor_names_by_class(result: SaturationResult) -> dict[str, str]:
    """Map e-classes to original tensor names (from egglog's ``let`` names), for readable output."""
    out = {}
    for cls, data in result.egraph.get("class_data", {}).items():
        let = data.get("let")
        if let and let in result.tensor_of_global:
            out[cls] = result.tensor_of_global[let]
    return out


def dump_egraph(result: SaturationResult, path: str, costs: Mapping[str, float] | None = None) -> None:
    """Write the serialized e-graph (extraction-gym JSON, plus params/shapes) for users to inspect."""
    eg = dict(result.egraph)
    if costs is not None:
        eg = {**eg, "nodes": {k: {**v, "cost": float(costs.get(k, v["cost"]))} for k, v in eg["nodes"].items()}}
    with open(path, "w") as f:
        json.dump(eg, f, default=lambda o: list(o) if isinstance(o, tuple) else str(o))


def _np_default(o: Any) -> Any:  # pragma: no cover - json helper
    if isinstance(o, np.integer):
        return int(o)
    raise TypeError(o)
