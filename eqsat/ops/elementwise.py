"""Element-wise operators: activations, clipping, broadcasting add and multiply, multiplication by a scalar."""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Sequence

import numpy as np

from eqsat.ops import shapes as S
from eqsat.ops.core import (
    ACT_RELU,
    MAX_RANK,
    ONNX_IMPORTERS,
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
    Uninterpreted,
    importer,
    register,
    require,
)
from eqsat.ops.families import elementwise_axioms, fingerprint_poly, relu_mod, same_shape_dim_axioms, split_axiom
from eqsat.ops.fusion import (
    Const,
    Fusion,
    FusionMatch,
    Pattern,
    Var,
    matched_shape,
    one_of,
    op,
    product,
    register_fusion,
)

# ---------------------------------------------------------------------------------------------------------
# How the rule generator applies element-wise operators (used by other families' templates too)


def apply_equal_shapes(g: GenContext, op: str, a: GenTensor, b: GenTensor) -> GenTensor | None:
    """``op`` of two tensors of one shape (rules do not broadcast); the result keeps their common split bounds."""
    if a.shape != b.shape:
        return None
    t = g.apply(op, {}, [a, b])
    if t is not None:
        t.bounds = g.common_bounds(a, b)
    return t


def _binary_form(op: str, on_kernels: bool, domains: tuple[str, ...]) -> GeneratorForm:
    """Two distinct tensors, or two kernels where ``on_kernels`` (their biases then add up: a sum of kernels)."""
    def apply(g: GenContext, args: Sequence[GenTensor]) -> list[GenTensor] | None:
        a, b = args
        if a is b or (not on_kernels and (a.bias is not None or b.bias is not None)):
            return None
        if (a.bias is None) != (b.bias is None) or not a.shape:
            return None
        t = apply_equal_shapes(g, op, a, b)
        if t is not None and a.bias is not None:
            t.bias = apply_equal_shapes(g, "ewadd", a.bias, b.bias)
        return [t] if t is not None else None

    return GeneratorForm(apply, arity=2, domains=domains)


def _relu_form(g: GenContext, args: Sequence[GenTensor]) -> list[GenTensor] | None:
    a = args[0]
    if not a.shape or a.bias is not None:
        return None
    t = g.apply("relu", {}, [a])
    if t is not None:
        t.bounds = dict(a.bounds)  # element by element: a split boundary stays where it was
    return [t] if t is not None else None


def _smul_form(g: GenContext, args: Sequence[GenTensor]) -> list[GenTensor] | None:
    a, s = args
    if s.shape != () or not a.shape:
        return None
    t = g.apply("smul", {}, [a, s])
    if t is None:
        return None
    t.bounds = dict(a.bounds)
    if a.bias is not None:  # a scaled kernel has a scaled bias
        t.bias = g.apply("smul", {}, [a.bias, s])
    return [t]


def _first_shape(p: Params, ins: Sequence[GenTensor]) -> SymShape:
    return ins[0].sym


def _broadcast_sym(p: Params, ins: Sequence[GenTensor]) -> SymShape:
    # each dimension from the operand that is not broadcast along it
    a, b = ins
    return tuple(da if a.shape[i] != 1 or b.shape[i] == 1 else db
                 for i, (da, db) in enumerate(zip(a.sym, b.sym, strict=True)))


# ---------------------------------------------------------------------------------------------------------
# Leaves-free operators


def _unary(name: str, fn: Callable[[np.ndarray], np.ndarray], mod: Callable[[np.ndarray, int], np.ndarray],
           onnx_type: str, flops_per: int, doc: str, facts: tuple[tuple[int, int], ...] = (),
           axioms: tuple[tuple, ...] = (), forms: dict[str, GeneratorForm] | None = None,
           dim_axioms: tuple[DimAxiom, ...] = (), activation: int | None = None) -> OpSpec:
    spec = register(OpSpec(
        name=name, inputs=("x",), params=(), doc=doc, elementwise=True,
        shape_fn=lambda p, x: x,
        numpy_fn=lambda p, x: fn(x).astype(x.dtype, copy=False),
        modular_fn=lambda p, x, m: mod(x, m),
        flops_fn=lambda p, ins, out: flops_per * math.prod(out),
        export_fn=lambda p, ins, outs, ctx: [(onnx_type, ins, outs, {})],
        shape_rules=S.same_as("x"),
        # not polynomials: the verifier knows them only as functions of each element
        uninterpreted=Uninterpreted("elementwise", facts=facts),
        axioms=axioms, generator_forms=forms or {}, dim_axioms=dim_axioms, ranks=Ranks(same=True),
        activation=activation,
    ))

    @importer(onnx_type)
    def _imp(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
        _, ins, outs, _ = node
        if not ctx.is_float(ins[0]):
            return ctx.unsupported('a non-float input')
        return [(name, {}, list(ins), list(outs))]

    return spec


# relu's layout axioms are among the hand-written ones (eqsat.rules.axioms); its split axiom is declared with it,
# so that only the proofs of rules with relu assert it
RELU = _unary("relu", lambda x: np.maximum(x, 0), relu_mod, "Relu", 1, "max(x, 0)", facts=((0, 0),),
              forms={"relu": GeneratorForm(_relu_form, domains=("mat", "conv", "heads"))},
              dim_axioms=same_shape_dim_axioms("relu", "(relu ?a)"), activation=ACT_RELU,
              axioms=(split_axiom("relu"),))
SIGMOID = _unary("sigmoid", lambda x: 1.0 / (1.0 + np.exp(-x)), lambda x, m: fingerprint_poly(x, m, 11, 13, 17),
                 "Sigmoid", 4, "1 / (1 + exp(-x))", axioms=elementwise_axioms("sigmoid"))
TANH = _unary("tanh", np.tanh, lambda x, m: fingerprint_poly(x, m, 19, 23, 29), "Tanh", 4, "tanh(x)",
              axioms=elementwise_axioms("tanh"))
# what normalisations and rotary embeddings are made of (RMSNorm: x * reciprocal(sqrt(mean(x^2) + eps)));
# fingerprinted, like sigmoid and tanh, by fixed polynomials of their own ("ew" names: egglog has sqrt, sin
# and cos primitives)
def _quiet(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """``fn`` without numpy's warnings for NaN and infinite results (they are the operator's, as in onnxruntime)."""
    def run(x: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return fn(x)
    return run


SQRT = _unary("ewsqrt", _quiet(np.sqrt), lambda x, m: fingerprint_poly(x, m, 71, 73, 79), "Sqrt", 4, "sqrt(x)",
              axioms=elementwise_axioms("ewsqrt"))
RECIPROCAL = _unary("ewrecip", _quiet(lambda x: 1.0 / x), lambda x, m: fingerprint_poly(x, m, 83, 89, 97),
                    "Reciprocal", 4, "1 / x", axioms=elementwise_axioms("ewrecip"))
COS = _unary("ewcos", np.cos, lambda x, m: fingerprint_poly(x, m, 101, 103, 107), "Cos", 4, "cos(x)",
             axioms=elementwise_axioms("ewcos"))
SIN = _unary("ewsin", np.sin, lambda x, m: fingerprint_poly(x, m, 109, 113, 127), "Sin", 4, "sin(x)",
             axioms=elementwise_axioms("ewsin"))


# -- GELU ------------------------------------------------------------------------------------------------

#: the constants of GELU's two forms (the ONNX Gelu-20 definition; its fusions check them numerically)
GELU_SQRT2 = math.sqrt(2.0)
GELU_TANH_SCALE = math.sqrt(2.0 / math.pi)
GELU_TANH_CUBIC = 0.044715
_erf = np.frompyfunc(math.erf, 1, 1)


def _gelu_np(p: Params, x: np.ndarray) -> np.ndarray:
    v = np.asarray(x, dtype=np.float64)
    if p["approximate"]:
        inner = np.tanh(GELU_TANH_SCALE * (v + GELU_TANH_CUBIC * v * v * v))
    else:
        inner = np.asarray(_erf(v / GELU_SQRT2), dtype=np.float64)  # a 0-d input gives a Python float
    return (0.5 * v * (1.0 + inner)).astype(x.dtype, copy=False)


def _gelu_mod(p: Params, x: np.ndarray, m: int) -> np.ndarray:
    # not algebraic; a fixed non-linear polynomial per form (the two forms are different functions)
    return fingerprint_poly(x, m, 43, 47, 53) if p["approximate"] else fingerprint_poly(x, m, 31, 37, 41)


def _gelu_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
    if ctx.opset >= 20:
        return [("Gelu", list(ins), list(outs), {"approximate": "tanh"} if p["approximate"] else {})]
    x, y = ins[0], outs[0]

    def const(v: float, hint: str) -> str:
        return ctx.add_initializer(np.array(v, dtype=np.float32), f"{y}_{hint}")

    t = [ctx.fresh(f"{y}_{s}") for s in ("inner", "act", "plus1", "xmul")]
    if p["approximate"]:  # 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
        c = [ctx.fresh(f"{y}_{s}") for s in ("cube", "cubic", "sum")]
        head: list[OnnxNode] = [
            ("Pow", [x, const(3.0, "three")], [c[0]], {}),
            ("Mul", [c[0], const(GELU_TANH_CUBIC, "cubic_coef")], [c[1]], {}),
            ("Add", [x, c[1]], [c[2]], {}),
            ("Mul", [c[2], const(GELU_TANH_SCALE, "sqrt_2_over_pi")], [t[0]], {}),
            ("Tanh", [t[0]], [t[1]], {}),
        ]
    else:  # 0.5 * x * (1 + erf(x / sqrt(2)))
        require(ctx.opset >= 9, f"gelu: the exact (erf) form needs opset 9 or later (Erf), not {ctx.opset}")
        head = [("Div", [x, const(GELU_SQRT2, "sqrt2")], [t[0]], {}), ("Erf", [t[0]], [t[1]], {})]
    return head + [("Add", [t[1], const(1.0, "one")], [t[2]], {}), ("Mul", [x, t[2]], [t[3]], {}),
                   ("Mul", [t[3], const(0.5, "half")], [y], {})]


GELU = register(OpSpec(
    name="gelu", inputs=("x",), params=(("approximate", "int"),), defaults={"approximate": 0}, elementwise=True,
    doc="x * Phi(x): approximate=0 is the exact form 0.5 * x * (1 + erf(x / sqrt(2))), approximate=1 the tanh "
        "form 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))) (ONNX Gelu-20 approximate none/tanh)",
    shape_fn=lambda p, x: (require(p["approximate"] in (0, 1),
                                   f"gelu: approximate must be 0 or 1, got {p['approximate']}"), x)[1],
    numpy_fn=_gelu_np, modular_fn=_gelu_mod,
    flops_fn=lambda p, ins, out: (9 if p["approximate"] else 6) * math.prod(out),
    export_fn=_gelu_export,
    shape_rules=(S.rule(S.shape("x"), S.ge(S.param("approximate"), 0), S.le(S.param("approximate"), 1)),),
    uninterpreted=Uninterpreted("elementwise", facts=((0, 0),)),
    axioms=elementwise_axioms("gelu", ":approximate ?g", {"?g": (0, 1)}),
    # transformers' feed-forward activation: moved across the layout operators of the heads domain
    generator_forms={"gelu": GeneratorForm(params=lambda s: {"approximate": 0} if s else None,  # not on scalars
                                           domains=("mat", "heads"))},
))


@importer("Gelu")
def _import_gelu(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    _, ins, outs, attrs = node
    if not ctx.is_float(ins[0]):
        return ctx.unsupported("a non-float input")
    approx = str(attrs.get("approximate", "none"))
    if approx not in ("none", "tanh"):
        return ctx.unsupported(f"approximate={approx!r} (ONNX knows 'none' and 'tanh')")
    return [("gelu", {"approximate": int(approx == "tanh")}, [ins[0]], list(outs))]


# Exporters below opset 20 write GELU out as element-wise nodes (BERT has one per layer); each spelling collapses
# to one Gelu node before import. The tail 0.5 * x * (1 + act) comes in any order and grouping.
_X = Var("x")


def _gelu_fusion(name: str, approximate: str, act: Pattern) -> Fusion:
    def replacement(m: FusionMatch) -> OnnxNode:
        return ("Gelu", [m.tensor("x")], [m.output], {"approximate": approximate})

    return register_fusion(Fusion(
        name=name, op="gelu", pattern=product(_X, Const(0.5), op.Add(act, Const(1.0))),
        check=lambda m: matched_shape(m, "x") is not None, replacement=replacement))


# exact: erf(x / sqrt 2), the division also written x * (1 / sqrt 2)
_gelu_fusion("gelu-erf", "none",
             op.Erf(one_of(op.Div(_X, Const(GELU_SQRT2)), op.Mul(_X, Const(1 / GELU_SQRT2)))))
# tanh: tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)), the cube also written x * (x * x)
_gelu_fusion("gelu-tanh", "tanh", op.Tanh(op.Mul(
    op.Add(_X, op.Mul(one_of(op.Pow(_X, Const(3.0)), op.Mul(_X, op.Mul(_X, _X))), Const(GELU_TANH_CUBIC))),
    Const(GELU_TANH_SCALE))))


# -- Clip (ReLU6 is Clip(0, 6)) ---------------------------------------------------------------------------

def _clip_np(p: Params, x: np.ndarray) -> np.ndarray:
    # min(max(x, low), high): where low > high every entry is high, as ONNX Clip defines it
    y = np.minimum(np.maximum(x, p["low"]), p["high"])
    return (np.asarray(y) if isinstance(y, np.generic) else y).astype(x.dtype, copy=False)  # a 0-d x: a scalar


def _clip_mod(p: Params, x: np.ndarray, m: int) -> np.ndarray:
    # not algebraic: a fixed non-linear polynomial per (low, high), so that clips with different bounds never
    # fingerprint alike; clip(0, inf) is relu and takes relu's polynomial
    if p["low"] == 0.0 and p["high"] == math.inf:
        return relu_mod(x, m)
    h = zlib.crc32(f"clip({p['low']!r},{p['high']!r})".encode())
    return fingerprint_poly(x, m, 59 + h % 997, 61 + (h >> 10) % 991, 67 + (h >> 20) % 983)


def _clip_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
    # both bounds written (an infinite one too: an absent bound is the largest finite float, which an infinite
    # input would notice); attributes before opset 11, scalar inputs from 11. Where low > high, clip(high, high)
    # is the same function, and Clip-6 in onnxruntime refuses min > max.
    low = min(p["low"], p["high"])
    if ctx.opset < 11:
        return [("Clip", [ins[0]], list(outs), {"min": low, "max": p["high"]})]
    lo = ctx.add_initializer(np.array(low, dtype=np.float32), outs[0] + "_min")
    hi = ctx.add_initializer(np.array(p["high"], dtype=np.float32), outs[0] + "_max")
    return [("Clip", [ins[0], lo, hi], list(outs), {})]


CLIP = register(OpSpec(
    name="clip", inputs=("x",), params=(("low", "float"), ("high", "float")),
    defaults={"low": -math.inf, "high": math.inf}, elementwise=True,
    doc="min(max(x, low), high) (ONNX Clip; ReLU6 is clip(0, 6)); an infinite bound is no bound, and where "
        "low > high every entry is high",
    shape_fn=lambda p, x: x,
    numpy_fn=_clip_np, modular_fn=_clip_mod,
    flops_fn=lambda p, ins, out: 2 * math.prod(out),
    export_fn=_clip_export,
    shape_rules=S.same_as("x"),
    # not a polynomial; no fixed point holds for every (low, high) (clip(0) = 0 needs low <= 0 <= high)
    uninterpreted=Uninterpreted("elementwise"),
    axioms=elementwise_axioms("clip", ":low ?lo :high ?hi", {"?lo": (0.0, -1.0), "?hi": (6.0, 1.0)}),
    ranks=Ranks(same=True),
))


@importer("Clip")
def _import_clip(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    _, ins, outs, attrs = node
    if not ctx.is_float(ins[0]):
        return ctx.unsupported("a non-float input")
    # a missing bound is no bound (ONNX's default, the largest finite float, differs only on infinite inputs)
    if ctx.opset < 11:
        low, high = float(attrs.get("min", -math.inf)), float(attrs.get("max", math.inf))
    else:
        bounds = []
        for k, default in ((1, -math.inf), (2, math.inf)):
            name = ins[k] if len(ins) > k else ""
            if not name:
                bounds.append(default)
                continue
            c = ctx.const(name)
            if c is None:
                return ctx.unsupported("a min or max that is not a constant")
            if c.size != 1:
                return ctx.unsupported("a min or max with more than one element")
            bounds.append(float(c.reshape(-1)[0]))
        low, high = bounds
    if math.isnan(low) or math.isnan(high):
        return ctx.unsupported("a NaN min or max")
    if low == 0.0 and high == math.inf:  # Clip(0, none) is a ReLU
        return [("relu", {}, [ins[0]], [outs[0]])]
    # one form per function: where low > high every entry is high, which is clip(high, high); + 0.0: no -0.0
    return [("clip", {"low": min(low, high) + 0.0, "high": high + 0.0}, [ins[0]], [outs[0]])]


# -- element-wise binary with ONNX (numpy) broadcasting over equal ranks ----------------------------------

def _broadcast_shape(op: str, a: Shape, b: Shape) -> Shape:
    require(len(a) == len(b), f"{op}: operands must have equal rank (got {a} and {b}); the importer "
            "reshapes lower-rank operands")
    out = []
    for da, db in zip(a, b, strict=True):
        # a symbolic size broadcasts against itself or a literal 1 only (== is identity: batch vs seq fails)
        require(da == db or da == 1 or db == 1, f"{op}: shapes {a} and {b} do not broadcast")
        out.append(S.max_dim(da, db))  # not max(): max(1, batch) asks 1 < batch, which holds for some batch only
    return tuple(out)


def _broadcast_rules() -> tuple[S.ShapeRule, ...]:
    a, b = S.shape("a"), S.shape("b")
    # each pair of dims broadcasts: equal, or one of them 1 (a product that is zero: conditions have no "or")
    return tuple(S.rule(S.vec(*(S.maximum(S.dim(a, i), S.dim(b, i)) for i in range(r))),
                        S.eq(S.rank(a), r), S.eq(S.rank(b), r),
                        *(S.eq(0, (S.dim(a, i) - S.dim(b, i)) * ((S.dim(a, i) - 1) * (S.dim(b, i) - 1)))
                          for i in range(r)))
                 for r in range(MAX_RANK + 1))


def _binary(name: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], onnx_type: str, doc: str,
            on_kernels: bool, domains: tuple[str, ...]) -> OpSpec:
    return register(OpSpec(
        name=name, inputs=("a", "b"), params=(), doc=doc, elementwise=True, commutative=True,
        shape_fn=lambda p, a, b: _broadcast_shape(name, a, b),
        numpy_fn=lambda p, a, b: fn(a, b),
        modular_fn=lambda p, a, b, m: fn(np.asarray(a, dtype=object), np.asarray(b, dtype=object)) % m,
        flops_fn=lambda p, ins, out: math.prod(out),
        export_fn=lambda p, ins, outs, ctx: [(onnx_type, ins, outs, {})],
        shape_rules=_broadcast_rules(),
        generator_forms={name: _binary_form(name, on_kernels, domains)}, sym_shape=_broadcast_sym,
        dim_axioms=same_shape_dim_axioms(name, f"({name} ?a ?b)"), ranks=Ranks(same=True), axioms_equal_shapes=True,
        axioms=(split_axiom(name, binary=True),),
    ))


# a sum of kernels (and of their biases) is a kernel; a product is not
EWADD = _binary("ewadd", np.add, "Add", "element-wise a + b (broadcasting over equal ranks)", on_kernels=True,
                domains=("mat", "conv", "heads"))
EWMUL = _binary("ewmul", np.multiply, "Mul", "element-wise a * b (broadcasting over equal ranks)", on_kernels=False,
                domains=("mat", "conv"))


def align_rank(ctx: ImportContext, name: str, rank: int, out: list[IRNode]) -> str:
    """Make ``name`` have ``rank`` dims (numpy right-alignment) for a broadcasting op."""
    shape = ctx.shape(name)
    if len(shape) == rank:
        return name
    new_shape = (1,) * (rank - len(shape)) + tuple(shape)
    const = ctx.const(name)
    if const is not None:
        return ctx.add_weight(const.reshape(new_shape), name)
    res = ctx.fresh(name + "_aligned")
    out.append(("reshape", {"shape": new_shape}, [name], [res]))
    return res


def _import_chain(op: str) -> Callable[[ImportContext, OnnxNode], list[IRNode] | None]:
    def imp(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
        _, ins, outs, _ = node
        if not all(ctx.is_float(i) for i in ins):
            return ctx.unsupported('a non-float input')
        rank = max(len(ctx.shape(i)) for i in ins)
        res: list[IRNode] = []
        if op == "ewmul" and len(ins) == 2:
            # a product with a rank-0 / single-element constant is a scalar multiplication
            for x, s in ((ins[0], ins[1]), (ins[1], ins[0])):
                c = ctx.const(s)
                if c is not None and c.size == 1 and len(ctx.shape(x)) == rank:
                    sname = ctx.add_weight(c.reshape(()), s)
                    return [("smul", {}, [x, sname], list(outs))]
        names = [align_rank(ctx, i, rank, res) for i in ins]
        acc = names[0]
        for k, nxt in enumerate(names[1:]):
            last = k == len(names) - 2
            dst = outs[0] if last else ctx.fresh(outs[0] + f"_part{k}")
            res.append((op, {}, [acc, nxt], [dst]))
            acc = dst
        if len(names) == 1:
            res.append(("reshape", {"shape": ctx.shape(names[0])}, [names[0]], [outs[0]]))
        return res

    return imp


ONNX_IMPORTERS["Add"] = _import_chain("ewadd")
ONNX_IMPORTERS["Sum"] = _import_chain("ewadd")
ONNX_IMPORTERS["Mul"] = _import_chain("ewmul")


def _scale_by_const(ctx: ImportContext, x: str, c: np.ndarray, hint: str, out: str) -> list[IRNode]:
    """``x * c`` for a constant ``c``: a scalar multiplication when ``c`` has one element and does not raise
    the rank, an element-wise product with the (rank-aligned) constant otherwise."""
    xr = len(ctx.shape(x))
    if c.size == 1 and c.ndim <= xr:
        return [("smul", {}, [x, ctx.add_weight(c.reshape(()), hint)], [out])]
    rank = max(xr, c.ndim)
    res: list[IRNode] = []
    xa = align_rank(ctx, x, rank, res)
    w = ctx.add_weight(c.reshape((1,) * (rank - c.ndim) + c.shape), hint)
    return res + [("ewmul", {}, [xa, w], [out])]


@importer("Div")
def _import_div(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    _, (a, b), outs, _ = node
    if not (ctx.is_float(a) and ctx.is_float(b)):
        return ctx.unsupported("a non-float input")
    c = ctx.const(b)
    one = ctx.const(a)
    if c is None and one is not None and one.size == 1 and float(one.reshape(())) == 1.0 \
            and len(ctx.shape(a)) <= len(ctx.shape(b)):
        return [("ewrecip", {}, [b], [outs[0]])]  # 1 / b (an RMSNorm's inverse root), exactly
    if c is None:
        return ctx.unsupported("a division by an activation (only 1 / x, as a reciprocal, and a division by a "
                               "constant, as a multiplication by its reciprocal, import)")
    if not np.all(np.isfinite(c)) or np.any(c == 0):
        return ctx.unsupported("a division by a constant with zero or non-finite entries")
    recip = (1.0 / c.astype(np.float64)).astype(c.dtype)
    return _scale_by_const(ctx, a, recip, b + "_reciprocal", outs[0])


@importer("Pow")
def _import_pow(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    # x^2 = x * x (RMSNorm's mean square) and x^0.5 = sqrt(x); other exponents stay opaque
    _, (x, e), outs, _ = node
    c = ctx.const(e)
    if not ctx.is_float(x) or c is None or c.size != 1:
        return ctx.unsupported("an exponent that is no constant, or a non-float base")
    if float(c.reshape(())) == 2.0:
        return [("ewmul", {}, [x, x], [outs[0]])]
    if float(c.reshape(())) == 0.5:
        return [("ewsqrt", {}, [x], [outs[0]])]
    return ctx.unsupported(f"an exponent of {float(c.reshape(()))} (2 and 0.5 import, as x * x and sqrt)")


@importer("Neg")
def _import_neg(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    # -x = x * (-1) (rotary embeddings negate half of each head)
    _, (x,), outs, _ = node
    if not ctx.is_float(x):
        return ctx.unsupported("a non-float input")
    return [("smul", {}, [x, ctx.add_weight(np.array(-1.0, np.float32), "minus_one")], [outs[0]])]


@importer("Sub")
def _import_sub(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    _, (a, b), outs, _ = node
    if not (ctx.is_float(a) and ctx.is_float(b)):
        return ctx.unsupported("a non-float input")
    rank = max(len(ctx.shape(a)), len(ctx.shape(b)))
    res: list[IRNode] = []
    c = ctx.const(b)
    if c is not None:  # a - c = a + (-c)
        neg = ctx.add_weight((-c).reshape((1,) * (rank - c.ndim) + c.shape), b + "_neg")
    else:  # a - b = a + b * (-1) (a constant a is aligned like any operand of an add)
        bb, neg = align_rank(ctx, b, rank, res), ctx.fresh(outs[0] + "_neg")
        res.append(("smul", {}, [bb, ctx.add_weight(np.array(-1.0, np.float32), "minus_one")], [neg]))
    aa = align_rank(ctx, a, rank, res)
    res.append(("ewadd", {}, [aa, neg], [outs[0]]))
    return res


SMUL = register(OpSpec(
    name="smul", inputs=("x", "s"), params=(), doc="x * s for a rank-0 tensor s", elementwise=True,
    shape_fn=lambda p, x, s: (require(len(s) == 0, f"smul: scalar must have rank 0, got {s}"), x)[1],
    numpy_fn=lambda p, x, s: x * s,
    modular_fn=lambda p, x, s, m: (np.asarray(x, dtype=object) * np.asarray(s, dtype=object)) % m,
    flops_fn=lambda p, ins, out: math.prod(out),
    export_fn=lambda p, ins, outs, ctx: [("Mul", ins, outs, {})],
    shape_rules=(S.rule(S.shape("x"), S.eq(S.rank(S.shape("s")), 0)),),
    generator_forms={"smul": GeneratorForm(_smul_form, arity=2, domains=("mat", "conv", "heads"))},
    sym_shape=_first_shape,
    dim_axioms=same_shape_dim_axioms("smul", "(smul ?a ?s)"), ranks=Ranks((None, 0), same=True),
))
