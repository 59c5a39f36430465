"""PET's seam correction fused into the main convolution (eqsat.rules.pet.mutants): two images folded side by
side with zero columns (or rows) between them, as wide as the convolution's pads, so the one convolution reads
zeros across the seam where the original reads its padding; the gap's outputs are dropped by a split. Exact, so
no correction kernel; a gap too narrow is found wrong on the seam, and chains and strided windows get no gap."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from _onnx_checks import assert_rewrites_compute_their_tensors

from eqsat.ir.graph import Graph, TensorInfo, make_node
from eqsat.onnx_io import to_onnx
from eqsat.rules.pet import analyse, check_equal, correct, find_rewrites, generate_mutants
from eqsat.rules.pet.mutants import Mutant, _gapped_batch_to, _gapped_to_batch
from eqsat.rules.pet.program import chain_of, subprogram_of


def conv(n: int = 2, c: int = 3, h: int = 8, w: int = 8, k: int = 3, pad: int = 1, dil: int = 1,
         stride: int = 1, residual: bool = False, seed: int = 0) -> Graph:
    """One convolution (with its ReLU), or one with its residual add of the input (``residual``)."""
    rng = np.random.default_rng(seed)
    o = c if residual else 4
    ws = {"w": rng.standard_normal((o, c, k, k)).astype(np.float32) * 0.3,
          "b": rng.standard_normal(o).astype(np.float32)}
    p = {"pads": (pad,) * 4, "dilations": (dil, dil), "strides": (stride, stride), "act": 1}
    node = (make_node("conv2d_add", p, ["x", "w", "b", "x"], "y") if residual
            else make_node("conv2d", p, ["x", "w", "b"], "y"))
    return Graph((TensorInfo("x", (n, c, h, w)),), ws, (node,), ("y",))


def gapped(op: str, axis: str, gap: int) -> str:
    return f"batch_to_{axis}_gapped(2,{gap}) > {op} > {axis}_gapped_to_batch(2,{gap})"


def _feeds(g: Graph) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(4).standard_normal(g.inputs[0].shape).astype(np.float32)}


@pytest.mark.parametrize("kw, gap", [(dict(), 1), (dict(k=5, pad=2, w=10), 2), (dict(dil=2, pad=2), 2),
                                     (dict(residual=True, c=4), 1)])
@pytest.mark.parametrize("axis", ["width", "height"])
def test_a_fold_with_a_gap_as_wide_as_the_pads_is_exact(kw: dict[str, int], gap: int, axis: str) -> None:
    g = conv(**kw)
    sub = subprogram_of(g, g.nodes[0])
    found = {m.name: m for m in generate_mutants(sub)}
    name = gapped(g.nodes[0].op, axis, gap)
    assert name in found, sorted(found)
    m = found[name]
    assert [n.op for n in m.graph.nodes][0] == "pad" and m.graph.nodes[-1].op == "split"
    assert analyse(sub.graph, m.graph).wrong == []  # equal everywhere: nothing to correct
    fixed = correct(sub, m)
    assert fixed.fixes == () and fixed.correction_flops == 0 and fixed.corrections == 0
    assert fixed.graph.nodes == m.graph.nodes  # no correction and no write-back
    assert check_equal(g, fixed.graph)
    np.testing.assert_allclose(fixed.graph.evaluate(_feeds(g))[0], g.evaluate(_feeds(g))[0], rtol=1e-4, atol=1e-4)


def test_a_gap_narrower_than_the_pads_is_wrong_on_the_seam_only() -> None:
    g = conv(k=5, pad=2, w=10)
    sub = subprogram_of(g, g.nodes[0])
    narrow = Mutant(_build(sub, _gapped_batch_to(3, 2, 1), _gapped_to_batch(3, 2, 1)), ("narrow",))
    wrong = analyse(sub.graph, narrow.graph).wrong
    assert wrong and not check_equal(g, narrow.graph)
    # the columns a 5x5 window reads across a one-column gap: each image's first and last
    assert {box[3] for box in wrong} <= {(0, 1), (9, 10)}
    assert check_equal(g, correct(sub, narrow).graph)  # and corrected there, it is exact


def _build(sub, fold, unfold) -> Graph:  # noqa: ANN001
    """The mutant fold > the window > unfold of ``sub``, written by hand (a gap the generator would not pick)."""
    g, x = sub.graph, sub.activation
    shape, nodes, cur = g.shapes[x], [], x
    for k, (op, p) in enumerate(fold.steps(shape)):
        nodes.append(make_node(op, p, [cur], f"f{k}"))
        cur = f"f{k}"
    w = sub.windows[0]
    nodes.append(make_node(w.op, w.p, [cur, *w.inputs[1:]], "c"))
    cur = "c"
    out_shape = Graph(g.inputs, g.weights, tuple(nodes), ("c",)).shapes["c"]
    steps = unfold.steps(out_shape)
    for k, (op, p) in enumerate(steps):
        dst = sub.output if k == len(steps) - 1 else f"u{k}"
        nodes.append(make_node(op, p, [cur], dst))
        cur = dst
    return Graph(g.inputs, g.weights, tuple(nodes), (sub.output,))


def test_no_gap_around_a_chain_or_a_strided_window() -> None:
    rng = np.random.default_rng(1)
    ws = {f"w{i}": rng.standard_normal((3, 3, 3, 3)).astype(np.float32) for i in (1, 2)}
    ws |= {f"b{i}": rng.standard_normal(3).astype(np.float32) for i in (1, 2)}
    nodes = (make_node("conv2d", {"pads": (1,) * 4, "act": 1}, ["x", "w1", "b1"], "h"),
             make_node("conv2d", {"pads": (1,) * 4}, ["h", "w2", "b2"], "y"))
    chain = Graph((TensorInfo("x", (2, 3, 8, 8)),), ws, nodes, ("y",))
    assert not any("gapped" in m.name for m in generate_mutants(chain_of(chain, chain.nodes[1])))
    strided = conv(stride=2)
    assert not any("gapped" in m.name for m in generate_mutants(subprogram_of(strided, strided.nodes[0])))
    unpadded = conv(pad=0)
    assert not any("gapped" in m.name for m in generate_mutants(subprogram_of(unpadded, unpadded.nodes[0])))


def test_the_search_keeps_it_without_a_correction_and_onnxruntime_runs_it_as_the_original() -> None:
    g = conv(n=4, residual=True, c=4)
    found = {r.name.removeprefix("pet:"): r for r in find_rewrites(g)}
    gap, plain = found[gapped("conv2d_add", "width", 1)], found["batch_to_width(2) > conv2d_add > width_to_batch(2)"]
    assert gap.fixes == 0 and gap.correction_flops == 0 and plain.fixes > 0
    assert len(gap.nodes) < len(plain.nodes)  # no correction kernels and no write-back
    assert_rewrites_compute_their_tensors(g, [gap], _feeds(g))
    nodes = tuple(m for n in g.nodes for m in (gap.nodes if n.output == gap.tensor else (n,)))
    written = to_onnx(Graph(g.inputs, g.weights, nodes, g.outputs).live())
    ops = [n.op_type for n in written.graph.node]
    assert ops[0] == "Pad" and ops[-1] == "Slice" and ops.count("Pad") == 1  # the residual is the padded input
    got = ort.InferenceSession(written.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, _feeds(g))
    np.testing.assert_allclose(got[0], g.evaluate(_feeds(g))[0], rtol=1e-4, atol=1e-4)
