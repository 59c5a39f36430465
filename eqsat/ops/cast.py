"""A change of floating-point precision: the ``Cast`` that a mixed-precision model puts around the parts it computes
in float32 (a half-precision LLaMA's RMSNorm and softmax) or in half precision.

eqsat's IR computes in float32 (:mod:`eqsat.onnx_io.precision`); a tensor's precision in the model as given is a
property of its region, which ``cast`` nodes bound. The operator states both sides (``source``, ``target``, numpy
dtype names) so that a rule can tell a round trip through a wider type, which changes nothing, from a rounding.
Its value in the IR is its input rounded to ``target``'s precision; export writes an ONNX ``Cast`` to ``target``
and gives every tensor its region's precision.
"""

from __future__ import annotations

import math

import numpy as np

from eqsat.ops import shapes as S
from eqsat.ops.core import ImportContext, IRNode, OnnxNode, OpSpec, Params, Ranks, Uninterpreted, importer, register

__all__ = ["CAST", "FLOAT_PRECISIONS", "ONNX_FLOAT_TYPES", "round_to"]

#: ONNX's element type of each float precision a cast may go between (TensorProto's numbers: this package
#: imports no onnx)
ONNX_FLOAT_TYPES = {"float32": 1, "float16": 10, "bfloat16": 16}
#: the precisions, by the bits of mantissa each keeps (a wider one holds every value of a narrower one)
FLOAT_PRECISIONS = {"bfloat16": 8, "float16": 11, "float32": 24}


def _round_bfloat16(x: np.ndarray) -> np.ndarray:
    # to the nearest bfloat16 (ties to even), as float32: bfloat16 is float32's top 16 bits
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), x, rounded).astype(np.float32)


def round_to(x: np.ndarray, precision: str) -> np.ndarray:
    """``x`` rounded to ``precision`` (a name of :data:`FLOAT_PRECISIONS`), in ``x``'s own dtype."""
    if precision == "float32":
        return np.array(x, copy=True)
    if precision == "float16":
        with np.errstate(over="ignore"):  # beyond float16's range is infinite, as a cast makes it
            return x.astype(np.float16).astype(x.dtype)
    if precision == "bfloat16":
        return _round_bfloat16(x).astype(x.dtype, copy=False)
    raise ValueError(f"cast: unknown precision {precision!r} (one of {sorted(FLOAT_PRECISIONS)})")


def _check(p: Params) -> None:
    for side in ("source", "target"):
        if p[side] not in FLOAT_PRECISIONS:
            raise ValueError(f"cast: {side} {p[side]!r} is not one of {sorted(FLOAT_PRECISIONS)}")


def _cast_np(p: Params, x: np.ndarray) -> np.ndarray:
    _check(p)
    return round_to(x, p["target"])


def _cast_bytes(p: Params, ins: object, out: tuple[int, ...]) -> float:
    return float(math.prod(out))  # one conversion per element; what it costs is the bytes it moves


CAST = register(OpSpec(
    name="cast", inputs=("x",), params=(("source", "str"), ("target", "str")), elementwise=True,
    doc="x, held in precision source, rounded to precision target (ONNX Cast between float types); in eqsat's "
        "float32 IR: x rounded to target",
    shape_fn=lambda p, x: x,
    numpy_fn=_cast_np,
    modular_fn=None,
    flops_fn=_cast_bytes,
    export_fn=lambda p, ins, outs, ctx: [("Cast", list(ins), list(outs), {"to": ONNX_FLOAT_TYPES[p["target"]]})],
    shape_rules=S.same_as("x"),
    # a rounding: the verifier knows it only as a function of each element
    uninterpreted=Uninterpreted("elementwise"),
    ranks=Ranks(same=True), precision_param="target",
))


@importer("Cast")
def _import_cast(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    # between float types of a mixed-precision model, a change of precision; a cast of a float tensor to its own
    # type (exporters cast hidden states to float32 before an RMSNorm) is a reshape to the same shape: a view
    _, ins, outs, attrs = node
    if not ctx.is_float(ins[0]):
        return ctx.unsupported('a non-float input')
    source, target = ctx.given_dtype(ins[0]), ctx.given_dtype(outs[0])
    if source in FLOAT_PRECISIONS and target in FLOAT_PRECISIONS and source != target:
        return [("cast", {"source": source, "target": target}, [ins[0]], list(outs))]
    if int(attrs.get("to", 0)) != ONNX_FLOAT_TYPES["float32"]:
        return ctx.unsupported('a cast to another type than float32')
    return [("reshape", {"shape": tuple(ctx.shape(ins[0]))}, [ins[0]], list(outs))]
