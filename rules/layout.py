"""Data-layout rewrites: they add layout variants (matmul with transposed operands, NHWC convolutions with
explicit, costed layout conversions) and implementation variants (the forms of an LRN) as members of the
same e-class, so extraction picks substitutions and layouts jointly. Every rule is tested numerically
(tests/rules/test_layout.py)."""

from __future__ import annotations

from eqsat.ir.rule import Rule

_CONV = "?st ?pd ?dl ?g ?act"
TO_NHWC, TO_NCHW = "[0 2 3 1]", "[0 3 1 2]"

#: grouped-query attention's shared key/value heads as exporters write them (``repeat_interleave`` over the
#: heads): ``?x`` of shape (batch, groups, 1, length, head size) expanded along its third axis only, to ``?e`` =
#: (batch, groups, repeats, length, head size), and viewed as ``?m`` = (batch, groups * repeats, length, head
#: size); ``?a`` the (batch, heads, ...) operand multiplied with it
_GROUPED = ("(= (rank ?x) 5)", "(= (dim ?x 2) 1)",
            "(= ?e [(dim ?x 0) (dim ?x 1) (dim ?e 2) (dim ?x 3) (dim ?x 4)])",
            "(= ?m [(dim ?x 0) (* (dim ?x 1) (dim ?e 2)) (dim ?x 3) (dim ?x 4)])",
            "(= (rank ?a) 4)", "(= (dim ?a 0) (dim ?x 0))", "(= (dim ?a 1) (dim ?m 1))")
_REPEATED = "(reshape :shape ?m (expand :shape ?e ?x))"
#: ``?a`` with its heads split into (groups, repeats): each group's repeats read the group's one key or value
_A_GROUPED = "(reshape :shape [(dim ?a 0) (dim ?x 1) (dim ?e 2) (dim ?a 2) (dim ?a 3)] ?a)"


def _grouped_heads() -> tuple[Rule, ...]:
    """Attention's two products with the key and value heads a group of query heads shares, each read once per
    group by the product's broadcast over the repeats instead of copied once per query head by an expand: the
    attention scores ``q @ k^T`` and the weighted values ``p @ v``."""
    return (
        Rule("grouped-heads-scores", (f"(matmul ?a (transpose :perm [0 1 3 2] {_REPEATED}))",),
             (f"(reshape :shape [(dim ?a 0) (dim ?a 1) (dim ?a 2) (dim ?x 3)] "
              f"(matmul {_A_GROUPED} (transpose :perm [0 1 2 4 3] ?x)))",), conditions=_GROUPED),
        Rule("grouped-heads-values", (f"(matmul ?a {_REPEATED})",),
             (f"(reshape :shape [(dim ?a 0) (dim ?a 1) (dim ?a 2) (dim ?x 4)] (matmul {_A_GROUPED} ?x))",),
             conditions=_GROUPED),
    )


LAYOUT_RULES: tuple[Rule, ...] = (
    # matmul with transposed operands: cuBLAS / Gemm flags instead of explicit transposes
    Rule("layout-matmul-ta", ("(matmul (transpose [1 0] ?a) ?b)",), ("(matmul_t 1 0 ?a ?b)",), bidirectional=True),
    Rule("layout-matmul-tb", ("(matmul ?a (transpose [1 0] ?b))",), ("(matmul_t 0 1 ?a ?b)",), bidirectional=True),
    Rule("layout-matmul-tab", ("(matmul (transpose [1 0] ?a) (transpose [1 0] ?b))",), ("(matmul_t 1 1 ?a ?b)",),
         bidirectional=True),
    # (B^T A^T)^T: the product computed transposed (TASO found it faster for BERT's largest matmul)
    Rule("layout-matmul-transposed-product", ("(matmul ?a ?b)",), ("(transpose [1 0] (matmul_t 1 1 ?b ?a))",),
         conditions=("(= (rank ?a) 2)",)),
    Rule("transpose-transpose-2d", ("(transpose [1 0] (transpose [1 0] ?x))",), ("?x",)),
    # an attention key moved to heads first, then its last two axes swapped (PyTorch code's
    # `k.transpose(1, 2)` ... `k.transpose(-1, -2)`), as the one move exporters also write, which the
    # MultiHeadAttention kernel rule matches
    Rule("transpose-transpose-key", ("(transpose [0 1 3 2] (transpose [0 2 1 3] ?x))",),
         ("(transpose [0 2 3 1] ?x)",)),
    # a layer norm over the last axis of (batch, seq, hidden) as one over the rows of a (batch * seq, hidden)
    # view: the same arithmetic; runtimes treat the two differently (onnxruntime fuses a residual add into a
    # 3-D layer norm only)
    Rule("layout-layernorm-rows", ("(layernorm :axis 2 :epsilon ?eps ?x ?scale ?bias)",),
         ("(reshape :shape [(dim ?x 0) (dim ?x 1) (dim ?x 2)] (layernorm :axis 1 :epsilon ?eps "
          "(reshape :shape [(* (dim ?x 0) (dim ?x 1)) (dim ?x 2)] ?x) ?scale ?bias))",),
         conditions=("(= (rank ?x) 3)",)),
    # a bias added to a 2-D product viewed as (batch, seq, hidden), as the product's rows before the view: where
    # it meets the product, Gemm adds it in the product's kernel (onnxruntime runs a separate Add otherwise)
    *(Rule(f"layout-bias-rows{suffix}", (lhs,),
           ("(reshape :shape ?s (ewadd ?x (reshape :shape [1 (dim ?x 1)] ?c)))",),
           conditions=("(= (rank ?x) 2)", "(= (rank ?c) 3)", "(= (dim ?c 0) 1)", "(= (dim ?c 1) 1)",
                       "(= (dim ?c 2) (dim ?x 1))"))
      for suffix, lhs in (("", "(ewadd (reshape :shape ?s ?x) ?c)"), ("-left", "(ewadd ?c (reshape :shape ?s ?x))"))),
    *(Rule(f"layout-gemm-bias{suffix}", (lhs,), ("(gemm :trans_a ?ta :trans_b ?tb ?a ?b ?c)",),
           conditions=("(= (rank ?c) 2)",))
      for suffix, lhs in (("", "(ewadd (matmul_t :trans_a ?ta :trans_b ?tb ?a ?b) ?c)"),
                          ("-left", "(ewadd ?c (matmul_t :trans_a ?ta :trans_b ?tb ?a ?b))"))),
    *(Rule(f"layout-gemm-bias-matmul{suffix}", (lhs,), ("(gemm :trans_a 0 :trans_b 0 ?a ?b ?c)",),
           conditions=("(= (rank ?a) 2)", "(= (rank ?b) 2)", "(= (rank ?c) 2)"))
      for suffix, lhs in (("", "(ewadd (matmul ?a ?b) ?c)"), ("-left", "(ewadd ?c (matmul ?a ?b))"))),
    # NHWC convolutions with explicit layout conversions; conversions cancel between NHWC neighbours
    Rule("layout-conv-nhwc", (f"(conv2d {_CONV} ?x ?w ?b)",),
         (f"(transpose {TO_NCHW} (conv2d_nhwc {_CONV} (transpose {TO_NHWC} ?x) ?w ?b))",)),
    Rule("layout-nhwc-nchw-cancel", (f"(transpose {TO_NHWC} (transpose {TO_NCHW} ?x))",), ("?x",)),
    Rule("layout-nchw-nhwc-cancel", (f"(transpose {TO_NCHW} (transpose {TO_NHWC} ?x))",), ("?x",)),
    Rule("layout-relu-nchw", (f"(relu (transpose {TO_NCHW} ?x))",), (f"(transpose {TO_NCHW} (relu ?x))",)),
    # local response normalization in each of its forms (eqsat.ops.lrn): the same function, which runtimes
    # run at very different speeds (onnxruntime's LRN kernel is 4-13x slower than either decomposition on CPU)
    *(Rule(f"lrn-form-{form}", ("(lrn :size ?size :alpha ?alpha :beta ?beta :bias ?shift :form 0 ?x)",),
           (f"(lrn :size ?size :alpha ?alpha :beta ?beta :bias ?shift :form {form} ?x)",)) for form in (1, 2)),
    Rule("layout-ewadd-nchw", (f"(ewadd (transpose {TO_NCHW} ?a) (transpose {TO_NCHW} ?b))",),
         (f"(transpose {TO_NCHW} (ewadd ?a ?b))",), conditions=("(= (shape ?a) (shape ?b))",)),
    *_grouped_heads(),
)
