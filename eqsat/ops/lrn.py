"""Local response normalization (ONNX LRN), with the forms it can be written in.

``y = x / (bias + alpha / size * s) ** beta``, where ``s`` sums ``x ** 2`` over a window of ``size`` channels
around each channel (``(size - 1) // 2`` before, ``size // 2`` after, clipped at the edges). The parameter
``form`` only says how export writes it, all forms computing the same function: 0 as ONNX's ``LRN`` node, 1
with the channel window as an ``AveragePool`` over a ``(N, 1, C, rest)`` view, 2 as a sum of ``size`` shifted
slices of the zero-padded squares. onnxruntime's CPU ``LRN`` kernel raises every element to the power
``-beta`` one at a time (5.4 ms on AlexNet's 1x96x54x54 input, 1 thread); forms 1 and 2 take 0.26-1.5 ms
depending on the shape (the power as square roots where ``beta`` is 0.75 or 0.5). The e-graph holds every
form of each LRN (rules ``lrn-form-*`` in :mod:`eqsat.rules.layout`), and measured costs pick one per shape.
"""

from __future__ import annotations

import math
import zlib

import numpy as np

from eqsat.ops import shapes as S
from eqsat.ops.core import (
    ExportContext,
    ImportContext,
    IRNode,
    OnnxNode,
    OpSpec,
    Params,
    Shape,
    get,
    importer,
    register,
    require,
)

#: export forms: ONNX's LRN node, the window as an AveragePool, the window as a sum of shifted slices
FORM_NODE, FORM_POOL, FORM_SLICES = 0, 1, 2


def _window(size: int) -> tuple[int, int]:
    """Channels summed before and after each channel (ONNX: floor and ceil of (size - 1) / 2)."""
    return (size - 1) // 2, size // 2


def _lrn_shape(p: Params, x: Shape) -> Shape:
    require(len(x) >= 3, f"lrn: needs an input of rank 3 or more (N, C, ...), got {x}")
    require(p["size"] >= 1, f"lrn: size must be at least 1, got {p['size']}")
    require(p["form"] in (FORM_NODE, FORM_POOL, FORM_SLICES), f"lrn: form must be 0, 1 or 2, got {p['form']}")
    return x


def _square_sums(x: np.ndarray, size: int) -> np.ndarray:
    """Sum of squares over each channel's window (exact for object arrays of ints)."""
    lo, hi = _window(size)
    sq = x * x
    pad = [(0, 0)] * x.ndim
    pad[1] = (lo, hi)
    padded = np.pad(sq, pad)  # zeros: 0 for floats, the int 0 for object arrays
    c = x.shape[1]
    return sum(padded[:, k:k + c] for k in range(size))


def _lrn_np(p: Params, x: np.ndarray) -> np.ndarray:
    v = np.asarray(x, dtype=np.float64)
    t = p["bias"] + p["alpha"] / p["size"] * _square_sums(v, p["size"])
    return (v / t ** p["beta"]).astype(x.dtype, copy=False)


def _lrn_mod(p: Params, x: np.ndarray, m: int) -> np.ndarray:
    # not algebraic: x times a fixed polynomial of the window's sum of squares, one per (size, alpha, beta,
    # bias), so that LRNs with different parameters never fingerprint alike (forms are one function)
    v = np.asarray(x, dtype=object)
    h = zlib.crc32(f"lrn({p['size']},{p['alpha']!r},{p['beta']!r},{p['bias']!r})".encode())
    s = _square_sums(v, p["size"])
    return (v * (s * (71 + h % 997) + 73 + (h >> 10) % 991)) % m


def _lrn_flops(p: Params, ins: list[Shape], out: Shape) -> float:
    # square, window sum, scale, shift, power (a few operations as exp and log, or two roots), divide
    return float((2 * p["size"] + 24) * math.prod(out))


def _lrn_decomposition(p: Params) -> tuple[int, int]:
    # ONNX nodes and output-sized intermediates of the forms (the power's nodes counted as for beta = 0.75);
    # the analytic model prices them, so that it keeps the LRN node, which a runtime may run well
    if p["form"] == FORM_NODE:
        return 1, 0
    if p["form"] == FORM_POOL:  # square, view, pool, view, scale, shift, two roots, product, divide
        return 10, 8
    return 8 + p["size"], 7 + p["size"]  # square, pad, the slices, sum, scale, shift, two roots, product, divide


def _power_and_divide(x: str, t: str, y: str, beta: float, ctx: ExportContext) -> list[OnnxNode]:
    """``y = x / t ** beta``: square roots for the usual exponents (onnxruntime's Pow is element by element)."""
    if beta == 1.0:
        return [("Div", [x, t], [y], {})]
    root = ctx.fresh(f"{y}_sqrt")
    if beta == 0.5:
        return [("Sqrt", [t], [root], {}), ("Div", [x, root], [y], {})]
    denom = ctx.fresh(f"{y}_denom")
    if beta == 0.75:  # t^0.75 = sqrt(t) * sqrt(sqrt(t))
        fourth = ctx.fresh(f"{y}_fourth_root")
        return [("Sqrt", [t], [root], {}), ("Sqrt", [root], [fourth], {}), ("Mul", [root, fourth], [denom], {}),
                ("Div", [x, denom], [y], {})]
    e = ctx.add_initializer(np.array(beta, dtype=np.float32), f"{y}_beta")
    return [("Pow", [t, e], [denom], {}), ("Div", [x, denom], [y], {})]


def _lrn_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
    x, y = ins[0], outs[0]
    size, alpha, beta, bias = p["size"], p["alpha"], p["beta"], p["bias"]
    shape = ctx.shape(x)
    if p["form"] == FORM_NODE or shape is None:  # the decompositions need the static shape
        return [("LRN", [x], [y], {"size": size, "alpha": alpha, "beta": beta, "bias": bias})]
    lo, hi = _window(size)
    n, c = shape[0], shape[1]
    sq = ctx.fresh(f"{y}_square")
    nodes: list[OnnxNode] = [("Mul", [x, x], [sq], {})]
    total = ctx.fresh(f"{y}_window")
    if p["form"] == FORM_POOL:  # the mean over the window (zeros counted): alpha / size * sum = alpha * mean
        view, pooled = ctx.fresh(f"{y}_channel_rows"), ctx.fresh(f"{y}_window_view")
        rest = math.prod(shape[2:])
        pool = {"kernel": (size, 1), "strides": (1, 1), "pads": (lo, 0, hi, 0), "count_include_pad": 1}
        nodes += get("reshape").export_fn({"shape": (n, 1, c, rest)}, [sq], [view], ctx)
        nodes += get("avgpool").export_fn(pool, [view], [pooled], ctx)
        nodes += get("reshape").export_fn({"shape": tuple(shape)}, [pooled], [total], ctx)
        scale = alpha
    else:  # the sum of the size shifted windows of the zero-padded squares
        padded = ctx.fresh(f"{y}_padded")
        pads = [0] * (2 * len(shape))
        pads[1], pads[len(shape) + 1] = lo, hi
        nodes += get("pad").export_fn({"pads": tuple(pads), "value": 0.0}, [sq], [padded], ctx)
        shifted = [ctx.fresh(f"{y}_shift{k}") for k in range(size)]
        for k, name in enumerate(shifted):
            nodes += get("split").export_fn({"axis": 1, "start": k, "size": c}, [padded], [name], ctx)
        nodes.append(("Sum", shifted, [total], {}))
        scale = alpha / size
    scaled, t = ctx.fresh(f"{y}_scaled"), ctx.fresh(f"{y}_base")
    nodes += [("Mul", [total, ctx.add_initializer(np.array(scale, dtype=np.float32), f"{y}_alpha")], [scaled], {}),
              ("Add", [scaled, ctx.add_initializer(np.array(bias, dtype=np.float32), f"{y}_bias")], [t], {})]
    return nodes + _power_and_divide(x, t, y, beta, ctx)


_X = S.shape("x")
LRN = register(OpSpec(
    name="lrn", inputs=("x",),
    params=(("size", "int"), ("alpha", "float"), ("beta", "float"), ("bias", "float"), ("form", "int")),
    defaults={"alpha": 1e-4, "beta": 0.75, "bias": 1.0, "form": FORM_NODE},
    doc="local response normalization across channels (ONNX LRN): x / (bias + alpha / size * s) ^ beta, s the "
        "sum of squares over a window of size channels; form 0, 1, 2 writes it as the LRN node, with an "
        "AveragePool, with shifted slices (the same function)",
    shape_fn=_lrn_shape, numpy_fn=_lrn_np, modular_fn=_lrn_mod, flops_fn=_lrn_flops, export_fn=_lrn_export,
    decomposition=_lrn_decomposition,
    shape_rules=(S.rule(_X, S.ge(S.rank(_X), 3), S.ge(S.param("size"), 1), S.ge(S.param("form"), 0),
                        S.le(S.param("form"), 2)),),
))


@importer("LRN")
def _import_lrn(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    _, ins, outs, attrs = node
    if not ctx.is_float(ins[0]) or len(ctx.shape(ins[0])) < 3:
        return ctx.unsupported("a non-float input or one of rank below 3")
    p: Params = {"size": int(attrs["size"]), "alpha": float(attrs.get("alpha", 1e-4)),
                 "beta": float(attrs.get("beta", 0.75)), "bias": float(attrs.get("bias", 1.0)), "form": FORM_NODE}
    if p["size"] < 1:
        return ctx.unsupported(f"size {p['size']}")
    return [("lrn", p, [ins[0]], list(outs))]
