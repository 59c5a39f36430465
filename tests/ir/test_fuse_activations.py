"""Conv + Relu import as one conv with fused relu (as onnxruntime runs them), only where that is the same
computation: the relu is the conv output's only reader and the conv output is not a graph output."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from eqsat import ops
from eqsat.ir.passes import fuse_activations
from eqsat.onnx_io import load_model, to_onnx
from eqsat.pipeline import optimize
from eqsat.testing.onnx_builders import make_model


def _model(extra_reader: bool = False, conv_is_output: bool = False) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    outs = [("y", [1, 8, 6, 6])]
    if extra_reader:
        nodes.append(helper.make_node("Sigmoid", ["c"], ["s"]))
        outs.append(("s", [1, 8, 6, 6]))
    if conv_is_output:
        outs.append(("c", [1, 8, 6, 6]))
    return make_model(nodes, [("x", [1, 4, 6, 6])], outs, inits, ir_version=8)


def _ops(graph) -> list[tuple[str, int | None]]:
    return [(n.op, n.p.get("act")) for n in graph.nodes]


def test_conv_then_relu_imports_as_one_fused_conv() -> None:
    g = load_model(_model())
    assert _ops(g) == [("conv2d", ops.ACT_RELU)]
    assert g.outputs == ("y",)
    # written back as Conv + Relu, computing what the original computes
    written = to_onnx(g)
    assert [n.op_type for n in written.graph.node] == ["Conv", "Relu"]
    x = np.random.default_rng(1).standard_normal((1, 4, 6, 6)).astype(np.float32)
    orig = load_model(_model())
    np.testing.assert_allclose(g.evaluate({"x": x})[0], orig.evaluate({"x": x})[0])
    assert (g.evaluate({"x": x})[0] >= 0).all()


def test_no_fusion_when_the_conv_output_is_read_elsewhere() -> None:
    for model in (_model(extra_reader=True), _model(conv_is_output=True)):
        g = load_model(model)
        assert ("relu", None) in _ops(g) and ("conv2d", ops.ACT_NONE) in _ops(g)


def test_fusion_is_idempotent_and_keeps_fused_convs() -> None:
    g = load_model(_model())
    assert fuse_activations(g) is g  # nothing left to fuse: the same graph object


def test_optimized_fused_model_passes_the_numeric_check() -> None:
    for model in (_model(), _model(extra_reader=True)):
        res = optimize(model, time_limit=20)
        assert res.numeric is not None and res.numeric.ok
        assert [n.op_type for n in res.model.graph.node].count("Relu") == 1
