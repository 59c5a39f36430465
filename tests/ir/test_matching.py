"""Rules applied to IR graphs directly (eqsat.ir.matching): matching, shape guards, TASO's applicability rule,
application, structural hashing and prepare()."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from eqsat import models, onnx_io
from eqsat.ir import matching as rw
from eqsat.ir.graph import Graph, TensorInfo, graph_hash, make_node
from eqsat.ir.passes import flatten_concats
from eqsat.ir.rule import Rule, terms_graph
from eqsat.pipeline import default_rules

RELU_RELU = Rule("relu-relu", ("(relu (relu ?x))",), ("(relu ?x)",))
TRANSPOSE_TWICE = Rule("transpose-twice", ("(transpose [1 0] (transpose [1 0] ?x))",), ("?x",))
# two matmuls sharing their left operand become one over concatenated right operands, split afterwards
SHARED_MATMUL = Rule(
    "shared-matmul",
    ("(matmul ?x ?a)", "(matmul ?x ?b)"),
    ("(split 1 0 (dim ?a 1) (matmul ?x (concat 1 ?a ?b)))",
     "(split 1 (dim ?a 1) (dim ?b 1) (matmul ?x (concat 1 ?a ?b)))"),
    conditions=("(!= ?a ?b)",),
)


def all_matches(rules: list[Rule], graph: Graph) -> list[rw.Match]:
    return list(rw.Matcher(rules).matches(graph))


def evaluate(graph: Graph, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return graph.evaluate(feeds, onnx_io.onnx_opaque_evaluator(graph))


def assert_same_values(original: Graph, new: Graph, seeds: tuple[int, ...] = (0, 1), rtol: float = 1e-4) -> None:
    new.validate()
    assert new.outputs == original.outputs
    assert [new.shapes[o] for o in new.outputs] == [original.shapes[o] for o in original.outputs]
    for seed in seeds:
        feeds = onnx_io.random_feeds(original, seed)
        for name, want, got in zip(original.outputs, evaluate(original, feeds), evaluate(new, feeds), strict=True):
            assert got.shape == want.shape, name
            scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
            np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-5 * scale, err_msg=name)


def outer_relu_of_relu(graph: Graph) -> set[str]:
    """Tensors computed by a relu whose input is a relu's output (what (relu (relu ?x)) can match)."""
    return {n.output for n in graph.nodes
            if n.op == "relu" and n.inputs[0] in graph.producers and graph.producers[n.inputs[0]].op == "relu"}


# ---------------------------------------------------------------------------------------------------------
# matching


def test_every_occurrence_of_a_single_output_pattern_is_found() -> None:
    g = terms_graph(["(relu (relu ?x))", "(relu (relu ?y))", "(tanh (relu (relu ?z)))"],
                    {"?x": (2, 3), "?y": (4,), "?z": (1, 2, 3)})
    expected = outer_relu_of_relu(g)
    assert len(expected) == 3
    ms = all_matches([RELU_RELU], g)
    assert len(ms) == 3
    assert {m.roots for m in ms} == {(r,) for r in expected}
    for m in ms:
        (root,) = m.roots
        inner = g.producers[root].inputs[0]
        assert m.nodes == {root, inner}
        assert dict(m.env)["?x"] == g.producers[inner].inputs[0]


def test_overlapping_occurrences_in_a_chain_are_each_found() -> None:
    g = terms_graph(["(relu (relu (relu ?x)))"], {"?x": (3, 3)})
    ms = all_matches([RELU_RELU], g)
    assert {m.roots for m in ms} == {(r,) for r in outer_relu_of_relu(g)}
    assert len(ms) == 2
    for m in ms:
        new = rw.rewrite(g, m)
        assert len(new.nodes) == 2
        assert_same_values(g, new)


def test_roots_restrict_matches_to_those_rooted_there() -> None:
    g = terms_graph(["(relu (relu ?x))", "(relu (relu ?y))"], {"?x": (2, 3), "?y": (2, 3)})
    first = g.outputs[0]
    ms = list(rw.Matcher([RELU_RELU]).matches(g, roots=[first]))
    assert [m.roots for m in ms] == [(first,)]


def test_two_output_rule_matches_every_ordered_pair_sharing_the_input() -> None:
    g = terms_graph(["(matmul ?x ?a)", "(matmul ?x ?b)", "(matmul ?x ?c)"],
                    {"?x": (4, 8), "?a": (8, 8), "?b": (8, 6), "?c": (8, 5)})
    ms = all_matches([SHARED_MATMUL], g)
    assert len(ms) == 6
    assert {m.roots for m in ms} == set(itertools.permutations(g.outputs, 2))
    for m in ms:
        new = rw.rewrite(g, m)
        assert [n.op for n in new.nodes].count("matmul") == 2  # two fused into one, the third kept
        assert_same_values(g, new)


def test_two_output_rule_needs_the_shared_input_and_distinct_operands() -> None:
    other_input = terms_graph(["(matmul ?x ?a)", "(matmul ?y ?b)"],
                              {"?x": (4, 8), "?y": (4, 8), "?a": (8, 8), "?b": (8, 8)})
    assert all_matches([SHARED_MATMUL], other_input) == []
    # the same product computed twice: (!= ?a ?b) compares tensors, and the weight is one tensor
    x, w = TensorInfo("x", (4, 8)), TensorInfo("w", (8, 8))
    twice = Graph((x, w), {}, (make_node("matmul", {}, ["x", "w"], "p"), make_node("matmul", {}, ["x", "w"], "q")),
                  ("p", "q")).validate()
    assert all_matches([SHARED_MATMUL], twice) == []
    without_condition = Rule("shared-any", SHARED_MATMUL.lhs, SHARED_MATMUL.rhs)
    assert {m.roots for m in all_matches([without_condition], twice)} == {("p", "q"), ("q", "p")}


# ---------------------------------------------------------------------------------------------------------
# shape guards and conditions


def test_an_ill_shaped_right_hand_side_is_not_applicable() -> None:
    unsound = Rule("ewadd-as-matmul", ("(ewadd ?a ?b)",), ("(matmul ?a ?b)",))  # shape-checked, not sound
    g = terms_graph(["(ewadd ?p ?q)", "(ewadd ?r ?s)"], {"?p": (4, 4), "?q": (4, 4), "?r": (4, 6), "?s": (4, 6)})
    square, wide = g.outputs
    ms = {m.roots[0]: m for m in all_matches([unsound], g)}
    assert set(ms) == {square, wide}  # matching does not price the right-hand side
    with pytest.raises(rw.NotApplicable):
        rw.build_rewrite(ms[wide], g, rw.name_allocator(g))
    new = rw.rewrite(g, ms[square])
    assert new.producers[square].op == "matmul"
    assert new.shapes[square] == (4, 4)
    assert new.producers[wide].op == "ewadd"


def test_a_right_hand_side_of_another_shape_is_not_applicable() -> None:
    to_transpose = Rule("ewadd-as-transpose", ("(ewadd ?a ?b)",), ("(transpose [1 0] ?a)",))
    g = terms_graph(["(ewadd ?p ?q)", "(ewadd ?r ?s)"], {"?p": (5, 5), "?q": (5, 5), "?r": (4, 6), "?s": (4, 6)})
    square, wide = g.outputs
    ms = {m.roots[0]: m for m in all_matches([to_transpose], g)}
    with pytest.raises(rw.NotApplicable):  # well-shaped, but (6, 4) where the left side is (4, 6)
        rw.rewrite(g, ms[wide])
    assert rw.rewrite(g, ms[square]).producers[square].op == "transpose"


def test_a_variable_right_hand_side_of_another_shape_is_not_applicable() -> None:
    left = Rule("matmul-as-left", ("(matmul ?a ?b)",), ("?a",))
    g = terms_graph(["(matmul ?x ?w)", "(matmul ?x ?v)"], {"?x": (4, 8), "?w": (8, 8), "?v": (8, 6)})
    same, narrower = g.outputs
    ms = {m.roots[0]: m for m in all_matches([left], g)}
    with pytest.raises(rw.NotApplicable):
        rw.rewrite(g, ms[narrower])
    new = rw.rewrite(g, ms[same])
    assert new.outputs == g.outputs and new.shapes[same] == (4, 8)


def test_a_condition_on_a_dimension_filters_matches() -> None:
    twice = Rule("relu-twice-if-4", ("(relu ?a)",), ("(relu (relu ?a))",), conditions=("(= (dim ?a 1) 4)",))
    g = terms_graph(["(relu ?p)", "(relu ?q)", "(relu ?r)"], {"?p": (2, 4), "?q": (2, 5), "?r": (3, 4)})
    p, q, r = g.outputs
    assert {m.roots for m in all_matches([twice], g)} == {(p,), (r,)}


def test_a_condition_reading_a_missing_axis_does_not_match() -> None:
    rule = Rule("relu-if-dim3", ("(relu ?a)",), ("(relu (relu ?a))",), conditions=("(= (dim ?a 3) 4)",))
    g = terms_graph(["(relu ?m)", "(relu ?t)", "(relu ?u)"], {"?m": (2, 4), "?t": (1, 2, 3, 4), "?u": (1, 2, 3, 5)})
    matrix, rank4, other = g.outputs
    assert {m.roots for m in all_matches([rule], g)} == {(rank4,)}


# ---------------------------------------------------------------------------------------------------------
# TASO's applicability rule


def test_an_inner_node_used_outside_the_match_makes_it_inapplicable() -> None:
    g = terms_graph(["(relu (relu ?x))", "(ewadd (relu ?x) ?y)"], {"?x": (2, 3), "?y": (2, 3)})
    assert outer_relu_of_relu(g)  # the pattern is there...
    assert all_matches([RELU_RELU], g) == []  # ...but its inner relu also feeds the ewadd


def test_an_inner_node_that_is_a_graph_output_makes_it_inapplicable() -> None:
    g = terms_graph(["(relu (relu ?x))", "(relu ?x)"], {"?x": (2, 3)})
    assert outer_relu_of_relu(g)
    assert all_matches([RELU_RELU], g) == []


def test_a_root_used_several_times_is_fine() -> None:
    g = terms_graph(["(tanh (relu (relu ?x)))", "(sigmoid (relu (relu ?x)))"], {"?x": (2, 3)})
    (m,) = all_matches([RELU_RELU], g)
    new = rw.rewrite(g, m)
    assert len(new.nodes) == len(g.nodes) - 1
    assert_same_values(g, new)


def test_a_node_matched_and_also_bound_to_a_variable_is_not_lost() -> None:
    """``?y`` and ``(relu ?x)`` both bind the one relu of relu(x) + relu(x); the right-hand side reads ``?y``,
    so that relu must survive the rewrite (or the match must be refused)."""
    swap = Rule("swap-relu", ("(ewadd ?y (relu ?x))",), ("(ewadd (relu ?x) ?y)",))
    g = terms_graph(["(ewadd (relu ?x) (relu ?x))"], {"?x": (2, 3)})
    for m in all_matches([swap], g):
        try:
            new = rw.rewrite(g, m)
        except rw.NotApplicable:
            continue
        new.validate()
        assert_same_values(g, new)


# ---------------------------------------------------------------------------------------------------------
# application


def test_applying_a_match_keeps_output_names_and_values() -> None:
    g = terms_graph(["(tanh (relu (relu ?x)))", "(relu (relu ?y))"], {"?x": (3, 4), "?y": (5,)})
    ms = all_matches([RELU_RELU], g)
    assert len(ms) == 2
    new = g
    for m in ms:  # apply both, one after the other (the second match still holds after the first)
        (again,) = [n for n in rw.Matcher([RELU_RELU]).matches(new) if n.roots == m.roots]
        new = rw.rewrite(new, again)
    assert new.outputs == g.outputs
    assert [n.op for n in new.nodes].count("relu") == 2
    assert_same_values(g, new)


def test_a_variable_right_hand_side_keeps_a_graph_output_name() -> None:
    g = terms_graph(["(transpose [1 0] (transpose [1 0] ?x))", "(relu (transpose [1 0] (transpose [1 0] ?x)))"],
                    {"?x": (3, 5)})
    (m,) = all_matches([TRANSPOSE_TWICE], g)
    assert m.roots == (g.outputs[0],)
    new = rw.rewrite(g, m)
    assert new.outputs == g.outputs
    assert "transpose" not in {n.op for n in new.nodes}
    assert new.producers[g.outputs[1]].inputs == ("x",)  # the consumer reads x itself
    assert_same_values(g, new)


def test_a_variable_right_hand_side_naming_another_output_keeps_both_outputs() -> None:
    g = terms_graph(["(relu ?x)", "(transpose [1 0] (transpose [1 0] (relu ?x)))"], {"?x": (3, 5)})
    (m,) = all_matches([TRANSPOSE_TWICE], g)
    new = rw.rewrite(g, m)
    assert new.outputs == g.outputs and len(set(new.outputs)) == 2
    assert_same_values(g, new)


def test_the_relu_relu_rewrite_keeps_a_graph_output_name() -> None:
    g = terms_graph(["(relu (relu ?x))"], {"?x": (4, 4)})
    (m,) = all_matches([RELU_RELU], g)
    new = rw.rewrite(g, m)
    assert new.outputs == g.outputs and len(new.nodes) == 1
    assert_same_values(g, new)


# ---------------------------------------------------------------------------------------------------------
# every corpus rule at every match on small models: sound rules, sound matching


@pytest.fixture(scope="module")
def corpus_matcher() -> rw.Matcher:
    return rw.Matcher(default_rules())


@pytest.mark.parametrize("build", [
    lambda: models.nasrnn_cell(hidden=16),
    lambda: models.bert_attention_block(seq=8, hidden=16, heads=2),
    models.small_cnn,
], ids=["nasrnn_cell", "bert_attention_block", "small_cnn"])
def test_every_corpus_rewrite_keeps_the_values(build, corpus_matcher: rw.Matcher) -> None:
    g = rw.prepare(onnx_io.load_model(build()))
    feeds = onnx_io.random_feeds(g, 0)
    want = evaluate(g, feeds)
    applied: set[str] = set()
    for m in corpus_matcher.matches(g):
        try:
            new = rw.rewrite(g, m)
        except rw.NotApplicable:
            continue
        new.validate()
        assert new.outputs == g.outputs, m.rule.name
        for name, a, b in zip(g.outputs, want, evaluate(new, feeds), strict=True):
            assert b.shape == a.shape, (m.rule.name, name)
            scale = max(1.0, float(np.max(np.abs(a))))
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5 * scale, err_msg=f"{m.rule.name} at {m.roots}")
        applied.add(m.rule.name)
    assert len(applied) >= 3, applied  # the check is not vacuous


# ---------------------------------------------------------------------------------------------------------
# structural hash and prepare()


def _chain(names: tuple[str, str, str], middle: str = "tanh") -> Graph:
    a, b, c = names
    x = TensorInfo("x", (2, 3))
    nodes = (make_node("ewadd", {}, [b, "x"], c), make_node(middle, {}, [a], b), make_node("relu", {}, ["x"], a))
    return Graph((x,), {}, nodes, (c,)).validate()


def test_graph_hash_ignores_names_of_computed_tensors() -> None:
    assert graph_hash(_chain(("a", "b", "c"))) == graph_hash(_chain(("t7", "u", "out")))


def test_graph_hash_sees_a_changed_operator() -> None:
    assert graph_hash(_chain(("a", "b", "c"))) != graph_hash(_chain(("a", "b", "c"), middle="sigmoid"))


def test_graph_hash_sees_swapped_operands() -> None:
    g = terms_graph(["(matmul ?x ?y)"], {"?x": (3, 3), "?y": (3, 3)})
    h = terms_graph(["(matmul ?y ?x)"], {"?x": (3, 3), "?y": (3, 3)})
    assert graph_hash(g) != graph_hash(h)


def test_prepare_makes_concats_binary_and_keeps_values() -> None:
    widths = {"a": 3, "b": 4, "c": 1, "d": 2}
    inputs = tuple(TensorInfo(k, (2, w)) for k, w in widths.items())
    nodes = (make_node("concat", {"axis": 1}, list(widths), "cat"), make_node("relu", {}, ["cat"], "y"))
    g = Graph(inputs, {}, nodes, ("y",)).validate()
    p = rw.prepare(g)
    concats = [n for n in p.nodes if n.op == "concat"]
    assert len(concats) == 3
    assert all(len(n.inputs) == 2 for n in concats)
    assert p.producers["cat"].op == "concat"  # the last of the chain keeps the name
    assert p.shapes["cat"] == (2, sum(widths.values()))
    assert_same_values(g, p)
    back = flatten_concats(p).live()
    assert [len(n.inputs) for n in back.nodes if n.op == "concat"] == [4]
    assert_same_values(g, back)
