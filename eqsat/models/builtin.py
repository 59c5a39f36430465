"""Built-in models written with ``onnx.helper``: TASO-style benchmark blocks (two products of one input, a BERT
attention block, a NasRNN cell, a small CNN, a long chain of shared weights) and torchvision's MobileNetV2."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from eqsat.models.builder import ModelBuilder

# ---------------------------------------------------------------------------------------------------------
# built-in models


def two_matmul_shared_input(batch: int = 64, hidden: int = 256, seed: int = 0) -> onnx.ModelProto:
    """x @ W1 and x @ W2 (the classic fusion candidate), each followed by relu."""
    b = ModelBuilder(seed)
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
    b = ModelBuilder(seed)
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
    b = ModelBuilder(seed)

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
    b = ModelBuilder(seed)
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


#: torchvision's MobileNetV2 inverted-residual stages: (expansion t, output channels c, repeats n, first stride s)
MOBILENET_V2_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1))


def mobilenet_v2(size: int = 224, classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """torchvision's ``mobilenet_v2`` (3.5 M parameters) as ``torch.onnx.export`` (TorchScript exporter, opset 17,
    eval mode) writes it: each Conv carries its folded BatchNorm as a bias, ReLU6 is ``Clip`` with min 0 and max 6
    from Constant nodes, depthwise Convs have one group per channel, an inverted-residual block with stride 1 and
    as many output as input channels ends in ``Add`` of its input; then a 1x1 Conv to 1280 + ReLU6,
    GlobalAveragePool, Flatten and a Gemm (transB=1) to ``classes``. Weights are seeded and scaled so that
    activations stay of order one through the 52 convolutions."""
    b = ModelBuilder(seed)

    def conv(x: str, cin: int, cout: int, k: int = 1, stride: int = 1, groups: int = 1, relu6: bool = True) -> str:
        # He-scaled before a ReLU6, unit-variance (1/sqrt(fan-in)) before a linear bottleneck
        fan_in = cin // groups * k * k
        w = b.weight((cout, cin // groups, k, k), float(np.sqrt((2.0 if relu6 else 1.0) / fan_in)))
        bias = b.weight((cout,), 0.1, "b")
        y = b.op("Conv", [x, w, bias], dilations=[1, 1], group=groups, kernel_shape=[k, k],
                 pads=[k // 2] * 4, strides=[stride, stride])
        if not relu6:
            return y
        low = b.op("Constant", [], value=numpy_helper.from_array(np.array(0.0, np.float32)))
        high = b.op("Constant", [], value=numpy_helper.from_array(np.array(6.0, np.float32)))
        return b.op("Clip", [y, low, high])

    x, cin = conv("x", 3, 32, 3, 2), 32
    for t, c, n, s in MOBILENET_V2_STAGES:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            h = conv(x, cin, hidden) if t != 1 else x
            h = conv(h, hidden, hidden, 3, stride, groups=hidden)
            h = conv(h, hidden, c, relu6=False)
            x = b.op("Add", [x, h]) if stride == 1 and cin == c else h
            cin = c
    x = conv(x, cin, 1280)
    flat = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    b.op("Gemm", [flat, b.weight((classes, 1280)), b.weight((classes,), 0.1, "b")], "y", alpha=1.0, beta=1.0,
         transB=1)
    return b.model("mobilenet_v2", [("x", (1, 3, size, size))], [("y", (1, classes))])


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
