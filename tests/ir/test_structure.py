"""A graph's structure (eqsat.ir.structure): keys equal for other names and weights, different for anything else;
a graph written over another's places and read back over a third's of the same structure."""

from __future__ import annotations

import math

import numpy as np
import pytest

from eqsat.ir.graph import Graph, TensorInfo, make_node
from eqsat.ir.structure import StructureError, decode, encode, places, structure_key


def _mlp(prefix: str = "", seed: int = 0, hidden: int = 8, eps: float = 1e-5, act: str = "relu") -> Graph:
    rng = np.random.default_rng(seed)
    w = {f"{prefix}w1": rng.standard_normal((4, hidden)).astype(np.float32),
         f"{prefix}w2": rng.standard_normal((hidden, 4)).astype(np.float32)}
    nodes = [make_node("matmul", {}, ["x", f"{prefix}w1"], f"{prefix}h"),
             make_node(act, {}, [f"{prefix}h"], f"{prefix}r"),
             make_node("matmul", {}, [f"{prefix}r", f"{prefix}w2"], "y"),
             make_node("clip", {"low": -eps, "high": 6.0}, ["y"], "z")]
    return Graph((TensorInfo("x", (2, 4)),), w, tuple(nodes), ("z",))


def test_the_key_is_the_same_for_other_names_and_weights_and_differs_for_anything_else() -> None:
    key = structure_key(_mlp())
    assert structure_key(_mlp(prefix="re_", seed=5)) == key
    assert structure_key(_mlp(hidden=16)) != key  # a shape
    assert structure_key(_mlp(eps=2e-5)) != key  # a parameter
    assert structure_key(_mlp(act="tanh")) != key  # an operator


def test_places_follow_the_inputs_the_weights_as_first_read_and_the_nodes() -> None:
    assert places(_mlp(prefix="p_")) == {"x": "i0", "p_w1": "w0", "p_w2": "w1", "p_h": "n0", "p_r": "n1",
                                         "y": "n2", "z": "n3"}


def test_a_graph_written_over_one_model_reads_back_over_another_of_the_same_structure() -> None:
    base, other = _mlp(), _mlp(prefix="re_", seed=5)
    # a rewrite of base: the relu computed on a new tensor, the old one gone, a float that must stay exact
    found = Graph(base.inputs, base.weights, (
        make_node("matmul", {}, ["x", "w1"], "h"), make_node("relu", {}, ["h"], "fresh"),
        make_node("matmul", {}, ["fresh", "w2"], "y"), make_node("clip", {"low": -1e-5, "high": 6.0}, ["y"], "z")),
        ("z",))
    data = encode(found, base)
    assert data["weights"] == ["w0", "w1"] and data["outputs"] == ["n3"]
    replayed = decode(data, other)
    assert [n.inputs for n in replayed.nodes][0] == ("x", "re_w1") and replayed.outputs == ("z",)
    assert replayed.nodes[1].output not in {"x", "re_w1", "re_w2", "re_h", "re_r", "y", "z"}  # a fresh name
    assert replayed.nodes[3].p["low"] == -1e-5 and replayed.weights["re_w2"] is other.weights["re_w2"]
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(replayed.evaluate({"x": x})[0], other.evaluate({"x": x})[0], rtol=1e-6)


def test_parameter_values_round_trip_exactly() -> None:
    base = _mlp()
    for low in (-1e-5, 0.1, -math.inf, -0.0):
        found = Graph(base.inputs, base.weights,
                      base.nodes[:3] + (make_node("clip", {"low": low, "high": 6.0}, ["y"], "z"),), ("z",))
        got = decode(encode(found, base), base).nodes[3].p["low"]
        assert got == low and math.copysign(1, got) == math.copysign(1, low)


def test_an_encoding_that_does_not_fit_is_refused() -> None:
    base = _mlp()
    data = encode(base, base)
    data["nodes"][0][2] = ["i0", "w7"]  # a weight the model has not
    with pytest.raises(StructureError, match="a place its base has not: w7"):
        decode(data, base)
    with pytest.raises(StructureError, match="does not fit"):
        decode({"weights": ["w0"], "nodes": [["matmul", {"t": []}, ["i0"], "n0"]], "outputs": ["n0"]}, base)
    extra = Graph(base.inputs, {**base.weights, "k": np.ones((1,), np.float32)}, base.nodes, base.outputs)
    with pytest.raises(StructureError, match="weights its base has not"):
        encode(extra, base)
