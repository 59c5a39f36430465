"""ONNX-level pattern collapsing before import: multi-node spellings of one registry operator become that
operator's ONNX node, so they import as one IR node.

Exporters below opset 20 (which has ``Gelu``) write GELU out as element-wise nodes; BERT has one per layer:

* exact: ``x * 0.5 * (1 + erf(x / sqrt(2)))``: ``Div(x, 1.4142)`` (or ``Mul(x, 0.7071)``) -> ``Erf`` ->
  ``Add 1`` -> two ``Mul`` with ``x`` and ``0.5`` in any order and grouping;
* tanh: ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))``: ``Pow(x, 3)`` (or ``x * x * x``) ->
  ``Mul 0.044715`` -> ``Add x`` -> ``Mul 0.7979`` -> ``Tanh`` -> the same tail.

A match needs its constants numerically right (single-element constants, relative tolerance 1e-4), every
intermediate tensor read only inside the pattern and not a graph output, and the output of the shape of
``x``. :func:`collapse_gelu` replaces it with one ``Gelu`` node (``approximate`` ``none`` or ``tanh``) that
exists only on the way into the importer: :mod:`eqsat.onnx_io` imports it as one ``gelu``, and falls back to
the original nodes if that import fails. This module reads protos; it does not import the registry.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from onnx import NodeProto, helper

_RTOL = 1e-4
SQRT2 = math.sqrt(2.0)
TANH_SCALE = math.sqrt(2.0 / math.pi)
TANH_CUBIC = 0.044715


@dataclass
class Collapsed:
    """One collapsed pattern: the node that replaces it and the nodes it replaces (in graph order)."""

    node: NodeProto
    originals: list[NodeProto]


class _Graph:
    def __init__(self, nodes: Sequence[NodeProto], consts: Mapping[str, np.ndarray], outputs: set[str]) -> None:
        self.consts = consts
        self.outputs = outputs
        self.producer: dict[str, NodeProto] = {o: n for n in nodes for o in n.output if o}
        self.readers: Counter[str] = Counter(i for n in nodes for i in n.input if i)
        self.consumers: dict[str, list[NodeProto]] = {}
        for n in nodes:
            for i in n.input:
                if i:
                    self.consumers.setdefault(i, []).append(n)

    def is_const(self, name: str, value: float) -> bool:
        c = self.consts.get(name)
        if c is None or c.size != 1 or c.dtype.kind != "f":
            return False
        return bool(np.isclose(float(c.reshape(-1)[0]), value, rtol=_RTOL, atol=0.0))

    def private(self, name: str) -> bool:
        """Read by exactly one node and not a graph output: an intermediate of a pattern."""
        return self.readers[name] == 1 and name not in self.outputs

    def made_by(self, name: str, op_type: str) -> NodeProto | None:
        n = self.producer.get(name)
        return n if n is not None and n.op_type == op_type and n.domain in ("", "ai.onnx") else None

    def only_reader(self, name: str, op_type: str) -> NodeProto | None:
        if not self.private(name):
            return None
        n = self.consumers[name][0]
        return n if n.op_type == op_type and n.domain in ("", "ai.onnx") else None

    def times_const(self, node: NodeProto, value: float) -> str | None:
        """The other operand of ``Mul(t, c)`` / ``Mul(c, t)`` with ``c`` close to ``value``."""
        if node.op_type != "Mul" or len(node.input) != 2:
            return None
        a, b = node.input
        return a if self.is_const(b, value) else b if self.is_const(a, value) else None


def _exact_head(g: _Graph, act: NodeProto) -> tuple[str, list[NodeProto]] | None:
    """``Erf(x / sqrt 2)``: x and the nodes of the head (Erf included)."""
    (d,) = act.input
    if not g.private(d):
        return None
    div = g.made_by(d, "Div")
    if div is not None and len(div.input) == 2 and g.is_const(div.input[1], SQRT2):
        return div.input[0], [div, act]
    mul = g.made_by(d, "Mul")
    x = g.times_const(mul, 1.0 / SQRT2) if mul is not None else None
    return (x, [mul, act]) if x is not None and mul is not None else None


def _tanh_head(g: _Graph, act: NodeProto) -> tuple[str, list[NodeProto]] | None:
    """``Tanh(sqrt(2/pi) * (x + 0.044715 * x^3))``: x and the nodes of the head (Tanh included)."""
    (u,) = act.input
    scale = g.made_by(u, "Mul")
    s = g.times_const(scale, TANH_SCALE) if scale is not None and g.private(u) else None
    add = g.made_by(s, "Add") if s is not None and g.private(s) else None
    if add is None or len(add.input) != 2 or scale is None:
        return None
    for x, q in (add.input, add.input[::-1]):
        cubic = g.made_by(q, "Mul") if g.private(q) else None
        p = g.times_const(cubic, TANH_CUBIC) if cubic is not None else None
        if p is None or cubic is None or not g.private(p):
            continue
        cube = _cube_of(g, p, x)
        if cube is not None:
            return x, [*cube, cubic, add, scale, act]
    return None


def _cube_of(g: _Graph, p: str, x: str) -> list[NodeProto] | None:
    """The nodes computing ``p = x^3``: ``Pow(x, 3)``, or ``Mul`` of ``x`` and ``Mul(x, x)`` in any order."""
    pow_ = g.made_by(p, "Pow")
    if pow_ is not None:
        return [pow_] if len(pow_.input) == 2 and pow_.input[0] == x and g.is_const(pow_.input[1], 3.0) else None
    mul = g.made_by(p, "Mul")
    if mul is None or len(mul.input) != 2 or x not in mul.input:
        return None
    other = mul.input[1] if mul.input[0] == x else mul.input[0]
    sq = g.made_by(other, "Mul") if g.private(other) else None
    return [sq, mul] if sq is not None and list(sq.input) == [x, x] else None


def _tail(g: _Graph, act: NodeProto, x: str) -> tuple[str, list[NodeProto]] | None:
    """``0.5 * x * (1 + act)`` in any order: the output and the tail's nodes."""
    e = act.output[0]
    add = g.only_reader(e, "Add")
    if add is None or len(add.input) != 2:
        return None
    other = add.input[1] if add.input[0] == e else add.input[0]
    if not g.is_const(other, 1.0):
        return None
    a = add.output[0]
    m1 = g.only_reader(a, "Mul")
    if m1 is None or len(m1.input) != 2:
        return None
    o = m1.input[1] if m1.input[0] == a else m1.input[0]
    if o == x:  # (x * a) * 0.5
        m2 = g.only_reader(m1.output[0], "Mul")
        if m2 is not None and g.times_const(m2, 0.5) == m1.output[0]:
            return m2.output[0], [add, m1, m2]
    elif g.is_const(o, 0.5):  # x * (a * 0.5)
        m2 = g.only_reader(m1.output[0], "Mul")
        if m2 is not None and len(m2.input) == 2 and set(m2.input) == {x, m1.output[0]}:
            return m2.output[0], [add, m1, m2]
    else:  # (x * 0.5) * a
        half = g.made_by(o, "Mul") if g.private(o) else None
        if half is not None and g.times_const(half, 0.5) == x:
            return m1.output[0], [add, half, m1]
    return None


def collapse_gelu(nodes: Sequence[NodeProto], consts: Mapping[str, np.ndarray], outputs: set[str],
                  shape_of: Callable[[str], tuple[int, ...] | None],
                  is_float: Callable[[str], bool]) -> tuple[list[NodeProto], dict[int, Collapsed]]:
    """Replace each GELU pattern in ``nodes`` (in graph order) by one ``Gelu`` node.

    ``consts`` are the known constant tensors, ``outputs`` the graph outputs; ``shape_of`` / ``is_float``
    answer for a tensor (the pattern's input must be float, its output of the input's shape). Returns the new
    node list and, keyed by ``id()`` of each new ``Gelu`` node, what it replaced.
    """
    g = _Graph(nodes, consts, outputs)
    order = {id(n): k for k, n in enumerate(nodes)}
    taken: set[int] = set()
    found: dict[int, Collapsed] = {}  # id of the pattern's last node -> its replacement
    for act in nodes:
        if act.domain not in ("", "ai.onnx") or act.op_type not in ("Erf", "Tanh") or len(act.input) != 1:
            continue
        head = _exact_head(g, act) if act.op_type == "Erf" else _tanh_head(g, act)
        if head is None:
            continue
        x, head_nodes = head
        tail = _tail(g, act, x)
        if tail is None:
            continue
        y, tail_nodes = tail
        members = head_nodes + tail_nodes
        if any(id(n) in taken for n in members) or not is_float(x) or shape_of(x) is None \
                or shape_of(x) != shape_of(y):
            continue
        members.sort(key=lambda n: order[id(n)])
        if members[-1].output[0] != y:  # the output is computed last (intermediates are private)
            continue
        taken.update(id(n) for n in members)
        approx = "none" if act.op_type == "Erf" else "tanh"
        gelu = helper.make_node("Gelu", [x], [y], name=(members[-1].name or "gelu") + "_collapsed",
                                approximate=approx)
        found[id(members[-1])] = Collapsed(gelu, members)
    out: list[NodeProto] = []
    collapsed: dict[int, Collapsed] = {}
    for n in nodes:
        if id(n) in found:
            c = found[id(n)]
            out.append(c.node)
            collapsed[id(c.node)] = c
        elif id(n) not in taken:
            out.append(n)
    return out, collapsed
