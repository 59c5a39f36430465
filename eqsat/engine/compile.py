"""Compiling to egglog: the operator registry, an IR graph and a rule set become one egglog program.

The registry gives the declarations (sorts, one constructor per operator, the shape analysis as egglog rules,
the rulesets); each tensor of the graph becomes a ``let``; each rule direction becomes an egglog ``rule`` in a
ruleset of its own, so that saturation (:mod:`eqsat.engine.saturation`) can apply or hold back each one.

Soundness of shapes: a rewrite never unions directly. Its right-hand side is recorded in the ``pending``
relation and merged by the ``shapes`` ruleset only once the registry's shape rules have given it a shape
equal to the left-hand side's; ill-shaped right-hand sides stay unmerged (and without a shape), and the
serializer drops them.

With provenance the program also records which rule built each e-node in which iteration: a ``prov_<op>`` row
per term a rule's right-hand side builds, valued with the ``cur_iter`` counter (:func:`compile_rule`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from eqsat import ops
from eqsat.engine.errors import EngineError
from eqsat.ir.graph import Alternative, Graph
from eqsat.ir.passes import sibling_groups
from eqsat.ir.rule import ARITHMETIC, Rule, RuleError, Sexp, Vec, is_var, param_vars, parse, split_args
from eqsat.ops import shapes

__all__ = ["SIBLING_MERGE", "PROVENANCE_PREFIX", "ITERATION_COUNTER", "CompiledGraph", "RuleStep", "declarations",
           "compile_rule", "compile_rules", "compile_graph", "sibling_groups", "compile_program", "build_program",
           "split_program", "egglog_params", "pattern_ops", "reachable_ops"]

_SORTS = {"int": "i64", "ints": "IVec", "float": "String", "str": "String", "any": "String"}
_ARITH = set(ARITHMETIC)  # egglog's i64 has them all (/ and % truncate; sizes are not negative)


# ---------------------------------------------------------------------------------------------------------
# literals


def _lit(value: Any, kind: str) -> str:
    if kind == "int":
        return str(int(value))
    if kind == "ints":
        return f"(vec-of {' '.join(str(int(v)) for v in value)})" if len(value) else "(vec-empty)"
    return json.dumps(repr(value) if kind == "float" else str(value))



# ---------------------------------------------------------------------------------------------------------
# declarations


def egglog_params(spec: ops.OpSpec) -> list[tuple[str, str]]:
    """The parameters of an operator's egglog constructor, (name, kind) in order: the registry's, or for
    ``opaque`` its key and output index (the rest of an opaque node stays in the IR)."""
    return [(n, k) for n, k in spec.params] if not spec.opaque else [("key", "str"), ("index", "int")]


def _egglog_inputs(spec: ops.OpSpec) -> list[str]:
    if spec.opaque:
        return []
    return ["a", "b"] if spec.variadic else list(spec.inputs)


#: the rule name provenance rows give the n-way sibling merges :func:`compile_graph` adds before iteration 1
SIBLING_MERGE = "sibling-merge"
#: egglog tables of the provenance record (``prov_<op>`` rows and the ``cur_iter`` counter), not e-nodes
PROVENANCE_PREFIX = "prov_"
ITERATION_COUNTER = "cur_iter"


_PROV_ROW = re.compile(r"\(set \(" + PROVENANCE_PREFIX + r"([^\s()]+) ")


def declarations(provenance: bool | Iterable[str] = False, operators: Iterable[str] | None = None) -> str:
    """egglog declarations derived from the registry: sorts, constructors, shape analysis, rulesets; with
    ``provenance`` also the provenance record (:func:`compile_rule`): its tables for every operator but
    ``opaque`` (which no rule builds), or for the operators named (each table costs memory). With
    ``operators`` the shape rules are those of these operators only (:func:`reachable_ops`: the others never
    get an e-node); every constructor is declared either way."""
    lines = ["(sort IVec (Vec i64))", "(sort TList)", "(datatype T", "  (Input String)", "  (Weight String)"]
    for spec in ops.REGISTRY.values():
        sorts = [_SORTS[k] for _, k in egglog_params(spec)] + ["T"] * len(_egglog_inputs(spec))
        if spec.opaque:
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
    wanted = None if operators is None else set(operators)
    for spec in ops.REGISTRY.values():
        if wanted is None or spec.name in wanted:
            lines += _shape_rules(spec)
    if provenance is not False:  # True, or the operators to record (maybe none)
        # one row per e-node a rule's right-hand side builds, keyed like the constructor plus the rule's name,
        # valued with the first iteration it did so (egglog canonicalises the tensor arguments, so after
        # rebuilding a row names one e-node; rows that become equal keep the smallest iteration)
        lines.append(f"(function {ITERATION_COUNTER} () i64 :merge (max old new))")
        lines.append(f"(set ({ITERATION_COUNTER}) 0)")
        names = set(provenance) if not isinstance(provenance, bool) else \
            {name for name, spec in ops.REGISTRY.items() if not spec.opaque}
        for spec in (spec for spec in ops.REGISTRY.values() if spec.name in names):
            sorts = [_SORTS[k] for _, k in egglog_params(spec)] + ["T"] * len(_egglog_inputs(spec))
            lines.append(f"(function {PROVENANCE_PREFIX}{spec.name} ({' '.join(sorts + ['String'])}) i64 "
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
    params = [n for n, _ in egglog_params(spec)]
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
    def __init__(self, params: frozenset[str] = frozenset()) -> None:
        #: the parameter variables the left-hand sides bind: ``(dim ?s i)`` of one reads the tuple itself
        self.params = params
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
        if kind == "str" and isinstance(e, str):  # a name (a cast's precision)
            return _lit(e, "str")
        return self.expr(e)

    def expr(self, e: Sexp) -> str:
        if is_var(e) or isinstance(e, int):
            return self.var(e) if is_var(e) else str(e)
        if isinstance(e, Vec):  # a tuple compared with a shape parameter in a condition
            return f"(vec-of {' '.join(self.expr(i) for i in e.items)})" if e.items else "(vec-empty)"
        if isinstance(e, list):
            head = e[0]
            if head == "dim":
                shape = self.var(e[1]) if e[1] in self.params else self.shape_of(e[1])
                index = self.expr(e[2])
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
    return f"(set ({PROVENANCE_PREFIX}{term[1:-1]} {json.dumps(rule)}) {iteration})"


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
    comp = _RuleCompiler(frozenset().union(*(param_vars(parse(lhs)) for lhs in rule.lhs)))
    facts = [f"(= __r{k} {comp.term(parse(lhs))})" for k, lhs in enumerate(rule.lhs)]
    facts += [comp.condition(c) for c in rule.conditions]
    actions = [f"(pending __r{k} {comp.term(parse(rhs))})" for k, rhs in enumerate(rule.rhs)]
    rows = {_prov_row(comp.term(t), rule.name, "__it"): None for rhs in rule.rhs for t in _subterms(parse(rhs))} \
        if provenance else {}
    if rows:  # (a rule whose right-hand sides are variables builds nothing)
        facts.append(f"(= __it ({ITERATION_COUNTER}))")
        actions += list(rows)
    facts += [f"(= {s} (shape {comp.var(v)}))" for v, s in comp.shape_vars.items()]
    # a dimension read must exist: a matrix rule matching a rank-1 tensor would make vec-get fail in the
    # actions, which aborts the whole run; in the query the guard just rejects the match
    facts += [f"(< {index} (vec-length {shape}))" for shape, index in comp.dims]
    ruleset = "multi" if rule.multi else "rw"
    return f"(rule ({' '.join(facts)}) ({' '.join(actions)}) :ruleset {ruleset} :name {json.dumps(rule.name)})"


_OPERATOR = re.compile(r"\(([A-Za-z_]\w*)")


def pattern_ops(pattern: str) -> frozenset[str]:
    """The registry operators a rule pattern applies: the names that open a parenthesis in its text
    (parameter expressions open with ``+``, ``-``, ``*`` or ``compose``, which are no operators)."""
    return frozenset(name for name in _OPERATOR.findall(pattern) if name in ops.REGISTRY)


def _direction_ops(d: Rule) -> tuple[frozenset[str], frozenset[str]]:
    return frozenset().union(*map(pattern_ops, d.lhs)), frozenset().union(*map(pattern_ops, d.rhs))


def reachable_ops(graph: Graph, rules: Iterable[Rule], alternatives: Iterable[Alternative] = ()) -> frozenset[str]:
    """Every operator an e-graph of ``graph`` can hold under ``rules``: the graph's own, with the concats and
    splits of n-way sibling merges, then those of the right-hand sides of every rule direction whose
    left-hand sides apply only operators already there, until none is added. A direction whose left-hand
    side applies any other operator can never match, and no e-node of another operator is ever built, so
    neither those rules nor those operators' shape rules need loading (about 60 % of the default rules on
    TASO's BERT). The operators of ``alternatives`` (:func:`compile_graph`) are there from the start."""
    reach = {n.op for n in graph.nodes} | {name for name, spec in ops.REGISTRY.items() if spec.glue}
    reach |= {n.op for a in alternatives for n in a.nodes}
    todo = [_direction_ops(d) for r in rules for d in r.directions()]
    grew = True
    while grew:
        grew = False
        rest = []
        for lhs, rhs in todo:
            if lhs <= reach:
                grew |= not rhs <= reach
                reach |= rhs
            else:
                rest.append((lhs, rhs))
        todo = rest
    return frozenset(reach)


def compile_rules(rules: Iterable[Rule], provenance: bool = False,
                  operators: frozenset[str] | None = None) -> list[str]:
    """Compile every direction of every rule, deduplicated by text (egglog panics on duplicates); with
    ``provenance`` each records the e-nodes it builds (:func:`compile_rule`), deduplicated as without. With
    ``operators`` (:func:`reachable_ops`) a direction whose left-hand sides apply another operator is left
    out: it could never match."""
    seen: set[str] = set()
    names: set[str] = set()
    out = []
    for r in rules:
        for d in r.directions():
            if operators is not None and not _direction_ops(d)[0] <= operators:
                continue
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


def compile_graph(graph: Graph, provenance: bool = False, alternatives: Sequence[Alternative] = ()) -> CompiledGraph:
    """One ``let`` per tensor, with the shapes of leaves and opaque outputs given as facts; with
    ``provenance`` the terms of the n-way sibling merges get provenance rows of iteration 0 by
    :data:`SIBLING_MERGE` (the input graph's own terms get none: the dump finds them by walking the graph).
    Each of ``alternatives`` is added as another computation of its tensor, merged like a rule's right-hand side
    once its shape is the tensor's, with provenance rows of iteration 0 by its name."""
    shapes = graph.shapes
    g: dict[str, str] = {}
    lines: list[str] = []

    def new_global(tensor: str) -> str:
        # "_" ends every name: egglog 13.2 can resolve a global whose name another one's extends ($g61 after $g6)
        # to the shorter one inside a term, putting the wrong e-class in it
        name = f"$g{len(g)}_"
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
        if n.is_opaque:
            lst = "(TNil)"
            for i in reversed(n.inputs):
                lst = f"(TCons {g[i]} {lst})"
            term = f"({n.op} {json.dumps(p['key'])} {p['index']} {lst})"
        else:
            args = [_lit(p[name], kind) for name, kind in spec.params]
            ins = [g[i] for i in n.inputs]
            if spec.variadic:  # n-ary concat -> left-nested binary chain
                acc = ins[0]
                for k, x in enumerate(ins[1:]):
                    if k < len(ins) - 2:
                        tmp = f"$c{len(lines)}_"
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
        if n.is_opaque:
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
    for k, alt in enumerate(alternatives):
        local: dict[str, str] = {}
        built = []
        for j, n in enumerate(alt.nodes):
            args = [_lit(n.p[name], kind) for name, kind in n.spec.params]
            ins = [local.get(i) or g[i] for i in n.inputs]
            term = f"({n.op} {' '.join(args + ins)})"
            if n.spec.variadic:  # n-ary concat -> left-nested binary chain, as above
                term = ins[0]
                for x in ins[1:]:
                    term = f"({n.op} {' '.join(args)} {term} {x})"
                    built.append(term)
            else:
                built.append(term)
            if j < len(alt.nodes) - 1:
                local[n.output] = f"$alt{k}_{j}_"
                lines.append(f"(let {local[n.output]} {term})")
            else:
                lines.append(f"(pending {g[alt.tensor]} {term})")
        if provenance:  # a row names its children by e-class: the lets' globals stand for them
            lines += [_prov_row(t, alt.name, "0") for t in dict.fromkeys(built)]
    return CompiledGraph("\n".join(lines), {v: k for k, v in g.items()}, [g[o] for o in graph.outputs])




# ---------------------------------------------------------------------------------------------------------
# the program

_CHUNK = "\n;;CHUNK\n"
_RULES = "\n;;RULES\n"  # separates the graph from the rules in a program
_GRAPH_CHUNK = 500  # lines per graph chunk: egglog parses one big block of global lets superlinearly (3.8 s vs 0.2 s)


@dataclass(frozen=True)
class RuleStep:
    """One rule direction in a ruleset of its own, so that it can be applied (or not) on its own."""

    ruleset: str
    rule: str
    multi: bool
    size: int  # operator applications in its right-hand sides: the most e-nodes one match can add


def _term_size(e: Sexp) -> int:
    """Operator applications in a pattern (parameters are primitives, not e-nodes)."""
    if not isinstance(e, list):
        return 0
    _, _, ins = split_args(e)
    return 1 + sum(_term_size(x) for x in ins)


def compile_program(graph: Graph, rules: Sequence[Rule], provenance: bool = False,
                    operators: frozenset[str] | None = None,
                    alternatives: Sequence[Alternative] = ()) -> tuple[str, CompiledGraph, list[RuleStep]]:
    """The program of :func:`build_program`, with the rule steps in order (one per ruleset ``step<k>``).
    ``operators`` is :func:`reachable_ops` of the graph, rules and alternatives, when the caller has it already;
    ``alternatives`` go to :func:`compile_graph`."""
    cg = compile_graph(graph, provenance, alternatives)
    operators = reachable_ops(graph, rules, alternatives) if operators is None else operators
    directions = {d.name: d for r in rules for d in r.directions()}
    steps: list[RuleStep] = []
    rule_texts: list[str] = []
    for text in compile_rules(rules, provenance, operators):
        body, tail = text.rsplit(" :ruleset ", 1)  # compile_rule ends a rule with ':ruleset K :name "N")'
        kind, name = tail.split(" :name ", 1)
        rule = json.loads(name.removesuffix(")"))
        ruleset = f"step{len(steps)}"
        size = sum(_term_size(parse(x)) for x in directions[rule].rhs)
        steps.append(RuleStep(ruleset, rule, kind == "multi", max(1, size)))
        rule_texts.append(f"(ruleset {ruleset})\n{body} :ruleset {ruleset} :name {name}")
    graph_lines = cg.text.split("\n") if cg.text else []
    # provenance tables only for the operators some rule (or sibling merge) builds
    used = set(_PROV_ROW.findall(cg.text)).union(*(_PROV_ROW.findall(t) for t in rule_texts)) if provenance else False
    graph_chunks = [declarations(used, operators)] + ["\n".join(graph_lines[i:i + _GRAPH_CHUNK])
                                        for i in range(0, len(graph_lines), _GRAPH_CHUNK)]
    # rules in small batches (one big batch costs extra memory)
    rule_chunks = ["\n".join(rule_texts[i:i + 20]) for i in range(0, len(rule_texts), 20)]
    return _CHUNK.join(graph_chunks) + _RULES + _CHUNK.join(rule_chunks), cg, steps


def build_program(graph: Graph, rules: Sequence[Rule], provenance: bool = False) -> tuple[str, CompiledGraph]:
    """The whole egglog program: declarations and graph, a ';;RULES' line, then the rules, each part in text
    chunks joined by ';;CHUNK' lines.

    Each rule direction gets a ruleset of its own (``step0``, ``step1``, ...) so saturation can apply or hold
    back each one separately. Directions that can never match this graph, and the shape rules of operators
    it can never hold, are left out (:func:`reachable_ops`). With ``provenance`` the program records which rule
    built each e-node in which iteration (:func:`compile_rule`).
    """
    program, cg, _ = compile_program(graph, rules, provenance)
    return program, cg


def split_program(program: str) -> tuple[list[str], list[str]]:
    """A program's text chunks to run in turn: (declarations and graph, rules)."""
    graph_part, _, rules_part = program.partition(_RULES)
    return graph_part.split(_CHUNK), rules_part.split(_CHUNK)
