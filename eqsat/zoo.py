"""Models to optimize: the onnx package's light model zoo with seeded random weights, and built-in models.

The zoo files (``onnx/backend/test/data/light``) carry their weights as ``ConstantOfShape`` outputs and their
other parameters as initializers with placeholder values; :func:`load_zoo_model` replaces every float
parameter with seeded random values scaled so activations stay O(1), giving ordinary inference models.
The built-in models are written in code with ``onnx.helper``: TASO-style benchmark blocks, and TASO's seven
benchmark graphs (:data:`TASO_SUITE`, :func:`taso_suite`: BERT, NasRNN, ResNeXt-50, NasNet-A, Inception-v3,
SqueezeNet, VGG-19), whose builders take their main sizes as keyword arguments for small test versions,
and :func:`hf_bert`, Hugging Face's ``BertModel`` node for node as torch's TorchScript ONNX exporter writes it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ZOO = {
    "alexnet": "light_bvlc_alexnet.onnx", "densenet121": "light_densenet121.onnx",
    "inception_v1": "light_inception_v1.onnx", "inception_v2": "light_inception_v2.onnx",
    "resnet50": "light_resnet50.onnx", "shufflenet": "light_shufflenet.onnx",
    "squeezenet": "light_squeezenet.onnx", "vgg19": "light_vgg19.onnx", "zfnet512": "light_zfnet512.onnx",
}


def zoo_names() -> list[str]:
    """Names of the light zoo models."""
    return list(ZOO)


def zoo_path(name: str) -> Path:
    """Path of a zoo model file inside the installed onnx package."""
    if name not in ZOO:
        raise ValueError(f"unknown zoo model {name!r}; known: {zoo_names()}")
    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / ZOO[name]


def _consumers(graph: onnx.GraphProto) -> dict[str, list[tuple[onnx.NodeProto, int]]]:
    out: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for n in graph.node:
        for k, i in enumerate(n.input):
            out.setdefault(i, []).append((n, k))
    return out


def _random_param(name: str, shape: tuple[int, ...], uses: list[tuple[onnx.NodeProto, int]],
                  consumers: dict[str, list[tuple[onnx.NodeProto, int]]], rng: np.random.Generator) -> np.ndarray:
    roles = {(n.op_type, k) for n, k in uses}
    if ("Conv", 1) in roles or ("Gemm", 1) in roles or ("MatMul", 1) in roles:
        fan_in = int(np.prod(shape[1:])) if ("Conv", 1) in roles else int(shape[0] if len(shape) > 1 else 1)
        gemm = next((n for n, k in uses if n.op_type == "Gemm"), None)
        if gemm is not None:
            trans_b = any(a.name == "transB" and a.i for a in gemm.attribute)
            fan_in = int(shape[1] if trans_b else shape[0])
        return rng.normal(0.0, np.sqrt(2.0 / max(fan_in, 1)), shape)
    if ("BatchNormalization", 1) in roles or ("BatchNormalization", 4) in roles:
        return rng.uniform(0.5, 1.5, shape)
    # densenet / inception_v2 apply batch-norm scales through Unsqueeze -> Mul
    for n, _ in uses:
        if n.op_type == "Unsqueeze" and any(m.op_type == "Mul" for m, _ in consumers.get(n.output[0], [])):
            return rng.uniform(0.5, 1.5, shape)
    return rng.normal(0.0, 0.1, shape)


def load_zoo_model(name: str, seed: int = 0) -> onnx.ModelProto:
    """A zoo model as an ordinary inference model with seeded random float parameters."""
    model = onnx.load(str(zoo_path(name)))
    g = model.graph
    rng = np.random.default_rng(seed)
    consumers = _consumers(g)
    inits = {i.name: i for i in g.initializer}
    new_inits: list[onnx.TensorProto] = []
    for init in g.initializer:
        arr = numpy_helper.to_array(init)
        if arr.dtype == np.float32 and not all(n.op_type == "ConstantOfShape" for n, _ in consumers.get(init.name, [])):
            arr = _random_param(init.name, arr.shape, consumers.get(init.name, []), consumers, rng).astype(np.float32)
        new_inits.append(numpy_helper.from_array(arr, init.name))
    keep_nodes = []
    for n in g.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in inits:
            shape = tuple(int(d) for d in numpy_helper.to_array(inits[n.input[0]]))
            arr = _random_param(n.output[0], shape, consumers.get(n.output[0], []), consumers, rng)
            new_inits.append(numpy_helper.from_array(arr.astype(np.float32), n.output[0]))
        else:
            keep_nodes.append(n)
    used = {i for n in keep_nodes for i in n.input}
    new_inits = [t for t in new_inits if t.name in used]
    init_names = {t.name for t in new_inits}
    inputs = [i for i in g.input if i.name not in init_names and i.name in used]
    graph = helper.make_graph(keep_nodes, g.name, inputs, list(g.output), new_inits)
    # IR version 4 lets initializers stand without a matching graph input
    out = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=max(model.ir_version, 4),
                            producer_name="eqsat.zoo")
    onnx.checker.check_model(out)
    return out


# ---------------------------------------------------------------------------------------------------------
# built-in models


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def weight(self, shape: tuple[int, ...], scale: float | None = None, name: str = "w") -> str:
        self.count += 1
        nm = f"{name}{self.count}"
        fan_in = shape[0] if len(shape) == 2 else int(np.prod(shape[1:])) if len(shape) == 4 else 1
        sd = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
        self.inits.append(numpy_helper.from_array(self.rng.normal(0, sd, shape).astype(np.float32), nm))
        return nm

    def const(self, value: np.ndarray, name: str) -> str:
        self.count += 1
        nm = f"{name}{self.count}"
        self.inits.append(numpy_helper.from_array(np.asarray(value), nm))
        return nm

    def op(self, op_type: str, inputs: list[str], out: str | None = None, **attrs: object) -> str:
        self.count += 1
        out = out or f"{op_type.lower()}{self.count}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"n{self.count}", **attrs))
        return out

    def model(self, name: str, inputs: list[tuple[str, tuple[int, ...]]], outputs: list[tuple[str, tuple[int, ...]]],
              opset: int = 17) -> onnx.ModelProto:
        g = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in outputs], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="eqsat.zoo")
        m.ir_version = 8
        onnx.checker.check_model(m, full_check=True)
        return m


def two_matmul_shared_input(batch: int = 64, hidden: int = 256, seed: int = 0) -> onnx.ModelProto:
    """x @ W1 and x @ W2 (the classic fusion candidate), each followed by relu."""
    b = _Builder(seed)
    a = b.op("MatMul", ["x", b.weight((hidden, hidden))])
    c = b.op("MatMul", ["x", b.weight((hidden, hidden))])
    b.op("Relu", [a], "y1")
    b.op("Relu", [c], "y2")
    return b.model("two_matmul_shared_input", [("x", (batch, hidden))],
                   [("y1", (batch, hidden)), ("y2", (batch, hidden))])


def bert_attention_block(seq: int = 64, hidden: int = 1024, heads: int = 16, seed: int = 0) -> onnx.ModelProto:
    """One BERT self-attention block as TASO benchmarks it: Q/K/V projections of a shared input, per-head
    scaled dot products with softmax, output projection and a residual connection. The default shapes are
    TASO's (its C++ BERT example: sequence 64, hidden 1024, 16 heads of 64)."""
    b = _Builder(seed)
    dh = hidden // heads

    def proj(src: str) -> str:
        return b.op("MatMul", [src, b.weight((hidden, hidden))])

    def to_heads(t: str) -> str:
        r = b.op("Reshape", [t, b.const(np.array([seq, heads, dh], dtype=np.int64), "shape")])
        return b.op("Transpose", [r], perm=[1, 0, 2])

    q, k, v = (to_heads(proj("x")) for _ in range(3))
    kt = b.op("Transpose", [k], perm=[0, 2, 1])
    scores = b.op("MatMul", [q, kt])
    scaled = b.op("Mul", [scores, b.const(np.array(1.0 / np.sqrt(dh), dtype=np.float32), "scale")])
    probs = b.op("Softmax", [scaled], axis=-1)
    ctx = b.op("MatMul", [probs, v])
    merged = b.op("Reshape", [b.op("Transpose", [ctx], perm=[1, 0, 2]),
                              b.const(np.array([seq, hidden], dtype=np.int64), "shape")])
    out = proj(merged)
    b.op("Add", [out, "x"], "y")
    return b.model("bert_attention_block", [("x", (seq, hidden))], [("y", (seq, hidden))])


def nasrnn_cell(batch: int = 1, hidden: int = 256, seed: int = 0) -> onnx.ModelProto:
    """TASO's NasRNN cell: eight matmuls of the input x and the state h (each a shared input) combined with
    element-wise add/mul and sigmoid/tanh/relu."""
    b = _Builder(seed)

    def mm(src: str) -> str:
        return b.op("MatMul", [src, b.weight((hidden, hidden))])

    xs = [mm("x") for _ in range(8)]
    hs = [mm("h") for _ in range(8)]
    s = [b.op("Add", [xs[i], hs[i]]) for i in range(8)]
    m = [b.op("Sigmoid", [s[0]]), b.op("Relu", [s[1]]), b.op("Sigmoid", [s[2]]), b.op("Sigmoid", [s[3]]),
         b.op("Tanh", [s[4]]), b.op("Sigmoid", [s[5]]), b.op("Tanh", [s[6]]), b.op("Sigmoid", [s[7]])]
    p = [b.op("Mul", [m[0], m[1]]), b.op("Add", [m[2], m[3]]), b.op("Mul", [m[4], m[5]]),
         b.op("Add", [m[6], m[7]])]
    q = [b.op("Tanh", [p[0]]), b.op("Tanh", [p[1]]), b.op("Tanh", [p[2]]), b.op("Tanh", [p[3]])]
    r = [b.op("Mul", [q[0], q[1]]), b.op("Add", [q[2], q[3]])]
    b.op("Mul", [b.op("Tanh", [r[0]]), b.op("Tanh", [r[1]])], "y")
    return b.model("nasrnn_cell", [("x", (batch, hidden)), ("h", (batch, hidden))], [("y", (batch, hidden))])


def small_cnn(seed: int = 0) -> onnx.ModelProto:
    """conv+bn+relu, two convs sharing an input (1x1 and 3x3), concat, pooling and a Gemm classifier."""
    b = _Builder(seed)
    c = b.op("Conv", ["x", b.weight((16, 3, 3, 3)), b.weight((16,), 0.1)], pads=[1, 1, 1, 1])
    bn = b.op("BatchNormalization", [c, b.const(b.rng.uniform(0.5, 1.5, 16).astype(np.float32), "s"),
                                     b.weight((16,), 0.1), b.weight((16,), 0.1),
                                     b.const(b.rng.uniform(0.5, 1.5, 16).astype(np.float32), "v")])
    r = b.op("Relu", [bn])
    a1 = b.op("Relu", [b.op("Conv", [r, b.weight((8, 16, 1, 1)), b.weight((8,), 0.1)])])
    a3 = b.op("Relu", [b.op("Conv", [r, b.weight((8, 16, 3, 3)), b.weight((8,), 0.1)], pads=[1, 1, 1, 1])])
    cat = b.op("Concat", [a1, a3], axis=1)
    mp = b.op("MaxPool", [cat], kernel_shape=[2, 2], strides=[2, 2])
    gp = b.op("GlobalAveragePool", [mp])
    fl = b.op("Flatten", [gp], axis=1)
    b.op("Gemm", [fl, b.weight((10, 16)), b.weight((10,), 0.1)], "y", transB=1)
    return b.model("small_cnn", [("x", (1, 3, 16, 16))], [("y", (1, 10))])


def shared_weight_chain(n: int = 1000, d: int = 64, seed: int = 0) -> onnx.ModelProto:
    """x[1,d] -> n times (MatMul by the same weight W, Add the same bias B, Relu): a stress model for the
    engine's limits (a two-output rule fusing products by one weight has n*(n-1) matches)."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array((rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32), "W")
    b = numpy_helper.from_array((0.1 * rng.standard_normal(d)).astype(np.float32), "B")
    nodes, prev = [], "x"
    for i in range(n):
        nodes += [helper.make_node("MatMul", [prev, "W"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", "B"], [f"a{i}"]), helper.make_node("Relu", [f"a{i}"], [f"r{i}"])]
        prev = f"r{i}"
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, d])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, d])], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


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
    """A shape-tracking front end over :class:`_Builder` for the convolutional TASO graphs."""

    def __init__(self, seed: int) -> None:
        self.b = _Builder(seed)
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
    b = _Builder(seed)
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
    b = _Builder(seed)
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


# ---------------------------------------------------------------------------------------------------------
# Hugging Face BERT as torch.onnx's TorchScript exporter writes it
#
# Checked against real exports (torch 2.13 ``torch.onnx.export(..., dynamo=False)``, opsets 17 and 20, static
# shapes, batch 1) of ``transformers.BertModel`` from transformers 4.46.3, 4.57.6 and 5.23.0, with both
# attention implementations. Node order, op types, attributes, Constant values and node/tensor names follow
# those exports ('{scope}/{Op}[_k]' nodes with '{node}_output_0' outputs, as for a model exported directly).


class _TorchExport:
    """Node and tensor naming of torch.onnx's TorchScript exporter: node ``{scope}/{Op}`` (``{Op}_{k}`` for the
    k-th further node of that type in the scope), its output ``{node}_output_0``; constants as Constant nodes."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.counts: dict[tuple[str, str], int] = {}
        self.matmul_weights = 0

    def op(self, scope: str, op_type: str, inputs: list[str], out: str | None = None, **attrs: object) -> str:
        k = self.counts.get((scope, op_type), 0)
        self.counts[(scope, op_type)] = k + 1
        name = f"{scope}/{op_type}" + (f"_{k}" if k else "")
        out = out or f"{name}_output_0"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=name, **attrs))
        return out

    def const(self, scope: str, value: object, dtype: type) -> str:
        return self.op(scope, "Constant", [], value=numpy_helper.from_array(np.asarray(value, dtype=dtype)))

    def init(self, name: str, arr: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(arr, dtype=np.float32), name))
        return name

    def matmul_weight(self, arr: np.ndarray) -> str:
        """A Linear layer's weight as the exporter stores it for MatMul: transposed, (in, out), unnamed."""
        self.matmul_weights += 1
        return self.init(f"onnx::MatMul_{self.matmul_weights}", arr)

    def expand_shape(self, scope: str, shape: list[int]) -> str:
        """The target-shape idiom of torch's ``expand``: Where(Equal(shape, ones * -1), ones, shape)."""
        s = self.const(scope, shape, np.int64)
        ones = self.op(scope, "ConstantOfShape", [self.const(scope, [len(shape)], np.int64)],
                       value=numpy_helper.from_array(np.array([1], dtype=np.int64)))
        neg = self.op(scope, "Mul", [ones, self.const(scope, -1, np.int64)])
        return self.op(scope, "Where", [self.op(scope, "Equal", [s, neg]), ones, s])


def hf_bert(seq: int = 128, hidden: int = 768, heads: int = 12, layers: int = 1, intermediate: int | None = None,
            vocab: int = 30522, attention: str = "eager", gelu: str = "op", pooler: bool = True,
            token_type_ids: bool = False, transformers: str = "5", opset: int = 20,
            seed: int = 0) -> onnx.ModelProto:
    """Hugging Face ``transformers.BertModel`` as ``torch.onnx.export(model, ..., dynamo=False,
    opset_version=opset)`` writes it for static shapes at batch 1 (``seq`` <= 512 tokens).

    Inputs: int64 ``input_ids`` and ``attention_mask`` and, with ``token_type_ids=True`` (an export given them),
    ``token_type_ids``, each (1, seq); outputs ``last_hidden_state`` (1, seq, hidden) and (``pooler=True``)
    ``pooler_output`` (1, hidden). Defaults: BERT-base sizes, one layer, ``intermediate`` 4 * hidden, the
    current library (``transformers="5"``), eager attention (transformers itself picks "sdpa" unless told),
    no token_type_ids input. Those defaults keep the model valid for eqsat's random test inputs (integers in
    [0, 4)): a token-type input would index past the 2-row table, and the 4.x mask (1 - m) * float32-min
    overflows to +inf for m = 3, so every output is NaN; the 5.x mask only asks m != 0.

    Embeddings: Gather rows of the word table (vocab, hidden) by ``input_ids``, of the token-type table (2, hidden)
    by ``token_type_ids`` (without that input, by constant zeros that the export expands), Add, Gather of the
    position table (512, hidden) by the constant position ids 0..seq-1, Add, LayerNormalization (axis -1, epsilon
    1e-12). Each layer: q, k, v = MatMul by a transposed (in, out) weight initializer then Add(bias, .) (the bias
    first, as exported); Reshape each to (1, seq, heads, head_dim) (target [1, -1, heads, head_dim] in 4.x, [1, seq,
    -1, head_dim] in 5.x); Transpose q and v with perm (0, 2, 1, 3) and k with (0, 2, 3, 1) (the exporter fuses the
    head transpose with k's transpose); the attention (below); Transpose (0, 2, 1, 3); Reshape (1, seq, hidden)
    (target [1, seq, -1] in 5.x); output projection MatMul + Add; residual Add; LayerNormalization; intermediate
    MatMul + Add; GELU; output MatMul + Add; residual Add; LayerNormalization. Pooler: Gather index 0 on axis 1,
    Gemm (weight (out, in), transB=1, alpha=beta=1), Tanh.

    ``gelu``: ``"op"`` the opset-20 ``Gelu`` node (approximate="none"), ``"erf"`` the decomposition the
    exporter writes below opset 20: Div(x, sqrt 2) -> Erf -> Add(1) -> Mul(x, .) -> Mul(0.5) (``opset`` 17..19
    with ``"erf"`` gives the real export at that opset; ``"op"`` needs opset 20).

    ``transformers``: which library generation the export comes from (they differ in the mask and the
    attention). ``"4"``: transformers 4.x (as 4.57.6 exports; 4.46.3 differs only in node order and a static
    sequence length in the head-split Reshape). The extended mask is (1 - Cast(Unsqueeze(Unsqueeze(mask, 1),
    2), float)) * float32-min. ``attention="eager"``: MatMul(q, kT), Div by sqrt(head_dim), Add mask, Softmax
    (axis -1), MatMul with v. ``attention="sdpa"``: torch's ``scaled_dot_product_attention`` symbolic with the
    scale computed at run time from Shape(q) (Slice, Cast, Sqrt, Div(1, .), Cast) and q and kT each Mul'ed by
    Sqrt(scale) before the MatMul; its mask is expanded to (1, 1, seq, seq) and then Where(bool(1 - m), min,
    1 - m). ``"5"``: transformers 5.x (as 5.23.0 exports): the mask comes from ``create_bidirectional_mask``
    as a boolean (1, 1, seq, seq) built by index arithmetic (GreaterOrEqual, Flatten, Gather, And, Expand);
    eager: MatMul(q, kT), Mul by 1/sqrt(head_dim), Add Where(mask, 0, float32-min), Softmax, MatMul;
    sdpa: per layer q and kT Mul'ed by the constant head_dim**-0.25, MatMul, Add Where(mask, 0, -inf),
    Softmax, Where(IsNaN(p), 0, p), MatMul, and a no-op Reshape (1, heads, seq, head_dim) before the
    transpose back.

    Weights are seeded: matrices and embedding tables N(0, 0.02) as BERT's initializer, biases N(0, 0.02),
    LayerNorm scales N(1, 0.02) and shifts N(0, 0.02) (no two parameters equal, so nothing an exporter would
    merge), so activations stay O(1). IR version 9 (8 below opset 19), as torch writes.
    """
    if attention not in ("eager", "sdpa"):
        raise ValueError(f"attention must be 'eager' or 'sdpa', not {attention!r}")
    if gelu not in ("op", "erf"):
        raise ValueError(f"gelu must be 'op' or 'erf', not {gelu!r}")
    if transformers not in ("4", "5"):
        raise ValueError(f"transformers must be '4' or '5', not {transformers!r}")
    if not 17 <= opset <= 20 or (gelu == "op" and opset < 20):
        raise ValueError(f"opset {opset}: LayerNormalization needs 17 or later, the Gelu op 20 (use gelu='erf')")
    if hidden % heads or not 1 <= seq <= 512 or layers < 1:
        raise ValueError(f"need hidden % heads == 0, 1 <= seq <= 512 and layers >= 1 "
                         f"(hidden={hidden}, heads={heads}, seq={seq}, layers={layers})")
    ffn = 4 * hidden if intermediate is None else intermediate
    dh = hidden // heads
    v5 = transformers == "5"
    rng = np.random.default_rng(seed)
    t = _TorchExport()
    i64, f32 = np.int64, np.float32
    fmin = np.finfo(np.float32).min

    def normal(shape: tuple[int, ...], mean: float = 0.0) -> np.ndarray:
        return rng.normal(mean, 0.02, shape)

    def linear(scope: str, x: str, n_in: int, n_out: int, name: str) -> str:
        w = t.matmul_weight(normal((n_in, n_out)))
        return t.op(scope, "Add", [t.init(f"{name}.bias", normal((n_out,))), t.op(scope, "MatMul", [x, w])])

    def layer_norm(scope: str, x: str, name: str, out: str | None = None) -> str:
        g = t.init(f"{name}.weight", normal((hidden,), 1.0))
        b = t.init(f"{name}.bias", normal((hidden,)))
        return t.op(scope, "LayerNormalization", [x, g, b], out, axis=-1, epsilon=1e-12)

    # embeddings (and, without a token_type_ids input, the buffered all-zero token types)
    E = "/embeddings"
    word_w = t.init("embeddings.word_embeddings.weight", normal((vocab, hidden)))
    pos_w = t.init("embeddings.position_embeddings.weight", normal((512, hidden)))
    type_w = t.init("embeddings.token_type_embeddings.weight", normal((2, hidden)))
    positions = np.arange(seq, dtype=i64)[None, :]
    if token_type_ids:
        types = "token_type_ids"
        zero = t.const(E, 0, i64)  # index 0, shared with the pooler's Gather
        pos_ids = t.const(E, positions, i64)
    elif not v5:
        zero = t.const("", 0, i64)
        buffered = t.const("", np.zeros((1, seq), dtype=i64), i64)
        types = t.op("", "Expand", [buffered, t.expand_shape("", [1, seq])])
        pos_ids = t.const(E, positions, i64)
    else:
        zero = t.const(E, 0, i64)
        pos_ids = t.const(E, positions, i64)
        buffered = t.const(E, np.zeros((1, 512), dtype=i64), i64)
        buffered = t.op(E, "Expand", [buffered, t.expand_shape(E, [1, -1])])
        gathered = t.op(E, "GatherElements", [buffered, pos_ids], axis=1)
        types = t.op(E, "Expand", [gathered, t.expand_shape(E, [1, seq])])
    words = t.op(f"{E}/word_embeddings", "Gather", [word_w, "input_ids"])
    x = t.op(E, "Add", [words, t.op(f"{E}/token_type_embeddings", "Gather", [type_w, types])])
    x = t.op(E, "Add", [x, t.op(f"{E}/position_embeddings", "Gather", [pos_w, pos_ids])])
    x = layer_norm(f"{E}/LayerNorm", x, "embeddings.LayerNorm")

    # the attention mask
    mask = ""
    if not v5:
        m = t.op("", "Unsqueeze", ["attention_mask", t.const("", [1], i64)])
        m = t.op("", "Unsqueeze", [m, t.const("", [2], i64)])
        if attention == "sdpa":  # _prepare_4d_attention_mask_for_sdpa expands it first
            m = t.op("", "Expand", [m, t.expand_shape("", [1, 1, seq, seq])])
        m = t.op("", "Cast", [m], to=TensorProto.FLOAT)
        inv = t.op("", "Sub", [t.const("", 1.0, f32), m])
        if attention == "eager":  # BertModel.get_extended_attention_mask
            mask = t.op("", "Mul", [inv, t.const("", fmin, f32)])
        else:
            flag = t.op("", "Cast", [t.op("", "Cast", [inv], to=TensorProto.BOOL)], to=TensorProto.BOOL)
            mask = t.op("", "Where", [flag, t.const("", fmin, f32), inv])
    else:  # masking_utils.create_bidirectional_mask: a boolean (1, 1, seq, seq) mask
        pad = t.op("", "Cast", ["attention_mask"], to=TensorProto.BOOL)
        true = t.op("", "ConstantOfShape", [t.const("", np.zeros((0,), dtype=i64), i64)],
                    value=numpy_helper.from_array(np.array([True])))
        q_idx = t.const("", np.arange(seq, dtype=i64).reshape(1, 1, seq, 1), i64)
        ge = t.op("", "Cast", [t.op("", "GreaterOrEqual", [q_idx, t.const("", 0, i64)])], to=TensorProto.BOOL)
        both = t.op("", "And", [true, ge])
        length = t.op("", "Gather", [t.op("", "Shape", [pad]), t.const("", [1], i64)], axis=0)
        flat = t.op("", "Flatten", [pad], axis=2)
        offset = t.op("", "Mul", [t.const("", np.zeros((1, 1, 1, 1), dtype=i64), i64), length])
        index = t.op("", "Add", [t.const("", np.arange(seq, dtype=i64).reshape(1, 1, 1, seq), i64), offset])
        picked = t.op("", "Gather", [flat, index], axis=0)
        shape = t.op("", "Shape", [index])
        picked = t.op("", "Reshape", [picked, t.const("", [-1], i64)], allowzero=0)
        picked = t.op("", "Reshape", [picked, t.op("", "Concat", [shape], axis=0)], allowzero=0)
        both = t.op("", "And", [both, t.op("", "Cast", [picked], to=TensorProto.BOOL)])
        bool_mask = t.op("", "Expand", [both, t.expand_shape("", [1, -1, seq, seq])])
        if attention == "eager":
            mask = t.op("", "Where", [bool_mask, t.const("", 0.0, f32), t.const("", fmin, f32)])

    for i in range(layers):
        L = f"/encoder/layer.{i}"
        S = f"{L}/attention/self"
        split = [1, seq, -1, dh] if v5 else [1, -1, heads, dh]
        q = linear(f"{S}/query", x, hidden, hidden, f"encoder.layer.{i}.attention.self.query")
        shapes = [t.const(S, split, i64) for _ in range(3)]
        q = t.op(S, "Transpose", [t.op(S, "Reshape", [q, shapes[0]], allowzero=0)], perm=[0, 2, 1, 3])
        k = linear(f"{S}/key", x, hidden, hidden, f"encoder.layer.{i}.attention.self.key")
        k = t.op(S, "Reshape", [k, shapes[1]], allowzero=0)
        v = linear(f"{S}/value", x, hidden, hidden, f"encoder.layer.{i}.attention.self.value")
        v = t.op(S, "Transpose", [t.op(S, "Reshape", [v, shapes[2]], allowzero=0)], perm=[0, 2, 1, 3])
        if attention == "eager":
            kt = t.op(S, "Transpose", [k], perm=[0, 2, 3, 1])
            scores = t.op(S, "MatMul", [q, kt])
            if v5:
                scores = t.op(S, "Mul", [scores, t.const(S, dh ** -0.5, f32)])
            else:
                scores = t.op(S, "Div", [scores, t.const(S, np.sqrt(dh), f32)])
            probs = t.op(S, "Softmax", [t.op(S, "Add", [scores, mask])], axis=-1)
            ctx = t.op(S, "MatMul", [probs, v])
        elif not v5:  # scale = 1 / sqrt(q.shape[-1]) at run time
            last = t.op(S, "Slice", [t.op(S, "Shape", [q]), t.const(S, [-1], i64),
                                     t.const(S, [np.iinfo(np.int64).max], i64)])
            root = t.op(S, "Sqrt", [t.op(S, "Cast", [last], to=TensorProto.FLOAT)])
            scale = t.op(S, "Cast", [t.op(S, "Div", [t.const(S, [1.0], f32), root])], to=TensorProto.FLOAT)
            kt = t.op(S, "Transpose", [k], perm=[0, 2, 3, 1])
            qs = t.op(S, "Mul", [q, t.op(S, "Sqrt", [scale])])
            ks = t.op(S, "Mul", [kt, t.op(S, "Sqrt", [scale])])
            probs = t.op(S, "Softmax", [t.op(S, "Add", [t.op(S, "MatMul", [qs, ks]), mask])], axis=-1)
            ctx = t.op(S, "MatMul", [probs, v])
        else:  # scale = head_dim ** -0.5 given, its square root folded
            kt = t.op(S, "Transpose", [k], perm=[0, 2, 3, 1])
            root = np.sqrt(np.float32(dh ** -0.5))
            qs = t.op(S, "Mul", [q, t.const(S, root, f32)])
            ks = t.op(S, "Mul", [kt, t.const(S, root, f32)])
            scores = t.op(S, "MatMul", [qs, ks])
            bias = t.op(S, "Where", [bool_mask, t.const(S, [0.0], f32), t.const(S, [-np.inf], f32)])
            probs = t.op(S, "Softmax", [t.op(S, "Add", [scores, bias])], axis=-1)
            probs = t.op(S, "Where", [t.op(S, "IsNaN", [probs]), t.const(S, [0.0], f32), probs])
            ctx = t.op(S, "MatMul", [probs, v])
            ctx = t.op(S, "Reshape", [ctx, t.const(S, [1, -1, seq, dh], i64)], allowzero=0)
        ctx = t.op(S, "Transpose", [ctx], perm=[0, 2, 1, 3])
        merged = [1, seq, -1] if v5 else [1, seq, hidden]
        ctx = t.op(S, "Reshape", [ctx, t.const(S, merged, i64)], allowzero=0)
        a = linear(f"{L}/attention/output/dense", ctx, hidden, hidden, f"encoder.layer.{i}.attention.output.dense")
        a = t.op(f"{L}/attention/output", "Add", [a, x])
        a = layer_norm(f"{L}/attention/output/LayerNorm", a, f"encoder.layer.{i}.attention.output.LayerNorm")
        h = linear(f"{L}/intermediate/dense", a, hidden, ffn, f"encoder.layer.{i}.intermediate.dense")
        G = f"{L}/intermediate/intermediate_act_fn"
        if gelu == "op":
            h = t.op(G, "Gelu", [h], approximate="none")
        else:
            e = t.op(G, "Erf", [t.op(G, "Div", [h, t.const(G, np.sqrt(2.0), f32)])])
            h = t.op(G, "Mul", [t.op(G, "Mul", [h, t.op(G, "Add", [e, t.const(G, 1.0, f32)])]),
                                t.const(G, 0.5, f32)])
        o = linear(f"{L}/output/dense", h, ffn, hidden, f"encoder.layer.{i}.output.dense")
        o = t.op(f"{L}/output", "Add", [o, a])
        x = layer_norm(f"{L}/output/LayerNorm", o, f"encoder.layer.{i}.output.LayerNorm",
                       "last_hidden_state" if i == layers - 1 else None)

    outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [1, seq, hidden])]
    if pooler:
        first = t.op("/pooler", "Gather", [x, zero], axis=1)
        w = t.init("pooler.dense.weight", normal((hidden, hidden)))
        b = t.init("pooler.dense.bias", normal((hidden,)))
        y = t.op("/pooler/dense", "Gemm", [first, w, b], alpha=1.0, beta=1.0, transB=1)
        t.op("/pooler/activation", "Tanh", [y], "pooler_output")
        outputs.append(helper.make_tensor_value_info("pooler_output", TensorProto.FLOAT, [1, hidden]))
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if token_type_ids else [])
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, [1, seq]) for n in names]
    used = {n for node in t.nodes for n in node.input}
    nodes = [n for n in t.nodes if n.op_type != "Constant" or n.output[0] in used]
    g = helper.make_graph(nodes, "main_graph", inputs, outputs, t.inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="eqsat.zoo")
    model.ir_version = 9 if opset >= 19 else 8  # what torch writes for each opset
    onnx.checker.check_model(model, full_check=True)
    return model


def taso_suite() -> dict[str, Callable[[], onnx.ModelProto]]:
    """Name -> builder of TASO's seven benchmark graphs (full size, seed 0), in :data:`TASO_SUITE` order."""
    builders: dict[str, Callable[[], onnx.ModelProto]] = {
        "taso_bert": taso_bert, "taso_nasrnn": taso_nasrnn, "taso_resnext50": taso_resnext50,
        "taso_nasnet_a": taso_nasnet_a, "taso_inception_v3": taso_inception_v3,
        "taso_squeezenet": taso_squeezenet, "taso_vgg19": taso_vgg19}
    return {name: builders[name] for name in TASO_SUITE}


def builtin_models() -> dict[str, Callable[[], onnx.ModelProto]]:
    """Name -> builder of each built-in model (default sizes, seed 0), TASO's suite included."""
    return {"bert_attention_block": bert_attention_block, "nasrnn_cell": nasrnn_cell,
            "two_matmul_shared_input": two_matmul_shared_input, "small_cnn": small_cnn, **taso_suite(),
            "hf_bert": hf_bert}
