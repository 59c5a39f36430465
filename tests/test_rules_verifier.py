"""Tests of the Z3 verifier: axiom validation by symbolic execution, rule entailment, redundancy."""

from __future__ import annotations

import pytest

from eqsat.rules import axioms as A
from eqsat.rules import verifier as V


@pytest.mark.parametrize("ax", A.AXIOMS, ids=lambda a: a.name)
def test_axiom_is_valid(ax: A.Axiom) -> None:
    res = V.validate_axiom(ax, cases=2)
    assert res.status == "valid", (res.name, res.reason)
    assert res.cases >= 1


def test_planted_wrong_axiom_is_rejected() -> None:
    res = V.validate_axiom(A.PLANTED_WRONG)
    assert res.status == "invalid", res


def test_wrong_broadcasting_axiom_is_rejected() -> None:
    wrong = A.Axiom("bad-transpose", "(transpose [1 0] (matmul ?a ?b))", "(matmul (transpose [1 0] ?a) "
                    "(transpose [1 0] ?b))")
    assert V.validate_axiom(wrong).status == "invalid"


def test_rules_are_proved_from_axioms() -> None:
    assert V.verify_equation(["(matmul ?x (matmul ?w1 ?w2))"], ["(matmul (matmul ?x ?w1) ?w2)"], 10).status == "proved"
    fused = V.verify_equation(
        ["(matmul ?x ?w1)", "(matmul ?x ?w2)"],
        ["(split 1 0 (dim ?w1 1) (matmul ?x (concat 1 ?w1 ?w2)))",
         "(split 1 (dim ?w1 1) (dim ?w2 1) (matmul ?x (concat 1 ?w1 ?w2)))"], 10)
    assert fused.status == "proved", fused


def test_unentailed_rule_is_not_proved() -> None:
    v = V.verify_equation(["(relu ?x)"], ["?x"], 2)
    assert v.status in ("unknown", "refuted")


def test_redundancy_check_finds_a_duplicate_axiom() -> None:
    subset = [a for a in A.AXIOMS if a.name in ("ewadd-comm", "ewadd-assoc")]
    dup = A.Axiom("ewadd-assoc-other-way", "(ewadd ?a (ewadd ?b ?c))", "(ewadd (ewadd ?a ?b) ?c)")
    found = V.redundant_axioms(subset + [dup], timeout=5)
    assert "ewadd-assoc-other-way" in found or "ewadd-assoc" in found
    assert "ewadd-comm" not in found
