"""The e-graph engine: the only module that talks to egglog.

It compiles the operator registry, an IR graph and a rule set into an egglog program, saturates it under
iteration / e-node / wall-time / memory limits in a child process, and returns the result as an immutable
:class:`eqsat.engine.egraph.EGraph`: the extraction's e-graph enriched with what cost models and the IR need
(operator parameters, e-class shapes), which gives the extraction-gym JSON and the extractors' view.
:func:`selection_to_graph` turns an extraction back into an IR graph.

Soundness of shapes: a rewrite never unions directly. Its right-hand side is recorded in the ``pending``
relation and merged by the ``shapes`` ruleset only once the registry's shape rules have given it a shape
equal to the left-hand side's; ill-shaped right-hand sides stay unmerged (and without a shape), and the
serializer drops them.
"""

from __future__ import annotations

import enum
import json
import logging
import math
import multiprocessing as mp
import numbers
import re
import resource
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eqsat import ops
from eqsat.engine.egraph import EClass, EGraph, ENode, sorted_rules
from eqsat.errors import EqsatError, UsageError
from eqsat.ir.graph import Graph, Node, flatten_concats, make_node
from eqsat.ops import shapes
from eqsat.rules.rule import Rule, RuleError, Sexp, Vec, is_var, parse, split_args

EGGLOG_VERSION = "13.2.0"
log = logging.getLogger(__name__)
_SORTS = {"int": "i64", "ints": "IVec", "float": "String", "str": "String", "any": "String"}
_ARITH = {"+", "-", "*"}


class EngineError(EqsatError, RuntimeError):
    """egglog rejected the program or the engine process failed in a way we cannot recover from."""


class LimitError(UsageError):
    """A limit that means nothing (negative, NaN, infinite, a fractional count); a ValueError naming it."""


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


#: the rule name provenance rows give the n-way sibling merges :func:`compile_graph` adds before iteration 1
SIBLING_MERGE = "sibling-merge"
#: egglog tables of the provenance record (``prov_<op>`` rows and the ``cur_iter`` counter), not e-nodes
_PROV_PREFIX = "prov_"
_ITER = "cur_iter"


_PROV_ROW = re.compile(r"\(set \(" + _PROV_PREFIX + r"([^\s()]+) ")


def declarations(provenance: bool | Iterable[str] = False) -> str:
    """egglog declarations derived from the registry: sorts, constructors, shape analysis, rulesets; with
    ``provenance`` also the provenance record (:func:`compile_rule`): its tables for every operator but
    ``opaque`` (which no rule builds), or for the operators named (each table costs memory)."""
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
    if provenance is not False:  # True, or the operators to record (maybe none)
        # one row per e-node a rule's right-hand side builds, keyed like the constructor plus the rule's name,
        # valued with the first iteration it did so (egglog canonicalises the tensor arguments, so after
        # rebuilding a row names one e-node; rows that become equal keep the smallest iteration)
        lines.append(f"(function {_ITER} () i64 :merge (max old new))")
        lines.append(f"(set ({_ITER}) 0)")
        names = set(provenance) if not isinstance(provenance, bool) else set(ops.REGISTRY) - {"opaque"}
        for spec in (spec for spec in ops.REGISTRY.values() if spec.name in names):
            sorts = [_SORTS[k] for _, k in _egglog_params(spec)] + ["T"] * len(_egglog_inputs(spec))
            lines.append(f"(function {_PROV_PREFIX}{spec.name} ({' '.join(sorts + ['String'])}) i64 "
                         ":merge (min old new))")
    return "\n".join(lines)


_SHAPE_HEADS = {"dim": "vec-get", "set": "vec-set", "pop": "vec-pop", "rank": "vec-length", "max": "max",
                "+": "+", "-": "-", "*": "*", "/": "/", "%": "%",
                "=": "=", ">=": ">=", ">": ">", "<": "<", "<=": "<="}


def _render_shape_expr(e: shapes.Operand) -> str:
    """egglog text of a shape expression (eqsat.ops.shapes): inputs' shapes are bound to ``s_<input>``,
    parameters to ``p_<param>`` by the pattern :func:`_shape_rules` writes."""
    if isinstance(e, int):
        return str(e)
    if e.head == "shape":
        return f"s_{e.args[0]}"
    if e.head == "param":
        return f"p_{e.args[0]}"
    if e.head == "vec":
        return f"(vec-of {' '.join(_render_shape_expr(x) for x in e.args)})" if e.args else "(vec-empty)"
    return f"({_SHAPE_HEADS[e.head]} {' '.join(_render_shape_expr(x) for x in e.args)})"


def _shape_rules(spec: ops.OpSpec) -> list[str]:
    params = [n for n, _ in _egglog_params(spec)]
    inputs = _egglog_inputs(spec)
    pattern = f"(= t ({spec.name} {' '.join([f'p_{p}' for p in params] + [f'i_{i}' for i in inputs])}))"
    binds = [f"(= s_{i} (shape i_{i}))" for i in inputs]
    out = []
    for k, r in enumerate(spec.shape_rules):
        facts = [_render_shape_expr(c) for c in r.when]
        out.append(f"(rule ({pattern} {' '.join(binds + facts)}) ((set (shape t) {_render_shape_expr(r.result)})) "
                   f':ruleset shapes :name "shape-{spec.name}-{k}")')
    return out


# ---------------------------------------------------------------------------------------------------------
# rules


class _RuleCompiler:
    def __init__(self) -> None:
        self.shape_vars: dict[str, str] = {}
        self.dims: dict[tuple[str, str], None] = {}  # (shape, index) pairs read with vec-get, in order

    @staticmethod
    def var(v: str) -> str:
        return "v_" + re.sub(r"\W", "_", v[1:])

    def shape_of(self, v: str) -> str:
        return self.shape_vars.setdefault(v, "s_" + self.var(v))

    def param(self, e: Sexp, kind: str) -> str:
        if is_var(e):
            return self.var(e)
        if isinstance(e, float):
            return _lit(e, "float")
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
                shape, index = self.shape_of(e[1]), self.expr(e[2])
                self.dims[(shape, index)] = None
                return f"(vec-get {shape} {index})"
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


def _prov_row(term: str, rule: str, iteration: str) -> str:
    """The provenance row of an egglog term ``(op args...)``: ``(set (prov_op args... "rule") iteration)``."""
    return f"(set ({_PROV_PREFIX}{term[1:-1]} {json.dumps(rule)}) {iteration})"


def _subterms(e: Sexp) -> list[Sexp]:
    """The operator applications of a pattern, children first (parameters are primitives, not terms)."""
    if not isinstance(e, list):
        return []
    _, _, ins = split_args(e)
    return [t for x in ins for t in _subterms(x)] + [e]


def compile_rule(rule: Rule, provenance: bool = False) -> str:
    """Compile one direction of a rule to an egglog ``rule`` command.

    With ``provenance`` the rule also records, for every operator application of its right-hand sides, a
    row ``(prov_<op> args... "rule") = iteration`` (the iteration read from the ``cur_iter`` counter the
    engine sets before each iteration; see :func:`declarations`). The query gains one atom on a one-row
    table, so the matches are the same.
    """
    comp = _RuleCompiler()
    facts = [f"(= __r{k} {comp.term(parse(lhs))})" for k, lhs in enumerate(rule.lhs)]
    facts += [comp.condition(c) for c in rule.conditions]
    actions = [f"(pending __r{k} {comp.term(parse(rhs))})" for k, rhs in enumerate(rule.rhs)]
    rows = {_prov_row(comp.term(t), rule.name, "__it"): None for rhs in rule.rhs for t in _subterms(parse(rhs))} \
        if provenance else {}
    if rows:  # (a rule whose right-hand sides are variables builds nothing)
        facts.append(f"(= __it ({_ITER}))")
        actions += list(rows)
    facts += [f"(= {s} (shape {comp.var(v)}))" for v, s in comp.shape_vars.items()]
    # a dimension read must exist: a matrix rule matching a rank-1 tensor would make vec-get fail in the
    # actions, which aborts the whole run; in the query the guard just rejects the match
    facts += [f"(< {index} (vec-length {shape}))" for shape, index in comp.dims]
    ruleset = "multi" if rule.multi else "rw"
    return f"(rule ({' '.join(facts)}) ({' '.join(actions)}) :ruleset {ruleset} :name {json.dumps(rule.name)})"


def compile_rules(rules: Iterable[Rule], provenance: bool = False) -> list[str]:
    """Compile every direction of every rule, deduplicated by text (egglog panics on duplicates); with
    ``provenance`` each records the e-nodes it builds (:func:`compile_rule`), deduplicated as without."""
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
            out.append(compile_rule(d, provenance=True) if provenance else text)
    return out


# ---------------------------------------------------------------------------------------------------------
# graph


@dataclass
class CompiledGraph:
    """The egglog text of a graph plus the mapping between tensors and egglog globals."""

    text: str
    tensor_of_global: dict[str, str]
    output_globals: list[str]


def compile_graph(graph: Graph, provenance: bool = False) -> CompiledGraph:
    """One ``let`` per tensor, with the shapes of leaves and opaque outputs given as facts; with
    ``provenance`` the terms of the n-way sibling merges get provenance rows of iteration 0 by
    :data:`SIBLING_MERGE` (the input graph's own terms get none: the dump finds them by walking the graph)."""
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
    for k, (members, (axes, split_axis)) in enumerate(sibling_groups(graph)):
        # the n-way merge as an alternative (pairwise two-output rules would need n-1 rounds and grow the
        # e-graph quadratically); it goes through the shape check like any rewrite
        first = members[0]
        spec = first.spec
        built: list[str] = []  # the terms the merge builds, children first
        stacked = []
        for j, axis in enumerate(axes, start=1):
            acc = g[members[0].inputs[j]]
            for m in members[1:]:
                acc = f"(concat {axis} {acc} {g[m.inputs[j]]})"
                built.append(acc)
            stacked.append(acc)
        params = [_lit(first.p[name], kind) for name, kind in spec.params]
        merged = f"({spec.name} {' '.join(params + [g[first.inputs[0]]] + stacked)})"
        lines.append(f"(let $merge{k} {merged})")
        built.append(merged)
        start = 0
        for m in members:
            size = shapes[m.output][split_axis]
            split = f"(split {split_axis} {start} {size} $merge{k})"
            lines.append(f"(pending {g[m.output]} {split})")
            built.append(split)
            start += size
        if provenance:
            lines += [_prov_row(t, SIBLING_MERGE, "0") for t in dict.fromkeys(built)]
    return CompiledGraph("\n".join(lines), {v: k for k, v in g.items()}, [g[o] for o in graph.outputs])


def sibling_groups(graph: Graph, min_size: int = 3) -> list[tuple[list[Node], tuple[tuple[int, ...], int]]]:
    """Nodes that share their first input and merge into one (the registry's ``sibling_merge``), in groups of
    at least ``min_size`` (pairs are the two-output rules' job), each with its merge plan."""
    shapes = graph.shapes
    groups: dict[tuple[Any, ...], list[Node]] = {}
    # the same computation of the same tensors is one e-class in the e-graph (three projections importing
    # their own reshape of one activation share it): group by structure, not by tensor name
    same: dict[str, Any] = {}
    ids: dict[tuple[Any, ...], int] = {}  # hash-consing: a structure is an int, never a nested tuple
    for n in graph.nodes:
        if n.op == "opaque":
            same[n.output] = n.output
        else:
            key = (n.op, n.params, tuple(same.get(i, i) for i in n.inputs))
            same[n.output] = ids.setdefault(key, len(ids))
    for n in graph.nodes:
        spec = n.spec
        plan = spec.sibling_merge(n.p, [shapes[i] for i in n.inputs]) if spec.sibling_merge else None
        if plan is None:
            continue
        axes, _ = plan
        rest = tuple(tuple(d for a, d in enumerate(shapes[i]) if a != axis)
                     for i, axis in zip(n.inputs[1:], axes, strict=True))
        groups.setdefault((n.op, n.params, same.get(n.inputs[0], n.inputs[0]), plan, rest), []).append(n)
    return [(members, key[3]) for key, members in groups.items() if len(members) >= min_size]


# ---------------------------------------------------------------------------------------------------------
# saturation


@dataclass
class Limits:
    """Bounds on saturation. The engine stops at the first one reached, keeping the e-graph so far.

    All of them hold during an iteration, not only between iterations: a rule is applied only when all its
    matches fit in what is left of the node, memory and time budgets (see :func:`_saturate_in_process`).
    Invalid values (negative, NaN, infinite, fractional counts) raise :class:`LimitError`, a ValueError naming
    the limit and what it allows.
    """

    iter_limit: int = 10
    node_limit: int = 50_000  # e-nodes; the input graph itself is never cut, even when it is larger
    time_limit: float = 30.0  # seconds of saturation, from the call to the serialized e-graph; 0 runs no iteration
    multi_iters: int = 1  # iterations in which two-output rules run (they feed on their own output)
    memory_limit_mb: int = 8192

    def __post_init__(self) -> None:
        self.iter_limit = _whole("iter_limit", self.iter_limit, 0, "iterations")
        self.node_limit = _whole("node_limit", self.node_limit, 1, "e-nodes")
        self.time_limit = check_seconds("time_limit", self.time_limit, allow_zero=True)
        self.multi_iters = _whole("multi_iters", self.multi_iters, 0, "iterations")
        self.memory_limit_mb = _whole("memory_limit_mb", self.memory_limit_mb, 1, "MiB")


def _whole(name: str, value: Any, minimum: int, unit: str) -> int:
    ok = (isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
          and value == int(value) and value >= minimum)
    if not ok:
        raise LimitError(f"{name} must be a whole number of {unit} >= {minimum}, got {value!r}")
    return int(value)


def check_seconds(name: str, value: Any, *, allow_zero: bool = False) -> float:
    """Return ``value`` as seconds, or raise :class:`LimitError` (a ValueError) naming ``name`` if it is not a
    finite number greater than zero (or equal to zero with ``allow_zero``)."""
    ok = (isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
          and (value >= 0 if allow_zero else value > 0))
    if not ok:
        kind = "a finite, non-negative" if allow_zero else "a finite, positive"
        raise LimitError(f"{name} must be {kind} number of seconds, got {value!r}")
    return float(value)


class StopReason(enum.StrEnum):
    """Why saturation stopped; ``str()`` is the readable form reports print ("node limit")."""

    SATURATED = "saturated"
    ITERATION_LIMIT = "iteration limit"
    NODE_LIMIT = "node limit"
    TIME_LIMIT = "time limit"
    MEMORY_LIMIT = "memory limit"


@dataclass
class IterationStats:
    """What one saturation iteration did (a last iteration cut short by a limit counts, with what it did)."""

    iteration: int
    enodes: int
    eclasses: int
    seconds: float
    matches: dict[str, int]


@dataclass
class SaturationResult:
    """The saturated e-graph (:class:`~eqsat.engine.egraph.EGraph`) with the run report."""

    egraph: EGraph
    iterations: list[IterationStats]
    stop_reason: StopReason
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


@dataclass(frozen=True)
class _Step:
    """One rule direction in a ruleset of its own, so that it can be applied (or not) on its own."""

    ruleset: str
    rule: str
    multi: bool
    size: int  # operator applications in its right-hand sides: the most e-nodes one match can add


# which limit to name when several keep a rule from being applied (the e-graph being full comes first)
_REASON_ORDER = [StopReason.NODE_LIMIT, StopReason.MEMORY_LIMIT, StopReason.TIME_LIMIT]
_CHUNK = "\n;;CHUNK\n"
_RULES = "\n;;RULES\n"  # separates the graph from the rules in a program
_GRAPH_CHUNK = 500  # lines per graph chunk: egglog parses one big block of global lets superlinearly (3.8 s vs 0.2 s)

# The engine's costs per e-node, measured on 2 cores (ewadd chain under assoc/comm, shared-weight matmul chain),
# rounded up: adding one (rule actions, rebuild, shape rules) 20-40 us; serializing one at the end (egglog JSON,
# Python dicts, the pipe) 22-35 us; address space of the e-graph plus its serialization peak 1.5-3 KB. They turn
# the time and memory limits into e-node allowances, and time into the reserve kept for finishing.
_SECONDS_PER_NEW_ENODE = 40e-6
_SECONDS_PER_ENODE_OUT = 35e-6
_BYTES_PER_ENODE = 4096
_FINISH_SECONDS = 0.05  # fixed part of the last shape saturation, serialization and transfer
# With provenance (measured, same machine: built-in models, 0.5-28 k e-nodes) an e-node costs about 1.3x to add
# (the rows its rules write), 2-3x to serialize (2-3 rows per e-node go through egglog's JSON) and 1.4x the memory
_PROVENANCE_NEW, _PROVENANCE_OUT, _PROVENANCE_BYTES = 1.35, 2.0, 1.5


def _sizes(eg: Any, b: Any = None) -> tuple[int, int]:
    (out,) = eg.run_program(*eg.parse_program("(print-size)"))
    sizes = dict(out.sizes)
    skip = {"shape", "pending", "TNil", "TCons", _ITER}  # and the provenance rows: bookkeeping, not e-nodes
    enodes = sum(v for k, v in sizes.items() if k not in skip and not k.startswith(_PROV_PREFIX))
    return enodes, sizes.get("shape", 0)


def _matches(report: Any) -> dict[str, int]:
    return {str(k): int(v) for k, v in report.num_matches_per_rule.items()}


def _found(report: Any, rule: str) -> int:
    """Matches a rule found, applied or not (``num_matches_per_rule`` counts only applied ones). A scheduled
    run that applies matches reports its search twice, hence the largest per-iteration count."""
    return max((sum(r.num_matches for r in it.rule_set_report.rule_reports.get(rule, ())) for it in report.iterations),
               default=0)


def _vm_bytes() -> int | None:
    """Address space of this process: what RLIMIT_AS (the memory limit of the engine process) counts."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):  # pragma: no cover - platform without /proc
        return None


class _Budget:
    """How many more e-nodes the node, time and memory limits allow, and which of them binds."""

    def __init__(self, limits: Limits, deadline: float, memory_base: int | None, provenance: bool = False) -> None:
        self.node_limit = limits.node_limit
        self.deadline = deadline
        self.memory_end = None if memory_base is None else memory_base + limits.memory_limit_mb * 1024 * 1024
        self.per_new = _SECONDS_PER_NEW_ENODE * (_PROVENANCE_NEW if provenance else 1)
        self.per_out = _SECONDS_PER_ENODE_OUT * (_PROVENANCE_OUT if provenance else 1)
        self.per_bytes = _BYTES_PER_ENODE * (_PROVENANCE_BYTES if provenance else 1)

    def finish_seconds(self, enodes: int) -> float:
        return _FINISH_SECONDS + self.per_out * enodes

    def out_of(self, enodes: int, pending: int) -> StopReason | None:
        """The limit already reached with ``enodes`` in the e-graph, ``pending`` of them without shapes yet."""
        if enodes >= self.node_limit:
            return StopReason.NODE_LIMIT
        if time.perf_counter() + self.finish_seconds(enodes) + self.per_new * pending >= self.deadline:
            return StopReason.TIME_LIMIT
        vm = _vm_bytes()
        if self.memory_end is not None and vm is not None and vm + self.per_bytes * enodes >= self.memory_end:
            return StopReason.MEMORY_LIMIT
        return None

    def allowance(self, enodes: int, pending: int) -> _Allowance:
        """E-nodes the next rules may add under each limit."""
        left = self.deadline - time.perf_counter() - self.finish_seconds(enodes) - self.per_new * pending
        out = {StopReason.NODE_LIMIT: self.node_limit - enodes,
               StopReason.TIME_LIMIT: int(left / (self.per_new + self.per_out))}
        vm = _vm_bytes()
        if self.memory_end is not None and vm is not None:
            out[StopReason.MEMORY_LIMIT] = int((self.memory_end - vm) / self.per_bytes) - enodes
        return _Allowance({k: max(0, v) for k, v in out.items()})


class _Allowance(dict[StopReason, int]):
    """E-nodes allowed by each limit (:class:`StopReason` -> e-nodes)."""

    @property
    def nodes(self) -> int:
        return min(self.values())

    def blocking(self, need: int) -> StopReason:
        """The limit to name for holding back a rule that would add ``need`` e-nodes: the node limit if it
        alone forbids it, then memory, then time."""
        return next((r for r in _REASON_ORDER if self.get(r, need) < need), StopReason.TIME_LIMIT)


@dataclass
class _Progress:
    """One iteration so far: e-nodes now, how many of them have no shape yet, whether a rule ran, matches."""

    now: int
    pending: int = 0
    ran: bool = False
    matches: dict[str, int] = field(default_factory=dict)


def _serialize(eg: Any, b: Any, roots: list[str]) -> EGraph:
    ser = eg.serialize([b.Var(b.PanicSpan(), r) for r in roots])
    return clean_serialized(json.loads(ser.to_json()))


def _saturate_in_process(program: str, steps: Sequence[_Step], roots: list[str], limits: Limits,
                         report: Callable[[str, Any], None], *, deadline: float | None = None,
                         memory_base: int | None = None, snapshot: bool = False, provenance: bool = False) -> None:
    """Load ``program`` and saturate it, reporting ``("iter", IterationStats)`` after each iteration and
    ``("done", (egraph, StopReason))`` at the end (``("snapshot", egraph)`` after iteration 0 with ``snapshot``).

    Every rule has a ruleset of its own. An iteration runs them in groups, under a back-off scheduler whose
    match limit is the number of e-nodes the limits still allow divided by the most e-nodes the group's
    rules can add per match: a rule with more matches is not applied at all (banned for that call), so the
    e-graph cannot grow past the node limit. A rule banned only for the group's share is retried alone with
    the whole allowance; one that does not fit then is held back (and its search skipped while it still
    would not fit). The time and memory limits become e-node allowances the same way, and all limits are
    checked between calls. Whatever stops an iteration, the shapes ruleset is saturated afterwards, so the
    e-graph serialized has only shape-checked merges. A rule held back by a limit makes that limit the stop
    reason when nothing else changes any more.

    With ``provenance`` (a program compiled with it) the ``cur_iter`` counter is set to each iteration's number
    before its rules run, so the provenance rows the rules write carry it.
    """
    from egglog import bindings as b

    t_start = time.perf_counter()
    deadline = t_start + limits.time_limit if deadline is None else deadline
    budget = _Budget(limits, deadline, _vm_bytes() if memory_base is None else memory_base, provenance)
    eg = b.EGraph()

    def run(text: str) -> Any:
        return eg.run_program(*eg.parse_program(text))

    graph_part, _, rules_part = program.partition(_RULES)
    for chunk in graph_part.split(_CHUNK):
        run(chunk)
    run("(run-schedule (saturate (run shapes)))")
    enodes, classes = _sizes(eg)
    report("iter", IterationStats(0, enodes, classes, time.perf_counter() - t_start, {}))
    reason = StopReason.ITERATION_LIMIT if limits.iter_limit == 0 else budget.out_of(enodes, 0)
    first = None
    if reason is None and snapshot:  # the fallback if this process is killed or dies later
        first = _serialize(eg, b, roots)
        report("snapshot", first)
    # rules are loaded after the graph (egglog plans a query with the table sizes it sees, issue #866), and
    # not at all when a limit is already reached
    for chunk in rules_part.split(_CHUNK) if reason is None else ():
        if chunk:
            run(chunk)
        reason = budget.out_of(enodes, 0)
        if reason is not None:
            break
    changed = False
    held: dict[str, tuple[int, StopReason]] = {}  # rules held back by a limit -> (their matches, the limit)
    groups = [g for kind in (False, True) for g in _groups([st for st in steps if st.multi == kind])]

    def apply(it: _Progress, todo: list[_Step], cap: int) -> list[tuple[_Step, int]]:
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
            run(f"(set ({_ITER}) {i})")
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
            report("iter", IterationStats(i, new_enodes, new_classes, time.perf_counter() - t0, it.matches))
            changed = True
        else:
            new_enodes, new_classes = enodes, classes
        if stop is not None:
            reason = stop
            break
        if new_enodes == enodes and new_classes == classes:
            # nothing changed: saturated, unless a limit kept rules with matches from being applied (multi rules
            # held back in their iterations count too: they do not run again)
            reason = min((w for _, w in held.values()), key=_REASON_ORDER.index) if held else StopReason.SATURATED
            break
        enodes, classes = new_enodes, new_classes
    reason = reason or StopReason.ITERATION_LIMIT
    log.debug("saturation stopped (%s) after %.2f s", reason, time.perf_counter() - t_start)
    report("done", (first if first is not None and not changed else _serialize(eg, b, roots), reason))


def _groups(steps: list[_Step], size: int = 16) -> list[list[_Step]]:
    """Rules are run a group per egglog call (one call per rule costs ~0.5 ms each, 0.2 s an iteration)."""
    return [steps[k:k + size] for k in range(0, len(steps), size)]




def _explain(e: BaseException) -> str:
    msg = f"{type(e).__name__}: {e}"
    if "Illegal merge" in msg and "shape" in msg:
        return ("shape conflict: two tensors with different shapes ended up in one e-class. This is an eqsat bug "
                f"(a rule or shape rule is wrong); please report it with the model. egglog said: {msg}")
    return msg


def _child_main(conn: Any, program: str, steps: Sequence[_Step], roots: list[str], limits: Limits,
                deadline: float, provenance: bool = False) -> None:
    # the memory limit is on what the engine adds to what the forked process already maps
    mapped = _vm_bytes()
    if mapped is not None:
        try:
            resource.setrlimit(resource.RLIMIT_AS, (mapped + limits.memory_limit_mb * 1024 * 1024,
                                                    resource.RLIM_INFINITY))
        except (ValueError, OSError):  # pragma: no cover - platform without RLIMIT_AS
            pass
    try:
        _saturate_in_process(program, steps, roots, limits, lambda kind, payload: conn.send((kind, payload)),
                             deadline=deadline, memory_base=mapped, snapshot=True, provenance=provenance)
    except MemoryError:
        conn.send(("error", "memory limit"))
    except BaseException as e:  # egglog errors (and Rust panics) cross the process boundary as text
        conn.send(("error", _explain(e)))
    finally:
        conn.close()


def _term_size(e: Sexp) -> int:
    """Operator applications in a pattern (parameters are primitives, not e-nodes)."""
    if not isinstance(e, list):
        return 0
    _, _, ins = split_args(e)
    return 1 + sum(_term_size(x) for x in ins)


def _build_program(graph: Graph, rules: Sequence[Rule], provenance: bool = False
                   ) -> tuple[str, CompiledGraph, list[_Step]]:
    cg = compile_graph(graph, provenance)
    directions = {d.name: d for r in rules for d in r.directions()}
    steps: list[_Step] = []
    rule_texts: list[str] = []
    for text in compile_rules(rules, provenance):
        body, tail = text.rsplit(" :ruleset ", 1)  # compile_rule ends a rule with ':ruleset K :name "N")'
        kind, name = tail.split(" :name ", 1)
        rule = json.loads(name.removesuffix(")"))
        ruleset = f"step{len(steps)}"
        size = sum(_term_size(parse(x)) for x in directions[rule].rhs)
        steps.append(_Step(ruleset, rule, kind == "multi", max(1, size)))
        rule_texts.append(f"(ruleset {ruleset})\n{body} :ruleset {ruleset} :name {name}")
    graph_lines = cg.text.split("\n") if cg.text else []
    # provenance tables only for the operators some rule (or sibling merge) builds
    used = set(_PROV_ROW.findall(cg.text)).union(*(_PROV_ROW.findall(t) for t in rule_texts)) if provenance else False
    graph_chunks = [declarations(used)] + ["\n".join(graph_lines[i:i + _GRAPH_CHUNK])
                                        for i in range(0, len(graph_lines), _GRAPH_CHUNK)]
    # rules in small batches (one big batch costs extra memory)
    rule_chunks = ["\n".join(rule_texts[i:i + 20]) for i in range(0, len(rule_texts), 20)]
    return _CHUNK.join(graph_chunks) + _RULES + _CHUNK.join(rule_chunks), cg, steps


def build_program(graph: Graph, rules: Sequence[Rule], provenance: bool = False) -> tuple[str, CompiledGraph]:
    """The whole egglog program: declarations and graph, a ';;RULES' line, then the rules, each part in text
    chunks joined by ';;CHUNK' lines.

    Each rule direction gets a ruleset of its own (``step0``, ``step1``, ...) so saturation can apply or hold
    back each one separately. With ``provenance`` the program records which rule built each e-node in which
    iteration (:func:`compile_rule`).
    """
    program, cg, _ = _build_program(graph, rules, provenance)
    return program, cg


def saturate(graph: Graph, rules: Sequence[Rule], limits: Limits | None = None, *,
             progress: Callable[[IterationStats], None] | None = None, in_process: bool = False,
             provenance: bool = False) -> SaturationResult:
    """Saturate ``graph`` under ``rules`` and return the serialized e-graph.

    The limits hold during iterations (see :func:`_saturate_in_process`): the e-graph returned has at most
    ``node_limit`` e-nodes (unless the input graph alone has more), and the call returns within
    ``time_limit`` seconds plus a small margin. The engine runs in a child process with a memory limit; as a
    last resort, if that process overruns the time limit by more than a margin (a single rule's search is
    still unbounded) it is killed, and if it dies, the e-graph of iteration 0 (the input graph with its shapes,
    sent by the child before loading the rules) is returned with the limit as the stop reason. Loading the
    graph itself is not cut short: without it there is no e-graph to return.

    With ``provenance`` the e-graph's nodes also carry ``rules``: (rule, the first iteration in which that rule
    built the node) pairs (:func:`clean_serialized`); the e-graph is otherwise the same.
    """
    limits = limits or Limits()
    t0 = time.perf_counter()
    deadline = t0 + limits.time_limit
    program, cg, steps = _build_program(graph, rules, provenance)

    def result(egraph: EGraph, iters: list[IterationStats], reason: StopReason) -> SaturationResult:
        return SaturationResult(egraph, iters, reason, time.perf_counter() - t0, program, cg.tensor_of_global)

    if in_process:
        msgs: list[tuple[str, Any]] = []

        def rep(kind: str, payload: Any) -> None:
            msgs.append((kind, payload))
            if kind == "iter" and progress:
                progress(payload)

        try:
            _saturate_in_process(program, steps, cg.output_globals, limits, rep, deadline=deadline,
                                 provenance=provenance)
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # a Rust panic is a BaseException
            raise EngineError(_explain(e)) from e
        iters = [p for k, p in msgs if k == "iter"]
        egraph, reason = msgs[-1][1]
        return result(egraph, iters, reason)

    # the child stops itself before the deadline; past the margin (an estimate was off, or one rule's search
    # ran long) it is killed. The caller's later stages absorb the margin (optimize gives extraction what is left)
    margin = 0.5 + 0.2 * limits.time_limit
    iters, snapshot, done, failure = _run_child(program, steps, cg.output_globals, limits, progress,
                                                deadline=deadline, kill_at=deadline + margin, provenance=provenance)
    if done is not None:
        return result(done[0], iters, done[1])
    if snapshot is None or not iters:
        raise EngineError(f"e-graph engine failed before the first iteration: {failure[1]}")
    log.warning("e-graph engine stopped (%s); keeping the e-graph of iteration 0", failure[1])
    return result(snapshot, iters[:1], failure[0])


def _run_child(program: str, steps: Sequence[_Step], roots: list[str], limits: Limits,
               progress: Callable[[IterationStats], None] | None, deadline: float, kill_at: float,
               provenance: bool = False
               ) -> tuple[list[IterationStats], EGraph | None, tuple[EGraph, StopReason] | None,
                          tuple[StopReason, str]]:
    """Run the engine in a forked child; return (iterations, iteration-0 snapshot, result, failure)."""
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child_main, args=(child, program, steps, roots, limits, deadline, provenance),
                       daemon=True)
    proc.start()
    child.close()
    iters: list[IterationStats] = []
    snapshot = None

    def died() -> tuple[StopReason, str]:
        proc.join(1)
        return StopReason.MEMORY_LIMIT, f"engine process died (exit code {proc.exitcode}; likely the memory limit)"

    try:
        while True:
            # before its snapshot the child is loading the graph (bounded work) and there is nothing to fall back on
            remaining = kill_at - time.perf_counter() if snapshot is not None else 0.25
            if remaining <= 0:
                return iters, snapshot, None, (StopReason.TIME_LIMIT, "time limit (a rule did not finish in time)")
            if not parent.poll(min(remaining, 0.25)):
                if not proc.is_alive() and not parent.poll(0):
                    return iters, snapshot, None, died()
                continue
            try:
                kind, payload = parent.recv()
            except EOFError:
                return iters, snapshot, None, died()
            if kind == "iter":
                iters.append(payload)
                if progress:
                    progress(payload)
            elif kind == "snapshot":
                snapshot = payload
            elif kind == "done":
                return iters, snapshot, payload, (StopReason.SATURATED, "")
            elif str(payload).startswith("memory"):
                return iters, snapshot, None, (StopReason.MEMORY_LIMIT, str(payload))
            else:
                raise EngineError(payload)
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        parent.close()


# ---------------------------------------------------------------------------------------------------------
# serialization


def _primitive_value(node: dict[str, Any], nodes: dict[str, Any]) -> Any:
    op = node["op"]
    if op in ("vec-of", "vec-empty"):
        return tuple(_primitive_value(nodes[c], nodes) for c in node["children"])
    if op.startswith('"'):
        return json.loads(op)
    return int(op)


def clean_serialized(raw: dict[str, Any]) -> EGraph:
    """Reduce egglog's serialized JSON to an :class:`~eqsat.engine.egraph.EGraph` of tensor (``T``) and list
    (``TList``) e-classes. This is the only function that reads egglog's JSON.

    Each kept node gets ``op``, ``params`` (named, decoded), ``children`` (T/TList e-classes), ``eclass`` and a
    zero ``cost`` (costs are assigned later, :meth:`EGraph.with_costs`); e-classes have ``type``, for tensors
    ``shape``, and the egglog globals naming them (``lets``). Tensor classes without a shape (ill-shaped
    right-hand sides that were never merged) are dropped.

    For a program compiled with provenance (it has the ``cur_iter`` counter) the e-graph has ``provenance`` set
    and each node's ``rules``: {rule name: the first iteration in which that rule built the node} as pairs, read
    from the ``prov_<op>`` rows (:func:`provenance_rows`); rows are not e-nodes and are not kept.
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
        keep[nid] = {"op": op, "params": params, "children": kids, "eclass": n["eclass"]}
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
    recorded = any(n["op"] == _ITER for n in nodes.values())
    provenance = provenance_rows(nodes, keep, prim_of_class) if recorded else {}
    roots = [str(c) for c in raw.get("root_eclasses", [])]
    missing = [r for r in roots if r not in alive_classes]
    if missing:
        raise EngineError(f"root e-classes lost their shape (engine bug): {missing}")
    raw_classes = raw.get("class_data", {})
    classes = {c: EClass(c, ctype[c], tuple(shape_of[c]) if ctype[c] == "T" else None,
                         tuple(g for g in (x.strip() for x in str(raw_classes[c].get("let") or "").split(",")) if g))
               for c in alive_classes}
    enodes = [ENode(nid, n["op"], tuple(n["params"].items()), tuple(n["children"]), n["eclass"], 0.0,
                    sorted_rules(provenance.get(nid, {}))) for nid, n in keep.items()]
    return EGraph.build(enodes, classes, roots, recorded)


def provenance_rows(nodes: Mapping[str, Any], keep: Iterable[str], values: Mapping[str, Any]
                    ) -> dict[str, dict[str, int]]:
    """Node id -> {rule: first iteration} for the ``keep`` nodes of egglog's serialized JSON ``nodes``, from
    its ``prov_<op>`` rows (:func:`compile_rule`); ``values`` maps primitive e-classes to their values.

    After saturation a row's arguments are canonical (egglog rebuilds function tables), and the serializer
    writes e-nodes and rows with the same child e-classes (primitives are one class per value), so a row names
    the e-node with its operator and child e-classes. Rows of nodes not kept (ill-shaped right-hand sides
    never merged) are skipped.
    """
    index: dict[tuple[str, tuple[str, ...]], str] = {}
    for nid in keep:
        n = nodes[nid]
        index.setdefault((n["op"], tuple(nodes[c]["eclass"] for c in n["children"])), nid)
    out: dict[str, dict[str, int]] = {}
    for n in nodes.values():
        op = n["op"]
        if not op.startswith(_PROV_PREFIX):
            continue
        kids = n["children"]
        nid = index.get((op[len(_PROV_PREFIX):], tuple(nodes[c]["eclass"] for c in kids[:-1])))
        rule, iteration = values.get(nodes[kids[-1]]["eclass"]), values.get(n["eclass"])
        if nid is not None and isinstance(rule, str) and isinstance(iteration, int):
            rules = out.setdefault(nid, {})
            rules[rule] = min(rules.get(rule, iteration), iteration)
    return out


# ---------------------------------------------------------------------------------------------------------
# costs and reading an extraction back


def weight_only_classes(egraph: EGraph) -> set[str]:
    """E-classes equal to a constant: a Weight, or computed by some node from weight-only classes."""
    wo: set[str] = set()
    changed = True
    while changed:
        changed = False
        for n in egraph.nodes:
            c = n.eclass
            if c in wo or n.op in ("Input", "opaque") or egraph.eclass(c).type != "T":
                continue
            # a Weight, a constant leaf (no tensor inputs, e.g. const_pool), or work on weight-only classes
            if n.op == "Weight" or all(k in wo for k in n.children):
                wo.add(c)
                changed = True
    return wo


def node_cost_keys(egraph: EGraph) -> dict[str, tuple[ops.CostKey, ...]]:
    """Cost keys of every node (what it runs as once exported); none for nodes that cost nothing (leaves,
    lists, weight-only work)."""
    wo = weight_only_classes(egraph)
    keys: dict[str, tuple[ops.CostKey, ...]] = {}
    for n in egraph.nodes:
        kids = n.children
        if n.op in ("Input", "Weight", "TNil", "TCons") or n.eclass in wo and all(k in wo for k in kids):
            keys[n.id] = ()
            continue
        in_shapes = [] if n.op == "opaque" else [egraph.shape(k) for k in kids]  # opaque: a TList child
        keys[n.id] = ops.get(n.op).cost_keys(n.p, in_shapes, egraph.shape(n.eclass),
                                             weights=[i for i, k in enumerate(kids) if k in wo])
    return keys


def selection_to_graph(egraph: EGraph, selection: Mapping[str, str], original: Graph,
                       tensor_of_class: Mapping[str, str] | None = None, *, flatten: bool = True) -> Graph:
    """Build the IR graph chosen by an extraction (``selection``: e-class -> node id).

    Graph inputs, weights, output names and opaque nodes are taken from ``original``. Intermediate tensors
    keep a name from ``tensor_of_class`` where one is known. With ``flatten``, chains of binary concats
    (the e-graph's form) become n-ary concats (:func:`flatten_concats`).
    """
    nodes = egraph.node
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
            n = nodes(selection[cls])
            if n.op == "TNil":
                return out
            head, tail = n.children
            out.append(visit(head))
            cls = tail

    out_names = {}
    for cls, name in zip(egraph.roots, original.outputs, strict=True):
        out_names.setdefault(cls, name)

    def visit(cls: str) -> str:
        # iterative would be nicer for very deep graphs; the recursion limit is raised by the caller
        if cls in names:
            return names[cls]
        n = nodes(selection[cls])
        op, p = n.op, n.p
        if op in ("Input", "Weight"):
            names[cls] = p["name"]
            return names[cls]
        if op == "opaque":
            orig = opaque[(p["key"], p["index"])]
            ins = list_items(n.children[0])
            name = out_names.get(cls) or fresh(cls)
            used.add(name)
            names[cls] = name
            ir.append(Node("opaque", orig.params, tuple(ins), name))
            return name
        ins = [visit(k) for k in n.children]
        name = out_names.get(cls) or fresh(cls)
        used.add(name)
        names[cls] = name
        ir.append(make_node(op, p, ins, name))
        return name

    import sys

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 20 * egraph.num_nodes + 1000))
    try:
        for cls in egraph.roots:
            visit(cls)
    finally:
        sys.setrecursionlimit(old)
    outputs = []
    for cls, name in zip(egraph.roots, original.outputs, strict=True):
        t = names[cls]
        if t != name:  # an output shared with another output, or a leaf: an identity keeps its name
            shape = egraph.shape(cls)
            ir.append(make_node("reshape", {"shape": shape}, [t], name))
        outputs.append(name)
    weights = {k: v for k, v in original.weights.items()}
    graph = Graph(original.inputs, weights, tuple(ir), tuple(outputs), original.name, original.meta)
    return (flatten_concats(graph) if flatten else graph).live()


def graph_from_selection(egraph: EGraph, selection: Mapping[str, str], original: Graph,
                         tensor_names: Mapping[str, str]) -> tuple[Graph, Graph]:
    """The IR graph an extraction chose (``selection``: e-class -> node id of ``egraph``), as
    read back (binary concats, as the e-graph has them) and as written (n-ary concats, dead nodes dropped),
    both validated. Tensors keep their names from ``tensor_names`` (e-class -> name) where one is known."""
    extracted = selection_to_graph(egraph, selection, original, tensor_names, flatten=False).validate()
    return extracted, flatten_concats(extracted).live().validate()


def tensors_by_class(result: SaturationResult) -> dict[str, list[str]]:
    """Map e-classes to every tensor name of the input graph they hold (graph inputs, weights, intermediates,
    outputs), in the input graph's order.

    Each tensor is an egglog ``let`` global (:func:`compile_graph`); an e-class lists the globals naming it
    (``EClass.lets``). Globals that name no tensor (the links of an n-ary concat's binary chain, sibling merges)
    are skipped.
    """
    order = {g: k for k, g in enumerate(result.tensor_of_global)}  # creation order: inputs, weights, nodes
    out: dict[str, list[str]] = {}
    for c in result.egraph.classes:
        names = sorted((g for g in c.lets if g in order), key=order.__getitem__)
        if names:
            out[c.id] = [result.tensor_of_global[g] for g in names]
    return out


def tensor_names_by_class(result: SaturationResult) -> dict[str, str]:
    """Map e-classes to one original tensor name (the first, in the input graph's order), for readable output."""
    return {cls: names[0] for cls, names in tensors_by_class(result).items()}


@dataclass(frozen=True)
class InputTerms:
    """Where the input graph's terms are in an e-graph (see :func:`input_terms`).

    Attributes:
        nodes: ids of the e-nodes that are terms of the input graph: one per graph input, weight and node, the
            links of the binary chain an n-ary concat compiles to, and the ``TCons``/``TNil`` lists of opaque
            nodes' inputs.
        tensor_class: every tensor of the input graph -> its e-class.
        missing: tensors whose term is not in the e-graph (none for an e-graph :func:`saturate` returned for
            this graph; some when the e-graph comes from another model).
    """

    nodes: frozenset[str]
    tensor_class: Mapping[str, str]
    missing: tuple[str, ...]


def _canonical_param(value: Any, kind: str) -> Any:
    """A parameter as the serializer decodes it back from egglog (see :func:`_lit`, :func:`_decode_param`)."""
    if kind == "int":
        return int(value)
    if kind == "ints":
        return tuple(int(v) for v in value)
    if kind == "float":
        return float(value)
    return str(value)


def _term_key(value: Any) -> Any:
    """A parameter as a lookup key: arrays as tuples, floats by their text (so that NaN finds NaN)."""
    if isinstance(value, list | tuple):
        return tuple(_term_key(v) for v in value)
    return ("float", repr(value)) if isinstance(value, float) else value


def input_terms(egraph: EGraph, graph: Graph) -> InputTerms:
    """Find the input graph's terms in an e-graph (the engine's, or an e-graph dump's: ``EGraphDump.engine_graph``).

    The input graph is walked bottom-up, as :func:`compile_graph` writes it, looking each term up by its
    operator, parameters and child e-classes. An e-graph holds each such term once (congruence closure,
    and the serializer writes canonical e-nodes), so the lookup is exact whatever the rules merged later:
    the e-node found is the one egglog made from the input graph's ``let``.
    """
    index: dict[tuple[Any, ...], ENode] = {}
    for n in egraph.nodes:
        index.setdefault((n.op, _term_key(tuple(v for _, v in n.params)), n.children), n)
    found: set[str] = set()
    cls: dict[str, str] = {}
    missing: list[str] = []

    def look(op: str, params: tuple[Any, ...], kids: tuple[str, ...]) -> str | None:
        n = index.get((op, _term_key(params), kids))
        if n is None:
            return None
        found.add(n.id)
        return n.eclass

    for inp in graph.inputs:
        c = look("Input", (inp.name,), ())
        if c is None:
            missing.append(inp.name)
        else:
            cls[inp.name] = c
    for w in graph.weights:
        c = look("Weight", (w,), ())
        if c is None:
            missing.append(w)
        else:
            cls[w] = c
    for n in graph.nodes:
        if any(i not in cls for i in n.inputs):
            missing.append(n.output)
            continue
        kids = [cls[i] for i in n.inputs]
        p = n.p
        c: str | None
        if n.op == "opaque":
            c = look("TNil", (), ())
            for k in reversed(kids):
                c = None if c is None else look("TCons", (), (k, c))
            c = None if c is None else look("opaque", (str(p["key"]), int(p["index"])), (c,))
        else:
            spec = n.spec
            params = tuple(_canonical_param(p[name], kind) for name, kind in spec.params)
            if spec.variadic:  # the left-nested binary chain compile_graph writes
                c = kids[0]
                for k in kids[1:]:
                    c = None if c is None else look(spec.name, params, (c, k))
            else:
                c = look(spec.name, params, tuple(kids))
        if c is None:
            missing.append(n.output)
        else:
            cls[n.output] = c
    return InputTerms(frozenset(found), cls, tuple(missing))


def with_costs(egraph: EGraph, costs: Mapping[str, float]) -> EGraph:
    """A copy of an e-graph with node costs set from ``costs`` (node id -> cost; others keep theirs);
    :meth:`EGraph.with_costs`."""
    return egraph.with_costs(costs)


def _np_default(o: Any) -> Any:  # pragma: no cover - json helper
    if isinstance(o, np.integer):
        return int(o)
    raise TypeError(o)
