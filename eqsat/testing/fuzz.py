"""A differential fuzzer: random ONNX graphs, optimized with the default rules and compared with the original.

The generator (:func:`generate_graph`) builds small, valid ONNX graphs over the operators the registry imports
(MatMul, Gemm, Conv, Add/Mul/Sum with broadcasting, Relu/Sigmoid/Tanh, Transpose, Reshape/Flatten/Squeeze/
Unsqueeze, Concat, Split, pools, BatchNormalization) plus ONNX operators it keeps opaque (Softmax, Exp, TopK,
Clip with an empty input, ...), with odd shapes, shared weights and inputs, duplicated subexpressions and
several outputs (some of them consumed too). It is biased toward patterns the rules match (matmuls sharing an
input, transpose chains, scalar products, concats of products, conv + relu / batch norm, split of concat).

Every random decision goes through a :class:`Choices` object, so one generator serves three drivers: a seeded
``random.Random`` (:class:`RandomChoices`, which records the decisions, for benchmarks), a replayed decision
list (:class:`ReplayChoices`, for shrinking a failure with :func:`shrink`) and hypothesis
(:class:`HypothesisChoices`, in tests, so hypothesis shrinks failures itself). Hypothesis is a test
dependency only and is imported lazily.

:func:`check_model` optimizes a model (``eqsat.optimize``, default rules, no built-in check) and compares both
models with onnxruntime, graph optimizations disabled, on several random inputs; :func:`run_fuzz` does that for
many graphs packed several to a model (one optimize call covers them all; a mismatch is re-run graph by
graph to pin and shrink the guilty one).
"""

from __future__ import annotations

import math
import random
import re
import time
import traceback
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from eqsat.ir.names import NameAllocator

Shape = tuple[int, ...]

OPSET = 17
IR_VERSION = 8
#: Small, odd dimensions (1 and primes find broadcasting and off-by-one bugs; they keep onnxruntime fast).
DIMS = (1, 2, 3, 4, 5, 7)


# ---------------------------------------------------------------------------------------------------------
# sources of choices


class Choices(Protocol):
    """Where the generator's decisions come from. ``int`` returns an integer in ``[lo, hi]``; smaller is
    simpler (shrinkers move decisions toward ``lo``)."""

    def int(self, lo: int, hi: int) -> int: ...


class RandomChoices:
    """Decisions from a seeded ``random.Random``; every decision is recorded (for replay and shrinking)."""

    def __init__(self, rng: random.Random | int) -> None:
        self.rng = rng if isinstance(rng, random.Random) else random.Random(rng)
        self.record: list[int] = []

    def int(self, lo: int, hi: int) -> int:
        """A uniform integer in ``[lo, hi]`` (recorded as its offset from ``lo``)."""
        v = self.rng.randint(lo, hi)
        self.record.append(v - lo)
        return v


class ReplayChoices:
    """Replays recorded decisions (offsets from ``lo``); out-of-range values wrap, an exhausted list gives
    ``lo``. Any list is a valid graph, which is what makes shrinking by editing the list work."""

    def __init__(self, record: Sequence[int]) -> None:
        self.values = list(record)
        self.pos = 0
        self.record: list[int] = []

    def int(self, lo: int, hi: int) -> int:
        """The next recorded decision, mapped into ``[lo, hi]``."""
        raw = self.values[self.pos] if self.pos < len(self.values) else 0
        self.pos += 1
        off = raw % (hi - lo + 1)
        self.record.append(off)
        return lo + off


class HypothesisChoices:
    """Decisions drawn from a hypothesis ``st.data()`` object, so hypothesis shrinks failing graphs."""

    def __init__(self, data: Any) -> None:
        from hypothesis import strategies as st  # test dependency: imported only when used

        self._data = data
        self._st = st

    def int(self, lo: int, hi: int) -> int:
        """An integer in ``[lo, hi]`` drawn from hypothesis."""
        return self._data.draw(self._st.integers(lo, hi))


def choose(c: Choices, items: Sequence[Any]) -> Any:
    """One of ``items`` (the first is the simplest)."""
    return items[c.int(0, len(items) - 1)]


def flip(c: Choices, p: float) -> bool:
    """True with probability ``p`` (a shrunk decision gives False)."""
    return c.int(0, 99) >= 100 - round(100 * p)


def weighted(c: Choices, items: Sequence[tuple[Any, int]]) -> Any:
    """One of ``(item, weight)`` pairs by weight (the first item is the simplest)."""
    total = sum(w for _, w in items)
    k = c.int(0, total - 1)
    for item, w in items:
        if k < w:
            return item
        k -= w
    raise AssertionError("unreachable")


# ---------------------------------------------------------------------------------------------------------
# the generator


@dataclass
class FuzzGraph:
    """One random graph: ONNX nodes, inputs, initializers and outputs, all names prefixed."""

    nodes: list[onnx.NodeProto]
    inputs: dict[str, Shape]
    initializers: dict[str, np.ndarray]
    outputs: dict[str, Shape]
    motifs: list[str]
    prefix: str = ""
    #: positions in the decision record where each motif starts (when the choices keep a record)
    marks: list[int] = field(default_factory=list)

    def describe(self) -> str:
        """The graph as ONNX text (for reports and reproducers)."""
        return onnx.printer.to_text(to_model([self]).graph)


class _Builder:
    """Tracks tensors and shapes while motifs append nodes."""

    def __init__(self, c: Choices, prefix: str, seed: int, avoid: Collection[str] = ()) -> None:
        self.c = c
        self.prefix = prefix
        self.avoid = set(avoid)
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inputs: dict[str, Shape] = {}
        self.weights: dict[str, np.ndarray] = {}
        self.shapes: dict[str, Shape] = {}
        self.acts: list[str] = []  # float tensors computed at run time (inputs and node outputs), oldest first
        self.float_weights: list[str] = []
        self.names = NameAllocator(sep="", numbered=True)  # x1, w2, t3, n4, ...: one counter, the prefix first

    # -- names and leaves ---------------------------------------------------------------------------------
    def fresh(self, kind: str) -> str:
        return self.names.fresh(self.prefix + kind)

    def dim(self) -> int:
        return choose(self.c, DIMS)

    def shape(self, rank: int) -> Shape:
        return tuple(self.dim() for _ in range(rank))

    def new_input(self, shape: Shape) -> str:
        name = self.fresh("x")
        self.inputs[name] = tuple(shape)
        self.shapes[name] = tuple(shape)
        self.acts.append(name)
        return name

    def weight(self, shape: Shape, kind: str = "normal", fan_in: int | None = None) -> str:
        """A float initializer: ``normal`` ~ N(0, 1/sqrt(fan_in)), ``positive`` in [0.5, 1.5], ``small``."""
        shape = tuple(shape)
        if kind == "positive":
            arr = self.rng.uniform(0.5, 1.5, shape)
        elif kind == "small":
            arr = self.rng.normal(0.0, 0.5, shape)
        else:
            fan = fan_in if fan_in is not None else (shape[0] if len(shape) == 2 else math.prod(shape[1:]) or 1)
            arr = self.rng.normal(0.0, 1.0 / math.sqrt(max(fan, 1)), shape)
        name = self.fresh("w")
        self.weights[name] = np.asarray(arr, dtype=np.float32)
        self.shapes[name] = shape
        self.float_weights.append(name)
        return name

    def const(self, values: Sequence[int] | np.ndarray, dtype: Any = np.int64) -> str:
        name = self.fresh("c")
        self.weights[name] = np.asarray(values, dtype=dtype)
        self.shapes[name] = tuple(self.weights[name].shape)
        return name

    def matrix_weight(self, k: int, n: int, batch: Shape = ()) -> str:
        """A (batch..., k, n) weight, sometimes one that already exists (weights shared by several nodes)."""
        shared = [w for w in self.float_weights if self.shapes[w][:-1] == batch + (k,) and w in self.weights]
        if shared and flip(self.c, 0.3):
            return choose(self.c, shared)
        return self.weight(batch + (k, n), fan_in=k)

    def act(self, pred: Callable[[Shape], bool], make: Callable[[], Shape]) -> str:
        """A run-time tensor whose shape satisfies ``pred``: usually a recent one, else a new graph input."""
        cands = [a for a in self.acts if pred(self.shapes[a])]
        if cands and not flip(self.c, 0.15):
            return cands[-1 - self.c.int(0, len(cands) - 1)]  # 0: the most recent, for deep chains
        return self.new_input(make())

    def any_act(self, min_rank: int = 1, max_rank: int = 4) -> str:
        return self.act(lambda s: min_rank <= len(s) <= max_rank,
                        lambda: self.shape(self.c.int(max(min_rank, 2), max(max_rank, 2))))

    def node(self, op_type: str, inputs: Sequence[str], out_shapes: Sequence[Shape], **attrs: Any) -> list[str]:
        outs = [self.fresh("t") for _ in out_shapes]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=self.fresh("n"), **attrs))
        for o, s in zip(outs, out_shapes, strict=True):
            self.shapes[o] = tuple(s)
            self.acts.append(o)
        return outs

    def one(self, op_type: str, inputs: Sequence[str], shape: Shape, **attrs: Any) -> str:
        return self.node(op_type, inputs, [shape], **attrs)[0]

    def perm(self, rank: int) -> list[int]:
        rest = list(range(rank))
        return [rest.pop(self.c.int(0, len(rest) - 1)) for _ in range(rank)]


def _broadcast(a: Shape, b: Shape) -> Shape:
    r = max(len(a), len(b))
    a2, b2 = (1,) * (r - len(a)) + a, (1,) * (r - len(b)) + b
    return tuple(max(x, y) for x, y in zip(a2, b2, strict=True))


def _conv_out(size: int, k: int, stride: int, pad_total: int, dil: int = 1) -> int:
    return (size + pad_total - dil * (k - 1) - 1) // stride + 1


# -- motifs: each appends a few nodes ----------------------------------------------------------------------

def _m_unary(b: _Builder) -> None:
    x = b.any_act()
    op = choose(b.c, ["Relu", "Sigmoid", "Tanh"])
    b.one(op, [x], b.shapes[x])


def _m_matmul(b: _Builder) -> None:
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


def _m_shared_matmuls(b: _Builder) -> None:
    c = b.c
    rank = weighted(c, [(2, 3), (3, 1)])
    x = b.act(lambda s: len(s) == rank, lambda: b.shape(rank))
    s = b.shapes[x]
    outs = [b.one("MatMul", [x, w], s[:-1] + (b.shapes[w][-1],))
            for w in [b.matrix_weight(s[-1], b.dim(), s[:-2]) for _ in range(c.int(2, 3))]]
    how = choose(c, ["none", "concat", "add", "relu"])
    if how == "concat":  # a concat of products sharing an input
        b.one("Concat", outs, s[:-1] + (sum(b.shapes[o][-1] for o in outs),), axis=choose(c, [-1, rank - 1]))
    elif how == "add" and b.shapes[outs[0]] == b.shapes[outs[1]]:
        b.one("Add", outs[:2], b.shapes[outs[0]])
    elif how == "relu":
        for o in outs:
            b.one("Relu", [o], b.shapes[o])


def _m_attention(b: _Builder) -> None:
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


def _m_gemm(b: _Builder) -> None:
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


def _conv_params(b: _Builder, shape: Shape, groups_ok: bool = True) -> tuple[dict[str, Any], Shape, int]:
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


def _nchw(b: _Builder) -> str:
    return b.act(lambda s: len(s) == 4, lambda: (choose(b.c, [1, 2]), choose(b.c, [1, 2, 3, 4, 6]),
                                                   b.dim(), b.dim()))


def _bn(b: _Builder, x: str) -> str:
    ch = b.shapes[x][1]
    ins = [x, b.weight((ch,), kind=choose(b.c, ["positive", "small"])), b.weight((ch,), kind="small"),
           b.weight((ch,), kind="small"), b.weight((ch,), kind="positive")]
    # a large epsilon makes a dropped or misplaced epsilon visible in float32
    return b.one("BatchNormalization", ins, b.shapes[x], epsilon=choose(b.c, [1e-5, 1e-3, 0.1, 0.5]))


def _m_conv(b: _Builder) -> None:
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
    post = choose(c, ["none", "relu", "bn", "bn-relu", "relu-relu"])
    if post.startswith("bn"):
        y = _bn(b, y)
    if "relu" in post:
        y = b.one("Relu", [y], out)
    if post == "relu-relu":
        b.one("Relu", [y], out)


def _m_shared_convs(b: _Builder) -> None:
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
    how = choose(c, ["concat", "add", "none"])
    if how == "concat":
        b.one("Concat", outs, out[:1] + (sum(b.shapes[o][1] for o in outs),) + out[2:], axis=1)
    elif how == "add" and b.shapes[outs[0]] == b.shapes[outs[1]]:
        b.one("Add", outs[:2], b.shapes[outs[0]])


def _m_pool(b: _Builder) -> None:
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


def _m_batchnorm(b: _Builder) -> None:
    _bn(b, b.any_act(min_rank=2))


def _partner(b: _Builder, s: Shape) -> str:
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


def _m_binary(b: _Builder) -> None:
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


def _m_ew_tree(b: _Builder) -> None:
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


def _m_conv_linear(b: _Builder) -> None:
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


def _m_scalar(b: _Builder) -> None:
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


def _m_transpose(b: _Builder) -> None:
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


def _factor(b: _Builder, total: int, rank: int) -> Shape:
    dims = [1] * rank
    n, p = total, 2
    while n > 1:  # distribute prime factors over random dimensions
        while n % p == 0:
            dims[b.c.int(0, rank - 1)] *= p
            n //= p
        p += 1
    return tuple(dims)


def _m_reshape(b: _Builder) -> None:
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


def _m_concat(b: _Builder) -> None:
    c = b.c
    x = b.any_act()
    s = b.shapes[x]
    ax = c.int(0, len(s) - 1)
    parts = [x]
    for _ in range(c.int(0, 3)):
        how = choose(c, ["self", "act", "relu", "new"])
        if how == "self":
            parts.append(x)
        elif how == "relu":
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


def _m_split(b: _Builder) -> None:
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


def _m_opaque(b: _Builder) -> None:
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


def _m_duplicate(b: _Builder) -> None:
    """Repeat an earlier single-output node on the same inputs: a shared subexpression computed twice."""
    cands = [n for n in b.nodes if len(n.output) == 1 and n.op_type != "TopK"]
    if not cands:
        _m_unary(b)
        return
    n = cands[-1 - b.c.int(0, len(cands) - 1)]
    attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
    b.one(n.op_type, list(n.input), b.shapes[n.output[0]], **attrs)


def _m_weight_only(b: _Builder) -> None:
    """Work on weights only (folded at import), feeding a matmul."""
    c = b.c
    x = b.act(lambda s: len(s) == 2, lambda: (b.dim(), b.dim()))
    m, k = b.shapes[x]
    n = b.dim()
    form = choose(c, ["transpose", "add", "scale"])
    if form == "transpose":
        w = b.one("Transpose", [b.weight((n, k), fan_in=k)], (k, n), perm=[1, 0])
    elif form == "add":
        w = b.one("Add", [b.weight((k, n), fan_in=k), b.weight((1, n), kind="small")], (k, n))
    else:
        w = b.one("Mul", [b.weight((k, n), fan_in=k), b.const(0.5, np.float32)], (k, n))
    b.acts.remove(w)  # a constant, not a run-time tensor
    b.one("MatMul", [x, w], (m, n))


MOTIFS: dict[str, tuple[Callable[[_Builder], None], int]] = {
    # name: (motif, weight); the first is the simplest (what shrinking reaches)
    "unary": (_m_unary, 3), "matmul": (_m_matmul, 6), "shared_matmuls": (_m_shared_matmuls, 4),
    "attention": (_m_attention, 1), "gemm": (_m_gemm, 3), "conv": (_m_conv, 5), "shared_convs": (_m_shared_convs, 2),
    "pool": (_m_pool, 2), "batchnorm": (_m_batchnorm, 1), "binary": (_m_binary, 5), "scalar": (_m_scalar, 3),
    "transpose": (_m_transpose, 4), "reshape": (_m_reshape, 3), "concat": (_m_concat, 4), "split": (_m_split, 3),
    "opaque": (_m_opaque, 3), "duplicate": (_m_duplicate, 2), "weight_only": (_m_weight_only, 1),
    "ew_tree": (_m_ew_tree, 3), "conv_linear": (_m_conv_linear, 1),
}


def generate_graph(c: Choices, *, max_motifs: int = 6, prefix: str = "", avoid: Collection[str] = ()) -> FuzzGraph:
    """A random, valid ONNX graph built from 1..``max_motifs`` motifs, every decision taken from ``c``.

    Outputs: every computed tensor nobody consumes, plus some intermediates that are also consumed. ``avoid``
    names motifs (keys of :data:`MOTIFS`) or opaque operators (:data:`OPAQUE_KINDS`) not to generate, e.g.
    to keep a known, still open bug out of a CI run.
    """
    seed = c.int(0, 2**16)
    b = _Builder(c, prefix, seed, avoid)
    used: list[str] = []
    marks: list[int] = []
    for _ in range(c.int(1, max_motifs)):
        marks.append(len(getattr(c, "record", ())))
        name = weighted(c, [(k, w) for k, (_, w) in MOTIFS.items() if k not in b.avoid])
        MOTIFS[name][0](b)
        used.append(name)
    consumed = {i for n in b.nodes for i in n.input}
    computed = [a for a in b.acts if a not in b.inputs]
    outputs = [a for a in computed if a not in consumed or flip(c, 0.15)]
    if not outputs:
        outputs = [computed[-1]] if computed else [b.one("Relu", [b.any_act()], b.shapes[b.acts[-1]])]
    return FuzzGraph(b.nodes, dict(b.inputs), dict(b.weights), {o: b.shapes[o] for o in outputs}, used, prefix,
                      marks)


def to_model(graphs: Sequence[FuzzGraph]) -> onnx.ModelProto:
    """One ONNX model holding the given graphs side by side (disjoint; names must not collide)."""
    nodes, inputs, inits, outputs = [], [], [], []
    for g in graphs:
        nodes += g.nodes
        inputs += [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(s)) for k, s in g.inputs.items()]
        inits += [numpy_helper.from_array(v, k) for k, v in g.initializers.items()]
        outputs += [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(s)) for k, s in g.outputs.items()]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="eqsat.testing.fuzz")
    model.ir_version = IR_VERSION
    return model


def generate_model(seed: int, *, max_motifs: int = 6, avoid: Collection[str] = ()) -> tuple[onnx.ModelProto, list[int]]:
    """A single random graph from ``seed`` as a model, with its decision record (for :class:`ReplayChoices`)."""
    c = RandomChoices(seed)
    return to_model([generate_graph(c, max_motifs=max_motifs, avoid=avoid)]), c.record


# ---------------------------------------------------------------------------------------------------------
# comparing and checking


class InvalidModel(ValueError):
    """The original model itself does not run: a generator bug, not an optimizer bug."""


def compare_models(original: onnx.ModelProto, optimized: onnx.ModelProto, *, trials: int = 2) -> dict[str, str]:
    """Compare both models with the optimizer's own numeric check (:func:`eqsat.pipeline.check.check_equal`:
    onnxruntime with graph optimizations off, every output, NaN/inf by position, tolerance relative to each
    output's scale); problems by output name (``<run>`` when the optimized model does not run)."""
    from eqsat.pipeline.check import check_equal

    report = check_equal(original, optimized, trials=trials)
    if not report.ran:
        raise InvalidModel(f"the original model does not run: {'; '.join(report.problems)}")
    problems = {c.name: c.problem for c in report.comparisons if c.problem}
    if not report.ok and not problems:
        problems["<run>"] = "; ".join(report.problems)
    return problems


@dataclass
class CaseResult:
    """What optimizing one model did: problems by output (empty: equal), or the exception it raised."""

    problems: dict[str, str]
    rules_fired: dict[str, int]
    changed: bool
    error: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """No mismatch and no crash."""
        return not self.problems and self.error is None


def check_model(model: onnx.ModelProto, *, time_limit: float = 10.0, trials: int = 2,
                rules: Sequence[Any] | None = None, optimized: onnx.ModelProto | None = None) -> CaseResult:
    """Optimize ``model`` (``rules``: default, the corpus and layout rules) and compare it with the original.

    An exception from ``optimize`` on a valid model is a finding too (``error``). ``optimized`` skips the
    optimizer and compares against that model instead (used to show the comparison is not vacuous).
    """
    from eqsat.pipeline.run import optimize

    t = time.perf_counter()
    fired: dict[str, int] = {}
    changed = True
    if optimized is None:
        try:
            res = optimize(model, check=False, time_limit=time_limit, rules=rules)
        except Exception as e:  # a crash is a result, not the end of the fuzzing run
            return CaseResult({}, {}, False, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}",
                              time.perf_counter() - t)
        optimized, fired = res.model, dict(res.rules_fired)
        changed = not res.kept_original and _signature(res.graph) != _signature(res.original)
    problems = compare_models(model, optimized, trials=trials)
    return CaseResult(problems, fired, changed, None, time.perf_counter() - t)


def _signature(graph: Any) -> Counter:
    return Counter((n.op, repr(n.params)) for n in graph.nodes)


# ---------------------------------------------------------------------------------------------------------
# shrinking and the fuzzing loop


def shrink(record: list[int], fails: Callable[[list[int]], bool], *, budget: int = 200,
           marks: Sequence[int] = ()) -> list[int]:
    """A shorter/simpler decision list that still ``fails``, within ``budget`` calls of ``fails``.

    First whole motifs are dropped (``marks``: where each motif's decisions start, see
    :attr:`FuzzGraph.marks`; decision 1 is the number of motifs), then chunks of decisions are deleted and
    single decisions lowered.
    """
    best = list(record)
    calls = 0

    def attempt(cand: list[int]) -> bool:
        nonlocal best, calls
        if calls >= budget:
            return False
        calls += 1
        if fails(cand):
            best = cand
            return True
        return False

    ends = [*marks[1:], None]
    for start, end in reversed(list(zip(marks, ends, strict=True))):
        tail = best[end:] if end is not None and end <= len(best) else []
        if len(best) > 1 and best[1] > 0:
            attempt(best[:1] + [best[1] - 1] + best[2:start] + tail)

    improved = True
    while improved and calls < budget:
        improved = False
        for size in (16, 8, 4, 2, 1):
            i = len(best) - size
            while i >= 0 and calls < budget:
                if attempt(best[:i] + best[i + size:]):
                    improved = True
                i -= size if size > 1 else 1
                i = min(i, len(best) - size)
        for i in range(len(best)):
            if calls >= budget:
                break
            for v in (0, best[i] // 2):
                if v < best[i] and attempt(best[:i] + [v] + best[i + 1:]):
                    improved = True
                    break
    return best


@dataclass
class Finding:
    """A mismatch or a crash, pinned to one graph and shrunk."""

    kind: str  # "mismatch" or "error"
    detail: str
    graph_seed: int
    record: list[int]
    onnx_text: str
    rules_fired: dict[str, int]
    count: int = 1  # how many graphs failed the same way (same error signature; each mismatch counts alone)

    @property
    def signature(self) -> str:
        """The error's type and message without names and numbers (one bug, one signature)."""
        return _signature_of(self.kind, self.detail)


def _signature_of(kind: str, detail: str) -> str:
    if not kind.startswith("error"):
        return f"{kind}:{id(detail)}"
    first = detail.strip().splitlines()[0] if detail.strip() else ""
    return kind + ":" + re.sub(r"'[^']*'|\d+", "#", first)


@dataclass
class FuzzReport:
    """Totals of a fuzzing run."""

    graphs: int = 0
    calls: int = 0
    nodes: int = 0
    changed_models: int = 0
    mismatches: int = 0
    errors: int = 0
    invalid: int = 0  # graphs skipped because the generated model itself did not run (generator bugs)
    rules_fired: Counter = field(default_factory=Counter)
    rule_calls: Counter = field(default_factory=Counter)  # rule -> packed optimize calls it fired in
    extra_calls: int = 0  # optimize calls spent re-running graphs of failing packs alone and shrinking
    motifs: Counter = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0
    optimize_seconds: float = 0.0


def _graph_of(name: str) -> int | None:
    head = name.split("_", 1)[0]
    return int(head[1:]) if head[:1] == "g" and head[1:].isdigit() else None


def run_fuzz(graphs: int, *, seed: int = 0, per_model: int = 8, max_motifs: int = 6, time_limit: float = 10.0,
             avoid: Collection[str] = (), rules: Sequence[Any] | None = None, shrink_budget: int = 120,
             progress: Callable[[FuzzReport], None] | None = None, deadline: float | None = None) -> FuzzReport:
    """Generate ``graphs`` random graphs (graph ``i`` from seed ``seed * 1_000_003 + i``), ``per_model`` to an
    optimize call, and compare every optimized model with its original.

    A failing pack is re-run graph by graph (so the other graphs of a crashed pack are still checked); a graph
    that fails alone is shrunk to a small reproducer. Stops early at ``deadline`` (``time.time()``); the
    report counts what actually ran.
    """
    rep = FuzzReport()
    t0 = time.perf_counter()

    def build(rec: list[int]) -> onnx.ModelProto:
        return to_model([generate_graph(ReplayChoices(rec), max_motifs=max_motifs, avoid=avoid)])

    def outcome(rec: list[int]) -> CaseResult:
        rep.extra_calls += 1
        return check_model(build(rec), time_limit=time_limit, rules=rules)

    i = 0
    while i < graphs and (deadline is None or time.time() < deadline):
        batch = []
        for k in range(min(per_model, graphs - i)):
            gseed = seed * 1_000_003 + i + k
            c = RandomChoices(gseed)
            g = generate_graph(c, max_motifs=max_motifs, prefix=f"g{k}_", avoid=avoid)
            batch.append((gseed, g, c.record))
        model = to_model([g for _, g, _ in batch])
        i += len(batch)
        try:
            res = check_model(model, time_limit=time_limit, rules=rules)
        except InvalidModel as e:  # skip the batch, but say so: the generator must be fixed
            rep.invalid += len(batch)
            rep.findings.append(Finding("invalid original", str(e)[:2000], batch[0][0], [], "", {}))
            continue
        rep.calls += 1
        rep.graphs += len(batch)
        rep.nodes += len(model.graph.node)
        rep.optimize_seconds += res.seconds
        rep.changed_models += res.changed
        rep.rules_fired.update(res.rules_fired)
        rep.rule_calls.update(res.rules_fired.keys())
        for _, g, _ in batch:
            rep.motifs.update(g.motifs)
        if not res.ok:
            owners = {_graph_of(n) for n in res.problems}
            suspects = sorted(k for k in owners if k is not None)
            if None in owners or not suspects:
                suspects = list(range(len(batch)))
            if not any([_pin(rep, batch[k], build, outcome, shrink_budget) for k in suspects]):
                # no graph fails alone: the pack is the reproducer (an interaction between graphs)
                kind = "error" if res.error else "mismatch"
                rep.errors += kind == "error"
                rep.mismatches += kind == "mismatch"
                detail = res.error or "; ".join(f"{k}: {v}" for k, v in res.problems.items())
                rep.findings.append(Finding(kind + " (pack only)", detail, batch[0][0], [],
                                            onnx.printer.to_text(model.graph), res.rules_fired))
        if progress:
            rep.seconds = time.perf_counter() - t0
            progress(rep)
    rep.seconds = time.perf_counter() - t0
    return rep


def _pin(rep: FuzzReport, item: tuple[int, FuzzGraph, list[int]], build: Callable[[list[int]], onnx.ModelProto],
         outcome: Callable[[list[int]], CaseResult], budget: int) -> bool:
    """Re-run one graph of a failing pack alone; if it fails alone, shrink it, record a finding, return True."""
    gseed, graph, record = item
    single = outcome(record)
    if single.ok:
        return False
    kind = "error" if single.error else "mismatch"
    if kind == "error":
        rep.errors += 1
        sig = _signature_of(kind, single.error or "")
        known = next((f for f in rep.findings if f.signature == sig), None)
        if known is not None:  # a bug already found and shrunk: count it, do not shrink it again
            known.count += 1
            return True
    else:
        rep.mismatches += 1

    def fails(rec: list[int]) -> bool:
        try:
            r = outcome(rec)
        except Exception:  # a replayed list that breaks the generator is not this failure
            return False
        return (r.error is not None) if kind == "error" else bool(r.problems)

    small = shrink(record, fails, budget=budget, marks=graph.marks)
    final = outcome(small)
    detail = final.error if kind == "error" else "; ".join(f"{k}: {v}" for k, v in final.problems.items())
    rep.findings.append(Finding(kind, detail or "", gseed, small, onnx.printer.to_text(build(small).graph),
                                final.rules_fired))
    return True


def default_rule_names() -> list[str]:
    """Names of the one-way rules ``optimize`` runs by default (corpus + layout rules; reverses as ``-rev``),
    the denominator of rule coverage."""
    from eqsat.rules import corpus_or_starter
    from eqsat.rules.layout import LAYOUT_RULES

    return [d.name for r in [*corpus_or_starter(), *LAYOUT_RULES] for d in r.directions()]
