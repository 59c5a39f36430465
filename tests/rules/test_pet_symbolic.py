"""The Z3 proof that a corrected mutant searched at a few images holds at every batch (eqsat.rules.pet.symbolic):
its index maps read what the registry's operators read, it proves what the search keeps for a dynamic batch, and
it refuses a correction dropped or moved."""

from __future__ import annotations

import numpy as np
import pytest
import z3
from test_pet_chains import chain_graph
from test_pet_residual import residual_block

from eqsat.ir.graph import Graph
from eqsat.rules.pet import generate_mutants
from eqsat.rules.pet.program import _input_ids, chain_of, footprint, subprogram_of
from eqsat.rules.pet.search import BATCH_PROXY, _corrected, at_batch, probe
from eqsat.rules.pet.symbolic import _reads, batch_scaling, proved_for_any_batch


def _cases() -> list[tuple[str, object]]:
    dilated = chain_graph(3, 4, 8, 16, pad1=2, pad2=2, dil=2)
    return [("tiles", subprogram_of(chain_graph(3, 4, 8, 16), chain_graph(3, 4, 8, 16).nodes[0])),
            ("tiles, a chain", chain_of(chain_graph(3, 4, 8, 16), chain_graph(3, 4, 8, 16).nodes[1])),
            ("phases", subprogram_of(dilated, dilated.nodes[0])),
            ("phases, a chain", chain_of(dilated, dilated.nodes[1])),
            ("a residual add", subprogram_of(residual_block(3, w=16), residual_block(3, w=16).nodes[1])),
            ("a residual block", chain_of(residual_block(3, w=16), residual_block(3, w=16).nodes[1]))]


def _value(e: z3.ArithRef, at: dict[str, int]) -> int:
    subs = [(z3.Int(k), z3.IntVal(v)) for k, v in at.items()]
    return z3.simplify(z3.substitute(e, *subs)).as_long()


@pytest.mark.parametrize("name", ["tiles", "phases", "a residual add"])
def test_the_index_maps_read_what_the_footprints_read(name: str) -> None:
    """At random positions and taps of every mutant of one window (one channel, 3 images), the element the
    symbolic maps say is read (or padding) is the one the footprint, computed by the registry's operators on
    element ids, holds; so is the residual's."""
    sub = dict(_cases())[name]
    small = probe(sub)
    rng = np.random.default_rng(0)
    for g in [small.graph, *(m.graph for m in generate_mutants(small))]:
        ids, inputs = footprint(g), _input_ids(g)
        n, _, h, w, _ = ids.shape
        (window,) = [nd for nd in g.nodes if len(nd.inputs) > 1 and nd.inputs[1] in g.weights]
        kh, kw = g.shapes[window.inputs[1]][2:]
        taps = [(z3.Int("dh0"), z3.Int("dw0"))]
        got = _reads(g, taps, ((1, z3.Int("j")), [z3.IntVal(0), z3.Int("h"), z3.Int("w")]))
        assert got is not None
        compared = 0
        for _ in range(40):
            at = {"j": int(rng.integers(n)), "h": int(rng.integers(h)), "w": int(rng.integers(w)),
                  "dh0": int(rng.integers(kh)), "dw0": int(rng.integers(kw))}
            want = ids[at["j"], 0, at["h"], at["w"], at["dh0"] * kw + at["dw0"]]
            valid = z3.is_true(z3.simplify(z3.substitute(got.valid[0], *[(z3.Int(k), z3.IntVal(v))
                                                                           for k, v in at.items()])))
            if not valid:
                assert want == 0
            else:
                src, ((_, e), rest) = got.element  # at m = 0: the image is e
                pos = (_value(e, at), *(_value(x, at) for x in rest))
                assert inputs[src][pos][0] == want, (name, at)
                compared += 1
            for _, r, ((_, e), rest) in got.residuals:
                pos = (_value(e, at), *(_value(x, at) for x in rest))
                assert inputs[r][pos][0] == ids[at["j"], 0, at["h"], at["w"], -1]
        assert compared > 10

@pytest.mark.parametrize("name", [c for c, _ in _cases()])
def test_what_is_kept_for_a_dynamic_batch_is_proved_and_a_broken_correction_is_not(name: str) -> None:
    sub = dict(_cases())[name]
    kept = 0
    for fixed in _corrected(sub, 4, 4, 0.25, {}):
        if fixed.analysis.images != 1:
            continue
        small = probe(fixed.sub)
        m = {x.name: x for x in generate_mutants(small)}[fixed.mutant.name]
        fixes = list(fixed.fixes)
        assert proved_for_any_batch(small.graph, m.graph, fixes, BATCH_PROXY), fixed.mutant.name
        kept += 1
        if fixes:  # a box dropped, or moved one column, leaves a position read wrongly at some batch
            assert not proved_for_any_batch(small.graph, m.graph, fixes[1:], BATCH_PROXY)
            moved = [b[:3] + ((b[3][0] + 1, b[3][1] + 1),) if b[3][1] < small.graph.shapes[m.graph.outputs[0]][3]
                     else b[:3] + ((b[3][0] - 1, b[3][1] - 1),) for b in fixes]
            assert not proved_for_any_batch(small.graph, m.graph, moved, BATCH_PROXY)
    assert kept


def test_a_mutant_mixing_images_is_not_proved() -> None:
    """A fold puts two images side by side: at 4 images its seam's boxes are per image, not per batch, and
    the proof (whose boxes span the batch) refuses even the right boxes."""
    g = chain_graph(4, 4, 8, 8)
    sub = subprogram_of(g, g.nodes[0])
    small = probe(sub)
    m = {x.name: x for x in generate_mutants(small)}["batch_to_width(2) > conv2d > width_to_batch(2)"]
    from eqsat.rules.pet import analyse

    fixes = analyse(small.graph, m.graph).wrong
    assert fixes and not proved_for_any_batch(small.graph, m.graph, fixes, 4)
    spanning = [((0, 4), *b[1:]) for b in fixes]  # the seam's columns of both sides, in every image
    assert not proved_for_any_batch(small.graph, m.graph, spanning, 4)  # leading axes of 2: not 4 per image


def test_the_batch_scaling_is_checked_at_two_batches() -> None:
    g = residual_block(3, w=16)
    sub = chain_of(g, g.nodes[1])
    assert batch_scaling(probe(sub).graph, probe(at_batch(sub, 6)).graph) == 2
    wide = Graph(g.inputs, g.weights, g.nodes, g.outputs)
    other = residual_block(6, w=8)  # another width: not the same program at another batch
    assert batch_scaling(wide, other) is None
