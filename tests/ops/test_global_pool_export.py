"""Global pools are imported as pools over the whole input and written back as global pools: onnxruntime runs
``AveragePool`` from opset 19 on with a generic kernel (about 20x slower on a 13x13 window), so a full-window
``AveragePool`` would be a slower model, and a cost measured on it a wrong price."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from eqsat.costs.measured_cpu import one_node_model
from eqsat.onnx_io import load_model, to_onnx
from eqsat.ops import CostKey
from eqsat.testing.onnx_builders import make_model


def _model(op_type: str, shape: tuple[int, ...], opset: int, **attrs: object) -> onnx.ModelProto:
    return make_model([helper.make_node(op_type, ["x"], ["y"], **attrs)], [("x", shape)], ["y"], opset=opset)


def _run(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("op_type", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools_round_trip_as_global_pools(op_type: str, opset: int) -> None:
    shape = (2, 6, 13, 13)
    src = _model(op_type, shape, opset)
    graph = load_model(src)
    assert [n.op for n in graph.nodes] == ["avgpool" if "Average" in op_type else "maxpool"]
    out = to_onnx(graph)
    assert [n.op_type for n in out.graph.node] == [op_type]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(_run(out, x), _run(src, x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("attrs", [{"kernel_shape": [3, 3]}, {"kernel_shape": [13, 13], "pads": [1, 1, 1, 1]}])
def test_windowed_pools_stay_windowed(attrs: dict) -> None:
    shape = (1, 4, 13, 13)
    src = _model("AveragePool", shape, 20, **attrs)
    out = to_onnx(load_model(src))
    assert [n.op_type for n in out.graph.node] == ["AveragePool"]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(_run(out, x), _run(src, x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", ["avgpool", "maxpool"])
def test_cost_of_a_full_window_pool_is_measured_on_the_global_pool(op: str) -> None:
    params = (("kernel", (13, 13)), ("strides", (1, 1)), ("pads", (0, 0, 0, 0)))
    if op == "avgpool":
        params += (("count_include_pad", 0),)
    key = CostKey(op, params, ((1, 1000, 13, 13),), (1, 1000, 1, 1))
    assert [n.op_type for n in one_node_model(key).graph.node] == ["GlobalAveragePool" if op == "avgpool"
                                                                   else "GlobalMaxPool"]
    small = CostKey(op, (("kernel", (3, 3)),) + params[1:], ((1, 8, 13, 13),), (1, 8, 11, 11))
    assert [n.op_type for n in one_node_model(small).graph.node] == ["AveragePool" if op == "avgpool"
                                                                     else "MaxPool"]
