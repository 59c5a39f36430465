"""Large models without their weights copied more than needed: the numeric check's onnxruntime sessions read the
weights from memory, export stores each distinct weight once and writes it in place, and a large model with
dynamic axes gets its run-time sizes before its weights go in."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import eqsat.onnx_io.export as export_module
from eqsat.models.hf_bert import hf_bert
from eqsat.onnx_io import load_model, onnxruntime_runner, to_onnx
from eqsat.onnx_io.export import _Exporter


def _two_layers() -> onnx.ModelProto:
    """x @ W0 (a 16 KB weight, read from memory), reshaped by a small constant (kept in the model), @ W1."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "W0"),
             numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "W1"),
             numpy_helper.from_array(np.array([-1, 64], dtype=np.int64), "rows")]
    nodes = [helper.make_node("MatMul", ["x", "W0"], ["h"]), helper.make_node("Reshape", ["h", "rows"], ["r"]),
             helper.make_node("MatMul", ["r", "W1"], ["y"])]
    g = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 32])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_the_runner_reads_weights_from_memory_and_leaves_the_model_as_it_was() -> None:
    model = _two_layers()
    before = model.SerializeToString()
    x = np.random.default_rng(1).standard_normal((3, 64)).astype(np.float32)
    got = onnxruntime_runner(model, ["h", "y", "h"])({"x": x, "unused": x})
    assert list(got) == ["y", "h"]  # the graph's outputs, then each other tensor asked for, once
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(before, so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got["y"], want)
    np.testing.assert_allclose(got["h"], x @ numpy_helper.to_array(model.graph.initializer[0]), rtol=1e-5,
                               atol=1e-5)
    assert model.SerializeToString() == before


def test_the_runner_says_why_a_model_does_not_run() -> None:
    model = _two_layers()
    model.graph.initializer[1].dims[:] = [32, 64]  # W1 no longer fits h's 64 columns
    with pytest.raises(Exception, match="MatMul|dimension|shape"):
        onnxruntime_runner(model)({"x": np.zeros((2, 64), np.float32)})


def test_export_stores_equal_weights_once_and_different_ones_apart() -> None:
    ex = _Exporter(17, ())
    a = np.random.default_rng(0).standard_normal((300, 500)).astype(np.float32)
    first = ex.add_named_initializer("a", a)
    assert ex.add_named_initializer("a_again", a.copy()) == first == "a"
    b = a.copy()
    b[0, 1] += 1.0  # off the elements the content key samples: the arrays are told apart by comparing them
    assert ex.add_initializer(b, "b") != first
    assert ex.add_initializer(a.astype(np.float64), "c") not in (first, "b")  # same values, another dtype
    assert ex.rename_initializer("a", "a_value") == "a_value"
    assert ex.add_initializer(a.copy(), "d") == "a_value" and "a" not in ex.initializers


def test_a_large_dynamic_model_gets_its_sizes_before_its_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = load_model(hf_bert(transformers="4", dynamic=True, seq=16, hidden=64, heads=4, vocab=100),
                       symbolic=True)
    small = to_onnx(graph)
    monkeypatch.setattr(export_module, "CHECK_WEIGHTS_BYTES", 0)  # every model counts as large
    large = to_onnx(graph)
    names = [t.name for t in large.graph.initializer]
    assert len(names) == len(set(names)) and sorted(names) == sorted(t.name for t in small.graph.initializer)
    assert [n.op_type for n in large.graph.node] == [n.op_type for n in small.graph.node]
    onnx.checker.check_model(large, full_check=True)
    rng = np.random.default_rng(2)
    feeds = {"input_ids": rng.integers(0, 100, (2, 11)), "attention_mask": np.ones((2, 11), dtype=np.int64)}
    for got, want in zip(onnxruntime_runner(large)(feeds).values(), onnxruntime_runner(small)(feeds).values(),
                         strict=True):
        np.testing.assert_array_equal(got, want)


def test_the_runner_takes_every_kind_of_weight_as_a_plain_session_does() -> None:
    """float16, boolean and int64 weights; one an If body reads from the main graph, one a Loop body reads that is
    also a graph output; one that is also a graph input, which a feed overrides."""
    rng = np.random.default_rng(0)
    weights = {"W": rng.standard_normal((64, 64)).astype(np.float32),
               "H": rng.standard_normal((64, 64)).astype(np.float16),
               "B": rng.integers(0, 2, (64, 64)).astype(bool), "T": rng.integers(0, 100, (1000, 8)),
               "L": rng.standard_normal((64, 64)).astype(np.float32) * 0.1, "two": np.array(2, dtype=np.int64)}
    body = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Cast", ["H"], ["hf"], to=TensorProto.FLOAT),
             helper.make_node("Where", ["B", "hf", "x"], ["w"]),
             helper.make_node("If", ["c"], ["i"], then_branch=body, else_branch=other),
             helper.make_node("Add", ["w", "i"], ["y"]), helper.make_node("Gather", ["T", "idx"], ["g"]),
             helper.make_node("Loop", ["two", "", "x"], ["lp"], body=helper.make_graph(
                 [helper.make_node("Identity", ["cond"], ["cond_out"]),
                  helper.make_node("MatMul", ["v", "L"], ["v_out"])],
                 "loop", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                          helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                          helper.make_tensor_value_info("v", TensorProto.FLOAT, None)],
                 [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
                  helper.make_tensor_value_info("v_out", TensorProto.FLOAT, None)]))]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64]),
              helper.make_tensor_value_info("c", TensorProto.BOOL, []),
              helper.make_tensor_value_info("idx", TensorProto.INT64, [3]),
              helper.make_tensor_value_info("W", TensorProto.FLOAT, [64, 64])]  # overridable
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64]),
               helper.make_tensor_value_info("g", TensorProto.INT64, [3, 8]),
               helper.make_tensor_value_info("lp", TensorProto.FLOAT, [64, 64]),
               helper.make_tensor_value_info("L", TensorProto.FLOAT, [64, 64])]
    g = helper.make_graph(nodes, "kinds", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in weights.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    plain = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    run = onnxruntime_runner(model)
    x = rng.standard_normal((64, 64)).astype(np.float32)
    for feeds in ({"x": x, "c": np.array(True), "idx": np.array([1, 5, 999])},
                  {"x": x, "c": np.array(True), "idx": np.array([0, 0, 2]), "W": np.eye(64, dtype=np.float32)}):
        for got, want in zip(run(feeds).values(), plain.run(None, feeds), strict=True):
            np.testing.assert_array_equal(got, want)


def test_a_product_with_a_transposed_weight_is_written_with_the_weight_as_it_was() -> None:
    from eqsat.ir.graph import Graph, TensorInfo, make_node

    rng = np.random.default_rng(3)
    w = rng.standard_normal((16, 24)).astype(np.float32)
    nodes = (make_node("transpose", {"perm": (1, 0)}, ["W"], "WT"),
             make_node("matmul_t", {"trans_a": 0, "trans_b": 1}, ["x", "WT"], "y"))
    graph = Graph((TensorInfo("x", (5, 16)),), {"W": w}, nodes, ("y",))
    model = to_onnx(graph)
    (gemm,) = model.graph.node
    assert gemm.op_type == "Gemm" and list(gemm.input) == ["x", "W"]
    assert {a.name: a.i for a in gemm.attribute} == {"transA": 0, "transB": 0}
    assert [t.name for t in model.graph.initializer] == ["W"]  # no transposed copy beside it
    x = rng.standard_normal((5, 16)).astype(np.float32)
    np.testing.assert_allclose(onnxruntime_runner(model)({"x": x})["y"], x @ w, rtol=1e-5, atol=1e-5)


def test_a_2d_matmul_with_a_transposed_weight_is_written_as_a_gemm_on_the_weight() -> None:
    from eqsat.ir.graph import Graph, TensorInfo, make_node

    rng = np.random.default_rng(4)
    w = rng.standard_normal((24, 16)).astype(np.float32)
    nodes = (make_node("transpose", {"perm": (1, 0)}, ["W"], "WT"), make_node("matmul", {}, ["x", "WT"], "y"))
    model = to_onnx(Graph((TensorInfo("x", (5, 16)),), {"W": w}, nodes, ("y",)))
    (gemm,) = model.graph.node
    assert gemm.op_type == "Gemm" and list(gemm.input) == ["x", "W"]
    assert {a.name: a.i for a in gemm.attribute} == {"transA": 0, "transB": 1}
    x = rng.standard_normal((5, 16)).astype(np.float32)
    np.testing.assert_allclose(onnxruntime_runner(model)({"x": x})["y"], x @ w.T, rtol=1e-5, atol=1e-5)
    # before opset 11 a flag is written as a Transpose node: the weight's transpose is precomputed instead
    old = to_onnx(Graph((TensorInfo("x", (5, 16)),), {"W": w}, nodes, ("y",)), opset=10)
    assert [n.op_type for n in old.graph.node] == ["MatMul"] and old.graph.node[0].input[1] != "W"


def test_weights_equal_as_numbers_but_not_as_bytes_are_stored_apart() -> None:
    ex = _Exporter(17, ())
    zeros = np.zeros((64, 64), np.float32)
    signed = zeros.copy()
    signed[0, 1] = -0.0  # off the sampled elements: the content keys agree, the arrays compare equal as numbers
    nans = np.full((64, 64), np.nan, np.float32)
    assert ex.add_initializer(zeros, "z") != ex.add_initializer(signed, "nz")  # 1 / w tells them apart
    assert ex.add_initializer(nans, "n") == ex.add_initializer(nans.copy(), "n2")  # the same bytes
    assert ex.add_initializer(np.array(2.0, np.float32), "s") == ex.add_initializer(np.array(2.0, np.float32), "t")


def test_graphs_written_alike_hash_alike() -> None:
    """The candidates' distinctness test: a product read through Gemm's flags, a flagless Gemm and a MatMul of
    the same operands are one computation as written; a product with the other operand transposed is not."""
    from eqsat.ir.graph import Graph, TensorInfo, graph_hash, make_node
    from eqsat.onnx_io.export import as_written

    w = np.random.default_rng(5).standard_normal((8, 8)).astype(np.float32)

    def graph(*nodes) -> Graph:
        return Graph((TensorInfo("x", (4, 8)),), {"W": w}, nodes, ("y",))

    plain = graph(make_node("matmul", {}, ["x", "W"], "y"))
    flagless = graph(make_node("matmul_t", {"trans_a": 0, "trans_b": 0}, ["x", "W"], "y"))
    flipped = graph(make_node("transpose", {"perm": (1, 0)}, ["W"], "WT"),
                    make_node("matmul_t", {"trans_a": 0, "trans_b": 1}, ["x", "WT"], "y"))
    other = graph(make_node("matmul_t", {"trans_a": 0, "trans_b": 1}, ["x", "W"], "y"))
    hashes = {graph_hash(as_written(g)) for g in (plain, flagless, flipped)}
    assert len(hashes) == 1 and graph_hash(as_written(other)) not in hashes
