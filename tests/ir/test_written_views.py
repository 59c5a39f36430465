"""The views as export writes them (``eqsat.ir.passes.written_views``): a projection the import read on flattened
rows is written on the activations themselves, a view of a view reads the first one's input, a view that changes
nothing is dropped; each graph computes what it did, and onnxruntime runs what export writes with 2-D weights."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from eqsat.ir.graph import Graph, TensorInfo, make_node
from eqsat.ir.passes import written_views
from eqsat.onnx_io import run_onnxruntime, to_onnx

B, S, K, N = 2, 5, 16, 12


def _graph(nodes: list[tuple[str, dict, list[str], str]], outputs: tuple[str, ...],
           inputs: tuple[tuple[str, tuple[int, ...]], ...] = (("x", (B, S, K)),)) -> Graph:
    rng = np.random.default_rng(0)
    weights = {"w": rng.standard_normal((K, N)).astype(np.float32),
               "w2": rng.standard_normal((K, 2 * N)).astype(np.float32),
               "c": rng.standard_normal((B * S, N)).astype(np.float32)}
    return Graph(tuple(TensorInfo(n, s) for n, s in inputs), weights,
                 tuple(make_node(op, p, ins, out) for op, p, ins, out in nodes), outputs)


ROWS = ("reshape", {"shape": (B * S, K)}, ["x"], "rows")


def _same(before: Graph, after: Graph) -> None:
    x = {i.name: np.random.default_rng(1).standard_normal(i.shape).astype(np.float32) for i in before.inputs}
    for a, b in zip(before.evaluate(x), after.evaluate(x), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    for a, b in zip(before.evaluate(x), run_onnxruntime(to_onnx(after), x), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_a_projection_of_flattened_rows_is_written_on_the_activations_with_its_2d_weight() -> None:
    g = _graph([ROWS, ("matmul", {}, ["rows", "w"], "p"), ("reshape", {"shape": (B, S, N)}, ["p"], "y")], ("y",))
    out = written_views(g)
    assert Counter(n.op for n in out.nodes) == {"matmul": 1, "reshape": 1}  # the weight's view, precomputed
    assert out.producers["y"].op == "matmul" and out.producers["y"].inputs[0] == "x"  # it writes the output
    _same(g, out)
    model = to_onnx(g)
    assert [n.op_type for n in model.graph.node] == ["MatMul"]
    assert [list(t.dims) for t in model.graph.initializer] == [[K, N]]  # onnxruntime pre-packs a matrix


def test_projections_merged_into_one_product_are_cut_along_the_last_axis() -> None:
    g = _graph([ROWS, ("matmul", {}, ["rows", "w2"], "p"),
                ("split", {"axis": 1, "start": 0, "size": N}, ["p"], "a"),
                ("split", {"axis": 1, "start": N, "size": N}, ["p"], "b"),
                ("reshape", {"shape": (B, S, N)}, ["a"], "ya"),
                ("reshape", {"shape": (B, S, 3, N // 3)}, ["b"], "yb")], ("ya", "yb"))
    out = written_views(g)
    pieces = [n for n in out.nodes if n.op == "split"]
    assert len(pieces) == 2 and all(n.p["axis"] == 2 for n in pieces)
    assert sum(n.op == "reshape" for n in out.nodes) == 2  # the weight's view and the heads' (B, S, 3, N/3)
    _same(g, out)
    assert Counter(n.op_type for n in to_onnx(g).graph.node) == {"MatMul": 1, "Split": 1, "Reshape": 1}


def test_a_transposed_weight_read_through_the_flag_is_written_as_the_weight() -> None:
    g = _graph([ROWS, ("transpose", {"perm": (1, 0)}, ["w"], "wt"),
                ("matmul_t", {"trans_a": 0, "trans_b": 1}, ["rows", "wt"], "p"),
                ("reshape", {"shape": (B, S, N)}, ["p"], "y")], ("y",))
    out = written_views(g)
    assert {n.op for n in out.nodes} == {"matmul", "reshape"}
    _same(g, out)


@pytest.mark.parametrize("reader", ["ewadd", "output"])
def test_a_product_read_as_rows_stays_on_the_rows(reader: str) -> None:
    """A product some reader needs as rows (an element-wise add of a (B*S, N) tensor, a graph output) keeps them."""
    nodes = [ROWS, ("matmul", {}, ["rows", "w"], "p"), ("reshape", {"shape": (B, S, N)}, ["p"], "y")]
    if reader == "ewadd":
        nodes.append(("ewadd", {}, ["p", "c"], "z"))
    g = _graph(nodes, ("y", "z") if reader == "ewadd" else ("y", "p"))
    out = written_views(g)
    assert out.producers["p"].inputs[0] == "rows"
    _same(g, out)


def test_views_of_views_read_the_first_input_and_a_view_that_changes_nothing_goes() -> None:
    g = _graph([("reshape", {"shape": (B * S, K)}, ["x"], "a"), ("reshape", {"shape": (B, S * K)}, ["a"], "b"),
                ("reshape", {"shape": (B, S, K)}, ["b"], "c"), ("relu", {}, ["c"], "y"),
                ("reshape", {"shape": (B, S * K)}, ["y"], "z")], ("y", "z", "b"))
    out = written_views(g)
    assert out.producers["y"].inputs == ("x",)  # (B, S, K) from (B, S, K): no view at all
    assert out.producers["b"].inputs == ("x",)  # a graph output stays, read from x
    assert "a" not in out.producers and "c" not in out.producers
    _same(g, out)


def test_a_graph_with_nothing_to_write_otherwise_is_the_same_object() -> None:
    g = _graph([("relu", {}, ["x"], "y")], ("y",))
    assert written_views(g) is g
