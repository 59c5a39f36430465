"""Constant operators (TASO's C_pool, I_conv, I_matmul, I_ewmul, and a zero bias)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from eqsat.ops import shapes as S
from eqsat.ops.core import (
    REGISTRY,
    ExportContext,
    OnnxNode,
    OpSpec,
    Params,
    Shape,
    _register,
    require,
)

# -- constants (TASO's C_pool, I_conv, I_matmul, I_ewmul; a zero bias) -------------------------------------
# Zero-input operators whose parameters give their shape. They appear in generated rules (eqsat.rules) and
# export as an initializer; work that only reads constants and weights is folded like work on weights.


def _const_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext, spec_name: str) -> list[OnnxNode]:
    arr = np.asarray(REGISTRY[spec_name].numpy_fn(p), dtype=np.float32)
    name = ctx.add_initializer(arr, outs[0] + "_const")
    return [("Identity", [name], outs, {})]


def _const_spec(name: str, params: tuple[tuple[str, str], ...], shape_fn: Callable[..., Shape],
                numpy_fn: Callable[..., np.ndarray], modular_fn: Callable[..., np.ndarray], result: S.Expr,
                when: tuple[S.Expr, ...], doc: str) -> OpSpec:
    return _register(OpSpec(
        name=name, inputs=(), params=params, doc=doc,
        shape_fn=shape_fn, numpy_fn=numpy_fn, modular_fn=modular_fn,
        flops_fn=lambda p, ins, out: 0,
        export_fn=lambda p, ins, outs, ctx: _const_export(p, ins, outs, ctx, name),
        shape_rules=(S.rule(result, *when),),
    ))


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
    "average pool counting padding")
CONST_ICONV = _const_spec(
    "const_iconv", (("kernel", "ints"), ("channels", "int")),
    lambda p: (_pos(p["channels"], "const_iconv channels"), p["channels"]) + _kernel_of(p),
    lambda p: _iconv(p, 1.0, 0.0, np.float32), lambda p, m: _iconv(p, 1, 0, object),
    S.vec(_C, _C, *_KERNEL), (S.gt(_C, 0),),
    "I_conv: the identity kernel (channels, channels, kh, kw), 1 at the centre where out == in")
CONST_IMATMUL = _const_spec(
    "const_imatmul", (("n", "int"),),
    lambda p: (_pos(p["n"], "const_imatmul n"),) * 2,
    lambda p: np.eye(p["n"], dtype=np.float32),
    lambda p, m: np.array([[1 if i == j else 0 for j in range(p["n"])] for i in range(p["n"])], dtype=object)
    .reshape(p["n"], p["n"]),
    S.vec(S.param("n"), S.param("n")), (S.gt(S.param("n"), 0),), "I_matmul: the n x n identity matrix")
CONST_IEWMUL = _const_spec(
    "const_iewmul", (("shape", "ints"),),
    lambda p: tuple(_pos(d, "const_iewmul dim") for d in p["shape"]),
    lambda p: np.ones(p["shape"], dtype=np.float32),
    lambda p, m: np.full(p["shape"], 1, dtype=object),
    S.param("shape"), (), "I_ewmul: a tensor of ones of the given shape")
CONST_ZERO = _const_spec(
    "const_zero", (("shape", "ints"),),
    lambda p: tuple(_pos(d, "const_zero dim") for d in p["shape"]),
    lambda p: np.zeros(p["shape"], dtype=np.float32),
    lambda p, m: np.full(p["shape"], 0, dtype=object),
    S.param("shape"), (), "a tensor of zeros of the given shape (the bias of a conv with a constant kernel)")
