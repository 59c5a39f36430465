"""Fusion patterns: an operator's multi-node ONNX spellings, declared as data beside the operator.

Exporters write some registry operators out as several ONNX nodes (GELU below opset 20, layer normalisation
below 17, RMS normalisation below 23). A family module declares each such spelling with :func:`register_fusion`
next to the operator's :class:`~eqsat.ops.OpSpec`: a :class:`Fusion` is a pattern (what the nodes look like), a
``check`` over a match (what the pattern's shape cannot say: axes, shapes, constants' values) and a
``replacement`` (the one ONNX node the nodes become, which the registry's importer then maps). The pattern is
plain data built from:

* :class:`Var`: any tensor; every use of one name binds the same tensor (the pattern's inputs);
* :class:`Const`: a single-element constant close to a value (relative tolerance);
* :class:`ConstVar`: a constant of any value, bound to a name for the check and the replacement;
* :class:`Op` (built with ``op.Mul(a, b)``): a node of the default domain with these inputs; the operands of a
  commutative binary node (``Add``, ``Mul``) match in either order; ``name`` binds the node (its attributes and
  further inputs, for the check); a pattern object used twice is one tensor (a DAG, not a tree);
* :class:`OneOf` (:func:`one_of`): alternative spellings, tried in order; :func:`optional` (a node that may be
  absent) and :func:`product` (a product of three factors in any grouping) are built from it.

:mod:`eqsat.onnx_io.collapse` matches the patterns over a model's nodes before import, each fusion in
registration order over the whole graph, and replaces each match by its replacement only where every
intermediate tensor is read inside the match alone and is no graph output. This module imports no onnx: nodes
reach a check as plain :data:`~eqsat.ops.OnnxNode` tuples, through :class:`FusionMatch`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from eqsat.ops.core import OnnxNode, Shape

#: ONNX operators whose two inputs commute: their patterns match the operands in either order
COMMUTATIVE = frozenset({"Add", "Mul"})


@dataclass(frozen=True, eq=False)
class Var:
    """Any tensor (not one the match computes); every use of one name binds the same tensor."""

    name: str


@dataclass(frozen=True, eq=False)
class Const:
    """A single-element constant whose dtype kind (numpy: ``f`` float, ``i`` int, ``u`` unsigned) is in ``kinds``
    and whose value is within ``rtol`` of ``value`` (relative; no absolute tolerance)."""

    value: float
    kinds: str = "f"
    rtol: float = 1e-4


@dataclass(frozen=True, eq=False)
class ConstVar:
    """A constant of any value, of a dtype kind in ``kinds`` (single-element if ``scalar``), bound to ``name``
    like a :class:`Var`."""

    name: str
    kinds: str = "f"
    scalar: bool = False


@dataclass(frozen=True, eq=False)
class Op:
    """A default-domain node of type ``op_type`` with exactly these inputs (``other_inputs``: and any further ones,
    left to the check) and ``attrs`` among its attributes with these values, written out (an attribute the node
    leaves at its default does not match one given here); ``name`` binds the node. It matches a node's first
    output only."""

    op_type: str
    inputs: tuple[Pattern, ...]
    name: str | None = None
    attrs: Mapping[str, Any] = field(default_factory=dict)
    other_inputs: bool = False

    @property
    def commutes(self) -> bool:
        """Whether its two operands match in either order."""
        return self.op_type in COMMUTATIVE and len(self.inputs) == 2


@dataclass(frozen=True, eq=False)
class OneOf:
    """Alternatives for one tensor, tried in order."""

    options: tuple[Pattern, ...]


Pattern = Var | Const | ConstVar | Op | OneOf
"""A pattern for one tensor (the output of the subgraph it describes)."""


class _OpBuilder:
    """``op.Mul(a, b, name=...)`` builds :class:`Op` ``("Mul", (a, b), ...)`` (as onnxscript's rewriter writes
    patterns)."""

    def __getattr__(self, op_type: str) -> Callable[..., Op]:
        if op_type.startswith("_"):
            raise AttributeError(op_type)

        def build(*inputs: Pattern, name: str | None = None, attrs: Mapping[str, Any] | None = None,
                  other_inputs: bool = False) -> Op:
            return Op(op_type, tuple(inputs), name, dict(attrs or {}), other_inputs)

        return build


op = _OpBuilder()


def one_of(*options: Pattern) -> OneOf:
    """Alternative spellings of one tensor, tried in order."""
    return OneOf(tuple(options))


def optional(inner: Pattern, node: Callable[[Pattern], Pattern]) -> OneOf:
    """``node(inner)`` where that node is present, else ``inner`` itself (a trailing scale, a cast)."""
    return OneOf((node(inner), inner))


def product(a: Pattern, b: Pattern, c: Pattern) -> OneOf:
    """``a * b * c`` as two ``Mul`` nodes in any grouping (each ``Mul``'s operands in either order)."""
    return OneOf((op.Mul(op.Mul(a, b), c), op.Mul(op.Mul(a, c), b), op.Mul(op.Mul(b, c), a)))


def required_op_types(p: Pattern) -> frozenset[str]:
    """The op types every match of ``p`` has among its nodes (a model without one of them has no match)."""
    if isinstance(p, Op):
        return frozenset({p.op_type}).union(*(required_op_types(i) for i in p.inputs))
    if isinstance(p, OneOf):
        return frozenset.intersection(*(required_op_types(o) for o in p.options))
    return frozenset()


def root_op_types(p: Pattern) -> frozenset[str]:
    """The op types the node computing ``p``'s tensor may have."""
    if isinstance(p, Op):
        return frozenset({p.op_type})
    if isinstance(p, OneOf):
        return frozenset().union(*(root_op_types(o) for o in p.options))
    return frozenset()


class FusionMatch(Protocol):
    """One match of a fusion's pattern, as its check and its replacement see it (implemented by
    :mod:`eqsat.onnx_io.collapse`)."""

    #: the tensor the matched nodes compute (the replacement's output)
    output: str

    def tensor(self, name: str) -> str | None:
        """The tensor a :class:`Var` or :class:`ConstVar` of that name bound; None where the part of the
        pattern holding it is absent (an :func:`optional` node that was not there)."""
        ...

    def node(self, name: str) -> OnnxNode | None:
        """The node an :class:`Op` of that name matched, as plain data; None where it is absent."""
        ...

    def const(self, tensor: str) -> np.ndarray | None:
        """A constant tensor's value (None for anything computed at run time)."""
        ...

    def shape(self, tensor: str) -> Shape | None:
        """A tensor's shape from shape inference (None where unknown)."""
        ...

    def is_float(self, tensor: str) -> bool:
        """Whether a tensor is float32."""
        ...

    def add_const(self, array: np.ndarray, hint: str) -> str | None:
        """Store a new constant for the replacement to read: its name, or None where the caller stores none (a
        replacement that needs one then returns None)."""
        ...


@dataclass(frozen=True)
class Fusion:
    """A multi-node ONNX spelling of one registry operator, collapsed to one node before import.

    ``pattern`` describes the nodes (its tensor is the last node's output); ``check`` accepts a match (False
    leaves the nodes as they are); ``replacement`` gives the node that replaces them, ``(op_type, inputs,
    outputs, attributes)`` with outputs ``[match.output]``, or None where it cannot be written (a constant it
    needs and may not add). The replacement node is imported through the registry's importers; where that fails
    the original nodes are imported one by one instead. ``op`` names the registry operator it becomes.
    """

    name: str
    op: str
    pattern: Pattern
    replacement: Callable[[FusionMatch], OnnxNode | None]
    check: Callable[[FusionMatch], bool] = lambda m: True


#: every fusion by name, in registration order (the order they are matched in)
FUSIONS: dict[str, Fusion] = {}


def register_fusion(fusion: Fusion) -> Fusion:
    """Add a fusion to :data:`FUSIONS`; one whose pattern is part of another's is registered after it (an RMS
    norm of the centred values is the tail of a layer norm)."""
    assert fusion.name not in FUSIONS, fusion.name
    FUSIONS[fusion.name] = fusion
    return fusion


def matched_shape(m: FusionMatch, x: str) -> Shape | None:
    """The shape of the float input ``x`` of a match whose output has that same shape (a fused element-wise
    operator or norm); None where it is not float, its shape is unknown or the output's differs."""
    t = m.tensor(x)
    shape = m.shape(t) if t is not None else None
    if t is None or shape is None or not m.is_float(t) or m.shape(m.output) != shape:
        return None
    return shape


def scalar(m: FusionMatch, name: str) -> float | None:
    """The value of the single-element constant bound to ``name`` (None where absent)."""
    t = m.tensor(name)
    c = m.const(t) if t is not None else None
    return None if c is None or c.size != 1 else float(c.reshape(-1)[0])
