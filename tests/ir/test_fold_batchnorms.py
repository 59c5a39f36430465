"""Conv + BatchNormalization import as one conv with the statistics folded into its kernel and bias (as
onnxruntime runs them), only where that is the same computation; numerically checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from eqsat import ops
from eqsat.ir.passes import fold_weights
from eqsat.onnx_io import load_model
from eqsat.pipeline import optimize
from eqsat.testing.onnx_builders import f32, make_model


def _model(*, relu: bool = False, extra_reader: bool = False, conv_is_output: bool = False,
           stats_input: bool = False, groups: int = 1, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    c_in, c_out = 4, 8
    inits = [numpy_helper.from_array(rng.standard_normal((c_out, c_in // groups, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(c_out).astype(np.float32), "b"),
             numpy_helper.from_array(rng.uniform(0.5, 2.0, c_out).astype(np.float32), "s"),
             numpy_helper.from_array(rng.standard_normal(c_out).astype(np.float32), "bb"),
             numpy_helper.from_array(rng.standard_normal(c_out).astype(np.float32), "m")]
    var = rng.uniform(0.1, 3.0, c_out).astype(np.float32)
    inputs = [("x", [1, c_in, 6, 6])]
    if stats_input:  # the variance is fed at run time: nothing to fold
        inputs.append(("v", [c_out]))
    else:
        inits.append(numpy_helper.from_array(var, "v"))
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], group=groups),
             helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"], epsilon=1e-3)]
    out = "n"
    if relu:
        nodes.append(helper.make_node("Relu", ["n"], ["y"]))
        out = "y"
    outs = [(out, [1, c_out, 6, 6])]
    if extra_reader:
        nodes.append(helper.make_node("Sigmoid", ["c"], ["sg"]))
        outs.append(("sg", [1, c_out, 6, 6]))
    if conv_is_output:
        outs.append(("c", [1, c_out, 6, 6]))
    return make_model(nodes, inputs, outs, inits, ir_version=8)


def _ops(graph) -> list[tuple[str, int | None]]:
    return [(n.op, n.p.get("act")) for n in graph.nodes]


def _reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the model as written
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("groups", [1, 2, 4])
@pytest.mark.parametrize("relu", [False, True])
def test_conv_batchnorm_imports_as_one_conv_computing_the_same(relu: bool, groups: int) -> None:
    model = _model(relu=relu, groups=groups, seed=groups)
    g = load_model(model)
    assert _ops(g) == [("conv2d", ops.ACT_RELU if relu else ops.ACT_NONE)]
    conv = g.nodes[0]
    assert conv.p["groups"] == groups and all(g.weights[i].dtype == np.float32 for i in conv.inputs[1:])
    assert set(g.weights) == set(conv.inputs[1:])  # the original kernel, bias and statistics are gone
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((1, 4, 6, 6)).astype(np.float32)
        want = _reference(model, {"x": x})[0]
        np.testing.assert_allclose(g.evaluate({"x": x})[0], want, rtol=1e-5, atol=1e-5)


def test_no_fold_where_it_would_not_be_the_same_graph() -> None:
    for model in (_model(extra_reader=True), _model(conv_is_output=True), _model(stats_input=True)):
        g = load_model(model)
        assert "batchnorm" in [n.op for n in g.nodes] and ("conv2d", ops.ACT_NONE) in _ops(g)


def test_fold_is_idempotent() -> None:
    g = load_model(_model(relu=True))
    assert fold_weights(g) is g


def test_folded_weight_names_do_not_collide() -> None:
    m = _model()
    # a weight already named like the fold's output: the fold picks another name
    m.graph.initializer.append(numpy_helper.from_array(np.ones((1, 8, 1, 1), np.float32), "n_bnfold_w"))
    m.graph.node.append(helper.make_node("Add", ["n", "n_bnfold_w"], ["z"]))
    m.graph.output.append(f32("z", [1, 8, 6, 6]))
    g = load_model(m)
    conv = next(n for n in g.nodes if n.op == "conv2d")
    assert "n_bnfold_w" not in conv.inputs and g.weights["n_bnfold_w"].shape == (1, 8, 1, 1)
    x = np.random.default_rng(0).standard_normal((1, 4, 6, 6)).astype(np.float32)
    for got, want in zip(g.evaluate({"x": x}), _reference(m, {"x": x}), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_optimized_folded_model_passes_the_numeric_check() -> None:
    for model in (_model(relu=True), _model(extra_reader=True)):
        res = optimize(model, time_limit=20)
        assert res.numeric is not None and res.numeric.ok
