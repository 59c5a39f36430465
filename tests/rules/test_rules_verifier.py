"""Tests of the Z3 verifier: axiom validation by symbolic execution, rule entailment, redundancy."""

from __future__ import annotations

import numpy as np
import pytest

from eqsat.ir.rule import eval_param, evaluate, parse
from eqsat.rules import axioms as A
from eqsat.rules import verifier as V
from eqsat.rules.validation import param_combos

#: axioms whose symbolic validation takes 0.6 s or more (reshapes of many-element tensors, grouped convolutions,
#: convolutions of every listed stride, pads and activation)
SLOW_AXIOMS = {"clip-reshape", "gelu-reshape", "reshape-reshape", "conv-group-merge", "smul-reshape", "tanh-reshape",
               "sigmoid-reshape", "transpose-ones", "conv-group-merge-any", "conv-concat-out-any", "conv-merge-gconv"}


@pytest.mark.parametrize("ax", [pytest.param(a, marks=pytest.mark.slow) if a.name in SLOW_AXIOMS else a
                                for a in A.AXIOMS], ids=lambda a: a.name)
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
    # a budget a tenth of the default: what is not entailed stays unproved at any budget
    v = V.verify_equation(["(relu ?x)"], ["?x"], 2, rlimit=500_000)
    assert v.status in ("unknown", "refuted")


def test_redundancy_check_finds_a_duplicate_axiom() -> None:
    subset = [a for a in A.AXIOMS if a.name in ("ewadd-comm", "ewadd-assoc")]
    dup = A.Axiom("ewadd-assoc-other-way", "(ewadd ?a (ewadd ?b ?c))", "(ewadd (ewadd ?a ?b) ?c)")
    # a small budget (Z3 resource units, reproducible): the duplicate is found well within it
    found = V.redundant_axioms(subset + [dup], timeout=5, rlimit=200_000)
    assert "ewadd-assoc-other-way" in found or "ewadd-assoc" in found
    assert "ewadd-comm" not in found


def test_rank3_transposes_and_reshapes_are_proved() -> None:
    # a parameter variable (the reshape's target) is quantified: the rule is proved for every target
    assert V.verify_equation(["(smul (reshape ?r ?m) ?s)"], ["(reshape ?r (smul ?m ?s))"]).status == "proved"
    assert V.verify_equation(["(transpose [0 2 1] (transpose [1 0 2] ?q))"],
                             ["(transpose [1 2 0] ?q)"]).status == "proved"
    assert V.verify_equation(["(transpose [2 0 1] (transpose [1 2 0] ?q))"], ["?q"]).status == "proved"
    # a wrong composition and a transpose that does not swap a matmul's last axes are not proved
    assert V.verify_equation(["(transpose [0 2 1] (transpose [1 0 2] ?q))"], ["(transpose [2 0 1] ?q)"],
                             rlimit=500_000).status != "proved"
    assert V.verify_equation(["(transpose [1 0 2] (matmul ?a ?b))"],
                             ["(matmul (transpose [1 0 2] ?b) (transpose [1 0 2] ?a))"],
                             rlimit=500_000).status != "proved"


def test_wrong_composition_axiom_is_rejected() -> None:
    wrong = A.Axiom("bad-compose", "(transpose ?q (transpose ?p ?a))", "(transpose (compose ?q ?p) ?a)",
                    {"?p": A.PERMS3, "?q": A.PERMS3})
    assert V.validate_axiom(wrong).status == "invalid"


def test_conditional_axiom_needs_its_shape_conditions() -> None:
    # two convolutions side by side are one grouped convolution only for kernels of equal shapes
    lhs = ["(concat 1 (conv2d [1 1] [1 1 1 1] [1 1] 1 0 ?i1 ?k1 ?bk1) (conv2d [1 1] [1 1 1 1] [1 1] 1 0 ?i2 ?k2 ?bk2))"]
    rhs = ["(conv2d [1 1] [1 1 1 1] [1 1] 2 0 (concat 1 ?i1 ?i2) (concat 0 ?k1 ?k2) (concat 0 ?bk1 ?bk2))"]
    conds = ["(= (shape ?i1) (shape ?i2))", "(= (shape ?k1) (shape ?k2))"]
    assert V.verify_equation(lhs, rhs, conditions=conds).status == "proved"
    assert V.verify_equation(lhs, rhs, timeout=3, rlimit=300_000).status != "proved"
    ax = next(a for a in A.AXIOMS if a.name == "conv-group-merge")
    assert ax.conditions and V.validate_axiom(ax, cases=2).status == "valid"


def test_new_convolution_axioms_prove_the_channel_concat_rule() -> None:
    lhs = ["(ewadd (conv2d [1 1] [1 1 1 1] [1 1] 1 0 ?i1 ?k1 ?bk1) (conv2d [1 1] [1 1 1 1] [1 1] 1 0 ?i2 ?k2 ?bk2))"]
    rhs = ["(conv2d [1 1] [1 1 1 1] [1 1] 1 0 (concat 1 ?i1 ?i2) (concat 1 ?k1 ?k2) (ewadd ?bk1 ?bk2))"]
    assert V.verify_equation(lhs, rhs).status == "proved"


@pytest.mark.parametrize("da", A.DIM_AXIOMS, ids=lambda d: d.name)
def test_dimension_axiom_holds_on_concrete_shapes(da: A.DimAxiom) -> None:
    # an operator's declared dim(term, axis) = expr (OpSpec.dim_axioms) against its shape function
    cases = 0
    for combo in param_combos(da.params):
        for shapes in V.shape_assignments(da.term, da.term, combo, count=3):
            env = {**combo, **{v: np.zeros(s) for v, s in shapes.items()}}
            out = np.shape(evaluate(parse(da.term), env))
            axis = eval_param(parse(da.axis), env) if isinstance(da.axis, str) else da.axis
            assert out[axis] == eval_param(parse(da.expr), env), (shapes, combo)
            cases += 1
    assert cases


def test_conditions_on_parameters_are_hypotheses() -> None:
    # 2 * (n / 2) is n only for an even n: proved under the rule's condition, not without it
    lhs, rhs = ["(split 0 0 (* 2 (/ ?n 2)) ?x)"], ["(split 0 0 ?n ?x)"]
    assert V.verify_equation(lhs, rhs, conditions=["(= (% ?n 2) 0)"]).status == "proved"
    assert V.verify_equation(lhs, rhs, rlimit=300_000).status != "proved"
    # a condition that two tensors are distinct (e-classes) is no hypothesis: it only limits matching
    import z3

    enc = V.Encoder()
    tensors = {"?x": z3.Const("x", enc.T), "?y": z3.Const("y", enc.T)}
    assert V.condition_hypotheses(enc, ["(!= ?x ?y)", "(= (shape ?x) (shape ?y))"], tensors) == []
