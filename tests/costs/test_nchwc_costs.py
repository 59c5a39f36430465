"""Measured CPU costs of operators onnxruntime runs in its blocked NCHWc layout are taken net of the layout
conversions their one-node model pays at its boundary (a whole model pays them once, at its edges)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from eqsat import ops
from eqsat.costs import OnnxRuntimeCostModel
from eqsat.costs.measured_cpu import NCHWC_OPS, _nchwc_reorders, _reorder_model, nchwc_block_size, one_node_model


def _conv_key(channels: int, residual: bool = False):
    spec = ops.get("conv2d_add" if residual else "conv2d")
    p = spec.normalize({"pads": (1, 1, 1, 1), "act": ops.ACT_RELU})
    shapes = [(1, channels, 8, 8), (channels, channels, 3, 3), (channels,)]
    if residual:
        shapes.append((1, channels, 8, 8))
    (key,) = spec.cost_keys(p, shapes, (1, channels, 8, 8), weights=(1, 2))
    return key


def _run(model, x: np.ndarray) -> np.ndarray:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"in0": x})[0]


def test_block_size_is_a_power_of_two_of_at_least_four() -> None:
    b = nchwc_block_size()
    assert b >= 4 and b & (b - 1) == 0


@pytest.mark.parametrize("channels", [16, 20, 48])
def test_reorder_models_round_trip(channels: int) -> None:
    # the layout models are what onnxruntime runs: blocked there and back gives the tensor again
    shape = (1, channels, 5, 7)
    block = nchwc_block_size()
    x = np.random.default_rng(channels).standard_normal(shape).astype(np.float32)
    blocked = _run(_reorder_model("ReorderInput", shape, block), x)
    assert blocked.shape == (1, -(-channels // block) * block, 5, 7)
    np.testing.assert_array_equal(_run(_reorder_model("ReorderOutput", shape, block), blocked), x)


@pytest.mark.parametrize("residual", [False, True])
def test_reorders_of_a_blocked_convolution_are_found_per_replica(residual: bool) -> None:
    key = _conv_key(2 * nchwc_block_size(), residual)
    found = _nchwc_reorders(one_node_model(key, 3), threads=1)
    assert sorted(found["ReorderOutput"]) == ["out0", "out1", "out2"]  # one per replica
    # each activation input is reordered once, shared by the replicas
    assert sorted(found["ReorderInput"]) == (["in0", "in3"] if residual else ["in0"])


def test_operators_onnxruntime_keeps_in_nchw_have_no_reorders() -> None:
    mm = ops.get("matmul").cost_key({}, [(4, 32), (32, 32)], (4, 32), weights=(1,))
    assert mm.op not in NCHWC_OPS
    assert _nchwc_reorders(one_node_model(mm, 2), threads=1) == {"ReorderInput": [], "ReorderOutput": []}


def test_measured_cost_is_net_of_the_boundary_reorders(monkeypatch: pytest.MonkeyPatch) -> None:
    timed: list[str] = []

    def fake_run(self, model, feeds, optimize=True, rotate=True):
        node = model.graph.node
        timed.append(node[0].op_type if len(node) == 1 else "model")
        if len(node) == 1 and node[0].op_type in ("ReorderInput", "ReorderOutput"):
            assert not optimize and rotate == (node[0].op_type == "ReorderInput")
            return 0.1 + (0.3 if node[0].op_type == "ReorderInput" else 0.5)
        if node[0].op_type in ("Identity", "Sum"):  # the run overhead
            return 0.1
        return 2.0 if len(node) == 1 and node[0].op_type == "MaxPool" else 10.0
    monkeypatch.setattr(OnnxRuntimeCostModel, "_median_run_ms", fake_run)
    cm = OnnxRuntimeCostModel(threads=1, working_set_mb=0)  # one replica
    # 10 ms less the input reorder (0.3), the output reorder (0.5) and the run overhead (0.1)
    assert cm.cost(_conv_key(2 * nchwc_block_size())) == pytest.approx(10.0 - 0.3 - 0.5 - 0.1)
    assert timed.count("ReorderInput") == 1 and timed.count("ReorderOutput") == 1
    # with a residual: two input reorders, and the 1x1 MaxPool that blocks the residual (2 ms less its own
    # reorders and overhead: 1.1 ms); reorders are memoized per shape
    assert cm.cost(_conv_key(2 * nchwc_block_size(), residual=True)) == pytest.approx(
        10.0 - 2 * 0.3 - 0.5 - (2.0 - 0.3 - 0.5 - 0.1) - 0.1)
    assert timed.count("ReorderInput") == 1 and timed.count("ReorderOutput") == 1
    # an operator onnxruntime does not block is measured as before
    mm = ops.get("matmul").cost_key({}, [(4, 32), (32, 32)], (4, 32), weights=(1,))
    assert cm.cost(mm) == pytest.approx(10.0 - 0.1)


def test_a_residual_is_blocked_so_the_add_fuses_into_the_convolution() -> None:
    key = _conv_key(2 * nchwc_block_size(), residual=True)
    model = one_node_model(key, 2)
    assert [n.op_type for n in model.graph.node].count("MaxPool") == 1  # once, shared by the replicas
    import tempfile
    from pathlib import Path

    import onnx
    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.optimized_model_filepath = str(Path(tmp) / "o.onnx")
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        kinds = [n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node]
    assert "Add" not in kinds and "Relu" not in kinds  # onnxruntime ran Conv + Add + Relu as one kernel
    # and the model still computes the operator: the residual added once per replica
    rng = np.random.default_rng(0)
    feeds = {"in0": rng.standard_normal(key.input_shapes[0]).astype(np.float32),
             "in3": rng.standard_normal(key.input_shapes[3]).astype(np.float32)}
    weights = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    spec = ops.get("conv2d_add")
    for r, out in enumerate(got):
        want = spec.evaluate(dict(key.params), [feeds["in0"], weights[f"w1_{r}"], weights[f"w2_{r}"], feeds["in3"]])
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_identity_names_the_method() -> None:
    assert "nchwc-inside" in OnnxRuntimeCostModel(threads=1).device_identity()["method"]
