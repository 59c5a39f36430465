"""AutoGraph's search as the baseline of inter-operator parallelism: pieces of fewer than 40 operators in
topological order, windows of adjacent pieces up to 120, backtracking under the mixed cost inside each window."""

from __future__ import annotations

import pytest

from eqsat import models, onnx_io
from eqsat.costs import AnalyticCostModel, graph_parallel_cost
from eqsat.extract import ParallelCost
from eqsat.pipeline.choices import default_rules
from eqsat.search.autograph import autograph, cut, windows


def test_pieces_follow_the_topological_order_and_windows_stay_within_the_upper_size() -> None:
    graph = onnx_io.load_model(models.taso_inception_v3())
    piece_of = cut(graph, 40)
    order = [piece_of[n.output] for n in graph.nodes]
    assert order == sorted(order) and max(order.count(p) for p in set(order)) < 40
    sizes = {p: order.count(p) for p in set(order)}
    pool = windows(piece_of, 120)
    assert {(p, p + 1) for p in sizes} <= set(pool)  # every piece alone
    for i, j in pool:
        assert j - i == 1 or sum(sizes[p] for p in range(i, j)) <= 120
    assert pool == sorted(pool)  # the dynamic program reads a window's start before it is used


def test_one_branch_at_a_time_makes_the_merge_pay_and_it_is_found() -> None:
    graph = onnx_io.load_model(models.two_matmul_shared_input())
    one = ParallelCost(branches=1)
    res = autograph(graph, default_rules(), AnalyticCostModel(), parallel=one, seconds=10)
    assert res.cost < res.original_cost and res.applied
    # its cost is the written graph's, recomputed on the IR
    assert res.cost == pytest.approx(graph_parallel_cost(res.graph, AnalyticCostModel(), one).mixed, rel=1e-9)
    assert [c for _, c in res.trace] == sorted((c for _, c in res.trace), reverse=True)


def test_any_number_of_branches_keeps_the_two_products_apart() -> None:
    graph = onnx_io.load_model(models.two_matmul_shared_input())
    res = autograph(graph, default_rules(), AnalyticCostModel(), parallel=ParallelCost(), seconds=10)
    assert res.cost == pytest.approx(res.original_cost) and not res.applied
