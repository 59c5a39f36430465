"""The casts' rules (eqsat.rules.starter.CAST_RULES) hold numerically, both ways, on tensors held in the precision
each inner cast reads (the import and every rule keep a tensor in the precision a cast says it has)."""

from __future__ import annotations

import ml_dtypes  # onnx's dependency: numpy's bfloat16
import numpy as np
import pytest

from eqsat.ir.rule import evaluate, parse
from eqsat.ops.cast import round_to
from eqsat.rules.starter import CAST_RULES, EXTRA_RULES

# per rule: bindings of its variables (tensors by shape; the precision each tensor is held in under "held")
BINDINGS: dict[str, list[dict]] = {
    "cast-round-trip-float16": [{"?x": (3, 4), "held": "float16"}, {"?x": (2, 1, 5), "held": "float16"}],
    "cast-round-trip-bfloat16": [{"?x": (3, 4), "held": "bfloat16"}, {"?x": (7,), "held": "bfloat16"}],
    "cast-transpose": [{"?s": "float16", "?t": "float32", "?p": (1, 0), "?x": (3, 4), "held": "float16"},
                       {"?s": "float32", "?t": "bfloat16", "?p": (0, 2, 1), "?x": (2, 3, 4), "held": "float32"}],
    "cast-reshape": [{"?s": "float32", "?t": "float16", "?sh": (4, 3), "?x": (3, 4), "held": "float32"},
                     {"?s": "bfloat16", "?t": "float32", "?sh": (6, 4), "?x": (2, 3, 4), "held": "bfloat16"}],
    "cast-concat": [{"?s": "float32", "?t": "float16", "?ax": 0, "?a": (2, 3), "?b": (4, 3), "held": "float32"},
                    {"?s": "float16", "?t": "float32", "?ax": 1, "?a": (2, 3), "?b": (2, 5), "held": "float16"}],
}


def test_every_cast_rule_has_bindings_and_runs_by_default() -> None:
    assert {r.name for r in CAST_RULES} == set(BINDINGS)
    assert {r.name for r in CAST_RULES} <= {r.name for r in EXTRA_RULES}


@pytest.mark.parametrize("rule", CAST_RULES, ids=lambda r: r.name)
def test_cast_rule_numerically(rule) -> None:
    rng = np.random.default_rng(0)
    for binding in BINDINGS[rule.name]:
        env = {k: round_to(rng.standard_normal(v).astype(np.float32), binding["held"])
               if k.startswith("?") and isinstance(v, tuple) and k not in ("?p", "?sh") else v
               for k, v in binding.items() if k != "held"}
        for d in rule.directions():
            for lhs, rhs in zip(d.lhs, d.rhs, strict=True):
                left, right = evaluate(parse(lhs), env), evaluate(parse(rhs), env)
                assert left.shape == right.shape, (d.name, binding)
                np.testing.assert_array_equal(left, right, err_msg=f"{d.name} {binding}")


def test_a_round_trip_through_a_narrower_type_is_no_rule() -> None:
    # float32 -> float16 -> float32 rounds: only a trip through a wider type gives back what went in
    x = np.float32([1.0 + 2.0 ** -20])
    assert round_to(round_to(x, "float16"), "float32")[0] != x[0]
    assert all("(cast float16 float32 (cast float32 float16" not in r.lhs[0] for r in CAST_RULES)


def test_rounding_to_bfloat16_is_the_nearest_bfloat16() -> None:
    x = np.random.default_rng(1).standard_normal(10_000).astype(np.float32) * 1e3
    x[:4] = [0.0, -0.0, np.inf, 1.0 + 2.0 ** -8]  # a tie rounds to even
    np.testing.assert_array_equal(round_to(x, "bfloat16"), x.astype(ml_dtypes.bfloat16).astype(np.float32))
    assert np.isnan(round_to(np.float32([np.nan]), "bfloat16")[0])
