"""Selecting the rules a smaller corpus cannot derive (``eqsat rules select``, :mod:`eqsat.rules.derivable`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from eqsat.ir.rule import evaluate, parse
from eqsat.rules import corpus, derivable
from eqsat.rules.corpus import Entry
from eqsat.rules.generator import var_shape

COMM = Entry("", ["(ewadd ?w1 ?w2)"], ["(ewadd ?w2 ?w1)"], status="proved", domain="mat", ops=[1, 1])
ASSOC = Entry("", ["(ewadd (ewadd ?w1 ?w2) ?w3)"], ["(ewadd ?w1 (ewadd ?w2 ?w3))"], bidirectional=True,
              status="proved", domain="mat", ops=[2, 2])
FACTOR = Entry("", ["(ewadd (ewmul ?w1 ?w2) (ewmul ?w1 ?w3))"], ["(ewmul ?w1 (ewadd ?w2 ?w3))"], status="proved",
               domain="mat", ops=[3, 2])
BASE = [COMM, ASSOC, FACTOR]
corpus.assign_ids(BASE)

#: Derivable from BASE (commutativity and associativity) in two iterations.
SHUFFLE = Entry("", ["(ewadd (ewadd ?w1 ?w2) ?w3)"], ["(ewadd ?w3 (ewadd ?w2 ?w1))"], domain="mat", ops=[2, 2])
#: Not derivable from BASE: matmul associativity.
MATMUL_ASSOC = Entry("", ["(matmul ?x1 (matmul ?w1 ?w2))"], ["(matmul (matmul ?x1 ?w1) ?w2)"], domain="mat",
                     ops=[2, 2])
#: Factoring <=> expansion: BASE factors but never expands, so only the reverse direction is new.
FACTOR_BOTH = Entry("", ["(ewadd (ewmul ?w3 ?w1) (ewmul ?w3 ?w2))"], ["(ewmul ?w3 (ewadd ?w1 ?w2))"],
                    bidirectional=True, domain="mat", ops=[3, 2])
#: A two-output rule nothing in BASE derives (two matmuls sharing a left operand as one over a concatenation).
TWO_MATMULS = Entry("", ["(matmul ?x1 ?w1)", "(matmul ?x1 ?w2)"],
                    ["(split 1 0 (dim ?w1 1) (matmul ?x1 (concat 1 ?w1 ?w2)))",
                     "(split 1 (dim ?w1 1) (dim ?w2 1) (matmul ?x1 (concat 1 ?w1 ?w2)))"],
                    multi=True, domain="mat", ops=[2, 4])


#: Two expansions side by side (a matmul over a concatenation, which single-output rules only merge): the same
#: two matmuls on both sides, so no work is merged.
SIDE_BY_SIDE = Entry("", ["(matmul ?w1 (concat 1 ?w2 ?w3))", "(matmul ?w1 (concat 1 ?w3 ?w2))"],
                     ["(concat 1 (matmul ?w1 ?w2) (matmul ?w1 ?w3))", "(concat 1 (matmul ?w1 ?w3) (matmul ?w1 ?w2))"],
                     multi=True, domain="mat", ops=[4, 4])


def base_rules() -> list:
    return [r for e in BASE for r in corpus.engine_rules(e)]


def pairs(entries: list[Entry]) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    return [(tuple(e.lhs), tuple(e.rhs)) for e in entries]


@pytest.mark.parametrize("entry", [SHUFFLE, MATMUL_ASSOC, FACTOR_BOTH, TWO_MATMULS, SIDE_BY_SIDE],
                         ids=lambda e: e.lhs[0])
def test_cases_are_true_equations(entry: Entry) -> None:
    rng = np.random.default_rng(0)
    lhs, rhs, shapes = derivable.instance(entry.lhs, entry.rhs)
    env = {v: rng.standard_normal(s) for v, s in shapes.items()}
    for a, b in zip(lhs, rhs, strict=True):
        np.testing.assert_allclose(evaluate(parse(a), env), evaluate(parse(b), env), rtol=1e-9)


def test_instance_renames_apart_and_uses_generator_shapes() -> None:
    lhs, rhs, shapes = derivable.instance(MATMUL_ASSOC.lhs, MATMUL_ASSOC.rhs, "_7")
    assert lhs == ("(matmul ?x1_7 (matmul ?w1_7 ?w2_7))",)
    assert shapes == {"?x1_7": var_shape("?x1", 0), "?w1_7": var_shape("?w1", 0), "?w2_7": var_shape("?w2", 0)}


def test_batch_verdicts_equal_one_at_a_time() -> None:
    """A two-output candidate that is not derived, then single ones: each verdict is its own candidate's."""
    cands = pairs([TWO_MATMULS, SHUFFLE, MATMUL_ASSOC, SHUFFLE])
    rules = base_rules()
    alone = [derivable.check_batch(([c], rules, 3))[0] for c in cands]
    assert alone == [False, True, False, True]
    assert derivable.check_batch((cands, rules, 3)) == alone


def test_batch_cut_by_a_limit_is_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch whose saturation a limit cut short is checked again in halves, down to single candidates."""
    rules = base_rules()
    cands = pairs([SHUFFLE, MATMUL_ASSOC, SHUFFLE, MATMUL_ASSOC])
    calls: list[int] = []
    real = derivable._saturate_and_check

    def cut_unless_alone(p, shapes, r, iters, node_limit, time_limit):  # noqa: ANN001, ANN202
        calls.append(len(p))
        return [False] * len(p), len(p) > 1

    monkeypatch.setattr(derivable, "_saturate_and_check", cut_unless_alone)
    derivable.check_batch((cands, rules, 3))
    assert calls == [4, 2, 1, 1, 2, 1, 1]
    # the verdicts are those of the single candidates, not of the cut batches
    monkeypatch.setattr(derivable, "_saturate_and_check",
                        lambda p, *a: (real(p, *a)[0], len(p) > 1))
    assert derivable.check_batch((cands, rules, 3)) == [True, False, True, False]


def test_merges_work() -> None:
    assert corpus.merges_work(TWO_MATMULS.lhs, TWO_MATMULS.rhs)
    assert not corpus.merges_work(SIDE_BY_SIDE.lhs, SIDE_BY_SIDE.rhs)
    # every two-output rule of the committed corpus merges work
    entries, _ = corpus.read_corpus()
    assert all(corpus.merges_work(e.lhs, e.rhs) for e in entries if e.multi)


def test_select_novel_keeps_what_the_base_cannot_derive(tmp_path: Path) -> None:
    entries = [Entry(**{**e.__dict__}) for e in (COMM, SHUFFLE, MATMUL_ASSOC, FACTOR_BOTH, TWO_MATMULS, SIDE_BY_SIDE)]
    kept, counts = derivable.select_novel(entries, BASE, base_rules(), iters=3, workers=1, executor="serial",
                                          results_dir=tmp_path)
    assert counts["already in the base corpus"] == 1 and counts["derivable within 3 iterations"] == 1
    assert counts["two-output rules that merge no work"] == 1
    assert [e.lhs for e in kept] == [MATMUL_ASSOC.lhs, FACTOR_BOTH.rhs, TWO_MATMULS.lhs]
    expansion = kept[1]  # only the expansion is new: kept one way, from the factored form
    assert expansion.rhs == FACTOR_BOTH.lhs and not expansion.bidirectional and expansion.ops == [2, 3]
    assert counts["kept one way (reverse only new)"] == 1 and counts["kept"] == 3


def _select(tmp_path: Path, *extra: str) -> Path:
    from eqsat.cli.app import main

    corpus.save_corpus(BASE, tmp_path / "base.json", {"max_ops": 3})
    corpus.save_corpus([SHUFFLE, MATMUL_ASSOC], tmp_path / "cands.json", {"max_ops": 4, "stages": {"graphs": 9}})
    out = tmp_path / "new.json"
    rc = main(["rules", "select", str(tmp_path / "cands.json"), "--base", str(tmp_path / "base.json"),
               "--out", str(out), "--executor", "serial", "--workers", "1", "--results-dir", str(tmp_path / "u"),
               *extra])
    assert rc == 0
    return out


def test_select_cli_writes_the_new_rules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _select(tmp_path, "--no-verify")
    entries, meta = corpus.read_corpus(out)
    assert [e.lhs for e in entries] == [MATMUL_ASSOC.lhs] and entries[0].id
    assert entries[0].status == "unverified" and "verification" not in meta
    assert meta["max_ops"] == 4 and meta["novelty"]["kept"] == 1 and meta["generation"] == {"graphs": 9}
    assert "derivable within 3 iterations" in capsys.readouterr().out
    assert json.loads(out.read_text())["meta"]["selected"] == 1


def test_select_cli_verifies_what_it_keeps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from eqsat.rules import corpus_verify
    from eqsat.rules.validation import AxiomCheck

    # the axioms' symbolic validation (seconds) is tests/rules/test_rules_verifier.py's; Z3 proves the kept rule here
    monkeypatch.setattr(corpus_verify.verifier, "validate_axioms",
                        lambda axs, workers=1: [AxiomCheck(a.name, "valid", "", 1) for a in axs])
    entries, meta = corpus.read_corpus(_select(tmp_path, "--skip-redundancy"))
    assert [(e.lhs, e.status) for e in entries] == [(MATMUL_ASSOC.lhs, "proved")]
    assert meta["verification"] == {"proved": 1} and meta["axioms"]["redundant"] == "not checked"
    assert meta["axioms"]["names"] == corpus_verify.registry_record()["axioms"]["names"]


def test_select_cli_without_candidates_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from eqsat.cli.app import main

    assert main(["rules", "select", str(tmp_path / "missing.json"), "--out", str(tmp_path / "o.json")]) == 2
    assert "no candidates" in capsys.readouterr().err
