"""The grouped-convolution and channel-permutation rules (eqsat.rules.grouped): numerically on random tensors and
shapes in both directions, their shape guards, their Z3 proofs from the axioms, and what the engine makes of them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from eqsat import ops
from eqsat.ir.rule import Rule, check_condition, evaluate, parse
from eqsat.rules.grouped import GROUPED_RULES, OPT_IN_RULES

RULES = {r.name: r for r in GROUPED_RULES + OPT_IN_RULES}

#: Convolution parameters the bindings vary: (strides, pads, dilations, activation, kernel size, image size).
CONV_PARAMS = [
    ((1, 1), (1, 1, 1, 1), (1, 1), 0, 3, 6),
    ((2, 2), (1, 1, 1, 1), (1, 1), 1, 3, 7),  # strided, with a fused relu
    ((1, 1), (0, 1, 2, 1), (1, 1), 1, 3, 5),  # asymmetric pads
    ((1, 2), (0, 0, 0, 0), (2, 1), 0, 3, 8),  # dilated
    ((1, 1), (0, 0, 0, 0), (1, 1), 1, 1, 4),  # 1x1
]


def _conv_env(params: tuple, g: int) -> dict[str, Any]:
    st, pd, dl, act, _, _ = params
    return {"?st": st, "?pd": pd, "?dl": dl, "?act": act, "?g": g}


def binding(name: str, g: int, params: tuple, rng: np.random.Generator, cg: int = 3, og: int = 5,
            other: int = 2) -> dict[str, Any]:
    """Random tensors for a rule's variables: group count ``g`` (the left-hand side's), ``cg`` input and ``og``
    output channels per group, and ``other`` channels for a second operand where a rule allows any."""
    k, size = params[4], params[5]
    env = _conv_env(params, g)

    def t(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape)

    if name == "conv-group-merge":  # two convolutions of g groups
        env.update({"?x": t(2, g * cg, size, size), "?y": t(2, g * cg, size, size), "?w": t(g * og, cg, k, k),
                    "?v": t(g * og, cg, k, k), "?b": t(g * og), "?c": t(g * og)})
    elif name == "conv-group-split":  # one of g groups over halves, each of g / 2
        h = g // 2
        env.update({"?x": t(2, h * cg, size, size), "?y": t(2, h * cg, size, size), "?w": t(h * og, cg, k, k),
                    "?v": t(h * og, cg, k, k), "?b": t(h * og), "?c": t(h * og)})
    elif name in ("conv-group-regroup", "conv-group-split-input"):
        env.update({"?x": t(2, g * cg, size, size), "?w": t(g * og, cg, k, k), "?b": t(g * og)})
    elif name == "conv-concat-out":  # one input, two kernels of different output counts
        env.update({"?x": t(2, cg, size, size), "?w": t(og, cg, k, k), "?v": t(other, cg, k, k), "?b": t(og),
                    "?c": t(other)})
    elif name == "conv-input-permute":  # two inputs of different channel counts
        env.update({"?x": t(2, cg, size, size), "?y": t(2, other, size, size), "?w": t(og, cg + other, k, k),
                    "?b": t(og)})
    else:  # pragma: no cover - a rule without a binding
        raise KeyError(name)
    return env


def _groups(name: str) -> tuple[int, ...]:
    """The group counts a rule is tested at (1 where it is stated for one group)."""
    return (1,) if name in ("conv-concat-out", "conv-input-permute") else (2, 4, 8)


CASES = [(name, g, p) for name in RULES for g in _groups(name) for p in range(len(CONV_PARAMS))]


def _check(rule: Rule, env: dict[str, Any]) -> None:
    """Both directions of ``rule`` give equal values of equal shapes under ``env`` (its conditions hold)."""
    assert all(check_condition(c, env) for c in rule.conditions), rule.name
    for d in rule.directions():
        for lhs, rhs in zip(d.lhs, d.rhs, strict=True):
            left, right = evaluate(parse(lhs), env), evaluate(parse(rhs), env)
            assert left.shape == right.shape, d.name
            np.testing.assert_allclose(left, right, rtol=1e-9, atol=1e-9, err_msg=d.name)


@pytest.mark.parametrize("name,g,p", CASES, ids=[f"{n}-g{g}-p{p}" for n, g, p in CASES])
def test_rule_numerically(name: str, g: int, p: int) -> None:
    rng = np.random.default_rng(g * 10 + p)
    _check(RULES[name], binding(name, g, CONV_PARAMS[p], rng))


def test_every_rule_has_bindings_and_the_default_set_has_the_grouped_rules() -> None:
    from eqsat.rules import corpus_or_starter

    assert {n for n, _, _ in CASES} == set(RULES)
    names = {r.name for r in corpus_or_starter()}
    assert {r.name for r in GROUPED_RULES} <= names
    assert "conv-relu-fuse" in names  # relu fusion of a convolution of any group count
    assert not {r.name for r in OPT_IN_RULES} & names


# ---------------------------------------------------------------------------------------------------------
# shape guards: where a condition refuses, the rule would be wrong or ill-shaped


def _values(rule: Rule, env: dict[str, Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """Both sides' values, or None where a side is ill-shaped."""
    try:
        return evaluate(parse(rule.lhs[0]), env), evaluate(parse(rule.rhs[0]), env)
    except ops.OpError:
        return None


def test_merge_refuses_kernels_of_different_shapes_where_it_would_be_wrong() -> None:
    # two single-group convolutions of 4 and 6 output channels: as one of two groups of 5 rows each, rows of
    # the first kernel would read the second input (both sides are well-shaped, the values differ)
    rng = np.random.default_rng(0)
    env = {**_conv_env(CONV_PARAMS[0], 1), "?x": rng.standard_normal((1, 3, 6, 6)),
           "?y": rng.standard_normal((1, 3, 6, 6)), "?w": rng.standard_normal((4, 3, 3, 3)),
           "?v": rng.standard_normal((6, 3, 3, 3)), "?b": rng.standard_normal(4), "?c": rng.standard_normal(6)}
    rule = RULES["conv-group-merge"]
    assert not all(check_condition(c, env) for c in rule.conditions)
    values = _values(rule, env)
    assert values is not None and values[0].shape == values[1].shape
    assert not np.allclose(*values)


def test_merge_refuses_inputs_of_different_channel_counts() -> None:
    rng = np.random.default_rng(1)
    env = binding("conv-group-merge", 2, CONV_PARAMS[0], rng)
    env["?y"] = rng.standard_normal((2, 4, 6, 6))  # 4 channels for 2 groups of kernels of 3: no convolution
    rule = RULES["conv-group-merge"]
    assert not all(check_condition(c, env) for c in rule.conditions)


@pytest.mark.parametrize("name", ["conv-group-split", "conv-group-regroup", "conv-group-split-input"])
@pytest.mark.parametrize("g", [3, 5])
def test_odd_group_counts_are_refused(name: str, g: int) -> None:
    # an odd number of groups has no halves: the condition refuses, and without it the right-hand side is
    # ill-shaped or computes something else
    rng = np.random.default_rng(g)
    rule = RULES[name]
    if name == "conv-group-split":  # halves of 3 channels and kernels of 4 rows, as if for g / 2 = 1 group
        env = {**_conv_env(CONV_PARAMS[0], g), "?x": rng.standard_normal((1, 3, 6, 6)),
               "?y": rng.standard_normal((1, 3, 6, 6)), "?w": rng.standard_normal((4, 3, 3, 3)),
               "?v": rng.standard_normal((4, 3, 3, 3)), "?b": rng.standard_normal(4), "?c": rng.standard_normal(4)}
    else:
        env = binding(name, g, CONV_PARAMS[0], rng, cg=2, og=2)
    assert not all(check_condition(c, env) for c in rule.conditions)
    values = _values(rule, env)
    assert values is None or values[0].shape != values[1].shape or not np.allclose(*values)


# ---------------------------------------------------------------------------------------------------------
# proofs


@pytest.mark.parametrize("name", ["conv-group-merge", "conv-group-split", "conv-group-regroup", "conv-concat-out"])
def test_rule_is_proved_for_any_parameters(name: str) -> None:
    """Z3 proves each direction from the axioms, with the strides, pads, dilations, activation and group count
    left as variables (the rule's conditions on them as hypotheses)."""
    from eqsat.rules.verifier import verify_equation

    for d in RULES[name].directions():
        assert verify_equation(list(d.lhs), list(d.rhs), conditions=d.conditions).status == "proved", d.name


def test_a_wrong_regrouping_is_not_proved() -> None:
    # the group count kept while the kernel is made block-diagonal: not entailed
    from eqsat.rules.verifier import verify_equation

    v = verify_equation(["(conv2d ?st ?pd ?dl ?g ?act ?x ?w ?b)"],
                        ["(conv2d ?st ?pd ?dl ?g ?act ?x (merge_gconv (/ ?g 2) 2 ?w) ?b)"],
                        conditions=["(= (% ?g 2) 0)"], rlimit=500_000)
    assert v.status != "proved"
    # nor the halving without its condition (an odd count has no halves)
    rule = RULES["conv-group-regroup"]
    assert verify_equation(list(rule.lhs), list(rule.rhs), rlimit=500_000).status != "proved"


def test_split_over_any_input_follows_from_the_merge() -> None:
    """``conv-group-split-input`` is what ``conv-group-merge`` (proved) and ``concat-of-splits`` give: its
    right-hand side saturated with those two holds its left-hand side in the same e-class."""
    from eqsat.rules import derivable
    from eqsat.rules.starter import STARTER_RULES

    rule = RULES["conv-group-split-input"]
    concrete = {"?st": "[1 1]", "?pd": "[1 1 1 1]", "?dl": "[1 1]", "?g": "4", "?act": "1"}
    lhs, rhs = rule.lhs[0], rule.rhs[0]
    for k, v in concrete.items():
        lhs, rhs = (s.replace(k + " ", v + " ").replace(k + ")", v + ")") for s in (lhs, rhs))
    base = [RULES["conv-group-merge"]] + [r for r in STARTER_RULES if r.name == "concat-of-splits"]
    shapes = {"?x": (1, 8, 5, 5), "?w": (12, 2, 3, 3), "?b": (12,)}
    assert derivable.derives([rhs], [lhs], shapes, base, 3)
    assert not derivable.derives([rhs], [lhs], shapes, base[1:], 3)


# ---------------------------------------------------------------------------------------------------------
# the engine


def test_a_grouped_conv_regroups_down_to_one_group() -> None:
    """Saturating one convolution of 8 groups builds those of 4, 2 and 1 group (nested block-diagonal kernels)
    in its e-class, each of the same shape, and nothing more than those and their kernels."""
    from eqsat.engine.limits import Limits
    from eqsat.engine.saturation import saturate
    from eqsat.ir.rule import terms_graph

    term = "(conv2d [1 1] [1 1 1 1] [1 1] 8 1 ?x ?w ?b)"
    res = saturate(terms_graph([term], {"?x": (1, 16, 6, 6), "?w": (24, 2, 3, 3), "?b": (24,)}),
                   list(GROUPED_RULES), Limits(iter_limit=8, node_limit=1000, time_limit=60), in_process=True)
    eg = res.egraph
    root = eg.roots[0]
    convs = [n for n in eg.nodes if n.op == "conv2d" and n.eclass == root]
    assert sorted(n.p["groups"] for n in convs) == [1, 2, 4, 8]
    assert sum(n.op == "merge_gconv" for n in eg.nodes) == 3
    assert res.stop_reason.name == "SATURATED"


def _grouped_conv_model(groups: int, channels: int = 32) -> Any:
    """x (1, C, 8, 8) -> conv 1x1 -> relu -> conv 3x3 of ``groups`` groups -> relu -> y."""
    from eqsat.models.builder import ModelBuilder

    b = ModelBuilder(0)
    t = b.op("Relu", [b.op("Conv", ["x", b.weight((channels, channels, 1, 1)), b.weight((channels,), 0.1)])])
    t = b.op("Conv", [t, b.weight((channels, channels // groups, 3, 3)), b.weight((channels,), 0.1)], group=groups,
             pads=[1, 1, 1, 1])
    b.op("Relu", [t], "y")
    return b.model("grouped_conv", [("x", (1, channels, 8, 8))], [("y", (1, channels, 8, 8))])


def test_a_grouped_conv_is_regrouped_when_it_pays() -> None:
    """A model with a convolution of 8 groups, under a cost model that charges each group a kernel launch (as a
    GPU library running small groups one by one would): the optimized model has fewer groups, and computes
    what the original does (optimize's numeric check)."""
    from eqsat import optimize
    from eqsat.costs.analytic import AnalyticCostModel

    class PerGroupLaunches(AnalyticCostModel):
        name = "analytic + a launch per group"

        def kernel_ms(self, key: ops.CostKey, flops: float, nbytes: int, nodes: int) -> float:
            return super().kernel_ms(key, flops, nbytes, nodes) + 0.05 * dict(key.params).get("groups", 0)

    res = optimize(_grouped_conv_model(groups=8), cost_model=PerGroupLaunches(), time_limit=30)
    groups = [n.p["groups"] for n in res.graph.nodes if "groups" in n.p]
    assert groups and max(groups) < 8
    assert res.cost_after < res.cost_before
    # under the analytic roofline a block-diagonal kernel only adds work: the grouped convolution stays
    plain = optimize(_grouped_conv_model(groups=8), time_limit=30)
    assert max(n.p["groups"] for n in plain.graph.nodes if "groups" in n.p) == 8


def test_two_convolutions_side_by_side_merge_into_a_grouped_one() -> None:
    """Two strided convolutions of one shape over two tensors, concatenated (stride 2: the corpus's literal
    rules are for stride 1 only): one grouped convolution under the analytic costs (a kernel launch fewer)."""
    from eqsat import optimize
    from eqsat.models.builder import ModelBuilder

    b = ModelBuilder(1)
    convs = [b.op("Conv", [x, b.weight((8, 4, 3, 3)), b.weight((8,), 0.1)], strides=[2, 2], pads=[1, 1, 1, 1])
             for x in ("a", "c")]
    b.op("Concat", convs, "y", axis=1)
    model = b.model("side_by_side", [("a", (1, 4, 9, 9)), ("c", (1, 4, 9, 9))], [("y", (1, 16, 5, 5))])
    res = optimize(model, time_limit=30)
    convs_after = [n for n in res.graph.nodes if "groups" in n.p]
    assert len(convs_after) == 1 and convs_after[0].p["groups"] == 2 and convs_after[0].p["strides"] == (2, 2)
