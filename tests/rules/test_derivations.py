"""Derivations: for each rule family, a source graph that must grow, within a few iterations, to represent a
target graph in its root e-class, and a bound on e-graph growth for tiny graphs.

Only the source is put in the e-graph; the target is then looked up in the saturated e-graph term by term, so
a target that needs an expansion first (a distributive law read backwards) is derived only when the rules
build it. Every case runs with the default rules (the corpus as ``optimize`` uses it); each family also runs
with only its own rules (and commutativity), to show where the derivation comes from. The cases are written
from the algebraic properties (TASO's Table 2 style), not taken from any rule set.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest

from eqsat.engine.limits import Limits
from eqsat.engine.saturation import saturate
from eqsat.ir.rule import Rule, check_condition, evaluate, parse, terms_graph
from eqsat.rules import corpus, derivable, engine_worthy

C3 = "(conv2d [1 1] [1 1 1 1] [1 1] 1 0 {} {} {})"  # a 3x3 "same" convolution, no activation
C3R = "(conv2d [1 1] [1 1 1 1] [1 1] 1 1 {} {} {})"  # with a fused relu
M = (3, 4)
X4 = (1, 4, 5, 5)
K = {"?w": (4, 4, 3, 3), "?b": (4,), "?v": (4, 4, 3, 3), "?c": (4,)}


def conv(x: str, w: str, b: str, relu: bool = False) -> str:
    return (C3R if relu else C3).format(x, w, b)


#: (family, case id, source, target, variable shapes, iterations)
CASES: list[tuple[str, str, str, str, dict[str, tuple[int, ...]], int]] = [
    # ewadd / ewmul associativity and commutativity
    ("ewadd / ewmul associativity and commutativity", "ewadd-assoc-comm",
     "(ewadd (ewadd ?a ?b) ?c)", "(ewadd ?c (ewadd ?b ?a))", {"?a": M, "?b": M, "?c": M}, 3),
    ("ewadd / ewmul associativity and commutativity", "ewmul-assoc-comm",
     "(ewmul ?a (ewmul ?b ?c))", "(ewmul (ewmul ?c ?a) ?b)", {"?a": M, "?b": M, "?c": M}, 3),
    # ewmul over ewadd, in several shapes, both directions
    ("ewmul distributes over ewadd", "factor",
     "(ewadd (ewmul ?a ?c) (ewmul ?b ?c))", "(ewmul (ewadd ?a ?b) ?c)", {"?a": M, "?b": M, "?c": M}, 3),
    ("ewmul distributes over ewadd", "expand",
     "(ewmul ?c (ewadd ?a ?b))", "(ewadd (ewmul ?a ?c) (ewmul ?c ?b))", {"?a": M, "?b": M, "?c": M}, 3),
    ("ewmul distributes over ewadd", "expand-twice",
     "(ewmul ?a (ewadd ?b (ewadd ?c ?d)))", "(ewadd (ewadd (ewmul ?a ?b) (ewmul ?a ?c)) (ewmul ?d ?a))",
     {"?a": M, "?b": M, "?c": M, "?d": M}, 4),
    ("ewmul distributes over ewadd", "factor-inside-a-sum",
     "(ewadd (ewmul ?a ?b) (ewadd (ewmul ?a ?c) ?d))", "(ewadd (ewmul ?a (ewadd ?b ?c)) ?d)",
     {"?a": M, "?b": M, "?c": M, "?d": M}, 4),
    # element-wise operators over concatenations, either axis, both directions
    ("element-wise over concatenation", "ewadd-axis0",
     "(ewadd (concat 0 ?a ?b) (concat 0 ?c ?d))", "(concat 0 (ewadd ?a ?c) (ewadd ?b ?d))",
     {"?a": (2, 3), "?b": (4, 3), "?c": (2, 3), "?d": (4, 3)}, 3),
    ("element-wise over concatenation", "ewadd-axis1-channels",
     "(ewadd (concat 1 ?a ?b) (concat 1 ?c ?d))", "(concat 1 (ewadd ?a ?c) (ewadd ?b ?d))",
     {"?a": (1, 2, 3, 3), "?b": (1, 3, 3, 3), "?c": (1, 2, 3, 3), "?d": (1, 3, 3, 3)}, 3),
    ("element-wise over concatenation", "ewmul-axis0",
     "(concat 0 (ewmul ?a ?c) (ewmul ?b ?d))", "(ewmul (concat 0 ?a ?b) (concat 0 ?c ?d))",
     {"?a": (2, 3), "?b": (4, 3), "?c": (2, 3), "?d": (4, 3)}, 3),
    ("element-wise over concatenation", "ewmul-axis1",
     "(ewmul (concat 1 ?a ?b) (concat 1 ?c ?d))", "(concat 1 (ewmul ?a ?c) (ewmul ?b ?d))",
     {"?a": (3, 2), "?b": (3, 4), "?c": (3, 2), "?d": (3, 4)}, 3),
    # concatenation reassociation and geometry
    ("concatenation reassociation and geometry", "reassociate",
     "(concat 1 (concat 1 ?a ?b) (concat 1 ?c ?d))", "(concat 1 ?a (concat 1 (concat 1 ?b ?c) ?d))",
     {"?a": (2, 1), "?b": (2, 2), "?c": (2, 3), "?d": (2, 4)}, 4),
    ("concatenation reassociation and geometry", "two-axes",
     "(concat 0 (concat 1 ?a ?b) (concat 1 ?c ?d))", "(concat 1 (concat 0 ?a ?c) (concat 0 ?b ?d))",
     {"?a": (2, 3), "?b": (2, 1), "?c": (4, 3), "?d": (4, 1)}, 3),
    # splits of concatenations, through relu and reassociation
    ("split of a concatenation", "split-relu-concat",
     "(split 1 0 2 (relu (concat 1 ?a ?b)))", "(relu ?a)", {"?a": (1, 2, 3, 3), "?b": (1, 3, 3, 3)}, 3),
    ("split of a concatenation", "split-reassociated",
     "(split 1 0 5 (concat 1 ?a (concat 1 ?b ?c)))", "(concat 1 ?a ?b)",
     {"?a": (1, 2, 3, 3), "?b": (1, 3, 3, 3), "?c": (1, 1, 3, 3)}, 3),
    ("split of a concatenation", "relu-of-pieces",
     "(concat 1 (relu (split 1 0 2 ?x)) (relu (split 1 2 3 ?x)))", "(relu ?x)", {"?x": (1, 5, 3, 3)}, 3),
    # relu into a concatenation (an expansion) and out of it
    ("relu / pooling over concatenation", "relu-into-concat",
     "(relu (concat 1 ?a ?b))", "(concat 1 (relu ?a) (relu ?b))", {"?a": (1, 2, 3, 3), "?b": (1, 3, 3, 3)}, 2),
    ("relu / pooling over concatenation", "relu-into-concat-then-fuse",
     f"(relu (concat 1 {conv('?x', '?w', '?b')} ?y))", f"(concat 1 {conv('?x', '?w', '?b', True)} (relu ?y))",
     {"?x": X4, "?y": (1, 2, 5, 5), **K}, 3),
    # convolutions over concatenated inputs or kernels, and the grouped merge
    ("convolution over concatenation (incl. grouped merge)", "batch-concat",
     f"(concat 0 {conv('?x', '?w', '?b')} {conv('?y', '?w', '?b')})", conv("(concat 0 ?x ?y)", "?w", "?b"),
     {"?x": X4, "?y": X4, **K}, 3),
    ("convolution over concatenation (incl. grouped merge)", "batch-split-expansion",
     conv("(concat 0 ?x ?y)", "?w", "?b"), f"(concat 0 {conv('?x', '?w', '?b')} {conv('?y', '?w', '?b')})",
     {"?x": X4, "?y": X4, **K}, 3),
    ("convolution over concatenation (incl. grouped merge)", "output-channels",
     f"(concat 1 {conv('?x', '?w', '?b')} {conv('?x', '?v', '?c')})",
     conv("?x", "(concat 0 ?w ?v)", "(concat 0 ?b ?c)"),
     {"?x": X4, **K}, 3),
    ("convolution over concatenation (incl. grouped merge)", "input-channels",
     f"(ewadd {conv('?x', '?w', '?b')} {conv('?y', '?v', '?c')})",
     conv("(concat 1 ?x ?y)", "(concat 1 ?w ?v)", "(ewadd ?b ?c)"), {"?x": X4, "?y": X4, **K}, 3),
    ("convolution over concatenation (incl. grouped merge)", "grouped-merge",
     f"(concat 1 {conv('?x', '?w', '?b')} {conv('?y', '?v', '?c')})",
     "(conv2d [1 1] [1 1 1 1] [1 1] 2 0 (concat 1 ?x ?y) (concat 0 ?w ?v) (concat 0 ?b ?c))",
     {"?x": X4, "?y": X4, **K}, 3),
    # convolution linearity: kernel, input with two biases, input with a zero bias (both directions)
    ("convolution linearity", "kernel",
     conv("?x", "(ewadd ?w ?v)", "(ewadd ?b ?c)"), f"(ewadd {conv('?x', '?w', '?b')} {conv('?x', '?v', '?c')})",
     {"?x": X4, **K}, 3),
    ("convolution linearity", "input-two-biases",
     f"(ewadd {conv('?x', '?w', '?b')} {conv('?y', '?w', '?c')})", conv("(ewadd ?x ?y)", "?w", "(ewadd ?b ?c)"),
     {"?x": X4, "?y": X4, **K}, 3),
    ("convolution linearity", "input-zero-bias",
     conv("(ewadd ?x ?y)", "?w", "(const_zero [4])"),
     f"(ewadd {conv('?x', '?w', '(const_zero [4])')} {conv('?y', '?w', '(const_zero [4])')})",
     {"?x": X4, "?y": X4, "?w": K["?w"]}, 3),
    # matmul over ewadd and concat, expansion directions
    ("matmul linearity", "expand",
     "(matmul ?x (ewadd ?w ?v))", "(ewadd (matmul ?x ?w) (matmul ?x ?v))", {"?x": (2, 4), "?w": (4, 4), "?v": (4, 4)},
     3),
    # (a matmul over a concatenation is merged, not expanded: see eqsat.rules.corpus.NO_EXPANSION_OVER_CONCAT)
    ("matmul over concatenation", "merge-columns",
     "(concat 1 (matmul ?x ?w) (matmul ?x ?v))", "(matmul ?x (concat 1 ?w ?v))",
     {"?x": (2, 4), "?w": (4, 3), "?v": (4, 5)}, 3),
    ("matmul over concatenation", "merge-rows-through-a-sum",
     "(concat 0 (matmul ?x (ewadd ?w ?v)) (matmul ?y (ewadd ?w ?v)))",
     "(ewadd (matmul (concat 0 ?x ?y) ?w) (matmul (concat 0 ?x ?y) ?v))",
     {"?x": (2, 4), "?y": (3, 4), "?w": (4, 4), "?v": (4, 4)}, 3),
]

#: Families whose rules are all "off by default" or that need rules of another family alongside.
HELPERS = {"ewadd / ewmul associativity and commutativity"}


@functools.lru_cache(maxsize=1)
def default_rules() -> tuple[Rule, ...]:
    from eqsat.pipeline import default_rules as d

    return tuple(d())


def derives(source: str, target: str, shapes: dict[str, tuple[int, ...]], rules: Any, iters: int) -> bool:
    """Whether saturating the source alone builds the target in the source's e-class."""
    return derivable.derives([source], [target], shapes, list(rules), iters)


def _check_values(source: str, target: str, shapes: dict[str, tuple[int, ...]]) -> None:
    rng = np.random.default_rng(0)
    env = {v: rng.standard_normal(s) for v, s in shapes.items()}
    np.testing.assert_allclose(evaluate(parse(source), env), evaluate(parse(target), env), rtol=1e-9, atol=1e-9)


@pytest.mark.slow  # ~30 cases, each loading all the default rules into the engine (the fast lane runs each
# family's first case with its own rules, test_family_rules_alone_derive)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].split()[0]}-{c[1]}")
def test_default_rules_derive(case: tuple) -> None:
    family, _, source, target, shapes, iters = case
    _check_values(source, target, shapes)  # the case itself is a true equation
    assert derives(source, target, shapes, default_rules(), iters)


def _family_of(rule: Rule) -> str:
    return corpus.family([*rule.lhs, *rule.rhs])


FAMILY_CASES = {c[0]: c for c in CASES}


@pytest.mark.parametrize("family", sorted(FAMILY_CASES), ids=lambda f: f.split()[0] + "-" + str(len(f)))
def test_family_rules_alone_derive(family: str) -> None:
    """The first case of each family is derived by that family's rules (plus commutativity) alone."""
    _, _, source, target, shapes, iters = next(c for c in CASES if c[0] == family)
    rules = [r for r in default_rules() if _family_of(r) in {family} | HELPERS]
    assert rules
    assert derives(source, target, shapes, rules, iters)


def test_every_family_with_corpus_rules_has_a_derivation() -> None:
    """Each family of TASO-style properties the corpus represents is covered by a derivation case."""
    covered = {c[0] for c in CASES}
    families = {_family_of(r) for r in default_rules() if r.origin == "corpus"}
    must = {"ewadd / ewmul associativity and commutativity", "ewmul distributes over ewadd",
            "element-wise over concatenation", "concatenation reassociation and geometry", "split of a concatenation",
            "relu / pooling over concatenation", "convolution over concatenation (incl. grouped merge)",
            "convolution linearity", "matmul linearity", "matmul over concatenation"}
    assert must <= families
    assert must <= covered


def test_independent_relus_merge_when_enabled() -> None:
    """Two relus of unrelated tensors become one relu over a concatenation with the two-output rule that is
    off by default (it matches every pair of relus in a model; see benchmarks/results/rules.md)."""
    multi = [r for r in corpus.load_corpus_rules() if r.multi and not engine_worthy(r)
             and all(s.startswith("(relu") for s in r.lhs)]
    assert multi
    shapes = {"?a": (1, 2, 3, 3), "?b": (1, 3, 3, 3)}
    res = saturate(terms_graph(["(relu ?a)", "(relu ?b)"], shapes), list(default_rules()) + multi,
                   Limits(iter_limit=2, node_limit=20_000, time_limit=60, multi_iters=1), in_process=True)
    root = res.egraph.roots[0]
    assert root in derivable.classes_of(res.egraph, parse("(split 1 0 2 (relu (concat 1 ?a ?b)))"), shapes)


# ---------------------------------------------------------------------------------------------------------
# the hand-written linearity rules: numerically sound, and proved from the axioms


LINEAR_SHAPES = {"?st": (1, 1), "?pd": (1, 1, 1, 1), "?dl": (1, 1), "?g": 1, "?z": (4,), "?x": X4, "?y": X4,
                 "?w": (4, 4, 3, 3), "?b1": (4,), "?b2": (4,)}


@pytest.mark.parametrize("binding", [{}, {"?pd": (0, 0, 0, 0), "?st": (2, 2)}, {"?g": 2, "?w": (4, 2, 3, 3)}],
                         ids=["same", "strided", "grouped"])
def test_linear_rules_numerically(binding: dict) -> None:
    from eqsat.rules.starter import LINEAR_RULES

    rng = np.random.default_rng(3)
    spec = {**LINEAR_SHAPES, **binding}
    env = {k: (v if k in ("?st", "?pd", "?dl", "?g", "?z") else rng.standard_normal(v)) for k, v in spec.items()}
    for rule in LINEAR_RULES:
        assert all(check_condition(c, env) for c in rule.conditions)
        for d in rule.directions():
            np.testing.assert_allclose(evaluate(parse(d.lhs[0]), env), evaluate(parse(d.rhs[0]), env),
                                       rtol=1e-9, atol=1e-9)


def test_linear_rules_are_proved() -> None:
    from eqsat.rules.starter import LINEAR_RULES
    from eqsat.rules.verifier import verify_equation

    concrete = {"?st": "[1 1]", "?pd": "[1 1 1 1]", "?dl": "[1 1]", "?g": "1", "?z": "[(dim ?w 0)]"}
    for rule in LINEAR_RULES:
        lhs, rhs = rule.lhs[0], rule.rhs[0]
        for k, v in concrete.items():
            lhs, rhs = lhs.replace(k + " ", v + " ").replace(k + ")", v + ")"), \
                rhs.replace(k + " ", v + " ").replace(k + ")", v + ")")
        assert verify_equation([lhs], [rhs]).status == "proved", rule.name


# ---------------------------------------------------------------------------------------------------------
# growth


def _growth_module() -> Any:
    from _benchmarks import load_benchmark

    return load_benchmark("growth")


@pytest.mark.slow  # every graph of benchmarks/growth.py saturated with the default rules
def test_tiny_graphs_stay_small() -> None:
    """No graph of at most three operators exceeds 5 000 e-nodes after 6 iterations (or at saturation)."""
    growth = _growth_module()
    for name, build in growth.small_graphs().items():
        res = saturate(build(), list(default_rules()), Limits(iter_limit=6, node_limit=50_000, time_limit=60),
                       in_process=True)
        assert res.iterations[-1].enodes <= growth.TARGET, (name, [it.enodes for it in res.iterations])
