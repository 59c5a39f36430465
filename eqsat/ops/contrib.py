"""onnxruntime's fused kernels, imported as the registry operators they fuse.

A model that went through onnxruntime's optimizers (its transformer optimizer, or a session's saved optimized
graph) holds ``com.microsoft`` kernels such as ``SkipLayerNormalization``, ``FastGelu`` or ``FusedConv``, and
``SimplifiedLayerNormalization``, which onnxruntime registers in the default domain. Imported as their
decompositions, they take part in rewrites like any operator, the cost model chooses between the fused and the
unfused forms as onnxruntime runs them (it fuses them again when it loads the written model, where its patterns
match), and the written model is standard ONNX. Each importer below states the kernel's semantics it relies on;
a configuration outside them (an extra output in use, a broadcast the kernel does not define) stays opaque, with
the reason.
"""

from __future__ import annotations

import numpy as np

from eqsat.ops.chains import runs_as_nodes
from eqsat.ops.core import MAX_RANK, ONNX_IMPORTERS, ImportContext, IRNode, OnnxNode, importer
from eqsat.ops.norm import import_rmsnorm

MS = "com.microsoft"


def _outputs_beyond(outs: list[str], keep: int) -> bool:
    """Whether an output after the first ``keep`` is in use (the importer blanks those nobody reads)."""
    return any(outs[keep:])


def _sum(ctx: ImportContext, terms: list[str], out: str) -> list[IRNode]:
    """The IR nodes of the element-wise sum of ``terms`` into ``out``, as ONNX ``Sum`` imports (numpy
    broadcasting: lower ranks right-aligned)."""
    return ONNX_IMPORTERS["Sum"](ctx, ("Sum", list(terms), [out], {}))


def _skip_sum(ctx: ImportContext, node: OnnxNode, bias_at: int) -> tuple[list[IRNode], str] | None:
    """The IR nodes of a fused norm's first step, ``input + skip (+ bias)``, and the tensor that holds it (the
    kernel's fourth output where that is read). None (recorded) outside the kernel's contract as imported: float
    inputs, an ``epsilon`` attribute, the statistics outputs unread, a gamma of the input's last dimension, a
    skip of the input's trailing shape of rank 2 or more (or ``(1, sequence, hidden)``, broadcast over the
    batch), a bias of the input's last dimension."""
    _, ins, outs, attrs = node
    if not all(ctx.is_float(i) for i in ins if i):
        return ctx.unsupported("a non-float input")
    if any(outs[1:3]):
        return ctx.unsupported("a statistics output (mean or inverse deviation) in use")
    if "epsilon" not in attrs:
        return ctx.unsupported("no epsilon attribute")
    x, skip, gamma = ins[0], ins[1], ins[2]
    shape, skip_shape = tuple(ctx.shape(x)), tuple(ctx.shape(skip))
    if not 2 <= len(shape) <= MAX_RANK or tuple(ctx.shape(gamma)) != shape[-1:]:
        return ctx.unsupported(f"an input of shape {shape} with gamma of shape {tuple(ctx.shape(gamma))}")
    trailing = shape[len(shape) - len(skip_shape):]
    if not 2 <= len(skip_shape) <= len(shape) or not (
            skip_shape == trailing or (len(skip_shape) == 3 and skip_shape[0] == 1 and skip_shape[1:] == shape[1:])):
        return ctx.unsupported(f"a skip of shape {skip_shape} for an input of shape {shape}")
    terms = [x, skip]
    if len(ins) > bias_at and ins[bias_at]:
        if tuple(ctx.shape(ins[bias_at])) != shape[-1:]:
            return ctx.unsupported(f"a bias of shape {tuple(ctx.shape(ins[bias_at]))}")
        terms.append(ins[bias_at])
    out = outs[3] if len(outs) > 3 and outs[3] else ctx.fresh(f"{outs[0]}_sum")
    return _sum(ctx, terms, out), out


@importer(f"{MS}:SkipLayerNormalization")
def _import_skip_layernorm(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    """``LayerNormalization(input + skip + bias) * gamma + beta`` over the last axis; outputs: the norm, the
    mean and inverse deviation (optional, not imported), the sum (optional)."""
    summed = _skip_sum(ctx, node, bias_at=4)
    if summed is None:
        return None
    (res, s), (_, ins, outs, attrs) = summed, node
    hidden = tuple(ctx.shape(ins[0]))[-1:]
    if len(ins) > 3 and ins[3]:
        if tuple(ctx.shape(ins[3])) != hidden:
            return ctx.unsupported(f"a beta of shape {tuple(ctx.shape(ins[3]))}")
        beta = ins[3]
    else:
        beta = ctx.add_weight(np.zeros(hidden, dtype=np.float32), f"{outs[0]}_beta")
    params = {"axis": len(ctx.shape(ins[0])) - 1, "epsilon": float(attrs["epsilon"])}
    return res + [("layernorm", params, [s, ins[2], beta], [outs[0]])]


@importer(f"{MS}:SkipSimplifiedLayerNormalization")
def _import_skip_rmsnorm(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    """``RMSNormalization(input + skip + bias) * gamma`` over the last axis; outputs: the norm, two statistics
    (optional, not imported), the sum (optional)."""
    summed = _skip_sum(ctx, node, bias_at=3)
    if summed is None:
        return None
    (res, s), (_, ins, outs, attrs) = summed, node
    params = {"axis": len(ctx.shape(ins[0])) - 1, "epsilon": float(attrs["epsilon"])}
    return res + [("rmsnorm", params, [s, ins[2]], [outs[0]])]


@importer("SimplifiedLayerNormalization")
def _import_simplified_layernorm(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    """onnxruntime's RMS norm (default domain): ONNX ``RMSNormalization``'s semantics; its second output, the
    inverse deviation, is not imported."""
    if _outputs_beyond(node[2], 1):
        return ctx.unsupported("its inverse-deviation output in use")
    return import_rmsnorm(ctx, node)


def _gelu_of_sum(approximate: int):
    def imp(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
        _, ins, outs, _ = node
        terms = [i for i in ins if i]
        if not all(ctx.is_float(i) for i in terms):
            return ctx.unsupported("a non-float input")
        if len(terms) > 1 and tuple(ctx.shape(terms[1])) != tuple(ctx.shape(terms[0]))[-1:]:
            return ctx.unsupported(f"a bias of shape {tuple(ctx.shape(terms[1]))}")
        if len(terms) == 1:
            return [("gelu", {"approximate": approximate}, terms, [outs[0]])]
        x = ctx.fresh(f"{outs[0]}_biased")
        return [*_sum(ctx, terms, x), ("gelu", {"approximate": approximate}, [x], [outs[0]])]

    imp.__doc__ = f"GELU ({'tanh' if approximate else 'erf'} form) of the input plus the optional bias (last axis)."
    return imp


importer(f"{MS}:BiasGelu", f"{MS}:Gelu")(_gelu_of_sum(0))
importer(f"{MS}:FastGelu")(_gelu_of_sum(1))


@importer(f"{MS}:MultiHeadAttention")
def _import_multi_head_attention(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    """Self-attention over separate query, key and value of one shape ``(batch, sequence, hidden)``: each split
    into ``num_heads`` heads, ``softmax(q k^T * scale + attention_bias) v`` over the keys, the heads merged back;
    ``scale`` defaults to 1/sqrt(head size), ``attention_bias`` (input 5, optional) is
    ``(batch or 1, heads or 1, sequence, sequence)``. Not imported: packed inputs, a projection bias, a key
    padding mask, past state, the present outputs, causal (``unidirectional``) attention."""
    _, ins, outs, attrs = node
    ins = [*ins, *[""] * (6 - len(ins))]
    if any(ins[3:5]) or any(ins[6:]) or any(outs[1:]):
        return ctx.unsupported("a projection bias, key padding mask, past or present state")
    if int(attrs.get("unidirectional", 0)):
        return ctx.unsupported("causal (unidirectional) attention")
    q, k, v, mask = ins[0], ins[1], ins[2], ins[5]
    if not (k and v) or not all(ctx.is_float(i) for i in (q, k, v, mask) if i):
        return ctx.unsupported("packed query, key and value, or a non-float input")
    shape = tuple(ctx.shape(q))
    heads = int(attrs.get("num_heads", 0))
    if len(shape) != 3 or tuple(ctx.shape(k)) != shape or tuple(ctx.shape(v)) != shape \
            or not ctx.is_static(shape[2]) or heads <= 0 or shape[2] % heads:
        return ctx.unsupported(f"query, key and value of shapes other than one (batch, sequence, heads * size) "
                               f"of a fixed hidden size, got {shape} with {heads} heads")
    split = (shape[0], shape[1], heads, shape[2] // heads)
    if mask:
        m = tuple(ctx.shape(mask))
        if len(m) != 4 or m[2:] != (shape[1], shape[1]) or m[0] not in (1, shape[0]) or m[1] not in (1, heads):
            return ctx.unsupported(f"an attention bias of shape {m}")
    scale = ctx.add_weight(np.array(float(attrs.get("scale", 0.0)) or split[3] ** -0.5, np.float32),
                           f"{outs[0]}_scale")
    # what the kernel operator of target onnxruntime runs as (eqsat.ops.ort_kernels): one description of it
    return runs_as_nodes("ort_mha_bias" if mask else "ort_mha", {"split": split},
                         [q, k, v, scale, *([mask] if mask else [])], outs[0], lambda h: ctx.fresh(f"{outs[0]}_{h}"))


@importer(f"{MS}:FusedMatMul")
def _import_fused_matmul(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    """``alpha * op(A) @ op(B)``, ``op`` swapping the last two axes where ``transA`` / ``transB`` is set; the
    batch-transposing forms (``transBatchA`` / ``transBatchB``) are not imported."""
    _, ins, outs, attrs = node
    a, b = ins[0], ins[1]
    if not (ctx.is_float(a) and ctx.is_float(b)):
        return ctx.unsupported("a non-float input")
    if attrs.get("transBatchA", 0) or attrs.get("transBatchB", 0):
        return ctx.unsupported("transBatchA or transBatchB set")
    sa, sb = ctx.shape(a), ctx.shape(b)
    if len(sa) != len(sb) or not 2 <= len(sa) <= MAX_RANK:
        return ctx.unsupported(f"operands of shapes {tuple(sa)} and {tuple(sb)} (equal ranks from 2 imported)")
    res: list[IRNode] = []
    perm = (*range(len(sa) - 2), len(sa) - 1, len(sa) - 2)
    for flag in ("transA", "transB"):
        if attrs.get(flag, 0):
            src = a if flag == "transA" else b
            dst = ctx.fresh(f"{src}_T")
            res.append(("transpose", {"perm": perm}, [src], [dst]))
            a, b = (dst, b) if flag == "transA" else (a, dst)
    alpha = float(attrs.get("alpha", 1.0))
    prod = outs[0] if alpha == 1.0 else ctx.fresh(f"{outs[0]}_product")
    res.append(("matmul", {}, [a, b], [prod]))
    if alpha != 1.0:
        res.append(("smul", {}, [prod, ctx.add_weight(np.array(alpha, dtype=np.float32), "alpha")], [outs[0]]))
    return res


def _activation(ctx: ImportContext, attrs: dict, x: str, out: str) -> list[IRNode] | None:
    """The IR node applying a fused kernel's ``activation`` attribute (with ``activation_params``) to ``x``; None
    (recorded) for one eqsat has no operator for."""
    act = attrs.get("activation", "")
    act = act.decode() if isinstance(act, bytes) else str(act)
    if act in ("Relu", "Sigmoid", "Tanh"):
        return [(act.lower(), {}, [x], [out])]
    params = [float(v) for v in attrs.get("activation_params", [])]
    if act == "Clip" and len(params) == 2:
        low, high = params
        return [("clip", {"low": min(low, high) + 0.0, "high": high + 0.0}, [x], [out])]
    return ctx.unsupported(f"activation {act!r}" + (f" with parameters {params}" if params else ""))


def _then_activation(op_type: str, plain_inputs: int):
    """An importer for ``op_type``'s fused form: the ONNX operator's importer on its first ``plain_inputs``
    inputs and its attributes, then (FusedConv) the added ``Z`` input, then the activation."""
    def imp(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
        _, ins, outs, attrs = node
        plain_attrs = {k: v for k, v in attrs.items() if not k.startswith("activation")}
        pre = ctx.fresh(f"{outs[0]}_{op_type.lower()}")
        res = ONNX_IMPORTERS[op_type](ctx, (op_type, list(ins[:plain_inputs]), [pre], plain_attrs))
        if res is None:
            return None
        extra = [i for i in ins[plain_inputs:] if i]
        if extra:  # FusedConv's Z: added before the activation, of the convolution's output shape
            summed = ctx.fresh(f"{outs[0]}_sum")
            res = [*res, ("ewadd", {}, [pre, extra[0]], [summed])]
            pre = summed
        act = _activation(ctx, attrs, pre, outs[0])
        return None if act is None else [*res, *act]

    imp.__doc__ = f"onnxruntime's {op_type} with an activation fused in: ``activation({op_type}(...))``."
    return imp


importer(f"{MS}:FusedConv")(_then_activation("Conv", 3))
importer(f"{MS}:FusedGemm")(_then_activation("Gemm", 3))
