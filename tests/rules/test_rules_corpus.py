"""Tests of the committed corpus: numeric soundness of every rule, loading, and the classic substitutions
derived in an e-graph."""

from __future__ import annotations

import functools
import re

import pytest

from eqsat.engine.egraph import EGraph, ENode
from eqsat.engine.limits import Limits
from eqsat.engine.saturation import saturate
from eqsat.ir.rule import Rule, terms_graph
from eqsat.rules import corpus
from eqsat.rules import generator as gen
from eqsat.rules.corpus_verify import NUMERIC_RANDOM_SHAPES

ENTRIES, META = corpus.read_corpus()


def test_corpus_is_committed_and_sized() -> None:
    assert 50 <= len(ENTRIES) <= 400
    assert len({e.id for e in ENTRIES}) == len(ENTRIES)
    assert any(e.multi for e in ENTRIES)
    assert all(e.status in ("proved", "unknown", "refuted") for e in ENTRIES)
    assert sum(e.status == "proved" for e in ENTRIES) >= len(ENTRIES) // 2


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.id)
def test_rule_is_numerically_sound(entry: corpus.Entry) -> None:
    # float64, three shape sets, plus random shape assignments where both sides are well-shaped
    assert gen.check_numeric(entry.lhs, entry.rhs, shape_sets=(0, 1, 2), random_shapes=2, seed=11,
                             conditions=entry.conditions) is None
    if entry.status == "refuted" and entry.reason.startswith("numeric counterexample"):
        # sound on the generator's shapes but not in general: the verifier's counterexample must reproduce
        assert gen.check_numeric(entry.lhs, entry.rhs, shape_sets=(0, 1, 2), random_shapes=NUMERIC_RANDOM_SHAPES,
                                 seed=7, conditions=entry.conditions) is not None


def test_transpose_compositions_apply_one_way() -> None:
    # two transposes become one; the reverse (one transpose split in two) would only grow the e-graph
    chain = re.compile(r"\(transpose \[[\d ]+\] \(transpose \[[\d ]+\] \?\w+\)\)")
    compositions = [e for e in ENTRIES if not e.multi and chain.fullmatch(e.lhs[0])]
    assert len(compositions) >= 20  # rank 3 has 5 x 5 pairs of non-identity permutations
    assert not any(e.bidirectional for e in compositions)
    assert not any(e.multi and all(op == "transpose" for s in e.lhs + e.rhs for op in _ops(s)) for e in ENTRIES)


def _ops(text: str) -> list[str]:
    return re.findall(r"\((\w+)", text)


def test_engine_rules_compile() -> None:
    from eqsat.engine.compile import compile_rules

    rules = corpus.load_corpus_rules()
    assert rules and all(isinstance(r, Rule) for r in rules)
    assert len(compile_rules(rules)) >= len(rules) // 2
    assert len(corpus.load_corpus_rules(include_unproved=True)) >= len(rules)


def test_default_rules_come_from_the_corpus() -> None:
    from eqsat.rules import corpus_or_starter, engine_worthy
    from eqsat.rules.starter import EXTRA_RULES, STARTER_RULES

    rules = corpus_or_starter()
    names = [r.name for r in rules]
    assert len(names) == len(set(names))
    # every proved, engine-worthy corpus rule (each direction) is used by default ...
    expected = [r.name for r in corpus.load_corpus_rules() if engine_worthy(r)]
    assert expected and set(expected) <= set(names)
    # ... no rule that is not proved ...
    assert all(r.status == "proved" for r in rules if r.origin == "corpus")
    # ... and the only other rules are the named hand-written extras, never the rest of the starter set
    extra = {r.name for r in EXTRA_RULES}
    assert {r.name for r in rules if r.origin != "corpus"} == extra
    starter_only = {r.name for r in STARTER_RULES} - extra
    assert not starter_only & set(names)


# ---------------------------------------------------------------------------------------------------------
# classic substitutions in an e-graph


def _saturate(outputs: list[str], shapes: dict[str, tuple[int, ...]], iters: int = 4) -> EGraph:
    rules = corpus.load_corpus_rules()
    res = saturate(terms_graph(outputs, shapes), rules, Limits(iter_limit=iters, node_limit=30_000, time_limit=60,
                                                          multi_iters=iters), in_process=True)
    return res.egraph


def _nodes(eg: EGraph, op: str, cls: str | None = None) -> list[ENode]:
    return [n for n in eg.nodes if n.op == op and (cls is None or n.eclass == cls)]


def _cls_of_input(eg: EGraph, name: str) -> str:
    return next(n.eclass for n in eg.nodes if n.op == "Input" and n.p["name"] == name)


def _child_ops(eg: EGraph, node: ENode, k: int) -> set[str]:
    return {n.op for n in eg.members(node.children[k])}


def test_matmul_associativity() -> None:
    eg = _saturate(["(matmul (matmul ?x ?w1) ?w2)"], {"?x": (2, 3), "?w1": (3, 4), "?w2": (4, 5)})
    root = eg.roots[0]
    x = _cls_of_input(eg, "x")
    assert any(n.children[0] == x and "matmul" in _child_ops(eg, n, 1)
               for n in _nodes(eg, "matmul", root))


def test_fuse_matmuls_sharing_an_input() -> None:
    eg = _saturate(["(matmul ?x ?w1)", "(matmul ?x ?w2)"], {"?x": (2, 3), "?w1": (3, 4), "?w2": (3, 5)})
    for root in eg.roots:
        splits = _nodes(eg, "split", root)
        assert any("matmul" in _child_ops(eg, s, 0) for s in splits)
    assert any("concat" in _child_ops(eg, m, 1) for m in _nodes(eg, "matmul"))


def test_conv_relu_fusion() -> None:
    eg = _saturate(["(relu (conv2d [1 1] [1 1 1 1] [1 1] 1 0 ?x ?w ?b))"],
                   {"?x": (1, 3, 5, 5), "?w": (4, 3, 3, 3), "?b": (4,)})
    assert any(n.p["act"] == 1 for n in _nodes(eg, "conv2d", eg.roots[0]))


def test_merge_convs_sharing_an_input() -> None:
    conv = "(conv2d [1 1] [1 1 1 1] [1 1] 1 0 ?x {w} {b})"
    eg = _saturate([conv.format(w="?w1", b="?b1"), conv.format(w="?w2", b="?b2")],
                   {"?x": (1, 3, 5, 5), "?w1": (4, 3, 3, 3), "?b1": (4,), "?w2": (2, 3, 3, 3), "?b2": (2,)})
    for root in eg.roots:
        assert any("conv2d" in _child_ops(eg, s, 0) for s in _nodes(eg, "split", root))
    assert any("concat" in _child_ops(eg, c, 1) for c in _nodes(eg, "conv2d"))


def test_enlarge_to_merge_1x1_with_3x3() -> None:
    eg = _saturate(["(conv2d [1 1] [1 1 1 1] [1 1] 1 0 ?x ?k ?bk)", "(conv2d [1 1] [0 0 0 0] [1 1] 1 0 ?x ?u ?bu)"],
                   {"?x": (1, 3, 5, 5), "?k": (4, 3, 3, 3), "?bk": (4,), "?u": (2, 3, 1, 1), "?bu": (2,)})
    assert _nodes(eg, "enlarge")
    merged = [c for c in _nodes(eg, "conv2d") if "concat" in _child_ops(eg, c, 1)]
    assert merged
    one_by_one = eg.roots[1]
    assert any("conv2d" in _child_ops(eg, s, 0) for s in _nodes(eg, "split", one_by_one))


@pytest.mark.slow  # four iterations of the whole corpus on two pools (about 4 s)
def test_two_avgpools_and_add_become_one_depthwise_conv() -> None:
    pool = "(avgpool [3 3] [1 1] [1 1 1 1] 1 {x})"
    eg = _saturate([f"(ewadd {pool.format(x='?a')} {pool.format(x='?b')})"], {"?a": (1, 3, 4, 4), "?b": (1, 3, 4, 4)})
    root = eg.roots[0]
    convs = _nodes(eg, "conv2d", root)
    assert any("const_pool" in _child_ops(eg, c, 1) and "ewadd" in _child_ops(eg, c, 0) for c in convs)
    assert all(n.p["groups"] == 3 for n in convs)


def test_transpose_of_matmul() -> None:
    eg = _saturate(["(transpose [1 0] (matmul ?a ?b))"], {"?a": (2, 3), "?b": (3, 4)})
    root = eg.roots[0]
    assert any(_child_ops(eg, n, 0) >= {"transpose"} and _child_ops(eg, n, 1) >= {"transpose"}
               for n in _nodes(eg, "matmul", root))


# ---------------------------------------------------------------------------------------------------------
# acceptance: the corpus optimizes the built-in models better than the starter rules


@functools.cache
def _optimized_costs(name: str) -> tuple[float, float]:
    """(corpus, starter) optimized cost of a built-in model, both with the layout rules."""
    from eqsat import models, optimize
    from eqsat.rules import corpus_or_starter, starter_rules
    from eqsat.rules.layout import LAYOUT_RULES

    # the default analytic cost model is deterministic, so these costs are exact and reproducible
    return tuple(optimize(getattr(models, name)(), rules=rules + list(LAYOUT_RULES), check=True).cost_after
                 for rules in (corpus_or_starter(), starter_rules()))


_REL = 1e-9  # costs are sums of floats: equal graphs may differ in the last bits with the summation order


@pytest.mark.slow
@pytest.mark.parametrize("name", ["nasrnn_cell", "bert_attention_block"])
def test_corpus_is_never_worse_than_starter_rules(name: str) -> None:
    corpus_cost, starter_cost = _optimized_costs(name)
    assert corpus_cost <= starter_cost * (1 + _REL)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["nasrnn_cell", "bert_attention_block"])
def test_corpus_beats_starter_rules(name: str) -> None:
    corpus_cost, starter_cost = _optimized_costs(name)
    assert corpus_cost < starter_cost * (1 - _REL)


# ---------------------------------------------------------------------------------------------------------
# selection


def _cand(lhs: str, rhs: str, n_lhs: int, n_rhs: int, domain: str = "mat") -> gen.Candidate:
    return gen.Candidate((lhs,), (rhs,), n_lhs, n_rhs, domain)


def test_selection_classifies_interchange_and_factoring_laws() -> None:
    assert corpus.interchange("(ewadd (concat 0 ?a ?b) (concat 0 ?c ?d))", "(concat 0 (ewadd ?a ?c) (ewadd ?b ?d))")
    assert corpus.interchange("(concat 1 (concat 0 ?a ?b) (concat 0 ?c ?d))",
                              "(concat 0 (concat 1 ?a ?c) (concat 1 ?b ?d))")
    assert not corpus.interchange("(ewadd (ewadd ?a ?b) ?c)", "(ewadd ?a (ewadd ?b ?c))")
    assert corpus.factoring("(ewadd (ewmul ?a ?b) (ewmul ?a ?c))", "(ewmul ?a (ewadd ?b ?c))")
    assert corpus.factoring("(concat 1 (relu ?a) (relu ?b))", "(relu (concat 1 ?a ?b))")
    assert not corpus.factoring("(ewadd (ewadd ?a ?b) ?c)", "(ewadd ?a ?b)")


def test_selection_drops_commutativity_in_context_and_generalizes() -> None:
    cands = [
        _cand("(ewmul ?w1 (ewadd ?w2 ?w3))", "(ewmul (ewadd ?w3 ?w2) ?w1)", 2, 2),  # commutativity in context
        _cand("(ewadd ?w1 ?w2)", "(ewadd ?w2 ?w1)", 1, 1),  # commutativity itself stays
        _cand("(ewadd (concat 1 ?w1 ?w2) (concat 1 ?w2 ?w3))", "(concat 1 (ewadd ?w1 ?w2) (ewadd ?w2 ?w3))", 3, 3),
        _cand("(ewadd (ewmul ?w1 ?w2) (ewmul ?w1 ?w3))", "(ewmul (ewadd ?w2 ?w3) ?w1)", 3, 2),
        _cand("(ewadd (ewmul ?w1 ?w2) (ewmul ?w1 ?w3))", "(ewmul (ewadd ?w3 ?w2) ?w1)", 3, 2),  # same law
    ]
    entries = corpus.select(cands)
    texts = [e.text() for e in entries]
    assert "(ewadd ?w1 ?w2) <=> (ewadd ?w2 ?w1)" in texts
    assert not any("(ewmul ?w1 (ewadd" in t for t in texts)
    # the concat interchange was found with a repeated variable: it is kept with four operands, both ways
    inter = [e for e in entries if e.lhs[0].startswith("(ewadd (concat 1")]
    assert len(inter) == 1 and inter[0].bidirectional and len(set(re.findall(r"\?w\d", inter[0].lhs[0]))) == 4
    # a distributive law is kept once, and in both directions (the expansion too)
    dist = [e for e in entries if e.lhs[0].startswith("(ewadd (ewmul")]
    assert len(dist) == 1 and dist[0].bidirectional


def test_grouped_merge_carries_shape_conditions() -> None:
    merges = [e for e in ENTRIES if re.search(r"\(conv2d \[1 1\] \[[01 ]+\] \[1 1\] 2 ", e.text())]
    assert merges
    for e in merges:
        assert "(= (shape ?k1) (shape ?k2))" in e.conditions and e.status == "proved", e.id
