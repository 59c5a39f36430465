"""The equalities between onnxruntime's fused kernels (:mod:`eqsat.ops.ort_kernels`) and their decompositions:
run only when the target is onnxruntime (``optimize(target="onnxruntime")``), they add each kernel to the e-class
of the portable form it computes, and extraction takes it where it is cheaper. Every rule is tested numerically
in both directions (tests/ops/test_ort_kernels.py).

Preconditions, each enforced by the kernel operator's shape function (a right-hand side that fails it is not
added):
- skip norms: the input and the skip of one shape ``(batch, sequence, hidden)`` (no broadcast skip), the norm over
  the last axis, gamma (and beta) of shape ``(hidden,)``;
- bias GELUs: a bias of the input's last dimension, which imports as a ``(1, ..., 1, hidden)`` tensor, reshaped
  to ``(hidden,)`` (a weight, so export precomputes it);
- multi-head attention: self-attention (query, key and value of one shape ``(batch, sequence, hidden)``, each
  split into heads by one reshape to ``(batch, sequence, heads, head size)``), the scores scaled by a scalar
  tensor, then (optionally) an additive mask of shape ``(batch or 1, heads or 1, sequence, sequence)``, softmax
  over the last axis. Rotary embeddings applied after the split (LLaMA) and grouped key/value heads are not
  this form.
"""

from __future__ import annotations

from eqsat.ir.rule import Rule


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


def _heads(x: str, perm: str = "[0 2 1 3]") -> str:
    """``x`` (batch, sequence, hidden) split into heads: (batch, heads, sequence, head size), or with ``perm``
    [0 2 3 1] the key's transpose (batch, heads, head size, sequence)."""
    return f"(transpose :perm {perm} (reshape :shape ?sp {x}))"


def _attention() -> tuple[Rule, ...]:
    """Self-attention as exporters write it, from the three projections to the heads before they merge (the
    merge's reshape stays, reading the kernel's output split again), as onnxruntime's MultiHeadAttention."""
    scores = f"(smul (matmul {_heads('?q')} {_heads('?k', '[0 2 3 1]')}) ?s)"
    conditions = ("(= (rank ?q) 3)", "(= (shape ?k) (shape ?q))", "(= (shape ?v) (shape ?q))")

    def lhs(logits: str) -> str:
        return f"(transpose :perm [0 2 1 3] (matmul (softmax :axis 3 {logits}) {_heads('?v')}))"

    kernel = "(reshape :shape ?sp ({op} :split ?sp ?q ?k ?v ?s{bias}))"
    with_bias = kernel.format(op="ort_mha_bias", bias=" ?m")
    return (Rule("ort-mha", (lhs(scores),), (kernel.format(op="ort_mha", bias=""),), conditions=conditions),
            Rule("ort-mha-bias", (lhs(f"(ewadd {scores} ?m)"),), (with_bias,),
                 conditions=(*conditions, "(= (rank ?m) 4)")),
            Rule("ort-mha-bias-left", (lhs(f"(ewadd ?m {scores})"),), (with_bias,),
                 conditions=(*conditions, "(= (rank ?m) 4)")))


ORT_KERNEL_RULES: tuple[Rule, ...] = (
    *_both_orders("ort-skip-layernorm", "(layernorm :axis 2 :epsilon ?eps (ewadd ?x ?c) ?g ?b)",
                  "(ort_skip_layernorm :epsilon ?eps ?x ?c ?g ?b)", ("(= (rank ?x) 3)", "(= (shape ?x) (shape ?c))")),
    *_both_orders("ort-skip-rmsnorm", "(rmsnorm :axis 2 :epsilon ?eps (ewadd ?x ?c) ?g)",
                  "(ort_skip_rmsnorm :epsilon ?eps ?x ?c ?g)", ("(= (rank ?x) 3)", "(= (shape ?x) (shape ?c))")),
    *_bias_gelu("ort-bias-gelu", "ort_bias_gelu", 0),
    *_bias_gelu("ort-fast-gelu", "ort_fast_gelu", 1),
    *_attention(),
)
