"""Convolution: conv2d with bias and fused activation, kernel enlargement, a grouped convolution's kernel regrouped for
fewer groups (merge_gconv), and the NHWC layout variant."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from eqsat.ops import shapes as S
from eqsat.ops.core import (
    ACT_NONE,
    ACT_RELU,
    DimAxiom,
    ExportContext,
    GenContext,
    GeneratorForm,
    GenTensor,
    ImportContext,
    IRNode,
    OnnxNode,
    OpError,
    OpSpec,
    Params,
    Ranks,
    Shape,
    SymDim,
    SymShape,
    importer,
    register,
    require,
)
from eqsat.ops.families import relu_mod


def conv_out_size(size: int, k: int, stride: int, pad_total: int, dil: int) -> int:
    """A convolution's (or a pool's) output size along one spatial axis of input size ``size``."""
    return (size + pad_total - dil * (k - 1) - 1) // stride + 1


def patches(x: np.ndarray, kh: int, kw: int, strides: Shape, pads: Shape, dil: Shape,
             fill: Any = 0) -> np.ndarray:
    """Gather sliding windows: (N, C, H, W) -> (N, C, kh, kw, OH, OW)."""
    n, c, h, w = x.shape
    if x.dtype == object:  # np.pad would fill with numpy int64 scalars, which overflow in exact arithmetic
        xp = np.full((n, c, h + pads[0] + pads[2], w + pads[1] + pads[3]), fill, dtype=object)
        xp[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + w] = x
    else:
        xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])), constant_values=fill)
    oh = conv_out_size(h, kh, strides[0], pads[0] + pads[2], dil[0])
    ow = conv_out_size(w, kw, strides[1], pads[1] + pads[3], dil[1])
    out = np.empty((n, c, kh, kw, oh, ow), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            hs, ws = i * dil[0], j * dil[1]
            out[:, :, i, j] = xp[:, :, hs:hs + strides[0] * (oh - 1) + 1:strides[0],
                                 ws:ws + strides[1] * (ow - 1) + 1:strides[1]]
    return out


def _conv_core(p: Params, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    g = p["groups"]
    o, cg, kh, kw = w.shape
    cols = patches(x, kh, kw, p["strides"], p["pads"], p["dilations"])
    n, _, _, _, oh, ow = cols.shape
    og = o // g
    outs = []
    for gi in range(g):
        cg_cols = cols[:, gi * cg:(gi + 1) * cg].reshape(n, cg * kh * kw, oh * ow)
        wg = w[gi * og:(gi + 1) * og].reshape(og, cg * kh * kw)
        outs.append(np.matmul(wg, cg_cols))
    return np.concatenate(outs, axis=1).reshape(n, o, oh, ow)


# -- convolution -----------------------------------------------------------------------------------------

def _conv_shape(p: Params, x: Shape, w: Shape, b: Shape) -> Shape:
    require(len(x) == 4 and len(w) == 4, f"conv2d: needs 4-D input and kernel, got {x} and {w}")
    g = p["groups"]
    require(x[1] == w[1] * g, f"conv2d: input channels {x[1]} != kernel channels {w[1]} x groups {g}")
    require(w[0] % g == 0, f"conv2d: output channels {w[0]} not divisible by groups {g}")
    require(b == (w[0],), f"conv2d: bias shape {b} != ({w[0]},)")
    require(p["act"] in (ACT_NONE, ACT_RELU), f"conv2d: unknown activation {p['act']}")
    st, pd, dl = p["strides"], p["pads"], p["dilations"]
    oh = conv_out_size(x[2], w[2], st[0], pd[0] + pd[2], dl[0])
    ow = conv_out_size(x[3], w[3], st[1], pd[1] + pd[3], dl[1])
    require(oh > 0 and ow > 0, f"conv2d: empty output for input {x}, kernel {w}")
    return (x[0], w[0], oh, ow)


def _conv_np(p: Params, x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    y = _conv_core(p, x, w) + b.reshape(1, -1, 1, 1)
    if p["act"] == ACT_RELU:
        y = np.maximum(y, 0)
    return y.astype(x.dtype, copy=False)


def _conv_mod(p: Params, x: np.ndarray, w: np.ndarray, b: np.ndarray, m: int) -> np.ndarray:
    y = (_conv_core(p, np.asarray(x, dtype=object), np.asarray(w, dtype=object))
         + np.asarray(b, dtype=object).reshape(1, -1, 1, 1)) % m
    return relu_mod(y, m) if p["act"] == ACT_RELU else y


def _conv_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
    attrs = {"strides": list(p["strides"]), "pads": list(p["pads"]), "dilations": list(p["dilations"]),
             "group": p["groups"]}
    # a kernel with weight shape (O, C/g, kh, kw) is implied by the weight; the bias is always given
    if p["act"] == ACT_NONE:
        return [("Conv", ins, outs, attrs)]
    mid = ctx.fresh(outs[0] + "_preact")
    return [("Conv", ins, [mid], attrs), ("Relu", [mid], outs, {})]


def _conv_dim(size: S.Expr, i: int) -> S.Expr:
    # output size along spatial dim i (0: H, 1: W) of input size `size`, following conv_out_size
    k, pads = S.dim(S.shape("w"), 2 + i), S.param("pads")
    span = S.dim(S.param("dilations"), i) * (k - 1) + 1
    return (size + (S.dim(pads, i) + S.dim(pads, i + 2)) - span) // S.dim(S.param("strides"), i) + 1


def _conv_rules(channels_axis: int) -> tuple[S.ShapeRule, ...]:
    # NCHW (channels on axis 1) or NHWC (axis 3); the kernel is OIHW either way
    x, w = S.shape("x"), S.shape("w")
    spatial = (2, 3) if channels_axis == 1 else (1, 2)
    h, wd = (_conv_dim(S.dim(x, a), i) for i, a in enumerate(spatial))
    out = S.vec(S.dim(x, 0), S.dim(w, 0), h, wd) if channels_axis == 1 else S.vec(S.dim(x, 0), h, wd, S.dim(w, 0))
    return (S.rule(out, S.eq(S.rank(x), 4), S.eq(S.rank(w), 4),
                   S.eq(S.dim(x, channels_axis), S.param("groups") * S.dim(w, 1)),
                   S.eq(S.shape("b"), S.vec(S.dim(w, 0)))),)


# -- how the rule generator applies convolutions: "same" ones, a kernel's bias travelling with it ----------

#: The padding that keeps the spatial size, per (square) kernel size.
_SAME_PADS = {3: (1, 1, 1, 1), 1: (0, 0, 0, 0)}


def apply_same_conv(g: GenContext, x: GenTensor, k: GenTensor, act: int, groups: int,
                    groups_written: SymDim) -> GenTensor | None:
    """A stride-1 convolution of ``x`` keeping its spatial size with kernel ``k`` and its bias (``groups_written``:
    the group count as the rule writes it, a dimension expression for a depthwise convolution)."""
    if k.bias is None or x.bias is not None or len(x.shape) != 4:
        return None
    kh = k.shape[2]
    if k.shape[3] != kh or kh not in _SAME_PADS:
        return None
    params = {"strides": (1, 1), "pads": _SAME_PADS[kh], "dilations": (1, 1), "groups": groups, "act": act}
    t = g.apply("conv2d", params, [x, k, k.bias], pattern={"groups": groups_written})
    if t is not None:  # batch boundaries from the input, channel boundaries from the kernel's output channels
        t.bounds = {ax: e for ax, e in ((0, x.bounds.get(0)), (1, k.bounds.get(0))) if e is not None}
    return t


def _conv_form(act: int) -> GeneratorForm:
    def apply(g: GenContext, args: Sequence[GenTensor]) -> list[GenTensor] | None:
        t = apply_same_conv(g, args[0], args[1], act, 1, 1)
        return [t] if t is not None else None

    return GeneratorForm(apply, arity=2, domains=("conv",))


def _grouped_form(g: GenContext, args: Sequence[GenTensor]) -> list[GenTensor] | None:
    x, k = args  # two groups
    if k.bias is None or len(x.shape) != 4 or x.shape[1] != 2 * k.shape[1] or k.shape[0] % 2:
        return None
    t = apply_same_conv(g, x, k, ACT_NONE, 2, 2)
    return [t] if t is not None else None


def _conv_sym(p: Params, ins: Sequence[GenTensor]) -> SymShape | None:
    x, w = ins[0], ins[1]
    same = (p["strides"] == (1, 1) and p["dilations"] == (1, 1)
            and all(p["pads"][i] + p["pads"][i + 2] == w.shape[2 + i] - 1 for i in (0, 1)))
    return (x.sym[0], w.sym[0], x.sym[2], x.sym[3]) if same else None


#: Convolution properties for any strides, pads, dilations, activation (and group count), beside the core axioms
#: of stride-1 convolutions (``eqsat.rules.axioms``): quantified in Z3, validated on these values. Declared here, a
#: rule with a convolution is proved with them and one without never sees them.
_ANY_CONV1 = {"?st": ((1, 1), (2, 2)), "?pd": ((0, 0, 0, 0), (1, 1, 1, 1)), "?dl": ((1, 1),), "?act": (0, 1)}
_ANY_CONV = {**_ANY_CONV1, "?g": (1, 2)}
_CONV_AXIOMS = (
    ("conv-group-merge-any",
     "(concat 1 (conv2d ?st ?pd ?dl ?g ?act ?x ?w ?b) (conv2d ?st ?pd ?dl ?g ?act ?y ?v ?c))",
     "(conv2d ?st ?pd ?dl (* 2 ?g) ?act (concat 1 ?x ?y) (concat 0 ?w ?v) (concat 0 ?b ?c))",
     {"params": _ANY_CONV, "quantified": tuple(_ANY_CONV), "conditions": ("(= (shape ?w) (shape ?v))",),
      "doc": "two convolutions of g groups side by side are one of 2g groups, for kernels of equal shapes (a group "
             "takes an equal share of the channels)"}),
    ("conv-concat-out-any",
     "(concat 1 (conv2d ?st ?pd ?dl 1 ?act ?x ?w ?b) (conv2d ?st ?pd ?dl 1 ?act ?x ?v ?c))",
     "(conv2d ?st ?pd ?dl 1 ?act ?x (concat 0 ?w ?v) (concat 0 ?b ?c))",
     {"params": _ANY_CONV1, "quantified": tuple(_ANY_CONV1),
      "doc": "the output channels of two convolutions of one input are one convolution's with the kernels stacked"}),
)

_CONV_TERM = "(conv2d :pads ?pd :groups ?g :act ?act ?x ?w ?b)"
_CONV_DIM_PARAMS = {"?pd": ((0, 0, 0, 0), (1, 1, 1, 1)), "?g": (1,), "?act": (0, 1)}

CONV2D = register(OpSpec(
    name="conv2d", inputs=("x", "w", "b"),
    params=(("strides", "ints"), ("pads", "ints"), ("dilations", "ints"), ("groups", "int"), ("act", "int")),
    defaults={"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "groups": 1, "act": ACT_NONE},
    doc="2-D convolution NCHW with bias and fused activation (0 none, 1 relu); pads (top, left, bottom, right)",
    shape_fn=_conv_shape, numpy_fn=_conv_np, modular_fn=_conv_mod,
    flops_fn=lambda p, ins, out: 2 * math.prod(out) * ins[1][1] * ins[1][2] * ins[1][3],
    export_fn=_conv_export,
    runs_as=lambda p: [("conv2d", {**p, "act": ACT_NONE}, (0, 1, 2)), ("relu", {}, (-1,))] if p["act"] == ACT_RELU
    else None,
    # output channels of one input: kernels and biases stack, the output splits by channel
    sibling_merge=lambda p, ins: ((0, 0), 1) if p["groups"] == 1 else None,
    shape_rules=_conv_rules(1),
    generator_forms={"conv0": _conv_form(ACT_NONE), "conv1": _conv_form(ACT_RELU),
                     "convg2": GeneratorForm(_grouped_form, arity=2, domains=("conv",))},
    sym_shape=_conv_sym,
    dim_axioms=(DimAxiom("dim-conv-0", _CONV_TERM, 0, "(dim ?x 0)", _CONV_DIM_PARAMS),
                DimAxiom("dim-conv-1", _CONV_TERM, 1, "(dim ?w 0)", _CONV_DIM_PARAMS)),
    ranks=Ranks((4, 4, 1)), kernel_bias=(1, 2), heavy=True, axioms=_CONV_AXIOMS,
))


# -- convolution with a residual add (what onnxruntime runs Conv + Add (+ Relu) as) ----------------------------

def _conv_add_shape(p: Params, x: Shape, w: Shape, b: Shape, r: Shape) -> Shape:
    out = _conv_shape(p, x, w, b)
    require(r == out, f"conv2d_add: residual shape {r} != convolution output {out}")
    return out


def _conv_add_np(p: Params, x: np.ndarray, w: np.ndarray, b: np.ndarray, r: np.ndarray) -> np.ndarray:
    y = _conv_np({**p, "act": ACT_NONE}, x, w, b) + r
    return (np.maximum(y, 0) if p["act"] == ACT_RELU else y).astype(x.dtype, copy=False)


def _conv_add_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
    conv_out, sum_out = ctx.fresh(outs[0] + "_conv"), ctx.fresh(outs[0] + "_sum")
    conv = _conv_export({**p, "act": ACT_NONE}, ins[:3], [conv_out], ctx)
    if p["act"] == ACT_NONE:
        return [*conv, ("Add", [conv_out, ins[3]], outs, {})]
    return [*conv, ("Add", [conv_out, ins[3]], [sum_out], {}), ("Relu", [sum_out], outs, {})]


CONV2D_ADD = register(OpSpec(
    name="conv2d_add", inputs=("x", "w", "b", "r"), params=CONV2D.params, defaults=CONV2D.defaults,
    doc="conv2d plus a residual r of the output's shape, then the fused activation: act(conv(x, w, b) + r). "
        "onnxruntime runs Conv + Add (+ Relu) as one NCHWc kernel; eqsat imports the pair as this operator so it "
        "is priced so, and rules conv-add-fuse / conv-add-relu-fuse relate it to conv2d and ewadd",
    shape_fn=_conv_add_shape, numpy_fn=_conv_add_np, modular_fn=None,  # not a generator operator
    flops_fn=lambda p, ins, out: CONV2D.flops(p, ins[:3], out) + math.prod(out),
    export_fn=_conv_add_export,
    runs_as=lambda p: [("conv2d", {**p, "act": ACT_NONE}, (0, 1, 2)), ("ewadd", {}, (-1, 3))] + (
        [("relu", {}, (-1,))] if p["act"] == ACT_RELU else []),
    shape_rules=tuple(S.rule(r.result, *r.when, S.eq(S.shape("r"), r.result)) for r in _conv_rules(1)),
    heavy=True, fuses=("conv2d", "ewadd"),
))


def spatial_attrs(attrs: dict[str, Any], shape_w: Shape) -> tuple[Shape, Shape, Shape] | None:
    """An ONNX Conv's or pool's ``(strides, pads, dilations)`` for a 2-D kernel of shape ``shape_w``, defaults filled
    in; None for an ``auto_pad`` other than NOTSET or VALID, or attributes of another rank."""
    if attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID", b"NOTSET", b"VALID"):
        return None
    kh, kw = shape_w
    strides = tuple(attrs.get("strides", (1, 1)))
    pads = tuple(attrs.get("pads", (0, 0, 0, 0)))
    dil = tuple(attrs.get("dilations", (1, 1)))
    if len(strides) != 2 or len(pads) != 4 or len(dil) != 2:
        return None
    return strides, pads, dil


@importer("Conv")
def _import_conv(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    _, ins, outs, attrs = node
    x, w = ins[0], ins[1]
    if not all(ctx.is_float(i) for i in ins if i) or len(ctx.shape(x)) != 4:
        return ctx.unsupported('a non-float input or an input that is not 4-D (NCHW)')
    sw = ctx.shape(w)
    sp = spatial_attrs(attrs, sw[2:])
    if sp is None:
        return ctx.unsupported('auto_pad SAME_UPPER/SAME_LOWER, or strides/pads/dilations that are not 2-D')
    if len(ins) > 2 and ins[2]:
        b = ins[2]
    else:
        b = ctx.add_weight(np.zeros((sw[0],), dtype=np.float32), outs[0] + "_zero_bias")
    p = {"strides": sp[0], "pads": sp[1], "dilations": sp[2], "groups": int(attrs.get("group", 1)),
         "act": ACT_NONE}
    return [("conv2d", p, [x, w, b], list(outs))]


# -- enlarge ---------------------------------------------------------------------------------------------

def _enlarge_np(p: Params, w: np.ndarray) -> np.ndarray:
    kh, kw = p["kernel"]
    dh, dw = kh - w.shape[2], kw - w.shape[3]
    return np.pad(w, ((0, 0), (0, 0), (dh // 2, dh - dh // 2), (dw // 2, dw - dw // 2)))


def _enlarge_shape(p: Params, w: Shape) -> Shape:
    kh, kw = p["kernel"]
    require(len(w) == 4, f"enlarge: needs a 4-D kernel, got {w}")
    require(kh >= w[2] and kw >= w[3] and (kh - w[2]) % 2 == 0 and (kw - w[3]) % 2 == 0,
            f"enlarge: cannot centre kernel {w[2:]} in {kh}x{kw}")
    return (w[0], w[1], kh, kw)


def _enlarge_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
    # normally folded away (weights only); otherwise a zero Pad on the spatial dims
    raise OpError("enlarge on a non-constant tensor cannot be exported; it is folded when its input is a weight")


def _enlarge_form(g: GenContext, args: Sequence[GenTensor]) -> list[GenTensor] | None:
    w = args[0]
    if not w.is_var or w.bias is None or w.shape[2:] != (1, 1):  # a 1x1 kernel variable as a 3x3 one
        return None
    t = g.apply("enlarge", {"kernel": (3, 3)}, [w])
    if t is not None:
        t.bias = w.bias
        t.bounds = dict(w.bounds)
    return [t] if t is not None else None


ENLARGE = register(OpSpec(
    name="enlarge", inputs=("w",), params=(("kernel", "ints"),),
    doc="zero-pad a conv kernel (O, I, h, w) to (O, I, kh, kw), centred",
    shape_fn=_enlarge_shape, numpy_fn=_enlarge_np,
    modular_fn=lambda p, w, m: _enlarge_np(p, np.asarray(w, dtype=object)) % m,
    flops_fn=lambda p, ins, out: 0,
    export_fn=_enlarge_export,
    shape_rules=(S.rule(S.vec(S.dim(S.shape("w"), 0), S.dim(S.shape("w"), 1), S.dim(S.param("kernel"), 0),
                              S.dim(S.param("kernel"), 1)),
                        S.eq(S.rank(S.shape("w")), 4),
                        *(c for i in (0, 1) for c in (
                            S.ge(S.dim(S.param("kernel"), i), S.dim(S.shape("w"), 2 + i)),
                            S.eq(0, (S.dim(S.param("kernel"), i) - S.dim(S.shape("w"), 2 + i)) % 2)))),),
    generator_forms={"enlarge": GeneratorForm(_enlarge_form, domains=("conv",))},
    sym_shape=lambda p, ins: ins[0].sym[:2] + tuple(p["kernel"]),
    ranks=Ranks((4,)),
))


# -- merge_gconv: a grouped convolution's kernel for fewer, larger groups (block-diagonal) -------------------------

def _merge_gconv_split(p: Params, w: Shape) -> tuple[int, int, int, int]:
    """``(h, k, o, c)``: the group count after the merge, groups merged into one, output and input channels per
    group before it (for a kernel of shape ``w``)."""
    h, k = p["groups"], p["count"]
    return h, k, w[0] // (h * k), w[1]


def _merge_gconv_shape(p: Params, w: Shape) -> Shape:
    h, k = p["groups"], p["count"]
    require(len(w) == 4, f"merge_gconv: needs a 4-D kernel, got {w}")
    require(h > 0 and k > 0, f"merge_gconv: groups {h} and count {k} must be positive")
    require(w[0] % (h * k) == 0, f"merge_gconv: output channels {w[0]} not divisible by {h} x {k} groups")
    return (w[0], k * w[1], w[2], w[3])


def _merge_gconv_np(p: Params, w: np.ndarray) -> np.ndarray:
    h, k, o, c = _merge_gconv_split(p, w.shape)
    kh, kw = w.shape[2:]
    blocks = w.reshape(h, k, o, c, kh, kw)
    out = np.zeros((h, k, o, k, c, kh, kw), dtype=w.dtype)
    for s in range(k):  # the rows of the s-th merged group read its own input channels only
        out[:, s, :, s] = blocks[:, s]
    return out.reshape(w.shape[0], k * c, kh, kw)


def _merge_gconv_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
    # normally precomputed (a weight's); otherwise as written: the kernel's rows by group, times the block mask
    w = ctx.shape(ins[0])
    if w is None:
        raise OpError("merge_gconv: the kernel's shape is needed to write it")
    h, k, o, c = _merge_gconv_split(p, w)
    shape7 = ctx.add_initializer(np.array([h, k, o, 1, c, w[2], w[3]], dtype=np.int64), outs[0] + "_blocks")
    mask = ctx.add_initializer(np.eye(k, dtype=np.float32).reshape(1, k, 1, k, 1, 1, 1), outs[0] + "_mask")
    shape4 = ctx.add_initializer(np.array([w[0], k * c, w[2], w[3]], dtype=np.int64), outs[0] + "_shape")
    blocks, masked = ctx.fresh(outs[0] + "_by_group"), ctx.fresh(outs[0] + "_masked")
    return [("Reshape", [ins[0], shape7], [blocks], {}), ("Mul", [blocks, mask], [masked], {}),
            ("Reshape", [masked, shape4], outs, {})]


_W = S.shape("w")
#: A grouped convolution of ``groups * count`` groups is one of ``groups`` groups over the kernel this operator
#: makes (TASO's ``merge_gconv``). Quantified over every convolution parameter in Z3; validated on these values.
_MERGE_GCONV_AXIOM = (
    "conv-merge-gconv",
    "(conv2d ?st ?pd ?dl ?h ?act ?x (merge_gconv :groups ?h :count ?k ?w) ?b)",
    "(conv2d ?st ?pd ?dl (* ?h ?k) ?act ?x ?w ?b)",
    {"params": {"?st": ((1, 1), (2, 2)), "?pd": ((0, 0, 0, 0), (1, 1, 1, 1)), "?dl": ((1, 1),), "?h": (1, 2),
                "?k": (1, 2), "?act": (0, 1)},
     "quantified": ("?st", "?pd", "?dl", "?h", "?k", "?act"),
     "doc": "k adjacent groups of a grouped convolution are one group of its kernel made block-diagonal"})

MERGE_GCONV = register(OpSpec(
    name="merge_gconv", inputs=("w",), params=(("groups", "int"), ("count", "int")),
    doc="the kernel (O, C/G, kh, kw) of a convolution of G = groups * count groups as the kernel (O, count * C/G, "
        "kh, kw) of one of `groups` groups: each `count` adjacent groups become one, the kernel block-diagonal "
        "(zero where a row would read another old group's channels); TASO's merge_gconv. Weight-only work, "
        "precomputed at export",
    shape_fn=_merge_gconv_shape, numpy_fn=_merge_gconv_np,
    modular_fn=None,  # not a generator operator
    flops_fn=lambda p, ins, out: math.prod(out),
    export_fn=_merge_gconv_export,
    shape_rules=(S.rule(S.vec(S.dim(_W, 0), S.param("count") * S.dim(_W, 1), S.dim(_W, 2), S.dim(_W, 3)),
                        S.eq(S.rank(_W), 4), S.gt(S.param("groups"), 0), S.gt(S.param("count"), 0),
                        S.eq(S.dim(_W, 0) % (S.param("groups") * S.param("count")), 0)),),
    axioms=(_MERGE_GCONV_AXIOM,),
    ranks=Ranks((4,)),
))


def _nchw(s: Shape) -> Shape:
    return (s[0], s[3], s[1], s[2])


def _nhwc(s: Shape) -> Shape:
    return (s[0], s[2], s[3], s[1])


def _conv_nhwc_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
    x, w, b = ins
    xc, yc = ctx.fresh(outs[0] + "_nchw_in"), ctx.fresh(outs[0] + "_nchw_out")
    conv = _conv_export(p, [xc, w, b], [yc], ctx)
    return [("Transpose", [x], [xc], {"perm": [0, 3, 1, 2]}), *conv,
            ("Transpose", [yc], outs, {"perm": [0, 2, 3, 1]})]


CONV2D_NHWC = register(OpSpec(
    name="conv2d_nhwc", inputs=("x", "w", "b"), params=CONV2D.params, defaults=CONV2D.defaults,
    doc="layout variant of conv2d: input and output in NHWC (kernel OIHW); exported as Transpose-Conv-Transpose",
    shape_fn=lambda p, x, w, b: _nhwc(_conv_shape(p, _nchw(x) if len(x) == 4 else x, w, b)),
    numpy_fn=lambda p, x, w, b: np.ascontiguousarray(np.transpose(
        _conv_np(p, np.transpose(x, (0, 3, 1, 2)), w, b), (0, 2, 3, 1))),
    modular_fn=lambda p, x, w, b, m: np.transpose(
        _conv_mod(p, np.transpose(np.asarray(x, dtype=object), (0, 3, 1, 2)), w, b, m), (0, 2, 3, 1)),
    flops_fn=CONV2D.flops_fn, export_fn=_conv_nhwc_export,
    runs_as=lambda p: [("conv2d_nhwc", {**p, "act": ACT_NONE}, (0, 1, 2)), ("relu", {}, (-1,))]
    if p["act"] == ACT_RELU else None,
    shape_rules=_conv_rules(3), heavy=True,
))
