"""Non-polynomial element-wise operators (gelu, clip, sigmoid, tanh): uninterpreted in the verifier, with the
layout axioms they declare (they commute with transpose, reshape, concat and split), and gelu's rules in the corpus."""

from __future__ import annotations

import numpy as np
import pytest

from eqsat import ops
from eqsat.ir.rule import evaluate, param_vars, parse, tensor_vars
from eqsat.rules import axioms as A
from eqsat.rules import corpus
from eqsat.rules import verifier as V
from eqsat.rules.generator import var_shape

OPS = ("gelu", "clip", "sigmoid", "tanh")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in ("gelu", "clip") else n
                                  for n in OPS])  # their reshape axioms take seconds to validate
def test_layout_axioms_are_declared_and_valid(name: str) -> None:
    declared = A.declared_axioms({name})
    assert {a.name for a in declared} == {f"{name}-transpose", f"{name}-reshape", f"{name}-concat", f"{name}-split"}
    checks = V.validate_axioms(list(declared), workers=1)
    assert all(c.status == "valid" and c.cases > 0 for c in checks), checks


def test_a_wrong_elementwise_axiom_is_caught() -> None:
    """gelu's two forms are different functions, and clip's bounds matter: validation tells them apart."""
    assert V.validate_axiom(A.Axiom("w1", "(gelu :approximate 0 ?a)", "(gelu :approximate 1 ?a)")).status == "invalid"
    w2 = A.Axiom("w2", "(clip :low ?lo :high 6.0 (transpose :perm [1 0] ?a))",
                 "(transpose :perm [1 0] (clip :low ?lo :high 1.0 ?a))", {"?lo": (0.0,)})
    assert V.validate_axiom(w2).status == "invalid"


def test_corpus_moves_layout_operators_across_gelu() -> None:
    entries, _ = corpus.read_corpus()
    rules = [e for e in entries if any("gelu" in s for s in e.lhs + e.rhs)]
    assert rules and all(e.status == "proved" for e in rules)
    assert any("transpose" in " ".join(e.lhs + e.rhs) for e in rules)
    rng = np.random.default_rng(0)
    for e in rules:  # each holds on random tensors (its variables' shapes from the generator's domains)
        for shape_set in range(3):
            names = sorted({v for s in e.lhs for v in tensor_vars(parse(s))})
            env: dict = {v: rng.standard_normal(var_shape(v, shape_set)) for v in names}
            env.update({v: var_shape(v, shape_set) for s in e.lhs for v in param_vars(parse(s))})
            try:
                left = [evaluate(parse(s), env) for s in e.lhs]
            except ops.OpError:
                continue
            right = [evaluate(parse(s), env) for s in e.rhs]
            for a, b in zip(left, right, strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12, err_msg=e.id)

