"""Matrix products: matmul (and ONNX MatMul/Gemm import) and its transposed-operand layout variant."""

from __future__ import annotations

import math
from collections.abc import Sequence

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
    TransposeFlags,
    importer,
    register,
    require,
)
from eqsat.ops.dims import Dim, Sym
from eqsat.ops.elementwise import align_rank

# -- matmul ----------------------------------------------------------------------------------------------

def _matmul_shape(p: Params, a: Shape, b: Shape) -> Shape:
    require(len(a) >= 2 and len(a) == len(b), f"matmul: operands need equal rank >= 2, got {a} and {b} (the "
            "importer reshapes a lower-rank operand)")
    require(all(x == y or x == 1 or y == 1 for x, y in zip(a[:-2], b[:-2], strict=True)),
            f"matmul: batch dimensions do not broadcast: {a} vs {b}")
    require(a[-1] == b[-2], f"matmul: inner dimensions differ: {a} @ {b}")
    # max_dim, not max(): decided for every value of a symbolic size whichever side it is on
    return tuple(S.max_dim(x, y) for x, y in zip(a[:-2], b[:-2], strict=True)) + (a[-2], b[-1])


_A, _B = S.shape("a"), S.shape("b")


def _matmul_rules() -> tuple[S.ShapeRule, ...]:
    # one rule per rank: batch dims broadcast (equal, or one of them 1: a product that is zero, as for ewadd)
    def d(s: S.Expr, i: int) -> S.Expr:
        return S.dim(s, i)

    return tuple(S.rule(S.vec(*(S.maximum(d(_A, i), d(_B, i)) for i in range(r - 2)), d(_A, r - 2), d(_B, r - 1)),
                        S.eq(S.rank(_A), r), S.eq(S.rank(_B), r), S.eq(d(_A, r - 1), d(_B, r - 2)),
                        *(S.eq(0, (d(_A, i) - d(_B, i)) * ((d(_A, i) - 1) * (d(_B, i) - 1))) for i in range(r - 2)))
                 for r in range(2, MAX_RANK + 1))


def _matmul_sym(p: Params, ins: Sequence[GenTensor]) -> SymShape:
    a, b = ins
    # batch dimensions from the operand not broadcast along them
    batch = tuple(x if a.shape[i] != 1 or b.shape[i] == 1 else y
                  for i, (x, y) in enumerate(zip(a.sym[:-2], b.sym[:-2], strict=True)))
    return batch + (a.sym[-2], b.sym[-1])


def _matmul_form(g: GenContext, args: Sequence[GenTensor]) -> list[GenTensor] | None:
    a, b = args
    if len(a.shape) != len(b.shape) or len(a.shape) not in (2, 3):
        return None
    t = g.apply("matmul", {}, [a, b])
    if t is not None and len(a.shape) == 2:  # rows split where a's are, columns where b's are
        t.bounds = {ax: e for ax, e in ((0, a.bounds.get(0)), (1, b.bounds.get(1))) if e is not None}
    return [t] if t is not None else None


def _matmul_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
    b = ctx.constant(ins[1])
    if b is not None and b.ndim > 2 and all(d == 1 for d in b.shape[:-2]):
        # a matrix viewed to the activations' rank (a projection computed on unflattened rows): written as the
        # matrix, which MatMul broadcasts over the leading axes alike; onnxruntime pre-packs only a 2-D weight (a
        # decoder step with its projections' weights as (1, K, N) ran about 2x slower)
        return [("MatMul", [ins[0], ctx.add_initializer(b.reshape(b.shape[-2:]), ins[1])], outs, {})]
    return [("MatMul", ins, outs, {})]


MATMUL = register(OpSpec(
    name="matmul", inputs=("a", "b"), params=(),
    doc="(batched) matrix product a @ b of operands of equal rank >= 2; batch dims broadcast (numpy/ONNX "
        "MatMul); the importer aligns the ranks of ONNX MatMul operands",
    shape_fn=_matmul_shape,
    numpy_fn=lambda p, a, b: np.matmul(a, b),
    modular_fn=lambda p, a, b, m: np.matmul(np.asarray(a, dtype=object), np.asarray(b, dtype=object)) % m,
    flops_fn=lambda p, ins, out: 2 * math.prod(out) * ins[0][-1],
    export_fn=_matmul_export,
    # a @ [b1 b2 ...] = [a @ b1, a @ b2, ...] along the last axis
    sibling_merge=lambda p, ins: ((len(ins[1]) - 1,), len(ins[1]) - 1), row_product=True,
    shape_rules=_matmul_rules(),
    # matrices, and the batched products of attention heads
    generator_forms={"matmul": GeneratorForm(_matmul_form, arity=2, domains=("mat", "heads"))}, sym_shape=_matmul_sym,
    dim_axioms=(DimAxiom("dim-matmul-0", "(matmul ?a ?b)", 0, "(dim ?a 0)"),
                DimAxiom("dim-matmul-1", "(matmul ?a ?b)", 1, "(dim ?b 1)")),
    ranks=Ranks(same=True), heavy=True,
))


@importer("MatMul")
def _import_matmul(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    _, (a, b), outs, _ = node
    sa, sb = ctx.shape(a), ctx.shape(b)
    if not (ctx.is_float(a) and ctx.is_float(b)):
        return ctx.unsupported("a non-float input")
    if len(sa) > 2 and len(sb) == 2:
        # activations (batch, seq, hidden) @ weight (hidden, out), as every transformer projection is: one
        # matrix product over the flattened rows, between two reshapes (views), so the matrix rules apply
        rows, flat, prod = (math.prod(sa[:-1]), sa[-1]), ctx.fresh(f"{outs[0]}_rows"), ctx.fresh(f"{outs[0]}_2d")
        return [("reshape", {"shape": rows}, [a], [flat]), ("matmul", {}, [flat, b], [prod]),
                ("reshape", {"shape": (*sa[:-1], sb[-1])}, [prod], list(outs))]
    if len(sa) < 2 or len(sb) < 2:
        return ctx.unsupported("a 1-D operand (a matrix-vector product; eqsat's matmul needs rank >= 2)")
    if len(sa) > MAX_RANK or len(sb) > MAX_RANK:
        return ctx.unsupported(f"an operand of rank above {MAX_RANK}")
    # ONNX MatMul broadcasts like numpy: right-align the ranks (a reshape adding leading 1s), the batch dims
    # then broadcast in eqsat's matmul itself
    rank = max(len(sa), len(sb))
    res: list[IRNode] = []
    a2, b2 = align_rank(ctx, a, rank, res), align_rank(ctx, b, rank, res)
    return res + [("matmul", {}, [a2, b2], list(outs))]


@importer("Gemm")
def _import_gemm(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    _, ins, outs, attrs = node
    a, b = ins[0], ins[1]
    if not all(ctx.is_float(i) for i in ins):
        return ctx.unsupported('a non-float input')
    res: list[IRNode] = []

    def trans(name: str) -> str:  # of a weight too: export writes the weight as it is, with Gemm's flag
        dst = ctx.fresh(name + "_T")
        res.append(("transpose", {"perm": (1, 0)}, [name], [dst]))
        return dst

    if attrs.get("transA", 0):
        a = trans(a)
    if attrs.get("transB", 0):
        b = trans(b)
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    has_c = len(ins) > 2 and ins[2] != ""
    prod = outs[0] if (alpha == 1.0 and not has_c) else ctx.fresh(outs[0] + "_mm")
    res.append(("matmul", {}, [a, b], [prod]))
    if alpha != 1.0:
        scaled = outs[0] if not has_c else ctx.fresh(outs[0] + "_alpha")
        s = ctx.add_weight(np.array(alpha, dtype=np.float32), "alpha")
        res.append(("smul", {}, [prod, s], [scaled]))
        prod = scaled
    if has_c:
        c_name = ins[2]
        c = ctx.const(c_name)
        if c is not None:
            cval = (c * beta).astype(np.float32)
            cval = cval.reshape((1,) * (2 - cval.ndim) + cval.shape)
            c_name = ctx.add_weight(cval, c_name)
        else:
            if beta != 1.0:
                return ctx.unsupported('a Gemm with beta != 1')
            c_name = align_rank(ctx, c_name, 2, res)
        res.append(("ewadd", {}, [prod, c_name], [outs[0]]))
    return res



# -- data-layout variants: the same result computed from differently laid-out operands ------------------

def _swap_last(s: Shape) -> Shape:
    return s[:-2] + (s[-1], s[-2])


def _flag(v: Dim) -> bool:
    """Whether a transpose flag is set (non-zero); a symbolic one only where that holds for every value (a Sym
    is always truthy, ``seq - 1`` too, which is 0 at seq = 1)."""
    if isinstance(v, Sym):
        return v >= 1 or v <= -1  # decided for every value, else UndecidedDim
    return bool(v)


def _matmul_t_shape(p: Params, a: Shape, b: Shape) -> Shape:
    require(len(a) == 2 and len(b) == 2, f"matmul_t: operands need rank 2, got {a} and {b}")
    return _matmul_shape({}, _swap_last(a) if _flag(p["trans_a"]) else a, _swap_last(b) if _flag(p["trans_b"]) else b)


def _matmul_t_np(p: Params, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.matmul(np.swapaxes(a, -1, -2) if p["trans_a"] else a, np.swapaxes(b, -1, -2) if p["trans_b"] else b)


def _matmul_t_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
    if ctx.opset >= 11:  # Gemm's bias input is optional from opset 11
        return [("Gemm", list(ins), outs, {"transA": p["trans_a"], "transB": p["trans_b"]})]
    a, b = ins
    nodes: list[OnnxNode] = []
    if p["trans_a"]:
        a = ctx.fresh(outs[0] + "_aT")
        nodes.append(("Transpose", [ins[0]], [a], {"perm": [1, 0]}))
    if p["trans_b"]:
        b = ctx.fresh(outs[0] + "_bT")
        nodes.append(("Transpose", [ins[1]], [b], {"perm": [1, 0]}))
    return nodes + [("MatMul", [a, b], outs, {})]


MATMUL_T = register(OpSpec(
    name="matmul_t", inputs=("a", "b"), params=(("trans_a", "int"), ("trans_b", "int")),
    doc="layout variant of 2-D matmul: op(a) @ op(b) with op = transpose where the flag is set "
        "(cuBLAS transpose flags; ONNX Gemm transA/transB)",
    shape_fn=_matmul_t_shape, numpy_fn=_matmul_t_np,
    modular_fn=lambda p, a, b, m: _matmul_t_np(p, np.asarray(a, dtype=object), np.asarray(b, dtype=object)) % m,
    flops_fn=lambda p, ins, out: 2 * math.prod(out) * (ins[0][-2] if p["trans_a"] else ins[0][-1]),
    export_fn=_matmul_t_export,
    shape_rules=(S.rule(S.vec(S.dim(_A, S.param("trans_a")), S.dim(_B, 1 - S.param("trans_b"))),
                        S.eq(S.rank(_A), 2), S.eq(S.rank(_B), 2),
                        S.eq(S.dim(_A, 1 - S.param("trans_a")), S.dim(_B, S.param("trans_b")))),),
    heavy=True, transpose_flags=TransposeFlags(("trans_a", "trans_b"), plain="matmul"),
))


# -- a 2-D product with a bias: Gemm's C -------------------------------------------------------------------

def _gemm_shape(p: Params, a: Shape, b: Shape, c: Shape) -> Shape:
    out = _matmul_t_shape(p, a, b)
    require(c in ((1, out[1]), out), f"gemm: c of shape {c} is neither (1, {out[1]}) nor the output's {out}")
    return out


_C = S.shape("c")
_GEMM_OUT = S.vec(S.dim(_A, S.param("trans_a")), S.dim(_B, 1 - S.param("trans_b")))

GEMM = register(OpSpec(
    name="gemm", inputs=("a", "b", "c"), params=(("trans_a", "int"), ("trans_b", "int")),
    doc="op(a) @ op(b) + c, c a row (1, n) broadcast over the rows or of the output's shape (ONNX Gemm with C; a "
        "bias added in the product's kernel, not by a kernel of its own)",
    shape_fn=_gemm_shape, numpy_fn=lambda p, a, b, c: _matmul_t_np(p, a, b) + c,
    modular_fn=lambda p, a, b, c, m: (_matmul_t_np(p, np.asarray(a, dtype=object), np.asarray(b, dtype=object))
                                      + np.asarray(c, dtype=object)) % m,
    flops_fn=lambda p, ins, out: (2 * (ins[0][-2] if p["trans_a"] else ins[0][-1]) + 1) * math.prod(out),
    export_fn=lambda p, ins, outs, ctx: [("Gemm", list(ins), list(outs),
                                          {"transA": p["trans_a"], "transB": p["trans_b"]})],
    # c is (1, n) or (m, n): its first dimension is 1 or m (a product that is zero: conditions have no "or")
    shape_rules=(S.rule(_GEMM_OUT, S.eq(S.rank(_A), 2), S.eq(S.rank(_B), 2),
                        S.eq(S.dim(_A, 1 - S.param("trans_a")), S.dim(_B, S.param("trans_b"))),
                        S.eq(S.rank(_C), 2), S.eq(S.dim(_C, 1), S.dim(_B, 1 - S.param("trans_b"))),
                        S.eq(0, (S.dim(_C, 0) - 1) * (S.dim(_C, 0) - S.dim(_A, S.param("trans_a"))))),),
    heavy=True, transpose_flags=TransposeFlags(("trans_a", "trans_b")),
))
