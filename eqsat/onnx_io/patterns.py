"""ONNX-level pattern collapsing before import: multi-node spellings of one registry operator become that
operator's ONNX node, so they import as one IR node.

Exporters below opset 20 (which has ``Gelu``) write GELU out as element-wise nodes; BERT has one per layer:

* exact: ``x * 0.5 * (1 + erf(x / sqrt(2)))``: ``Div(x, 1.4142)`` (or ``Mul(x, 0.7071)``) -> ``Erf`` ->
  ``Add 1`` -> two ``Mul`` with ``x`` and ``0.5`` in any order and grouping;
* tanh: ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))``: ``Pow(x, 3)`` (or ``x * x * x``) ->
  ``Mul 0.044715`` -> ``Add x`` -> ``Mul 0.7979`` -> ``Tanh`` -> the same tail.

Exporters below opset 17 (which has ``LayerNormalization``) write layer normalisation out too (torch):
``ReduceMean(x)`` over the last axes, keeping them -> ``Sub(x, mean)`` -> ``Pow(d, 2)`` (or ``Mul(d, d)``) ->
``ReduceMean`` over the same axes -> ``Add eps`` -> ``Sqrt`` -> ``Div(d, std)`` -> ``Mul scale`` -> ``Add bias``
(the ``Mul`` and ``Add`` may be absent, their operands in either order).

LLaMA-style decoders' RMS normalisation (ONNX has ``RMSNormalization`` from opset 23): ``Pow(x, 2)`` (or
``Mul(x, x)``) -> ``ReduceMean`` over the last axes, keeping them -> ``Add eps`` -> ``Sqrt`` -> ``Div(x, rms)``,
``Mul(x, Reciprocal(rms))`` or ``Mul(x, Div(1, rms))`` -> an optional float32-to-float32 ``Cast`` -> an
optional ``Mul scale``.

A match needs its constants numerically right (single-element constants, relative tolerance 1e-4; a layer
norm's scale and bias constants that vary only along the normalized axes), every intermediate tensor read
only inside the pattern and not a graph output, and the output of the shape of ``x``. :func:`collapse_patterns`
replaces each with one ``Gelu`` node (``approximate`` ``none`` or ``tanh``), one ``LayerNormalization`` or one
``RMSNormalization`` node that exists only on the way into the importer: :mod:`eqsat.onnx_io` imports it as one
``gelu``, ``layernorm`` or ``rmsnorm`` (whatever the model's opset), and falls back to the original nodes if
that import fails. This module reads protos; it does not import the registry.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import NodeProto, helper

#: a new constant for a collapsed node: (array, name hint) -> the name it is stored under
AddConst = Callable[[np.ndarray, str], str]

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

    def is_const(self, name: str, value: float, kinds: str = "f") -> bool:
        """``name`` is a single-element constant (of a dtype kind in ``kinds``) close to ``value``."""
        v = self.scalar(name, kinds)
        return v is not None and bool(np.isclose(v, value, rtol=_RTOL, atol=0.0))

    def scalar(self, name: str, kinds: str = "f") -> float | None:
        """The value of a single-element constant of a dtype kind in ``kinds``, else ``None``."""
        c = self.consts.get(name)
        if c is None or c.size != 1 or c.dtype.kind not in kinds:
            return None
        return float(c.reshape(-1)[0])

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
    return _replace(nodes, found, taken)


def _replace(nodes: Sequence[NodeProto], found: Mapping[int, Collapsed],
             taken: set[int]) -> tuple[list[NodeProto], dict[int, Collapsed]]:
    """``nodes`` with each collapsed pattern's node in place of its last node and its other nodes gone."""
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


# -- layer normalisation ---------------------------------------------------------------------------------

def _attrs(node: NodeProto) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _mean_axes(g: _Graph, node: NodeProto, rank: int) -> tuple[int, ...] | None:
    """The axes (non-negative, ascending) of a ``ReduceMean`` that keeps them, from its attribute (below
    opset 18) or its constant input (from 18); ``None`` for anything else."""
    attrs = _attrs(node)
    if int(attrs.get("keepdims", 1)) != 1:
        return None
    if len(node.input) > 1 and node.input[1]:
        c = g.consts.get(node.input[1])
        if c is None or c.dtype.kind not in "iu":
            return None
        axes = [int(a) for a in c.reshape(-1)]
    else:
        axes = [int(a) for a in attrs.get("axes", [])]
    if not axes:
        if int(attrs.get("noop_with_empty_axes", 0)):
            return None
        axes = list(range(rank))
    if any(not -rank <= a < rank for a in axes):
        return None
    norm = sorted({a + rank if a < 0 else a for a in axes})
    return tuple(norm) if len(norm) == len(axes) else None


def _affine_const(g: _Graph, name: str, shape: tuple[int, ...], axis: int) -> np.ndarray | None:
    """A float constant that, broadcast against ``x`` of ``shape``, varies only along the dimensions from
    ``axis`` on: its values over ``shape[axis:]``; ``None`` for anything else."""
    c = g.consts.get(name)
    if c is None or c.dtype.kind != "f" or c.ndim > len(shape):
        return None
    cs = (1,) * (len(shape) - c.ndim) + tuple(c.shape)
    if any(d != 1 for d in cs[:axis]) or any(d not in (1, s) for d, s in zip(cs[axis:], shape[axis:], strict=True)):
        return None
    return np.ascontiguousarray(np.broadcast_to(c.reshape(cs[axis:]), shape[axis:]))


@dataclass
class _LayerNorm:
    x: str
    y: str
    axis: int
    epsilon: float
    members: list[NodeProto]
    scale: tuple[str, np.ndarray] | None  # the constant's name and its values over x.shape[axis:]
    bias: tuple[str, np.ndarray] | None


def _square_of(g: _Graph, sq: str, d: str) -> NodeProto | None:
    """The node computing ``sq = d^2``: ``Pow(d, 2)`` or ``Mul(d, d)``."""
    pow_ = g.made_by(sq, "Pow")
    if pow_ is not None:
        ok = len(pow_.input) == 2 and pow_.input[0] == d and g.is_const(pow_.input[1], 2.0, "fiu")
        return pow_ if ok else None
    mul = g.made_by(sq, "Mul")
    return mul if mul is not None and list(mul.input) == [d, d] else None


def _root_of_mean(g: _Graph, sqrt: NodeProto) -> tuple[NodeProto, NodeProto, float] | None:
    """``sqrt = Sqrt(ReduceMean(s) + eps)``, its intermediates private: the ``ReduceMean``, the ``Add`` and ``eps`` (a
    finite constant >= 0); None for anything else."""
    plus = g.made_by(sqrt.input[0], "Add") if g.private(sqrt.input[0]) else None
    if plus is None or len(plus.input) != 2:
        return None
    mean, eps_name = plus.input if g.scalar(plus.input[1]) is not None else plus.input[::-1]
    eps = g.scalar(eps_name)
    rm = g.made_by(mean, "ReduceMean") if g.private(mean) else None
    if eps is None or not (math.isfinite(eps) and eps >= 0) or rm is None:
        return None
    return rm, plus, eps


def _last_axes(g: _Graph, mean: NodeProto, rank: int) -> tuple[int, ...] | None:
    """The axes of a ``ReduceMean`` that keeps them where they are the last ones of a rank-``rank`` input."""
    axes = _mean_axes(g, mean, rank)
    return axes if axes is not None and axes == tuple(range(rank - len(axes), rank)) else None


def _affine_after(g: _Graph, y: str, op_type: str, shape: tuple[int, ...],
                  axis: int) -> tuple[NodeProto, tuple[str, np.ndarray]] | None:
    """The only reader of ``y`` when it is ``op_type`` (``Mul``: a scale, ``Add``: a bias) with a constant that
    varies only along the normalized axes: the node, and the constant's name and values over them."""
    node = g.only_reader(y, op_type)
    if node is None or len(node.input) != 2:
        return None
    other = node.input[1] if node.input[0] == y else node.input[0]
    values = _affine_const(g, other, shape, axis) if other != y else None
    return None if values is None else (node, (other, values))


def _layernorm_at(g: _Graph, div: NodeProto, shape_of: Callable[[str], tuple[int, ...] | None],
                  is_float: Callable[[str], bool]) -> _LayerNorm | None:
    """The decomposed layer norm whose ``Div(x - mean, std)`` is ``div``, with its scale and bias."""
    if len(div.input) != 2:
        return None
    d, std = div.input
    sub = g.made_by(d, "Sub")
    if sub is None or len(sub.input) != 2:
        return None
    x, mean = sub.input
    shape = shape_of(x)
    rm1 = g.made_by(mean, "ReduceMean") if g.private(mean) else None
    if rm1 is None or rm1.input[0] != x or not shape or not is_float(x):
        return None
    rank = len(shape)
    axes = _last_axes(g, rm1, rank)
    if axes is None:
        return None
    axis = rank - len(axes)
    sqrt = g.made_by(std, "Sqrt") if g.private(std) else None
    root = _root_of_mean(g, sqrt) if sqrt is not None else None
    if root is None:
        return None
    rm2, plus, eps = root
    if _mean_axes(g, rm2, rank) != axes:
        return None
    sq = rm2.input[0]
    square = _square_of(g, sq, d) if g.private(sq) else None
    # x - mean is read by the square (once by Pow, twice by Mul) and by the Div, by nothing else
    if square is None or d in g.outputs or g.readers[d] != (2 if square.op_type == "Pow" else 3):
        return None
    members = [rm1, sub, square, rm2, plus, sqrt, div]
    y = div.output[0]
    found: dict[str, tuple[str, np.ndarray]] = {}
    for op_type in ("Mul", "Add"):  # scale, then bias: each optional
        affine = _affine_after(g, y, op_type, shape, axis)
        if affine is not None:
            node, found[op_type] = affine
            members.append(node)
            y = node.output[0]
    return _LayerNorm(x, y, axis, eps, members, found.get("Mul"), found.get("Add"))


def collapse_layernorm(nodes: Sequence[NodeProto], consts: Mapping[str, np.ndarray], outputs: set[str],
                       shape_of: Callable[[str], tuple[int, ...] | None], is_float: Callable[[str], bool],
                       add_const: AddConst | None = None) -> tuple[list[NodeProto], dict[int, Collapsed]]:
    """Replace each decomposed layer norm in ``nodes`` (in graph order) by one ``LayerNormalization`` node
    (``axis`` the first normalized axis, counted from the end; ``epsilon`` the constant added to the variance).

    Arguments and result as for :func:`collapse_gelu`. The scale and bias constants go in as they are where
    they have the normalized dimensions' shape; other shapes, and a missing scale (ones), need ``add_const``
    to store a new constant: without it such a pattern does not collapse. A missing bias is left out.
    """
    return _collapse_norms(nodes, consts, outputs, shape_of, is_float, add_const, "Div", _layernorm_at,
                           "LayerNormalization", "layernorm")


def _collapse_norms(nodes: Sequence[NodeProto], consts: Mapping[str, np.ndarray], outputs: set[str],
                    shape_of: Callable[[str], tuple[int, ...] | None], is_float: Callable[[str], bool],
                    add_const: AddConst | None, anchor: str,
                    find: Callable[[_Graph, NodeProto, Callable[[str], tuple[int, ...] | None],
                                    Callable[[str], bool]], _LayerNorm | None],
                    op_type: str, label: str) -> tuple[list[NodeProto], dict[int, Collapsed]]:
    """Each norm ``find`` reads at an ``anchor`` node, as one ``op_type`` node (inputs x, scale and, where the
    pattern has one, bias); the collapses of :func:`collapse_layernorm` and :func:`collapse_rmsnorm`."""
    g = _Graph(nodes, consts, outputs)
    order = {id(n): k for k, n in enumerate(nodes)}
    taken: set[int] = set()
    found: dict[int, Collapsed] = {}
    for at in nodes:
        if at.domain not in ("", "ai.onnx") or at.op_type != anchor:
            continue
        ln = find(g, at, shape_of, is_float)
        if ln is None or any(id(n) in taken for n in ln.members) or shape_of(ln.x) != shape_of(ln.y):
            continue
        members = sorted(ln.members, key=lambda n: order[id(n)])
        if members[-1].output[0] != ln.y:  # the output is computed last (intermediates are private)
            continue
        shape = shape_of(ln.x)
        assert shape is not None
        norm = tuple(shape[ln.axis:])
        names: list[str] = []
        for what, given in (("scale", ln.scale), ("bias", ln.bias)):
            if given is not None and tuple(consts[given[0]].shape) == norm:
                names.append(given[0])
            elif given is None and what == "bias":
                pass  # optional (LayerNormalization's B), or none in the pattern (RMS norms)
            elif add_const is None:
                break
            elif given is not None:
                names.append(add_const(given[1], f"{ln.y}_{what}"))
            else:
                names.append(add_const(np.ones(norm, dtype=np.float32), f"{ln.y}_unit_scale"))
        else:
            taken.update(id(n) for n in members)
            node = helper.make_node(op_type, [ln.x, *names], [ln.y], name=(members[-1].name or label) + "_collapsed",
                                    axis=ln.axis - len(shape), epsilon=ln.epsilon)
            found[id(members[-1])] = Collapsed(node, members)
    return _replace(nodes, found, taken)


# -- RMS normalisation -----------------------------------------------------------------------------------

def _rms_inverse(g: _Graph, rms: str, x: str) -> tuple[NodeProto, list[NodeProto]] | None:
    """``x / rms`` spelled ``Div(x, rms)``, ``Mul(x, Reciprocal(rms))`` or ``Mul(x, Div(1, rms))``: the node
    giving it and the nodes of the spelling."""
    if not g.private(rms):
        return None
    reader = g.consumers[rms][0]
    if reader.domain not in ("", "ai.onnx"):
        return None
    if reader.op_type == "Div" and list(reader.input) == [x, rms]:
        return reader, [reader]
    inverse = reader.op_type == "Reciprocal" or (
        reader.op_type == "Div" and list(reader.input)[1:] == [rms] and g.is_const(reader.input[0], 1.0))
    mul = g.only_reader(reader.output[0], "Mul") if inverse else None
    if mul is None or sorted(mul.input) != sorted([x, reader.output[0]]):
        return None
    return mul, [reader, mul]


def _rmsnorm_at(g: _Graph, sqrt: NodeProto, shape_of: Callable[[str], tuple[int, ...] | None],
                is_float: Callable[[str], bool]) -> _LayerNorm | None:
    """The decomposed RMS norm whose ``Sqrt(mean(x^2) + eps)`` is ``sqrt``, with its scale (no bias)."""
    root = _root_of_mean(g, sqrt)
    if root is None or not g.private(root[0].input[0]):
        return None
    rm, plus, eps = root
    sq = rm.input[0]
    square = g.made_by(sq, "Pow") or g.made_by(sq, "Mul")
    if square is None or len(square.input) != 2:
        return None
    x = square.input[0]
    if _square_of(g, sq, x) is None:
        return None
    shape = shape_of(x)
    if not shape or not is_float(x):
        return None
    rank = len(shape)
    axes = _last_axes(g, rm, rank)
    if axes is None:
        return None
    axis = rank - len(axes)
    found = _rms_inverse(g, sqrt.output[0], x)
    if found is None:
        return None
    normed, spelling = found
    members = [square, rm, plus, sqrt, *spelling]
    y = normed.output[0]
    cast = g.only_reader(y, "Cast")
    if cast is not None and int(_attrs(cast).get("to", 0)) == 1 and is_float(y):  # float32 to float32: a copy
        members.append(cast)
        y = cast.output[0]
    scale = None
    affine = _affine_after(g, y, "Mul", shape, axis)
    if affine is not None:
        mul, scale = affine
        members.append(mul)
        y = mul.output[0]
    return _LayerNorm(x, y, axis, eps, members, scale, None)


def collapse_rmsnorm(nodes: Sequence[NodeProto], consts: Mapping[str, np.ndarray], outputs: set[str],
                     shape_of: Callable[[str], tuple[int, ...] | None], is_float: Callable[[str], bool],
                     add_const: AddConst | None = None) -> tuple[list[NodeProto], dict[int, Collapsed]]:
    """Replace each decomposed RMS norm in ``nodes`` (in graph order) by one ``RMSNormalization`` node; arguments
    and result as for :func:`collapse_layernorm` (a scale of another shape, or none, needs ``add_const``)."""
    return _collapse_norms(nodes, consts, outputs, shape_of, is_float, add_const, "Sqrt", _rmsnorm_at,
                           "RMSNormalization", "rmsnorm")


def collapse_patterns(nodes: Sequence[NodeProto], consts: Mapping[str, np.ndarray], outputs: set[str],
                      shape_of: Callable[[str], tuple[int, ...] | None], is_float: Callable[[str], bool],
                      add_const: AddConst | None = None) -> tuple[list[NodeProto], dict[int, Collapsed]]:
    """Every collapse of this module in turn (layer norms, RMS norms, then GELUs); arguments and result as for
    :func:`collapse_layernorm`."""
    nodes, collapsed = collapse_layernorm(nodes, consts, outputs, shape_of, is_float, add_const)
    nodes, rms = collapse_rmsnorm(nodes, consts, outputs, shape_of, is_float, add_const)
    nodes, more = collapse_gelu(nodes, consts, outputs, shape_of, is_float)
    return nodes, {**collapsed, **rms, **more}
