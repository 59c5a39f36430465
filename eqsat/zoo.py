"""Models to optimize: the onnx package's light model zoo with seeded random weights, and built-in models.

The zoo files (``onnx/backend/test/data/light``) carry their weights as ``ConstantOfShape`` outputs and their
other parameters as initializers with placeholder values; :func:`load_zoo_model` replaces every float
parameter with seeded random values scaled so activations stay O(1), giving ordinary inference models.
The built-in models are written in code with ``onnx.helper`` (TASO-style benchmark blocks).
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


def builtin_models() -> dict[str, Callable[[], onnx.ModelProto]]:
    """Name -> builder of each built-in model (default sizes, seed 0)."""
    return {"bert_attention_block": bert_attention_block, "nasrnn_cell": nasrnn_cell,
            "two_matmul_shared_input": two_matmul_shared_input, "small_cnn": small_cnn}
