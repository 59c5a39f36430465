"""Operators that move data without arithmetic: transpose, reshape, concat, split, constant padding."""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from eqsat.ops import shapes as S
from eqsat.ops.core import (
    MAX_RANK,
    DimAxiom,
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
    dim_add,
    dim_sub,
    importer,
    register,
    require,
)
from eqsat.ops.elementwise import apply_equal_shapes

# -- transpose / reshape ---------------------------------------------------------------------------------

def _transpose_shape(p: Params, x: Shape) -> Shape:
    perm = p["perm"]
    require(sorted(perm) == list(range(len(x))), f"transpose: perm {perm} invalid for rank {len(x)}")
    return tuple(x[i] for i in perm)


def _transpose_rules() -> tuple[S.ShapeRule, ...]:
    x, perm = S.shape("x"), S.param("perm")
    return tuple(S.rule(S.vec(*(S.dim(x, S.dim(perm, i)) for i in range(r))), S.eq(S.rank(x), r), S.eq(S.rank(perm), r))
                 for r in range(1, MAX_RANK + 1))


#: The rule generator's templates of rank-3 transposes (attention heads), by name.
TRANSPOSES3 = {"t021": (0, 2, 1), "t102": (1, 0, 2), "t120": (1, 2, 0), "t201": (2, 0, 1), "t210": (2, 1, 0)}


def _transpose2_form(g: GenContext, args: Sequence[GenTensor]) -> list[GenTensor] | None:
    a = args[0]
    if len(a.shape) != 2:
        return None
    t = g.apply("transpose", {"perm": (1, 0)}, [a])
    if t is not None:
        t.bounds = {1 - ax: e for ax, e in a.bounds.items()}  # a row boundary becomes a column boundary
    return [t] if t is not None else None


def _transpose3_form(perm: tuple[int, ...]) -> GeneratorForm:
    def apply(g: GenContext, args: Sequence[GenTensor]) -> list[GenTensor] | None:
        if len(args[0].shape) != 3:
            return None
        t = g.apply("transpose", {"perm": perm}, args)
        return [t] if t is not None else None

    return GeneratorForm(apply, domains=("heads",))


TRANSPOSE = register(OpSpec(
    name="transpose", inputs=("x",), params=(("perm", "ints"),), doc="permute dimensions",
    shape_fn=_transpose_shape,
    numpy_fn=lambda p, x: np.ascontiguousarray(np.transpose(x, p["perm"])),
    modular_fn=lambda p, x, m: np.transpose(np.asarray(x, dtype=object), p["perm"]) % m,
    flops_fn=lambda p, ins, out: 0,
    export_fn=lambda p, ins, outs, ctx: [("Transpose", ins, outs, {"perm": list(p["perm"])})],
    shape_rules=_transpose_rules(),
    generator_forms={"transpose": GeneratorForm(_transpose2_form, domains=("mat",)),
                     **{name: _transpose3_form(perm) for name, perm in TRANSPOSES3.items()}},
    sym_shape=lambda p, ins: tuple(ins[0].sym[i] for i in p["perm"]),
    dim_axioms=(DimAxiom("dim-transpose-0", "(transpose [1 0] ?a)", 0, "(dim ?a 1)"),
                DimAxiom("dim-transpose-1", "(transpose [1 0] ?a)", 1, "(dim ?a 0)")),
    ranks=Ranks(same=True, param="perm"), shares_work=False, permutes="perm",
))


@importer("Transpose")
def _import_transpose(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    _, ins, outs, attrs = node
    if not ctx.is_float(ins[0]):
        return ctx.unsupported('a non-float input')
    rank = len(ctx.shape(ins[0]))
    perm = tuple(attrs.get("perm", tuple(reversed(range(rank)))))
    return [("transpose", {"perm": perm}, [ins[0]], list(outs))]


def _reshape_shape(p: Params, x: Shape) -> Shape:
    shp = p["shape"]
    require(all(d >= 0 for d in shp), f"reshape: target {shp} must be fully resolved")
    require(math.prod(shp) == math.prod(x), f"reshape: cannot reshape {x} to {shp}")
    return shp


def _reshape_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
    shape = ctx.add_initializer(np.array(p["shape"], dtype=np.int64), outs[0] + "_shape")
    return [("Reshape", [ins[0], shape], outs, {})]


def _reshape_form(g: GenContext, args: Sequence[GenTensor]) -> list[GenTensor] | None:
    # to the domain's target-shape parameter variable, so that the rules hold for any target
    target = g.shape_parameter(args[0])
    if target is None:
        return None
    name, value = target
    t = g.apply("reshape", {"shape": value}, args, pattern={"shape": name})
    return [t] if t is not None else None


RESHAPE = register(OpSpec(
    name="reshape", inputs=("x",), params=(("shape", "ints"),), doc="reshape to a static shape",
    shape_fn=_reshape_shape,
    numpy_fn=lambda p, x: np.reshape(x, p["shape"]),
    modular_fn=lambda p, x, m: np.reshape(np.asarray(x, dtype=object), p["shape"]) % m,
    flops_fn=lambda p, ins, out: 0,
    export_fn=_reshape_export,
    shape_rules=(S.rule(S.param("shape")),),
    # to the heads domain's target-shape parameter; its symbolic shape is the concrete target
    generator_forms={"reshape": GeneratorForm(_reshape_form, domains=("heads",))},
    shares_work=False, view=True,
))


@importer("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def _import_reshape(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    # every shape-only op with a statically known output is a reshape; the output shape comes from
    # onnx shape inference via ctx (it is the node's only output)
    _, ins, outs, _ = node
    if not ctx.is_float(ins[0]):
        return ctx.unsupported('a non-float input')
    try:
        out_shape = ctx.shape(outs[0])
    except Exception:
        return ctx.unsupported('an output shape that shape inference does not give')
    if any(d < 0 for d in out_shape) or math.prod(out_shape) != math.prod(ctx.shape(ins[0])):
        return ctx.unsupported('a target shape that is dynamic or does not keep the size')
    return [("reshape", {"shape": tuple(out_shape)}, [ins[0]], list(outs))]


@importer("Identity")
def _import_identity(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    # a reshape to the same shape: a view (a Cast of a float tensor to its own type imports so too: eqsat.ops.cast)
    _, ins, outs, _ = node
    if not ctx.is_float(ins[0]):
        return ctx.unsupported('a non-float input')
    return [("reshape", {"shape": tuple(ctx.shape(ins[0]))}, [ins[0]], list(outs))]


# -- concat / split --------------------------------------------------------------------------------------

def _concat_shape(p: Params, *xs: Shape) -> Shape:
    ax = p["axis"]
    r = len(xs[0])
    require(0 <= ax < r, f"concat: axis {ax} out of range for rank {r}")
    for s in xs[1:]:
        require(len(s) == r and all(a == b for i, (a, b) in enumerate(zip(s, xs[0], strict=True)) if i != ax),
                f"concat: shapes {xs} differ off axis {ax}")
    return xs[0][:ax] + (sum(s[ax] for s in xs),) + xs[0][ax + 1:]


def _concat_form(ax: int) -> GeneratorForm:
    def apply(g: GenContext, args: Sequence[GenTensor]) -> list[GenTensor] | None:
        a, b = args
        if a is b or len(a.shape) < 1 or (a.bias is None) != (b.bias is None):
            return None
        t = g.apply("concat", {"axis": ax}, [a, b])
        if t is None:
            return None
        t.bounds = g.common_bounds(a, b)
        t.bounds[ax] = a.sym[ax]  # where a split may cut it back
        if a.bias is not None:  # kernels: stacked output channels stack biases; input channels add them
            if ax == 0:
                t.bias = g.apply("concat", {"axis": 0}, [a.bias, b.bias])
            else:
                t.bias = apply_equal_shapes(g, "ewadd", a.bias, b.bias)
            if t.bias is None:
                return None
        return [t]

    return GeneratorForm(apply, arity=2, domains=("mat", "conv"))


def _concat_sym(p: Params, ins: Sequence[GenTensor]) -> SymShape:
    a, b, ax = ins[0].sym, ins[1].sym, p["axis"]
    return a[:ax] + (dim_add(a[ax], b[ax]),) + a[ax + 1:]


_A, _B, _AXIS = S.shape("a"), S.shape("b"), S.param("axis")
CONCAT = register(OpSpec(
    name="concat", inputs=("a", "b"), params=(("axis", "int"),), variadic=True,
    doc="concatenate along axis (n-ary in the IR; a left-nested binary chain in the e-graph)",
    shape_fn=_concat_shape,
    numpy_fn=lambda p, *xs: np.concatenate(xs, axis=p["axis"]),
    modular_fn=lambda p, *xs: np.concatenate([np.asarray(x, dtype=object) for x in xs[:-1]],
                                              axis=p["axis"]) % xs[-1],
    flops_fn=lambda p, ins, out: 0,
    export_fn=lambda p, ins, outs, ctx: [("Concat", ins, outs, {"axis": p["axis"]})],
    shape_rules=(S.rule(S.set_dim(_A, _AXIS, S.dim(_A, _AXIS) + S.dim(_B, _AXIS)),
                        S.eq(S.rank(_A), S.rank(_B)), S.lt(_AXIS, S.rank(_A)),
                        S.eq(S.set_dim(_A, _AXIS, 0), S.set_dim(_B, _AXIS, 0))),),
    generator_forms={"concat0": _concat_form(0), "concat1": _concat_form(1)}, sym_shape=_concat_sym,
    dim_axioms=(DimAxiom("dim-concat-axis", "(concat ?ax ?a ?b)", "?ax", "(+ (dim ?a ?ax) (dim ?b ?ax))",
                         {"?ax": (0, 1)}),
                DimAxiom("dim-concat-other", "(concat ?ax ?a ?b)", "(- 1 ?ax)", "(dim ?a (- 1 ?ax))", {"?ax": (0, 1)})),
    glue="join",
))


def normalize_axis(axis: int, rank: int) -> int:
    """An ONNX axis counted from the front (a negative one counts from the back)."""
    return axis + rank if axis < 0 else axis


@importer("Concat")
def _import_concat(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    _, ins, outs, attrs = node
    if not all(ctx.is_float(i) for i in ins):
        return ctx.unsupported('a non-float input')
    if len(ins) == 1:  # a one-input Concat is an identity; the e-graph only knows concats of two or more
        return [("reshape", {"shape": ctx.shape(ins[0])}, list(ins), list(outs))]
    ax = normalize_axis(int(attrs["axis"]), len(ctx.shape(ins[0])))
    return [("concat", {"axis": ax}, list(ins), list(outs))]


def _split_shape(p: Params, x: Shape) -> Shape:
    ax, start, size = p["axis"], p["start"], p["size"]
    require(0 <= ax < len(x), f"split: axis {ax} out of range for {x}")
    require(start >= 0 and size > 0 and start + size <= x[ax], f"split: [{start}, {start + size}) outside {x}")
    return x[:ax] + (size,) + x[ax + 1:]


def _split_np(p: Params, x: np.ndarray) -> np.ndarray:
    idx = [slice(None)] * x.ndim
    idx[p["axis"]] = slice(p["start"], p["start"] + p["size"])
    return np.ascontiguousarray(x[tuple(idx)])


def _split_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
    # a lone piece; eqsat.onnx_io groups the pieces of one tensor into a single ONNX Split when they tile it
    ax, start, size = p["axis"], p["start"], p["size"]
    if ctx.opset < 10:
        return [("Slice", ins, outs, {"axes": [ax], "starts": [start], "ends": [start + size]})]
    st = ctx.add_initializer(np.array([start], dtype=np.int64), outs[0] + "_starts")
    en = ctx.add_initializer(np.array([start + size], dtype=np.int64), outs[0] + "_ends")
    axes = ctx.add_initializer(np.array([ax], dtype=np.int64), outs[0] + "_axes")
    return [("Slice", [ins[0], st, en, axes], outs, {})]


def _export_pieces(axis: int, sizes: Sequence[int], src: str, outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
    # the pieces that tile a tensor: one ONNX Split (sizes an input from opset 13, an attribute before)
    if ctx.opset >= 13:
        s = ctx.add_initializer(np.array(sizes, dtype=np.int64), outs[0] + "_sizes")
        return [("Split", [src, s], outs, {"axis": axis})]
    return [("Split", [src], outs, {"axis": axis, "split": list(sizes)})]


def _split_form(ax: int) -> GeneratorForm:
    """Both pieces of a tensor at a boundary a concatenation left (sizes as dimension expressions)."""
    def apply(g: GenContext, args: Sequence[GenTensor]) -> list[GenTensor] | None:
        a = args[0]
        if a.bias is not None or ax not in a.bounds or len(a.shape) <= ax:
            return None
        first = a.bounds[ax]
        first_c = g.dim_value(first)
        second = dim_sub(a.sym[ax], first)  # the total less the first: the concatenation's other operand
        second_c = a.shape[ax] - first_c
        if first_c <= 0 or second_c <= 0:
            return None
        p0 = g.apply("split", {"axis": ax, "start": 0, "size": first_c}, [a], pattern={"size": first})
        p1 = g.apply("split", {"axis": ax, "start": first_c, "size": second_c}, [a],
                     pattern={"start": first, "size": second})
        if p0 is None or p1 is None:
            return None
        for piece in (p0, p1):
            piece.bounds = {k: e for k, e in a.bounds.items() if k != ax}
        return [p0, p1]

    return GeneratorForm(apply, domains=("mat", "conv"))


_X = S.shape("x")
SPLIT = register(OpSpec(
    name="split", inputs=("x",), params=(("axis", "int"), ("start", "int"), ("size", "int")),
    doc="one piece of a split: x[..., start:start+size, ...] along axis (explicit sizes)",
    shape_fn=_split_shape, numpy_fn=_split_np,
    modular_fn=lambda p, x, m: _split_np(p, np.asarray(x, dtype=object)) % m,
    flops_fn=lambda p, ins, out: 0,
    export_fn=_split_export,
    shape_rules=(S.rule(S.set_dim(_X, _AXIS, S.param("size")),
                        S.lt(_AXIS, S.rank(_X)), S.ge(S.param("start"), 0), S.gt(S.param("size"), 0),
                        S.le(S.param("start") + S.param("size"), S.dim(_X, _AXIS))),),
    generator_forms={"split0": _split_form(0), "split1": _split_form(1)},
    sym_shape=lambda p, ins: ins[0].sym[:p["axis"]] + (p["size"],) + ins[0].sym[p["axis"] + 1:],
    piece_params=("start", "size"), glue="cut", piece_axis="axis", export_pieces=_export_pieces,
))


@importer("Split")
def _import_split(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    _, ins, outs, attrs = node
    if not ctx.is_float(ins[0]):
        return ctx.unsupported('a non-float input')
    shape = ctx.shape(ins[0])
    ax = normalize_axis(int(attrs.get("axis", 0)), len(shape))
    sizes = attrs.get("split")
    if len(ins) > 1 and ins[1]:
        c = ctx.const(ins[1])
        if c is None:
            return ctx.unsupported('split sizes that are not a constant')
        sizes = [int(v) for v in c.reshape(-1)]
    if sizes is None:
        sizes = [ctx.shape(o)[ax] for o in outs]
    res: list[IRNode] = []
    start = 0
    for o, size in zip(outs, sizes, strict=True):
        if o:
            res.append(("split", {"axis": ax, "start": start, "size": int(size)}, [ins[0]], [o]))
        start += int(size)
    return res


@importer("Slice")
def _import_slice(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    # a Slice with constant bounds and unit steps is one split piece per sliced axis, chained
    _, ins, outs, attrs = node
    if not ctx.is_float(ins[0]):
        return ctx.unsupported("a non-float input")
    shape = ctx.shape(ins[0])
    if ctx.opset < 10:
        starts, ends, axes, steps = attrs.get("starts"), attrs.get("ends"), attrs.get("axes"), None
    else:
        vals = []
        for k in range(1, 5):
            name = ins[k] if len(ins) > k else ""
            c = ctx.const(name) if name else None
            if name and c is None:
                return ctx.unsupported("starts, ends, axes or steps that are not constants")
            vals.append(None if c is None else [int(v) for v in c.reshape(-1)])
        starts, ends, axes, steps = vals
    if starts is None or ends is None or len(starts) != len(ends):
        return ctx.unsupported("missing or mismatched starts and ends")
    axes = list(range(len(starts))) if axes is None else [int(a) for a in axes]
    if steps is not None and any(s != 1 for s in steps):
        return ctx.unsupported("a step other than 1")
    if len(axes) != len(starts) or any(not -len(shape) <= a < len(shape) for a in axes):
        return ctx.unsupported("axes out of range or not one per start")
    axes = [normalize_axis(a, len(shape)) for a in axes]
    if len(set(axes)) != len(axes):
        return ctx.unsupported("an axis sliced twice")
    pieces = []
    for ax, st, en in sorted(zip(axes, starts, ends, strict=True)):
        dim = shape[ax]
        st, en = (int(st) + dim if st < 0 else int(st)), (int(en) + dim if en < 0 else int(en))
        st, en = min(max(st, 0), dim), min(max(en, 0), dim)  # ONNX clamps to [0, dim] for positive steps
        if en <= st:
            return ctx.unsupported("an empty slice")
        if en - st < dim:  # a full-range axis needs no piece
            pieces.append((ax, st, en - st))
    if not pieces:  # the whole tensor: an identity
        return [("reshape", {"shape": tuple(shape)}, [ins[0]], [outs[0]])]
    res: list[IRNode] = []
    src = ins[0]
    for k, (ax, st, size) in enumerate(pieces):
        dst = outs[0] if k == len(pieces) - 1 else ctx.fresh(f"{outs[0]}_slice{ax}")
        res.append(("split", {"axis": ax, "start": st, "size": size}, [src], [dst]))
        src = dst
    return res


@importer("Gather")
def _import_gather(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    # constant indices that form one ascending run (BERT's pooler takes token 0) select one piece: a split,
    # reshaped to Gather's output shape (a scalar index drops the axis)
    _, (data, indices), outs, attrs = node
    if not ctx.is_float(data):
        return ctx.unsupported("non-float data")
    idx = ctx.const(indices)
    if idx is None:
        return ctx.unsupported("indices that are not a constant (an embedding lookup)")
    shape = ctx.shape(data)
    if not shape:
        return ctx.unsupported("rank-0 data")
    ax = normalize_axis(int(attrs.get("axis", 0)), len(shape))
    flat = [int(i) + shape[ax] if int(i) < 0 else int(i) for i in idx.reshape(-1)]
    if not flat or any(not 0 <= i < shape[ax] for i in flat) or flat != list(range(flat[0], flat[0] + len(flat))):
        return ctx.unsupported("indices that are not one ascending run of positions (only slices import)")
    out_shape = tuple(shape[:ax]) + tuple(idx.shape) + tuple(shape[ax + 1:])
    piece = {"axis": ax, "start": flat[0], "size": len(flat)}
    if tuple(shape[:ax]) + (len(flat),) + tuple(shape[ax + 1:]) == out_shape:
        return [("split", piece, [data], [outs[0]])]
    mid = ctx.fresh(outs[0] + "_piece")
    return [("split", piece, [data], [mid]), ("reshape", {"shape": out_shape}, [mid], [outs[0]])]


# -- constant padding ------------------------------------------------------------------------------------

def _pad_shape(p: Params, x: Shape) -> Shape:
    pads, r = p["pads"], len(x)
    require(r >= 1, "pad: needs an input of rank 1 or more")
    require(len(pads) == 2 * r, f"pad: {len(pads)} pads for {x} (one begin and one end per dimension)")
    require(all(v >= 0 for v in pads), f"pad: pads {pads} must be non-negative")
    return tuple(d + pads[i] + pads[i + r] for i, d in enumerate(x))


def _pad_widths(p: Params, rank: int) -> list[tuple[int, int]]:
    return [(p["pads"][i], p["pads"][i + rank]) for i in range(rank)]


def _pad_np(p: Params, x: np.ndarray) -> np.ndarray:
    return np.pad(x, _pad_widths(p, x.ndim), mode="constant", constant_values=p["value"])


def _rational_mod(v: float, m: int) -> int:
    """A float exactly modulo ``m`` (a rational number: its numerator times its denominator's inverse); an
    infinity, which has no such value, maps to a fixed residue of its own."""
    if not math.isfinite(v):
        return m - 1 if v > 0 else m - 2
    f = Fraction(v)
    return f.numerator * pow(f.denominator, -1, m) % m


def _pad_mod(p: Params, x: np.ndarray, m: int) -> np.ndarray:
    xo = np.asarray(x, dtype=object) % m
    return np.pad(xo, _pad_widths(p, xo.ndim), mode="constant", constant_values=_rational_mod(p["value"], m))


def _pad_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
    if ctx.opset < 11:  # pads and value are attributes before opset 11
        return [("Pad", [ins[0]], list(outs), {"mode": "constant", "pads": list(p["pads"]), "value": p["value"]})]
    pads = ctx.add_initializer(np.array(p["pads"], dtype=np.int64), outs[0] + "_pads")
    value = ctx.add_initializer(np.array(p["value"], dtype=np.float32), outs[0] + "_value")
    return [("Pad", [ins[0], pads, value], list(outs), {"mode": "constant"})]


def _pad_rules() -> tuple[S.ShapeRule, ...]:
    x, pads = S.shape("x"), S.param("pads")
    return tuple(S.rule(S.vec(*(S.dim(x, i) + S.dim(pads, i) + S.dim(pads, i + r) for i in range(r))),
                        S.eq(S.rank(x), r), S.eq(S.rank(pads), 2 * r), *(S.ge(S.dim(pads, j), 0) for j in range(2 * r)))
                 for r in range(1, MAX_RANK + 1))


PAD = register(OpSpec(
    name="pad", inputs=("x",), params=(("pads", "ints"), ("value", "float")), defaults={"value": 0.0},
    doc="constant padding: pads (non-negative) lists the entries added before each dimension, then after "
        "each (ONNX order), filled with value (ONNX Pad, mode constant)",
    shape_fn=_pad_shape, numpy_fn=_pad_np, modular_fn=_pad_mod,
    flops_fn=lambda p, ins, out: 0,
    export_fn=_pad_export,
    shape_rules=_pad_rules(),
))


@importer("Pad")
def _import_pad(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    _, ins, outs, attrs = node
    if not ctx.is_float(ins[0]):
        return ctx.unsupported("a non-float input")
    mode = str(attrs.get("mode", "constant"))
    if mode != "constant":
        return ctx.unsupported(f"mode {mode!r} (only constant padding imports)")
    shape = ctx.shape(ins[0])
    rank = len(shape)
    if rank == 0:
        return ctx.unsupported("a rank-0 input")
    if ctx.opset < 11:  # attributes
        pads = [int(v) for v in attrs.get("pads", [])]
        value = float(attrs.get("value", 0.0))
    else:  # inputs: pads, then optional constant_value and (from opset 18) axes
        consts = []
        for k in (1, 2, 3):
            name = ins[k] if len(ins) > k else ""
            c = ctx.const(name) if name else None
            if name and c is None:
                what = ("pads", "a constant_value", "axes")[k - 1]
                return ctx.unsupported(f"{what} that {'are' if k != 2 else 'is'} not a constant")
            consts.append(c)
        c_pads, c_value, c_axes = consts
        if c_pads is None:
            return ctx.unsupported("no pads input")
        pads = [int(v) for v in c_pads.reshape(-1)]
        if c_value is not None and c_value.size != 1:
            return ctx.unsupported("a constant_value with more than one element")
        value = 0.0 if c_value is None else float(c_value.reshape(-1)[0])
        if c_axes is not None:  # pads for the listed axes only: spread them over every dimension
            axes = [int(a) for a in c_axes.reshape(-1)]
            if len(pads) != 2 * len(axes):
                return ctx.unsupported(f"{len(pads)} pads for {len(axes)} axes")
            if any(not -rank <= a < rank for a in axes):
                return ctx.unsupported(f"axes {axes} out of range for rank {rank}")
            axes = [normalize_axis(a, rank) for a in axes]
            if len(set(axes)) != len(axes):
                return ctx.unsupported(f"an axis listed twice in {axes}")
            full = [0] * (2 * rank)
            for k, a in enumerate(axes):
                full[a], full[a + rank] = pads[k], pads[k + len(axes)]
            pads = full
    if len(pads) != 2 * rank:
        return ctx.unsupported(f"{len(pads)} pads for a rank-{rank} input")
    if any(v < 0 for v in pads):
        return ctx.unsupported("negative pads (cropping)")
    if math.isnan(value):
        return ctx.unsupported("a NaN constant_value")
    if not any(pads):  # nothing added: the input as it is
        return [("reshape", {"shape": tuple(shape)}, [ins[0]], [outs[0]])]
    return [("pad", {"pads": tuple(pads), "value": value + 0.0}, [ins[0]], [outs[0]])]
