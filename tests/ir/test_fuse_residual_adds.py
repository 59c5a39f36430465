"""Conv + Add (+ Relu) import as one conv2d_add (as onnxruntime runs them) where that is the same computation;
the rules relating it to conv2d and ewadd hold numerically, and optimized models pass the numeric check."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from eqsat import ops
from eqsat.costs import AnalyticCostModel
from eqsat.costs.measured_cpu import one_node_model
from eqsat.ir.passes import fuse_pairs
from eqsat.onnx_io import load_model, to_onnx
from eqsat.pipeline import optimize
from eqsat.testing.onnx_builders import make_model

C, H = 8, 6


def _model(body: list[onnx.NodeProto], outputs: list[str], *, residual: tuple[int, ...] = (1, C, H, H),
           seed: int = 0, extra_outputs: tuple[str, ...] = ()) -> onnx.ModelProto:
    """x (1, C, H, H) and r (``residual``) in; weights w1, w2 (3x3 C->C), biases, batch-norm statistics."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w1", (C, C, 3, 3)), ("b1", (C,)), ("w2", (C, C, 1, 1)), ("b2", (C,)), ("bs", (C,)),
                          ("bb", (C,)), ("bm", (C,)))]
    inits.append(numpy_helper.from_array(rng.uniform(0.5, 2.0, C).astype(np.float32), "bv"))
    outs = [(o, (1, C, H, H)) for o in (*outputs, *extra_outputs)]
    return make_model(body, [("x", (1, C, H, H)), ("r", residual)], outs, inits, ir_version=8)


def _conv(out: str, src: str = "x", w: str = "w1", b: str = "b1") -> onnx.NodeProto:
    return helper.make_node("Conv", [src, w, b], [out], pads=[1, 1, 1, 1] if w == "w1" else [0, 0, 0, 0])


def _feeds(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input}


def _check_same(model: onnx.ModelProto, graph) -> None:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for seed in range(3):
        feeds = _feeds(model, seed)
        for got, want in zip(graph.evaluate(feeds), sess.run(None, feeds), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _ops(graph) -> list[tuple[str, int | None]]:
    return [(n.op, n.p.get("act")) for n in graph.nodes]


@pytest.mark.parametrize("conv_first", [True, False])
@pytest.mark.parametrize("relu", [False, True])
def test_conv_add_imports_as_one_conv2d_add(relu: bool, conv_first: bool) -> None:
    add_ins = ["c", "r"] if conv_first else ["r", "c"]
    body = [_conv("c"), helper.make_node("Add", add_ins, ["s"])]
    if relu:
        body.append(helper.make_node("Relu", ["s"], ["y"]))
    model = _model(body, ["y" if relu else "s"])
    g = load_model(model)
    assert _ops(g) == [("conv2d_add", ops.ACT_RELU if relu else ops.ACT_NONE)]
    assert g.nodes[0].inputs[3] == "r"
    _check_same(model, g)
    written = [n.op_type for n in to_onnx(g).graph.node]
    assert written == ["Conv", "Add"] + (["Relu"] if relu else [])


def test_resnet_block_tail_imports_as_one_node_with_the_batch_norm_folded() -> None:
    body = [_conv("c"), helper.make_node("BatchNormalization", ["c", "bs", "bb", "bm", "bv"], ["n"]),
            helper.make_node("Add", ["n", "r"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    model = _model(body, ["y"])
    g = load_model(model)
    assert _ops(g) == [("conv2d_add", ops.ACT_RELU)]
    _check_same(model, g)


def test_projection_shortcut_fuses_one_of_two_convs() -> None:
    body = [_conv("c"), _conv("p", "x", "w2", "b2"), helper.make_node("Add", ["c", "p"], ["s"]),
            helper.make_node("Relu", ["s"], ["y"])]
    model = _model(body, ["y"])
    g = load_model(model)
    assert sorted(_ops(g)) == [("conv2d", ops.ACT_NONE), ("conv2d_add", ops.ACT_RELU)]
    _check_same(model, g)


def test_no_fusion_where_it_would_not_be_the_same_graph() -> None:
    add = helper.make_node("Add", ["c", "r"], ["s"])
    cases = [
        _model([_conv("c"), add], ["s"], residual=(1, C, 1, 1)),  # the residual broadcasts
        _model([_conv("c"), add, helper.make_node("Sigmoid", ["c"], ["g"])], ["s"], extra_outputs=("g",)),
        _model([_conv("c"), add], ["s"], extra_outputs=("c",)),  # the conv output is a graph output
        _model([_conv("c"), helper.make_node("Add", ["c", "c"], ["s"])], ["s"]),  # the conv added to itself
        _model([_conv("c"), helper.make_node("Relu", ["c"], ["q"]), helper.make_node("Add", ["q", "r"], ["s"])],
               ["s"]),  # the conv carries an activation: the add comes after the relu
    ]
    for model in cases:
        g = load_model(model)
        assert "conv2d_add" not in [n.op for n in g.nodes]
        assert "ewadd" in [n.op for n in g.nodes]
        _check_same(model, g)


def test_fusion_is_idempotent() -> None:
    g = load_model(_model([_conv("c"), helper.make_node("Add", ["c", "r"], ["s"])], ["s"]))
    assert fuse_pairs(g) is g


def test_priced_as_its_parts_by_the_analytic_model_and_measured_as_written() -> None:
    spec = ops.get("conv2d_add")
    p = spec.normalize({"pads": (1, 1, 1, 1), "act": ops.ACT_RELU})
    shapes = [(1, C, H, H), (C, C, 3, 3), (C,), (1, C, H, H)]
    (key,) = spec.cost_keys(p, shapes, (1, C, H, H), weights=(1, 2))
    parts = ops.runs_as_keys(key)
    assert [k.op for k in parts] == ["conv2d", "ewadd", "relu"] and parts[0].weights == (1, 2)
    analytic = AnalyticCostModel()
    assert analytic.cost(key) == pytest.approx(sum(analytic.cost(k) for k in parts))
    m = one_node_model(key)
    # what export writes, the residual arriving through an identity onnxruntime runs blocked (1x1 MaxPool)
    assert [n.op_type for n in m.graph.node] == ["MaxPool", "Conv", "Add", "Relu"]
    assert [i.name for i in m.graph.input] == ["in0", "in3"]  # the residual is an activation, fed per run


def test_optimized_residual_models_pass_the_numeric_check() -> None:
    body = [_conv("c"), helper.make_node("BatchNormalization", ["c", "bs", "bb", "bm", "bv"], ["n"]),
            helper.make_node("Relu", ["n"], ["a"]), _conv("c2", "a", "w2", "b2"),
            helper.make_node("Add", ["c2", "x"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    model = _model(body, ["y"])
    res = optimize(model, time_limit=20)
    assert res.numeric is not None and res.numeric.ok
    # import wrote the fused forms; the rules put the separate operators in the e-graph beside them
    assert {"conv-add-fuse-rev", "conv-add-relu-fuse-rev"} <= set(res.rules_fired)
