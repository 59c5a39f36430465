"""The onnx package's light model zoo (``onnx/backend/test/data/light``) with seeded random weights.

The zoo files carry their weights as ``ConstantOfShape`` outputs and their other parameters as initializers
with placeholder values; :func:`load_zoo_model` replaces every float parameter with seeded random values scaled
so activations stay O(1), giving ordinary inference models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

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
                            producer_name="eqsat.models")
    onnx.checker.check_model(out)
    return out
