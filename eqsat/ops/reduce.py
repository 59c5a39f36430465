"""Reductions: the mean over a set of axes (ONNX ReduceMean)."""

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
from eqsat.ops.layout import normalize_axis

#: the highest input rank for keepdims=0 (one shape rule per rank and number of axes: enough for images and
#: transformer activations, and each rule costs the engine time); the importer writes a higher-rank mean that
#: drops its axes as keepdims=1 and a reshape
DROP_MAX_RANK = 4


def _rm_shape(p: Params, x: Shape) -> Shape:
    axes, keep = p["axes"], p["keepdims"]
    require(keep in (0, 1), f"reduce_mean: keepdims must be 0 or 1, got {keep}")
    require(keep == 1 or len(x) <= DROP_MAX_RANK,
            f"reduce_mean: keepdims=0 takes inputs of rank {DROP_MAX_RANK} or less, got {x} (keep the dimensions "
            "and reshape)")
    require(len(axes) >= 1, "reduce_mean: needs at least one axis (a mean over none is an identity)")
    require(all(0 <= a < len(x) for a in axes), f"reduce_mean: axes {axes} out of range for {x}")
    require(all(a < b for a, b in zip(axes, axes[1:], strict=False)),
            f"reduce_mean: axes {axes} must be sorted and distinct")
    if keep:
        return tuple(1 if i in axes else d for i, d in enumerate(x))
    return tuple(d for i, d in enumerate(x) if i not in axes)


def _object_array(v: object) -> np.ndarray:
    """``v`` as an array (a reduction over every axis gives a scalar)."""
    if isinstance(v, np.ndarray):
        return v
    out = np.empty((), dtype=object)
    out[()] = v
    return out


def _rm_np(p: Params, x: np.ndarray) -> np.ndarray:
    axes, keep = p["axes"], bool(p["keepdims"])
    if x.dtype == object:  # symbolic (the verifier's reals): an exact sum over the count
        count = math.prod(x.shape[a] for a in axes)
        return _object_array(np.sum(x, axis=axes, keepdims=keep)) / count
    y = np.mean(x, axis=axes, keepdims=keep)  # a numpy scalar when every axis goes
    return (np.asarray(y) if isinstance(y, np.generic) else y).astype(x.dtype, copy=False)


def _rm_mod(p: Params, x: np.ndarray, m: int) -> np.ndarray:
    # exact: the sum times the inverse of the count modulo the prime
    axes, keep = p["axes"], bool(p["keepdims"])
    count = math.prod(np.shape(x)[a] for a in axes)
    require(count % m != 0, f"reduce_mean: a count of {count} has no inverse modulo {m}")
    total = _object_array(np.sum(np.asarray(x, dtype=object), axis=axes, keepdims=keep))
    return (total * pow(count, -1, m)) % m


def _rm_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
    axes, keep = list(p["axes"]), p["keepdims"]
    if ctx.opset >= 18:  # axes became an input at opset 18
        name = ctx.add_initializer(np.array(axes, dtype=np.int64), outs[0] + "_axes")
        return [("ReduceMean", [ins[0], name], list(outs), {"keepdims": keep})]
    return [("ReduceMean", [ins[0]], list(outs), {"axes": axes, "keepdims": keep})]


def _rm_rules() -> tuple[S.ShapeRule, ...]:
    x, axes, keep = S.shape("x"), S.param("axes"), S.param("keepdims")

    def valid(k: int, rank: S.Operand) -> list[S.Expr]:
        # k axes, ascending, within the rank
        return [S.eq(S.rank(axes), k), S.ge(S.dim(axes, 0), 0), S.lt(S.dim(axes, k - 1), rank),
                *(S.lt(S.dim(axes, i), S.dim(axes, i + 1)) for i in range(k - 1))]

    def kept(j: int, k: int) -> S.Operand:
        # the position of the j-th kept dimension: j plus the axes before it. Axis a_i (the i-th, ascending)
        # comes before it when the a_i - i kept dimensions below a_i number at most j; max(0, 1 - max(0, n))
        # is 1 for n <= 0 and 0 for n >= 1 (the rules have no conditionals)
        pos: S.Operand = j
        for i in range(k):
            pos = pos + S.maximum(0, 1 - S.maximum(0, S.dim(axes, i) - (i + j)))
        return pos

    rules = []
    for k in range(1, MAX_RANK + 1):  # keepdims=1, any rank: each reduced axis becomes 1
        out: S.Expr = x
        for i in range(k):
            out = S.set_dim(out, S.dim(axes, i), 1)
        rules.append(S.rule(out, S.eq(keep, 1), *valid(k, S.rank(x))))
    for r in range(1, DROP_MAX_RANK + 1):  # keepdims=0, one rule per rank and number of axes
        for k in range(1, r + 1):
            out = S.vec(*(S.dim(x, kept(j, k)) for j in range(r - k)))
            rules.append(S.rule(out, S.eq(keep, 0), S.eq(S.rank(x), r), *valid(k, r)))
    return tuple(rules)


REDUCE_MEAN = register(OpSpec(
    name="reduce_mean", inputs=("x",), params=(("axes", "ints"), ("keepdims", "int")), defaults={"keepdims": 1},
    doc="the mean over axes (at least one; non-negative, ascending), keeping them as size 1 when keepdims=1 "
        f"and dropping them when keepdims=0 (inputs of rank {DROP_MAX_RANK} or less) (ONNX ReduceMean)",
    shape_fn=_rm_shape, numpy_fn=_rm_np, modular_fn=_rm_mod,
    flops_fn=lambda p, ins, out: math.prod(ins[0]) + math.prod(out),
    export_fn=_rm_export,
    shape_rules=_rm_rules(),
))


@importer("ReduceMean")
def _import_reduce_mean(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    _, ins, outs, attrs = node
    if not ctx.is_float(ins[0]):
        return ctx.unsupported("a non-float input")
    shape = ctx.shape(ins[0])
    rank = len(shape)
    if rank == 0:
        return ctx.unsupported("a rank-0 input")
    keep = int(attrs.get("keepdims", 1))
    if keep not in (0, 1):
        return ctx.unsupported(f"keepdims={keep} (ONNX knows 0 and 1)")
    noop = 0
    if ctx.opset >= 18:  # axes an optional input, and an empty list may mean "no reduction"
        name = ins[1] if len(ins) > 1 else ""
        c = ctx.const(name) if name else None
        if name and c is None:
            return ctx.unsupported("axes that are not a constant")
        axes = [] if c is None else [int(a) for a in c.reshape(-1)]
        noop = int(attrs.get("noop_with_empty_axes", 0))
    else:
        axes = [int(a) for a in attrs.get("axes", [])]
    if not axes:
        if noop:  # the input as it is
            return [("reshape", {"shape": tuple(shape)}, [ins[0]], [outs[0]])]
        axes = list(range(rank))
    if any(not -rank <= a < rank for a in axes):
        return ctx.unsupported(f"axes {axes} out of range for rank {rank}")
    norm = sorted(normalize_axis(a, rank) for a in axes)
    if len(set(norm)) != len(norm):
        return ctx.unsupported(f"an axis listed twice in {axes}")
    if keep or rank <= DROP_MAX_RANK:
        return [("reduce_mean", {"axes": tuple(norm), "keepdims": keep}, [ins[0]], [outs[0]])]
    kept = ctx.fresh(outs[0] + "_kept")  # keepdims=0 above DROP_MAX_RANK: keep the axes, then drop them
    dropped = tuple(d for i, d in enumerate(shape) if i not in norm)
    return [("reduce_mean", {"axes": tuple(norm), "keepdims": 1}, [ins[0]], [kept]),
            ("reshape", {"shape": dropped}, [kept], [outs[0]])]
