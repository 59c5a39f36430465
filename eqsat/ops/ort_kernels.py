"""onnxruntime's fused kernels as registry operators, for models written for onnxruntime.

With ``optimize(target="onnxruntime")`` (``eqsat optimize --target onnxruntime``) the rules of
:mod:`eqsat.rules.onnxruntime` add these kernels to the e-graph as alternatives equal to their decompositions, and
export writes each as its ``com.microsoft`` node, which only onnxruntime runs. They are costed like any operator:
a measured model times the kernel as onnxruntime runs it, and extraction takes it only where that is cheaper. The
analytic model cannot see a kernel's speed, so it prices each as its decomposition (``runs_as``) and a hair more:
under it the portable form is kept. Each operator's semantics are its decomposition's, stated in its ``doc``; a
configuration outside the kernel's contract (a rank, a broadcast it does not define) fails its shape function,
so no rule can build it.

A model that already holds these kernels imports them as their decompositions (:mod:`eqsat.ops.contrib`), so they
are chosen again only where they pay.
"""

from __future__ import annotations

import math

import numpy as np

from eqsat.ops import shapes as S
from eqsat.ops.contrib import MS
from eqsat.ops.core import REGISTRY, ExportContext, OnnxNode, OpSpec, Params, Shape, register, require
from eqsat.ops.elementwise import GELU
from eqsat.ops.norm import LAYERNORM, RMSNORM

RUNTIME = "onnxruntime"
#: the rank of the (batch, sequence, hidden) activations the skip norms take
_SKIP_RANK = 3


#: registry name -> the onnxruntime operator type export writes it as
_TYPES: dict[str, str] = {}


def _register_kernel(op_type: str, spec: OpSpec) -> OpSpec:
    """Register ``spec``, an operator that export writes as onnxruntime's ``op_type``."""
    _TYPES[spec.name] = op_type
    return register(spec)


def _kernel(op_type: str, attrs: tuple[str, ...] = ()):
    """An export writing the ``com.microsoft`` kernel ``op_type`` on the operator's inputs, in order, with the
    parameters ``attrs`` as its attributes (export splits the domain off the ``domain:op_type`` name)."""
    def export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
        return [(f"{MS}:{op_type}", list(ins), list(outs), {k: p[k] for k in attrs})]

    return export


def _skip_shape(op: str, x: Shape, skip: Shape, *params: Shape) -> Shape:
    require(len(x) == _SKIP_RANK, f"{op}: the input must be (batch, sequence, hidden), got {x}")
    require(skip == x, f"{op}: the skip's shape {skip} is not the input's {x}")
    require(all(s == x[-1:] for s in params), f"{op}: gamma (and beta) must be ({x[-1]},), got {params}")
    return x


def _skip_rules(n_params: int) -> tuple[S.ShapeRule, ...]:
    x = S.shape("x")
    names = ("gamma", "beta")[:n_params]
    return (S.rule(x, S.eq(S.rank(x), _SKIP_RANK), S.eq(S.shape("skip"), x),
                   *(S.eq(S.shape(n), S.vec(S.dim(x, _SKIP_RANK - 1))) for n in names)),)


ORT_SKIP_LAYERNORM = _register_kernel("SkipLayerNormalization", OpSpec(
    name="ort_skip_layernorm", inputs=("x", "skip", "gamma", "beta"), params=(("epsilon", "float"),),
    defaults={"epsilon": 1e-12}, runtime=RUNTIME,
    doc="onnxruntime's SkipLayerNormalization: layernorm(x + skip) over the last axis, * gamma + beta. x and skip "
        "of one shape (batch, sequence, hidden), gamma and beta (hidden,); the kernel's bias input and its "
        "statistics and sum outputs are not used",
    shape_fn=lambda p, x, skip, gamma, beta: _skip_shape("ort_skip_layernorm", x, skip, gamma, beta),
    numpy_fn=lambda p, x, skip, gamma, beta: LAYERNORM.numpy_fn({"axis": x.ndim - 1, "epsilon": p["epsilon"]}, x + skip,
                                                    gamma, beta),
    modular_fn=None, flops_fn=lambda p, ins, out: 9 * math.prod(out),
    export_fn=_kernel("SkipLayerNormalization", ("epsilon",)),
    shape_rules=_skip_rules(2),
    runs_as=lambda p: [("ewadd", {}, (0, 1)),
                       ("layernorm", {"axis": _SKIP_RANK - 1, "epsilon": p["epsilon"]}, (-1, 2, 3))],
))

ORT_SKIP_RMSNORM = _register_kernel("SkipSimplifiedLayerNormalization", OpSpec(
    name="ort_skip_rmsnorm", inputs=("x", "skip", "gamma"), params=(("epsilon", "float"),),
    defaults={"epsilon": 1e-6}, runtime=RUNTIME,
    doc="onnxruntime's SkipSimplifiedLayerNormalization: rmsnorm(x + skip) over the last axis, * gamma. x and skip "
        "of one shape (batch, sequence, hidden), gamma (hidden,); the kernel's bias input and its statistics and "
        "sum outputs are not used",
    shape_fn=lambda p, x, skip, gamma: _skip_shape("ort_skip_rmsnorm", x, skip, gamma),
    numpy_fn=lambda p, x, skip, gamma: RMSNORM.numpy_fn({"axis": x.ndim - 1, "epsilon": p["epsilon"]}, x + skip, gamma),
    modular_fn=None, flops_fn=lambda p, ins, out: 5 * math.prod(out),
    export_fn=_kernel("SkipSimplifiedLayerNormalization", ("epsilon",)),
    shape_rules=_skip_rules(1),
    runs_as=lambda p: [("ewadd", {}, (0, 1)), ("rmsnorm", {"axis": _SKIP_RANK - 1, "epsilon": p["epsilon"]}, (-1, 2))],
))


def _bias_shape(op: str, x: Shape, bias: Shape) -> Shape:
    require(len(x) >= 1 and bias == x[-1:], f"{op}: the bias must be the input's last dimension, got {bias} for {x}")
    return x


def _bias_gelu(name: str, op_type: str, approximate: int, form: str) -> OpSpec:
    return _register_kernel(op_type, OpSpec(
        name=name, inputs=("x", "bias"), params=(), runtime=RUNTIME,
        doc=f"onnxruntime's {op_type}: gelu(x + bias) in its {form} form, the bias of shape (x.shape[-1],)",
        shape_fn=lambda p, x, bias: _bias_shape(name, x, bias),
        numpy_fn=lambda p, x, bias: GELU.numpy_fn({"approximate": approximate}, x + bias),
        modular_fn=None, flops_fn=lambda p, ins, out: 9 * math.prod(out),
        export_fn=_kernel(op_type),
        shape_rules=(S.rule(S.shape("x"), S.ge(S.rank(S.shape("x")), 1),
                            S.eq(S.shape("bias"), S.vec(S.dim(S.shape("x"), S.rank(S.shape("x")) - 1)))),),
        runs_as=lambda p: [("ewadd", {}, (0, 1)), ("gelu", {"approximate": approximate}, (-1,))],
    ))


ORT_BIAS_GELU = _bias_gelu("ort_bias_gelu", "BiasGelu", 0, "exact (erf)")
ORT_FAST_GELU = _bias_gelu("ort_fast_gelu", "FastGelu", 1, "tanh")


def kernel_type(name: str) -> str:
    """The ONNX operator type export writes a kernel operator as (``ort_skip_layernorm``:
    ``SkipLayerNormalization``)."""
    return _TYPES[name]


# -- attention: MultiHeadAttention --------------------------------------------------------------------------------

#: how the heads are laid out after the split: (batch, heads, sequence, head size)
_HEADS = (0, 2, 1, 3)


def _mha_np(split: tuple[int, ...], q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: np.ndarray,
            bias: np.ndarray | None = None) -> np.ndarray:
    """Attention as the exporters write it: each input split into heads, ``softmax(q k^T * scale + bias) v``,
    the heads merged back."""
    def heads(x: np.ndarray) -> np.ndarray:
        return x.reshape(split).transpose(_HEADS)

    scores = heads(q) @ heads(k).transpose(0, 1, 3, 2) * scale
    if bias is not None:
        scores = scores + bias
    p = REGISTRY["softmax"].evaluate({"axis": 3}, [scores])
    return (p @ heads(v)).transpose(_HEADS).reshape(q.shape)


def _mha_shape(op: str, split: tuple[int, ...], q: Shape, k: Shape, v: Shape, scale: Shape,
               bias: Shape | None = None) -> Shape:
    require(len(split) == 4, f"{op}: split must be (batch, sequence, heads, head size), got {split}")
    b, s, n, h = split
    # (at a symbolic model's generic point every size is an int: a hidden size that is itself dynamic, which no
    # exporter writes, passes here, and export, which cannot write a symbolic head count, keeps the original)
    require(isinstance(n, int) and isinstance(h, int), f"{op}: the heads and their size must be known, got {split}")
    require(q == (b, s, n * h), f"{op}: the query {q} is not (batch, sequence, heads * head size) for {split}")
    require(k == q and v == q, f"{op}: key {k} and value {v} must have the query's shape {q} (self-attention)")
    require(scale == (), f"{op}: the scale must be a scalar, got {scale}")
    if bias is not None:
        require(len(bias) == 4 and bias[2:] == (s, s)
                and ((isinstance(bias[0], int) and bias[0] == 1) or bias[0] == b) and bias[1] in (1, n),
                f"{op}: the attention bias must be (batch or 1, heads or 1, sequence, sequence), got {bias}")
    return q


def _mha_rules(bias: bool) -> tuple[S.ShapeRule, ...]:
    q, sp = S.shape("query"), S.param("split")
    common = (S.eq(S.rank(q), 3), S.eq(S.rank(sp), 4), S.eq(S.dim(q, 0), S.dim(sp, 0)),
              S.eq(S.dim(q, 1), S.dim(sp, 1)), S.eq(S.dim(q, 2), S.dim(sp, 2) * S.dim(sp, 3)),
              S.eq(S.shape("key"), q), S.eq(S.shape("value"), q), S.eq(S.rank(S.shape("scale")), 0))
    if not bias:
        return (S.rule(q, *common),)
    m = S.shape("bias")
    on_bias = (S.eq(S.rank(m), 4), S.eq(S.dim(m, 2), S.dim(q, 1)), S.eq(S.dim(m, 3), S.dim(q, 1)))
    return tuple(S.rule(q, *common, *on_bias, S.eq(S.dim(m, 0), b), S.eq(S.dim(m, 1), n))
                 for b in (1, S.dim(q, 0)) for n in (1, S.dim(sp, 2)))


def _mha_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
    # the scale goes on the query (softmax((q * s) k^T) is the same), so the kernel's scale attribute, which
    # must be known when the model is written, is 1 whatever tensor the scale is
    q, k, v, scale, *bias = ins
    scaled = ctx.fresh("mha_query")
    return [("Mul", [q, scale], [scaled], {}),
            (f"{MS}:MultiHeadAttention", [scaled, k, v, *(["", "", *bias] if bias else [])], list(outs),
             {"num_heads": p["split"][2], "scale": 1.0})]


def _mha_flops(split: tuple[int, ...], out: Shape) -> float:
    """Two products of (sequence x sequence x head size) per head, and about seven operations per score."""
    seq, head = split[1], split[3]
    return 4 * math.prod(out) * seq + 7 * math.prod(out) * seq / head


def _mha_parts(p: Params, bias: bool) -> list[tuple[str, Params, tuple[int, ...]]]:
    split = p["split"]
    b, s, n, h = split

    def heads(i: int, perm: tuple[int, ...] = _HEADS) -> list[tuple[str, Params, tuple[int, ...]]]:
        return [("reshape", {"shape": split}, (i,)), ("transpose", {"perm": perm}, (-1,))]

    return [*heads(0), *heads(1, (0, 2, 3, 1)), ("matmul", {}, (-3, -1)), ("smul", {}, (-1, 3)),
            *([("ewadd", {}, (-1, 4))] if bias else []), ("softmax", {"axis": 3}, (-1,)), *heads(2),
            ("matmul", {}, (-3, -1)), ("transpose", {"perm": _HEADS}, (-1,)),
            ("reshape", {"shape": (b, s, n * h)}, (-1,))]


def _mha(name: str, bias: bool) -> OpSpec:
    inputs = ("query", "key", "value", "scale", *(("bias",) if bias else ()))
    return _register_kernel("MultiHeadAttention", OpSpec(
        name=name, inputs=inputs, params=(("split", "ints"),), runtime=RUNTIME,
        doc="onnxruntime's MultiHeadAttention on self-attention as exporters write it: query, key and value "
            "(batch, sequence, hidden) each split into heads by reshaping to split = (batch, sequence, heads, "
            "head size) and moving the heads before the sequence, then softmax(q k^T * scale"
            f"{' + bias' if bias else ''}) v over the last axis, the heads merged back to (batch, sequence, "
            "hidden). scale is a scalar tensor (written as a Mul on the query)"
            + (", bias of shape (batch or 1, heads or 1, sequence, sequence) (the kernel's attention_bias: an "
               "additive mask)" if bias else ""),
        shape_fn=lambda p, *shapes: _mha_shape(name, tuple(p["split"]), *shapes),
        numpy_fn=lambda p, *xs: _mha_np(tuple(p["split"]), *xs),
        modular_fn=None,
        flops_fn=lambda p, ins, out: _mha_flops(p["split"], out),
        export_fn=_mha_export, shape_rules=_mha_rules(bias),
        runs_as=lambda p: _mha_parts(p, bias),
    ))


ORT_MHA = _mha("ort_mha", bias=False)
ORT_MHA_BIAS = _mha("ort_mha_bias", bias=True)
