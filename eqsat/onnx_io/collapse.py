"""Fused operators' multi-node spellings collapsed before import: the registry's fusion patterns
(:mod:`eqsat.ops.fusion`, declared beside each operator) matched over a model's nodes, each match replaced by
its fusion's one node, which then imports through the registry's importers.

The matcher is generic: it knows the pattern language, not the operators. A pattern is matched backwards from a
candidate last node (every node whose type the pattern's tensor may have, last in graph order first, so a match
with its optional trailing nodes is found before the same match without them), trying alternatives and the two
operand orders of a commutative node by backtracking; a match counts only where

* each node is of the default domain and each tensor the pattern uses twice is one tensor;
* every tensor it computes but the last is read only by its own nodes (subgraphs' reads included) and is no
  graph output, and no node of it has a further output that is read;
* no variable is bound to a tensor it computes, and it shares no node with a match already taken;
* the fusion's check accepts it and its replacement can be written.

Each fusion runs over the whole graph in registration order (a fusion whose pattern is part of another's is
registered after it). This module reads protos; it names no operator.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
from onnx import NodeProto, helper

from eqsat.onnx_io.protos import attr_dict, has_subgraph, outer_names
from eqsat.ops import OnnxNode, Shape
from eqsat.ops.fusion import (
    FUSIONS,
    Const,
    ConstVar,
    Fusion,
    OneOf,
    Op,
    Pattern,
    Var,
    required_op_types,
    root_op_types,
)

#: a new constant for a replacement: (array, name hint) -> the name it is stored under
AddConst = Callable[[np.ndarray, str], str]
ShapeOf = Callable[[str], Shape | None]

_DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclass
class Collapsed:
    """One collapsed match: the node that replaces it and the nodes it replaces (in graph order)."""

    node: NodeProto
    originals: list[NodeProto]


class _Node:
    """A node as the matcher reads it: its fields copied out of the proto once (reading protos is slow)."""

    __slots__ = ("proto", "op_type", "inputs", "outputs", "order")

    def __init__(self, proto: NodeProto, order: int) -> None:
        self.proto = proto
        # another domain's node never matches: a pattern names default-domain operators
        self.op_type = proto.op_type if proto.domain in _DEFAULT_DOMAINS else ""
        self.inputs = tuple(proto.input)
        self.outputs = tuple(proto.output)
        self.order = order


@dataclass(frozen=True)
class _State:
    """A partial match: what each pattern object, variable and named node is bound to, and the nodes so far."""

    tensors: Mapping[int, str]  # id of an Op pattern -> the tensor it matched
    names: Mapping[str, str]  # Var / ConstVar name -> tensor
    nodes: Mapping[str, _Node]  # Op name -> node
    members: Mapping[int, _Node]  # id(node) -> node, the root first


_EMPTY = _State({}, {}, {}, {})

#: the default domain's operators with graph attributes (any other domain's node is looked at)
_CONTROL_FLOW = frozenset({"If", "Loop", "Scan", "SequenceMap"})


class _Index:
    """A node list with who computes and who reads each tensor (subgraphs' reads of the scope around them
    included), kept up to date as matches collapse."""

    def __init__(self, nodes: Sequence[NodeProto]) -> None:
        self.nodes = [_Node(n, k) for k, n in enumerate(nodes)]
        self.producer: dict[str, _Node] = {}
        self.readers: Counter[str] = Counter()
        for n in self.nodes:
            self._add(n)

    def _add(self, n: _Node, sign: int = 1) -> None:
        for o in n.outputs:
            if o and sign > 0:
                self.producer[o] = n
            elif o:
                del self.producer[o]
        for i in n.inputs:
            if i:
                self.readers[i] += sign
        if (n.proto.op_type in _CONTROL_FLOW or not n.op_type) and has_subgraph(n.proto):
            for i in outer_names(n.proto):
                self.readers[i] += sign

    def replace(self, found: Mapping[int, tuple[list[_Node], Collapsed]]) -> None:
        """Each match's nodes (keyed by ``id()`` of its last one) replaced by its collapsed node, in that place."""
        gone = {id(m) for _, c in found.values() for m in c.originals}
        kept: list[_Node] = []
        for n in self.nodes:
            if id(n.proto) in found:
                members, c = found[id(n.proto)]
                for m in members:
                    self._add(m, -1)
                new = _Node(c.node, n.order)
                self._add(new)
                kept.append(new)
            elif id(n.proto) not in gone:
                kept.append(n)
        self.nodes = kept

    def op_types(self) -> set[str]:
        return {n.op_type for n in self.nodes}


class _Matcher:
    """Enumerates the matches of a pattern at a tensor over one node list, by backtracking."""

    def __init__(self, index: _Index, consts: Mapping[str, np.ndarray], rtol: float = 0.0) -> None:
        self.producer = index.producer
        self.consts = consts
        self.rtol = rtol  # the least relative tolerance of a constant (a half-precision model's are rounded)

    def match(self, p: Pattern, t: str, s: _State) -> Iterator[_State]:
        if isinstance(p, Op):
            yield from self._node(p, t, s)
        elif isinstance(p, OneOf):
            seen = s.tensors.get(id(p))
            if seen is not None:  # alternatives used twice are one tensor too, whichever option matched it
                if seen == t:
                    yield s
                return
            for option in p.options:
                for matched in self.match(option, t, s):
                    yield _State({**matched.tensors, id(p): t}, matched.names, matched.nodes, matched.members)
        elif isinstance(p, Const):
            c = self.consts.get(t)
            if c is not None and c.size == 1 and c.dtype.kind in p.kinds \
                    and bool(np.isclose(float(c.reshape(-1)[0]), p.value, rtol=max(p.rtol, self.rtol), atol=0.0)):
                yield s
        elif isinstance(p, ConstVar):
            c = self.consts.get(t)
            if c is not None and c.dtype.kind in p.kinds and (c.size == 1 or not p.scalar):
                yield from _bind(p.name, t, s)
        elif isinstance(p, Var) and t:
            yield from _bind(p.name, t, s)

    def _node(self, p: Op, t: str, s: _State) -> Iterator[_State]:
        seen = s.tensors.get(id(p))
        if seen is not None:  # a pattern object used twice is one tensor
            if seen == t:
                yield s
            return
        n = self.producer.get(t)
        k = len(p.inputs)
        if n is None or n.op_type != p.op_type or n.outputs[0] != t \
                or not (len(n.inputs) == k or (p.other_inputs and len(n.inputs) > k)):
            return
        if p.attrs:
            attrs = attr_dict(n.proto)
            if any(attrs.get(a) != v for a, v in p.attrs.items()):
                return
        s = _State({**s.tensors, id(p): t}, s.names, {**s.nodes, p.name: n} if p.name else s.nodes,
                   {**s.members, id(n): n})
        ins = n.inputs[:k]
        yield from self._all(p.inputs, ins, s)
        if p.commutes and ins[0] != ins[1]:
            yield from self._all(p.inputs, ins[::-1], s)

    def _all(self, patterns: Sequence[Pattern], tensors: Sequence[str], s: _State) -> Iterator[_State]:
        if not patterns:
            yield s
            return
        for first in self.match(patterns[0], tensors[0], s):
            yield from self._all(patterns[1:], tensors[1:], first)


def _bind(name: str, t: str, s: _State) -> Iterator[_State]:
    bound = s.names.get(name)
    if bound is None:
        yield _State(s.tensors, {**s.names, name: t}, s.nodes, s.members)
    elif bound == t:
        yield s


class _Match:
    """A complete match as a fusion's check and replacement see it (:class:`eqsat.ops.fusion.FusionMatch`)."""

    def __init__(self, state: _State, output: str, consts: Mapping[str, np.ndarray], shape_of: ShapeOf,
                 is_float: Callable[[str], bool], add_const: AddConst | None) -> None:
        self.output = output
        self._state = state
        self._consts = consts
        self._shape_of = shape_of
        self._is_float = is_float
        self._add_const = add_const

    def tensor(self, name: str) -> str | None:
        return self._state.names.get(name)

    def node(self, name: str) -> OnnxNode | None:
        n = self._state.nodes.get(name)
        return None if n is None else (n.op_type, list(n.inputs), list(n.outputs), attr_dict(n.proto))

    def const(self, tensor: str) -> np.ndarray | None:
        return self._consts.get(tensor)

    def shape(self, tensor: str) -> Shape | None:
        return self._shape_of(tensor)

    def is_float(self, tensor: str) -> bool:
        return self._is_float(tensor)

    def add_const(self, array: np.ndarray, hint: str) -> str | None:
        return None if self._add_const is None else self._add_const(array, hint)


def _self_contained(s: _State, root: _Node, index: _Index, outputs: set[str]) -> bool:
    """Every tensor the match computes but the last is read by its own nodes alone and is no graph output, no
    further output of its nodes is read, no variable is one of its tensors, and its last node comes last."""
    members = s.members.values()
    for n in members:
        for o in n.outputs[1:]:
            if o and (index.readers[o] or o in outputs):
                return False
        if n is root:
            continue
        o = n.outputs[0]
        if o in outputs or n.order > root.order or index.readers[o] != sum(m.inputs.count(o) for m in members):
            return False
    computed = {n.outputs[0] for n in members}
    return not any(t in computed for t in s.names.values())


@cache
def _op_types(fusion: Fusion) -> tuple[frozenset[str], frozenset[str]]:
    """The op types every match of the fusion has, and those its last node may have."""
    return required_op_types(fusion.pattern), root_op_types(fusion.pattern)


def _collapse_one(fusion: Fusion, index: _Index, consts: Mapping[str, np.ndarray], outputs: set[str],
                  shape_of: ShapeOf, is_float: Callable[[str], bool], add_const: AddConst | None,
                  precision: Callable[[str], str] | None = None, const_rtol: float = 0.0
                  ) -> dict[int, tuple[list[_Node], Collapsed]]:
    """The matches of one fusion, keyed by ``id()`` of each match's last node: its nodes and its collapse."""
    roots = _op_types(fusion)[1]
    matcher = _Matcher(index, consts, const_rtol)
    taken: set[int] = set()
    found: dict[int, tuple[list[_Node], Collapsed]] = {}
    for root in reversed(index.nodes):  # a match with its optional last nodes before the same match without them
        if root.op_type not in roots or id(root) in taken:
            continue
        for s in matcher.match(fusion.pattern, root.outputs[0], _EMPTY):
            if any(i in taken for i in s.members) or not _self_contained(s, root, index, outputs):
                continue
            if precision is not None and any(n.op_type == "Cast" and precision(n.inputs[0]) != precision(n.outputs[0])
                                             for n in s.members.values()):
                continue  # a change of precision is no copy: it bounds the regions a mixed-precision model computes in
            m = _Match(s, root.outputs[0], consts, shape_of, is_float, add_const)
            if not fusion.check(m):
                continue
            replacement = fusion.replacement(m)
            if replacement is None:
                continue
            op_type, ins, outs, attrs = replacement
            node = helper.make_node(op_type, ins, outs, name=(root.proto.name or fusion.op) + "_collapsed", **attrs)
            members = sorted(s.members.values(), key=lambda n: n.order)
            found[id(root.proto)] = (members, Collapsed(node, [n.proto for n in members]))
            taken.update(s.members)
            break
    return found


def collapse_fusions(nodes: Sequence[NodeProto], consts: Mapping[str, np.ndarray], outputs: set[str],
                     shape_of: ShapeOf, is_float: Callable[[str], bool], add_const: AddConst | None = None,
                     fusions: Iterable[Fusion] | None = None, precision: Callable[[str], str] | None = None,
                     const_rtol: float = 0.0) -> tuple[list[NodeProto], dict[int, Collapsed]]:
    """Replace each match of a fusion in ``nodes`` (in graph order) by the fusion's one node.

    ``consts`` are the known constant tensors, ``outputs`` the graph outputs; ``shape_of`` / ``is_float``
    answer for a tensor; ``add_const`` stores a new constant a replacement needs (without it, such a match is not
    collapsed); ``fusions`` defaults to the registry's (:data:`eqsat.ops.fusion.FUSIONS`), in order; ``precision``
    gives a mixed-precision model's tensors their precision as given, and no match then holds a ``Cast`` that
    changes it (:mod:`eqsat.onnx_io.precision`); ``const_rtol`` is the least relative tolerance a fusion's
    constants match within (a half-precision model's constants are the nearest values of its type). Returns
    the new node list and, keyed by ``id()`` of each new node, what it replaced.
    """
    index = _Index(nodes)
    present = index.op_types()
    collapsed: dict[int, Collapsed] = {}
    for fusion in FUSIONS.values() if fusions is None else fusions:
        if not _op_types(fusion)[0] <= present:  # cheap: most models hold no spelling of most fusions
            continue
        found = _collapse_one(fusion, index, consts, outputs, shape_of, is_float, add_const, precision, const_rtol)
        if found:
            index.replace(found)  # the next fusion reads the collapsed nodes
            collapsed.update((id(c.node), c) for _, c in found.values())
            present = index.op_types()
    return [n.proto for n in index.nodes], collapsed
