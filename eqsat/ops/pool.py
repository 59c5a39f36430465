"""2-D max and average pooling (and the global pools, imported as full-window pools)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from eqsat.ops import shapes as S
from eqsat.ops.conv import conv_out_size, patches, spatial_attrs
from eqsat.ops.core import (
    ExportContext,
    GenContext,
    GeneratorForm,
    GenTensor,
    ImportContext,
    IRNode,
    OnnxNode,
    OpSpec,
    Params,
    Ranks,
    Shape,
    SymShape,
    Z3Context,
    importer,
    register,
    require,
)
from eqsat.ops.families import same_shape_dim_axioms

# -- pools -----------------------------------------------------------------------------------------------

def _pool_shape(p: Params, x: Shape) -> Shape:
    require(len(x) == 4, f"pool: needs a 4-D input, got {x}")
    kh, kw = p["kernel"]
    st, pd = p["strides"], p["pads"]
    oh = conv_out_size(x[2], kh, st[0], pd[0] + pd[2], 1)
    ow = conv_out_size(x[3], kw, st[1], pd[1] + pd[3], 1)
    require(oh > 0 and ow > 0, f"pool: empty output for {x}")
    return (x[0], x[1], oh, ow)


def _maxpool_np(p: Params, x: np.ndarray) -> np.ndarray:
    fill = -np.inf if x.dtype != object else -1
    cols = patches(x, *p["kernel"], p["strides"], p["pads"], (1, 1), fill=fill)
    return cols.max(axis=(2, 3)).astype(x.dtype, copy=False)


def _avgpool_parts(p: Params, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    cols = patches(x, *p["kernel"], p["strides"], p["pads"], (1, 1))
    total = cols.sum(axis=(2, 3))
    if p["count_include_pad"]:
        count = np.full(total.shape[2:], p["kernel"][0] * p["kernel"][1], dtype=np.int64)
    else:
        ones = np.ones((1, 1) + x.shape[2:], dtype=np.int64)
        count = patches(ones, *p["kernel"], p["strides"], p["pads"], (1, 1)).sum(axis=(2, 3))[0, 0]
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


# -- what the rule generator and verifier read -------------------------------------------------------------

def _keeps_size(p: Params) -> bool:
    """A stride-1 window padded by its size less one: the output has the input's spatial size."""
    return tuple(p["strides"]) == (1, 1) and all(p["pads"][i] + p["pads"][i + 2] == p["kernel"][i] - 1 for i in (0, 1))


def _pool_sym(p: Params, ins: Sequence[GenTensor]) -> SymShape | None:
    return ins[0].sym if _keeps_size(p) else None  # other sizes are not sums of the input's dimensions


def _pool_form(name: str, params: Params) -> GeneratorForm:
    """The generator's pool: a 3x3 window keeping the size, on activations (not kernels)."""
    def apply(g: GenContext, args: Sequence[GenTensor]) -> list[GenTensor] | None:
        x = args[0]
        if x.bias is not None or len(x.shape) != 4:
            return None
        t = g.apply(name, params, [x])
        if t is not None:  # batch and channel boundaries stay; a spatial one is blurred by the window
            t.bounds = {ax: e for ax, e in x.bounds.items() if ax in (0, 1)}
        return [t] if t is not None else None

    return GeneratorForm(apply, domains=("conv",))


def _maxpool_z3(z: Z3Context, p: Params, x: np.ndarray) -> np.ndarray:
    # a max is not a polynomial: a chain of if-then-else over the window's entries (padding left out)
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), pads = p["kernel"], p["strides"], p["pads"]
    out = np.empty(_pool_shape(p, x.shape), dtype=object)
    for i, j, a, b in itertools.product(range(n), range(c), range(out.shape[2]), range(out.shape[3])):
        rows, cols = range(a * sh - pads[0], a * sh - pads[0] + kh), range(b * sw - pads[1], b * sw - pads[1] + kw)
        vals = [x[i, j, r, s] for r in rows for s in cols if 0 <= r < h and 0 <= s < w]
        m = vals[0]
        for v in vals[1:]:
            m = z.if_then_else(v > m, v, m)
        out[i, j, a, b] = m
    return out


def _avgpool_z3(z: Z3Context, p: Params, x: np.ndarray) -> np.ndarray:
    # the sum times the exact reciprocal of the count (numpy would divide by a machine integer)
    total, count = _avgpool_parts(p, x)
    out = z.reals(total)
    for idx in np.ndindex(*out.shape):
        out[idx] = out[idx] * (z.real(1) / int(count[idx[2:]]))
    return out


#: The generator's pools (and their axioms'): 3x3 windows that keep the size.
_SAME3 = {"kernel": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1)}
_SAME3_TEXT = ":kernel [3 3] :strides [1 1] :pads [1 1 1 1]"


_POOL_PARAMS = (("kernel", "ints"), ("strides", "ints"), ("pads", "ints"))
MAXPOOL = register(OpSpec(
    name="maxpool", inputs=("x",), params=_POOL_PARAMS, doc="2-D max pooling",
    defaults={"pads": (0, 0, 0, 0)},
    shape_fn=_pool_shape, numpy_fn=_maxpool_np,
    modular_fn=lambda p, x, m: _maxpool_np(p, np.asarray(x, dtype=object)) % m,
    flops_fn=lambda p, ins, out: math.prod(out) * p["kernel"][0] * p["kernel"][1],
    export_fn=_pool_export("MaxPool"), shape_rules=_pool_rules(),
    generator_forms={"maxpool": _pool_form("maxpool", _SAME3)}, sym_shape=_pool_sym,
    z3_fn=_maxpool_z3, dim_axioms=same_shape_dim_axioms("maxpool", f"(maxpool {_SAME3_TEXT} ?a)"), ranks=Ranks((4,)),
))
AVGPOOL = register(OpSpec(
    name="avgpool", inputs=("x",), params=_POOL_PARAMS + (("count_include_pad", "int"),),
    doc="2-D average pooling", defaults={"pads": (0, 0, 0, 0), "count_include_pad": 0},
    shape_fn=_pool_shape, numpy_fn=_avgpool_np, modular_fn=_avgpool_mod,
    flops_fn=lambda p, ins, out: math.prod(out) * p["kernel"][0] * p["kernel"][1],
    export_fn=_pool_export("AveragePool"), shape_rules=_pool_rules(),
    # counting the padding, so that it equals a depthwise convolution with C_pool (eqsat.ops.consts)
    generator_forms={"avgpool": _pool_form("avgpool", {**_SAME3, "count_include_pad": 1})}, sym_shape=_pool_sym,
    z3_fn=_avgpool_z3, ranks=Ranks((4,)),
    dim_axioms=same_shape_dim_axioms("avgpool", f"(avgpool {_SAME3_TEXT} :count_include_pad 1 ?a)"),
))


@importer("MaxPool", "AveragePool")
def _import_pool(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    op_type, ins, outs, attrs = node
    live_outs = [o for o in outs if o]
    if len(live_outs) != 1 or outs[0] == "" or not ctx.is_float(ins[0]) or len(ctx.shape(ins[0])) != 4:
        return ctx.unsupported("MaxPool's indices output is used, or the input is not 4-D float")
    if attrs.get("ceil_mode", 0) or attrs.get("storage_order", 0):
        return ctx.unsupported('ceil_mode or storage_order')
    sp = spatial_attrs(attrs, tuple(attrs["kernel_shape"]))
    if sp is None or sp[2] != (1, 1):
        return ctx.unsupported('auto_pad SAME_*, or dilations')
    p: Params = {"kernel": tuple(attrs["kernel_shape"]), "strides": sp[0], "pads": sp[1]}
    if op_type == "AveragePool":
        p["count_include_pad"] = int(attrs.get("count_include_pad", 0))
        return [("avgpool", p, [ins[0]], [outs[0]])]
    return [("maxpool", p, [ins[0]], [outs[0]])]


@importer("GlobalAveragePool", "GlobalMaxPool")
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
