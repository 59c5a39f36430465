"""Control flow: If, Loop and Scan are kept as opaque nodes that read the tensors their subgraphs use from around
them; the graph around them is optimized, and the subgraphs are made to read those tensors under the names they
are written as."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.errors import DynamicShapeError
from eqsat.onnx_io import load_model, opaque_node
from eqsat.onnx_io.protos import outer_names, rename_outer
from eqsat.pipeline import optimize


def if_model(d: int = 16) -> onnx.ModelProto:
    """x -> h = x @ w1; If(sum(x) > 0): relu(h) @ w_in (a weight read from around the If) else -h; then two
    products of the If's output (merged by the optimizer) and their relus."""
    rng = np.random.default_rng(0)

    def W(n: str) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32), n)

    then_g = helper.make_graph([helper.make_node("Relu", ["h"], ["t_out"]),
                                helper.make_node("MatMul", ["t_out", "w_in"], ["t2"])], "then", [],
                               [helper.make_tensor_value_info("t2", TensorProto.FLOAT, [1, d])])
    else_g = helper.make_graph([helper.make_node("Neg", ["h"], ["e_out"])], "else", [],
                               [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, [1, d])])
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["b"], then_branch=then_g, else_branch=else_g),
             helper.make_node("MatMul", ["b", "w2"], ["m2"]), helper.make_node("MatMul", ["b", "w3"], ["m3"]),
             helper.make_node("Relu", ["m2"], ["y1"]), helper.make_node("Relu", ["m3"], ["y2"])]
    g = helper.make_graph(nodes, "ifm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, d])],
                          [helper.make_tensor_value_info("y1", TensorProto.FLOAT, [1, d]),
                           helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, d])],
                          [W("w1"), W("w2"), W("w3"), W("w_in"),
                           numpy_helper.from_array(np.array(0, np.float32), "zero")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m

def loop_model(d: int = 16) -> onnx.ModelProto:
    """h = x @ w1, then n times (n a graph input) v = tanh(v @ w_loop) from v = h (w_loop read from around the
    Loop), then two products of v and their relus."""
    rng = np.random.default_rng(1)

    def W(n: str) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32), n)

    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("MatMul", ["v_in", "w_loop"], ["mv"]),
         helper.make_node("Tanh", ["mv"], ["v_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [1, d])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [1, d])])
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Loop", ["n", "true", "h"], ["v"], body=body),
             helper.make_node("MatMul", ["v", "w2"], ["m2"]), helper.make_node("MatMul", ["v", "w3"], ["m3"]),
             helper.make_node("Relu", ["m2"], ["y1"]), helper.make_node("Relu", ["m3"], ["y2"])]
    g = helper.make_graph(nodes, "loopm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, d]),
                                           helper.make_tensor_value_info("n", TensorProto.INT64, [])],
                          [helper.make_tensor_value_info("y1", TensorProto.FLOAT, [1, d]),
                           helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, d])],
                          [W("w1"), W("w2"), W("w3"), W("w_loop"), numpy_helper.from_array(np.array(True), "true")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m



def if_body_model(d: int = 64) -> onnx.ModelProto:
    """x -> h = x @ w1; If(sum(x) > 0): relu(h @ wa) + relu(h @ wb) (its own weights: the two products merge)
    else -h."""
    rng = np.random.default_rng(3)

    def W(n: str) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32), n)

    then_g = helper.make_graph(
        [helper.make_node("MatMul", ["h", "wa"], ["p"]), helper.make_node("MatMul", ["h", "wb"], ["q"]),
         helper.make_node("Relu", ["p"], ["rp"]), helper.make_node("Relu", ["q"], ["rq"]),
         helper.make_node("Add", ["rp", "rq"], ["t"])], "then", [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, d])], [W("wa"), W("wb")])
    else_g = helper.make_graph([helper.make_node("Neg", ["h"], ["e_out"])], "else", [],
                               [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, [1, d])])
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g, name="choose")]
    g = helper.make_graph(nodes, "ifb", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, d])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, d])],
                          [W("w1"), numpy_helper.from_array(np.array(0, np.float32), "zero")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def _same_outputs(a: onnx.ModelProto, b: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    got = ort.InferenceSession(b.SerializeToString()).run(None, feeds)
    for want, have in zip(ort.InferenceSession(a.SerializeToString()).run(None, feeds), got, strict=True):
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-5)


def test_if_is_kept_and_the_graph_around_it_optimized() -> None:
    model = if_model()
    graph = load_model(model)
    (node,) = [n for n in graph.nodes if n.op == "opaque" and n.p["op_type"] == "If"]
    # the If reads its condition, and from around it h (a product) and w_in (a weight)
    assert node.inputs == ("cond", "h", "w_in") and node.p["outer"] == ("h", "w_in")
    res = optimize(model, time_limit=20)
    assert not res.kept_original and res.numeric is not None and res.numeric.ok
    ops = [n.op_type for n in res.model.graph.node]
    assert ops.count("If") == 1 and "Split" in ops  # the two products of the If's output are merged
    onnx.checker.check_model(res.model, full_check=True)
    x = np.random.default_rng(1).standard_normal((1, 16)).astype(np.float32)
    for sign in (1, -1):  # the then branch, then the else branch
        _same_outputs(model, res.model, {"x": sign * x})


def test_loop_is_kept_and_equal_at_several_trip_counts() -> None:
    model = loop_model()
    res = optimize(model, time_limit=20)
    assert not res.kept_original and [n.op_type for n in res.model.graph.node].count("Loop") == 1
    x = np.random.default_rng(2).standard_normal((1, 16)).astype(np.float32)
    for trips in (0, 1, 3, 7):  # one optimized model, run for each
        _same_outputs(model, res.model, {"x": x, "n": np.array(trips, np.int64)})


def test_a_loop_that_changes_a_carried_shape_is_refused_clearly() -> None:
    model = loop_model()
    body = next(a.g for a in model.graph.node[1].attribute if a.name == "body")
    del body.output[1].type.tensor_type.shape.dim[:]  # the body no longer says the carried value keeps its shape
    with pytest.raises(DynamicShapeError, match="no static shape for 'v'"):
        load_model(model)


def test_outer_reads_are_found_and_renamed_below_shadowing() -> None:
    inner = helper.make_graph([helper.make_node("Add", ["a", "b"], ["c"])], "inner", [],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, [1])])
    then_g = helper.make_graph([helper.make_node("Identity", ["x"], ["b"]),  # b defined here: shadows the outer b
                                helper.make_node("If", ["flag"], ["t"], then_branch=inner, else_branch=inner)],
                               "then", [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1])])
    else_g = helper.make_graph([], "else", [], [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1])])
    node = helper.make_node("If", ["cond"], ["out"], then_branch=then_g, else_branch=else_g)
    # read from around: x, flag and a (inside the nested If), b (the else branch passes it through)
    assert sorted(outer_names(node)) == ["a", "b", "flag", "x"] and outer_names(node) == outer_names(node)
    rename_outer(node.attribute, {"a": "A", "b": "B", "x": "X"})
    by_name = {a.name: a.g for a in node.attribute}
    then_after, else_after = by_name["then_branch"], by_name["else_branch"]
    assert list(then_after.node[0].input) == ["X"]
    assert all(list(a.g.node[0].input) == ["A", "b"] for a in then_after.node[1].attribute)  # b is then's own
    assert else_after.output[0].name == "B"
    assert sorted(outer_names(node)) == ["A", "B", "X", "flag"]


def test_export_makes_the_subgraph_read_a_renamed_outer_tensor() -> None:
    body = helper.make_graph([helper.make_node("Neg", ["h"], ["o"])], "b", [],
                             [helper.make_tensor_value_info("o", TensorProto.FLOAT, [1])])
    p = {"op_type": "If", "domain": "", "slots": "", "outer": ("h",),
         "attrs": tuple(a.SerializeToString() for a in helper.make_node("If", ["c"], ["o"], then_branch=body,
                                                                           else_branch=body).attribute)}
    node = opaque_node(p, ["cond_written", "h_written"], ["out"])
    assert list(node.input) == ["cond_written"]
    assert all(list(a.g.node[0].input) == ["h_written"] for a in node.attribute)


def test_a_body_is_optimized_as_a_graph_of_its_own() -> None:
    model = if_body_model()
    res = optimize(model, time_limit=30)
    assert len(res.bodies) == 1 and res.bodies[0].startswith("If 'choose' then_branch")
    assert not res.kept_original and "control-flow bodies optimized: 1" in res.decision
    assert "control-flow bodies" in res.summary() and res.numeric is not None and res.numeric.ok
    onnx.checker.check_model(res.model, full_check=True)
    (node,) = [n for n in res.model.graph.node if n.op_type == "If"]
    then_ops = [n.op_type for n in next(a.g for a in node.attribute if a.name == "then_branch").node]
    assert "Split" in then_ops and then_ops.count("Gemm") + then_ops.count("MatMul") == 1  # the products merged
    x = np.random.default_rng(4).standard_normal((1, 64)).astype(np.float32)
    for sign in (1, -1):
        _same_outputs(model, res.model, {"x": sign * x})


def test_a_body_that_fails_to_optimize_is_kept_and_the_run_goes_on(monkeypatch: pytest.MonkeyPatch,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    from eqsat.pipeline import run

    real = run.optimize

    def failing(model, **kw):
        if model.graph.name == "then":  # the body's standalone model
            raise RuntimeError("boom")
        return real(model, **kw)

    monkeypatch.setattr(run, "optimize", failing)
    model = if_body_model()
    res = real(model, time_limit=20)
    assert res.bodies == [] and res.numeric is not None and res.numeric.ok
    assert any("optimizing it failed (RuntimeError: boom)" in r.getMessage() for r in caplog.records)


def test_bodies_are_kept_when_the_run_times_models_end_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    from eqsat.pipeline import candidates

    # the end-to-end check could not time a body's rewrite apart from the main graph's: bodies stay as given
    monkeypatch.setattr(candidates, "latencies", lambda models, *_: [[1.0, 1.0, 1.0]] * len(models))
    res = optimize(if_body_model(), time_limit=20, verify_latency=True)
    assert res.bodies == [] and res.kept_original
