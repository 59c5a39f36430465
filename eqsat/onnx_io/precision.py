"""Models in half precision: a model whose floating-point tensors are all float16 (or all bfloat16), or that mixes
one of them with float32, is imported as its float32 copy and written back in its own precisions.

eqsat's operators, rules and constants are stated over float32 (the rules are equalities over the reals, which
hold in any precision), so a uniformly half-precision model is optimized as the same graph in float32 and every
float tensor of the written model, weights, inputs, outputs, casts and constants, is converted back.

A model that mixes precisions (float32 islands behind ``Cast``, as a half-precision LLaMA computes its RMSNorm)
keeps its regions: each ``Cast`` between float types imports as the registry's ``cast``
(:mod:`eqsat.ops.cast`), and every other operator computes in its inputs' precision. No rule but the casts' own
crosses a cast, and every rule keeps the inputs its left-hand side combines, so each e-class holds tensors of one
precision. Export (:func:`restore_precisions`) then gives each tensor of the written model its precision: a name
the model as given has keeps that one's, a new tensor takes its operator's inputs', and a constant (a weight,
one a rewrite made) takes what the node reading it computes in.
The numeric check compares the written model with the original as given at a tolerance fit for the half type
(:data:`CHECK_TOLERANCE`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from eqsat.ir.precision import MIXED_KEY
from eqsat.onnx_io.stored import tensor_array

__all__ = ["CHECK_TOLERANCE", "CONSTANT_RTOL", "HALF_TYPES", "MIXED_KEY", "PRECISION_KEY", "PrecisionError",
           "convert_floats", "float32_casts", "float32_copy", "given_float_types", "half_type", "mixed_half",
           "restore_precisions", "uniform_half"]

#: graph.meta key of the half-precision type a uniformly half-precision model was given in and is written back in
PRECISION_KEY = "precision"
#: the half-precision element types a model may be uniformly in, by the name eqsat records
HALF_TYPES = {"float16": onnx.TensorProto.FLOAT16, "bfloat16": onnx.TensorProto.BFLOAT16}
_FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, *HALF_TYPES.values()}
#: the numeric check's tolerance (relative to each output's scale) for a model written in half precision: float16
#: keeps 11 bits of mantissa, bfloat16 8, and a rewritten graph rounds in another order
CHECK_TOLERANCE = {"float16": 1e-2, "bfloat16": 5e-2}
#: how far (relative) a constant of a half-precision model may be from the value a fusion's pattern states: the
#: nearest value of the type (float16 rounds to within 2**-11, bfloat16 to within 2**-8), so that GELU's sqrt(2)
#: or 0.044715 written in float16 still collapses as in the float32 copy
CONSTANT_RTOL = {"float16": 1e-3, "bfloat16": 8e-3}


def half_type(meta: Mapping[str, Any]) -> str:
    """The half type a model imported with graph metadata ``meta`` computes in, wholly or in part (``""``: none)."""
    return meta.get(PRECISION_KEY) or (meta.get(MIXED_KEY) or {}).get("half", "")


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


def mixed_half(model: onnx.ModelProto) -> str:
    """``"float16"`` or ``"bfloat16"`` where ``model``'s floating-point tensors are float32 and that one half type
    (a mixed-precision model), else ``""`` (float64, two half types and subgraphs are not converted)."""
    types = _float_types(model)
    if not types or onnx.TensorProto.FLOAT not in types or len(types) != 2:
        return ""
    (half,) = types - {onnx.TensorProto.FLOAT}
    return next((name for name, t in HALF_TYPES.items() if t == half), "")


def _dtype_name(t: int) -> str:
    return str(onnx.helper.tensor_dtype_to_np_dtype(t)) if t != onnx.TensorProto.BFLOAT16 else "bfloat16"


def given_float_types(model: onnx.ModelProto) -> dict[str, str]:
    """The precision (numpy dtype name, ``"bfloat16"`` for bfloat16) of every float tensor of ``model`` that its
    declarations, its casts or ONNX's type inference give."""
    g = model.graph
    declared = {vi.name: vi.type.tensor_type.elem_type for vi in _value_infos(g) if vi.type.HasField("tensor_type")}
    declared.update({t.name: t.data_type for t in g.initializer})
    # types only: the weights travel as typed inputs, so that no data is copied
    typed = [vi for vi in g.input] + [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                                      for t in g.initializer if t.name not in {i.name for i in g.input}]
    probe = helper.make_model(helper.make_graph(list(g.node), g.name or "graph", typed, list(g.output),
                                                value_info=list(g.value_info)),
                              opset_imports=list(model.opset_import), ir_version=model.ir_version)
    try:
        inferred = onnx.shape_inference.infer_shapes(probe, strict_mode=False)
        declared.update({vi.name: vi.type.tensor_type.elem_type for vi in inferred.graph.value_info
                         if vi.type.HasField("tensor_type") and vi.name not in declared})
    except Exception:  # noqa: BLE001 - inference refuses some models: their declared types and casts still hold
        pass
    for n in g.node:
        if n.op_type == "Cast":
            declared[n.output[0]] = next(a.i for a in n.attribute if a.name == "to")
    return {k: _dtype_name(t) for k, t in declared.items() if t in _FLOATS and t != onnx.TensorProto.DOUBLE}


def float32_copy(model: onnx.ModelProto) -> tuple[onnx.ModelProto, str, str, dict[str, str]]:
    """The model eqsat imports for ``model``: ``(model or its float32 copy, the half type it is uniformly in,
    the half type it mixes with float32, the precisions of its float tensors as given where it mixes)``."""
    uniform = uniform_half(model)  # all float16 (or bfloat16)
    mixed = "" if uniform else mixed_half(model)  # float32 and one half type: each cast between them kept
    given = given_float_types(model) if mixed else {}
    if uniform or mixed:
        model = convert_floats(model, HALF_TYPES[uniform or mixed], onnx.TensorProto.FLOAT)
    return model, uniform, mixed, given


def _converted(t: onnx.TensorProto, src: int, dst: int) -> onnx.TensorProto:
    if t.data_type != src:
        return t
    arr = tensor_array(t).astype(np.float32)
    if dst != onnx.TensorProto.FLOAT:
        with np.errstate(over="ignore"):  # beyond the half type's range is infinite, as in a half model
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


class PrecisionError(ValueError):
    """A node of a model being written reads tensors of two precisions where its operator needs one: a rewrite
    combined two precision regions (an eqsat bug; the original is kept)."""


_ELEM = {"float32": onnx.TensorProto.FLOAT, **HALF_TYPES}


def _schema(n: onnx.NodeProto, opset: int) -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(n.op_type, opset, n.domain or "")
    except Exception:  # noqa: BLE001 - another domain's kernel (com.microsoft): no schema in onnx
        return None


def _formal(params: list, k: int) -> str:
    """The type string of a node's ``k``-th input or output under its schema's formal parameters (the last one
    variadic)."""
    return params[min(k, len(params) - 1)].type_str if params else ""


def _node_types(n: onnx.NodeProto, schema: onnx.defs.OpSchema | None, known: dict[str, int],
                given: dict[str, int]) -> tuple[dict[str, int], dict[int, int]]:
    """The float type of each type parameter of ``n`` bound by what is known, and the type each float output
    gets (by position)."""
    bound: dict[str, int] = {}

    def bind(param: str, t: int, what: str) -> None:
        if param in bound and bound[param] != t:
            raise PrecisionError(f"node {n.name or n.output[0]!r} ({n.op_type}) has {what} in "
                                 f"{_dtype_name(t)} and another tensor in {_dtype_name(bound[param])}")
        bound[param] = t

    for k, name in enumerate(n.input):
        if name in known:
            bind(_formal(schema.inputs, k) if schema else "T", known[name], f"{name!r}")
    outs: dict[int, int] = {}
    for k, name in enumerate(n.output):
        param = _formal(schema.outputs, k) if schema else "T"
        if name in given:
            outs[k] = given[name]
            if not param.startswith("tensor("):
                bind(param, given[name], f"{name!r} (written)")
        elif param in bound:
            outs[k] = bound[param]
    return bound, outs


def float32_casts(model: onnx.ModelProto) -> dict[str, str]:
    """Turn every cast of ``model`` to a half type into a cast to float32, in place (the float32 copy of a
    mixed-precision model, as written, is consistent then); returns the precision each cast's output had."""
    targets: dict[str, str] = {}
    for n in model.graph.node:
        for a in n.attribute:
            if n.op_type == "Cast" and a.name == "to" and a.i in HALF_TYPES.values():
                targets[n.output[0]] = _dtype_name(a.i)
                a.i = onnx.TensorProto.FLOAT
    return targets


def restore_precisions(model: onnx.ModelProto, given: dict[str, str]) -> onnx.ModelProto:
    """``model``, written from the float32 copy of a mixed-precision model, with every float tensor in its
    precision (see the module's docstring), in place (no copy of the weights): ``given`` holds the precisions of
    the model as given by tensor name (:func:`given_float_types`). A weight read at two precisions is written once
    for each. Raises :class:`PrecisionError` where a node would read two precisions for one type parameter."""
    out = model
    g = out.graph
    opset = next((o.version for o in out.opset_import if o.domain in ("", "ai.onnx")), 0)
    given_t = {k: _ELEM[v] for k, v in given.items() if v in _ELEM}
    flexible = {t.name for t in g.initializer if t.data_type == onnx.TensorProto.FLOAT}
    known: dict[str, int] = {}  # the decided float type of each tensor that is not a flexible constant
    for vi in g.input:
        if vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT:
            known[vi.name] = given_t.get(vi.name, onnx.TensorProto.FLOAT)
            vi.type.tensor_type.elem_type = known[vi.name]
    wanted: dict[str, dict[int, list[tuple[onnx.NodeProto, int]]]] = {}  # constant -> type -> its reads
    for n in g.node:
        schema = _schema(n, opset)
        if n.op_type == "Cast":  # its output is in the type it casts to; an original's, as the model gave it
            to = next(a for a in n.attribute if a.name == "to")
            if n.output[0] in given_t and to.i in _ELEM.values():
                to.i = given_t[n.output[0]]
            if to.i in _ELEM.values():
                known[n.output[0]] = to.i
            bound: dict[str, int] = {}
            first = onnx.TensorProto.FLOAT
        else:
            bound, outs = _node_types(n, schema, known, given_t)
            for k, t in outs.items():
                known[n.output[k]] = t
            first = next(iter(outs.values()), next(iter(bound.values()), onnx.TensorProto.FLOAT))
            for a in n.attribute:  # a constant's value (ConstantOfShape) in its output's type
                if a.type == onnx.AttributeProto.TENSOR and a.t.data_type in _ELEM.values() and outs:
                    a.t.CopyFrom(_converted(a.t, a.t.data_type, outs[0]))
        for k, name in enumerate(n.input):
            if name not in flexible:
                continue
            param = _formal(schema.inputs, k) if schema else "T"
            if n.op_type == "Cast" or param.startswith("tensor("):
                t = given_t.get(name, onnx.TensorProto.FLOAT)
            else:
                t = bound.get(param, first)
            wanted.setdefault(name, {}).setdefault(t, []).append((n, k))
    inits = {t.name: t for t in g.initializer}
    taken = set(inits) | {o for n in g.node for o in n.output} | {i.name for i in g.input}
    for name, by_type in wanted.items():
        for i, (t, reads) in enumerate(sorted(by_type.items())):
            if t == onnx.TensorProto.FLOAT:
                continue
            copy = _converted(inits[name], onnx.TensorProto.FLOAT, t)
            if i or onnx.TensorProto.FLOAT in by_type:  # read at another precision too: a copy of its own
                copy.name = f"{name}_{_dtype_name(t)}"
                while copy.name in taken:
                    copy.name += "_"
                taken.add(copy.name)
                for node, k in reads:
                    node.input[k] = copy.name
                g.initializer.append(copy)
            else:
                inits[name].CopyFrom(copy)
    for vi in [*g.output, *g.value_info]:
        if vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT and vi.name in known:
            vi.type.tensor_type.elem_type = known[vi.name]
    return out
