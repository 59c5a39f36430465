"""Models in half precision: a model whose floating-point tensors are all float16 (or all bfloat16) is imported
as its float32 copy and written back in its own precision.

eqsat's operators, rules and constants are stated over float32 (the rules are equalities over the reals, which
hold in any precision), so a uniformly half-precision model is optimized as the same graph in float32 and every
float tensor of the written model, weights, inputs, outputs, casts and constants, is converted back. A model that
mixes precisions (float32 islands behind ``Cast``, as mixed-precision exports have) is not converted: its
half-precision operators import as opaque, since a rewrite could otherwise combine tensors of two precisions.
The numeric check compares the written model with the original as given, both in half precision, at a tolerance
fit for it (:data:`CHECK_TOLERANCE`).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx
from onnx import numpy_helper

from eqsat.onnx_io.stored import tensor_array

__all__ = ["CHECK_TOLERANCE", "HALF_TYPES", "convert_floats", "uniform_half"]

#: the half-precision element types a model may be uniformly in, by the name eqsat records
HALF_TYPES = {"float16": onnx.TensorProto.FLOAT16, "bfloat16": onnx.TensorProto.BFLOAT16}
_FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, *HALF_TYPES.values()}
#: the numeric check's tolerance (relative to each output's scale) for a model written in half precision: float16
#: keeps 11 bits of mantissa, bfloat16 8, and a rewritten graph rounds in another order
CHECK_TOLERANCE = {"float16": 1e-2, "bfloat16": 5e-2}


def _value_infos(g: onnx.GraphProto) -> Iterator[onnx.ValueInfoProto]:
    yield from g.input
    yield from g.output
    yield from g.value_info


def _tensor_attrs(g: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                yield a.t


def _float_types(model: onnx.ModelProto) -> set[int] | None:
    """Every floating-point element type the model's tensors, casts and constants use; None where it has
    subgraphs (not converted)."""
    g = model.graph
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in g.node for a in n.attribute):
        return None
    types = {vi.type.tensor_type.elem_type for vi in _value_infos(g) if vi.type.HasField("tensor_type")}
    types |= {t.data_type for t in g.initializer} | {t.data_type for t in _tensor_attrs(g)}
    types |= {a.i for n in g.node if n.op_type == "Cast" for a in n.attribute if a.name == "to"}
    return types & _FLOATS


def uniform_half(model: onnx.ModelProto) -> str:
    """``"float16"`` or ``"bfloat16"`` where every floating-point tensor of ``model`` is of that one type, else
    ``""``."""
    types = _float_types(model)
    if not types or len(types) != 1:
        return ""
    (only,) = types
    return next((name for name, t in HALF_TYPES.items() if t == only), "")


def _converted(t: onnx.TensorProto, src: int, dst: int) -> onnx.TensorProto:
    if t.data_type != src:
        return t
    arr = tensor_array(t).astype(np.float32)
    if dst != onnx.TensorProto.FLOAT:
        arr = arr.astype(onnx.helper.tensor_dtype_to_np_dtype(dst))
    out = numpy_helper.from_array(arr, t.name)
    if t.doc_string:
        out.doc_string = t.doc_string
    return out


def convert_floats(model: onnx.ModelProto, src: int, dst: int) -> onnx.ModelProto:
    """A copy of ``model`` with every tensor, cast and constant of element type ``src`` in ``dst`` instead (the
    weights' values converted; from a half type to float32 exactly, back by rounding)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    for k, t in enumerate(g.initializer):
        if t.data_type == src:
            g.initializer[k].CopyFrom(_converted(t, src, dst))
    for vi in _value_infos(g):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type == src:
            vi.type.tensor_type.elem_type = dst
    for n in g.node:
        if n.op_type == "Constant" and src == onnx.TensorProto.FLOAT and \
                any(a.name in ("value_float", "value_floats") for a in n.attribute):
            (a,) = n.attribute  # a Constant has exactly one value attribute
            values = np.array(a.f if a.name == "value_float" else list(a.floats), dtype=np.float32)
            del n.attribute[:]
            n.attribute.append(onnx.helper.make_attribute("value", numpy_helper.from_array(values, "value")))
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == src:
                a.t.CopyFrom(_converted(a.t, src, dst))
            elif n.op_type == "Cast" and a.name == "to" and a.i == src:
                a.i = dst
    return out
