"""Tests of the TASO-style rule generator at N = 2 (N = 3 runs in the CLI and benchmark)."""

from __future__ import annotations

import pytest

from eqsat import ops
from eqsat.rules import generator as gen

#: conftest's N = 2 generation, shared with test_rules_distributed: one worker runs them
pytestmark = pytest.mark.xdist_group("generated_n2")

@pytest.fixture(scope="module")
def n2(generated_n2: tuple[list[gen.Candidate], gen.GenerationReport]) -> tuple[list[gen.Candidate],
                                                                                gen.GenerationReport]:
    """generate(2) on the serial executor (conftest's ``generated_n2``; test_rules_distributed checks that every
    executor gives the same)."""
    return generated_n2


def _texts(cands: list[gen.Candidate]) -> set[str]:
    return {c.text() for c in cands}


def test_stage_counts_shrink(n2: tuple[list[gen.Candidate], gen.GenerationReport]) -> None:
    _, rep = n2
    counts = [n for _, n in rep.table()[3:]]
    assert rep.graphs > 1000 and rep.buckets > 100
    assert all(a >= b for a, b in zip(counts, counts[1:], strict=False)), rep.table()
    assert rep.after_renaming < rep.candidates and rep.after_common_subgraph < rep.after_renaming


def _ops(text: str) -> list[str]:
    import re

    return re.findall(r"\((\w+)", text)


def test_finds_classic_two_op_rules(n2: tuple[list[gen.Candidate], gen.GenerationReport]) -> None:
    texts = _texts(n2[0])
    assert any(_ops(t) == ["matmul"] * 4 for t in texts)  # associativity
    assert any(_ops(t) == ["relu", "conv2d", "conv2d"] and " 1 ?i1 " in t.split("=>")[1] for t in texts)
    assert any(t.endswith("=> ?x1") and _ops(t) == ["transpose", "transpose"] for t in texts)
    assert any(_ops(t) == ["split", "dim", "concat"] for t in texts)
    assert any("const_pool" in t and "avgpool" in t for t in texts)
    assert any(_ops(t) == ["ewadd", "ewadd"] for t in texts)  # commutativity


def test_candidates_are_numerically_equal(n2: tuple[list[gen.Candidate], gen.GenerationReport]) -> None:
    for c in n2[0]:
        assert gen.check_numeric(c.lhs, c.rhs, shape_sets=(0, 1, 2)) is None, c.text()


def test_generalisation_check_drops_unsound_rules(n2: tuple[list[gen.Candidate], gen.GenerationReport]) -> None:
    # At N = 2 every candidate that passes float confirmation generalises (with shape conditions where it
    # needs them); the first unsound generalisations appear at N = 3, e.g. an I_matmul sized from one
    # operand added under a transpose: sound on the square shapes it was found on, wrong once broadcasting
    # lets a (3, 1) operand through.
    _, rep = n2
    general = [r for _, r in rep.dropped if r.startswith("general")]
    assert len(general) == rep.after_float - rep.after_generalisation
    assert all(r.startswith(("float", "general")) for _, r in rep.dropped)
    unsound = gen.Candidate(("(ewadd ?w1 (transpose [1 0] (ewadd ?w2 (const_imatmul (dim ?w2 0)))))",),
                            ("(ewadd (ewadd (transpose [1 0] ?w2) (const_imatmul (dim ?w2 1))) ?w1)",), 3, 3, "mat")
    stage, reason, _ = gen.confirm(unsound)
    assert stage == "general" and reason
    # sound only when the two operands have one shape: kept, with that shape condition
    conditional = gen.Candidate(("(ewadd ?w1 (ewadd ?w2 (const_imatmul (dim ?w2 0))))",),
                                ("(ewadd (ewadd ?w1 (const_imatmul (dim ?w1 0))) ?w2)",), 2, 2, "mat")
    assert gen.confirm(conditional) == (None, None, ("(= (shape ?w1) (shape ?w2))",))
    assert any(c.conditions for c in n2[0])
    assert gen.confirm(gen.Candidate(("(relu ?x1)",), ("?x1",), 1, 0, "mat"))[0] == "float"
    bad = gen.check_numeric(["(ewadd ?w1 (ewadd ?w2 (const_imatmul (dim ?w2 0))))"],
                            ["(ewadd (ewadd ?w1 ?w2) (const_imatmul (dim ?w1 0)))"], shape_sets=(1,),
                            random_shapes=40, seed=3)
    assert bad is not None


def test_fingerprint_is_output_order_independent() -> None:
    a = gen.GraphRecord(("x", "y"), (3, 5), (), 2, "mat")
    b = gen.GraphRecord(("y", "x"), (5, 3), (), 2, "mat")
    assert a.fingerprint == b.fingerprint


def test_work_units_are_independent_and_deterministic() -> None:
    units = gen.work_units(2, domains=("mat",))
    assert units[0].first == -1 and len(units) > 10
    r1, _ = gen.run_unit(units[3])
    r2, _ = gen.run_unit(units[3])
    assert [g.outputs for g in r1] == [g.outputs for g in r2] and r1


def test_canonical_renaming_merges_renamed_rules() -> None:
    c1 = gen.Candidate(("(matmul ?w2 ?w1)",), ("(matmul ?w2 ?w1)",), 1, 1, "mat")
    c2 = gen.Candidate(("(matmul ?w1 ?w3)",), ("(matmul ?w1 ?w3)",), 1, 1, "mat")
    assert gen.canonical(c1).text() == gen.canonical(c2).text() == "(matmul ?w1 ?w2) => (matmul ?w1 ?w2)"


def test_pruning_predicates() -> None:
    shared = gen.Candidate(("(relu (matmul ?x1 ?w1))",), ("(matmul ?x1 ?w1)",), 2, 1, "mat",
                           ("(matmul ?x1 ?w1)", "(relu (matmul ?x1 ?w1))"), ("(matmul ?x1 ?w1)",))
    assert gen.common_subgraph(shared)
    sup = gen.Candidate(("(relu (transpose [1 0] (transpose [1 0] ?x1)))",), ("(relu ?x1)",), 3, 1, "mat")
    assert gen.common_supergraph(sup)
    multi = gen.Candidate(("(matmul ?x1 ?w1)", "(matmul ?x1 ?w2)"),
                          ("(split 1 0 (dim ?w1 1) (matmul ?x1 (concat 1 ?w1 ?w2)))",
                           "(split 1 (dim ?w1 1) (dim ?w2 1) (matmul ?x1 (concat 1 ?w1 ?w2)))"), 2, 3, "mat")
    assert gen.orient_multi(multi) is multi
    flipped = gen.Candidate(multi.rhs, multi.lhs, 3, 2, "mat")
    assert gen.orient_multi(flipped).lhs == multi.lhs


def test_merging_unit_results_does_not_depend_on_their_order() -> None:
    # workers finish units in any order; the merged graphs (and so the candidates) must not change
    results = [gen.run_unit(u) for u in gen.work_units(2, domains=("mat",))]
    forward, states = gen.merge_unit_results(results)
    backward, states_b = gen.merge_unit_results(reversed(results))
    assert states == states_b and list(sorted(forward.items())) == list(sorted(backward.items()))
    c1, _ = gen.candidates_from([forward[k] for k in sorted(forward)])
    c2, _ = gen.candidates_from([backward[k] for k in sorted(backward)])
    assert [c.text() for c in c1] == [c.text() for c in c2]


_GEN_SCRIPT = """
import json
from eqsat.rules import corpus, generator
cands, rep = generator.generate(2, workers=2, executor="pool")
print(json.dumps({"stages": rep.table(), "rules": [e.text() + str(e.conditions) for e in corpus.select(cands)]}))
"""


@pytest.mark.slow  # two child processes, each generating N = 2 with two pool workers
def test_generation_is_deterministic_across_processes_and_hash_seeds() -> None:
    # the executor is the process pool (test_rules_distributed shows every executor gives the same result); each
    # child and its workers run under one hash seed, two seeds in all
    import json
    import os
    import subprocess
    import sys

    outs = []
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        res = subprocess.run([sys.executable, "-c", _GEN_SCRIPT], env=env, capture_output=True, text=True,
                             check=True, timeout=300)
        outs.append(json.loads(res.stdout))
    assert outs[0] == outs[1]
    assert outs[0]["rules"]


def test_variable_prefixes_name_one_type_across_domains() -> None:
    # var_shape() looks a variable up by its prefix alone, so a prefix must mean the same type everywhere
    seen: dict[str, gen.VarType] = {}
    for d in gen.DOMAINS.values():
        for t in d.types:
            assert seen.setdefault(t.prefix, t) == t, (d.name, t.prefix)


@pytest.fixture(scope="module")
def heads() -> list[gen.Candidate]:
    return gen.generate(max_ops=3, workers=1, executor="serial", domains=("heads",))[0]


@pytest.mark.slow  # the heads fixture: an N = 3 generation (about 5 s)
def test_heads_domain_finds_rank3_transpose_and_reshape_rules(heads: list[gen.Candidate]) -> None:
    texts = _texts(heads)
    # a scalar multiplication moves through a reshape to any target shape (a parameter variable) ...
    assert "(smul (reshape ?r1 ?m1) ?s1) => (reshape ?r1 (smul ?m1 ?s1))" in texts
    # ... and through every rank-3 transpose
    for perm in gen.TRANSPOSES3.values():
        p = "[" + " ".join(map(str, perm)) + "]"
        assert any(t in texts for t in (f"(transpose {p} (smul ?q1 ?s1)) => (smul (transpose {p} ?q1) ?s1)",
                                        f"(transpose {p} (smul ?v1 ?s1)) => (smul (transpose {p} ?v1) ?s1)"))
    # two transposes are one (BERT's K: heads, then the last two axes swapped)
    assert "(transpose [0 2 1] (transpose [1 0 2] ?q1)) => (transpose [1 2 0] ?q1)" in texts
    assert "(transpose [1 2 0] (transpose [2 0 1] ?q1)) => ?q1" in texts
    # the batched transpose of a matmul
    assert "(matmul (transpose [0 2 1] ?v1) (transpose [0 2 1] ?q1)) => (transpose [0 2 1] (matmul ?q1 ?v1))" in texts
    # sharing a transpose is no shared work: no two-output rules made of transposes only
    assert not [c for c in heads if c.multi]


@pytest.mark.slow  # the heads fixture
def test_heads_rules_hold_for_other_shapes_and_reshape_targets(heads: list[gen.Candidate]) -> None:
    for c in heads:
        assert gen.check_numeric(c.lhs, c.rhs, shape_sets=(0, 1, 2), random_shapes=4, seed=5,
                                 conditions=c.conditions) is None, c.text()
    # a reshape target is a parameter: its value, not a tensor, reaches the evaluator
    env = gen.random_env(["?r1", "?m1"], lambda v: gen.var_shape(v, 1), __import__("numpy").random.default_rng(0))
    assert env["?r1"] == (2, 3, 5) and env["?m1"].shape == (2, 15)


def test_templates_are_the_operators_declarations() -> None:
    declared = {name: spec.name for spec in ops.REGISTRY.values() for name in spec.generator_forms}
    assert set(gen.TEMPLATES) == set(declared)
    for spec in ops.REGISTRY.values():  # each runs in some domain, and only in domains that exist
        for name, form in spec.generator_forms.items():
            assert form.domains and set(form.domains) <= set(gen.DOMAINS), (spec.name, name)
    assert {t for d in gen.DOMAINS.values() for t in d.templates} == set(declared)


def test_symbolic_shapes_are_the_concrete_shapes() -> None:
    # OpSpec.sym_shape of every operator the templates apply, on the shapes it was built on (shape set A)
    seen = set()
    for d in gen.DOMAINS.values():
        en = gen.Enumerator(d, 2)
        for first in range(len(en.first_ops())):
            en.run(first)
        for t in en.ev.memo.values():
            assert tuple(gen.evaluate_sym(e, 0) for e in t.sym) == t.shape, t.key
            seen.add(t.pat[0])
    assert seen >= {n for n, spec in ops.REGISTRY.items() if spec.generator_forms}
