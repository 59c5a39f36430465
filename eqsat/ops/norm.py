"""Inference batch normalisation, the weight transforms that fold it into a convolution, layer normalisation,
and RMS normalisation (LLaMA-style decoders' norm), with the multi-node spellings of the last two."""

from __future__ import annotations

import math
from collections.abc import Callable

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
    WeightFold,
    importer,
    register,
    require,
)
from eqsat.ops.fusion import (
    Const,
    ConstVar,
    Fusion,
    FusionMatch,
    Pattern,
    Var,
    matched_shape,
    one_of,
    op,
    optional,
    register_fusion,
    scalar,
)

# -- batch normalisation (inference) ---------------------------------------------------------------------

def _bn_shape(p: Params, x: Shape, scale: Shape, bias: Shape, mean: Shape, var: Shape) -> Shape:
    require(len(x) >= 2, f"batchnorm: input rank must be >= 2, got {x}")
    for n, s in (("scale", scale), ("bias", bias), ("mean", mean), ("var", var)):
        require(s == (x[1],), f"batchnorm: {n} shape {s} != ({x[1]},)")
    return x


def _bn_np(p: Params, x: np.ndarray, scale: np.ndarray, bias: np.ndarray, mean: np.ndarray,
           var: np.ndarray) -> np.ndarray:
    shp = (1, -1) + (1,) * (x.ndim - 2)
    inv = scale / np.sqrt(var + p["epsilon"])
    return ((x - mean.reshape(shp)) * inv.reshape(shp) + bias.reshape(shp)).astype(x.dtype, copy=False)


BATCHNORM = register(OpSpec(
    name="batchnorm", inputs=("x", "scale", "bias", "mean", "var"), params=(("epsilon", "float"),),
    defaults={"epsilon": 1e-5}, doc="inference batch normalisation over axis 1",
    shape_fn=_bn_shape, numpy_fn=_bn_np, modular_fn=None,
    flops_fn=lambda p, ins, out: 2 * math.prod(out),
    export_fn=lambda p, ins, outs, ctx: [("BatchNormalization", ins, outs, {"epsilon": p["epsilon"]})],
    shape_rules=S.same_as("x"),
    # the kernel and bias of a convolution it follows, as onnxruntime folds them (defined below)
    weight_fold=WeightFold("conv2d", ("bnfold_w", "bnfold_b")),
))


@importer("BatchNormalization")
def _import_bn(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    _, ins, outs, attrs = node
    if len([o for o in outs if o]) != 1 or not all(ctx.is_float(i) for i in ins) or attrs.get("training_mode", 0):
        return ctx.unsupported('training mode, several outputs or a non-float input')
    if attrs.get("spatial", 1) != 1:
        return ctx.unsupported('spatial=0 (per-activation statistics)')
    return [("batchnorm", {"epsilon": float(attrs.get("epsilon", 1e-5))}, list(ins), [outs[0]])]


# -- batch-norm folding (weight transforms; precomputed at export when their inputs are weights) ---------

def _bn_factor(eps: float, scale: np.ndarray, var: np.ndarray) -> np.ndarray:
    return scale / np.sqrt(var + eps)


def _bnfold_export(which: str) -> Callable[[Params, list[str], list[str], ExportContext], list[OnnxNode]]:
    def export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
        eps = ctx.add_initializer(np.array(p["epsilon"], dtype=np.float32), outs[0] + "_eps")
        if which == "w":
            w, scale, var = ins
        else:
            b, scale, bias, mean, var = ins
        f = [ctx.fresh(outs[0] + s) for s in ("_v", "_sd", "_f")]
        nodes: list[OnnxNode] = [("Add", [var, eps], [f[0]], {}), ("Sqrt", [f[0]], [f[1]], {}),
                                 ("Div", [scale, f[1]], [f[2]], {})]
        if which == "w":
            shp = ctx.add_initializer(np.array([-1, 1, 1, 1], dtype=np.int64), outs[0] + "_shape")
            f4 = ctx.fresh(outs[0] + "_f4")
            return nodes + [("Reshape", [f[2], shp], [f4], {}), ("Mul", [w, f4], outs, {})]
        d, m = ctx.fresh(outs[0] + "_d"), ctx.fresh(outs[0] + "_m")
        return nodes + [("Sub", [b, mean], [d], {}), ("Mul", [d, f[2]], [m], {}), ("Add", [m, bias], outs, {})]

    return export


BNFOLD_W = register(OpSpec(
    name="bnfold_w", inputs=("w", "scale", "var"), params=(("epsilon", "float"),), defaults={"epsilon": 1e-5},
    doc="conv kernel with a following batch norm folded in: w * scale / sqrt(var + eps) per output channel",
    shape_fn=lambda p, w, s, v: (require(len(w) == 4 and s == (w[0],) and v == (w[0],),
                                         f"bnfold_w: bad shapes {w}, {s}, {v}"), w)[1],
    numpy_fn=lambda p, w, s, v: (w * _bn_factor(p["epsilon"], s, v).reshape(-1, 1, 1, 1)).astype(w.dtype),
    modular_fn=None, flops_fn=lambda p, ins, out: 2 * math.prod(out), export_fn=_bnfold_export("w"),
    shape_rules=(S.rule(S.shape("w"), S.eq(S.rank(S.shape("w")), 4),
                        S.eq(S.shape("scale"), S.vec(S.dim(S.shape("w"), 0))),
                        S.eq(S.shape("var"), S.shape("scale"))),),
))
BNFOLD_B = register(OpSpec(
    name="bnfold_b", inputs=("b", "scale", "bias", "mean", "var"), params=(("epsilon", "float"),),
    defaults={"epsilon": 1e-5}, doc="conv bias with a following batch norm folded in: (b - mean) * f + bias",
    shape_fn=lambda p, b, *rest: (require(all(r == b for r in rest) and len(b) == 1,
                                          f"bnfold_b: bad shapes {b}, {rest}"), b)[1],
    numpy_fn=lambda p, b, s, bias, m, v: ((b - m) * _bn_factor(p["epsilon"], s, v) + bias).astype(b.dtype),
    modular_fn=None, flops_fn=lambda p, ins, out: 4 * math.prod(out), export_fn=_bnfold_export("b"),
    shape_rules=(S.rule(S.shape("b"), S.eq(S.rank(S.shape("b")), 1),
                        *(S.eq(S.shape(n), S.shape("b")) for n in ("scale", "bias", "mean", "var"))),),
))


# -- layer normalisation -----------------------------------------------------------------------------------

def _normalized_shape(op: str, p: Params, x: Shape, **params: Shape) -> Shape:
    """The shape of a norm over the dimensions of ``x`` from ``p["axis"]`` on (``x``'s), its scale (and bias)
    ``params`` of exactly those dimensions."""
    ax = p["axis"]
    require(0 <= ax < len(x), f"{op}: axis {ax} out of range for {x}")
    for n, s in params.items():
        require(s == x[ax:], f"{op}: {n} shape {s} != {x[ax:]} (the normalized dimensions)")
    return x


def _norm_axis(ctx: ImportContext, x: str, attrs: dict) -> int | None:
    """The first normalized axis of an ONNX norm over ``x`` (its ``axis``, -1 by default, counted from the
    front); None, recorded as unsupported, for a rank-0 ``x``, an axis out of range or a ``stash_type`` other
    than float."""
    if int(attrs.get("stash_type", 1)) != 1:
        return ctx.unsupported("stash_type other than float (1)")
    shape = ctx.shape(x)
    if not shape:
        return ctx.unsupported("a rank-0 input")
    ax = int(attrs.get("axis", -1))
    ax = ax + len(shape) if ax < 0 else ax
    if not 0 <= ax < len(shape):
        return ctx.unsupported(f"axis {attrs.get('axis')} out of range for rank {len(shape)}")
    return ax


def _ln_np(p: Params, x: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
    axes = tuple(range(p["axis"], x.ndim))
    v = np.asarray(x, dtype=np.float64)
    d = v - v.mean(axis=axes, keepdims=True)
    y = d / np.sqrt((d * d).mean(axis=axes, keepdims=True) + p["epsilon"]) * scale + bias
    return y.astype(x.dtype, copy=False)


def _reduce_mean(ctx: ExportContext, x: str, out: str, axes: list[int]) -> OnnxNode:
    """ReduceMean keeping dims: axes as an attribute before opset 18, as an input from 18."""
    if ctx.opset >= 18:
        return ("ReduceMean", [x, ctx.add_initializer(np.array(axes, dtype=np.int64), out + "_axes")], [out],
                {"keepdims": 1})
    return ("ReduceMean", [x], [out], {"axes": list(axes), "keepdims": 1})


def _ln_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
    if ctx.opset >= 17:
        return [("LayerNormalization", list(ins), list(outs), {"axis": p["axis"], "epsilon": p["epsilon"]})]
    # Before opset 17: the decomposition. An exporter does not see the rank, so the normalized dimensions are
    # flattened into one, the last (Reshape's 0 copies a dimension): axis `axis` of a rank axis + 1 tensor.
    # The result takes x's shape back.
    x, scale, bias = ins
    last = [p["axis"]]
    y = outs[0]
    t = {s: ctx.fresh(f"{y}_{s}") for s in ("shape", "rows", "mean", "centered", "square", "var", "var_eps",
                                             "std", "normed", "scale_flat", "bias_flat", "scaled", "flat")}
    rows = ctx.add_initializer(np.array([0] * p["axis"] + [-1], dtype=np.int64), f"{y}_rows_shape")
    flat = ctx.add_initializer(np.array([-1], dtype=np.int64), f"{y}_flat_shape")
    eps = ctx.add_initializer(np.array(p["epsilon"], dtype=np.float32), f"{y}_epsilon")
    return [
        ("Shape", [x], [t["shape"]], {}),
        ("Reshape", [x, rows], [t["rows"]], {}),
        _reduce_mean(ctx, t["rows"], t["mean"], last),
        ("Sub", [t["rows"], t["mean"]], [t["centered"]], {}),
        ("Mul", [t["centered"], t["centered"]], [t["square"]], {}),
        _reduce_mean(ctx, t["square"], t["var"], last),
        ("Add", [t["var"], eps], [t["var_eps"]], {}),
        ("Sqrt", [t["var_eps"]], [t["std"]], {}),
        ("Div", [t["centered"], t["std"]], [t["normed"]], {}),
        ("Reshape", [scale, flat], [t["scale_flat"]], {}),
        ("Reshape", [bias, flat], [t["bias_flat"]], {}),
        ("Mul", [t["normed"], t["scale_flat"]], [t["scaled"]], {}),
        ("Add", [t["scaled"], t["bias_flat"]], [t["flat"]], {}),
        ("Reshape", [t["flat"], t["shape"]], [y], {}),
    ]


def _norm_rules(bias: bool) -> tuple[S.ShapeRule, ...]:
    # one rule per rank k of the normalized dimensions x[axis:]: scale (and bias) have exactly those
    x, scale, ax = S.shape("x"), S.shape("scale"), S.param("axis")
    return tuple(S.rule(x, S.ge(ax, 0), S.eq(S.rank(x) - ax, k), S.eq(S.rank(scale), k),
                        *(S.eq(S.dim(scale, i), S.dim(x, ax + i)) for i in range(k)),
                        *((S.eq(S.shape("bias"), scale),) if bias else ()))
                 for k in range(1, MAX_RANK + 1))


LAYERNORM = register(OpSpec(
    name="layernorm", inputs=("x", "scale", "bias"), params=(("axis", "int"), ("epsilon", "float")),
    defaults={"epsilon": 1e-5},
    doc="layer normalisation over the dimensions from axis on: (x - mean) / sqrt(var + epsilon) * scale + bias, "
        "with scale and bias of shape x.shape[axis:] (ONNX LayerNormalization-17, its first output)",
    shape_fn=lambda p, x, scale, bias: _normalized_shape("layernorm", p, x, scale=scale, bias=bias),
    numpy_fn=_ln_np, modular_fn=None,
    flops_fn=lambda p, ins, out: 8 * math.prod(out),
    export_fn=_ln_export,
    shape_rules=_norm_rules(bias=True),
    # transformers add the residual right before it; see OpSpec.measure_after
    measure_after="ewadd",
))


@importer("LayerNormalization")
def _import_ln(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    _, ins, outs, attrs = node
    # eqsat.onnx_io passes outputs nobody reads as "" (Mean and InvStdDev are statistics for training)
    if any(outs[1:]):
        return ctx.unsupported("its Mean or InvStdDev output is used (eqsat's layernorm has one output)")
    if len(ins) < 2 or not ins[1]:
        return ctx.unsupported("no Scale input")
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 and ins[2] else None
    if not all(ctx.is_float(i) for i in (x, scale, bias) if i):
        return ctx.unsupported("a non-float input")
    ax = _norm_axis(ctx, x, attrs)
    if ax is None:
        return None
    norm = tuple(ctx.shape(x)[ax:])
    if bias is None:
        bias = ctx.add_weight(np.zeros(norm, dtype=np.float32), outs[0] + "_zero_bias")
    names = _over_normalized(ctx, (scale, bias), norm)
    if names is None:
        return None
    return [("layernorm", {"axis": ax, "epsilon": float(attrs.get("epsilon", 1e-5))}, [x, *names], [outs[0]])]


def _over_normalized(ctx: ImportContext, inputs: tuple[str, ...], norm: Shape) -> list[str] | None:
    """A norm's scale (and bias) as tensors of the normalized dimensions' shape ``norm``: as given, or a
    constant that broadcasts to it expanded; None (recorded as unsupported) for anything else."""
    names = []
    for name in inputs:
        if tuple(ctx.shape(name)) == norm:
            names.append(name)
            continue
        c = ctx.const(name)
        try:
            full = None if c is None else np.broadcast_to(c, norm)
        except ValueError:
            full = None
        if full is None:
            return ctx.unsupported(f"a scale or bias input of shape {ctx.shape(name)} that is not "
                                   f"x.shape[axis:] = {norm} (nor a constant that broadcasts to it)")
        names.append(ctx.add_weight(np.array(full), name + "_full"))
    return names


# -- RMS normalisation -------------------------------------------------------------------------------------

def _rms_np(p: Params, x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    axes = tuple(range(p["axis"], x.ndim))
    v = np.asarray(x, dtype=np.float64)
    y = v / np.sqrt((v * v).mean(axis=axes, keepdims=True) + p["epsilon"]) * scale
    return y.astype(x.dtype, copy=False)


def _rms_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
    x, scale = ins
    if ctx.opset >= 23:
        return [("RMSNormalization", [x, scale], list(outs), {"axis": p["axis"], "epsilon": p["epsilon"]})]
    # Before opset 23: the decomposition in the one spelling onnxruntime fuses back into its
    # SimplifiedLayerNormalization kernel (x / sqrt(mean(x^2) + eps) * scale, with Pow and Div; the exporters'
    # Reciprocal or Div(1, .) forms it leaves as six kernels, about 3x slower). The normalized dimensions are the
    # last len(scale.shape).
    scale_shape = ctx.shape(scale)
    k = len(scale_shape) if scale_shape is not None else 1
    y = outs[0]
    t = {s: ctx.fresh(f"{y}_{s}") for s in ("square", "mean", "mean_eps", "rms", "normed")}
    two = ctx.add_initializer(np.array(2.0, dtype=np.float32), f"{y}_two")
    eps = ctx.add_initializer(np.array(p["epsilon"], dtype=np.float32), f"{y}_epsilon")
    return [
        ("Pow", [x, two], [t["square"]], {}),
        _reduce_mean(ctx, t["square"], t["mean"], list(range(-k, 0))),
        ("Add", [t["mean"], eps], [t["mean_eps"]], {}),
        ("Sqrt", [t["mean_eps"]], [t["rms"]], {}),
        ("Div", [x, t["rms"]], [t["normed"]], {}),
        ("Mul", [t["normed"], scale], [y], {}),
    ]


RMSNORM = register(OpSpec(
    name="rmsnorm", inputs=("x", "scale"), params=(("axis", "int"), ("epsilon", "float")),
    defaults={"epsilon": 1e-5},
    doc="RMS normalisation over the dimensions from axis on: x / sqrt(mean(x^2) + epsilon) * scale, with scale "
        "of shape x.shape[axis:] (ONNX RMSNormalization-23; LLaMA-style decoders' norm)",
    shape_fn=lambda p, x, scale: _normalized_shape("rmsnorm", p, x, scale=scale), numpy_fn=_rms_np, modular_fn=None,
    flops_fn=lambda p, ins, out: 4 * math.prod(out),
    export_fn=_rms_export,
    shape_rules=_norm_rules(bias=False),
))


@importer("RMSNormalization")
def import_rmsnorm(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    """ONNX ``RMSNormalization`` (and onnxruntime's ``SimplifiedLayerNormalization``, its semantics) as rmsnorm."""
    _, ins, outs, attrs = node
    if len(ins) < 2 or not all(ctx.is_float(i) for i in ins[:2]):
        return ctx.unsupported("no scale input, or a non-float input")
    x = ins[0]
    ax = _norm_axis(ctx, x, attrs)
    if ax is None:
        return None
    names = _over_normalized(ctx, (ins[1],), tuple(ctx.shape(x)[ax:]))
    if names is None:
        return None
    return [("rmsnorm", {"axis": ax, "epsilon": float(attrs.get("epsilon", 1e-5))}, [x, *names], [outs[0]])]


# -- the norms' multi-node spellings -----------------------------------------------------------------------
#
# Exporters below opset 17 write a layer norm out (torch: ReduceMean(x) over the last axes, keeping them -> Sub(x,
# mean) -> Pow(d, 2) or Mul(d, d) -> ReduceMean over the same axes -> Add eps -> Sqrt -> Div(d, std) -> Mul scale
# -> Add bias, the last two optional), and LLaMA-style decoders an RMS norm (Pow(x, 2) or Mul(x, x) -> ReduceMean
# over the last axes -> Add eps -> Sqrt -> Div(x, rms), Mul(x, Reciprocal(rms)) or Mul(x, Div(1, rms)) -> an
# optional float-to-float Cast -> an optional Mul scale). Each collapses to one LayerNormalization or
# RMSNormalization node (whatever the model's opset) where its epsilon is a finite constant >= 0 and its scale and
# bias are constants that vary only along the normalized axes.

_X = Var("x")


def _kept_mean_axes(m: FusionMatch, name: str, rank: int) -> tuple[int, ...] | None:
    """The axes (non-negative, ascending) of the matched ``ReduceMean`` ``name`` where it keeps them, from its
    attribute (below opset 18) or its constant input (from 18); None for anything else."""
    node = m.node(name)
    if node is None:
        return None
    _, ins, _, attrs = node
    if int(attrs.get("keepdims", 1)) != 1:
        return None
    if len(ins) > 1 and ins[1]:
        c = m.const(ins[1])
        if c is None or c.dtype.kind not in "iu":
            return None
        axes = [int(a) for a in c.reshape(-1)]
    else:
        axes = [int(a) for a in attrs.get("axes", [])]
    if not axes:
        if int(attrs.get("noop_with_empty_axes", 0)):
            return None
        axes = list(range(rank))
    if any(not -rank <= a < rank for a in axes):
        return None
    norm = sorted({a + rank if a < 0 else a for a in axes})
    return tuple(norm) if len(norm) == len(axes) else None


def _over_normalized_axes(c: np.ndarray | None, shape: Shape, axis: int) -> np.ndarray | None:
    """A float constant that, broadcast against ``x`` of ``shape``, varies only along the dimensions from ``axis``
    on: its values over ``shape[axis:]``; None for anything else."""
    if c is None or c.dtype.kind != "f" or c.ndim > len(shape):
        return None
    cs = (1,) * (len(shape) - c.ndim) + tuple(c.shape)
    if any(d != 1 for d in cs[:axis]) or any(d not in (1, s) for d, s in zip(cs[axis:], shape[axis:], strict=True)):
        return None
    return np.ascontiguousarray(np.broadcast_to(c.reshape(cs[axis:]), shape[axis:]))


def _fused_norm(m: FusionMatch) -> tuple[Shape, int, float] | None:
    """A matched norm's input shape, first normalized axis and epsilon where it is one: means over the last axes
    (the same ones twice in a layer norm), an epsilon >= 0, and the scale and bias over the normalized axes."""
    shape = matched_shape(m, "x")
    if not shape:
        return None
    rank = len(shape)
    axes = _kept_mean_axes(m, "mean", rank)
    if axes is None or axes != tuple(range(rank - len(axes), rank)):
        return None
    if m.node("variance") is not None and _kept_mean_axes(m, "variance", rank) != axes:
        return None
    eps = scalar(m, "epsilon")
    if eps is None or not (math.isfinite(eps) and eps >= 0):
        return None
    axis = rank - len(axes)
    for part in ("scale", "bias"):
        t = m.tensor(part)
        if t is not None and _over_normalized_axes(m.const(t), shape, axis) is None:
            return None
    return shape, axis, eps


def _norm_replacement(op_type: str) -> Callable[[FusionMatch], OnnxNode | None]:
    """The node a matched norm becomes: x, the scale (ones where the pattern has none) and the bias where it has
    one, each a constant of the normalized dimensions' shape (a new one where the pattern's has another shape)."""

    def replacement(m: FusionMatch) -> OnnxNode | None:
        found = _fused_norm(m)
        if found is None:
            return None
        shape, axis, eps = found
        norm = tuple(shape[axis:])
        names = [m.tensor("x")]
        for part in ("scale", "bias"):
            t = m.tensor(part)
            c = m.const(t) if t is not None else None
            if t is not None and c is not None and tuple(c.shape) == norm:
                name: str | None = t
            elif c is not None:
                name = m.add_const(_over_normalized_axes(c, shape, axis), f"{m.output}_{part}")
            elif part == "scale":
                name = m.add_const(np.ones(norm, dtype=np.float32), f"{m.output}_unit_scale")
            else:
                continue  # no bias: LayerNormalization's is optional (and an RMS norm has none)
            if name is None:
                return None
            names.append(name)
        return (op_type, names, [m.output], {"axis": axis - len(shape), "epsilon": eps})

    return replacement


def _root_mean_square(t: Pattern, mean: str) -> Pattern:
    """``sqrt(mean(t^2) + eps)``, the square written ``Pow(t, 2)`` or ``Mul(t, t)``."""
    square = one_of(op.Pow(t, Const(2.0, kinds="fiu")), op.Mul(t, t))
    return op.Sqrt(op.Add(op.ReduceMean(square, name=mean, other_inputs=True), ConstVar("epsilon", scalar=True)))


def _scaled(t: Pattern) -> Pattern:
    return op.Mul(t, ConstVar("scale"))


_CENTERED = op.Sub(_X, op.ReduceMean(_X, name="mean", other_inputs=True))
register_fusion(Fusion(  # before the RMS norm: its pattern is this one's tail, with x - mean for x
    name="layernorm", op="layernorm",
    pattern=optional(optional(op.Div(_CENTERED, _root_mean_square(_CENTERED, "variance")), _scaled),
                     lambda t: op.Add(t, ConstVar("bias"))),
    check=lambda m: _fused_norm(m) is not None, replacement=_norm_replacement("LayerNormalization")))

_RMS = _root_mean_square(_X, "mean")


def _rms_check(m: FusionMatch) -> bool:
    cast = m.node("cast")  # a copy only from float32 to float32
    return _fused_norm(m) is not None and (cast is None or m.is_float(cast[1][0]))


register_fusion(Fusion(
    name="rmsnorm", op="rmsnorm",
    pattern=optional(optional(one_of(op.Div(_X, _RMS), op.Mul(_X, op.Reciprocal(_RMS)),
                                     op.Mul(_X, op.Div(Const(1.0), _RMS))),
                              lambda t: op.Cast(t, name="cast", attrs={"to": 1})), _scaled),
    check=_rms_check, replacement=_norm_replacement("RMSNormalization")))
