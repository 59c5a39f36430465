"""Rules applied to IR graphs directly, one match at a time, as TASO's substitutions are (no e-graph).

This is what the first answer's descent (:mod:`eqsat.pipeline.descent`) and the backtracking and sampling
searches (:mod:`eqsat.search.searches`) are built on. A rule's left-hand
side is matched as a subgraph rooted at one node (two nodes for a two-output rule); parameters must equal the
pattern's literals and bind its variables consistently, and the rule's own conditions must hold. The
right-hand side is built with the registry's shape functions and must have the left-hand side's shape, the
same guard the e-graph engine applies before it merges a right-hand side, from the same two sources: the
rule's conditions and the registry. As in TASO, a match is applicable only when no node of the matched
subgraph other than its roots is used outside it; the matched nodes are removed and the roots' consumers read
the right-hand sides.

Concats are binary here, as in the e-graph and the rules: :func:`prepare` turns n-ary concats into left-nested
chains, and :func:`eqsat.ir.passes.flatten_concats` merges them back.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from eqsat.ir.graph import Graph, GraphError, Node, make_node, node_hashes
from eqsat.ir.names import NameAllocator
from eqsat.ir.rule import (
    Rule,
    RuleError,
    Sexp,
    Vec,
    check_condition,
    eval_param,
    is_var,
    parse,
    split_args,
    tensor_vars,
)
from eqsat.ops import OpError, Shape


@dataclass(frozen=True)
class CompiledRule:
    """One direction of a rule, parsed once for matching."""

    rule: Rule
    lhs: tuple[Sexp, ...]
    rhs: tuple[Sexp, ...]
    tensor_vars: frozenset[str]

    @property
    def name(self) -> str:
        """The rule's name (``-rev`` for a reversed direction)."""
        return self.rule.name

    @property
    def root_ops(self) -> tuple[str, ...]:
        """The operator at the root of each left-hand side."""
        return tuple(e[0] for e in self.lhs)


def compile_rules(rules: Sequence[Rule]) -> list[CompiledRule]:
    """Every direction of every rule whose left-hand sides are operator applications, deduplicated."""
    return [c for d in _directions(rules) if (c := _compile(d)) is not None]


def _directions(rules: Sequence[Rule]) -> list[Rule]:
    """Every direction of ``rules``, deduplicated by what it says (two rules may state one direction)."""
    out: dict[tuple[Any, ...], Rule] = {}
    for r in rules:
        for d in r.directions():
            out.setdefault((d.lhs, d.rhs, d.conditions), d)
    return list(out.values())


def _compile(d: Rule) -> CompiledRule | None:
    """One direction parsed for matching; None where a left-hand side is a bare variable (it matches
    everything, and such a rule only ever grows a graph)."""
    lhs = tuple(parse(s) for s in d.lhs)
    if not all(isinstance(e, list) for e in lhs):
        return None
    tvars = frozenset().union(*(tensor_vars(e) for e in lhs))
    return CompiledRule(d, lhs, tuple(parse(s) for s in d.rhs), tvars)


def _root_op(pattern: str) -> str | None:
    """The operator at the root of a pattern's text, read without parsing it (None: a bare variable)."""
    text = pattern.lstrip()
    return text[1:].split(None, 1)[0].rstrip(")") if text.startswith("(") else None


@dataclass(frozen=True)
class Match:
    """A place where a rule applies: its roots (tensors the left-hand sides compute), every matched node's
    output, and the bindings of its variables (tensor variables to tensor names, parameters to values)."""

    rule: CompiledRule
    roots: tuple[str, ...]
    nodes: frozenset[str]
    env: tuple[tuple[str, Any], ...]


def prepare(graph: Graph) -> Graph:
    """The graph with n-ary concats (variadic operators) as left-nested chains of binary ones (the rules' form, as
    the e-graph holds them), validated."""
    nodes: list[Node] = []
    names = name_allocator(graph)
    changed = False
    for n in graph.nodes:
        if not n.spec.variadic or len(n.inputs) <= 2:
            nodes.append(n)
            continue
        changed = True
        acc = n.inputs[0]
        for x in n.inputs[1:-1]:
            name = names.fresh(n.output + "_cat")
            nodes.append(Node(n.op, n.params, (acc, x), name))
            acc = name
        nodes.append(Node(n.op, n.params, (acc, n.inputs[-1]), n.output))
    if not changed:
        return graph.validate()
    return Graph(graph.inputs, graph.weights, tuple(nodes), graph.outputs, graph.name, graph.meta).validate()


def _content_name(content: tuple[Any, ...]) -> str:
    """A tensor name derived from what computes it (operator, parameters, input names): the same rewrite at
    the same place gets the same names whatever was applied before, so graphs reached in different orders
    are the same graph, and a computation made twice is shared."""
    return "_r" + hashlib.blake2b(repr(content).encode(), digest_size=8).hexdigest()


def name_allocator(graph: Graph) -> NameAllocator:
    """Fresh tensor names for rewrites of ``graph`` and the graphs derived from it: ``_r_0``, ``_r_1``, ... (one
    counter), never a name of ``graph``."""
    return NameAllocator(graph.shapes, numbered=True, start=0)


# ---------------------------------------------------------------------------------------------------------
# matching


class _Shapes:
    """Tensor variables as shape holders for rule conditions and parameter expressions: a zero-strided view
    of the tensor's shape (no memory), one object per tensor so ``(!= ?a ?b)`` compares tensors."""

    def __init__(self, shapes: Mapping[str, Shape]) -> None:
        self.shapes = shapes
        self.cache: dict[str, np.ndarray] = {}

    def __call__(self, tensor: str) -> np.ndarray:
        v = self.cache.get(tensor)
        if v is None:
            v = self.cache[tensor] = np.broadcast_to(np.zeros((), np.uint8), self.shapes[tensor])
        return v


def _unify_param(pat: Sexp, value: Any, env: dict[str, Any]) -> bool:
    if is_var(pat):
        if pat in env:
            return env[pat] == value
        env[pat] = value
        return True
    if isinstance(pat, int):
        return not isinstance(value, tuple) and value == pat
    if isinstance(pat, Vec):
        return (isinstance(value, tuple) and len(value) == len(pat.items)
                and all(_unify_param(p, v, env) for p, v in zip(pat.items, value, strict=True)))
    return False


def _match_term(pat: Sexp, tensor: str, graph: Graph, env: dict[str, Any], matched: list[str]) -> bool:
    if is_var(pat):
        if pat in env:
            return env[pat] == tensor
        env[pat] = tensor
        return True
    node = graph.producers.get(tensor)
    if node is None or node.op != pat[0]:
        return False
    spec, params, ins = split_args(pat)
    if len(node.inputs) != len(ins):
        return False
    values = dict(node.params)
    for (pname, _), p in zip(spec.params, params, strict=True):
        if not _unify_param(p, values[pname], env):
            return False
    matched.append(tensor)
    return all(_match_term(x, i, graph, env, matched) for x, i in zip(ins, node.inputs, strict=True))


class Matcher:
    """Finds the matches of a rule set in IR graphs (an index of the rules by root operator).

    A rule is parsed the first time a graph has a node of its root operator: a search's first match then
    waits for the rules of the operators it meets, not for the whole corpus (about 400 directions, 30-60 ms
    to parse on 2 cores)."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self._pending: dict[str, list[Rule]] = {}  # root operator -> directions not parsed yet
        for d in _directions(rules):
            op = _root_op(d.lhs[0])
            if op is not None:
                self._pending.setdefault(op, []).append(d)
        self._by_op: dict[str, list[CompiledRule]] = {}

    def rules_for(self, op: str) -> list[CompiledRule]:
        """The compiled rule directions whose first left-hand side is rooted at ``op``, in the rules' order."""
        compiled = self._by_op.get(op)
        if compiled is None:
            compiled = self._by_op[op] = [c for d in self._pending.pop(op, ()) if (c := _compile(d)) is not None]
        return compiled

    def matches(self, graph: Graph, roots: Sequence[str] | None = None) -> Iterator[Match]:
        """Every applicable match in ``graph`` (with ``roots``, only those whose first root is one of them)."""
        holders = _Shapes(graph.shapes)
        by_op = _nodes_by_op(graph)
        firsts = graph.nodes if roots is None else [graph.producers[r] for r in roots if r in graph.producers]
        for node in firsts:
            for rule in self.rules_for(node.op):
                env: dict[str, Any] = {}
                matched: list[str] = []
                if not _match_term(rule.lhs[0], node.output, graph, env, matched):
                    continue
                if len(rule.lhs) == 1:
                    m = _finish(rule, (node.output,), matched, env, graph, holders)
                    if m is not None:
                        yield m
                    continue
                for other in _second_roots(rule, env, graph, by_op):
                    if other.output == node.output:
                        continue
                    env2, matched2 = dict(env), list(matched)
                    if _match_term(rule.lhs[1], other.output, graph, env2, matched2):
                        m = _finish(rule, (node.output, other.output), matched2, env2, graph, holders)
                        if m is not None:
                            yield m


def _nodes_by_op(graph: Graph) -> dict[str, list[Node]]:
    """The graph's nodes by operator, in order (cached on the graph: a descent matches one root at a time)."""
    by_op = graph.__dict__.get("_by_op")
    if by_op is None:
        by_op = graph.__dict__["_by_op"] = {}
        for n in graph.nodes:
            by_op.setdefault(n.op, []).append(n)
    return by_op


def _second_roots(rule: CompiledRule, env: Mapping[str, Any], graph: Graph,
                  by_op: Mapping[str, list[Node]]) -> list[Node]:
    """Candidates for the second root: consumers of a tensor the first side already bound, when the second
    side reads one directly (two-output rules share an operand); else every node of its operator."""
    op = rule.root_ops[1]
    _, _, ins = split_args(rule.lhs[1])
    for x in ins:
        if is_var(x) and x in env:
            return [n for n in graph.consumers.get(env[x], []) if n.op == op]
    return by_op.get(op, [])


def _finish(rule: CompiledRule, roots: tuple[str, ...], matched: list[str], env: dict[str, Any], graph: Graph,
            holders: _Shapes) -> Match | None:
    nodes = frozenset(matched)
    if len(nodes) != len(matched):
        return None  # one node matched twice by different pattern positions: not a subgraph embedding
    if any(env[v] in nodes for v in rule.tensor_vars):
        return None  # a matched node also read through a variable: it is used outside the match
    outputs = set(graph.outputs)
    for t in nodes - set(roots):  # TASO: an inner node used outside the match cannot be removed
        if t in outputs or any(c.output not in nodes for c in graph.consumers.get(t, [])):
            return None
    cond_env = _condition_env(rule, env, holders)
    try:
        if not all(check_condition(c, cond_env) for c in rule.rule.conditions):
            return None
    except (IndexError, KeyError, RuleError, TypeError, ValueError):
        return None  # e.g. (dim ?x 3) of a matrix: the engine's guard rejects such a match too
    return Match(rule, roots, nodes, tuple(sorted(env.items())))


def _condition_env(rule: CompiledRule, env: Mapping[str, Any], holders: _Shapes) -> dict[str, Any]:
    """Bindings as conditions and parameter expressions read them: tensors as shape holders."""
    return {k: holders(v) if k in rule.tensor_vars else v for k, v in env.items()}


# ---------------------------------------------------------------------------------------------------------
# application


@dataclass(frozen=True)
class Rewrite:
    """The result of applying a match: the nodes it adds, the tensors it removes and how roots are renamed."""

    added: tuple[Node, ...]
    removed: frozenset[str]
    replace: tuple[tuple[str, str], ...]  # root tensor -> existing tensor that now stands for it
    shapes: tuple[tuple[str, Shape], ...] = ()  # of the added nodes
    roots: tuple[str, ...] = ()


class NotApplicable(Exception):
    """The right-hand side is ill-shaped for this match, or does not have the left-hand side's shape."""


def build_rewrite(match: Match, graph: Graph, names: NameAllocator) -> Rewrite:
    """The right-hand sides of ``match`` as new nodes; raises :class:`NotApplicable` when a shape guard fails.
    ``names`` (every tensor name in use, :func:`name_allocator`) makes fresh names; a root's own name is reused by
    the node that replaces it, so its consumers and graph outputs need no renaming."""
    env = dict(match.env)
    shapes = graph.shapes
    holders = _Shapes(shapes)
    pevals = _condition_env(match.rule, env, holders)
    added: list[Node] = []
    new_shapes: dict[str, Shape] = {}
    memo: dict[str, str] = {}
    made: set[str] = set()

    def shape_of(t: str) -> Shape:
        return new_shapes[t] if t in new_shapes else shapes[t]

    def build(e: Sexp, name: str | None) -> str:
        if is_var(e):
            return env[e]
        key = repr(e)
        if key in memo and name is None:
            return memo[key]
        spec, params, ins = split_args(e)
        args = [build(x, None) for x in ins]
        try:
            p = spec.normalize({n: eval_param(v, pevals) for (n, _), v in zip(spec.params, params, strict=True)})
            shape = spec.shape(p, [shape_of(a) for a in args])
        except (OpError, RuleError, IndexError, KeyError, TypeError, ValueError) as err:
            raise NotApplicable(str(err)) from None
        node = make_node(spec.name, p, args, name or "")
        if name is None:
            content = (node.op, node.params, node.inputs)
            name = _content_name(content)
            if name in made:  # the same computation twice in this right-hand side: once
                return name
            existing = graph.producers.get(name)
            if existing is not None and name not in match.nodes and (existing.op, existing.params,
                                                                      existing.inputs) == content:
                memo.setdefault(key, name)
                return name  # the graph already computes it (from an earlier rewrite): share it
            if name in shapes:  # the name stands for something else here (or for a node this rewrite removes)
                name = names.fresh("_r")
            node = Node(node.op, node.params, node.inputs, name)
        added.append(node)
        made.add(node.output)
        new_shapes[node.output] = shape
        memo.setdefault(key, node.output)
        return node.output

    replace: list[tuple[str, str]] = []
    for root, rhs in zip(match.roots, match.rule.rhs, strict=True):
        if is_var(rhs):
            t = env[rhs]
            if shapes[t] != shapes[root]:
                raise NotApplicable(f"{rhs} has shape {shapes[t]}, the left-hand side {shapes[root]}")
            replace.append((root, t))
            continue
        out = build(rhs, root)
        if new_shapes[out] != shapes[root]:
            raise NotApplicable(f"right-hand side has shape {new_shapes[out]}, the left-hand side {shapes[root]}")
    return Rewrite(tuple(added), match.nodes, tuple(replace), tuple(new_shapes.items()), match.roots)


def dead_after(graph: Graph, rw: Rewrite) -> frozenset[str]:
    """Tensors of ``graph`` that no output needs once ``rw`` is applied, besides the matched nodes."""
    rename = _renames(rw)
    outputs = set(graph.outputs)
    consumers = graph.consumers
    producers = graph.producers
    removed = set(rw.removed) - {n.output for n in rw.added}
    refs: dict[str, int] = {}  # change in uses
    for n in rw.added:
        for i in n.inputs:
            i = rename.get(i, i)
            refs[i] = refs.get(i, 0) + 1
    for root, t in rename.items():  # the root's remaining consumers (and output) now read t
        # (consumers lists a node once per input slot it reads the root in)
        refs[t] = refs.get(t, 0) + sum(1 for c in consumers.get(root, []) if c.output not in rw.removed) + (
            root in outputs)
    work = [n for n in rw.removed if n in producers]
    dead: set[str] = set()
    while work:
        t = work.pop()
        for i in producers[t].inputs:
            refs[i] = refs.get(i, 0) - 1
            if (i in producers and i not in outputs and i not in removed and i not in dead
                    and len(consumers.get(i, ())) + refs[i] <= 0):
                dead.add(i)
                work.append(i)
    return frozenset(dead)


def _renames(rw: Rewrite) -> dict[str, str]:
    rename = dict(rw.replace)
    while True:  # a root replaced by another replaced root (two-output rules)
        chained = {k: rename.get(v, v) for k, v in rename.items()}
        if chained == rename:
            return rename
        rename = chained


def _positions(graph: Graph) -> dict[str, int]:
    """Each node's index in the graph's order (cached on the graph; leaves are absent)."""
    pos = graph.__dict__.get("_positions")
    if pos is None:
        pos = graph.__dict__["_positions"] = {n.output: k for k, n in enumerate(graph.nodes)}
    return pos


def changed_nodes(graph: Graph, rw: Rewrite, dead: frozenset[str]) -> tuple[list[Node], list[Node]]:
    """(nodes of ``graph`` that applying ``rw`` removes or changes, the nodes that take their place), the
    latter in a valid order; the rest of the graph stays as it is."""
    rename = _renames(rw)
    gone = rw.removed | dead
    producers = graph.producers
    old = [producers[t] for t in gone]
    new = [Node(n.op, n.params, tuple(rename.get(i, i) for i in n.inputs), n.output) for n in rw.added]
    if rename:
        readers = {c.output: c for r in rename for c in graph.consumers.get(r, []) if c.output not in gone}
        for c in readers.values():
            old.append(c)
            new.append(Node(c.op, c.params, tuple(rename.get(i, i) for i in c.inputs), c.output))
        added_outputs = {n.output for n in rw.added}
        shapes = graph.shapes
        for o in dict.fromkeys(graph.outputs):
            if o in rename and o not in added_outputs:
                # a graph output keeps its name: an identity (a same-shape reshape, a view) names the tensor
                new.append(make_node("reshape", {"shape": shapes[o]}, [rename[o]], o))
    return old, new


def apply_rewrite(graph: Graph, rw: Rewrite, dead: frozenset[str] | None = None) -> Graph:
    """The graph with ``rw`` applied and the nodes it leaves dead removed (``dead``, from :func:`dead_after`,
    when the caller has it); raises :class:`NotApplicable` on a cycle.

    The new nodes go where the first root was. When everything they read comes before that place (always so
    for a one-root rewrite, whose right-hand side reads only what the matched subgraph read) the order stays
    topological and the shapes are the parent's, so there is no sort and no shape inference; otherwise the
    checked constructor sorts the nodes and finds cycles."""
    dead = dead_after(graph, rw) if dead is None else dead
    old, new = changed_nodes(graph, rw, dead)
    gone = rw.removed | dead
    pos = _positions(graph)
    first = min(pos[r] for r in rw.roots)
    added = new[:len(rw.added)]
    made = {n.output for n in added}
    in_place = all(pos.get(i, -1) < first for n in added for i in n.inputs if i not in made)
    changed = {n.output: n for n in new[len(rw.added):]}  # renamed readers and output identities
    nodes: list[Node] = []
    for k, n in enumerate(graph.nodes):
        if k == first:
            nodes.extend(added)
        if n.output in gone:
            continue
        nodes.append(changed.pop(n.output, n))
    nodes.extend(changed.values())  # output identities
    if not in_place:
        try:
            return Graph(graph.inputs, graph.weights, tuple(nodes), graph.outputs, graph.name, graph.meta)
        except GraphError as e:  # a two-output rule whose sides depend on each other closes a cycle
            raise NotApplicable(str(e)) from None
    shapes = graph.shapes
    new_shapes = {k: v for k, v in shapes.items() if k not in gone}
    new_shapes.update(rw.shapes)
    new_shapes.update((o, shapes[o]) for o in changed)
    return Graph.from_sorted(graph.inputs, graph.weights, tuple(nodes), graph.outputs, graph.name, graph.meta,
                             new_shapes)


def _structure(graph: Graph) -> dict[str, int]:
    """:func:`node_hashes`, cached on the graph."""
    sh = graph.__dict__.get("_structure")
    if sh is None:
        sh = graph.__dict__["_structure"] = node_hashes(graph)
    return sh


def structure_hash(graph: Graph) -> int:
    """A hash of a graph's structure: of the multiset of its nodes' structural hashes (:func:`node_hashes`),
    so equal for graphs that differ only in the names of computed tensors, and additive so a rewrite can
    update it (:func:`structure_hash_after`)."""
    return sum(_structure(graph).values()) & _MASK


def structure_hash_after(graph: Graph, ghash: int, rw: Rewrite, dead: frozenset[str]) -> int:
    """:func:`structure_hash` of the graph ``rw`` makes from ``graph`` (whose own is ``ghash``), recomputing
    only the nodes it changes and those downstream whose structure changes with them."""
    sh = _structure(graph)
    old, new = changed_nodes(graph, rw, dead)
    gone = rw.removed | dead
    total = ghash - sum(sh[n.output] for n in old)
    fresh: dict[str, int] = {}

    def of(t: str) -> int:
        v = fresh.get(t)
        return v if v is not None else sh.get(t) or hash(t)

    rename = _renames(rw)
    added = new[:len(rw.added)]
    readers = {n.output for n in new[len(rw.added):] if n.output in graph.producers and n.output not in gone}
    identities = [n for n in new[len(rw.added):] if n.output not in readers]
    for n in added:  # they read only tensors upstream of the match, or each other in order
        fresh[n.output] = hash((n.op, n.params, tuple(of(i) for i in n.inputs)))
        total += fresh[n.output]
    pos = _positions(graph)
    consumers = graph.consumers
    producers = graph.producers
    heap = [(pos[t], t) for t in readers]  # the renamed readers: hashed in order, as they may also read
    heapq.heapify(heap)                    # something that changes upstream of them
    queued = set(fresh) | readers

    def push_readers(t: str) -> None:
        for c in consumers.get(t, ()):
            if c.output not in gone and c.output not in queued:
                queued.add(c.output)
                heapq.heappush(heap, (pos[c.output], c.output))

    for n in added:
        if fresh[n.output] != sh.get(n.output):
            push_readers(n.output)
    while heap:
        _, t = heapq.heappop(heap)
        n = producers[t]
        v = fresh[t] = hash((n.op, n.params, tuple(of(rename.get(i, i)) for i in n.inputs)))
        total += v if t in readers else v - sh[t]  # a reader's old hash is already taken off
        if v != sh[t]:
            push_readers(t)
    for n in identities:
        total += hash((n.op, n.params, tuple(of(i) for i in n.inputs)))
    return total & _MASK


_MASK = (1 << 64) - 1


def rewrite(graph: Graph, match: Match, names: NameAllocator | None = None) -> Graph:
    """Apply one match to ``graph`` (convenience for tests and one-off use)."""
    return apply_rewrite(graph, build_rewrite(match, graph, name_allocator(graph) if names is None else names))
