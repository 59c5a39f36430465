"""ONNX models for tests in a few lines: one :func:`make_model` for graphs written node by node, and typed
helpers for their value infos, initializers and nodes.

Whole networks with seeded weights are :class:`eqsat.models.builder.ModelBuilder`'s; this module is for the one-
to few-node graphs a test writes out to reach one importer path, one rule or one error. A graph input or output
is given as a ``ValueInfoProto`` or as ``(name, shape)`` / ``(name, shape, elem_type)`` (float by default; a
shape may hold symbolic dims as strings, or be None for an unknown rank); an output may also be a bare name,
whose shape shape inference fills in with ``infer_shapes=True``. Initializers are ``TensorProto``s, a mapping
of names to arrays, or ``(name, array)`` pairs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

Dim = int | str | None
TensorSpec = (onnx.ValueInfoProto | str | tuple[str, Sequence[Dim] | None]
              | tuple[str, Sequence[Dim] | None, int])
Initializers = Mapping[str, Any] | Iterable[onnx.TensorProto | tuple[str, Any]] | None

FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64


def value_info(name: str, shape: Sequence[Dim] | None, elem_type: int = FLOAT) -> onnx.ValueInfoProto:
    """A tensor's name, element type and shape (``None``: unknown rank; a string dim is symbolic)."""
    return helper.make_tensor_value_info(name, elem_type, None if shape is None else list(shape))


def f32(name: str, shape: Sequence[Dim] | None) -> onnx.ValueInfoProto:
    """A float tensor's value info."""
    return value_info(name, shape, FLOAT)


def i64(name: str, shape: Sequence[Dim] | None) -> onnx.ValueInfoProto:
    """An int64 tensor's value info."""
    return value_info(name, shape, INT64)


def initializer(name: str, value: Any, dtype: Any = None) -> onnx.TensorProto:
    """An initializer holding ``value`` (an array or anything ``np.asarray`` takes; ``dtype`` converts it)."""
    arr = np.asarray(value) if dtype is None else np.asarray(value, dtype=dtype)
    return numpy_helper.from_array(arr, name)


def node(op_type: str, inputs: Sequence[str], outputs: Sequence[str], **attrs: Any) -> onnx.NodeProto:
    """One node (``name=`` and ``domain=`` as in ``onnx.helper.make_node``; other keywords are attributes)."""
    return helper.make_node(op_type, list(inputs), list(outputs), **attrs)


def _spec(spec: TensorSpec) -> onnx.ValueInfoProto:
    if isinstance(spec, onnx.ValueInfoProto):
        return spec
    if isinstance(spec, str):
        return value_info(spec, None)
    return value_info(spec[0], spec[1], spec[2] if len(spec) > 2 else FLOAT)


def _initializers(inits: Initializers) -> list[onnx.TensorProto]:
    if inits is None:
        return []
    if isinstance(inits, Mapping):
        return [initializer(k, v) for k, v in inits.items()]
    return [t if isinstance(t, onnx.TensorProto) else initializer(t[0], t[1]) for t in inits]


def make_model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec],
               initializers: Initializers = (), opset: int = 17, *, name: str = "g",
               domains: Mapping[str, int] | Sequence[str] = (), ir_version: int | None = None,
               value_infos: Sequence[onnx.ValueInfoProto] = (), infer_shapes: bool = False, strict: bool = False,
               check: bool = False, producer: str | None = None) -> onnx.ModelProto:
    """A model of ``nodes`` with the given graph inputs, outputs and initializers at ``opset`` (default domain).

    ``domains``: further opset imports (a mapping of domain to version, or domain names at version 1).
    ``ir_version``: None keeps onnx's default for the installed package. ``infer_shapes``: outputs without a
    shape get the shape (and type) ONNX shape inference gives them (``strict``: its strict mode).
    ``check``: run the full ONNX checker on the result.
    """
    extra = domains.items() if isinstance(domains, Mapping) else [(d, 1) for d in domains]
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra]
    graph = helper.make_graph(list(nodes), name, [_spec(i) for i in inputs], [_spec(o) for o in outputs],
                              _initializers(initializers), value_info=list(value_infos))
    kw: dict[str, Any] = {"opset_imports": opsets}
    if producer is not None:
        kw["producer_name"] = producer
    model = helper.make_model(graph, **kw)
    if ir_version is not None:
        model.ir_version = ir_version
    if infer_shapes:
        done = shape_inference.infer_shapes(model, strict_mode=strict).graph
        inferred = {vi.name: vi for vi in [*done.value_info, *done.output] if vi.type.tensor_type.HasField("shape")}
        for out in model.graph.output:
            if out.name in inferred and not out.type.tensor_type.HasField("shape"):
                out.CopyFrom(inferred[out.name])
    if check:
        onnx.checker.check_model(model, full_check=True)
    return model
