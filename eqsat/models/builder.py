"""ONNX models written in code: :func:`make_model` (a graph's nodes, inputs, outputs and initializers as one
model) and :class:`ModelBuilder` (node by node, with seeded weights), shared by the built-in models, the tests
(through :mod:`eqsat.testing.onnx_builders`) and the benchmarks."""

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


def initializer(name: str, value: Any, dtype: Any = None) -> onnx.TensorProto:
    """An initializer holding ``value`` (an array or anything ``np.asarray`` takes; ``dtype`` converts it)."""
    arr = np.asarray(value) if dtype is None else np.asarray(value, dtype=dtype)
    return numpy_helper.from_array(arr, name)


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


# ---------------------------------------------------------------------------------------------------------
# built-in models


class ModelBuilder:
    """Builds an ONNX model node by node: seeded random weights (scaled by fan-in), constants, nodes with
    counted names, and a checked ``ModelProto`` at the end."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def weight(self, shape: tuple[int, ...], scale: float | None = None, name: str = "w") -> str:
        """A seeded normal weight initializer (standard deviation ``scale``, else 1/sqrt(fan-in)); its name."""
        self.count += 1
        nm = f"{name}{self.count}"
        fan_in = shape[0] if len(shape) == 2 else int(np.prod(shape[1:])) if len(shape) == 4 else 1
        sd = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
        self.inits.append(numpy_helper.from_array(self.rng.normal(0, sd, shape).astype(np.float32), nm))
        return nm

    def const(self, value: np.ndarray, name: str) -> str:
        """A constant initializer holding ``value``; its name."""
        self.count += 1
        nm = f"{name}{self.count}"
        self.inits.append(numpy_helper.from_array(np.asarray(value), nm))
        return nm

    def op(self, op_type: str, inputs: list[str], out: str | None = None, **attrs: object) -> str:
        """A node (attributes as keywords); the name of its output."""
        self.count += 1
        out = out or f"{op_type.lower()}{self.count}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"n{self.count}", **attrs))
        return out

    def model(self, name: str, inputs: list[tuple[str, tuple[int, ...]]], outputs: list[tuple[str, tuple[int, ...]]],
              opset: int = 17) -> onnx.ModelProto:
        """The model of the nodes so far, with float graph inputs and outputs of the given shapes, checked."""
        return make_model(self.nodes, inputs, outputs, self.inits, opset, name=name, ir_version=8,
                          producer="eqsat.models", check=True)
