"""Extraction under AutoGraph's mixed critical-path cost: two parallel convolutions merged into one kernel lower
the sum but lengthen the critical path, so the mixed cost keeps them apart; with one branch at a time both costs
agree; the model's span equals a topological longest-path recomputation, and the answer is optimal against brute
force on random e-graphs."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from eqsat.extract import (
    ParallelCost,
    extract_cpsat,
    extract_cpsat_parallel,
    load_egraph,
    parallel_cost_of,
    selection_critical_path,
    validate_selection,
)
from eqsat.extract.validate import InvalidExtraction

FAST = {"time_limit": 10.0, "num_workers": 2, "random_seed": 1}


def egraph(spec: dict[str, tuple[str, float, list[str]]], roots: list[str]) -> dict:
    """JSON dict from {node id: (class, cost, children node ids)}."""
    return {"nodes": {n: {"op": n, "cost": cost, "eclass": c, "children": kids} for n, (c, cost, kids) in spec.items()},
            "root_eclasses": roots}


#: out = conv1(x) + conv2(x); each conv is also a slice of one merged conv (cheaper than both, one longer kernel)
TWO_CONVS = egraph({
    "x": ("X", 0, []),
    "conv1": ("C1", 10, ["x"]), "slice1": ("C1", 0.5, ["merged"]),
    "conv2": ("C2", 10, ["x"]), "slice2": ("C2", 0.5, ["merged"]),
    "merged": ("M", 18.5, ["x"]),
    "add": ("OUT", 1, ["conv1", "conv2"]),
}, ["OUT"])


def test_the_sum_merges_two_parallel_convolutions_and_the_mixed_cost_keeps_them_apart() -> None:
    eg = load_egraph(TWO_CONVS)
    by_sum = extract_cpsat(eg, **FAST)
    assert by_sum.selection["C1"] == "slice1" and by_sum.cost == pytest.approx(20.5)
    mixed = extract_cpsat_parallel(eg, ParallelCost(alpha=0.25), **FAST)
    assert mixed.selection["C1"] == "conv1" and mixed.selection["C2"] == "conv2"
    assert mixed.status == "optimal"
    assert mixed.total == pytest.approx(21) and mixed.critical_path == pytest.approx(11)
    assert mixed.cost == pytest.approx(21 + 0.25 * 11)
    # the sum's choice under the mixed cost: 20.5 + 0.25 * 20
    assert parallel_cost_of(eg, by_sum.selection, ParallelCost()) == pytest.approx((25.5, 20.5, 20))


def test_with_one_branch_at_a_time_both_costs_agree() -> None:
    eg = load_egraph(TWO_CONVS)
    one = extract_cpsat_parallel(eg, ParallelCost(alpha=0.25, branches=1), **FAST)
    assert one.selection == extract_cpsat(eg, **FAST).selection
    assert one.cost == pytest.approx(1.25 * 20.5)
    # two at once: the span is at least half the total, and apart (21 / 2 = 10.5 < 11) still wins
    two = extract_cpsat_parallel(eg, ParallelCost(alpha=0.25, branches=2), **FAST)
    assert two.selection["C1"] == "conv1" and two.cost == pytest.approx(21 + 0.25 * 11)


def test_the_critical_path_is_the_longest_chain_of_a_selection() -> None:
    eg = load_egraph(TWO_CONVS)
    apart = {"OUT": "add", "C1": "conv1", "C2": "conv2", "X": "x"}
    assert selection_critical_path(eg, apart) == pytest.approx(11)
    assert selection_critical_path(eg, {**apart, "C1": "slice1", "M": "merged"}) == pytest.approx(20)
    with pytest.raises(InvalidExtraction):
        selection_critical_path(eg, {"OUT": "add"})


def _random_dag(rng: random.Random) -> dict:
    """A random e-graph whose classes are numbered so that a node's children are lower (no cycles)."""
    n = rng.randint(3, 7)
    spec = {}
    for c in range(n):
        for j in range(rng.randint(1, 3)):
            kids = [] if c == 0 or rng.random() < 0.25 else \
                [f"{d}.0" for d in rng.sample(range(c), rng.randint(1, min(3, c)))]
            spec[f"{c}.{j}"] = (str(c), round(rng.random() * 6, 3), kids)
    return egraph(spec, [str(n - 1)])


def _brute(data: dict, cost: ParallelCost) -> float:
    eg = load_egraph(data)
    classes: dict[str, list[str]] = {}
    for nid, node in data["nodes"].items():
        classes.setdefault(node["eclass"], []).append(nid)
    best = math.inf
    for combo in itertools.product(*classes.values()):
        sel = dict(zip(classes, combo, strict=True))
        try:
            total = validate_selection(eg, sel)
        except InvalidExtraction:
            continue
        best = min(best, cost.of(total, selection_critical_path(eg, sel)))
    return best


@pytest.mark.parametrize("branches", [None, 2])
def test_random_egraphs_are_extracted_optimally_and_the_models_span_is_the_critical_path(branches: int | None
                                                                                         ) -> None:
    rng = random.Random(7)
    cost = ParallelCost(alpha=0.5, branches=branches)
    for _ in range(25):
        data = _random_dag(rng)
        eg = load_egraph(data)
        ext = extract_cpsat_parallel(eg, cost, **FAST)
        total = validate_selection(eg, ext.selection)
        critical = selection_critical_path(eg, ext.selection)
        assert ext.total == pytest.approx(total) and ext.critical_path == pytest.approx(critical)
        assert ext.cost == pytest.approx(cost.of(total, critical))
        assert ext.cost == pytest.approx(_brute(data, cost), abs=1e-5)
        # the solver's own span (it returns its solution on a tie): the longest path of what it chose
        assert ext.status == "optimal" and ext.model_span is not None
        assert ext.model_span == pytest.approx(cost.span(total, critical), abs=1e-5)


def test_negative_costs_and_bad_parameters_are_refused() -> None:
    eg = load_egraph(egraph({"a": ("A", -1, [])}, ["A"]))
    with pytest.raises(ValueError, match="non-negative"):
        extract_cpsat_parallel(eg, **FAST)
    with pytest.raises(ValueError, match="alpha"):
        ParallelCost(alpha=-0.1)
    with pytest.raises(ValueError, match="branches"):
        ParallelCost(branches=0)
