"""Softmax, the operator added by the README's recipe: import across the opset-13 change, export, verifier
model, axioms, generator form and a corpus rule that moves a transpose across it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from eqsat import ops
from eqsat.ir.rule import parse
from eqsat.onnx_io import load_model, random_feeds, run_onnxruntime, to_onnx
from eqsat.pipeline.check import check_equal
from eqsat.rules import axioms as A
from eqsat.rules import corpus
from eqsat.rules import verifier as V
from eqsat.testing.onnx_builders import make_model


def _softmax_model(shape: tuple[int, ...], opset: int, axis: int | None) -> onnx.ModelProto:
    attrs = {} if axis is None else {"axis": axis}
    node = helper.make_node("Softmax", ["x"], ["y"], **attrs)
    return make_model([node], [("x", shape)], [("y", shape)], opset=opset, name="sm", ir_version=7)


@pytest.mark.parametrize("opset,axis", [(11, None), (11, 1), (11, 3), (12, -1), (13, None), (13, 1), (17, -2)])
def test_softmax_imports_with_its_opsets_meaning_and_round_trips(opset: int, axis: int | None) -> None:
    m = _softmax_model((2, 3, 4, 5), opset, axis)
    g = load_model(m)
    assert "opaque" not in {n.op for n in g.nodes}
    assert "softmax" in {n.op for n in g.nodes}
    feeds = random_feeds(m)
    ref = run_onnxruntime(m, feeds)[0]
    np.testing.assert_allclose(g.evaluate(feeds)[0], ref, rtol=1e-5, atol=1e-6)
    out = to_onnx(g)
    assert check_equal(m, out).ok


def test_softmax_exports_before_opset_13_as_one_axis() -> None:
    """Softmax-11 on axis 1 of a 4-D tensor normalizes over dims 1..3; eqsat's one-axis softmax must not be
    written as that node, and the decomposition it writes instead must be right."""
    m = _softmax_model((2, 3, 4, 5), 13, 1)
    g = load_model(m)
    g.meta["opset"] = 11
    out = to_onnx(g, opset=11)
    assert "Softmax" not in {n.op_type for n in out.graph.node}
    feeds = random_feeds(m)
    np.testing.assert_allclose(run_onnxruntime(out, feeds)[0], run_onnxruntime(m, feeds)[0], rtol=1e-5, atol=1e-6)


def test_softmax_shape_rules_reject_a_bad_axis() -> None:
    spec = ops.get("softmax")
    with pytest.raises(ops.OpError):
        spec.shape({"axis": 3}, [(2, 3)])
    from eqsat.ops import shapes as S
    assert S.evaluate(spec.shape_rules, {"x": (2, 3)}, {"axis": 3}) is None
    assert S.evaluate(spec.shape_rules, {"x": (2, 3)}, {"axis": 1}) == (2, 3)


def test_softmax_axioms_are_declared_with_it_and_valid() -> None:
    names = {a.name for a in A.declared_axioms({"softmax"})}
    assert names and all(n.startswith("softmax-") for n in names)
    assert names <= {a.name for a in A.AXIOMS}
    checks = V.validate_axioms([a for a in A.AXIOMS if a.name in names], workers=1)
    assert all(c.status == "valid" for c in checks), [c for c in checks if c.status != "valid"]


def test_verifier_refuses_a_wrong_softmax_axiom_and_rule() -> None:
    wrong = A.Axiom("wrong", "(transpose :perm [1 0] (softmax :axis 0 ?a))",
                    "(softmax :axis 0 (transpose :perm [1 0] ?a))")
    assert V.validate_axiom(wrong).status == "invalid"
    right = V.verify_equation(["(transpose [1 0 2] (softmax 2 ?a))"], ["(softmax 2 (transpose [1 0 2] ?a))"])
    assert right.status == "proved"
    # a tenth of the default budget (as test_rules_verifier's wrong compositions): a wrong rule stays unproved
    bad = V.verify_equation(["(transpose [1 0 2] (softmax 2 ?a))"], ["(softmax 1 (transpose [1 0 2] ?a))"],
                            rlimit=500_000)
    assert bad.status != "proved"


def test_the_corpus_has_a_proved_softmax_rule() -> None:
    entries, _ = corpus.read_corpus()
    soft = [e for e in entries if any("softmax" in s for s in e.lhs + e.rhs)]
    assert soft and all(e.status == "proved" for e in soft)
    # every side names its parameters in the file and parses back to the in-memory positional form
    assert all(parse(s)[0] for e in soft for s in e.lhs)


def test_optimizer_moves_a_transpose_across_softmax() -> None:
    """(transpose (softmax x)) then the inverse transpose: with the corpus rule the two transposes cancel."""
    nodes = [helper.make_node("Softmax", ["x"], ["s"], axis=-1),
             helper.make_node("Transpose", ["s"], ["t"], perm=[1, 0, 2]),
             helper.make_node("Relu", ["t"], ["r"]),
             helper.make_node("Transpose", ["r"], ["y"], perm=[1, 0, 2])]
    m = make_model(nodes, [("x", [4, 8, 16])], [("y", [4, 8, 16])])
    import eqsat

    res = eqsat.optimize(m, time_limit=30)
    assert res.numeric is not None and res.numeric.ok
    kinds = [n.op_type for n in res.model.graph.node]
    assert kinds.count("Transpose") == 0, kinds


def test_float_parameters_parse_print_compile_and_encode() -> None:
    """Float literals (an epsilon, a clip bound) in patterns: parsed as floats, printed back, rendered for egglog
    as the registry's float literal, and encoded for Z3 so that 6 and 6.0 are the same bound."""
    from eqsat.engine.compile import compile_rules
    from eqsat.ir.rule import Rule, pretty, split_args, unparse

    e = parse("(clip :low -inf :high 6 (layernorm :axis 1 :epsilon 1e-05 ?x ?g ?b))")
    assert parse(pretty(e)) == e and parse(unparse(e)) == e
    assert split_args(e)[1] == [float("-inf"), 6.0]
    text = compile_rules([Rule("t", ("(clip 0 6 (transpose [1 0] ?x))",), ("(transpose [1 0] (clip 0.0 6.0 ?x))",))])[0]
    assert '(clip "0.0" "6.0"' in text
    same = V.verify_equation(["(clip 0 6 ?x)"], ["(clip 0.0 6.0 ?x)"])
    assert same.status == "proved"
    assert V.verify_equation(["(clip 0 6 ?x)"], ["(clip 0 1 ?x)"], rlimit=300_000).status != "proved"
