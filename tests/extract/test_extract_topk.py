"""Top-k extraction: distinct valid selections in cost order, the same as an exhaustive enumeration."""

from __future__ import annotations

import itertools
import random

import pytest
from test_extract import egraph, random_egraph

from eqsat.extract import extract_cpsat, extract_top_k, load_egraph, validate_selection
from eqsat.extract.validate import InvalidExtraction

FAST = {"time_limit": 10.0, "num_workers": 2, "random_seed": 1}


def costed(eg, selection: dict[str, str]) -> frozenset[str]:
    """The costed nodes of a selection (what makes two selections different graphs)."""
    return frozenset(n for n in selection.values() if eg.node_cost[eg.node_index[n]] != 0)


def exhaustive_top_k(eg, k: int, within: float) -> list[float]:
    """The costs the no-good-cut sequence must give: each time the cheapest selection that does not keep every
    costed node of an earlier one, within ``within`` of the best."""
    classes = list(eg.class_ids)
    options = [[eg.node_ids[n] for n in eg.class_nodes[eg.class_index[c]]] for c in classes]
    sets: dict[frozenset[str], float] = {}
    for combo in itertools.product(*options):
        full = dict(zip(classes, combo, strict=True))
        try:
            validate_selection(eg, full)
        except InvalidExtraction:
            continue
        reach = _reachable(eg, full)
        sel = {c: full[c] for c in reach}
        sets[costed(eg, sel)] = validate_selection(eg, sel)
    if not sets:
        return []
    best = min(sets.values())
    chosen: list[frozenset[str]] = []
    costs = []
    while len(costs) < k:
        left = [(c, s) for s, c in sets.items() if not any(s >= t for t in chosen)
                and c <= best * (1 + within) + 1e-9]
        if not left:
            break
        c, s = min(left, key=lambda cs: cs[0])
        chosen.append(s)
        costs.append(c)
    return costs


def _reachable(eg, full: dict[str, str]) -> set[str]:
    seen = set(eg.root_classes)
    stack = list(seen)
    while stack:
        c = stack.pop()
        for d in eg.child_classes(full[c]):
            if d not in seen:
                seen.add(d)
                stack.append(d)
    return seen


def test_top_k_on_a_diamond_lists_alternatives_in_cost_order() -> None:
    # root r = f(a) or g(b); a and b each have two implementations
    eg = load_egraph(egraph({"f": ("r", 1, ["a1"]), "g": ("r", 2, ["b1"]),
                             "a1": ("a", 3, []), "a2": ("a", 5, []),
                             "b1": ("b", 1, []), "b2": ("b", 4, [])}, ["r"]))
    res = extract_top_k(eg, 10, within=10.0, **FAST)
    assert [e.cost for e in res] == [3.0, 4.0, 6.0, 6.0]
    assert len({frozenset(e.selection.items()) for e in res}) == len(res)
    for e in res:
        assert validate_selection(eg, e.selection) == pytest.approx(e.cost)
    assert res[0].cost == extract_cpsat(eg, **FAST).cost


def test_within_bounds_the_alternatives() -> None:
    eg = load_egraph(egraph({"f": ("r", 1, ["a1"]), "g": ("r", 2, ["b1"]),
                             "a1": ("a", 3, []), "a2": ("a", 5, []),
                             "b1": ("b", 1, []), "b2": ("b", 4, [])}, ["r"]))
    assert [e.cost for e in extract_top_k(eg, 10, within=0.4, **FAST)] == [3.0, 4.0]
    assert [e.cost for e in extract_top_k(eg, 1, **FAST)] == [3.0]


def test_top_k_progress_names_each_extraction() -> None:
    eg = load_egraph(egraph({"f": ("r", 1, ["a1"]), "g": ("r", 2, ["b1"]),
                             "a1": ("a", 3, []), "a2": ("a", 5, []),
                             "b1": ("b", 1, []), "b2": ("b", 4, [])}, ["r"]))
    lines: list[str] = []
    extract_top_k(eg, 2, within=0.4, progress=lines.append, **FAST)
    assert any(line.startswith("cpsat: done, cost 3 (optimal") for line in lines), lines
    assert lines[-1].startswith("cpsat: extraction 2 of up to 2: cost 4,"), lines


def test_free_nodes_do_not_make_a_different_candidate() -> None:
    # two zero-cost forms of the leaf: the same graph as far as cost and runtime go
    eg = load_egraph(egraph({"f": ("r", 2, ["z1"]), "z1": ("z", 0, []), "z2": ("z", 0, []),
                             "g": ("r", 3, [])}, ["r"]))
    res = extract_top_k(eg, 5, within=10.0, **FAST)
    assert [e.cost for e in res] == [2.0, 3.0]


def test_top_k_matches_exhaustive_enumeration() -> None:
    tested = 0
    for seed in range(400):
        eg = load_egraph(random_egraph(random.Random(seed), floats=seed % 2 == 1))
        expected = exhaustive_top_k(eg, 4, within=0.5)
        if len(expected) < 2:  # nothing to rank
            continue
        tested += 1
        res = extract_top_k(eg, 4, within=0.5, **FAST)
        assert [e.cost for e in res] == pytest.approx(expected), seed
        sets = [costed(eg, e.selection) for e in res]
        for i, s in enumerate(sets):  # none keeps every costed node of an earlier one
            assert not any(s >= t for t in sets[:i]), seed
    assert tested >= 20


def test_bad_arguments_are_refused() -> None:
    eg = load_egraph(egraph({"a": ("r", 1, [])}, ["r"]))
    with pytest.raises(ValueError, match="k must be"):
        extract_top_k(eg, 0)
    with pytest.raises(ValueError, match="within"):
        extract_top_k(eg, 2, within=-0.1)
