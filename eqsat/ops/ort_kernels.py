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

from eqsat.ops import shapes as S
from eqsat.ops.contrib import MS
from eqsat.ops.core import REGISTRY, ExportContext, OnnxNode, OpSpec, Params, Shape, _register, require
from eqsat.ops.elementwise import _gelu_np
from eqsat.ops.norm import _ln_np, _rms_np

RUNTIME = "onnxruntime"
#: the rank of the (batch, sequence, hidden) activations the skip norms take
_SKIP_RANK = 3


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


ORT_SKIP_LAYERNORM = _register(OpSpec(
    name="ort_skip_layernorm", inputs=("x", "skip", "gamma", "beta"), params=(("epsilon", "float"),),
    defaults={"epsilon": 1e-12}, runtime=RUNTIME,
    doc="onnxruntime's SkipLayerNormalization: layernorm(x + skip) over the last axis, * gamma + beta. x and skip "
        "of one shape (batch, sequence, hidden), gamma and beta (hidden,); the kernel's bias input and its "
        "statistics and sum outputs are not used",
    shape_fn=lambda p, x, skip, gamma, beta: _skip_shape("ort_skip_layernorm", x, skip, gamma, beta),
    numpy_fn=lambda p, x, skip, gamma, beta: _ln_np({"axis": x.ndim - 1, "epsilon": p["epsilon"]}, x + skip,
                                                    gamma, beta),
    modular_fn=None, flops_fn=lambda p, ins, out: 9 * math.prod(out),
    export_fn=_kernel("SkipLayerNormalization", ("epsilon",)),
    shape_rules=_skip_rules(2),
    runs_as=lambda p: [("ewadd", {}, (0, 1)),
                       ("layernorm", {"axis": _SKIP_RANK - 1, "epsilon": p["epsilon"]}, (-1, 2, 3))],
))

ORT_SKIP_RMSNORM = _register(OpSpec(
    name="ort_skip_rmsnorm", inputs=("x", "skip", "gamma"), params=(("epsilon", "float"),),
    defaults={"epsilon": 1e-6}, runtime=RUNTIME,
    doc="onnxruntime's SkipSimplifiedLayerNormalization: rmsnorm(x + skip) over the last axis, * gamma. x and skip "
        "of one shape (batch, sequence, hidden), gamma (hidden,); the kernel's bias input and its statistics and "
        "sum outputs are not used",
    shape_fn=lambda p, x, skip, gamma: _skip_shape("ort_skip_rmsnorm", x, skip, gamma),
    numpy_fn=lambda p, x, skip, gamma: _rms_np({"axis": x.ndim - 1, "epsilon": p["epsilon"]}, x + skip, gamma),
    modular_fn=None, flops_fn=lambda p, ins, out: 5 * math.prod(out),
    export_fn=_kernel("SkipSimplifiedLayerNormalization", ("epsilon",)),
    shape_rules=_skip_rules(1),
    runs_as=lambda p: [("ewadd", {}, (0, 1)), ("rmsnorm", {"axis": _SKIP_RANK - 1, "epsilon": p["epsilon"]}, (-1, 2))],
))


def _bias_shape(op: str, x: Shape, bias: Shape) -> Shape:
    require(len(x) >= 1 and bias == x[-1:], f"{op}: the bias must be the input's last dimension, got {bias} for {x}")
    return x


def _bias_gelu(name: str, op_type: str, approximate: int, form: str) -> OpSpec:
    return _register(OpSpec(
        name=name, inputs=("x", "bias"), params=(), runtime=RUNTIME,
        doc=f"onnxruntime's {op_type}: gelu(x + bias) in its {form} form, the bias of shape (x.shape[-1],)",
        shape_fn=lambda p, x, bias: _bias_shape(name, x, bias),
        numpy_fn=lambda p, x, bias: _gelu_np({"approximate": approximate}, x + bias),
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
    spec = REGISTRY[name]
    # the kernels' exports read no context
    ((op_type, *_),) = spec.export_fn(spec.normalize({}), list(spec.inputs), ["y"], None)  # type: ignore
    return op_type.rpartition(":")[2]
