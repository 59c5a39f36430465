"""TASO's seven benchmark graphs (BERT, NasRNN, ResNeXt-50, NasNet-A, Inception-v3, SqueezeNet, VGG-19), batch 1,
float32, NCHW; each builder takes its main sizes as keyword arguments for small test versions."""

from __future__ import annotations

import numpy as np
import onnx

from eqsat.models.builder import ModelBuilder

# ---------------------------------------------------------------------------------------------------------
# TASO's benchmark graphs (jiazhihao/TASO: examples/*.py and cpp_examples/*.h), batch 1, float32, NCHW.
#
# TASO's convolutions have no bias and fuse their ReLU; here every conv is a bias-free ``Conv`` followed by a
# separate ``Relu`` node. TASO's "SAME" padding runs on cuDNN with the symmetric padding ``(total + 1) // 2``
# on both sides, where ``total = max(k - s, 0)`` if ``size % s == 0`` else ``max(k - size % s, 0)``; the models
# spell those pads out (never ``auto_pad``). cuDNN's average pooling there excludes the padding from the
# count, so every ``AveragePool`` has ``count_include_pad=0``. TASO draws weights from ``np.random.rand``
# (all positive, so activations blow up); these models use seeded zero-mean normal weights scaled so the
# activations stay O(1): He scaling (sqrt(2/fan_in)) for a conv followed by a ReLU, sqrt(1/fan_in) otherwise.

#: TASO's seven benchmark graphs in a fixed order (the names of :func:`taso_suite`).
TASO_SUITE: tuple[str, ...] = ("taso_bert", "taso_nasrnn", "taso_resnext50", "taso_nasnet_a",
                               "taso_inception_v3", "taso_squeezenet", "taso_vgg19")

_Pads = tuple[int, int, int, int]


def _same_pads(h: int, w: int, kh: int, kw: int, sh: int, sw: int) -> _Pads:
    """TASO's SAME padding as cuDNN runs it: symmetric ``(total + 1) // 2`` on both sides of each axis."""
    def one(size: int, k: int, s: int) -> int:
        total = max(k - s, 0) if size % s == 0 else max(k - size % s, 0)
        return (total + 1) // 2

    ph, pw = one(h, kh, sh), one(w, kw, sw)
    return (ph, pw, ph, pw)


class _Net:
    """A shape-tracking front end over :class:`ModelBuilder` for the convolutional TASO graphs."""

    def __init__(self, seed: int) -> None:
        self.b = ModelBuilder(seed)
        self.shapes: dict[str, tuple[int, ...]] = {}

    def input(self, name: str, shape: tuple[int, ...]) -> str:
        self.shapes[name] = shape
        return name

    def _put(self, out: str, shape: tuple[int, ...]) -> str:
        self.shapes[out] = shape
        return out

    @staticmethod
    def _out(size: int, k: int, s: int, lo: int, hi: int) -> int:
        return (size + lo + hi - k) // s + 1

    def _pads(self, x: str, kh: int, kw: int, sh: int, sw: int, pads: str | _Pads) -> _Pads:
        if pads == "same":
            _, _, h, w = self.shapes[x]
            return _same_pads(h, w, kh, kw, sh, sw)
        if pads == "valid":
            return (0, 0, 0, 0)
        assert isinstance(pads, tuple)
        return pads

    def conv(self, x: str, cout: int, k: int | tuple[int, int], s: int = 1, pads: str | _Pads = "same",
             relu: bool = True, groups: int = 1, out: str | None = None, gain: float | None = None) -> str:
        n, cin, h, w = self.shapes[x]
        kh, kw = (k, k) if isinstance(k, int) else k
        assert cin % groups == 0 and cout % groups == 0, (cin, cout, groups)
        p = self._pads(x, kh, kw, s, s, pads)
        fan_in = cin // groups * kh * kw
        gain = gain if gain is not None else 2.0 if relu else 1.0
        wt = self.b.weight((cout, cin // groups, kh, kw), np.sqrt(gain / fan_in))
        attrs: dict[str, object] = {"kernel_shape": [kh, kw], "strides": [s, s], "pads": list(p)}
        if groups > 1:
            attrs["group"] = groups
        y = self.b.op("Conv", [x, wt], None if relu else out, **attrs)
        shape = (n, cout, self._out(h, kh, s, p[0], p[2]), self._out(w, kw, s, p[1], p[3]))
        self._put(y, shape)
        return self.relu(y, out) if relu else y

    def pool(self, kind: str, x: str, k: int, s: int, pads: str | _Pads = "same", out: str | None = None) -> str:
        n, c, h, w = self.shapes[x]
        p = self._pads(x, k, k, s, s, pads)
        attrs: dict[str, object] = {"kernel_shape": [k, k], "strides": [s, s], "pads": list(p)}
        if kind == "avg":
            attrs["count_include_pad"] = 0
        y = self.b.op("MaxPool" if kind == "max" else "AveragePool", [x], out, **attrs)
        return self._put(y, (n, c, self._out(h, k, s, p[0], p[2]), self._out(w, k, s, p[1], p[3])))

    def relu(self, x: str, out: str | None = None) -> str:
        return self._put(self.b.op("Relu", [x], out), self.shapes[x])

    def add(self, a: str, c: str, out: str | None = None) -> str:
        assert self.shapes[a] == self.shapes[c], (self.shapes[a], self.shapes[c])
        return self._put(self.b.op("Add", [a, c], out), self.shapes[a])

    def concat(self, xs: list[str], out: str | None = None) -> str:
        shapes = [self.shapes[x] for x in xs]
        assert all(s[:1] + s[2:] == shapes[0][:1] + shapes[0][2:] for s in shapes), shapes
        y = self.b.op("Concat", xs, out, axis=1)
        return self._put(y, (shapes[0][0], sum(s[1] for s in shapes)) + shapes[0][2:])

    def global_avg(self, x: str, out: str | None = None) -> str:
        n, c, _, _ = self.shapes[x]
        return self._put(self.b.op("GlobalAveragePool", [x], out), (n, c, 1, 1))

    def reshape(self, x: str, shape: tuple[int, ...], out: str | None = None) -> str:
        assert int(np.prod(shape)) == int(np.prod(self.shapes[x])), (shape, self.shapes[x])
        y = self.b.op("Reshape", [x, self.b.const(np.array(shape, dtype=np.int64), "shape")], out)
        return self._put(y, shape)

    def matmul(self, x: str, n_out: int, relu: bool, out: str | None = None) -> str:
        rows, n_in = self.shapes[x]
        wt = self.b.weight((n_in, n_out), np.sqrt((2.0 if relu else 1.0) / n_in))
        y = self._put(self.b.op("MatMul", [x, wt], None if relu else out), (rows, n_out))
        return self.relu(y, out) if relu else y

    def model(self, name: str, inputs: list[str], outputs: list[str]) -> onnx.ModelProto:
        return self.b.model(name, [(i, self.shapes[i]) for i in inputs], [(o, self.shapes[o]) for o in outputs])


def taso_bert(seq: int = 64, hidden: int = 1024, heads: int = 16, layers: int = 8, softmax: bool = True,
              seed: int = 0) -> onnx.ModelProto:
    """TASO's BERT benchmark as its C++ twin ``cpp_examples/bert.h`` (the corrected version) builds it.

    Input ``x`` (seq, hidden) -> relu -> ``layers`` attention layers, each: q, k, v = x @ Wq|Wk|Wv (hidden,
    hidden); reshape to (seq, heads, hidden/heads); transpose q (1,0,2), k (1,2,0), v (1,0,2); logits = q @ k;
    out = logits @ v; transpose (1,0,2); reshape (seq, hidden); @ Wo. The next layer's input is that output:
    6 MatMuls (q, k, v, logits, out, Wo), 4 Reshapes and 4 Transposes per layer (at the defaults 1 Relu,
    48 MatMuls, 32 Reshapes and 32 Transposes).

    What differs from a real BERT (all as in TASO): no softmax and no 1/sqrt(d_k) scaling on the logits, no
    biases, no residual connections, no layer normalization, no feed-forward block, and a relu on the input.
    Without softmax each layer is a homogeneous cubic map of its input (scaling x by c scales the layer's
    output by c**3, the network's by c**(3**layers)), so outputs are very sensitive to input scale and
    to rounding: eight layers make a polynomial of degree 3**8 that overflows float32 on most inputs, and no
    numeric check can judge a rewrite of it. So by default (``softmax=True``) a Softmax is put on the logits
    (last axis), as in every real BERT; ``softmax=False`` gives TASO's graph exactly.

    Weights: Wq/Wk/Wv ~ N(0, 1/hidden); each Wo is N(0, 1/hidden) rescaled so that the layer's output has unit
    RMS on a calibration input: the one :func:`eqsat.onnx_io.random_feeds` gives by default (standard normal
    from ``np.random.default_rng(0)``), so that input yields an O(1) output. This data-dependent
    initialisation is needed because no fixed weight scale keeps a cubic map O(1); other inputs of the same
    distribution give outputs many orders of magnitude larger or smaller (without softmax).
    """
    assert hidden % heads == 0
    dk = hidden // heads
    b = ModelBuilder(seed)
    cal = np.maximum(np.random.default_rng(0).standard_normal((seq, hidden)).astype(np.float32), 0.0)
    cal = cal.astype(np.float64)
    t = b.op("Relu", ["x"])

    def weight(arr: np.ndarray) -> str:
        return b.const(arr.astype(np.float32), "w")

    def to_heads(src: str, perm: list[int]) -> str:
        r = b.op("Reshape", [src, b.const(np.array([seq, heads, dk], dtype=np.int64), "shape")])
        return b.op("Transpose", [r], perm=perm)

    for layer in range(layers):
        wq, wk, wv = (b.rng.normal(0.0, 1.0 / np.sqrt(hidden), (hidden, hidden)) for _ in range(3))
        wo = b.rng.normal(0.0, 1.0 / np.sqrt(hidden), (hidden, hidden))
        # calibrate Wo on the numpy forward pass of this layer
        q = (cal @ wq).reshape(seq, heads, dk).transpose(1, 0, 2)
        k = (cal @ wk).reshape(seq, heads, dk).transpose(1, 2, 0)
        v = (cal @ wv).reshape(seq, heads, dk).transpose(1, 0, 2)
        logits = q @ k
        if softmax:
            e = np.exp(logits - logits.max(axis=-1, keepdims=True))
            logits = e / e.sum(axis=-1, keepdims=True)
        o = (logits @ v).transpose(1, 0, 2).reshape(seq, hidden) @ wo
        rms = float(np.sqrt(np.mean(o * o)))
        wo /= rms
        cal = o / rms
        qn = to_heads(b.op("MatMul", [t, weight(wq)]), [1, 0, 2])
        kn = to_heads(b.op("MatMul", [t, weight(wk)]), [1, 2, 0])
        vn = to_heads(b.op("MatMul", [t, weight(wv)]), [1, 0, 2])
        lg = b.op("MatMul", [qn, kn])
        if softmax:
            lg = b.op("Softmax", [lg], axis=-1)
        ctx = b.op("Transpose", [b.op("MatMul", [lg, vn])], perm=[1, 0, 2])
        merged = b.op("Reshape", [ctx, b.const(np.array([seq, hidden], dtype=np.int64), "shape")])
        t = b.op("MatMul", [merged, weight(wo)], "y" if layer == layers - 1 else None)
    if layers == 0:
        t = b.op("Identity", [t], "y")
    return b.model("taso_bert", [("x", (seq, hidden))], [("y", (seq, hidden))])


def taso_nasrnn(hidden: int = 512, steps: int = 5, seed: int = 0) -> onnx.ModelProto:
    """TASO's NasRNN benchmark (``cpp_examples/nasrnn.h``, ``examples/nasrnn.py``): ``steps`` unrolled NAS cells.

    Inputs ``x0``..``x{steps-1}`` of shape (1, hidden); the initial state is a weight (1, hidden). Each step
    h' = nas_node(h, x): t_i = x @ W1_i + h @ W2_i for i < 8 (fresh weights each), m0 = relu(t0) + sigm(t3),
    m1 = sigm(t1) + tanh(t2), m2 = sigm(t4) * tanh(t5), m3 = sigm(t6) * relu(t7), m4 = sigm(m1) + tanh(m2),
    m5 = tanh(m0) * tanh(m3), m6 = tanh(m4) * tanh(m5), h' = tanh(m6). The output ``y`` is the last state
    (the only tensor nothing consumes). 16 MatMuls per step, weights N(0, 1/hidden).
    """
    b = ModelBuilder(seed)
    state = b.weight((1, hidden), 1.0, name="h0_")
    xs = [f"x{i}" for i in range(steps)]
    for step, x in enumerate(xs):
        ts = [b.op("Add", [b.op("MatMul", [x, b.weight((hidden, hidden))]),
                           b.op("MatMul", [state, b.weight((hidden, hidden))])]) for _ in range(8)]

        def u(op: str, a: str) -> str:
            return b.op(op, [a])

        m0 = b.op("Add", [u("Relu", ts[0]), u("Sigmoid", ts[3])])
        m1 = b.op("Add", [u("Sigmoid", ts[1]), u("Tanh", ts[2])])
        m2 = b.op("Mul", [u("Sigmoid", ts[4]), u("Tanh", ts[5])])
        m3 = b.op("Mul", [u("Sigmoid", ts[6]), u("Relu", ts[7])])
        m4 = b.op("Add", [u("Sigmoid", m1), u("Tanh", m2)])
        m5 = b.op("Mul", [u("Tanh", m0), u("Tanh", m3)])
        m6 = b.op("Mul", [u("Tanh", m4), u("Tanh", m5)])
        state = b.op("Tanh", [m6], "y" if step == steps - 1 else None)
    return b.model("taso_nasrnn", [(x, (1, hidden)) for x in xs], [("y", (1, hidden))])


def taso_resnext50(image: int = 224, widths: tuple[int, ...] = (128, 256, 512, 1024),
                   depths: tuple[int, ...] = (3, 4, 6, 3), groups: int = 32, stem: int = 64,
                   seed: int = 0) -> onnx.ModelProto:
    """TASO's ResNeXt-50 benchmark (``cpp_examples/resnext50.h``, ``examples/resnext50.py``).

    Input (1, 3, image, image) -> conv7x7/2 (stem ch) + relu -> maxpool 3x3/2 SAME -> stages of blocks with
    widths C and depths as given (strides 1, 2, 2, 2 on each stage's first block). Block: conv1x1 C + relu ->
    grouped conv3x3 (C, C/groups) stride s + relu -> conv1x1 2C; shortcut = conv1x1 2C stride s + relu (a ReLU on
    the projection, as TASO) when s > 1 or Cin != 2C, else the input; out = relu(add). No BN, pooling head or FC:
    the output ``y`` is (1, 2048, 7, 7) at the defaults.
    """
    n = _Net(seed)
    t = n.conv(n.input("x", (1, 3, image, image)), stem, 7, 2)
    t = n.pool("max", t, 3, 2)
    blocks = [(c, 1 if (i == 0 or j > 0) else 2) for i, (c, d) in enumerate(zip(widths, depths, strict=True))
              for j in range(d)]
    for idx, (c, s) in enumerate(blocks):
        out = "y" if idx == len(blocks) - 1 else None
        r = n.conv(t, c, 1)
        r = n.conv(r, c, 3, s, groups=groups)
        r = n.conv(r, 2 * c, 1, relu=False, gain=0.25)  # a damped residual branch keeps activations O(1)
        sc = n.conv(t, 2 * c, 1, s) if s > 1 or n.shapes[t][1] != 2 * c else t
        t = n.relu(n.add(sc, r), out)
    return n.model("taso_resnext50", ["x"], [t])


def taso_nasnet_a(image: int = 224, channels: int = 128, cells: int = 5, stages: int = 3, stem: int = 64,
                  seed: int = 0) -> onnx.ModelProto:
    """TASO's NasNet-A benchmark (``cpp_examples/nasnet_a.h``, ``examples/nasnet_a.py``).

    Stem: (1, 3, image, image) -> conv7x7/2 (stem ch) + relu -> maxpool 3x3/2 SAME. Then ``stages`` times:
    ``cells`` normal cells with C channels ((prev, cur) <- (cur, cell) each time), C doubles, one reduction
    cell. Helpers: squeeze = conv1x1 + relu; fit(cur, x) = squeeze if x has cur's resolution else conv3x3/2 +
    relu; sep_conv(x, C, k, s) = grouped conv k x k (C, x.C/C) stride s (depthwise when x.C == C, no act) ->
    conv1x1 C (no act). Normal cell: cur' = squeeze(C, cur), prev' = fit(cur', prev); five adds of pairs of
    [sep3(cur'), cur', sep3(prev'), sep3(cur'), avg3(cur'), prev', avg3(prev'), avg3(prev'), sep3(prev'),
    sep3(prev')] concatenated (5C channels). Reduction cell (stride 2): o0 = sep7(prev') + sep5(cur'),
    o1 = max3(cur') + sep7(prev'), o2 = avg3(cur') + sep5(prev'), o3 = max3(cur') + sep3/1(o0),
    o4 = avg3/1(o0) + o1; concat (5C channels, half resolution). Output ``y``: (1, 5120, 7, 7) at the defaults.
    """
    n = _Net(seed)
    t = n.conv(n.input("x", (1, 3, image, image)), stem, 7, 2)
    t = n.pool("max", t, 3, 2)

    # below He's gain 2: a cell's output (sums of two branches, some with a positive mean) has about 1.6x the
    # second moment of the squeezed inputs, so the squeeze (and fit) convs damp it back to O(1)
    def squeeze(x: str, c: int) -> str:
        return n.conv(x, c, 1, gain=1.25)

    def fit(cur: str, x: str) -> str:
        c = n.shapes[cur][1]
        return squeeze(x, c) if n.shapes[x][2] == n.shapes[cur][2] else n.conv(x, c, 3, 2, gain=1.25)

    def sep(x: str, c: int, k: int, s: int) -> str:
        # TASO's weight (C, x.C / C, k, k) means C groups: depthwise when x.C == C
        g = n.conv(x, c, k, s, relu=False, groups=c)
        return n.conv(g, c, 1, relu=False, gain=0.5)  # each cell output adds two branches

    def normal(prev: str, cur: str, c: int) -> str:
        cur = squeeze(cur, c)
        prev = fit(cur, prev)
        ts = [sep(cur, c, 3, 1), cur, sep(prev, c, 3, 1), sep(cur, c, 3, 1), n.pool("avg", cur, 3, 1), prev,
              n.pool("avg", prev, 3, 1), n.pool("avg", prev, 3, 1), sep(prev, c, 3, 1), sep(prev, c, 3, 1)]
        return n.concat([n.add(ts[2 * i], ts[2 * i + 1]) for i in range(5)])

    def reduction(prev: str, cur: str, c: int, out: str | None) -> str:
        cur = squeeze(cur, c)
        prev = fit(cur, prev)
        o0 = n.add(sep(prev, c, 7, 2), sep(cur, c, 5, 2))
        o1 = n.add(n.pool("max", cur, 3, 2), sep(prev, c, 7, 2))
        o2 = n.add(n.pool("avg", cur, 3, 2), sep(prev, c, 5, 2))
        o3 = n.add(n.pool("max", cur, 3, 2), sep(o0, c, 3, 1))
        o4 = n.add(n.pool("avg", o0, 3, 1), o1)
        return n.concat([o0, o1, o2, o3, o4], out)

    c = channels
    for stage in range(stages):
        prev = cur = t
        for _ in range(cells):
            prev, cur = cur, normal(prev, cur, c)
        c *= 2
        t = reduction(prev, cur, c, "y" if stage == stages - 1 else None)
    return n.model("taso_nasnet_a", ["x"], [t])


def taso_inception_v3(image: int = 299, width_div: int = 1, seed: int = 0) -> onnx.ModelProto:
    """TASO's Inception-v3 benchmark (``examples/inceptionv3.py``; it has no C++ twin), at batch 1.

    Every conv is followed by a relu. Front: conv3x3/2 32 valid -> conv3x3 32 valid -> conv3x3 64 pad 1 ->
    maxpool3/2 -> conv1x1 80 -> conv3x3 192 valid -> maxpool3/2. Blocks A(32), A(64), A(64) (4-way concat),
    B (3-way), C(128), C(160), C(160), C(192) (4-way), D (3-way), E, E (6-way concat, 2048 ch at 8x8). The
    average pools inside blocks are 3x3/1 SAME excluding the padding from the count (cuDNN's mode in TASO).
    ``width_div`` divides every channel count (for small test models).

    Differences from TASO: batch 1 instead of TASO's 32. TASO's tail, ``pool2d(..., 'global_avg')``, uses a
    1x1 kernel and so is an identity; here it is a real ``GlobalAveragePool``, so the output ``y`` is
    (1, 2048, 1, 1). There is no FC layer (as in TASO).
    """
    n = _Net(seed)

    def ch(c: int) -> int:
        assert c % width_div == 0, (c, width_div)
        return c // width_div

    def conv(x: str, c: int, k: int | tuple[int, int] = 1, s: int = 1, pad: tuple[int, int] = (0, 0)) -> str:
        return n.conv(x, ch(c), k, s, (pad[0], pad[1], pad[0], pad[1]))

    t = n.input("x", (1, 3, image, image))
    t = conv(t, 32, 3, 2)
    t = conv(t, 32, 3)
    t = conv(t, 64, 3, pad=(1, 1))
    t = n.pool("max", t, 3, 2, "valid")
    t = conv(t, 80, 1)
    t = conv(t, 192, 3)
    t = n.pool("max", t, 3, 2, "valid")

    def avg_branch(x: str, c: int) -> str:
        return conv(n.pool("avg", x, 3, 1, (1, 1, 1, 1)), c)

    def block_a(x: str, pf: int) -> str:
        b1 = conv(x, 64)
        b5 = conv(conv(x, 48), 64, 5, pad=(2, 2))
        b3 = conv(conv(conv(x, 64), 96, 3, pad=(1, 1)), 96, 3, pad=(1, 1))
        return n.concat([b1, b5, b3, avg_branch(x, pf)])

    def block_b(x: str) -> str:
        b3 = conv(x, 384, 3, 2)
        bd = conv(conv(conv(x, 64), 96, 3, pad=(1, 1)), 96, 3, 2)
        return n.concat([b3, bd, n.pool("max", x, 3, 2, "valid")])

    def block_c(x: str, c7: int) -> str:
        b1 = conv(x, 192)
        b7 = conv(conv(conv(x, c7), c7, (1, 7), pad=(0, 3)), 192, (7, 1), pad=(3, 0))
        bd = conv(x, c7)
        for c, k, p in ((c7, (7, 1), (3, 0)), (c7, (1, 7), (0, 3)), (c7, (7, 1), (3, 0)), (192, (1, 7), (0, 3))):
            bd = conv(bd, c, k, pad=p)
        return n.concat([b1, b7, bd, avg_branch(x, 192)])

    def block_d(x: str) -> str:
        b3 = conv(conv(x, 192), 320, 3, 2)
        b7 = conv(conv(conv(conv(x, 192), 192, (1, 7), pad=(0, 3)), 192, (7, 1), pad=(3, 0)), 192, 3, 2)
        return n.concat([b3, b7, n.pool("max", x, 3, 2, "valid")])

    def block_e(x: str) -> str:
        b1 = conv(x, 320)
        b3 = conv(x, 384)
        bd = conv(conv(x, 448), 384, 3, pad=(1, 1))
        return n.concat([b1, conv(b3, 384, (1, 3), pad=(0, 1)), conv(b3, 384, (3, 1), pad=(1, 0)),
                         conv(bd, 384, (1, 3), pad=(0, 1)), conv(bd, 384, (3, 1), pad=(1, 0)),
                         avg_branch(x, 192)])

    for pf in (32, 64, 64):
        t = block_a(t, pf)
    t = block_b(t)
    for c7 in (128, 160, 160, 192):
        t = block_c(t, c7)
    t = block_d(t)
    t = block_e(block_e(t))
    y = n.global_avg(t, "y")
    return n.model("taso_inception_v3", ["x"], [y])


def taso_squeezenet(image: int = 224, num_classes: int = 1000, width_div: int = 1,
                    seed: int = 0) -> onnx.ModelProto:
    """SqueezeNet 1.1 (TASO's repository has no SqueezeNet; this is the standard torchvision architecture,
    which is also what TENSAT's TASO-imported ``squeezenet.model`` holds), TASO-style: bias-free convs.

    conv3x3/2 64 valid + relu -> maxpool3/2 -> fire(16, 64) x2 -> maxpool3/2 -> fire(32, 128) x2 -> maxpool3/2
    -> fire(48, 192) x2 -> fire(64, 256) x2 -> conv1x1 num_classes + relu -> global average pool -> reshape
    (1, num_classes). fire(s, e) = squeeze conv1x1 s + relu, then concat(conv1x1 e + relu, conv3x3 pad 1 e +
    relu). Dropout is omitted (inference). torchvision's max pools use ceil_mode; at 224 the floor sizes
    (111 -> 55 -> 27 -> 13) are the same, and these pools use the default floor mode. ``width_div`` divides the
    channel counts (for small test models).
    """
    n = _Net(seed)

    def fire(x: str, s: int, e: int) -> str:
        sq = n.conv(x, s // width_div, 1, pads="valid")
        return n.concat([n.conv(sq, e // width_div, 1, pads="valid"),
                         n.conv(sq, e // width_div, 3, pads=(1, 1, 1, 1))])

    t = n.conv(n.input("x", (1, 3, image, image)), 64 // width_div, 3, 2, "valid")
    t = n.pool("max", t, 3, 2, "valid")
    t = fire(fire(t, 16, 64), 16, 64)
    t = n.pool("max", t, 3, 2, "valid")
    t = fire(fire(t, 32, 128), 32, 128)
    t = n.pool("max", t, 3, 2, "valid")
    for s, e in ((48, 192), (48, 192), (64, 256), (64, 256)):
        t = fire(t, s, e)
    t = n.conv(t, num_classes, 1, pads="valid")
    y = n.reshape(n.global_avg(t), (1, num_classes), "y")
    return n.model("taso_squeezenet", ["x"], [y])


def taso_vgg19(image: int = 224, num_classes: int = 1000, classifier: bool = True, fc: int = 4096,
               width_div: int = 1, seed: int = 0) -> onnx.ModelProto:
    """VGG-19 (configuration E). TASO's repository has no VGG; this is the standard architecture, as in
    TENSAT's TASO-imported ``vgg.model``, TASO-style: bias-free convs and bias-free FC layers.

    16 conv3x3 pad 1 + relu in blocks of [2 x 64, 2 x 128, 4 x 256, 4 x 512, 4 x 512], each block followed by
    maxpool 2x2/2; then (``classifier=True``, the default, as the standard VGG-19 and TENSAT's graph) reshape
    (1, 512*7*7) -> MatMul fc + relu -> MatMul fc + relu -> MatMul num_classes, output ``y`` (1, num_classes).
    Dropout is omitted (inference). With ``classifier=False`` the output is the last pool (1, 512, 7, 7).
    The classifier holds 124M of the 144M parameters. ``width_div`` divides the conv channel counts.
    """
    n = _Net(seed)
    t = n.input("x", (1, 3, image, image))
    cfg = ((64, 2), (128, 2), (256, 4), (512, 4), (512, 4))
    for i, (c, reps) in enumerate(cfg):
        for _ in range(reps):
            t = n.conv(t, c // width_div, 3, pads=(1, 1, 1, 1))
        t = n.pool("max", t, 2, 2, "valid", None if classifier or i < len(cfg) - 1 else "y")
    if classifier:
        t = n.reshape(t, (1, int(np.prod(n.shapes[t][1:]))))
        t = n.matmul(t, fc, relu=True)
        t = n.matmul(t, fc, relu=True)
        t = n.matmul(t, num_classes, relu=False, out="y")
    return n.model("taso_vgg19", ["x"], [t])
