"""Anytime optimization: snapshots of the saturating e-graph, the best graph so far carried from one e-graph to
the next, and the trace of (seconds, best cost) that ``optimize`` reports."""

from __future__ import annotations

import itertools
import time

import numpy as np
import onnx
import pytest

from eqsat import engine
from eqsat.costs import CostModel, get_cost_model, graph_cost
from eqsat.engine import EClass, EGraph, ENode, Limits, Snapshot
from eqsat.extract import extract_greedy, validate_selection
from eqsat.ir.graph import Graph, TensorInfo, make_node
from eqsat.ops import CostKey
from eqsat.pipeline import optimize
from eqsat.pipeline.anytime import Anytime, price_nodes
from eqsat.rules.starter import STARTER_RULES


def _two_matmuls() -> Graph:
    rng = np.random.default_rng(0)
    w = {"w1": rng.standard_normal((64, 32)).astype(np.float32),
         "w2": rng.standard_normal((64, 16)).astype(np.float32)}
    n = [make_node("matmul", {}, ["x", "w1"], "a"), make_node("matmul", {}, ["x", "w2"], "b"),
         make_node("relu", {}, ["a"], "ra"), make_node("relu", {}, ["b"], "rb")]
    return Graph((TensorInfo("x", (8, 64)),), w, tuple(n), ("ra", "rb")).validate()


class _ByOp(CostModel):
    """Costs by operator name only: enough to make a chosen form cheaper or costlier."""

    name = "by-op"

    def __init__(self, costs: dict[str, float]) -> None:
        self.table = costs

    def cost(self, key: CostKey) -> float:
        return self.table.get(key.op, 1.0)


# ------------------------------------------------------------------------------------------------ engine


@pytest.mark.parametrize("in_process", [True, False])
def test_saturation_sends_snapshots_from_iteration_0_whose_terms_the_final_egraph_holds(in_process: bool) -> None:
    snaps: list[Snapshot] = []
    res = engine.saturate(_two_matmuls(), STARTER_RULES, Limits(iter_limit=4), in_process=in_process,
                          on_snapshot=snaps.append)
    assert snaps and snaps[0].iteration == 0
    its = [s.iteration for s in snaps]
    assert its == sorted(set(its)) and its[-1] <= len(res.iterations) - 1
    assert [s.seconds for s in snaps] == sorted(s.seconds for s in snaps)
    if in_process:  # in process every iteration that changed the e-graph is sent
        assert len(snaps) >= 2
    final = res.egraph
    for snap in snaps:
        ext = extract_greedy(snap.egraph.with_costs(price_nodes(snap.egraph, get_cost_model())).serialized)
        moved = engine.relocate_selection(snap.egraph, ext.selection, final)
        assert moved is not None
        costed = final.with_costs(price_nodes(final, get_cost_model())).serialized
        assert validate_selection(costed, moved) <= ext.cost + 1e-9


def test_without_a_consumer_no_snapshot_is_taken_in_process() -> None:
    res = engine.saturate(_two_matmuls(), STARTER_RULES, Limits(iter_limit=2), in_process=True)
    assert res.iterations[-1].iteration >= 1  # the run itself is unchanged


def test_relocating_a_selection_into_an_egraph_without_its_terms_gives_none() -> None:
    g = _two_matmuls()
    res = engine.saturate(g, STARTER_RULES, Limits(iter_limit=2), in_process=True)
    terms = engine.input_terms(res.egraph, g)
    other = engine.saturate(_one_matmul(), [], Limits(iter_limit=0), in_process=True)  # other weights
    assert engine.relocate_selection(res.egraph, dict(terms.selection), other.egraph) is None


def _one_matmul() -> Graph:
    rng = np.random.default_rng(1)
    w = {"w1": rng.standard_normal((64, 32)).astype(np.float32)}
    n = [make_node("matmul", {}, ["x", "w1"], "a"), make_node("relu", {}, ["a"], "ra")]
    return Graph((TensorInfo("x", (8, 64)),), w, tuple(n), ("ra",)).validate()


# ------------------------------------------------------------------------------------------------ Anytime


def _greedy_trap() -> tuple[Graph, EGraph]:
    """An input graph sharing a matmul between two outputs, and an e-graph where greedy, which prices each
    e-class on its own, swaps the relu of one output for a sigmoid that avoids the matmul: cheaper for that
    e-class alone, costlier for the graph, which still needs the matmul for the other output."""
    rng = np.random.default_rng(0)
    w = {"w": rng.standard_normal((32, 32)).astype(np.float32)}
    nodes = (make_node("matmul", {}, ["x", "w"], "a"), make_node("relu", {}, ["a"], "y1"),
             make_node("tanh", {}, ["a"], "y2"))
    graph = Graph((TensorInfo("x", (8, 32)),), w, nodes, ("y1", "y2")).validate()
    enodes = [ENode("n-x", "Input", (("name", "x"),), (), "X"), ENode("n-w", "Weight", (("name", "w"),), (), "W"),
              ENode("n-mm", "matmul", (), ("X", "W"), "A"), ENode("n-relu", "relu", (), ("A",), "Y1"),
              ENode("n-sig", "sigmoid", (), ("X",), "Y1"), ENode("n-tanh", "tanh", (), ("A",), "Y2")]
    shapes = {"X": (8, 32), "W": (32, 32), "A": (8, 32), "Y1": (8, 32), "Y2": (8, 32)}
    classes = {c: EClass(c, "T", s) for c, s in shapes.items()}
    return graph, EGraph.build(enodes, classes, ("Y1", "Y2"))


def test_greedy_costlier_than_the_input_never_replaces_it() -> None:
    graph, eg = _greedy_trap()
    cm = _ByOp({"matmul": 10.0, "relu": 1.0, "tanh": 1.0, "sigmoid": 3.0})
    costed = eg.with_costs(price_nodes(eg, cm)).serialized
    assert extract_greedy(costed).cost == 14.0  # the premise: greedy alone picks the sigmoid (3 + 10 + 1)
    anytime = Anytime(graph, cm, time.perf_counter())
    assert anytime.cost_before == 12.0
    ext = anytime.greedy(eg, costed, {}, "greedy", None)  # no warm start: greedy's graph is offered, and refused
    assert ext is not None and ext.cost == 14.0
    assert anytime.best.source == "input" and anytime.trace == anytime.trace[:1]
    start = dict(engine.input_terms(eg, graph).selection)
    ext = anytime.greedy(eg, costed, {}, "greedy", start)  # with the input as warm start, greedy returns it
    assert ext is not None and ext.cost == 12.0 and ext.status == "start"
    assert anytime.best.cost == 12.0 and len(anytime.trace) == 1


def test_a_cheaper_graph_is_kept_and_traced_and_carried_to_a_later_egraph() -> None:
    graph, eg = _greedy_trap()
    cm = _ByOp({"matmul": 10.0, "relu": 5.0, "tanh": 1.0, "sigmoid": 0.5})
    anytime = Anytime(graph, cm, time.perf_counter())
    costed = eg.with_costs(price_nodes(eg, cm)).serialized
    anytime.greedy(eg, costed, {}, "greedy, iteration 1", None)
    assert anytime.best.cost == 11.5 and anytime.best.source == "greedy, iteration 1"
    (t0, c0), (t1, c1) = anytime.trace
    assert c0 == 16.0 and c1 == 11.5 and 0 <= t0 <= t1
    assert anytime.start_for(eg) == {"Y1": "n-sig", "Y2": "n-tanh", "A": "n-mm", "X": "n-x", "W": "n-w"}
    # a later e-graph (ids renamed, one more e-node) holds the same terms: the best moves there
    later = EGraph.build([n._replace(id="m" + n.id, eclass="c" + n.eclass,
                                     children=tuple("c" + k for k in n.children)) for n in eg.nodes]
                         + [ENode("m-extra", "relu", (), ("cX",), "cY2")],
                         {"c" + c.id: c._replace(id="c" + c.id) for c in eg.classes}, ("cY1", "cY2"))
    moved = anytime.start_for(later)
    assert moved is not None and moved["cY1"] == "mn-sig"
    assert validate_selection(later.with_costs(price_nodes(later, cm)).serialized, moved) == 11.5
    assert not anytime.offer(later, moved, {}, "again")  # the same cost is no improvement
    assert len(anytime.trace) == 2


def test_the_stage_snapshot_gets_cpsat_for_the_stage_seconds_and_the_others_for_exact_seconds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    graph, eg = _greedy_trap()
    calls: list[tuple[float, bool]] = []
    monkeypatch.setattr(Anytime, "exact", lambda self, egraph, costed, names, source, seconds, stage=False:
                        calls.append((seconds, stage)))
    anytime = Anytime(graph, _ByOp({"matmul": 10.0}), time.perf_counter(), exact_seconds=0.5, stage_seconds=4.0)
    anytime.on_snapshot(Snapshot(1, eg, 0.0, {}))
    anytime.on_snapshot(Snapshot(2, eg, 0.0, {}, stage=True))
    anytime.on_snapshot(Snapshot(3, eg, 0.0, {}))
    assert calls == [(0.5, False), (4.0, True), (0.5, False)]
    assert anytime.snapshots == 3


# ------------------------------------------------------------------------------------------------ optimize


def _check_trace(trace: list[tuple[float, float]], before: float, total: float) -> None:
    assert trace[0][1] == pytest.approx(before, rel=1e-12)
    assert trace[0][0] == 0.0  # the input is the answer until a better graph is found
    assert all(t0 <= t1 for (t0, _), (t1, _) in itertools.pairwise(trace))
    assert all(c1 < c0 for (_, c0), (_, c1) in itertools.pairwise(trace))  # one point per improvement
    assert trace[-1][0] <= total


def test_optimize_reports_a_monotone_trace_from_the_input_cost() -> None:
    t = time.perf_counter()
    res = optimize(_bert_like(), time_limit=20, check=False)
    total = time.perf_counter() - t
    _check_trace(res.trace, res.cost_before, total)
    assert len(res.trace) >= 2 and res.trace[-1][1] == pytest.approx(res.cost_after, rel=1e-9)
    assert res.best_source and res.seconds_to_best == res.trace[-1][0]
    assert "best found" in res.summary()


def test_without_anytime_only_the_final_extraction_is_traced() -> None:
    res = optimize(_bert_like(), time_limit=20, check=False, anytime=False)
    _check_trace(res.trace, res.cost_before, 60)
    assert len(res.trace) == 2 and res.best_source == "cpsat"
    with_anytime = optimize(_bert_like(), time_limit=20, check=False)
    assert with_anytime.cost_after <= res.cost_after * (1 + 1e-9)


def _bert_like() -> onnx.ModelProto:
    """Two matmuls sharing an input, each with a relu: the merged matmul is cheaper (one kernel launch)."""
    from eqsat.onnx_io import to_onnx

    return to_onnx(_two_matmuls())


def test_input_graph_cost_is_the_graph_cost_as_written() -> None:
    g = _two_matmuls()
    assert Anytime(g, get_cost_model(), time.perf_counter()).cost_before == graph_cost(g, get_cost_model())


def test_cli_no_anytime_extracts_the_final_egraph_only(tmp_path, capsys) -> None:
    from eqsat.cli.app import main

    src = tmp_path / "m.onnx"
    onnx.save(_bert_like(), str(src))
    assert main(["optimize", str(src), "-o", str(tmp_path / "a.onnx"), "-q", "--time-limit", "20",
                 "--no-first-answer"]) == 0  # (else the sibling merges find this model's best before any snapshot)
    with_anytime = capsys.readouterr().out
    assert main(["optimize", str(src), "-o", str(tmp_path / "b.onnx"), "-q", "--time-limit", "20",
                 "--no-anytime"]) == 0
    without = capsys.readouterr().out
    row = [line for line in without.splitlines() if line.startswith("best found")]
    assert row and "(cpsat)" in row[0] and "1 improvement(s)" in row[0]
    assert "best found" in with_anytime and "iteration" in next(
        line for line in with_anytime.splitlines() if line.startswith("best found"))
