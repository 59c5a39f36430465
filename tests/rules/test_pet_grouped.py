"""PET over grouped and depthwise convolutions (a MobileNet block's, a ResNeXt block's): each output channel reads
its group's channels with the same taps, so one-channel probes decide the boxes, and the corrected mutants run
the grouped convolution itself."""

from __future__ import annotations

import numpy as np
import pytest
from _onnx_checks import assert_rewrites_compute_their_tensors, assert_rewrites_run_as_the_original

from eqsat.ir.graph import Graph, TensorInfo, make_node
from eqsat.rules.pet import analyse, check_equal, correct, find_rewrites, generate_mutants
from eqsat.rules.pet.corrections import CorrectionError, corrected_graph
from eqsat.rules.pet.program import chain_of, subprogram_of
from eqsat.rules.pet.search import BATCH_PROXY, _corrected, at_batch, probe
from eqsat.rules.pet.symbolic import proved_for_any_batch

WIDE = "batch_to_width(2) > conv2d > width_to_batch(2)"


def mobilenet_block(n: int = 2, c: int = 6, h: int = 8, w: int = 8, groups: int = 6, dil: int = 1,
                    seed: int = 0) -> Graph:
    """x -> 1x1 conv (ReLU) -> 3x3 conv of ``groups`` groups (ReLU; depthwise where groups == channels) -> 1x1
    conv -> y."""
    rng = np.random.default_rng(seed)
    ws = {"w1": rng.standard_normal((c, c, 1, 1)).astype(np.float32) * 0.3,
          "w2": rng.standard_normal((c, c // groups, 3, 3)).astype(np.float32) * 0.3,
          "w3": rng.standard_normal((c, c, 1, 1)).astype(np.float32) * 0.3}
    ws |= {f"b{i}": rng.standard_normal(c).astype(np.float32) for i in (1, 2, 3)}
    nodes = (make_node("conv2d", {"act": 1}, ["x", "w1", "b1"], "h1"),
             make_node("conv2d", {"pads": (dil,) * 4, "dilations": (dil, dil), "groups": groups, "act": 1},
                       ["h1", "w2", "b2"], "h2"),
             make_node("conv2d", {}, ["h2", "w3", "b3"], "y"))
    return Graph((TensorInfo("x", (n, c, h, w)),), ws, nodes, ("y",))


def _feeds(g: Graph) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    return {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in g.inputs}


@pytest.mark.parametrize("groups, dil", [(6, 1), (2, 1), (6, 2)])
def test_every_corrected_mutant_of_a_grouped_convolution_equals_the_original(groups: int, dil: int) -> None:
    g = mobilenet_block(groups=groups, dil=dil)
    sub = subprogram_of(g, g.nodes[1])
    assert sub is not None and sub.windows[0].p["groups"] == groups
    assert all(n.p["groups"] == 1 for n in probe(sub).windows)  # one channel: a plain window
    small = {m.name: m for m in generate_mutants(probe(sub))}
    corrected = set()
    for m in generate_mutants(sub):
        try:
            fixed = correct(sub, m, probe=(probe(sub), small[m.name]))
        except CorrectionError as e:
            assert "is wrong on" in str(e)  # refused for its size, never for failing the check
            continue
        corrected.add(m.name)
        assert all(n.p["groups"] == groups for n in fixed.graph.nodes if n.op == "conv2d")
        feeds = _feeds(sub.graph)
        np.testing.assert_allclose(fixed.graph.evaluate(feeds)[0], sub.graph.evaluate(feeds)[0], rtol=1e-4,
                                   atol=1e-4, err_msg=m.name)
    assert WIDE in corrected
    if dil > 1:
        assert "phases_to_batch(2) > conv2d[undilated] > batch_to_phases(2)" in corrected


def test_a_broken_correction_of_a_grouped_convolution_is_refused() -> None:
    g = mobilenet_block(groups=2)
    sub = subprogram_of(g, g.nodes[1])
    m = {x.name: x for x in generate_mutants(sub)}[WIDE]
    fixes = analyse(probe(sub).graph, {x.name: x for x in generate_mutants(probe(sub))}[WIDE].graph).wrong
    fixes = [b[:1] + ((0, 6),) + b[2:] for b in fixes]  # every channel
    assert check_equal(sub.graph, corrected_graph(sub, m, fixes))
    assert not check_equal(sub.graph, corrected_graph(sub, m, fixes[1:]))  # one seam fix dropped
    assert not check_equal(sub.graph, corrected_graph(sub, m, fixes, shift=1))  # read one column off


def test_a_mobilenet_block_gets_rewrites_for_its_depthwise_convolution_and_the_chains_through_it() -> None:
    g = mobilenet_block(n=4)
    found = find_rewrites(g)
    assert {("h2", 1), ("h2", 2), ("y", 2)} <= {(r.tensor, len(r.windows)) for r in found}
    assert_rewrites_compute_their_tensors(g, found, _feeds(g))  # each in the host graph's terms, equal to it


def test_a_depthwise_rewrite_for_a_dynamic_batch_is_proved() -> None:
    g = mobilenet_block(n=BATCH_PROXY, w=16)
    sub = chain_of(g, g.nodes[1])
    kept = [f for f in _corrected(at_batch(sub, BATCH_PROXY), 4, 4, 0.25, {}) if f.analysis.images == 1]
    assert kept
    for fixed in kept:
        small = probe(fixed.sub)
        m = {x.name: x for x in generate_mutants(small)}[fixed.mutant.name]
        assert proved_for_any_batch(small.graph, m.graph, list(fixed.fixes), BATCH_PROXY), fixed.mutant.name


def test_a_depthwise_block_of_a_dynamic_batch_is_written_for_any_batch() -> None:
    """ONNX Conv (1x1), Relu, Conv (depthwise), Relu, Conv (1x1) of a dynamic batch: each rewrite written into the
    model, exported, runs in onnxruntime at batches 1, 2 and 5 as the original does."""
    from onnx import TensorProto, helper, numpy_helper

    from eqsat.onnx_io import load_with_axes

    g0 = mobilenet_block(w=16)
    inits = [numpy_helper.from_array(v, k) for k, v in g0.weights.items()]
    onnx_nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]), helper.make_node("Relu", ["c1"], ["h1"]),
                  helper.make_node("Conv", ["h1", "w2", "b2"], ["c2"], pads=[1] * 4, group=6),
                  helper.make_node("Relu", ["c2"], ["h2"]), helper.make_node("Conv", ["h2", "w3", "b3"], ["y"])]
    model = helper.make_model(helper.make_graph(
        onnx_nodes, "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6, 8, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6, 8, 16])], inits),
        opset_imports=[helper.make_opsetid("", 13)])
    g, _ = load_with_axes(model, label="dyn")
    found = find_rewrites(g)
    assert any(dict(w[1]).get("groups") == 6 for r in found for w in r.windows)  # through the depthwise one
    assert all(r.evidence["proved_for_any_batch"].startswith("z3") for r in found)
    assert_rewrites_run_as_the_original(model, g, found, (6, 8, 16))
