"""The equalities between onnxruntime's fused kernels (:mod:`eqsat.ops.ort_kernels`) and their decompositions:
run only when the target is onnxruntime (``optimize(target="onnxruntime")``), they add each kernel to the e-class
of the portable form it computes, and extraction takes it where it is cheaper. Every rule is tested numerically
in both directions (tests/test_ort_kernels.py).

Preconditions, each enforced by the kernel operator's shape function (a right-hand side that fails it is not
added):
- skip norms: the input and the skip of one shape ``(batch, sequence, hidden)`` (no broadcast skip), the norm over
  the last axis, gamma (and beta) of shape ``(hidden,)``;
- bias GELUs: a bias of the input's last dimension, which imports as a ``(1, ..., 1, hidden)`` tensor, reshaped
  to ``(hidden,)`` (a weight, so export precomputes it).
"""

from __future__ import annotations

from eqsat.rules.rule import Rule


def _both_orders(name: str, lhs: str, rhs: str, conditions: tuple[str, ...] = ()) -> tuple[Rule, ...]:
    """The rule for ``lhs`` (which holds one ``(ewadd ?x ?c)``) and for its mirror ``(ewadd ?c ?x)``."""
    return (Rule(name, (lhs,), (rhs,), conditions=conditions),
            Rule(f"{name}-left", (lhs.replace("(ewadd ?x ?c)", "(ewadd ?c ?x)"),), (rhs,), conditions=conditions))


def _bias_gelu(name: str, kernel: str, approximate: int) -> tuple[Rule, ...]:
    rules: tuple[Rule, ...] = ()
    for rank in (2, 3):
        last = rank - 1
        ones = tuple(f"(= (dim ?c {k}) 1)" for k in range(last))
        rules += _both_orders(f"{name}-rank{rank}", f"(gelu :approximate {approximate} (ewadd ?x ?c))",
                              f"({kernel} ?x (reshape :shape [(dim ?c {last})] ?c))",
                              (f"(= (rank ?x) {rank})", f"(= (rank ?c) {rank})", *ones,
                               f"(= (dim ?c {last}) (dim ?x {last}))"))
    return rules


ORT_KERNEL_RULES: tuple[Rule, ...] = (
    *_both_orders("ort-skip-layernorm", "(layernorm :axis 2 :epsilon ?eps (ewadd ?x ?c) ?g ?b)",
                  "(ort_skip_layernorm :epsilon ?eps ?x ?c ?g ?b)", ("(= (rank ?x) 3)", "(= (shape ?x) (shape ?c))")),
    *_both_orders("ort-skip-rmsnorm", "(rmsnorm :axis 2 :epsilon ?eps (ewadd ?x ?c) ?g)",
                  "(ort_skip_rmsnorm :epsilon ?eps ?x ?c ?g)", ("(= (rank ?x) 3)", "(= (shape ?x) (shape ?c))")),
    *_bias_gelu("ort-bias-gelu", "ort_bias_gelu", 0),
    *_bias_gelu("ort-fast-gelu", "ort_fast_gelu", 1),
)
