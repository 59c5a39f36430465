"""Tests of the committed size-4 rules (``rules/corpus/rules4.json``): soundness of every rule, that they are new to
the corpus, and that optimize runs them on request."""

from __future__ import annotations

import functools

import pytest

from eqsat.rules import corpus, derivable, engine_worthy
from eqsat.rules import generator as gen
from eqsat.rules.corpus_verify import NUMERIC_RANDOM_SHAPES

ENTRIES4, META4 = corpus.read_corpus(corpus.CORPUS4_PATH)
BASE, _ = corpus.read_corpus()


@functools.lru_cache(maxsize=2)
def rules(max_ops: int) -> tuple:
    from eqsat.pipeline import default_rules

    return tuple(default_rules(max_ops=max_ops))


def test_size4_rules_are_committed_new_and_verified() -> None:
    assert 50 <= len(ENTRIES4) <= 2000
    assert len({e.id for e in ENTRIES4}) == len(ENTRIES4)
    assert not {e.id for e in ENTRIES4} & {e.id for e in BASE}
    base = {(tuple(e.lhs), tuple(e.rhs)) for e in BASE}
    assert not any((tuple(e.lhs), tuple(e.rhs)) in base for e in ENTRIES4)
    assert all(e.status in ("proved", "unknown", "refuted") for e in ENTRIES4)
    assert sum(e.status == "proved" for e in ENTRIES4) >= len(ENTRIES4) // 2
    assert max(max(e.ops) for e in ENTRIES4) == 4
    assert all(corpus.merges_work(e.lhs, e.rhs) for e in ENTRIES4 if e.multi)
    assert META4["max_ops"] == 4 and META4["novelty"]["kept"] == len(ENTRIES4)


@pytest.mark.slow  # ~500 rules, 40 random shape assignments each (the size-3 corpus's check runs in the fast lane)
@pytest.mark.parametrize("entry", ENTRIES4, ids=lambda e: e.id)
def test_size4_rule_is_numerically_sound(entry: corpus.Entry) -> None:
    # float64, three shape sets, plus random shape assignments where both sides are well-shaped; a rule refuted by
    # a counterexample (true on the generator's shapes only, e.g. where a broadcast happens to fit) never runs,
    # and its counterexample must reproduce
    bad = gen.check_numeric(entry.lhs, entry.rhs, shape_sets=(0, 1, 2), random_shapes=NUMERIC_RANDOM_SHAPES, seed=7,
                            conditions=entry.conditions)
    if entry.status == "refuted" and entry.reason.startswith("numeric counterexample"):
        assert bad is not None
        assert gen.check_numeric(entry.lhs, entry.rhs, shape_sets=(0, 1, 2), conditions=entry.conditions) is None
    else:
        assert bad is None
        assert gen.check_numeric(entry.lhs, entry.rhs, shape_sets=(0, 1, 2), random_shapes=3, seed=11,
                                 conditions=entry.conditions) is None


def test_size4_rules_load_beside_the_corpus() -> None:
    proved = [e for e in ENTRIES4 if e.status == "proved"]
    three, four = rules(3), rules(4)
    assert {r.name for r in three} <= {r.name for r in four}
    new = {r.name.removesuffix("-rev") for r in four} - {r.name.removesuffix("-rev") for r in three}
    # two-output rules whose sources share no tensor stay off, as in the corpus (eqsat.rules.engine_worthy)
    assert new == {e.id for e in proved if any(engine_worthy(r) for r in corpus.engine_rules(e))}
    with pytest.raises(ValueError, match="3 and 4"):
        from eqsat.rules import corpus_or_starter

        corpus_or_starter(5)


@pytest.mark.slow  # up to fifteen saturations with 400-1000 rules
def test_a_size4_rule_derives_what_the_corpus_does_not() -> None:
    """The first proved single-output rules the default rules do not derive in 3 iterations (none did when they were
    kept; rules added to the defaults since derive some: the convolution-over-concat rules of
    :mod:`eqsat.rules.grouped` derive the first six, a convolution split by output channels), the default rules
    with the size-4 rules derive in one."""
    first = [e for e in ENTRIES4 if e.status == "proved" and not e.multi][:12]
    new = []
    for e in first:
        lhs, rhs, shapes = derivable.instance(e.lhs, e.rhs)
        if not derivable.derives(lhs, rhs, shapes, rules(3), 3):
            new.append((e, lhs, rhs, shapes))
        if len(new) == 3:
            break
    assert len(new) == 3, [e.id for e in first]
    for e, lhs, rhs, shapes in new:
        assert derivable.derives(lhs, rhs, shapes, rules(4), 1), e.id


@pytest.mark.slow  # optimize with the default and size-4 rules
def test_optimize_cli_runs_the_size4_rules(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    import onnx

    from eqsat import models
    from eqsat.cli.app import main

    src = tmp_path / "m.onnx"
    onnx.save(models.nasrnn_cell(hidden=16), src)
    assert main(["optimize", str(src), "-o", str(tmp_path / "o.onnx"), "--rules", "size4", "-q"]) == 0
    assert (tmp_path / "o.onnx").exists()
    assert "numeric check" in capsys.readouterr().out


@pytest.mark.slow  # optimize with the default and size-4 rules
def test_rules_show_resolves_the_size4_rules_that_fired(capsys: pytest.CaptureFixture[str],
                                                        corpus_read_once: None) -> None:
    from eqsat import models, optimize
    from eqsat.cli.app import main

    fired = set(optimize(models.builtin_models()["bert_attention_block"](), rules=rules(4), time_limit=30).rules_fired)
    size4 = {e.id for e in ENTRIES4}
    shown = sorted(n for n in fired if n.removesuffix("-rev") in size4)
    assert shown  # the BERT block matches some size-4 rules (benchmarks/results/rules.md)
    for name in shown:
        assert main(["rules", "show", name]) == 0, name
    assert "status:      proved" in capsys.readouterr().out
