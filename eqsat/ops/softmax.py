"""Softmax along one axis: the README's "Adding an operator" worked example.

Everything eqsat knows about softmax is here: shape (function and rules as data), float and modular
semantics, how the verifier models it (an uninterpreted function of each row) and its axioms, how the rule
generator applies it, and ONNX import/export across the opset-13 change of meaning.
"""

from __future__ import annotations

import math

import numpy as np

from eqsat.ops import shapes as S
from eqsat.ops.core import (
    ExportContext,
    GeneratorForm,
    ImportContext,
    IRNode,
    OnnxNode,
    OpSpec,
    Params,
    Shape,
    Uninterpreted,
    importer,
    register,
    require,
)
from eqsat.ops.families import LAYOUT_PERMS
from eqsat.ops.layout import normalize_axis


def _shape(p: Params, x: Shape) -> Shape:
    require(0 <= p["axis"] < len(x), f"softmax: axis {p['axis']} out of range for {x}")
    return x


def _numpy(p: Params, x: np.ndarray) -> np.ndarray:
    e = np.exp(x - np.max(x, axis=p["axis"], keepdims=True))
    return (e / np.sum(e, axis=p["axis"], keepdims=True)).astype(x.dtype, copy=False)


def _modular(p: Params, x: np.ndarray, m: int) -> np.ndarray:
    # A fingerprint, not softmax: a fixed non-linear function of each row that, like softmax, treats the row's
    # entries symmetrically (permuting a row permutes its outputs), so that the rules it suggests (moving
    # transposes, concats and splits across it) are the ones the verifier can prove from the axioms below.
    x = np.asarray(x, dtype=object)
    row = np.sum((x * x * x + 5 * x) % m, axis=p["axis"], keepdims=True)
    return ((x * x + 3) * (row + 1)) % m


def _export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
    ax = p["axis"]
    if ctx.opset >= 13:
        return [("Softmax", ins, outs, {"axis": ax})]
    # before opset 13 Softmax normalizes over every dimension from `axis` on; spell out the one-axis form
    # (its reductions take their axes as attributes below opset 13)
    mx, shifted, ex, total = (ctx.fresh(outs[0] + s) for s in ("_max", "_shifted", "_exp", "_sum"))
    return [("ReduceMax", ins, [mx], {"axes": [ax], "keepdims": 1}), ("Sub", [ins[0], mx], [shifted], {}),
            ("Exp", [shifted], [ex], {}), ("ReduceSum", [ex], [total], {"axes": [ax], "keepdims": 1}),
            ("Div", [ex, total], outs, {})]


def _perm(p: tuple[int, ...]) -> str:
    return "[" + " ".join(map(str, p)) + "]"


#: Transposes commute with softmax (the axis follows the permutation), and so do concatenations along
#: another axis: each row is one operand's row. Stated per permutation and axis of ranks 2 and 3.
_AXIOMS = tuple(
    (f"softmax-transpose-{''.join(map(str, perm))}-{ax}", f"(transpose :perm {_perm(perm)} (softmax :axis {ax} ?a))",
     f"(softmax :axis {perm.index(ax)} (transpose :perm {_perm(perm)} ?a))")
    for perm in LAYOUT_PERMS for ax in range(len(perm))
) + tuple(
    (f"softmax-concat-{ax}-{cx}", f"(softmax :axis {ax} (concat :axis {cx} ?a ?b))",
     f"(concat :axis {cx} (softmax :axis {ax} ?a) (softmax :axis {ax} ?b))")
    for ax in range(3) for cx in range(3) if ax != cx
)

SOFTMAX = register(OpSpec(
    name="softmax", inputs=("x",), params=(("axis", "int"),),
    doc="exp(x) / sum(exp(x)) along one axis",
    shape_fn=_shape, numpy_fn=_numpy, modular_fn=_modular,
    flops_fn=lambda p, ins, out: 5 * math.prod(out),
    export_fn=_export,
    shape_rules=(S.rule(S.shape("x"), S.ge(S.param("axis"), 0), S.lt(S.param("axis"), S.rank(S.shape("x")))),),
    uninterpreted=Uninterpreted("along_axis", axis_param="axis"),
    axioms=_AXIOMS,
    # attention normalizes the scores of each query: the last axis
    generator_forms={"softmax": GeneratorForm(params=lambda s: {"axis": len(s) - 1} if len(s) >= 2 else None,
                                              domains=("heads",))},
))


@importer("Softmax")
def _import(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    _, ins, outs, attrs = node
    if not ctx.is_float(ins[0]):
        return ctx.unsupported("a non-float input")
    shape = ctx.shape(ins[0])
    rank = len(shape)
    if rank == 0:
        return ctx.unsupported("a rank-0 input")
    axis = normalize_axis(int(attrs.get("axis", -1 if ctx.opset >= 13 else 1)), rank)
    if ctx.opset >= 13 or axis == rank - 1:
        return [("softmax", {"axis": axis}, [ins[0]], list(outs))]
    # opset < 13: one softmax over the flattened dimensions from `axis` on, between two reshapes
    flat, soft = ctx.fresh(outs[0] + "_rows"), ctx.fresh(outs[0] + "_flat_softmax")
    rows = (*shape[:axis], math.prod(shape[axis:]))
    return [("reshape", {"shape": rows}, [ins[0]], [flat]),
            ("softmax", {"axis": len(rows) - 1}, [flat], [soft]),
            ("reshape", {"shape": tuple(shape)}, [soft], list(outs))]
