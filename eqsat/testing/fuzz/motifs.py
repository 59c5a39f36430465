"""The generator's motifs: each appends a few nodes to a :class:`~eqsat.testing.fuzz.graph.GraphBuilder`.

The motifs cover the operators the registry imports (MatMul, Gemm, Conv, Add/Mul/Sum with broadcasting,
Relu/Sigmoid/Tanh, Transpose, Reshape/Flatten/Squeeze/Unsqueeze, Concat, Split, pools, BatchNormalization) plus
ONNX operators eqsat keeps opaque (Softmax, Exp, TopK, Clip with an empty input, ...), with odd shapes, shared
weights and inputs and duplicated subexpressions. They lean toward the patterns the rules match: matmuls
sharing an input, transpose chains, scalar products, concats of products, conv + relu / batch norm, split of
concat. :data:`MOTIFS` weighs them; its first motif is the simplest (what shrinking reaches).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import helper

from eqsat.testing.fuzz.choices import choose, flip, weighted
from eqsat.testing.fuzz.graph import GraphBuilder, Shape


def _broadcast(a: Shape, b: Shape) -> Shape:
    r = max(len(a), len(b))
    a2, b2 = (1,) * (r - len(a)) + a, (1,) * (r - len(b)) + b
    return tuple(max(x, y) for x, y in zip(a2, b2, strict=True))


def _conv_out(size: int, k: int, stride: int, pad_total: int, dil: int = 1) -> int:
    return (size + pad_total - dil * (k - 1) - 1) // stride + 1


def _m_unary(b: GraphBuilder) -> None:
    x = b.any_act()
    op = choose(b.c, ["Relu", "Sigmoid", "Tanh"])
    b.one(op, [x], b.shapes[x])


def _m_matmul(b: GraphBuilder) -> None:
    c = b.c
    rank = weighted(c, [(2, 4), (3, 2), (4, 1)])
    x = b.act(lambda s: len(s) == rank, lambda: b.shape(rank))
    if rank == 2 and flip(c, 0.2):  # a transposed operand (layout rules: Gemm transA)
        m, k = b.shapes[x]
        x = b.one("Transpose", [x], (k, m), perm=[1, 0])
    s = b.shapes[x]
    k, n = s[-1], b.dim()
    how = weighted(c, [("weight", 6), ("act", 2), ("self", 1), ("bcast", 1)])
    if how == "self" and s[-2] == k:
        y = x  # an input used twice by one node
    elif how == "act":
        y = b.act(lambda t: t[:-2] == s[:-2] and len(t) == rank and t[-2] == k, lambda: s[:-2] + (k, n))
    elif how == "bcast" and rank > 2:  # broadcast batch dims: kept opaque by the importer
        y = b.matrix_weight(k, n)
    else:
        y = b.matrix_weight(k, n, s[:-2])
    out = s[:-1] + (b.shapes[y][-1],)
    mm = b.one("MatMul", [x, y], out)
    if rank == 2 and flip(c, 0.2):  # transpose of a product (transpose-matmul rules)
        b.one("Transpose", [mm], (out[1], out[0]), perm=[1, 0])


def _m_shared_matmuls(b: GraphBuilder) -> None:
    c = b.c
    rank = weighted(c, [(2, 3), (3, 1)])
    x = b.act(lambda s: len(s) == rank, lambda: b.shape(rank))
    s = b.shapes[x]
    outs = [b.one("MatMul", [x, w], s[:-1] + (b.shapes[w][-1],))
            for w in [b.matrix_weight(s[-1], b.dim(), s[:-2]) for _ in range(c.int(2, 3))]]
    # what reads the products (variants named by the ONNX node they add)
    how = choose(c, ["none", "Concat", "Add", "Relu"])
    if how == "Concat":  # a concat of products sharing an input
        b.one("Concat", outs, s[:-1] + (sum(b.shapes[o][-1] for o in outs),), axis=choose(c, [-1, rank - 1]))
    elif how == "Add" and b.shapes[outs[0]] == b.shapes[outs[1]]:
        b.one("Add", outs[:2], b.shapes[outs[0]])
    elif how == "Relu":
        for o in outs:
            b.one("Relu", [o], b.shapes[o])


def _m_attention(b: GraphBuilder) -> None:
    """A BERT-style head split: reshape to heads, batched matmul, scale, softmax, merge heads."""
    c = b.c
    heads, e = choose(c, [1, 2, 3]), choose(c, [1, 2, 3])
    x = b.act(lambda s: len(s) == 2, lambda: (b.dim(), b.dim()))
    seq, d = b.shapes[x]
    q, k, v = (b.one("MatMul", [x, b.weight((d, heads * e), fan_in=d)], (seq, heads * e)) for _ in range(3))

    def split_heads(t: str, perm: list[int]) -> str:
        r = b.one("Reshape", [t, b.const([seq, heads, e])], (seq, heads, e))
        return b.one("Transpose", [r], tuple((seq, heads, e)[i] for i in perm), perm=perm)

    qh, kh, vh = split_heads(q, [1, 0, 2]), split_heads(k, [1, 2, 0]), split_heads(v, [1, 0, 2])
    scores = b.one("MatMul", [qh, kh], (heads, seq, seq))
    if flip(c, 0.7):
        scores = b.one("Mul", [scores, b.const(1.0 / math.sqrt(e), np.float32)], (heads, seq, seq))
    probs = b.one("Softmax", [scores], (heads, seq, seq), axis=-1)
    ctx = b.one("MatMul", [probs, vh], (heads, seq, e))
    t = b.one("Transpose", [ctx], (seq, heads, e), perm=[1, 0, 2])
    b.one("Reshape", [t, b.const([seq, heads * e])], (seq, heads * e))


def _m_gemm(b: GraphBuilder) -> None:
    c = b.c
    ta, tb = flip(c, 0.3), flip(c, 0.4)
    x = b.act(lambda s: len(s) == 2, lambda: (b.dim(), b.dim()))
    m, k = b.shapes[x][::-1] if ta else b.shapes[x]
    n = b.dim()
    if flip(c, 0.8):
        w = b.weight((n, k) if tb else (k, n), fan_in=k)
    else:
        w = b.act(lambda s: s == ((n, k) if tb else (k, n)), lambda: (n, k) if tb else (k, n))
    attrs: dict[str, Any] = {}
    if ta:
        attrs["transA"] = 1
    if tb:
        attrs["transB"] = 1
    alpha = choose(c, [1.0, 1.0, 0.5, -2.0])
    if alpha != 1.0:
        attrs["alpha"] = alpha
    ins = [x, w]
    cshape = choose(c, [None, (n,), (1, n), (m, n), (m, 1), (), "act"])
    if cshape == "act":
        ins.append(b.act(lambda s: s in ((m, n), (n,), (1, n)), lambda: (m, n)))
    elif cshape is not None:
        ins.append(b.weight(cshape, kind="small"))
        beta = choose(c, [1.0, 1.0, 0.5])
        if beta != 1.0:
            attrs["beta"] = beta
    y = b.one("Gemm", ins, (m, n), **attrs)
    if flip(c, 0.3):
        b.one("Relu", [y], (m, n))


def _conv_params(b: GraphBuilder, shape: Shape, groups_ok: bool = True) -> tuple[dict[str, Any], Shape, int]:
    c = b.c
    n, ch, h, w = shape
    groups = choose(c, [g for g in range(1, ch + 1) if ch % g == 0]) if groups_ok and flip(c, 0.3) else 1
    out_ch = groups * choose(c, [1, 2, 3])
    preset = choose(c, ["random", "same3", "1x1"])  # the corpus's conv rules are about 3x3/pad 1 and 1x1
    if preset == "random":
        kh, kw = choose(c, [1, 2, 3]), choose(c, [1, 2, 3])
        strides = [choose(c, [1, 1, 2]), choose(c, [1, 1, 2])]
        pads = [choose(c, [0, 0, 1, 2]) for _ in range(4)]
        dil = [choose(c, [1, 1, 1, 2]) for _ in range(2)]
    else:
        kh = kw = 3 if preset == "same3" else 1
        strides, pads, dil = [1, 1], [1] * 4 if preset == "same3" else [0] * 4, [1, 1]
    oh = _conv_out(h, kh, strides[0], pads[0] + pads[2], dil[0])
    ow = _conv_out(w, kw, strides[1], pads[1] + pads[3], dil[1])
    if oh <= 0 or ow <= 0:  # fall back to a 1x1 kernel, always valid
        kh = kw = 1
        dil = [1, 1]
        oh = _conv_out(h, 1, strides[0], pads[0] + pads[2])
        ow = _conv_out(w, 1, strides[1], pads[1] + pads[3])
    attrs: dict[str, Any] = {"kernel_shape": [kh, kw]}
    if strides != [1, 1]:
        attrs["strides"] = strides
    if pads != [0, 0, 0, 0]:
        attrs["pads"] = pads
    if dil != [1, 1]:
        attrs["dilations"] = dil
    if groups != 1:
        attrs["group"] = groups
    return attrs, (n, out_ch, oh, ow), ch // groups


def _nchw(b: GraphBuilder) -> str:
    return b.act(lambda s: len(s) == 4, lambda: (choose(b.c, [1, 2]), choose(b.c, [1, 2, 3, 4, 6]),
                                                   b.dim(), b.dim()))


def _bn(b: GraphBuilder, x: str) -> str:
    ch = b.shapes[x][1]
    ins = [x, b.weight((ch,), kind=choose(b.c, ["positive", "small"])), b.weight((ch,), kind="small"),
           b.weight((ch,), kind="small"), b.weight((ch,), kind="positive")]
    # a large epsilon makes a dropped or misplaced epsilon visible in float32
    return b.one("BatchNormalization", ins, b.shapes[x], epsilon=choose(b.c, [1e-5, 1e-3, 0.1, 0.5]))


def _m_conv(b: GraphBuilder) -> None:
    c = b.c
    x = _nchw(b)
    attrs, out, cg = _conv_params(b, b.shapes[x])
    kh, kw = attrs["kernel_shape"]
    if flip(c, 0.5):
        attrs.pop("kernel_shape")  # optional: implied by the weight
    ins = [x, b.weight((out[1], cg, kh, kw), fan_in=cg * kh * kw)]
    if flip(c, 0.7):
        ins.append(b.weight((out[1],), kind="small"))
    y = b.one("Conv", ins, out, **attrs)
    # the ONNX nodes after the convolution, in order
    for after in choose(c, [(), ("Relu",), ("BatchNormalization",), ("BatchNormalization", "Relu"), ("Relu", "Relu")]):
        y = _bn(b, y) if after == "BatchNormalization" else b.one(after, [y], out)


def _m_shared_convs(b: GraphBuilder) -> None:
    c = b.c
    x = _nchw(b)
    attrs, out, cg = _conv_params(b, b.shapes[x], groups_ok=False)
    mixed = flip(c, 0.4)  # 1x1 and 3x3/pad 1 kernels side by side: same output size (enlarge rules)
    o_same = choose(c, [1, 2, 3])
    outs = []
    for _ in range(c.int(2, 3)):
        o = o_same if flip(c, 0.5) else choose(c, [1, 2, 3])
        if mixed:
            k = choose(c, [1, 3])
            attrs = {"kernel_shape": [k, k], "pads": [k // 2] * 4}
            out = b.shapes[x][:1] + (0,) + b.shapes[x][2:]
        kh, kw = attrs["kernel_shape"]
        bias = [b.weight((o,), kind="small")] if flip(c, 0.8) else []
        y = b.one("Conv", [x, b.weight((o, cg, kh, kw), fan_in=cg * kh * kw), *bias], out[:1] + (o,) + out[2:],
                  **attrs)
        outs.append(b.one("Relu", [y], b.shapes[y]) if flip(c, 0.4) else y)
    how = choose(c, ["Concat", "Add", "none"])
    if how == "Concat":
        b.one("Concat", outs, out[:1] + (sum(b.shapes[o][1] for o in outs),) + out[2:], axis=1)
    elif how == "Add" and b.shapes[outs[0]] == b.shapes[outs[1]]:
        b.one("Add", outs[:2], b.shapes[outs[0]])


def _m_pool(b: GraphBuilder) -> None:
    c = b.c
    x = _nchw(b)
    n, ch, h, w = b.shapes[x]
    kind = choose(c, ["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"])
    if kind.startswith("Global"):
        b.one(kind, [x], (n, ch, 1, 1))
        return
    if flip(c, 0.5):  # the corpus's pool rules are about 3x3, stride 1, pad 1
        k, pads, st = [3, 3], [1, 1, 1, 1], [1, 1]
    else:
        k = [choose(c, [1, 2, 3]), choose(c, [1, 2, 3])]
        pads = [choose(c, [0, 0, 1]) for _ in range(4)]
        pads = [min(p, k[i % 2] - 1) for i, p in enumerate(pads)]  # onnxruntime wants pads < kernel
        st = [choose(c, [1, 2]), choose(c, [1, 2])]
    oh, ow = _conv_out(h, k[0], st[0], pads[0] + pads[2]), _conv_out(w, k[1], st[1], pads[1] + pads[3])
    if oh <= 0 or ow <= 0:
        k, pads, oh, ow = [1, 1], [0, 0, 0, 0], _conv_out(h, 1, st[0], 0), _conv_out(w, 1, st[1], 0)
    attrs: dict[str, Any] = {"kernel_shape": k, "strides": st, "pads": pads}
    if kind == "AveragePool" and flip(c, 0.5):
        attrs["count_include_pad"] = 1
    y = b.one(kind, [x], (n, ch, oh, ow), **attrs)
    if flip(c, 0.3):
        b.one("Relu", [y], b.shapes[y])


def _m_batchnorm(b: GraphBuilder) -> None:
    _bn(b, b.any_act(min_rank=2))


def _partner(b: GraphBuilder, s: Shape) -> str:
    """A tensor that broadcasts with one of shape ``s`` (numpy rules, either side may grow)."""
    c = b.c
    how = weighted(c, [("same", 3), ("weight", 3), ("lower", 2), ("scalar", 2), ("grow", 1)])
    if how == "same":
        return b.act(lambda t: t == s, lambda: s)
    if how == "scalar":
        return b.weight(choose(c, [(), (1,), (1,) * len(s)]), kind="small")
    if how == "grow":  # where s has a 1, the partner may be larger: the result outgrows both operands
        return b.new_input(tuple(b.dim() if d == 1 and flip(c, 0.5) else d for d in s))
    t = tuple(d if flip(c, 0.6) else 1 for d in s)
    if how == "lower":
        t = t[c.int(1, len(t)):] if len(t) > 1 else t
        return b.weight(t, kind="small") if flip(c, 0.5) else b.new_input(t)
    return b.weight(t, kind="small")


def _m_binary(b: GraphBuilder) -> None:
    c = b.c
    x = b.any_act()
    s = b.shapes[x]
    op = choose(c, ["Add", "Mul", "Sum"])
    y = _partner(b, s)
    ins = [y, x] if flip(c, 0.3) else [x, y]
    if op == "Sum" and flip(c, 0.7):
        ins.append(_partner(b, s) if flip(c, 0.5) else x)
    elif op == "Sum" and flip(c, 0.3):
        ins = [x]  # a one-input Sum is an identity
    out: Shape = ()
    for i in ins:
        out = _broadcast(out, b.shapes[i])
    b.one(op, ins, out)


def _m_ew_tree(b: GraphBuilder) -> None:
    """Add/Mul trees over a few same-shaped tensors, leaves repeated (factoring and reassociation rules)."""
    c = b.c
    x = b.any_act(max_rank=3)
    s = b.shapes[x]
    leaves = [x] + [b.act(lambda t: t == s, lambda: s) if flip(c, 0.5) else b.weight(s, kind="small")
                    for _ in range(c.int(1, 2))]

    def tree(depth: int) -> str:
        if depth == 0 or flip(c, 0.25):
            return choose(c, leaves)
        t = b.one(choose(c, ["Add", "Mul"]), [tree(depth - 1), tree(depth - 1)], s)
        if flip(c, 0.15):
            t = b.one("Mul", [t, b.weight((), kind="small")], s)
        return t

    t = tree(c.int(2, 3))
    if t in leaves:
        b.one("Relu", [t], s)
    elif len(s) >= 2 and flip(c, 0.3):
        b.one("Transpose", [t], s[::-1])


def _m_conv_linear(b: GraphBuilder) -> None:
    """conv(a + b) next to conv(a) + conv(b) with one kernel (conv linearity rules)."""
    c = b.c
    x = _nchw(b)
    s = b.shapes[x]
    y = b.act(lambda t: t == s, lambda: s)
    attrs, out, cg = _conv_params(b, s, groups_ok=False)
    kh, kw = attrs["kernel_shape"]
    w = b.weight((out[1], cg, kh, kw), fan_in=cg * kh * kw)
    if flip(c, 0.5):
        b.one("Conv", [b.one("Add", [x, y], s), w], out, **attrs)
    else:
        b.one("Add", [b.one("Conv", [x, w], out, **attrs), b.one("Conv", [y, w], out, **attrs)], out)


def _m_scalar(b: GraphBuilder) -> None:
    """Scalar products around a matmul (smul rules), and chains of them."""
    c = b.c
    x = b.act(lambda s: len(s) == 2, lambda: (b.dim(), b.dim()))
    m, k = b.shapes[x]

    def scal(t: str) -> str:
        s = b.weight(choose(c, [(), (1,), (1, 1)]), kind="small") if flip(c, 0.8) else \
            b.const(choose(c, [2.0, 0.5, -1.0]), np.float32)
        return b.one("Mul", [t, s] if flip(c, 0.7) else [s, t], b.shapes[t])

    form = choose(c, ["mul-mm", "mm-mul", "mul-mul", "mul-mm-mul"])
    if form == "mul-mul":
        scal(scal(x))
        return
    t = scal(x) if form.startswith("mul") else x
    w = b.matrix_weight(k, b.dim())
    t = b.one("MatMul", [t, w], (m, b.shapes[w][1]))
    if form.endswith("mul"):
        scal(t)


def _m_transpose(b: GraphBuilder) -> None:
    c = b.c
    x = b.any_act(min_rank=2)
    for _ in range(c.int(1, 3)):
        s = b.shapes[x]
        if flip(c, 0.15):  # no perm: reverse the dimensions
            x = b.one("Transpose", [x], s[::-1])
        else:
            p = b.perm(len(s))
            x = b.one("Transpose", [x], tuple(s[i] for i in p), perm=p)
        if flip(c, 0.2):
            x = b.one(choose(c, ["Relu", "Tanh"]), [x], b.shapes[x])
        elif flip(c, 0.15):
            x = b.one("Mul", [x, b.weight((), kind="small")], b.shapes[x])


def _factor(b: GraphBuilder, total: int, rank: int) -> Shape:
    dims = [1] * rank
    n, p = total, 2
    while n > 1:  # distribute prime factors over random dimensions
        while n % p == 0:
            dims[b.c.int(0, rank - 1)] *= p
            n //= p
        p += 1
    return tuple(dims)


def _m_reshape(b: GraphBuilder) -> None:
    c = b.c
    x = b.any_act()
    s = b.shapes[x]
    kind = choose(c, ["Reshape", "Reshape", "Flatten", "Unsqueeze", "Squeeze"])
    if kind == "Flatten":
        ax = c.int(0, len(s))
        b.one("Flatten", [x], (math.prod(s[:ax]), math.prod(s[ax:])), axis=ax)
        return
    if kind == "Unsqueeze" and len(s) < 4:
        ax = c.int(0, len(s))
        b.one("Unsqueeze", [x, b.const([ax])], s[:ax] + (1,) + s[ax:])
        return
    ones = [i for i, d in enumerate(s) if d == 1]
    if kind == "Squeeze" and ones and len(s) > 1:
        axes = [i for i in ones if flip(c, 0.7)] or ones[:1]
        b.one("Squeeze", [x, b.const(axes)], tuple(d for i, d in enumerate(s) if i not in axes))
        return
    target = _factor(b, math.prod(s), c.int(1, 4))
    spec = list(target)
    if flip(c, 0.3):  # -1 infers a dimension
        spec[c.int(0, len(spec) - 1)] = -1
    for i in range(min(len(s), len(spec))):  # 0 copies the input's dimension
        if spec[i] == s[i] and flip(c, 0.2):
            spec[i] = 0
    b.one("Reshape", [x, b.const(spec)], target)


def _m_concat(b: GraphBuilder) -> None:
    c = b.c
    x = b.any_act()
    s = b.shapes[x]
    ax = c.int(0, len(s) - 1)
    parts = [x]
    for _ in range(c.int(0, 3)):
        how = choose(c, ["self", "act", "Relu", "new"])
        if how == "self":
            parts.append(x)
        elif how == "Relu":
            parts.append(b.one("Relu", [x], s))
        elif how == "act":
            parts.append(b.act(lambda t: len(t) == len(s) and t[:ax] + t[ax + 1:] == s[:ax] + s[ax + 1:],
                               lambda: s[:ax] + (b.dim(),) + s[ax + 1:]))
        else:
            parts.append(b.new_input(s[:ax] + (b.dim(),) + s[ax + 1:]))
    if flip(c, 0.3):  # relu(a) ++ relu(b) (relu-concat rules)
        parts = [b.one("Relu", [p], b.shapes[p]) for p in parts]
    out = s[:ax] + (sum(b.shapes[p][ax] for p in parts),) + s[ax + 1:]
    y = b.one("Concat", parts, out, axis=ax - len(s) if flip(c, 0.3) else ax)
    if flip(c, 0.3) and len(parts) > 1:  # split it back at the seams (split-concat rules)
        sizes = [b.shapes[p][ax] for p in parts]
        b.node("Split", [y, b.const(sizes)], [s[:ax] + (n,) + s[ax + 1:] for n in sizes], axis=ax)


def _m_split(b: GraphBuilder) -> None:
    c = b.c
    x = b.act(lambda s: any(d >= 2 for d in s), lambda: (b.dim(), choose(c, [2, 3, 4, 5, 7])))
    s = b.shapes[x]
    axes = [i for i, d in enumerate(s) if d >= 2]
    ax = choose(c, axes)
    d = s[ax]
    pieces = c.int(2, min(d, 3))
    if d % pieces == 0 and flip(c, 0.3):  # equal pieces, sizes implied by the number of outputs
        sizes, ins = [d // pieces] * pieces, [x]
    else:
        cuts = sorted({c.int(1, d - 1) for _ in range(pieces - 1)})
        sizes = [e - a for a, e in zip([0, *cuts], [*cuts, d], strict=True)]
        ins = [x, b.const(sizes)]
    outs = b.node("Split", ins, [s[:ax] + (n,) + s[ax + 1:] for n in sizes],
                  axis=ax - len(s) if flip(c, 0.2) else ax)
    if flip(c, 0.4):  # and concatenate the pieces back (concat-of-splits: the result is x itself)
        order = outs if flip(c, 0.7) else outs[::-1]
        b.one("Concat", order, s, axis=ax)
    elif flip(c, 0.4):
        for o in outs:
            b.one("Relu", [o], b.shapes[o])


OPAQUE_KINDS = ("Neg", "Softmax", "Abs", "SqrtAbs", "ExpTanh", "LeakyRelu", "ReduceMean", "TopK", "Clip", "Identity",
                "Sin")


def _m_opaque(b: GraphBuilder) -> None:
    """Operators the registry does not know: kept verbatim, never optimized across."""
    c = b.c
    x = b.any_act()
    s = b.shapes[x]
    kind = choose(c, [k for k in OPAQUE_KINDS if k not in b.avoid] or ["Neg"])
    if kind == "Softmax":
        b.one("Softmax", [x], s, axis=c.int(-len(s), len(s) - 1))
    elif kind == "SqrtAbs":
        b.one("Sqrt", [b.one("Abs", [x], s)], s)
    elif kind == "ExpTanh":  # exp of a bounded value: no overflow
        b.one("Exp", [b.one("Tanh", [x], s)], s)
    elif kind == "LeakyRelu":
        b.one("LeakyRelu", [x], s, alpha=0.1)
    elif kind == "ReduceMean":
        ax = c.int(0, len(s) - 1)
        b.one("ReduceMean", [x], s[:ax] + (1,) + s[ax + 1:], axes=[ax], keepdims=1)
    elif kind == "TopK":  # two outputs; only the values are used (sorted values are stable under rounding)
        k = c.int(1, s[-1])
        b.node("TopK", [x, b.const([k])], [s[:-1] + (k,), s[:-1] + (k,)])
        idx = b.acts.pop()  # the int64 indices are neither consumed nor an output
        b.shapes.pop(idx)
    elif kind == "Clip":  # an empty optional input
        b.one("Clip", [x, "", b.const(0.5, np.float32)], s)
    else:
        b.one(kind, [x], s)


def _m_duplicate(b: GraphBuilder) -> None:
    """Repeat an earlier single-output node on the same inputs: a shared subexpression computed twice."""
    cands = [n for n in b.nodes if len(n.output) == 1 and n.op_type != "TopK"]
    if not cands:
        _m_unary(b)
        return
    n = cands[-1 - b.c.int(0, len(cands) - 1)]
    attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
    b.one(n.op_type, list(n.input), b.shapes[n.output[0]], **attrs)


def _m_weight_only(b: GraphBuilder) -> None:
    """Work on weights only (folded at import), feeding a matmul."""
    c = b.c
    x = b.act(lambda s: len(s) == 2, lambda: (b.dim(), b.dim()))
    m, k = b.shapes[x]
    n = b.dim()
    form = choose(c, ["Transpose", "Add", "Mul"])
    if form == "Transpose":
        w = b.one("Transpose", [b.weight((n, k), fan_in=k)], (k, n), perm=[1, 0])
    elif form == "Add":
        w = b.one("Add", [b.weight((k, n), fan_in=k), b.weight((1, n), kind="small")], (k, n))
    else:
        w = b.one("Mul", [b.weight((k, n), fan_in=k), b.const(0.5, np.float32)], (k, n))
    b.acts.remove(w)  # a constant, not a run-time tensor
    b.one("MatMul", [x, w], (m, n))


MOTIFS: dict[str, tuple[Callable[[GraphBuilder], None], int]] = {
    # name: (motif, weight); the first is the simplest (what shrinking reaches)
    "unary": (_m_unary, 3), "matmul": (_m_matmul, 6), "shared_matmuls": (_m_shared_matmuls, 4),
    "attention": (_m_attention, 1), "gemm": (_m_gemm, 3), "conv": (_m_conv, 5), "shared_convs": (_m_shared_convs, 2),
    "pool": (_m_pool, 2), "batchnorm": (_m_batchnorm, 1), "binary": (_m_binary, 5), "scalar": (_m_scalar, 3),
    "transpose": (_m_transpose, 4), "reshape": (_m_reshape, 3), "concat": (_m_concat, 4), "split": (_m_split, 3),
    "opaque": (_m_opaque, 3), "duplicate": (_m_duplicate, 2), "weight_only": (_m_weight_only, 1),
    "ew_tree": (_m_ew_tree, 3), "conv_linear": (_m_conv_linear, 1),
}
