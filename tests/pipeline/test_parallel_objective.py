"""Optimizing for a runtime that runs independent operators at once (``parallel=N``): two products of one input
are merged into one under the sum of costs, kept apart under the mixed critical-path cost with two branches at
once, merged again with one; the report's figures are the written graph's, recomputed on the IR."""

from __future__ import annotations

import pytest

import eqsat
from eqsat.costs import AnalyticCostModel, graph_parallel_cost
from eqsat.extract import ParallelCost
from eqsat.models import two_matmul_shared_input


def _products(model: object) -> int:
    return sum(n.op_type in ("MatMul", "Gemm") for n in model.graph.node)  # type: ignore[attr-defined]


def test_the_sum_merges_two_branches_and_two_at_once_keep_them_apart() -> None:
    model = two_matmul_shared_input()
    by_sum = eqsat.optimize(model, time_limit=10, cache=False)
    assert _products(by_sum.model) == 1 and by_sum.parallel is None
    apart = eqsat.optimize(model, time_limit=10, cache=False, parallel=2)
    assert _products(apart.model) == 2 and apart.kept_original
    p = apart.parallel
    assert p is not None and p.branches == 2 and p.alpha == 0.25
    assert p.before.critical_path < p.before.total  # two branches: the longest chain is one of them
    assert apart.cost_before == pytest.approx(p.before.mixed) and "parallel execution" in apart.summary()
    # the merged graph is longer on its critical path: under the mixed cost it loses
    merged = graph_parallel_cost(by_sum.graph, AnalyticCostModel(), ParallelCost(branches=2))
    assert merged.total < p.before.total and merged.mixed > p.before.mixed


def test_one_branch_at_a_time_agrees_with_the_sum() -> None:
    one = eqsat.optimize(two_matmul_shared_input(), time_limit=10, cache=False, parallel=1)
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
