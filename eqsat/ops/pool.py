"""2-D max and average pooling (and the global pools, imported as full-window pools)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from eqsat.ops import shapes as S
from eqsat.ops.conv import _conv_out, _patches, _spatial_attrs
from eqsat.ops.core import (
    ExportContext,
    ImportContext,
    IRNode,
    OnnxNode,
    OpSpec,
    Params,
    Shape,
    _importer,
    _register,
    require,
)

# -- pools -----------------------------------------------------------------------------------------------

def _pool_shape(p: Params, x: Shape) -> Shape:
    require(len(x) == 4, f"pool: needs a 4-D input, got {x}")
    kh, kw = p["kernel"]
    st, pd = p["strides"], p["pads"]
    oh = _conv_out(x[2], kh, st[0], pd[0] + pd[2], 1)
    ow = _conv_out(x[3], kw, st[1], pd[1] + pd[3], 1)
    require(oh > 0 and ow > 0, f"pool: empty output for {x}")
    return (x[0], x[1], oh, ow)


def _maxpool_np(p: Params, x: np.ndarray) -> np.ndarray:
    fill = -np.inf if x.dtype != object else -1
    cols = _patches(x, *p["kernel"], p["strides"], p["pads"], (1, 1), fill=fill)
    return cols.max(axis=(2, 3)).astype(x.dtype, copy=False)


def _avgpool_parts(p: Params, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    cols = _patches(x, *p["kernel"], p["strides"], p["pads"], (1, 1))
    total = cols.sum(axis=(2, 3))
    if p["count_include_pad"]:
        count = np.full(total.shape[2:], p["kernel"][0] * p["kernel"][1], dtype=np.int64)
    else:
        ones = np.ones((1, 1) + x.shape[2:], dtype=np.int64)
        count = _patches(ones, *p["kernel"], p["strides"], p["pads"], (1, 1)).sum(axis=(2, 3))[0, 0]
    return total, count


def _avgpool_np(p: Params, x: np.ndarray) -> np.ndarray:
    total, count = _avgpool_parts(p, x)
    return (total / count).astype(x.dtype, copy=False)


def _avgpool_mod(p: Params, x: np.ndarray, m: int) -> np.ndarray:
    total, count = _avgpool_parts(p, np.asarray(x, dtype=object))
    inv = np.vectorize(lambda c: pow(int(c), -1, m), otypes=[object])(count)
    return (total * inv) % m


def _pool_export(onnx_type: str) -> Callable[[Params, list[str], list[str], ExportContext], list[OnnxNode]]:
    def export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
        x = ctx.shape(ins[0])
        if x is not None and tuple(p["kernel"]) == tuple(x[2:]) and not any(p["pads"]):
            # a window over the whole input is the global pool (what the importer read it from): onnxruntime
            # runs AveragePool from opset 19 on with a generic kernel, 20x slower on a 13x13 window
            return [(f"Global{onnx_type}", ins, outs, {})]
        attrs: dict[str, Any] = {"kernel_shape": list(p["kernel"]), "strides": list(p["strides"]),
                                 "pads": list(p["pads"])}
        if onnx_type == "AveragePool":
            attrs["count_include_pad"] = p["count_include_pad"]
        return [(onnx_type, ins, outs, attrs)]

    return export


def _pool_rules() -> tuple[S.ShapeRule, ...]:
    x, pads = S.shape("x"), S.param("pads")

    def out(i: int) -> S.Expr:
        size = S.dim(x, 2 + i) + (S.dim(pads, i) + S.dim(pads, i + 2)) - S.dim(S.param("kernel"), i)
        return size // S.dim(S.param("strides"), i) + 1

    return (S.rule(S.vec(S.dim(x, 0), S.dim(x, 1), out(0), out(1)), S.eq(S.rank(x), 4)),)


_POOL_PARAMS = (("kernel", "ints"), ("strides", "ints"), ("pads", "ints"))
MAXPOOL = _register(OpSpec(
    name="maxpool", inputs=("x",), params=_POOL_PARAMS, doc="2-D max pooling",
    defaults={"pads": (0, 0, 0, 0)},
    shape_fn=_pool_shape, numpy_fn=_maxpool_np,
    modular_fn=lambda p, x, m: _maxpool_np(p, np.asarray(x, dtype=object)) % m,
    flops_fn=lambda p, ins, out: math.prod(out) * p["kernel"][0] * p["kernel"][1],
    export_fn=_pool_export("MaxPool"), shape_rules=_pool_rules(),
))
AVGPOOL = _register(OpSpec(
    name="avgpool", inputs=("x",), params=_POOL_PARAMS + (("count_include_pad", "int"),),
    doc="2-D average pooling", defaults={"pads": (0, 0, 0, 0), "count_include_pad": 0},
    shape_fn=_pool_shape, numpy_fn=_avgpool_np, modular_fn=_avgpool_mod,
    flops_fn=lambda p, ins, out: math.prod(out) * p["kernel"][0] * p["kernel"][1],
    export_fn=_pool_export("AveragePool"), shape_rules=_pool_rules(),
))


@_importer("MaxPool", "AveragePool")
def _import_pool(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    op_type, ins, outs, attrs = node
    live_outs = [o for o in outs if o]
    if len(live_outs) != 1 or outs[0] == "" or not ctx.is_float(ins[0]) or len(ctx.shape(ins[0])) != 4:
        return ctx.unsupported("MaxPool's indices output is used, or the input is not 4-D float")
    if attrs.get("ceil_mode", 0) or attrs.get("storage_order", 0):
        return ctx.unsupported('ceil_mode or storage_order')
    sp = _spatial_attrs(attrs, tuple(attrs["kernel_shape"]))
    if sp is None or sp[2] != (1, 1):
        return ctx.unsupported('auto_pad SAME_*, or dilations')
    p: Params = {"kernel": tuple(attrs["kernel_shape"]), "strides": sp[0], "pads": sp[1]}
    if op_type == "AveragePool":
        p["count_include_pad"] = int(attrs.get("count_include_pad", 0))
        return [("avgpool", p, [ins[0]], [outs[0]])]
    return [("maxpool", p, [ins[0]], [outs[0]])]


@_importer("GlobalAveragePool", "GlobalMaxPool")
def _import_global_pool(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    op_type, ins, outs, _ = node
    shape = ctx.shape(ins[0])
    if not ctx.is_float(ins[0]) or len(shape) != 4:
        return ctx.unsupported('a non-float input or an input that is not 4-D')
    p: Params = {"kernel": tuple(shape[2:]), "strides": (1, 1), "pads": (0, 0, 0, 0)}
    if op_type == "GlobalAveragePool":
        p["count_include_pad"] = 0
        return [("avgpool", p, [ins[0]], list(outs))]
    return [("maxpool", p, [ins[0]], list(outs))]
