"""LRN imports as a registry operator whose forms (the ONNX node, an AveragePool over channels, shifted slices)
are one e-class: each form computes what onnxruntime's LRN does, at every opset export writes, and extraction
picks a form by its cost (the analytic model keeps the node; a measured one times what export writes)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from eqsat import ops
from eqsat.costs import AnalyticCostModel
from eqsat.ir.graph import Graph, TensorInfo, make_node
from eqsat.onnx_io import load_model, run_onnxruntime, to_onnx
from eqsat.pipeline import optimize
from eqsat.testing.onnx_builders import make_model


def _lrn_model(opset: int, size: int = 5, beta: float = 0.75, shape: tuple[int, ...] = (1, 6, 5, 5),
               seed: int = 0) -> onnx.ModelProto:
    """conv -> relu -> LRN -> conv: the LRN between two operators eqsat rewrites."""
    rng = np.random.default_rng(seed)
    n, c = shape[0], shape[1]
    w1 = rng.standard_normal((c, c, 3, 3)).astype(np.float32)
    w2 = rng.standard_normal((4, c, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("LRN", ["r1"], ["n1"], size=size, alpha=0.02, beta=beta, bias=1.5),
             helper.make_node("Conv", ["n1", "w2"], ["y"])]
    return make_model(nodes, [("x", shape)], [("y", [n, 4, *shape[2:]])], {"w1": w1, "w2": w2}, opset, name="lrn",
                      ir_version=7)


class _PreferForm(AnalyticCostModel):
    """A device on which one LRN form is much cheaper than the others."""

    def __init__(self, form: int) -> None:
        super().__init__()
        self.form = form

    def cost(self, key):
        c = super().cost(key)
        return c * 0.01 if key.op == "lrn" and dict(key.params)["form"] == self.form else c


def test_lrn_imports_as_the_registry_operator() -> None:
    g = load_model(_lrn_model(13))
    (node,) = [n for n in g.nodes if n.op == "lrn"]
    p = dict(node.params)
    assert p["size"] == 5 and p["form"] == 0 and p["beta"] == 0.75
    assert p["alpha"] == pytest.approx(0.02) and p["bias"] == pytest.approx(1.5)
    assert not [n for n in g.nodes if n.op == "opaque"]


@pytest.mark.parametrize("opset", [pytest.param(9, marks=pytest.mark.slow), 13,  # the fast lane: one opset
                                   pytest.param(17, marks=pytest.mark.slow)])
@pytest.mark.parametrize("form", [1, 2])
def test_each_form_is_extracted_where_cheaper_and_computes_the_lrn(opset: int, form: int) -> None:
    model = _lrn_model(opset, size=3 if form == 1 else 5, beta=0.6 if opset == 9 else 0.75)
    res = optimize(model, cost_model=_PreferForm(form), time_limit=30)
    assert [dict(n.params)["form"] for n in res.graph.nodes if n.op == "lrn"] == [form]
    types = [n.op_type for n in res.model.graph.node]
    assert "LRN" not in types and ("AveragePool" if form == 1 else "Sum") in types
    assert res.numeric.ok
    x = np.random.default_rng(1).standard_normal((1, 6, 5, 5)).astype(np.float32)
    got = run_onnxruntime(res.model, {"x": x})[0]
    want = run_onnxruntime(model, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_analytic_costs_keep_the_lrn_node() -> None:
    res = optimize(_lrn_model(13), time_limit=30)
    assert [dict(n.params)["form"] for n in res.graph.nodes if n.op == "lrn"] == [0]
    assert "LRN" in [n.op_type for n in res.model.graph.node]


def test_analytic_model_prices_the_decompositions_nodes_and_intermediates() -> None:
    spec, model = ops.get("lrn"), AnalyticCostModel()
    shape = (1, 96, 54, 54)
    cost = {f: model.cost(spec.cost_key(spec.normalize({"size": 5, "form": f}), [shape], shape)) for f in (0, 1, 2)}
    assert cost[0] < cost[1] < cost[2]  # the slices form writes the most intermediates (size + 7)


def test_decomposed_forms_fall_back_to_the_node_where_the_shape_is_unknown() -> None:
    class NoShapes:
        opset = 17

        def add_initializer(self, array, hint):  # pragma: no cover - not reached
            raise AssertionError

        def fresh(self, hint):  # pragma: no cover - not reached
            raise AssertionError

        def shape(self, name):
            return None

    p = ops.get("lrn").normalize({"size": 3, "form": 2})
    assert [n[0] for n in ops.get("lrn").export_fn(p, ["x"], ["y"], NoShapes())] == ["LRN"]


def test_bad_lrn_parameters_raise_clear_errors() -> None:
    spec = ops.get("lrn")
    with pytest.raises(ops.OpError, match="form"):
        spec.shape(spec.normalize({"size": 3, "form": 3}), [(1, 2, 3, 3)])
    with pytest.raises(ops.OpError, match="rank 3"):
        spec.shape(spec.normalize({"size": 3}), [(2, 3)])
    with pytest.raises(ops.OpError, match="size"):
        spec.shape(spec.normalize({"size": 0}), [(1, 2, 3, 3)])


def test_every_form_matches_onnxruntime_on_random_shapes() -> None:
    rng = np.random.default_rng(7)
    for trial in range(6):
        shape = (int(rng.integers(1, 3)), int(rng.integers(1, 9)), *(int(d) for d in rng.integers(1, 6, 2)))
        size = int(rng.choice([1, 3, 5, 7]))  # onnxruntime runs odd windows only
        beta = float(rng.choice([0.5, 0.75, 1.0, 0.3]))
        x = rng.standard_normal(shape).astype(np.float32)
        outs = []
        for form in (0, 1, 2):
            g = Graph((TensorInfo("x", shape),), {},
                      (make_node("lrn", {"size": size, "alpha": 0.3, "beta": beta, "bias": 1.2, "form": form},
                                 ["x"], "y"),), ("y",)).validate()
            outs.append(run_onnxruntime(to_onnx(g), {"x": x})[0])
            np.testing.assert_allclose(outs[-1], g.evaluate({"x": x})[0], rtol=1e-4, atol=1e-5,
                                       err_msg=f"trial {trial}: form {form}, size {size}, beta {beta}, {shape}")
        assert outs[0].shape == shape


@pytest.mark.parametrize("form", [0, 1, 2])
def test_measured_costs_time_what_export_writes(form: int) -> None:
    from eqsat.costs.measured_cpu import one_node_model

    spec, shape = ops.get("lrn"), (1, 6, 4, 4)
    p = spec.normalize({"size": 5, "alpha": 0.1, "form": form})
    model = one_node_model(spec.cost_key(p, [shape], shape), replicas=2)
    types = {n.op_type for n in model.graph.node}
    assert ("LRN" in types) == (form == 0)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    for out in run_onnxruntime(model, {"in0": x}):
        np.testing.assert_allclose(out, spec.evaluate(p, [x]), rtol=1e-4, atol=1e-5)
