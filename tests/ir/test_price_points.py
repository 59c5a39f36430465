"""The sizes a model with dynamic axes is priced at when the user gives none: a decode step and a prefill for a
decoder step with a KV cache (each node the sum of its costs at both), a typical length for any other sequence,
batch 1; sizes the user gives win, and the check still runs at the representative sizes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import eqsat
from eqsat import onnx_io
from eqsat.costs import AnalyticCostModel, graph_cost, graph_cost_keys
from eqsat.ir.graph import Graph
from eqsat.ir.price_points import TYPICAL_LENGTH, default_price_points
from eqsat.ir.symbols import POINTS_KEY, price_points, representative
from eqsat.testing.kv_decoder import kv_decoder_step


def _encoder(seq: str = "sequence") -> object:
    """A dynamic (batch, sequence) projection, as an encoder's first layer."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32), "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    g = helper.make_graph(nodes, "enc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", seq, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", seq, 16])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _with_point(graph: Graph, point: tuple[str, dict[str, int]]) -> Graph:
    return Graph(graph.inputs, graph.weights, graph.nodes, graph.outputs, graph.name,
                 {**graph.meta, POINTS_KEY: [point]})


def test_a_kv_step_is_priced_at_a_decode_step_and_a_prefill_and_costs_their_sum() -> None:
    graph, reason = onnx_io.load_with_axes(kv_decoder_step(), label="kv")
    assert not reason
    points = dict(price_points(graph))
    assert points == {"decode step": {"batch": 1, "sequence": 1, "past_sequence": TYPICAL_LENGTH},
                      "prefill": {"batch": 1, "sequence": TYPICAL_LENGTH, "past_sequence": 1}}
    # the check and the timings stay at the representative sizes, which every model runs at
    assert representative(graph) == {"batch": 1, "sequence": 1, "past_sequence": 1}
    model = AnalyticCostModel()
    decode, prefill = (graph_cost(_with_point(graph, p), model) for p in price_points(graph))
    assert graph_cost(graph, model) == pytest.approx(decode + prefill)
    assert prefill > decode  # 128 new tokens against one
    # each node's keys: its keys at the decode step, then at the prefill
    node_keys = [ks for ks in graph_cost_keys(graph) if ks]
    assert all(len(ks) % 2 == 0 for ks in node_keys)
    assert any(ks[: len(ks) // 2] != ks[len(ks) // 2:] for ks in node_keys)


def test_a_sequence_without_a_cache_is_priced_at_a_typical_length_and_a_batch_at_1() -> None:
    graph, _ = onnx_io.load_with_axes(_encoder(), label="enc")
    assert price_points(graph) == [("typical", {"batch": 1, "sequence": TYPICAL_LENGTH})]
    # a symbol not named a batch is one where it is only ever the first axis
    graph, _ = onnx_io.load_with_axes(_encoder("s"), label="enc")
    assert dict(price_points(graph))["typical"] == {"batch": 1, "s": TYPICAL_LENGTH}


def test_sizes_the_user_gives_win_and_all_of_them_make_one_point() -> None:
    graph, _ = onnx_io.load_with_axes(kv_decoder_step(), label="kv", dims={"past_sequence": 512})
    # a length the user chose makes one point, the other length typical
    assert price_points(graph) == [("typical", {"batch": 1, "sequence": TYPICAL_LENGTH, "past_sequence": 512})]
    graph, _ = onnx_io.load_with_axes(kv_decoder_step(), label="kv",
                                      dims={"batch": 2, "sequence": 1, "past_sequence": 64})
    assert POINTS_KEY not in graph.meta
    assert price_points(graph) == [("", {"batch": 2, "sequence": 1, "past_sequence": 64})]
    assert default_price_points(graph, {"batch": 2, "sequence": 1, "past_sequence": 64})[0][0] == ""


def test_the_report_names_each_point_with_its_costs_and_the_model_is_checked_at_small_sizes() -> None:
    res = eqsat.optimize(kv_decoder_step(), time_limit=20, cache=False)
    assert [p.label for p in res.price_points] == ["decode step", "prefill"]
    assert sum(p.cost_before for p in res.price_points) == pytest.approx(res.cost_before)
    assert sum(p.cost_after for p in res.price_points) == pytest.approx(res.cost_after)
    text = res.summary()
    assert "priced at decode step (batch=1, sequence=1, past_sequence=128)" in text
    assert "prefill (batch=1, sequence=128, past_sequence=1)" in text
    assert res.to_dict()["dynamic_axes"]["price_points"][1]["sizes"]["sequence"] == TYPICAL_LENGTH
    assert res.numeric is not None and res.numeric.ok
    assert {"batch": 1, "sequence": 1, "past_sequence": 1} in res.numeric.sizes
    # a model priced where the user said: no points in the report
    assert eqsat.optimize(_encoder(), time_limit=10, cache=False, dims={"batch": 1, "sequence": 4}).price_points == []


def test_a_point_equal_to_the_checked_sizes_is_not_named_apart() -> None:
    # a batch alone is priced at 1, where it is checked: the report names no price point
    w = numpy_helper.from_array(np.ones((16, 16), np.float32), "W")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "b",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])], [w])
    graph, _ = onnx_io.load_with_axes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), label="b")
    assert POINTS_KEY not in graph.meta and price_points(graph) == [("", {"batch": 1})]
