"""PET over chains of convolutions (eqsat.rules.pet): one R/T around two convolutions, the seam as wide as both
kernels reach, the correction computed through the chain with each intermediate padded as the original pads it,
and the checks that refuse a broken one."""

from __future__ import annotations

import numpy as np
import pytest
from _onnx_checks import (
    assert_probe_decides_as_the_full_footprints,
    assert_rewrites_compute_their_tensors,
    assert_rewrites_run_as_the_original,
)

from eqsat.ir.graph import Graph, TensorInfo, make_node
from eqsat.rules.pet import analyse, check_equal, chosen_rewrites, correct, find_rewrites, generate_mutants
from eqsat.rules.pet.corrections import corrected_graph
from eqsat.rules.pet.program import chain_of, footprint, subprogram_of
from eqsat.rules.pet.regions import axis_cuts

WIDE2 = "batch_to_width(2) > conv2d+conv2d > width_to_batch(2)"
PHASES2 = "phases_to_batch(2) > conv2d[undilated]+conv2d[undilated] > batch_to_phases(2)"


def chain_graph(n: int = 2, c: int = 3, h: int = 8, w: int = 8, k1: int = 3, k2: int = 3, pad1: int = 1,
                pad2: int = 1, dil: int = 1, act1: int = 1, seed: int = 0) -> Graph:
    """x -> conv (with its ReLU) -> conv -> y; both convolutions read weights."""
    rng = np.random.default_rng(seed)
    ws = {"w1": rng.standard_normal((4, c, k1, k1)).astype(np.float32) * 0.3,
          "b1": rng.standard_normal(4).astype(np.float32),
          "w2": rng.standard_normal((5, 4, k2, k2)).astype(np.float32) * 0.3,
          "b2": rng.standard_normal(5).astype(np.float32)}
    nodes = (make_node("conv2d", {"pads": (pad1,) * 4, "dilations": (dil, dil), "act": act1}, ["x", "w1", "b1"], "h"),
             make_node("conv2d", {"pads": (pad2,) * 4, "dilations": (dil, dil)}, ["h", "w2", "b2"], "y"))
    return Graph((TensorInfo("x", (n, c, h, w)),), ws, nodes, ("y",))


def chain_mutant(g: Graph, name: str):
    sub = chain_of(g, g.nodes[-1])
    assert sub is not None and sub.windows == g.nodes
    found = {m.name: m for m in generate_mutants(sub)}
    assert name in found, sorted(found)
    return sub, found[name]


def test_a_chain_is_two_windows_each_reading_the_one_before() -> None:
    g = chain_graph()
    sub = chain_of(g, g.nodes[1])
    assert sub is not None and sub.node is g.nodes[1] and sub.activation == "x" and sub.output == "y"
    assert set(sub.graph.weights) == {"w1", "b1", "w2", "b2"}
    assert chain_of(g, g.nodes[0]) is None  # the first convolution reads the input, no window
    assert subprogram_of(g, g.nodes[1]).graph.nodes == (g.nodes[1],)  # the node alone is still a subprogram
    for m in generate_mutants(sub):  # the chain is one step: its two convolutions stay together, in order
        convs = [n for n in m.graph.nodes if n.op == "conv2d"]
        assert [n.inputs[1] for n in convs] == ["w1", "w2"] and convs[1].inputs[0] == convs[0].output
        assert m.graph.shapes["y"] == g.shapes["y"]


def test_the_chains_seam_is_as_wide_as_both_kernels_reach() -> None:
    g = chain_graph()
    sub, m = chain_mutant(g, WIDE2)
    a = analyse(sub.graph, m.graph)
    # each 3x3 convolution reads one column over the seam: two columns of each image are wrong
    assert a.wrong == [((0, 1), (0, 5), (0, 8), (6, 8)), ((1, 2), (0, 5), (0, 8), (0, 2))]
    fixed = correct(sub, m, a)
    assert check_equal(g, fixed.graph) and fixed.correction_flops > 0
    fixes = [n for n in fixed.graph.nodes if n.op == "conv2d" and n.output not in m.graph.shapes]
    assert len(fixes) == 4  # each box through both convolutions


@pytest.mark.parametrize("kw", [dict(), dict(k1=5, pad1=2, act1=0, w=16), dict(n=4, k2=1, pad2=0), dict(h=6, w=10)])
def test_every_corrected_chain_mutant_equals_the_original(kw: dict[str, int]) -> None:
    g = chain_graph(**kw)
    sub = chain_of(g, g.nodes[1])
    corrected = 0
    for m in generate_mutants(sub):
        try:
            fixed = correct(sub, m)
        except ValueError as e:
            assert "is wrong on" in str(e)  # refused for its size, never for failing the check
            continue
        corrected += 1
        feeds = {"x": np.random.default_rng(5).standard_normal(g.inputs[0].shape).astype(np.float32)}
        np.testing.assert_allclose(fixed.graph.evaluate(feeds)[0], g.evaluate(feeds)[0], rtol=1e-4, atol=1e-4)
    assert corrected >= 1


def test_a_broken_chain_correction_is_refused() -> None:
    g = chain_graph()
    sub, m = chain_mutant(g, WIDE2)
    fixes = analyse(sub.graph, m.graph).wrong
    assert check_equal(g, corrected_graph(sub, m, fixes))
    assert not check_equal(g, m.graph)
    assert not check_equal(g, corrected_graph(sub, m, fixes[1:]))  # one seam fix dropped
    assert not check_equal(g, corrected_graph(sub, m, fixes, shift=1))  # the first convolution reads one column off
    narrow = [b[:3] + ((b[3][0], b[3][0] + 1),) if b[3][0] == 0 else b[:3] + ((b[3][1] - 1, b[3][1]),) for b in fixes]
    assert not check_equal(g, corrected_graph(sub, m, narrow))  # the one-convolution seam is not enough


def test_two_dilated_convolutions_run_as_plain_ones_over_phase_images_with_no_correction() -> None:
    # CSRNet's back end: dilated convolutions one after another; one gather and one scatter for both
    g = chain_graph(1, 2, 8, 8, pad1=2, pad2=2, dil=2)
    sub, m = chain_mutant(g, PHASES2)
    fixed = correct(sub, m)
    assert fixed.fixes == () and check_equal(g, fixed.graph)
    assert sum(n.op == "transpose" for n in fixed.graph.nodes) == 2
    assert all(n.p["dilations"] == (1, 1) for n in fixed.graph.nodes if n.op == "conv2d")


def test_the_probes_footprints_of_a_chain_cut_the_boxes_the_full_footprints_cut() -> None:
    g = chain_graph(c=2)
    assert_probe_decides_as_the_full_footprints(chain_of(g, g.nodes[1]))


def test_a_tap_reading_an_intermediate_position_is_told_from_one_reading_padding() -> None:
    # the 1x1 convolution pads by 3: its three outer columns read only padding and hold the bias. Output column 0
    # reads [padding, bias, bias], column 1 [bias, bias, bias]: no element either way, different sums
    g = chain_graph(1, 1, 6, 6, k1=1, pad1=3, pad2=1, act1=0)
    ids = footprint(chain_of(g, g.nodes[1]).graph)
    assert 1 in axis_cuts(ids, 3) and 1 in axis_cuts(ids, 2)


def test_a_graph_holding_a_chains_mutant_has_chosen_the_chain_and_not_its_first_convolution_alone() -> None:
    g = chain_graph()
    found = find_rewrites(g)
    chain = next(r for r in found if r.name == "pet:" + WIDE2)
    alone = [r for r in found if r.tensor == "h" and r.name == "pet:batch_to_width(2) > conv2d > width_to_batch(2)"]
    assert alone and alone[0].windows == chain.windows[:1]  # the same first window
    nodes = [m for n in g.nodes for m in (chain.nodes if n.output == "y" else (n,))]
    assert chosen_rewrites(Graph(g.inputs, g.weights, tuple(nodes), g.outputs).live().validate(), found) == [chain]


@pytest.mark.parametrize("chain", [False, True])
def test_the_exact_test_on_the_probe_refuses_what_the_full_one_refuses(chain: bool) -> None:
    """find_rewrites computes the exact test on a probe (one channel in and out) corrected on the same boxes and
    the float32 one on the graph itself: a correction broken in either is refused."""
    from eqsat.rules.pet.corrections import Reference
    from eqsat.rules.pet.search import probe

    g = chain_graph(c=3)
    sub = chain_of(g, g.nodes[1]) if chain else subprogram_of(g, g.nodes[0])
    name = WIDE2 if chain else "batch_to_width(2) > conv2d > width_to_batch(2)"
    m = {x.name: x for x in generate_mutants(sub)}[name]
    small = probe(sub)
    ms = {x.name: x for x in generate_mutants(small)}[name]
    fixes = analyse(sub.graph, m.graph).wrong
    narrow = [b[:1] + ((0, 1),) + b[2:] for b in fixes]
    ref = Reference(sub.graph, exact=small.graph)
    good, good_probe = corrected_graph(sub, m, fixes), corrected_graph(small, ms, narrow)
    assert check_equal(sub.graph, good, reference=ref, exact=(small.graph, good_probe))
    broken_probe = corrected_graph(small, ms, narrow, shift=1)
    assert not check_equal(sub.graph, good, reference=ref, exact=(small.graph, broken_probe))  # exact test fails
    assert not check_equal(sub.graph, corrected_graph(sub, m, fixes[1:]), reference=ref,
                           exact=(small.graph, good_probe))  # the float32 one does
    fixed = correct(sub, m, probe=(small, ms), reference=ref)
    assert fixed.evidence["checked_exactly_on"] == "probe" and fixed.fixes == tuple(fixes)


def test_a_dynamic_batch_is_searched_at_a_few_images_and_written_for_any() -> None:
    """A model whose batch is dynamic is imported at the symbol's generic size (a prime above 10 000): PET
    searches three images, keeps what holds image by image, and each rewrite written into the model computes
    the original's output at batches 1, 2 and 5 (onnxruntime)."""
    from onnx import TensorProto, helper, numpy_helper

    from eqsat.onnx_io import load_with_axes

    g0 = chain_graph(c=4, w=16)
    inits = [numpy_helper.from_array(v, k) for k, v in g0.weights.items()]
    onnx_nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", ["c1"], ["h"]),
                  helper.make_node("Conv", ["h", "w2", "b2"], ["y"], pads=[1, 1, 1, 1])]
    model = helper.make_model(helper.make_graph(
        onnx_nodes, "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5, 8, 16])], inits),
        opset_imports=[helper.make_opsetid("", 13)])
    g, _ = load_with_axes(model, label="dyn")
    assert g.shapes["x"][0] > 10_000  # the generic batch
    said: list[str] = []
    found = find_rewrites(g, progress=said.append)
    assert found and not said
    assert all(r.evidence["searched_at_batch"] == 3 and r.evidence["tested_on_images"] == 1 for r in found)
    assert all(r.evidence["proved_for_any_batch"].startswith("z3") for r in found)
    assert all(box[0] == [0, g.shapes["x"][0]] for r in found for box in r.evidence["fixes"])
    assert {r.name for r in found} >= {"pet:width_to_batch(2) > conv2d+conv2d > batch_to_width(2)"}
    assert_rewrites_run_as_the_original(model, g, found, (4, 8, 16))


def test_a_dynamic_spatial_axis_is_left_out_and_said() -> None:
    from onnx import TensorProto, helper, numpy_helper

    from eqsat.onnx_io import load_with_axes

    g0 = chain_graph(c=4)
    inits = [numpy_helper.from_array(v, k) for k, v in g0.weights.items()]
    onnx_nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h"], pads=[1, 1, 1, 1])]
    model = helper.make_model(helper.make_graph(
        onnx_nodes, "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 8, "W"])],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, 4, 8, "W"])], inits[:2]),
        opset_imports=[helper.make_opsetid("", 13)])
    g, _ = load_with_axes(model, label="dyn")
    said: list[str] = []
    assert find_rewrites(g, progress=said.append) == []
    assert said == ["pet: 1 of 1 subprograms over a dynamic axis other than the batch left out (their boxes would "
                    "move with its size)"]


def test_the_smallest_subprograms_are_searched_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a deadline the largest are the ones left out: find_rewrites begins the subprograms in the order of
    their probe's footprint per image, the graph's order among equals."""
    from eqsat.rules.pet import search

    g = chain_graph(k1=5, pad1=2, w=16)  # a 5x5 convolution, then a 3x3 one: the chain is the largest
    begun: list[str] = []
    real = search._corrected
    monkeypatch.setattr(search, "_corrected", lambda sub, *a: begun.append(sub.graph.name) or real(sub, *a))
    search.find_rewrites(g)
    assert begun == ["pet_y", "pet_h", "pet_y_chain2"]  # 9 taps, 25 taps, 9 x (1 + 25) taps


def test_a_chain_of_three_is_searched_as_one_with_its_seam_three_columns_wide() -> None:
    """find_rewrites(chain=3): one fold around three 3x3 convolutions, wrong on three columns of each image at the
    seam (one per kernel), corrected through all three, and equal to the original."""
    rng = np.random.default_rng(4)
    ws, nodes, cur = {}, [], "x"
    for i in range(3):
        ws[f"w{i}"], ws[f"b{i}"] = (rng.standard_normal((3, 3, 3, 3)).astype(np.float32) * 0.3,
                                    rng.standard_normal(3).astype(np.float32))
        out = "y" if i == 2 else f"h{i}"
        nodes.append(make_node("conv2d", {"pads": (1,) * 4, "act": int(i < 2)}, [cur, f"w{i}", f"b{i}"], out))
        cur = out
    g = Graph((TensorInfo("x", (2, 3, 12, 12)),), ws, tuple(nodes), ("y",))
    three = [r for r in find_rewrites(g, chain=3) if len(r.windows) == 3]
    assert not any(len(r.windows) == 3 for r in find_rewrites(g))  # chains of two by default
    wide = {r.name: r for r in three}["pet:batch_to_width(2) > conv2d+conv2d+conv2d > width_to_batch(2)"]
    assert [b[3] for b in wide.evidence["wrong_boxes"]] == [[9, 12], [0, 3]]
    feeds = {"x": rng.standard_normal((2, 3, 12, 12)).astype(np.float32)}
    assert_rewrites_compute_their_tensors(g, three, feeds)
