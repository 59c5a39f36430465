"""PET's partially equivalent transformations (eqsat.rules.pet): mutants keep the signature, boxes are decided as
worked out by hand, every corrected mutant equals its original on random inputs, and a broken correction is
refused by the check."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from _onnx_checks import assert_probe_decides_as_the_full_footprints, assert_rewrites_compute_their_tensors

from eqsat.ir.graph import Graph, TensorInfo, make_node
from eqsat.rules.pet import (
    CorrectionError,
    analyse,
    check_equal,
    chosen_rewrites,
    correct,
    find_rewrites,
    generate_mutants,
    subprogram_of,
)
from eqsat.rules.pet.corrections import corrected_graph
from eqsat.rules.pet.program import footprint
from eqsat.rules.pet.regions import axis_cuts, merge_boxes, representatives


def conv_graph(n: int = 2, c: int = 3, h: int = 6, w: int = 6, o: int = 4, k: int = 3, pad: int = 1,
               dil: int = 1, act: int = 0, seed: int = 0) -> Graph:
    rng = np.random.default_rng(seed)
    node = make_node("conv2d", {"pads": (pad,) * 4, "dilations": (dil, dil), "act": act}, ["x", "w", "b"], "y")
    return Graph((TensorInfo("x", (n, c, h, w)),), {"w": rng.standard_normal((o, c, k, k)).astype(np.float32),
                                                  "b": rng.standard_normal(o).astype(np.float32)}, (node,), ("y",))


def mutant_named(g: Graph, name: str):
    sub = subprogram_of(g, g.nodes[0])
    found = {m.name: m for m in generate_mutants(sub)}
    assert name in found, sorted(found)
    return sub, found[name]


WIDE = "batch_to_width(2) > conv2d > width_to_batch(2)"
TALL = "batch_to_height(2) > conv2d > height_to_batch(2)"
TILES = "width_to_batch(2) > conv2d > batch_to_width(2)"
PHASES = "phases_to_batch(2) > conv2d[undilated] > batch_to_phases(2)"


@pytest.mark.parametrize("shape", [(2, 3, 6, 6), (4, 2, 8, 8), (2, 1, 4, 10)])
def test_every_mutant_has_the_original_signature(shape: tuple[int, int, int, int]) -> None:
    g = conv_graph(*shape)
    sub = subprogram_of(g, g.nodes[0])
    mutants = generate_mutants(sub)
    names = {m.name for m in mutants}
    assert {WIDE, TALL, TILES} <= names
    for m in mutants:
        assert m.graph.inputs == g.inputs and set(m.graph.weights) == {"w", "b"}
        assert m.graph.outputs == ("y",) and m.graph.shapes["y"] == g.shapes["y"]
        assert len(m.steps) <= 4 and sum("conv2d" in s for s in m.steps) == 1
    assert "conv2d" not in names  # the original itself is no mutant


def test_depth_bounds_the_enumeration() -> None:
    g = conv_graph()
    sub = subprogram_of(g, g.nodes[0])
    assert generate_mutants(sub, depth=1) == []  # one step: only the original
    assert {len(m.steps) for m in generate_mutants(sub, depth=2)} == {2} or generate_mutants(sub, depth=2) == []
    assert all(len(m.steps) <= 3 for m in generate_mutants(sub, depth=3))


def test_the_wide_image_is_wrong_on_the_seam_only() -> None:
    # two 6-wide images side by side: image 0's last column reads image 1's first, image 1's first image 0's last
    g = conv_graph(2, 3, 6, 6, o=4)
    sub, m = mutant_named(g, WIDE)
    a = analyse(sub.graph, m.graph)
    assert a.wrong == [((0, 1), (0, 4), (0, 6), (5, 6)), ((1, 2), (0, 4), (0, 6), (0, 1))]
    assert all(d.equal for d in a.decisions if d.box[3] == (1, 5))  # the interior columns of both images
    assert a.wrong_fraction == pytest.approx(2 / 12)
    wrong = [d for d in a.decisions if not d.equal]
    assert all(d.differing is not None for d in wrong) and all(d.differing is None for d in a.decisions if d.equal)
    assert a.error_bound < 1e-10 and a.summary()["positions_tested"] > len(a.decisions)


def test_a_five_by_five_kernel_makes_a_two_column_seam() -> None:
    g = conv_graph(2, 2, 6, 8, k=5, pad=2)
    sub, m = mutant_named(g, WIDE)
    assert analyse(sub.graph, m.graph).wrong == [((0, 1), (0, 4), (0, 6), (6, 8)), ((1, 2), (0, 4), (0, 6), (0, 2))]


def test_tiles_are_wrong_where_they_meet() -> None:
    g = conv_graph(1, 2, 6, 12)
    sub, m = mutant_named(g, TILES)
    assert analyse(sub.graph, m.graph).wrong == [((0, 1), (0, 4), (0, 6), (5, 7))]


def test_boxes_follow_the_padding_borders() -> None:
    ids = footprint(conv_graph(1, 1, 5, 5))
    assert axis_cuts(ids, 2) == [1, 4] and axis_cuts(ids, 3) == [1, 4] and axis_cuts(ids, 0) == []
    assert representatives(((0, 1), (0, 4), (1, 4), (2, 3))) == [(0, 0, 1, 2), (0, 1, 1, 2), (0, 0, 2, 2)]
    assert merge_boxes([((0, 1), (0, 2)), ((1, 3), (0, 2)), ((5, 6), (0, 1))]) == [((0, 3), (0, 2)), ((5, 6), (0, 1))]


@pytest.mark.parametrize("seed", range(5))
def test_merged_boxes_cover_exactly_the_boxes_merged(seed: int) -> None:
    rng = np.random.default_rng(seed)
    edges = [sorted({0, 9, *rng.integers(1, 9, 3).tolist()}) for _ in range(3)]
    grid = list(itertools.product(*(itertools.pairwise(e) for e in edges)))
    picked = [box for box in grid if rng.random() < 0.6]
    merged = merge_boxes(picked)

    def cells(boxes: list) -> np.ndarray:  # noqa: ANN001
        m = np.zeros((9, 9, 9), dtype=int)
        for (a, b), (c, d), (e, f) in boxes:
            m[a:b, c:d, e:f] += 1
        return m

    assert np.array_equal(cells(merged), cells(picked)) and cells(merged).max() <= 1  # the same cells, once each
    assert len(merged) <= len(picked) and merge_boxes(merged) == merged


SHAPES = [dict(n=2, c=3, h=6, w=6), dict(n=4, c=2, h=8, w=8, o=3), dict(n=2, c=2, h=5, w=10, k=5, pad=2),
          dict(n=2, c=3, h=6, w=6, act=1), dict(n=2, c=2, h=8, w=8, dil=2, pad=2)]


@pytest.mark.parametrize("kw", SHAPES)
def test_every_corrected_mutant_equals_the_original(kw: dict[str, int]) -> None:
    g = conv_graph(**kw)
    sub = subprogram_of(g, g.nodes[0])
    corrected = 0
    for m in generate_mutants(sub):
        try:
            fixed = correct(sub, m)
        except CorrectionError as e:
            assert "is wrong on" in str(e)  # refused for its size, never for failing the check
            continue
        corrected += 1
        assert check_equal(g, fixed.graph, trials=2, seed=7)
        feeds = {"x": np.random.default_rng(3).standard_normal(g.inputs[0].shape).astype(np.float32)}
        np.testing.assert_allclose(fixed.graph.evaluate(feeds)[0], g.evaluate(feeds)[0], rtol=1e-4, atol=1e-4)
        assert (fixed.correction_flops > 0) == bool(fixed.fixes)
    assert corrected >= 1


def test_a_dilated_conv_runs_as_a_plain_one_over_phase_images() -> None:
    g = conv_graph(1, 2, 8, 8, dil=2, pad=2)
    sub, m = mutant_named(g, PHASES)
    fixed = correct(sub, m)
    assert fixed.fixes == () and check_equal(g, fixed.graph)
    assert all(n.p["dilations"] == (1, 1) for n in fixed.graph.nodes if "dilations" in n.p)


def test_a_broken_correction_is_refused() -> None:
    g = conv_graph(2, 3, 6, 6)
    sub, m = mutant_named(g, WIDE)
    fixes = analyse(sub.graph, m.graph).wrong
    assert check_equal(g, corrected_graph(sub, m, fixes))
    assert not check_equal(g, m.graph)  # the mutant alone
    assert not check_equal(g, corrected_graph(sub, m, fixes[:1]))  # one seam fix dropped
    assert not check_equal(g, corrected_graph(sub, m, fixes, shift=1))  # the fix reads the window next to it
    shifted = [(box[0], box[1], box[2], (box[3][0] + 1, box[3][1] + 1)) if box[3][0] == 0 else box for box in fixes]
    assert not check_equal(g, corrected_graph(sub, m, shifted))  # the fix written one column off


def resnet_block() -> Graph:
    """A ResNet-18-like block: two 3x3 convolutions (the first with its ReLU), batch 2."""
    rng = np.random.default_rng(1)
    ws = {f"w{i}": rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2 for i in (1, 2)}
    ws |= {f"b{i}": rng.standard_normal(8).astype(np.float32) for i in (1, 2)}
    nodes = (make_node("conv2d", {"pads": (1, 1, 1, 1), "act": 1}, ["x", "w1", "b1"], "h1"),
             make_node("conv2d", {"pads": (1, 1, 1, 1)}, ["h1", "w2", "b2"], "y"))
    return Graph((TensorInfo("x", (2, 8, 8, 8)),), ws, nodes, ("y",))


def inception_block() -> Graph:
    """An Inception-like block: 1x1, 3x3, 5x5 and dilated 3x3 branches of one input, concatenated."""
    rng = np.random.default_rng(2)
    nodes, ws, outs = [], {}, []
    for name, k, pad, dil in (("a", 1, 0, 1), ("b", 3, 1, 1), ("c", 5, 2, 1), ("d", 3, 2, 2)):
        ws[f"w{name}"] = rng.standard_normal((4, 6, k, k)).astype(np.float32) * 0.2
        ws[f"b{name}"] = rng.standard_normal(4).astype(np.float32)
        nodes.append(make_node("conv2d", {"pads": (pad,) * 4, "dilations": (dil, dil), "act": 1},
                               ["x", f"w{name}", f"b{name}"], name))
        outs.append(name)
    nodes.append(make_node("concat", {"axis": 1}, outs, "y"))
    return Graph((TensorInfo("x", (2, 6, 8, 8)),), ws, tuple(nodes), ("y",))


@pytest.mark.parametrize("block, families", [
    (resnet_block, {WIDE, TALL, "width_to_batch(2) > conv2d > batch_to_width(2)"}),
    (inception_block, {WIDE, TILES, PHASES}),
])
def test_the_families_are_found_on_blocks(block, families: set[str]) -> None:
    g = block()
    found = find_rewrites(g)
    assert families <= {r.name.removeprefix("pet:") for r in found}
    # each a computation of its tensor in the host graph's terms, equal to it
    feeds = {"x": np.random.default_rng(0).standard_normal(g.inputs[0].shape).astype(np.float32)}
    assert_rewrites_compute_their_tensors(g, found, feeds)
    for r in found:
        assert r.evidence["tests"] == 4 and r.fixes == r.evidence["corrections"] <= len(r.evidence["fixes"])


def test_a_graph_holding_a_corrected_mutant_is_found_to_have_chosen_it() -> None:
    g = inception_block()
    found = find_rewrites(g)
    assert found and chosen_rewrites(g, found) == []
    for r in found[:6]:  # the graph with the rewrite's nodes in place of the node it computes again
        nodes = [m for n in g.nodes for m in (r.nodes if n.output == r.tensor else (n,))]
        assert chosen_rewrites(Graph(g.inputs, g.weights, tuple(nodes), g.outputs).validate(), found) == [r]


@pytest.mark.parametrize("block", [resnet_block, inception_block])
def test_the_probes_footprints_cut_the_boxes_the_full_footprints_cut(block) -> None:  # noqa: ANN001
    """The analysis from one channel's footprints (what find_rewrites does) has the same boxes and decisions as
    the analysis from the full ones."""
    from eqsat.rules.pet.search import probe

    g = block()
    for node in g.nodes:
        if (sub := subprogram_of(g, node)) is None:
            continue
        assert probe(sub).graph.weights[node.inputs[1]].shape[:2] == (1, 1)
        assert_probe_decides_as_the_full_footprints(sub)


def test_no_subprogram_is_begun_past_the_deadline() -> None:
    said: list[str] = []
    assert find_rewrites(inception_block(), deadline=0.0, progress=said.append) == []
    assert said == ["pet: stopped at its deadline, 4 of 4 subprograms left"]
    shared = find_rewrites(resnet_block(), chain=1)  # its two convolutions (one with its ReLU): the same mutants
    assert {r.tensor for r in shared} == {"h1", "y"}
    assert sorted(r.name for r in shared if r.tensor == "h1") == sorted(r.name for r in shared if r.tensor == "y")


@pytest.mark.parametrize("dil", [1, 2])
def test_a_batch_analysed_on_fewer_images_has_the_full_analysis_boxes_and_decisions(dil: int) -> None:
    """find_rewrites tests a batch of 8 on the fewest images its footprints repeat over: every mutant gets the
    boxes and decisions of the analysis at full size."""
    from eqsat.rules.pet.search import _analysis, _AtBatch, _fewer_images

    g = conv_graph(n=8, c=2, h=8, w=8, o=3, pad=dil, dil=dil)
    sub = subprogram_of(g, g.nodes[0])
    whole = _AtBatch(sub, 4)
    fewer = _fewer_images(sub, 4)
    assert [f.sub.graph.inputs[0].shape[0] for f in fewer] == [1, 2, 4]
    tested_on = {}
    for m in generate_mutants(sub):
        full = analyse(sub.graph, m.graph)
        fast = _analysis(whole, m.name, 4, fewer)
        assert fast is not None and full.images == 8
        assert [(d.box, d.equal) for d in fast.decisions] == [(d.box, d.equal) for d in full.decisions], m.name
        tested_on[m.name] = fast.images
    # a fold by 2 sets two images side by side: tested on 2; tiles and phases keep each image apart: on 1
    assert tested_on[WIDE] == tested_on[TALL] == 2 and tested_on[TILES] == 1
    assert dil == 1 or tested_on[PHASES] == 1
    assert max(tested_on.values()) < 8


def test_a_footprint_that_does_not_repeat_along_the_batch_is_not_analysed_on_fewer_images() -> None:
    from eqsat.rules.pet.regions import repeats_along_batch

    image = 4
    one = np.arange(1, 5).reshape(1, 4, 1)  # image 0 reads its own four elements
    two = np.concatenate([one, one + image])  # image 1 reads its own: block 1 moved by one image
    assert repeats_along_batch(two, one, image)
    mixed = np.concatenate([one, one])  # image 1 reads image 0's elements: not the same sum moved
    assert not repeats_along_batch(mixed, one, image)
    padded = np.concatenate([one, np.where(one > 2, one + image, 0)])  # image 1 reads padding where 0 does not
    assert not repeats_along_batch(padded, one, image)
    assert not repeats_along_batch(np.concatenate([two, one]), two, image)  # 3 images are no blocks of 2


def test_patches_are_written_over_their_boxes_in_one_pass_with_no_dead_node() -> None:
    from eqsat.ir.names import NameAllocator
    from eqsat.rules.pet.corrections import overwrite

    shape = (2, 3, 8, 8)
    boxes = [((0, 2), (0, 3), (0, 1), (3, 5)), ((0, 2), (0, 3), (1, 7), (3, 5)), ((0, 2), (0, 3), (7, 8), (3, 5)),
             ((0, 2), (0, 3), (0, 8), (7, 8)), ((1, 2), (0, 3), (0, 2), (0, 2))]
    rng = np.random.default_rng(0)
    values = {"t": rng.standard_normal(shape)}
    names, nodes, patches = NameAllocator({"t"}), [], []
    want = values["t"].copy()
    for i, box in enumerate(boxes):
        values[f"p{i}"] = rng.standard_normal([b - a for a, b in box])
        want[tuple(slice(a, b) for a, b in box)] = values[f"p{i}"]
        patches.append((box, f"p{i}"))
    out = overwrite("t", shape, patches, names, nodes)
    assert nodes[-1].output == out
    env = dict(values)
    for n in nodes:
        env[n.output] = n.spec.numpy_fn(n.p, *[env[i] for i in n.inputs])
    assert np.array_equal(env[out], want)
    read = {i for n in nodes for i in n.inputs}
    assert all(n.output in read for n in nodes[:-1])  # every node but the result feeds another
    assert sum(n.op == "concat" for n in nodes) < len(boxes)  # a concat per box before


@pytest.mark.parametrize("chain", [False, True])
def test_a_seam_repeated_on_every_image_pair_is_corrected_once_for_all_pairs(chain: bool) -> None:
    from eqsat.rules.pet.corrections import blocks_of
    from eqsat.rules.pet.program import chain_of

    g = conv_graph(n=8, c=2, h=6, w=8, act=1)
    if chain:
        rng = np.random.default_rng(9)
        w2, b2 = rng.standard_normal((3, 4, 3, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
        g = Graph(g.inputs, {**g.weights, "w2": w2, "b2": b2},
                  (*g.nodes, make_node("conv2d", {"pads": (1, 1, 1, 1)}, ["y", "w2", "b2"], "z")), ("z",))
    sub = chain_of(g, g.nodes[-1]) if chain else subprogram_of(g, g.nodes[0])
    m = {x.name: x for x in generate_mutants(sub)}["batch_to_width(2) > " + ("conv2d+conv2d" if chain else "conv2d")
                                                    + " > width_to_batch(2)"]
    fixes = analyse(sub.graph, m.graph).wrong
    assert len(fixes) == 8  # a box per image: each image pair's seam
    assert blocks_of(fixes, sub.graph.shapes[sub.output], 2) is not None
    assert blocks_of(fixes[1:], sub.graph.shapes[sub.output], 2) is None  # one pair's fix missing: no period
    once = corrected_graph(sub, m, fixes, period=2)
    convs = len(sub.windows)
    fix_convs = [n for n in once.nodes if n.op == "conv2d" and n.output not in m.graph.shapes]
    assert len(fix_convs) == 2 * convs  # one per side of the seam, over the four pairs
    assert all(once.shapes[n.output][0] == 4 for n in fix_convs)
    assert check_equal(sub.graph, once) and check_equal(sub.graph, corrected_graph(sub, m, fixes))
    assert not check_equal(sub.graph, corrected_graph(sub, m, fixes, shift=1, period=2))
    from eqsat.rules.pet.search import _analysis, _AtBatch, _fewer_images

    analysis = _analysis(_AtBatch(sub, 4), m.name, 4, _fewer_images(sub, 4))  # find_rewrites' way
    assert analysis is not None and analysis.images == 2  # tested on one pair: the period
    fixed = correct(sub, m, analysis)
    assert sum(n.op == "conv2d" for n in fixed.graph.nodes) == 3 * convs  # the mutant's and two fixes
    assert fixed.corrections == 2 and len(fixed.fixes) == 8
