"""benchmarks/taso_coverage.py on rules written here in Tensat's text form (TASO's own rules are not part of eqsat):
the translation into eqsat's patterns (pads, group count, biases, split points), its numeric check and the
derivation with the default rules."""

from __future__ import annotations

from pathlib import Path

from _benchmarks import load_benchmark

cov = load_benchmark("taso_coverage")


def test_a_convolution_gets_pads_groups_and_a_bias_that_follows_its_kernel() -> None:
    lhs, rhs, shapes = cov.translate(["(relu (conv2d 1 1 0 0 ?input_8 (ewadd ?input_19 ?input_19)))"],
                                     ["(conv2d 1 1 0 2 ?input_8 (ewadd ?input_19 ?input_19))"], zero_bias=False)
    # a 3x3 "same" kernel of one input channel over four: four groups, pads 1; the bias of a sum is the sum
    assert lhs == ["(relu (conv2d :pads [1 1 1 1] :groups 4 :act 0 ?i8 (ewadd ?i19 ?i19) (ewadd ?b19 ?b19)))"]
    assert rhs == ["(conv2d :pads [1 1 1 1] :groups 4 :act 1 ?i8 (ewadd ?i19 ?i19) (ewadd ?b19 ?b19))"]
    assert shapes == {"?i8": (2, 4, 5, 5), "?i19": (4, 1, 3, 3), "?b19": (4,)}
    assert cov.holds(lhs, rhs, shapes)
    one_by_three = cov.translate(["(conv2d 1 1 0 0 ?input_9 ?input_14)"], ["?input_9"], zero_bias=True)[0]
    assert one_by_three == ["(conv2d :pads [0 1 0 1] :groups 1 :act 0 ?i9 ?i14 (const_zero :shape [4]))"]


def test_a_statement_false_with_biases_is_measured_with_zero_biases(tmp_path: Path) -> None:
    # a convolution over a sum of inputs adds its bias once: with a bias per kernel the translation is false
    single = tmp_path / "single.txt"
    single.write_text("(conv2d 1 1 0 0 (ewadd ?input_8 ?input_9) ?input_12)=>"
                      "(ewadd (conv2d 1 1 0 0 ?input_9 ?input_12) (conv2d 1 1 0 0 ?input_8 ?input_12))\n"
                      "(ewadd ?input_2 (ewadd ?input_3 ?input_1))=>(ewadd (ewadd ?input_1 ?input_2) ?input_3)\n")
    multi = tmp_path / "multi.txt"  # two matmuls of one input: one over the weights side by side, then split
    multi.write_text("(matmul 0 ?input_2 ?input_5)=>(split_0 (split 1 (matmul 0 ?input_2 (concat 1 2 ?input_5 "
                     "?input_6))))\n(matmul 0 ?input_2 ?input_6)=>(split_1 (split 1 (matmul 0 ?input_2 (concat 1 2 "
                     "?input_5 ?input_6))))\n")
    rules = cov.read_rules(single, multi)
    assert [(n, len(lhs)) for n, lhs, _ in rules] == [("s0", 1), ("s1", 1), ("m0", 2)]
    _, rhs, _ = cov.translate(*rules[2][1:], zero_bias=False)
    assert rhs[1] == "(split :axis 1 :start 4 :size 4 (matmul ?i2 (concat :axis 1 ?i5 ?i6)))"
    from eqsat.pipeline import default_rules

    records = cov.measure(rules, default_rules(), iters=3, zero_bias=False)
    assert [r["bias"] for r in records] == ["zero (with biases it is false)", "kernel", "kernel"]
    assert all(r["derived"] for r in records)
    assert "Derived: 3 of 3" in cov.report(records, 3, False)
