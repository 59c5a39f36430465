"""Element-wise operators moved before a split (eqsat.rules.over_split): one rule per element-wise operator of the
registry, each numerically on random tensors, shapes, axes and pieces, proved by Z3 from its operator's split
axiom (validated symbolically), and what the engine makes of them: a split's pieces' operators as one kernel."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from eqsat import ops
from eqsat.ir.rule import check_condition, evaluate, parse
from eqsat.rules import axioms as A
from eqsat.rules import verifier as V
from eqsat.rules.over_split import OVER_SPLIT_RULES, without_over_split

RULES = {r.name: r for r in OVER_SPLIT_RULES}
#: Parameter values of the operators that have some (gelu's form, clip's bounds).
OP_PARAMS = {"?g": (0, 1), "?lo": (0.0, -1.0), "?hi": (6.0, 0.5)}


def test_every_elementwise_operator_has_its_rule() -> None:
    from eqsat.rules import corpus_or_starter

    # a cast's layout rules are its own (eqsat.rules.starter.CAST_RULES)
    unary = {s.name for s in ops.REGISTRY.values() if s.elementwise and len(s.inputs) == 1} - {"cast"}
    assert unary <= {n.removesuffix("-over-split") for n in RULES}
    assert {"ewadd-over-split", "ewmul-over-split", "relu-over-split", "tanh-over-split"} <= set(RULES)
    assert set(RULES) <= {r.name for r in corpus_or_starter()}  # default rules
    assert all(not r.bidirectional for r in OVER_SPLIT_RULES)


def _env(rule_name: str, rng: np.random.Generator, case: int) -> dict[str, Any]:
    """Random operands for a rule: rank 2 to 4, a random axis and piece within it, operator parameters."""
    rank = 2 + case % 3
    shape = tuple(int(d) for d in rng.integers(1, 6, size=rank))
    ax = int(rng.integers(rank))
    shape = shape[:ax] + (shape[ax] + 3,) + shape[ax + 1:]  # at least 4 along the axis
    start = int(rng.integers(shape[ax] - 1))
    size = int(rng.integers(1, shape[ax] - start + 1))
    env: dict[str, Any] = {"?ax": ax, "?s": start, "?n": size, "?a": rng.standard_normal(shape) + 2.0,
                           "?b": rng.standard_normal(shape)}
    env.update({k: v[case % 2] for k, v in OP_PARAMS.items()})
    if rule_name in ("ewsqrt-over-split", "ewrecip-over-split"):
        env["?a"] = np.abs(env["?a"]) + 0.5  # in the operator's domain
    return env


@pytest.mark.parametrize("name", sorted(RULES))
def test_rule_numerically(name: str) -> None:
    rule = RULES[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    for case in range(12):
        env = _env(name, rng, case)
        assert all(check_condition(c, env) for c in rule.conditions)
        left, right = evaluate(parse(rule.lhs[0]), env), evaluate(parse(rule.rhs[0]), env)
        assert left.shape == right.shape
        assert left.shape[env["?ax"]] == env["?n"]
        np.testing.assert_allclose(left, right, rtol=1e-12, atol=1e-12, err_msg=f"{name} {case}")


def test_a_binary_rule_refuses_operands_of_different_shapes() -> None:
    rng = np.random.default_rng(0)
    env = _env("ewadd-over-split", rng, 0)
    env["?b"] = env["?b"][:1]  # broadcast along the first axis: not the equal shapes it is proved for
    assert not all(check_condition(c, env) for c in RULES["ewadd-over-split"].conditions)


@pytest.mark.parametrize("name", sorted(RULES))
def test_rule_is_proved_from_its_split_axiom(name: str) -> None:
    """Z3 proves each rule for any axis, start and size (quantified), from its operator's split axiom, which is
    valid under symbolic execution."""
    rule = RULES[name]
    op = name.removesuffix("-over-split")
    (axiom,) = [a for a in A.declared_axioms({op}) if a.name == f"{op}-split"]
    if op in ("tanh", "ewadd"):  # the others' validation is the same code (seconds each; the corpus header
        assert V.validate_axiom(axiom, cases=1).status == "valid"  # test checks they are all validated)
    assert V.verify_equation(list(rule.lhs), list(rule.rhs), conditions=rule.conditions).status == "proved"


def test_a_wrong_piece_is_neither_valid_nor_proved() -> None:
    wrong = A.Axiom("wrong-tanh-split", "(tanh (split :axis ?ax :start ?s :size ?n ?a))",
                    "(split :axis ?ax :start 0 :size ?n (tanh ?a))", {"?ax": (0, 1), "?s": (1,), "?n": (1,)})
    assert V.validate_axiom(wrong).status == "invalid"
    lhs, rhs = wrong.lhs, wrong.rhs
    assert V.verify_equation([lhs], [rhs], rlimit=500_000).status != "proved"
    mixed = ("(ewadd (split :axis 1 :start 0 :size ?n ?a) (split :axis 1 :start ?n :size ?n ?b))",
             "(split :axis 1 :start 0 :size ?n (ewadd ?a ?b))")
    assert V.verify_equation([mixed[0]], [mixed[1]], conditions=["(= (shape ?a) (shape ?b))"],
                             rlimit=500_000).status != "proved"


def _gates_model(pieces: int = 4, width: int = 8) -> Any:
    """One matrix product split into ``pieces`` gates, each through tanh and added to its piece of a second
    product: the element-wise part of an RNN cell whose weights are already concatenated."""
    from eqsat.models.builder import ModelBuilder

    b = ModelBuilder(0)
    p = b.op("MatMul", ["x", b.weight((width, pieces * width))])
    q = b.op("MatMul", ["h", b.weight((width, pieces * width))])
    outs = []
    for k in range(pieces):
        sp = b.op("Slice", [p, b.const(np.array([k * width]), "s"), b.const(np.array([(k + 1) * width]), "e"),
                            b.const(np.array([1]), "a")])
        sq = b.op("Slice", [q, b.const(np.array([k * width]), "s"), b.const(np.array([(k + 1) * width]), "e"),
                            b.const(np.array([1]), "a")])
        outs.append(b.op("Tanh", [b.op("Add", [sp, sq])], f"y{k}"))
    return b.model("gates", [("x", (2, width)), ("h", (2, width))], [(o, (2, width)) for o in outs])


def test_the_pieces_operators_become_one_kernel() -> None:
    """With the rules, the four pieces' tanhs are one over the whole (and their adds one, or none where the two
    products become one over the concatenated inputs): fewer launches under gpu-sim; without them, four of each
    stay; both numerically equal to the original."""
    from eqsat import optimize
    from eqsat.pipeline import default_rules

    counts = {}
    for label, rules in (("with", default_rules()), ("without", without_over_split(default_rules()))):
        res = optimize(_gates_model(), rules=rules, cost_model="gpu-sim", time_limit=20, cache=False)
        assert res.numeric.ok, label
        counts[label] = {op: sum(n.op == op for n in res.graph.nodes) for op in ("tanh", "ewadd")}
    assert counts["without"] == {"tanh": 4, "ewadd": 4}
    assert counts["with"]["tanh"] == 1 and counts["with"]["ewadd"] <= 1
