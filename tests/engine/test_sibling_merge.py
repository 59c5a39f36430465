"""n-way merges of siblings that share an input (the registry's ``sibling_merge``), seeded into the e-graph."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

import eqsat
from eqsat import onnx_io
from eqsat.engine.limits import Limits
from eqsat.engine.saturation import saturate
from eqsat.ir.graph import Graph, TensorInfo, make_node
from eqsat.ir.passes import sibling_groups
from eqsat.testing.onnx_builders import make_model


def _weights(rng: np.random.Generator, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}


def _matmul_siblings(n: int, k: int = 8) -> Graph:
    rng = np.random.default_rng(0)
    w = _weights(rng, {f"w{i}": (k, 4 + i) for i in range(n)})
    nodes = [make_node("matmul", {}, ["x", f"w{i}"], f"m{i}") for i in range(n)]
    nodes += [make_node("relu", {}, [f"m{i}"], f"y{i}") for i in range(n)]
    return Graph((TensorInfo("x", (2, k)),), w, tuple(nodes), tuple(f"y{i}" for i in range(n))).validate()


def test_groups_need_three_siblings_with_a_shared_input() -> None:
    groups = sibling_groups(_matmul_siblings(3))
    assert len(groups) == 1
    members, (axes, split_axis) = groups[0]
    assert [m.output for m in members] == ["m0", "m1", "m2"] and axes == (1,) and split_axis == 1
    assert sibling_groups(_matmul_siblings(2)) == []  # pairs are the two-output rules' job


def test_convs_merge_only_with_equal_parameters_and_kernels() -> None:
    rng = np.random.default_rng(0)
    shapes = {"x": (1, 4, 8, 8)}
    w = _weights(rng, {"k1": (3, 4, 3, 3), "k2": (5, 4, 3, 3), "k3": (2, 4, 3, 3), "k4": (2, 4, 1, 1),
                       "b1": (3,), "b2": (5,), "b3": (2,), "b4": (2,)})
    same = {"pads": (1, 1, 1, 1)}
    nodes = [make_node("conv2d", same, ["x", "k1", "b1"], "c1"), make_node("conv2d", same, ["x", "k2", "b2"], "c2"),
             make_node("conv2d", same, ["x", "k3", "b3"], "c3"), make_node("conv2d", {}, ["x", "k4", "b4"], "c4")]
    g = Graph((TensorInfo("x", shapes["x"]),), w, tuple(nodes), ("c1", "c2", "c3", "c4")).validate()
    groups = sibling_groups(g)
    assert [[m.output for m in ms] for ms, _ in groups] == [["c1", "c2", "c3"]]  # c4: another kernel size
    assert groups[0][1] == ((0, 0), 1)


def _model(n: int, hidden: int = 16) -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((hidden, hidden)).astype(np.float32) / 4, f"w{i}")
             for i in range(n)]
    nodes = [helper.make_node("MatMul", ["x", f"w{i}"], [f"m{i}"]) for i in range(n)]
    nodes += [helper.make_node("Tanh", [f"m{i}"], [f"y{i}"]) for i in range(n)]
    return make_model(nodes, [("x", [4, hidden])], [(f"y{i}", [4, hidden]) for i in range(n)], inits, name="siblings")


def test_five_siblings_become_one_matmul_and_stay_equal() -> None:
    model = _model(5)
    res = eqsat.optimize(model, time_limit=30)  # numerically checked against the original
    assert res.numeric is not None and res.numeric.ok
    products = [n for n in res.graph.nodes if n.op in ("matmul", "matmul_t")]  # either layout
    assert len(products) == 1, res.graph.op_histogram()
    assert res.cost_after < res.cost_before
    merged = products[0]
    assert res.graph.shapes[merged.output] == (4, 5 * 16)


def test_the_merge_is_an_alternative_not_a_replacement() -> None:
    """The e-graph keeps each original product next to its slice of the merged one."""
    g = onnx_io.load_model(_model(3))
    sat = saturate(g, [], Limits(iter_limit=0))
    classes: dict[str, set[str]] = {}
    for node in sat.egraph.nodes:
        classes.setdefault(node.eclass, set()).add(node.op)
    assert sum(1 for ops in classes.values() if {"matmul", "split"} <= ops) == 3
