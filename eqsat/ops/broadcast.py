"""Broadcasting a tensor to a larger shape: ONNX ``Expand``.

Transformer exports use it on activations (grouped-query attention repeats each key/value head for the query
heads that share it: ``Unsqueeze`` -> ``Expand`` -> ``Reshape``) and on weights (ViT's class token, one per
image of the batch). As an opaque node it stopped every rewrite through it; as an operator the e-graph sees
through it, and its target shape follows the model's symbols like a reshape target.
"""

from __future__ import annotations

import math

import numpy as np

from eqsat.ops import shapes as S
from eqsat.ops.core import (
    MAX_RANK,
    ExportContext,
    ImportContext,
    IRNode,
    OnnxNode,
    OpSpec,
    Params,
    Shape,
    importer,
    register,
    require,
)
from eqsat.ops.elementwise import align_rank


def _expand_shape(p: Params, x: Shape) -> Shape:
    target = tuple(p["shape"])
    require(len(x) == len(target), f"expand: input rank {len(x)} != target rank {len(target)} "
            "(the importer aligns the ranks)")
    for dx, dt in zip(x, target, strict=True):
        # a symbolic size expands only to itself (== is identity), never to another size
        require(dx == dt or dx == 1, f"expand: {x} does not broadcast to {target}")
    return target


def _expand_rules() -> tuple[S.ShapeRule, ...]:
    x, t = S.shape("x"), S.param("shape")
    # each input dim is the target's or 1: a product that is zero (conditions have no "or")
    return tuple(S.rule(t, S.eq(S.rank(x), r), S.eq(S.rank(t), r),
                        *(S.eq(0, (S.dim(x, i) - S.dim(t, i)) * (S.dim(x, i) - 1)) for i in range(r)))
                 for r in range(MAX_RANK + 1))


def _expand_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
    shape = ctx.add_initializer(np.array(p["shape"], dtype=np.int64), outs[0] + "_shape")
    return [("Expand", [ins[0], shape], outs, {})]


EXPAND = register(OpSpec(
    name="expand", inputs=("x",), params=(("shape", "ints"),),
    doc="broadcast x to the target shape (same rank; each dimension of x is the target's or 1), ONNX Expand",
    shape_fn=_expand_shape,
    numpy_fn=lambda p, x: np.ascontiguousarray(np.broadcast_to(x, p["shape"])),
    modular_fn=lambda p, x, m: np.broadcast_to(np.asarray(x, dtype=object), p["shape"]) % m,
    flops_fn=lambda p, ins, out: 0,
    export_fn=_expand_export,
    shape_rules=_expand_rules(),
    shares_work=False,
))


@importer("Expand")
def _import_expand(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    _, ins, outs, _ = node
    if not ctx.is_float(ins[0]):
        return ctx.unsupported("a non-float input")
    if ctx.const(ins[1]) is None:
        return ctx.unsupported("a target shape that is computed at run time")
    try:
        out_shape = tuple(ctx.shape(outs[0]))
    except Exception:
        return ctx.unsupported("an output shape that shape inference does not give")
    if any(isinstance(d, int) and d < 0 for d in out_shape) or len(out_shape) < len(ctx.shape(ins[0])):
        return ctx.unsupported("an output shape that is dynamic")
    res: list[IRNode] = []
    x = align_rank(ctx, ins[0], len(out_shape), res)
    if math.prod(ctx.shape(ins[0])) == math.prod(out_shape):  # nothing repeated: a view
        return res + [("reshape", {"shape": out_shape}, [x], [outs[0]])]
    return res + [("expand", {"shape": out_shape}, [x], [outs[0]])]
