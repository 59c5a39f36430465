"""The first answer (:mod:`eqsat.pipeline.descent`): graphs better than the input before the e-graph exists (the
sibling merges right after the import, the greedy descent while the engine starts), which are real graphs that
compute what the input computes, join the anytime trace, and are written and checked like any other."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import onnx
import pytest

from eqsat import engine, models, onnx_io
from eqsat.costs import get_cost_model, graph_cost
from eqsat.engine import Limits
from eqsat.ir.graph import Graph, TensorInfo, make_node
from eqsat.pipeline import OptimizeOptions, check_equal, default_rules, optimize
from eqsat.pipeline.anytime import Anytime
from eqsat.pipeline.descent import DESCENT, MERGES, Descent, first_merges
from eqsat.search import searches

ROOT = Path(__file__).resolve().parents[2]


def _small_bert() -> onnx.ModelProto:
    return models.taso_bert(seq=16, hidden=64, heads=4, layers=2)


def _pair() -> Graph:
    """Two products of one input: a pair, which the engine leaves to the two-output rules (its n-way merges are
    of three or more), and the first answer merges at once."""
    rng = np.random.default_rng(0)
    w = {"w1": rng.standard_normal((64, 32)).astype(np.float32),
         "w2": rng.standard_normal((64, 16)).astype(np.float32)}
    n = [make_node("matmul", {}, ["x", "w1"], "a"), make_node("matmul", {}, ["x", "w2"], "b"),
         make_node("relu", {}, ["a"], "ra"), make_node("relu", {}, ["b"], "rb")]
    return Graph((TensorInfo("x", (8, 64)),), w, tuple(n), ("ra", "rb")).validate()


def _same_outputs(a: Graph, b: Graph) -> None:
    """``b`` computes what ``a`` computes (the IR's numpy reference, on random inputs)."""
    rng = np.random.default_rng(1)
    feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in a.inputs}
    for x, y in zip(a.evaluate(feeds), b.evaluate(feeds), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("build", [_small_bert, lambda: models.taso_nasrnn(hidden=32, steps=2),
                                   lambda: onnx_io.to_onnx(_pair())], ids=["bert", "nasrnn", "pair"])
def test_sibling_merges_lower_the_cost_and_compute_what_the_input_computes(build) -> None:
    graph = onnx_io.load_model(build())
    cm = get_cost_model()
    merges = first_merges(graph, cm)
    assert merges is not None and merges.groups >= 1
    assert merges.cost == pytest.approx(graph_cost(merges.graph, cm), rel=1e-9)  # its cost as written
    assert merges.cost < graph_cost(graph, cm)
    assert sum(n.op == "matmul" for n in merges.graph.nodes) < sum(n.op == "matmul" for n in graph.nodes)
    _same_outputs(graph, merges.graph)
    assert onnx_io.to_onnx(merges.graph) is not None  # exportable


def test_the_engine_holds_the_merges_of_three_or_more_from_its_first_e_graph() -> None:
    """BERT's three projections of one input: the engine adds their merge to the e-graph before iteration 1, so
    the first answer's graph is a selection of the first snapshot, and extraction starts from it."""
    graph = onnx_io.load_model(_small_bert())
    cm = get_cost_model()
    anytime = Anytime(graph, cm, time.perf_counter())
    merges = first_merges(graph, cm)
    assert merges is not None and anytime.offer_graph(merges.graph, merges.cost, MERGES)
    snaps: list[engine.Snapshot] = []
    engine.saturate(graph, [], Limits(iter_limit=1), in_process=True, on_snapshot=snaps.append)
    assert snaps and snaps[0].iteration == 0
    assert anytime.attach(snaps[0].egraph) and anytime.best.egraph is snaps[0].egraph
    assert anytime.start_for(snaps[0].egraph) == anytime.best.selection


def test_descent_graphs_compute_what_the_input_computes_and_it_ends() -> None:
    graph = onnx_io.load_model(_small_bert())
    cm = get_cost_model()
    anytime = Anytime(graph, cm, time.perf_counter())
    offered: list[tuple[Graph, float]] = []
    offer = anytime.offer_graph

    def record(g: Graph, cost: float, source: str, found: float | None = None) -> bool:
        offered.append((g, cost))
        return offer(g, cost, source, found)

    anytime.offer_graph = record  # type: ignore[method-assign]
    descent = Descent(graph, default_rules(), cm, anytime)
    while descent.step():
        pass
    assert descent.done and descent.ended and descent.applied >= 1 and offered
    assert anytime.best.source == DESCENT and anytime.best.cost < anytime.cost_before
    for g, cost in offered:
        _same_outputs(graph, g)
        assert graph_cost(g, cm) == pytest.approx(cost, rel=1e-9)  # the cost offered is the graph's as written
    assert [c for _, c in anytime.trace[1:]] == [c for _, c in offered]  # each one cheaper than the one before
    assert [c for _, c in anytime.trace] == sorted((c for _, c in anytime.trace), reverse=True)


def test_descent_crosses_a_plateau_as_backtracking_does() -> None:
    """SqueezeNet: no single rewrite lowers the cost; backtracking's relaxation first unfuses the relus of two
    convolutions (free) and then takes one relu after their concatenation. The descent, once a pass finds nothing
    cheaper, takes rewrites that keep the cost (to graphs not seen before) and gets there too; its graph computes
    what the model computes (onnxruntime)."""
    model = models.taso_squeezenet()
    graph = onnx_io.load_model(model)
    cm = get_cost_model()
    anytime = Anytime(graph, cm, time.perf_counter())
    descent = Descent(graph, default_rules(), cm, anytime)
    while descent.step():
        pass
    assert descent.level_moves >= 2 and descent.applied >= 1
    assert anytime.best.source == DESCENT and anytime.best.cost < anytime.cost_before
    assert check_equal(model, onnx_io.to_onnx(anytime.best.graph)).ok


def test_descent_goes_down_as_far_as_backtracking_expanding_the_same_graph() -> None:
    """Backtracking moves once per graph it expands; the descent at each improving rewrite: from the same graph,
    what it finds is at or below the best graph of backtracking's first expansion."""
    graph = onnx_io.load_model(_small_bert())
    cm = get_cost_model()
    bt = searches.backtracking(graph, default_rules(), cm, expansions=1)
    assert len(bt.trace) > 1  # the premise: backtracking improves at its first expansion
    anytime = Anytime(graph, cm, time.perf_counter())
    descent = Descent(graph, default_rules(), cm, anytime)
    while descent.step():
        pass
    assert anytime.best.cost <= bt.cost * (1 + 1e-9)


def test_first_answer_comes_before_the_first_e_graph_at_or_below_backtrackings_first_improvement() -> None:
    """The first answer's time: the run has a graph below the input before the engine has reported its first
    e-graph (the progress lines are in order), and it is at or below the graph backtracking finds first."""
    model = _small_bert()
    lines: list[str] = []
    res = optimize(model, time_limit=4, iter_limit=2, progress=lines.append)
    first = next(k for k, line in enumerate(lines) if "best so far" in line)
    engine_first = next(k for k, line in enumerate(lines) if "iteration 0:" in line)
    assert MERGES in lines[first] and first < engine_first
    assert len(res.trace) > 1 and res.trace[1][1] < res.trace[0][1]
    graph = onnx_io.load_model(model)
    bt = searches.backtracking(graph, default_rules(), get_cost_model(), expansions=1)
    assert res.trace[1][1] <= bt.trace[1][1] * (1 + 1e-9)
    assert res.numeric is not None and res.numeric.ok


def test_a_first_answer_graph_the_e_graph_does_not_hold_is_written_and_checked() -> None:
    """A pair merge, with the e-graph kept to its input (iteration limit 0): the final extraction is the input
    graph, the first answer's graph is cheaper, so it is the one written, through the numeric check."""
    model = onnx_io.to_onnx(_pair())
    res = optimize(model, iter_limit=0, time_limit=10)
    assert not res.kept_original and res.best_source == MERGES
    assert res.cost_after < res.cost_before
    assert res.numeric is not None and res.numeric.ok
    assert any(MERGES in note for note in res.cost_notes)
    assert res.solver_status  # the e-graph's extraction is still reported
    plain = optimize(model, iter_limit=0, time_limit=10, first_answer=False)
    assert plain.kept_original and plain.best_source == "input"


def test_without_first_answer_nothing_is_found_before_the_e_graph() -> None:
    lines: list[str] = []
    res = optimize(_small_bert(), time_limit=4, iter_limit=2, first_answer=False, check=False, progress=lines.append)
    assert res.best_source not in (MERGES, DESCENT)
    assert not any(MERGES in line or "descent" in line for line in lines)


def test_first_answer_is_on_by_default_and_documented() -> None:
    assert OptimizeOptions().first_answer is True
    assert "first_answer" in (OptimizeOptions.__doc__ or "")
    assert "`first_answer`" in (ROOT / "docs" / "user-guide.md").read_text()
    assert "--no-first-answer" in (ROOT / "docs" / "cli.md").read_text()
