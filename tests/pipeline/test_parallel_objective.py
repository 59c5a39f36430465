"""Optimizing for a runtime that runs independent operators at once (``parallel=N``): two products of one input
are merged into one under the sum of costs, kept apart under the mixed critical-path cost with two branches at
once, merged again with one; the report's figures are the written graph's, recomputed on the IR."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import eqsat
from eqsat.costs import AnalyticCostModel, graph_parallel_cost
from eqsat.extract import ParallelCost
from eqsat.models import two_matmul_shared_input
from eqsat.pipeline import executors


def _products(model: object) -> int:
    return sum(n.op_type in ("MatMul", "Gemm") for n in model.graph.node)  # type: ignore[attr-defined]


def test_the_sum_merges_two_branches_and_two_at_once_keep_them_apart() -> None:
    model = two_matmul_shared_input()
    by_sum = eqsat.optimize(model, time_limit=10, cache=False)
    assert _products(by_sum.model) == 1 and by_sum.parallel is None
    apart = eqsat.optimize(model, time_limit=10, cache=False, parallel=2, verify_latency=False)
    assert _products(apart.model) == 2 and apart.kept_original
    p = apart.parallel
    assert p is not None and p.branches == 2 and p.alpha == 0.25
    assert p.before.critical_path < p.before.total  # two branches: the longest chain is one of them
    assert apart.cost_before == pytest.approx(p.before.mixed) and "parallel execution" in apart.summary()
    # the merged graph is longer on its critical path: under the mixed cost it loses
    merged = graph_parallel_cost(by_sum.graph, AnalyticCostModel(), ParallelCost(branches=2))
    assert merged.total < p.before.total and merged.mixed > p.before.mixed


def _two_convs(c: int = 16, k: int = 32, hw: int = 28) -> onnx.ModelProto:
    """Two 3x3 convolutions of one input, each through a ReLU, added: TASO's merge concatenates their kernels."""
    rng = np.random.default_rng(0)
    w = [numpy_helper.from_array(rng.standard_normal((k, c, 3, 3)).astype(np.float32) * 0.1, f"W{i}") for i in (1, 2)]
    nodes = [helper.make_node("Conv", ["x", "W1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "W2"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ra"]), helper.make_node("Relu", ["b"], ["rb"]),
             helper.make_node("Add", ["ra", "rb"], ["y"])]
    g = helper.make_graph(nodes, "two_convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, k, hw, hw])], w)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(("parallel", "convs"), [(None, 1), (1, 1), (2, 2)])
def test_two_parallel_convolutions_merged_by_the_sum_stay_apart_for_two_branches(parallel: int | None,
                                                                                 convs: int) -> None:
    res = eqsat.optimize(_two_convs(), time_limit=10, cache=False, parallel=parallel, verify_latency=False)
    assert sum(n.op_type == "Conv" for n in res.model.graph.node) == convs
    assert res.numeric is not None and res.numeric.ok


def test_one_branch_at_a_time_agrees_with_the_sum() -> None:
    one = eqsat.optimize(two_matmul_shared_input(), time_limit=10, cache=False, parallel=1, verify_latency=False)
    assert _products(one.model) == 1 and not one.kept_original
    assert one.parallel is not None
    assert one.parallel.after.mixed == pytest.approx(1.25 * one.parallel.after.total)
    assert one.to_dict()["parallel"]["after"]["critical_path"] == pytest.approx(one.parallel.after.critical_path)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_parallel_must_be_a_number_of_branches(bad: object) -> None:
    with pytest.raises(ValueError, match="parallel"):
        eqsat.optimize(two_matmul_shared_input(), parallel=bad)


def test_the_critical_path_weight_must_be_finite_and_not_negative() -> None:
    with pytest.raises(ValueError, match="critical_path_weight"):
        eqsat.optimize(two_matmul_shared_input(), parallel=2, critical_path_weight=-1.0)


def _rounds(**medians: float) -> dict[str, list[float]]:
    """Seven rounds per contender, near its median (ms), under the labels executors.race gives them."""
    names = {"orig_seq": "original, sequential", "orig_par": "original, parallel",
             "par": "optimized for parallel, parallel", "seq": "optimized for the sum, sequential"}
    return {names[k]: [v * (1 + 0.001 * r) for r in range(7)] for k, v in medians.items()}


def test_the_parallel_graph_is_written_with_its_session_options_only_where_that_executor_pays() -> None:
    pays = executors.decide(_rounds(orig_seq=10, orig_par=9, par=7, seq=9.5), 2, 1, 0.02)
    assert pays.written == "parallel" and pays.session_options == executors.session_options(2, 1)
    assert pays.speedup is not None and pays.speedup.median == pytest.approx(9 / 7, rel=1e-2)
    # faster than the original, but not than the sum's graph under the sequential executor
    slower = executors.decide(_rounds(orig_seq=10, orig_par=12, par=8, seq=7), 2, 1, 0.02)
    assert slower.written == "sequential" and not slower.session_options
    none = executors.decide(_rounds(orig_seq=10, orig_par=12, par=9.95, seq=10.01), 2, 1, 0.02)
    assert none.written == "original" and none.speedup is None and "either executor" in none.verdict
    assert executors.decide(_rounds(orig_seq=10, orig_par=12), 2, 1, 0.02).written == "original"


def test_session_options_are_recorded_in_the_metadata_once() -> None:
    model = two_matmul_shared_input()
    once = executors.with_session_options(model, {"inter_op_num_threads": 2})
    twice = executors.with_session_options(once, executors.session_options(4, 0))
    found = [p for p in twice.metadata_props if p.key == executors.SESSION_OPTIONS_KEY]
    assert len(found) == 1 and json.loads(found[0].value)["inter_op_num_threads"] == 4
    assert not [p for p in model.metadata_props if p.key == executors.SESSION_OPTIONS_KEY]


def test_a_run_for_the_parallel_executor_races_both_executors_and_writes_what_won() -> None:
    res = eqsat.optimize(two_matmul_shared_input(), time_limit=10, cache=False, parallel=2)
    p = res.parallel
    assert p is not None and p.executors and "original, parallel" in p.medians
    written = {p.key: p.value for p in res.model.metadata_props}
    if p.session_options:  # the parallel graph won: it says how to run it
        assert json.loads(written[executors.SESSION_OPTIONS_KEY])["execution_mode"] == "ORT_PARALLEL"
    else:
        assert executors.SESSION_OPTIONS_KEY not in written
    assert res.numeric is not None and res.numeric.ok
    skipped = eqsat.optimize(two_matmul_shared_input(), time_limit=10, cache=False, parallel=2, verify_latency=False)
    assert skipped.parallel is not None and not skipped.parallel.executors


def test_a_noisy_sum_graph_with_a_lower_median_does_not_knock_out_a_measurable_parallel_win() -> None:
    rounds = _rounds(orig_seq=10, orig_par=11, par=7)
    rounds["optimized for the sum, sequential"] = [6.5, 9.0, 6.5, 9.0, 6.5, 9.0, 6.5]  # median 6.5, not measurable
    assert executors.decide(rounds, 2, 1, 0.02).written == "parallel"


def test_a_graph_the_sum_chose_is_never_written_at_fixed_sizes_nobody_chose(monkeypatch: pytest.MonkeyPatch
                                                                            ) -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
    from test_contrib_ops import _attention_beside_products  # a model whose dynamic axes cannot be kept

    model = _attention_beside_products(
        [helper.make_node("Concat", [f"{t}a", f"{t}e"], [t], axis=-1) for t in "qkv"],
        [*(helper.make_tensor_value_info(f"{t}a", TensorProto.FLOAT, [2, 5, "d"]) for t in "qkv"),
         *(helper.make_tensor_value_info(f"{t}e", TensorProto.FLOAT, [2, 5, 16]) for t in "qkv")], [2, 5, None])
    real = executors.decide

    def sum_graph_wins(rounds: dict, *args: object) -> executors.ExecutorRace:
        if "optimized for the sum, sequential" in rounds:
            return executors.ExecutorRace("sequential", "the sum's graph won", {})
        return real(rounds, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(executors, "decide", sum_graph_wins)
    res = eqsat.optimize(model, dims={"d": 16}, time_limit=30, parallel=2, cache=False)
    assert res.static_reason and res.kept_original and not res.signature_changes


def test_an_earlier_runs_session_options_are_not_carried_onto_a_graph_this_run_did_not_time_so() -> None:
    marked = executors.with_session_options(two_matmul_shared_input(), executors.session_options(2, 1))
    res = eqsat.optimize(marked, time_limit=10, cache=False)
    assert not res.kept_original
    assert executors.SESSION_OPTIONS_KEY not in {p.key for p in res.model.metadata_props}
    assert executors.with_session_options(marked, None).metadata_props == two_matmul_shared_input().metadata_props


def test_one_branch_runs_no_race() -> None:
    res = eqsat.optimize(two_matmul_shared_input(), time_limit=10, cache=False, parallel=1)
    assert res.parallel is not None and not res.parallel.executors and "executors" not in res.stage_seconds
