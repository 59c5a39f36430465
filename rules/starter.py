"""The starter rule set: hand-written substitutions from TASO's operator properties.

These are the rules the engine uses until the generated, Z3-verified corpus replaces them. Each is tested
numerically on random tensors (tests/rules/test_rules_starter.py). Shape soundness is checked by the engine when
a right-hand side is merged, so conditions here only state what shapes cannot (e.g. split offsets).
"""

from __future__ import annotations

from eqsat.ir.rule import Rule
from eqsat.rules.grouped import GROUPED_RULES
from eqsat.rules.over_split import OVER_SPLIT_RULES

_CONV = "?st ?pd ?dl ?g"

STARTER_RULES: tuple[Rule, ...] = (
    Rule("ewadd-comm", ("(ewadd ?a ?b)",), ("(ewadd ?b ?a)",)),
    Rule("ewadd-assoc", ("(ewadd (ewadd ?a ?b) ?c)",), ("(ewadd ?a (ewadd ?b ?c))",), bidirectional=True),
    Rule("ewmul-comm", ("(ewmul ?a ?b)",), ("(ewmul ?b ?a)",)),
    Rule("ewmul-assoc", ("(ewmul (ewmul ?a ?b) ?c)",), ("(ewmul ?a (ewmul ?b ?c))",), bidirectional=True),
    Rule("ewmul-distrib", ("(ewmul (ewadd ?a ?b) ?c)",), ("(ewadd (ewmul ?a ?c) (ewmul ?b ?c))",),
         bidirectional=True),
    Rule("matmul-assoc", ("(matmul (matmul ?a ?b) ?c)",), ("(matmul ?a (matmul ?b ?c))",), bidirectional=True),
    Rule("matmul-linear-right", ("(matmul ?a (ewadd ?b ?c))",), ("(ewadd (matmul ?a ?b) (matmul ?a ?c))",),
         bidirectional=True),
    Rule("matmul-linear-left", ("(matmul (ewadd ?a ?b) ?c)",), ("(ewadd (matmul ?a ?c) (matmul ?b ?c))",),
         bidirectional=True),
    Rule("smul-matmul", ("(smul (matmul ?a ?b) ?s)",), ("(matmul ?a (smul ?b ?s))",), bidirectional=True),
    Rule("conv-relu-fuse", (f"(relu (conv2d {_CONV} 0 ?x ?w ?b))",), (f"(conv2d {_CONV} 1 ?x ?w ?b)",),
         bidirectional=True),
    Rule("conv-batchnorm-fold", (f"(batchnorm ?eps (conv2d {_CONV} 0 ?x ?w ?b) ?s ?bb ?m ?v)",),
         (f"(conv2d {_CONV} 0 ?x (bnfold_w ?eps ?w ?s ?v) (bnfold_b ?eps ?b ?s ?bb ?m ?v))",)),
    # onnxruntime runs Conv + Add (+ Relu) as one kernel: conv2d_add is that form (import writes it), these
    # relate it to the separate operators so that rewrites through the add still apply
    Rule("conv-add-fuse", (f"(ewadd (conv2d {_CONV} 0 ?x ?w ?b) ?r)",), (f"(conv2d_add {_CONV} 0 ?x ?w ?b ?r)",),
         bidirectional=True),
    Rule("conv-add-relu-fuse", (f"(relu (conv2d_add {_CONV} 0 ?x ?w ?b ?r))",),
         (f"(conv2d_add {_CONV} 1 ?x ?w ?b ?r)",), bidirectional=True),
    Rule("relu-transpose", ("(relu (transpose ?p ?x))",), ("(transpose ?p (relu ?x))",), bidirectional=True),
    Rule("relu-concat", ("(concat ?ax (relu ?a) (relu ?b))",), ("(relu (concat ?ax ?a ?b))",), bidirectional=True),
    Rule("relu-split", ("(split ?ax ?s ?n (relu ?x))",), ("(relu (split ?ax ?s ?n ?x))",), bidirectional=True),
    Rule("ewadd-concat", ("(concat ?ax (ewadd ?a ?b) (ewadd ?c ?d))",),
         ("(ewadd (concat ?ax ?a ?c) (concat ?ax ?b ?d))",),
         conditions=("(= (shape ?a) (shape ?b))", "(= (shape ?c) (shape ?d))"), bidirectional=True),
    Rule("split-concat-first", ("(split ?ax 0 ?n (concat ?ax ?a ?b))",), ("?a",)),
    Rule("split-concat-second", ("(split ?ax ?s ?n (concat ?ax ?a ?b))",), ("?b",),
         conditions=("(= ?s (dim ?a ?ax))",)),
    Rule("concat-of-splits", ("(concat ?ax (split ?ax 0 ?n ?x) (split ?ax ?n ?m ?x))",), ("?x",)),
    # import writes an Identity, or a Cast of float32 to float32, as a reshape to the same shape: the tensor itself,
    # so that patterns across it match (a legacy export's attention casts its softmax to float32)
    Rule("reshape-identity", ("(reshape ?sh ?x)",), ("?x",), conditions=("(= (shape ?x) ?sh)",)),
    Rule("transpose-matmul", ("(transpose [1 0] (matmul ?a ?b))",),
         ("(matmul (transpose [1 0] ?b) (transpose [1 0] ?a))",), bidirectional=True),
    # two-output rules
    Rule("fuse-matmul-shared-lhs", ("(matmul ?x ?w1)", "(matmul ?x ?w2)"),
         ("(split (- (rank ?x) 1) 0 (dim ?w1 (- (rank ?w1) 1)) "
          "(matmul ?x (concat (- (rank ?w1) 1) ?w1 ?w2)))",
          "(split (- (rank ?x) 1) (dim ?w1 (- (rank ?w1) 1)) (dim ?w2 (- (rank ?w2) 1)) "
          "(matmul ?x (concat (- (rank ?w1) 1) ?w1 ?w2)))"),
         conditions=("(!= ?w1 ?w2)",)),
    Rule("fuse-conv-shared-input", (f"(conv2d {_CONV} ?act ?x ?w1 ?b1)", f"(conv2d {_CONV} ?act ?x ?w2 ?b2)"),
         (f"(split 1 0 (dim ?w1 0) (conv2d {_CONV} ?act ?x (concat 0 ?w1 ?w2) (concat 0 ?b1 ?b2)))",
          f"(split 1 (dim ?w1 0) (dim ?w2 0) (conv2d {_CONV} ?act ?x (concat 0 ?w1 ?w2) (concat 0 ?b1 ?b2)))"),
         conditions=("(!= ?w1 ?w2)", "(= ?g 1)")),
)

#: Convolution is linear in its input. The generator cannot state it (every kernel it enumerates carries its
#: own bias variable, and conv(a + b, w, bias) adds the bias once), so it is written here in the two forms
#: the rule language can express: the biases of two convolutions add up, and a zero bias (``const_zero``)
#: splits into two. Z3 proves both from the axioms ``conv-input-linear`` and ``zero-ewadd``
#: (tests/rules/test_derivations.py). The inputs must have equal shapes: with broadcasting, padding would differ.
LINEAR_RULES: tuple[Rule, ...] = (
    Rule("conv-input-linear", (f"(ewadd (conv2d {_CONV} 0 ?x ?w ?b1) (conv2d {_CONV} 0 ?y ?w ?b2))",),
         (f"(conv2d {_CONV} 0 (ewadd ?x ?y) ?w (ewadd ?b1 ?b2))",), conditions=("(= (shape ?x) (shape ?y))",)),
    Rule("conv-input-linear-zero-bias", (f"(conv2d {_CONV} 0 (ewadd ?x ?y) ?w (const_zero ?z))",),
         (f"(ewadd (conv2d {_CONV} 0 ?x ?w (const_zero ?z)) (conv2d {_CONV} 0 ?y ?w (const_zero ?z)))",),
         conditions=("(= (shape ?x) (shape ?y))",), bidirectional=True),
)

#: A mixed-precision model's casts (:mod:`eqsat.ops.cast`), which the generator does not enumerate: a round trip
#: through a wider type gives back what went in (the inner cast's source is the tensor's precision, by the
#: import and by every rule), and rounding commutes with what only moves data. Tested numerically on tensors
#: held in the inner precision (tests/rules/test_cast_rules.py).
CAST_RULES: tuple[Rule, ...] = (
    Rule("cast-round-trip-float16", ("(cast float32 float16 (cast float16 float32 ?x))",), ("?x",)),
    Rule("cast-round-trip-bfloat16", ("(cast float32 bfloat16 (cast bfloat16 float32 ?x))",), ("?x",)),
    Rule("cast-transpose", ("(cast ?s ?t (transpose ?p ?x))",), ("(transpose ?p (cast ?s ?t ?x))",),
         bidirectional=True),
    Rule("cast-reshape", ("(cast ?s ?t (reshape ?sh ?x))",), ("(reshape ?sh (cast ?s ?t ?x))",),
         bidirectional=True),
    Rule("cast-concat", ("(concat ?ax (cast ?s ?t ?a) (cast ?s ?t ?b))",), ("(cast ?s ?t (concat ?ax ?a ?b))",),
         bidirectional=True),
)

#: Hand-written rules added to the generated corpus by default, tested numerically like every other rule:
#: rules over operators outside the generator's TASO operator set (batch-norm folding, conv + residual add
#: fusion), the two halves of a split concatenated back (the generator only splits the concatenations it
#: built), a reshape to the shape its input has, input linearity, the casts', and the convolution rules for any
#: strides, pads, dilations and group count that the generator's literal convolutions cannot state: relu
#: fusion and the grouped-convolution and channel-permutation rules (:mod:`eqsat.rules.grouped`); and the
#: element-wise operators moved before a split (:mod:`eqsat.rules.over_split`), which the generator cannot state
#: for the splits it does not build.
EXTRA_RULES: tuple[Rule, ...] = tuple(r for r in STARTER_RULES if r.name in (
    "conv-batchnorm-fold", "concat-of-splits", "reshape-identity", "conv-add-fuse", "conv-add-relu-fuse",
    "conv-relu-fuse")) + LINEAR_RULES + CAST_RULES + GROUPED_RULES + OVER_SPLIT_RULES

#: The rules relating each fold the import makes (:func:`eqsat.ir.passes.import_folds`) to the nodes it folds: a
#: batch norm into the conv's kernel and bias, a residual add as conv2d_add, a relu as the activation of either.
#: ``optimize(as_written=True)`` imports a model without those folds and adds these to any rule set, so the
#: search may make them where they pay (tests/pipeline/test_as_written.py).
IMPORT_FOLD_RULES: tuple[Rule, ...] = tuple(r for r in STARTER_RULES if r.name in (
    "conv-batchnorm-fold", "conv-add-fuse", "conv-relu-fuse", "conv-add-relu-fuse"))
