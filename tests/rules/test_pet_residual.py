"""PET over a convolution with its residual add (conv2d_add, the second convolution of a ResNet block): the
residual read at each output position, moved with the activation, sliced to each correction's box, and the
checks that refuse a residual read in the wrong place."""

from __future__ import annotations

import numpy as np
import pytest
from _onnx_checks import (
    assert_probe_decides_as_the_full_footprints,
    assert_rewrites_compute_their_tensors,
    assert_rewrites_run_as_the_original,
)

from eqsat.ir.graph import Graph, Node, TensorInfo, make_node
from eqsat.rules.pet import analyse, check_equal, correct, find_rewrites, generate_mutants
from eqsat.rules.pet.corrections import CorrectionError, corrected_graph
from eqsat.rules.pet.mutants import Mutant
from eqsat.rules.pet.program import chain_of, footprint, subprogram_of

WIDE = "batch_to_width(2) > conv2d_add > width_to_batch(2)"
WIDE2 = "batch_to_width(2) > conv2d+conv2d_add > width_to_batch(2)"


def residual_block(n: int = 2, c: int = 4, h: int = 8, w: int = 8, seed: int = 0) -> Graph:
    """x -> conv (with its ReLU) -> conv + x (with its ReLU) -> y: a ResNet basic block as eqsat imports it."""
    rng = np.random.default_rng(seed)
    ws = {f"w{i}": rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.3 for i in (1, 2)}
    ws |= {f"b{i}": rng.standard_normal(c).astype(np.float32) for i in (1, 2)}
    nodes = (make_node("conv2d", {"pads": (1,) * 4, "act": 1}, ["x", "w1", "b1"], "h"),
             make_node("conv2d_add", {"pads": (1,) * 4, "act": 1}, ["h", "w2", "b2", "x"], "y"))
    return Graph((TensorInfo("x", (n, c, h, w)),), ws, nodes, ("y",))


def _feeds(g: Graph, seed: int = 5) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in g.inputs}


def test_a_residual_add_is_a_window_that_reads_its_residual_at_the_output_position() -> None:
    g = residual_block()
    sub = subprogram_of(g, g.nodes[1])
    assert sub is not None and sub.activation == "h" and sub.residuals == ("x",)
    assert set(sub.graph.weights) == {"w2", "b2"}
    ids = footprint(sub.graph)
    assert ids.shape == (2, 4, 8, 8, 4 * 9 + 1)  # the window's taps, then the residual's
    # ids image by image over both inputs: image n of x starts after image n of h
    image = 2 * 4 * 8 * 8
    n, c, y, x = 1, 2, 3, 5
    assert ids[n, c, y, x, -1] == n * image + 4 * 8 * 8 + (c * 8 + y) * 8 + x + 1
    chain = chain_of(g, g.nodes[1])
    assert chain is not None and chain.activation == "x" and chain.residuals == ()  # x is both


@pytest.mark.parametrize("chained", [False, True])
def test_every_corrected_mutant_of_a_residual_block_equals_the_original(chained: bool) -> None:
    g = residual_block()
    sub = chain_of(g, g.nodes[1]) if chained else subprogram_of(g, g.nodes[1])
    corrected = set()
    for m in generate_mutants(sub):
        adds = [nd for nd in m.graph.nodes if nd.op == "conv2d_add"]
        assert len(adds) == 1 and m.graph.shapes[adds[0].inputs[3]] == m.graph.shapes[adds[0].output]
        try:
            fixed = correct(sub, m)
        except CorrectionError as e:
            assert "is wrong on" in str(e)  # refused for its size, never for failing the check
            continue
        corrected.add(m.name)
        feeds = _feeds(sub.graph)
        np.testing.assert_allclose(fixed.graph.evaluate(feeds)[0], sub.graph.evaluate(feeds)[0], rtol=1e-4,
                                   atol=1e-4, err_msg=m.name)
    assert (WIDE2 if chained else WIDE) in corrected


def _moved_wrongly(sub, m: Mutant) -> Graph:  # noqa: ANN001
    """``m`` with its residual folded into the height (then viewed as the width fold's shape) instead of the width."""
    add = next(nd for nd in m.graph.nodes if nd.op == "conv2d_add")
    n, c, h, w = sub.graph.shapes["x"]
    nodes = [make_node("reshape", {"shape": (n // 2, 2, c, h, w)}, ["x"], "r1"),
             make_node("transpose", {"perm": (0, 2, 1, 3, 4)}, ["r1"], "r2"),
             make_node("reshape", {"shape": (n // 2, c, h, 2 * w)}, ["r2"], "r3")]
    out = [Node(nd.op, nd.params, nd.inputs[:3] + ("r3",), nd.output) if nd is add else nd for nd in m.graph.nodes]
    return Graph(m.graph.inputs, m.graph.weights, tuple(nodes + out), m.graph.outputs)


def test_a_residual_read_in_another_layout_is_found_wrong() -> None:
    g = residual_block()
    sub = chain_of(g, g.nodes[1])
    m = {x.name: x for x in generate_mutants(sub)}[WIDE2]
    right = analyse(sub.graph, m.graph)
    assert 0 < right.wrong_fraction < 0.5  # the seam only
    wrong = _moved_wrongly(sub, m)
    assert analyse(sub.graph, wrong).wrong_fraction > right.wrong_fraction
    assert not check_equal(sub.graph, corrected_graph(sub, Mutant(wrong, m.steps), right.wrong))


def test_a_correction_reading_the_residual_one_column_off_is_refused() -> None:
    g = residual_block()
    sub = subprogram_of(g, g.nodes[1])
    m = {x.name: x for x in generate_mutants(sub)}[WIDE]
    fixes = analyse(sub.graph, m.graph).wrong
    good = corrected_graph(sub, m, fixes)
    assert check_equal(sub.graph, good)
    fixes_ = [nd for nd in good.nodes if nd.op == "conv2d_add" and nd.output not in m.graph.shapes]
    assert len(fixes_) == len(fixes)
    producers = good.producers
    cut = producers[fixes_[0].inputs[3]]  # the residual's columns for the first box
    assert cut.op == "split" and cut.p["axis"] == 3
    start = cut.p["start"] + (1 if cut.p["start"] == 0 else -1)
    nodes = tuple(make_node("split", {**cut.p, "start": start}, cut.inputs, cut.output) if nd is cut else nd
                  for nd in good.nodes)
    assert not check_equal(sub.graph, Graph(good.inputs, good.weights, nodes, good.outputs))


def test_the_probes_footprints_cut_the_boxes_the_full_footprints_cut() -> None:
    g = residual_block(c=3)
    for sub in (subprogram_of(g, g.nodes[1]), chain_of(g, g.nodes[1])):
        assert_probe_decides_as_the_full_footprints(sub)


def test_a_resnet_block_gets_rewrites_for_its_residual_convolution_and_the_chain_into_it() -> None:
    g = residual_block(n=4, c=4, h=8, w=8)
    found = find_rewrites(g)
    names = {(r.tensor, len(r.windows), r.name.removeprefix("pet:")) for r in found}
    assert ("y", 1, WIDE) in names and ("y", 2, WIDE2) in names
    assert_rewrites_compute_their_tensors(g, found, _feeds(g))  # each in the host graph's terms, equal to it
    # a batch of 4 folded by pairs: the seam is corrected once per pair block, residual included
    wide = next(r for r in found if r.tensor == "y" and r.name == "pet:" + WIDE)
    assert wide.evidence["tested_on_images"] == 2 and wide.fixes == 2


def test_a_residual_block_of_a_dynamic_batch_is_written_for_any_batch() -> None:
    """The ONNX Conv + Add + Relu pair, imported as conv2d_add, of a dynamic batch: each rewrite written into the
    model (the residual moved with the activation, and sliced to each correction) computes the original's
    output at batches 1, 2 and 5 (onnxruntime)."""
    from onnx import TensorProto, helper, numpy_helper

    from eqsat.onnx_io import load_with_axes

    g0 = residual_block(c=4, w=16)
    inits = [numpy_helper.from_array(v, k) for k, v in g0.weights.items()]
    onnx_nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", ["c1"], ["h"]),
                  helper.make_node("Conv", ["h", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
                  helper.make_node("Add", ["c2", "x"], ["s"]),
                  helper.make_node("Relu", ["s"], ["y"])]
    model = helper.make_model(helper.make_graph(
        onnx_nodes, "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 16])], inits),
        opset_imports=[helper.make_opsetid("", 13)])
    g, _ = load_with_axes(model, label="dyn")
    assert [n.op for n in g.nodes] == ["conv2d", "conv2d_add"]
    found = [r for r in find_rewrites(g) if r.tensor == "y"]
    assert {r.name.removeprefix("pet:") for r in found} >= {"width_to_batch(2) > conv2d+conv2d_add > batch_to_width(2)",
                                                           "width_to_batch(2) > conv2d_add > batch_to_width(2)"}
    assert_rewrites_run_as_the_original(model, g, found, (4, 8, 16))
