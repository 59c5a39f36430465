"""Constant operators (TASO's C_pool, I_conv, I_matmul, I_ewmul, and a zero bias)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from eqsat.ops import shapes as S
from eqsat.ops.conv import apply_same_conv
from eqsat.ops.core import (
    REGISTRY,
    ExportContext,
    GenContext,
    GeneratorForm,
    GenTensor,
    OnnxNode,
    OpSpec,
    Params,
    Shape,
    SymShape,
    Z3Context,
    register,
    require,
)
from eqsat.ops.elementwise import apply_equal_shapes

# -- constants (TASO's C_pool, I_conv, I_matmul, I_ewmul; a zero bias) -------------------------------------
# Zero-input operators whose parameters give their shape. They appear in generated rules (eqsat.rules) and
# export as an initializer; work that only reads constants and weights is folded like work on weights.


def _const_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext, spec_name: str) -> list[OnnxNode]:
    arr = np.asarray(REGISTRY[spec_name].numpy_fn(p), dtype=np.float32)
    name = ctx.add_initializer(arr, outs[0] + "_const")
    return [("Identity", [name], outs, {})]


def _const_spec(name: str, params: tuple[tuple[str, str], ...], shape_fn: Callable[..., Shape],
                numpy_fn: Callable[..., np.ndarray], modular_fn: Callable[..., np.ndarray], result: S.Expr,
                when: tuple[S.Expr, ...], doc: str, sym_shape: Callable[[Params], SymShape],
                forms: dict[str, GeneratorForm] | None = None, z3_fn: Callable[..., np.ndarray] | None = None
                ) -> OpSpec:
    return register(OpSpec(
        name=name, inputs=(), params=params, doc=doc,
        shape_fn=shape_fn, numpy_fn=numpy_fn, modular_fn=modular_fn,
        flops_fn=lambda p, ins, out: 0,
        export_fn=lambda p, ins, outs, ctx: _const_export(p, ins, outs, ctx, name),
        shape_rules=(S.rule(result, *when),),
        # the generator writes a constant's shape from its co-operand's dimensions: the parameters say it
        sym_shape=lambda p, ins: sym_shape(p), generator_forms=forms or {}, z3_fn=z3_fn,
    ))


# -- how the rule generator uses the constants: sized in context, from the dimensions of their co-operand ---

def _pool_conv_form(g: GenContext, args: Sequence[GenTensor]) -> list[GenTensor] | None:
    """A depthwise convolution with C_pool (an average pool); the kernel's bias is zero."""
    x = args[0]
    if x.bias is not None or len(x.shape) != 4:
        return None
    c, csym = x.shape[1], x.sym[1]
    kern = g.apply("const_pool", {"kernel": (3, 3), "channels": c}, [], pattern={"channels": csym})
    bias = g.apply("const_zero", {"shape": (c,)}, [], pattern={"shape": (csym,)})
    assert kern is not None and bias is not None, x.shape
    kern.bias = bias
    t = apply_same_conv(g, x, kern, 0, c, csym)
    return [t] if t is not None else None


def _add_iconv_form(g: GenContext, args: Sequence[GenTensor]) -> list[GenTensor] | None:
    """A square kernel plus I_conv (its bias unchanged)."""
    w = args[0]
    if w.bias is None or w.shape[0] != w.shape[1]:
        return None
    ident = g.apply("const_iconv", {"kernel": w.shape[2:], "channels": w.shape[0]}, [],
                    pattern={"channels": w.sym[0]})
    assert ident is not None, w.shape
    t = apply_equal_shapes(g, "ewadd", w, ident)
    if t is not None:
        t.bias = w.bias
    return [t] if t is not None else None


def _add_imatmul_form(g: GenContext, args: Sequence[GenTensor]) -> list[GenTensor] | None:
    """A square matrix plus I_matmul."""
    a = args[0]
    if len(a.shape) != 2 or a.shape[0] != a.shape[1]:
        return None
    ident = g.apply("const_imatmul", {"n": a.shape[0]}, [], pattern={"n": a.sym[0]})
    assert ident is not None, a.shape
    t = apply_equal_shapes(g, "ewadd", a, ident)
    return [t] if t is not None else None


def _add_iewmul_form(g: GenContext, args: Sequence[GenTensor]) -> list[GenTensor] | None:
    """A tensor plus I_ewmul."""
    a = args[0]
    if not a.shape or a.bias is not None:
        return None
    ones = g.apply("const_iewmul", {"shape": a.shape}, [], pattern={"shape": a.sym})
    assert ones is not None, a.shape
    t = apply_equal_shapes(g, "ewadd", a, ones)
    return [t] if t is not None else None


def _const_pool_z3(z: Z3Context, p: Params) -> np.ndarray:
    # 1 / (kh * kw) exactly (the float reference's value is rounded)
    kh, kw = _kernel_of(p)
    out = np.empty((p["channels"], 1, kh, kw), dtype=object)
    out.flat[:] = [z.real(1) / (kh * kw)] * out.size
    return out


def _kernel_of(p: Params) -> tuple[int, int]:
    kh, kw = p["kernel"]
    require(kh > 0 and kw > 0, f"constant kernel {p['kernel']} must be positive")
    return kh, kw


def _const_pool_np(p: Params) -> np.ndarray:
    kh, kw = _kernel_of(p)
    return np.full((p["channels"], 1, kh, kw), 1.0 / (kh * kw), dtype=np.float32)


def _const_pool_mod(p: Params, m: int) -> np.ndarray:
    kh, kw = _kernel_of(p)
    out = np.empty((p["channels"], 1, kh, kw), dtype=object)
    out[...] = pow(kh * kw, -1, m)
    return out


def _iconv(p: Params, one: Any, zero: Any, dtype: Any) -> np.ndarray:
    kh, kw = _kernel_of(p)
    require(kh % 2 == 1 and kw % 2 == 1, f"const_iconv: kernel {p['kernel']} must be odd")
    c = p["channels"]
    out = np.full((c, c, kh, kw), zero, dtype=dtype)
    for i in range(c):
        out[i, i, kh // 2, kw // 2] = one
    return out


def _pos(v: int, what: str) -> int:
    require(v > 0, f"{what} must be positive, got {v}")
    return v


_C, _KERNEL = S.param("channels"), (S.dim(S.param("kernel"), 0), S.dim(S.param("kernel"), 1))
CONST_POOL = _const_spec(
    "const_pool", (("kernel", "ints"), ("channels", "int")),
    lambda p: (_pos(p["channels"], "const_pool channels"), 1) + _kernel_of(p),
    _const_pool_np, lambda p, m: _const_pool_mod(p, m),
    S.vec(_C, 1, *_KERNEL), (S.gt(_C, 0),),
    "C_pool: a depthwise (channels, 1, kh, kw) kernel of 1/(kh*kw); conv with it (groups=channels) is an "
    "average pool counting padding",
    lambda p: (p["channels"], 1, *p["kernel"]), {"convpool": GeneratorForm(_pool_conv_form, domains=("conv",))},
    _const_pool_z3)
CONST_ICONV = _const_spec(
    "const_iconv", (("kernel", "ints"), ("channels", "int")),
    lambda p: (_pos(p["channels"], "const_iconv channels"), p["channels"]) + _kernel_of(p),
    lambda p: _iconv(p, 1.0, 0.0, np.float32), lambda p, m: _iconv(p, 1, 0, object),
    S.vec(_C, _C, *_KERNEL), (S.gt(_C, 0),),
    "I_conv: the identity kernel (channels, channels, kh, kw), 1 at the centre where out == in",
    lambda p: (p["channels"], p["channels"], *p["kernel"]),
    {"add_iconv": GeneratorForm(_add_iconv_form, domains=("conv",))})
CONST_IMATMUL = _const_spec(
    "const_imatmul", (("n", "int"),),
    lambda p: (_pos(p["n"], "const_imatmul n"),) * 2,
    lambda p: np.eye(p["n"], dtype=np.float32),
    lambda p, m: np.array([[1 if i == j else 0 for j in range(p["n"])] for i in range(p["n"])], dtype=object)
    .reshape(p["n"], p["n"]),
    S.vec(S.param("n"), S.param("n")), (S.gt(S.param("n"), 0),), "I_matmul: the n x n identity matrix",
    lambda p: (p["n"], p["n"]), {"add_imatmul": GeneratorForm(_add_imatmul_form, domains=("mat",))})
CONST_IEWMUL = _const_spec(
    "const_iewmul", (("shape", "ints"),),
    lambda p: tuple(_pos(d, "const_iewmul dim") for d in p["shape"]),
    lambda p: np.ones(p["shape"], dtype=np.float32),
    lambda p, m: np.full(p["shape"], 1, dtype=object),
    S.param("shape"), (), "I_ewmul: a tensor of ones of the given shape",
    lambda p: tuple(p["shape"]), {"add_iewmul": GeneratorForm(_add_iewmul_form, domains=("mat",))})
CONST_ZERO = _const_spec(
    "const_zero", (("shape", "ints"),),
    lambda p: tuple(_pos(d, "const_zero dim") for d in p["shape"]),
    lambda p: np.zeros(p["shape"], dtype=np.float32),
    lambda p, m: np.full(p["shape"], 0, dtype=object),
    S.param("shape"), (), "a tensor of zeros of the given shape (the bias of a conv with a constant kernel)",
    lambda p: tuple(p["shape"]))
