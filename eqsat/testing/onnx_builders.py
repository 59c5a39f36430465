"""ONNX models for tests in a few lines: :func:`make_model` for graphs written node by node (it is
:func:`eqsat.models.builder.make_model`, the one the built-in models use too), and typed helpers for their
value infos, initializers and nodes.

Whole networks with seeded weights are :class:`eqsat.models.builder.ModelBuilder`'s; this module is for the one-
to few-node graphs a test writes out to reach one importer path, one rule or one error. A graph input or output
is given as a ``ValueInfoProto`` or as ``(name, shape)`` / ``(name, shape, elem_type)`` (float by default; a
shape may hold symbolic dims as strings, or be None for an unknown rank); an output may also be a bare name,
whose shape shape inference fills in with ``infer_shapes=True``. Initializers are ``TensorProto``s, a mapping
of names to arrays, or ``(name, array)`` pairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx
from onnx import helper

from eqsat.models.builder import FLOAT, INT64, Dim, initializer, make_model, value_info

__all__ = ["FLOAT", "INT64", "f32", "i64", "initializer", "make_model", "node", "reexported", "value_info"]


def f32(name: str, shape: Sequence[Dim] | None) -> onnx.ValueInfoProto:
    """A float tensor's value info."""
    return value_info(name, shape, FLOAT)


def i64(name: str, shape: Sequence[Dim] | None) -> onnx.ValueInfoProto:
    """An int64 tensor's value info."""
    return value_info(name, shape, INT64)


def node(op_type: str, inputs: Sequence[str], outputs: Sequence[str], **attrs: Any) -> onnx.NodeProto:
    """One node (``name=`` and ``domain=`` as in ``onnx.helper.make_node``; other keywords are attributes)."""
    return helper.make_node(op_type, list(inputs), list(outputs), **attrs)


def reexported(model: onnx.ModelProto, prefix: str = "re_") -> onnx.ModelProto:
    """``model`` as another export of it writes it: every weight and computed tensor renamed with ``prefix``, the
    inputs and outputs keeping their names (a copy; a fine-tune exported again, with :class:`ModelBuilder`'s
    ``seed`` for other weights)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    keep = {v.name for v in (*g.input, *g.output)}
    names = {t.name: prefix + t.name for t in g.initializer}
    names |= {o: prefix + o for n in g.node for o in n.output if o and o not in keep}
    for t in g.initializer:
        t.name = names[t.name]
    for n in g.node:
        n.input[:] = [names.get(i, i) for i in n.input]
        n.output[:] = [names.get(o, o) for o in n.output]
    return out
