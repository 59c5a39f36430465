"""Every starter rule holds numerically on random tensors of three shape sets (both directions)."""

from __future__ import annotations

import numpy as np
import pytest

from eqsat.ir.rule import check_condition, evaluate, parse
from eqsat.rules.starter import STARTER_RULES

CONV = {"?st": (1, 1), "?pd": (1, 1, 1, 1), "?dl": (1, 1), "?g": 1}

# For each rule: three bindings of tensor variables (by shape) and parameter variables.
SHAPES: dict[str, list[dict]] = {
    "ewadd-comm": [{"?a": (3, 4), "?b": (3, 4)}, {"?a": (2, 3, 5), "?b": (1, 3, 5)}, {"?a": (7,), "?b": (7,)}],
    "ewadd-assoc": [{"?a": (3, 4), "?b": (3, 4), "?c": (3, 4)}, {"?a": (2, 5), "?b": (1, 5), "?c": (2, 1)},
                    {"?a": (2, 3, 4), "?b": (2, 3, 4), "?c": (2, 3, 4)}],
    "ewmul-comm": [{"?a": (3, 4), "?b": (3, 4)}, {"?a": (2, 3, 5), "?b": (2, 1, 5)}, {"?a": (6,), "?b": (6,)}],
    "ewmul-assoc": [{"?a": (3, 4), "?b": (3, 4), "?c": (3, 4)}, {"?a": (4, 1), "?b": (1, 6), "?c": (4, 6)},
                    {"?a": (2, 2, 2), "?b": (2, 2, 2), "?c": (2, 2, 2)}],
    "ewmul-distrib": [{"?a": (3, 4), "?b": (3, 4), "?c": (3, 4)}, {"?a": (2, 5), "?b": (2, 5), "?c": (1, 5)},
                      {"?a": (2, 3, 4), "?b": (2, 3, 4), "?c": (2, 3, 4)}],
    "matmul-assoc": [{"?a": (3, 4), "?b": (4, 5), "?c": (5, 2)}, {"?a": (8, 8), "?b": (8, 8), "?c": (8, 8)},
                     {"?a": (2, 3, 4), "?b": (2, 4, 6), "?c": (2, 6, 5)}],
    "matmul-linear-right": [{"?a": (3, 4), "?b": (4, 5), "?c": (4, 5)}, {"?a": (6, 2), "?b": (2, 3), "?c": (2, 3)},
                            {"?a": (2, 3, 4), "?b": (2, 4, 5), "?c": (2, 4, 5)}],
    "matmul-linear-left": [{"?a": (3, 4), "?b": (3, 4), "?c": (4, 5)}, {"?a": (1, 4), "?b": (1, 4), "?c": (4, 2)},
                           {"?a": (2, 3, 4), "?b": (2, 3, 4), "?c": (2, 4, 5)}],
    "smul-matmul": [{"?a": (3, 4), "?b": (4, 5), "?s": ()}, {"?a": (6, 6), "?b": (6, 2), "?s": ()},
                    {"?a": (2, 3, 4), "?b": (2, 4, 5), "?s": ()}],
    "conv-relu-fuse": [{**CONV, "?x": (1, 3, 6, 6), "?w": (4, 3, 3, 3), "?b": (4,)},
                       {**CONV, "?pd": (0, 0, 0, 0), "?x": (2, 4, 5, 5), "?w": (2, 4, 1, 1), "?b": (2,)},
                       {**CONV, "?st": (2, 2), "?g": 2, "?x": (1, 4, 7, 7), "?w": (6, 2, 3, 3), "?b": (6,)}],
    "conv-batchnorm-fold": [
        {**CONV, "?eps": 1e-5, "?x": (1, 3, 6, 6), "?w": (4, 3, 3, 3), "?b": (4,), "?s": (4,), "?bb": (4,),
         "?m": (4,), "?v": (4,)},
        {**CONV, "?eps": 1e-3, "?pd": (0, 0, 0, 0), "?x": (2, 4, 5, 5), "?w": (2, 4, 1, 1), "?b": (2,), "?s": (2,),
         "?bb": (2,), "?m": (2,), "?v": (2,)},
        {**CONV, "?eps": 1e-5, "?g": 2, "?x": (1, 4, 7, 7), "?w": (6, 2, 3, 3), "?b": (6,), "?s": (6,),
         "?bb": (6,), "?m": (6,), "?v": (6,)}],
    "conv-add-fuse": [{**CONV, "?x": (1, 3, 6, 6), "?w": (4, 3, 3, 3), "?b": (4,), "?r": (1, 4, 6, 6)},
                      {**CONV, "?pd": (0, 0, 0, 0), "?x": (2, 4, 5, 5), "?w": (2, 4, 1, 1), "?b": (2,),
                       "?r": (2, 2, 5, 5)},
                      {**CONV, "?st": (2, 2), "?g": 2, "?x": (1, 4, 7, 7), "?w": (6, 2, 3, 3), "?b": (6,),
                       "?r": (1, 6, 4, 4)}],
    "conv-add-relu-fuse": [{**CONV, "?x": (1, 3, 6, 6), "?w": (4, 3, 3, 3), "?b": (4,), "?r": (1, 4, 6, 6)},
                           {**CONV, "?pd": (0, 0, 0, 0), "?x": (2, 4, 5, 5), "?w": (2, 4, 1, 1), "?b": (2,),
                            "?r": (2, 2, 5, 5)},
                           {**CONV, "?st": (2, 2), "?g": 2, "?x": (1, 4, 7, 7), "?w": (6, 2, 3, 3), "?b": (6,),
                            "?r": (1, 6, 4, 4)}],
    "relu-transpose": [{"?p": (1, 0), "?x": (3, 4)}, {"?p": (0, 2, 1), "?x": (2, 3, 4)},
                       {"?p": (3, 2, 1, 0), "?x": (1, 2, 3, 4)}],
    "relu-concat": [{"?ax": 0, "?a": (2, 3), "?b": (4, 3)}, {"?ax": 1, "?a": (2, 3), "?b": (2, 5)},
                    {"?ax": 2, "?a": (1, 2, 3), "?b": (1, 2, 1)}],
    "relu-split": [{"?ax": 0, "?s": 1, "?n": 2, "?x": (4, 3)}, {"?ax": 1, "?s": 0, "?n": 2, "?x": (2, 5)},
                   {"?ax": 2, "?s": 2, "?n": 1, "?x": (1, 2, 3)}],
    "ewadd-concat": [{"?ax": 0, "?a": (2, 3), "?b": (2, 3), "?c": (4, 3), "?d": (4, 3)},
                     {"?ax": 1, "?a": (2, 3), "?b": (2, 3), "?c": (2, 1), "?d": (2, 1)},
                     {"?ax": 1, "?a": (1, 2, 3), "?b": (1, 2, 3), "?c": (1, 4, 3), "?d": (1, 4, 3)}],
    "split-concat-first": [{"?ax": 0, "?n": 2, "?a": (2, 3), "?b": (4, 3)},
                           {"?ax": 1, "?n": 3, "?a": (2, 3), "?b": (2, 5)},
                           {"?ax": 2, "?n": 1, "?a": (1, 2, 1), "?b": (1, 2, 3)}],
    "split-concat-second": [{"?ax": 0, "?s": 2, "?n": 4, "?a": (2, 3), "?b": (4, 3)},
                            {"?ax": 1, "?s": 3, "?n": 5, "?a": (2, 3), "?b": (2, 5)},
                            {"?ax": 2, "?s": 1, "?n": 3, "?a": (1, 2, 1), "?b": (1, 2, 3)}],
    "concat-of-splits": [{"?ax": 0, "?n": 2, "?m": 3, "?x": (5, 3)}, {"?ax": 1, "?n": 1, "?m": 3, "?x": (2, 4)},
                         {"?ax": 2, "?n": 2, "?m": 2, "?x": (1, 3, 4)}],
    "reshape-identity": [{"?sh": (2, 3), "?x": (2, 3)}, {"?sh": (1, 4, 1), "?x": (1, 4, 1)}, {"?sh": (5,), "?x": (5,)}],
    "transpose-matmul": [{"?a": (3, 4), "?b": (4, 5)}, {"?a": (1, 7), "?b": (7, 2)}, {"?a": (6, 6), "?b": (6, 6)}],
    "fuse-matmul-shared-lhs": [{"?x": (3, 4), "?w1": (4, 5), "?w2": (4, 2)},
                               {"?x": (8, 8), "?w1": (8, 8), "?w2": (8, 8)},
                               {"?x": (2, 3, 4), "?w1": (2, 4, 5), "?w2": (2, 4, 1)}],
    "fuse-conv-shared-input": [
        {**CONV, "?act": 0, "?x": (1, 3, 6, 6), "?w1": (4, 3, 3, 3), "?b1": (4,), "?w2": (2, 3, 3, 3), "?b2": (2,)},
        {**CONV, "?act": 1, "?x": (2, 2, 5, 5), "?w1": (3, 2, 3, 3), "?b1": (3,), "?w2": (3, 2, 3, 3), "?b2": (3,)},
        {**CONV, "?act": 1, "?st": (2, 2), "?pd": (0, 0, 0, 0), "?x": (1, 4, 7, 7), "?w1": (1, 4, 3, 3),
         "?b1": (1,), "?w2": (5, 4, 3, 3), "?b2": (5,)}],
}


def _bind(binding: dict, rng: np.random.Generator) -> dict:
    env = {}
    for k, v in binding.items():
        if k in CONV or not isinstance(v, tuple) or k in ("?p", "?sh"):
            env[k] = v
        elif k == "?v":  # a variance
            env[k] = rng.uniform(0.5, 1.5, v)
        else:
            env[k] = rng.standard_normal(v)
    return env


def test_every_starter_rule_has_shape_sets() -> None:
    assert {r.name for r in STARTER_RULES} == set(SHAPES)


@pytest.mark.parametrize("rule", STARTER_RULES, ids=lambda r: r.name)
def test_starter_rule_numerically(rule) -> None:
    rng = np.random.default_rng(0)
    for binding in SHAPES[rule.name]:
        env = _bind(binding, rng)
        assert all(check_condition(c, env) for c in rule.conditions), (rule.name, binding)
        for d in rule.directions():
            for lhs, rhs in zip(d.lhs, d.rhs, strict=True):
                left = evaluate(parse(lhs), env)
                right = evaluate(parse(rhs), env)
                assert left.shape == right.shape, (d.name, binding)
                np.testing.assert_allclose(left, right, rtol=1e-9, atol=1e-9, err_msg=f"{d.name} {binding}")


def test_split_condition_is_needed() -> None:
    """Without its offset condition, split-concat-second would be wrong: the check must catch that."""
    rule = next(r for r in STARTER_RULES if r.name == "split-concat-second")
    rng = np.random.default_rng(1)
    env = _bind({"?ax": 0, "?s": 0, "?n": 2, "?a": (2, 3), "?b": (2, 3)}, rng)
    assert not all(check_condition(c, env) for c in rule.conditions)
    left = evaluate(parse(rule.lhs[0]), env)
    assert not np.allclose(left, env["?b"])
