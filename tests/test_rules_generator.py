"""Tests of the TASO-style rule generator at N = 2 (N = 3 runs in the CLI and benchmark)."""

from __future__ import annotations

import pytest

from eqsat.rules import generator as gen


@pytest.fixture(scope="module")
def n2() -> tuple[list[gen.Candidate], gen.GenerationReport]:
    return gen.generate(max_ops=2, workers=2)


def _texts(cands: list[gen.Candidate]) -> set[str]:
    return {c.text() for c in cands}


def test_stage_counts_shrink(n2: tuple[list[gen.Candidate], gen.GenerationReport]) -> None:
    _, rep = n2
    counts = [n for _, n in rep.table()[3:]]
    assert rep.graphs > 1000 and rep.buckets > 100
    assert all(a >= b for a, b in zip(counts, counts[1:], strict=False)), rep.table()
    assert rep.after_renaming < rep.candidates and rep.after_common_subgraph < rep.after_renaming


def _ops(text: str) -> list[str]:
    import re

    return re.findall(r"\((\w+)", text)


def test_finds_classic_two_op_rules(n2: tuple[list[gen.Candidate], gen.GenerationReport]) -> None:
    texts = _texts(n2[0])
    assert any(_ops(t) == ["matmul"] * 4 for t in texts)  # associativity
    assert any(_ops(t) == ["relu", "conv2d", "conv2d"] and " 1 ?i1 " in t.split("=>")[1] for t in texts)
    assert any(t.endswith("=> ?x1") and _ops(t) == ["transpose", "transpose"] for t in texts)
    assert any(_ops(t) == ["split", "dim", "concat"] for t in texts)
    assert any("const_pool" in t and "avgpool" in t for t in texts)
    assert any(_ops(t) == ["ewadd", "ewadd"] for t in texts)  # commutativity


def test_candidates_are_numerically_equal(n2: tuple[list[gen.Candidate], gen.GenerationReport]) -> None:
    for c in n2[0]:
        assert gen.check_numeric(c.lhs, c.rhs, shape_sets=(0, 1, 2)) is None, c.text()


def test_generalisation_check_drops_unsound_rules(n2: tuple[list[gen.Candidate], gen.GenerationReport]) -> None:
    # adding I_matmul sized from one operand is only right when both operands are square and equal-sized
    reasons = [r for _, r in n2[1].dropped]
    assert any(r.startswith("general") for r in reasons)
    bad = gen.check_numeric(["(ewadd ?w1 (ewadd ?w2 (const_imatmul (dim ?w2 0))))"],
                            ["(ewadd (ewadd ?w1 ?w2) (const_imatmul (dim ?w1 0)))"], shape_sets=(1,),
                            random_shapes=40, seed=3)
    assert bad is not None


def test_fingerprint_is_output_order_independent() -> None:
    a = gen.GraphRecord(("x", "y"), (3, 5), (), 2, "mat")
    b = gen.GraphRecord(("y", "x"), (5, 3), (), 2, "mat")
    assert a.fingerprint == b.fingerprint


def test_work_units_are_independent_and_deterministic() -> None:
    units = gen.work_units(2, domains=("mat",))
    assert units[0].first == -1 and len(units) > 10
    r1, _ = gen.run_unit(units[3])
    r2, _ = gen.run_unit(units[3])
    assert [g.outputs for g in r1] == [g.outputs for g in r2] and r1


def test_canonical_renaming_merges_renamed_rules() -> None:
    c1 = gen.Candidate(("(matmul ?w2 ?w1)",), ("(matmul ?w2 ?w1)",), 1, 1, "mat")
    c2 = gen.Candidate(("(matmul ?w1 ?w3)",), ("(matmul ?w1 ?w3)",), 1, 1, "mat")
    assert gen.canonical(c1).text() == gen.canonical(c2).text() == "(matmul ?w1 ?w2) => (matmul ?w1 ?w2)"


def test_pruning_predicates() -> None:
    shared = gen.Candidate(("(relu (matmul ?x1 ?w1))",), ("(matmul ?x1 ?w1)",), 2, 1, "mat",
                           ("(matmul ?x1 ?w1)", "(relu (matmul ?x1 ?w1))"), ("(matmul ?x1 ?w1)",))
    assert gen.common_subgraph(shared)
    sup = gen.Candidate(("(relu (transpose [1 0] (transpose [1 0] ?x1)))",), ("(relu ?x1)",), 3, 1, "mat")
    assert gen.common_supergraph(sup)
    multi = gen.Candidate(("(matmul ?x1 ?w1)", "(matmul ?x1 ?w2)"),
                          ("(split 1 0 (dim ?w1 1) (matmul ?x1 (concat 1 ?w1 ?w2)))",
                           "(split 1 (dim ?w1 1) (dim ?w2 1) (matmul ?x1 (concat 1 ?w1 ?w2)))"), 2, 3, "mat")
    assert gen.orient_multi(multi) is multi
    flipped = gen.Candidate(multi.rhs, multi.lhs, 3, 2, "mat")
    assert gen.orient_multi(flipped).lhs == multi.lhs
