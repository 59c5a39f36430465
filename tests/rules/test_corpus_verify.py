"""The committed corpora against the registry (no Z3), and ``eqsat rules verify`` as a check that never writes
(:mod:`eqsat.rules.corpus_verify`, :mod:`eqsat.cli.rules`)."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest

from eqsat import ops
from eqsat.rules import corpus, corpus_verify
from eqsat.rules.corpus import CORPUS4_PATH, CORPUS_PATH, Entry
from eqsat.rules.corpus_verify import VerifyOptions
from eqsat.rules.validation import AxiomCheck

COMMITTED = [CORPUS_PATH, CORPUS4_PATH]
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.name)
def test_committed_corpus_records_the_registry(path: Path) -> None:
    # an operator (or axiom, or template) added to eqsat/ops without regenerating the corpus fails here
    _, meta = corpus.read_corpus(path)
    assert not corpus_verify.record_differences(meta), corpus_verify.stale_message(path.relative_to(REPO), meta)


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.name)
def test_committed_corpus_is_in_canonical_form_with_ids_from_content(path: Path) -> None:
    entries, meta = corpus.read_corpus(path)
    assert corpus.corpus_text(entries, meta) == path.read_text()  # what generate / select write, byte for byte
    ids = [e.id for e in entries]
    corpus.assign_ids(entries)
    assert ids == [e.id for e in entries]
    assert meta["verification"] == corpus_verify.status_counts(entries)


def test_the_record_names_the_registrys_axioms_and_the_generators_operators() -> None:
    from eqsat.rules import axioms
    from eqsat.rules.domains import DOMAINS

    record = corpus_verify.registry_record()
    assert record["axioms"]["names"] == [a.name for a in axioms.AXIOMS]
    assert record["axioms"]["count"] == len(axioms.AXIOMS)
    assert record["axioms"]["dimension"] == [d.name for d in axioms.DIM_AXIOMS]
    assert record["generator"]["templates"] == {d.name: list(d.templates) for d in DOMAINS.values()}
    # the operators the generator applies: those that declare a template; a registry operator without one (an
    # opaque node, a runtime kernel) is not enumerated
    assert {"matmul", "conv2d", "softmax", "gelu"} <= set(record["generator"]["operators"])
    assert not {"opaque", "ewsqrt"} & set(record["generator"]["operators"])
    assert set(record["generator"]["operators"]) <= set(ops.ops_for_generator())


def _fresh_header() -> dict:
    """The header a corpus generated and verified now has (its record of the registry)."""
    return copy.deepcopy(corpus_verify.registry_record())


def test_a_new_axiom_or_operator_the_corpus_does_not_know_fails_and_says_what_to_run() -> None:
    meta = _fresh_header()
    assert corpus_verify.record_differences(meta) == []
    current = copy.deepcopy(corpus_verify.registry_record())
    current["axioms"]["names"].append("ewfoo-concat")
    current["axioms"]["count"] += 1
    current["generator"]["operators"].append("ewfoo")
    current["generator"]["templates"]["mat"].append("ewfoo")
    differences = corpus_verify.record_differences(meta, current)
    assert differences == ["axioms the registry has and the corpus does not: ewfoo-concat",
                           "generator operators the registry has and the corpus does not: ewfoo",
                           "templates of the mat domain the registry has and the corpus does not: ewfoo"]
    message = corpus_verify.stale_message(CORPUS_PATH, meta, current)
    assert "run `eqsat rules generate` and commit the result" in message and "ewfoo-concat" in message
    message = corpus_verify.stale_message(CORPUS4_PATH, meta, current)
    assert "eqsat rules select cands4.json" in message and "--out FILE" not in message  # a new template: generate
    current["generator"] = copy.deepcopy(corpus_verify.registry_record()["generator"])
    message = corpus_verify.stale_message(CORPUS4_PATH, meta, current)  # an axiom only: verify again will do
    assert "eqsat rules select cands4.json" in message and "--out FILE` and move FILE over it" in message
    # and the other way: what the corpus records that the registry no longer has, or in another order
    current = copy.deepcopy(corpus_verify.registry_record())
    gone = current["axioms"]["names"].pop()
    current["axioms"]["dimension"].reverse()
    differences = corpus_verify.record_differences(meta, current)
    assert f"axioms the corpus records and the registry no longer has: {gone}" in differences
    assert "dimension axioms in another order than the registry's" in differences


def test_an_operator_added_to_the_registry_changes_the_record(monkeypatch: pytest.MonkeyPatch) -> None:
    # the record is read from the registry as it is, not from constants computed at import
    gelu = ops.REGISTRY["gelu"]
    (form,) = [f for name, f in gelu.generator_forms.items() if name == "gelu"]
    axiom = ("ewfoo-concat", "(ewfoo (concat :axis ?ax ?a ?b))", "(concat :axis ?ax (ewfoo ?a) (ewfoo ?b))",
             {"params": {"?ax": (0, 1)}})
    monkeypatch.setitem(ops.REGISTRY, "ewfoo", dataclasses.replace(gelu, name="ewfoo", axioms=(axiom,),
                                                                  generator_forms={"ewfoo": form}))
    meta = _fresh_header()
    monkeypatch.undo()
    assert corpus_verify.record_differences(meta) == [
        "axioms the corpus records and the registry no longer has: ewfoo-concat",
        "generator operators the corpus records and the registry no longer has: ewfoo",
        "templates of the mat domain the corpus records and the registry no longer has: ewfoo",
        "templates of the heads domain the corpus records and the registry no longer has: ewfoo"]
    meta = _fresh_header()
    monkeypatch.setitem(ops.REGISTRY, "ewfoo", dataclasses.replace(gelu, name="ewfoo", axioms=(axiom,),
                                                                  generator_forms={"ewfoo": form}))
    differences = corpus_verify.record_differences(meta)
    assert "axioms the registry has and the corpus does not: ewfoo-concat" in differences
    assert "generator operators the registry has and the corpus does not: ewfoo" in differences


def test_a_header_without_a_record_is_stale() -> None:
    assert corpus_verify.record_differences({"max_ops": 3}) == [
        "no axioms recorded", "no dimension axioms recorded", "no generator operators recorded",
        *[f"no templates of the {d} domain recorded" for d in ("mat", "conv", "heads")]]


# ---------------------------------------------------------------------------------------------------------
# eqsat rules verify: a check (Z3 on two small rules; the axioms' symbolic validation, seconds, is stubbed)

COMM = Entry("", ["(ewadd ?w1 ?w2)"], ["(ewadd ?w2 ?w1)"], domain="mat", ops=[1, 1])
ASSOC = Entry("", ["(ewadd (ewadd ?w1 ?w2) ?w3)"], ["(ewadd ?w1 (ewadd ?w2 ?w3))"], bidirectional=True,
              domain="mat", ops=[2, 2])
FAST = ["--skip-redundancy", "--executor", "serial", "--workers", "1"]


def _stub_axiom_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every axiom taken as valid without executing it (``tests/rules/test_rules_verifier.py`` validates them)."""
    monkeypatch.setattr(corpus_verify.verifier, "validate_axioms",
                        lambda axs, workers=1: [AxiomCheck(a.name, "valid", "", 1) for a in axs])


@pytest.fixture
def valid_axioms(monkeypatch: pytest.MonkeyPatch) -> None:
    """The axioms' validation stubbed (:func:`_stub_axiom_validation`)."""
    _stub_axiom_validation(monkeypatch)


def _verified_corpus(folder: Path) -> Path:
    entries = [dataclasses.replace(e) for e in (COMM, ASSOC)]
    corpus.assign_ids(entries)
    meta = {"max_ops": 2, "generator": corpus_verify.registry_record()["generator"]}
    corpus_verify.verify_corpus(entries, meta, VerifyOptions(redundancy=False, workers=1,
                                                             dist={"executor": "serial", "results_dir": folder}))
    assert [e.status for e in entries] == ["proved", "proved"]
    path = folder / "small.json"
    corpus.save_corpus(entries, path, meta)
    return path


def _verify(path: Path, folder: Path, *extra: str) -> int:
    from eqsat.cli.app import main

    return main(["rules", "verify", "--corpus", str(path), *FAST, "--results-dir", str(folder / "units"), *extra])


def test_verify_passes_on_what_verification_gives_and_writes_nothing(
        valid_axioms: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _verified_corpus(tmp_path)
    before = path.read_bytes(), path.stat().st_mtime_ns
    assert _verify(path, tmp_path) == 0
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before
    out = capsys.readouterr().out
    assert "reproduced exactly (2 rules)" in out and "rules: proved 2" in out


def test_verify_fails_on_a_difference_with_the_diff_and_writes_nothing(
        valid_axioms: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _verified_corpus(tmp_path)
    entries, meta = corpus.read_corpus(path)
    entries[1].status, entries[1].reason = "unknown", "z3: undecided"
    meta["axioms"]["count"] -= 1
    corpus.save_corpus(entries, path, meta)
    before = path.read_bytes()
    assert _verify(path, tmp_path) == 1
    assert path.read_bytes() == before
    captured = capsys.readouterr()
    assert f"rule {entries[1].id}: unknown -> proved" in captured.out
    assert "header field 'axioms' differs" in captured.out
    assert f"--- {path}" in captured.out and "+++ what verification gives" in captured.out
    errors = [x for x in captured.err.splitlines() if x.startswith("eqsat:")]  # the others: progress
    assert errors == [captured.err.strip().splitlines()[-1]] and errors[0].startswith("eqsat: error: ")
    assert f"run `eqsat rules generate --out {path}`" in errors[0]


def test_verify_shows_the_first_lines_of_a_long_diff(valid_axioms: None, tmp_path: Path) -> None:
    from eqsat.rules.corpus_verify import Reverified

    res = Reverified(tmp_path, "".join(f"a{i}\n" for i in range(50)), [], {}, [], {},
                     "".join(f"b{i}\n" for i in range(50)) + "x" * 400 + "\n", [])
    lines = res.diff(max_lines=10, width=100)
    assert len(lines) == 11 and lines[-1] == "... 94 more diff lines"  # 2 headers, 1 hunk, 50 - and 51 + lines
    assert not res.reproduces
    assert max(map(len, res.diff(max_lines=200, width=100))) < 140  # long lines are cut


def test_verify_out_writes_elsewhere_never_over_the_corpus(
        valid_axioms: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _verified_corpus(tmp_path)
    entries, meta = corpus.read_corpus(path)
    entries[0].status = "unknown"
    corpus.save_corpus(entries, path, meta)
    stale = path.read_text()
    assert _verify(path, tmp_path, "--out", str(path)) == 2
    assert "is the corpus being checked" in capsys.readouterr().err and path.read_text() == stale
    out = tmp_path / "fixed.json"
    assert _verify(path, tmp_path, "--out", str(out)) == 1  # the check still fails ...
    assert path.read_text() == stale
    assert _verify(out, tmp_path) == 0  # ... and what it wrote elsewhere passes it


def test_verify_fails_on_a_header_made_from_another_registry(
        valid_axioms: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _verified_corpus(tmp_path)
    entries, meta = corpus.read_corpus(path)
    meta["generator"]["operators"].remove("softmax")
    corpus.save_corpus(entries, path, meta)
    assert _verify(path, tmp_path) == 1
    err = capsys.readouterr().err
    assert "made from another registry" in err and "generator operators the registry has and the corpus does " \
                                                   "not: softmax" in err


def test_an_invalid_axiom_stops_verification(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.json"
    corpus.save_corpus([COMM], path, {})
    monkeypatch.setattr(corpus_verify.verifier, "validate_axioms",
                        lambda axs, workers=1: [AxiomCheck(a.name, "invalid" if a.name == "ewadd-comm" else "valid",
                                                           "a counterexample", 1) for a in axs])
    with pytest.raises(corpus_verify.AxiomsNotValidError, match="ewadd-comm invalid"):
        corpus_verify.verify_corpus([COMM], {}, VerifyOptions(redundancy=False, workers=1))
    assert _verify(path, tmp_path) == 2
    assert "eqsat: error: axioms not valid: ewadd-comm invalid (a counterexample)" in capsys.readouterr().err


def test_a_missing_corpus_and_unverified_candidates_over_a_committed_corpus_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from eqsat.cli.app import main

    assert _verify(tmp_path / "none.json", tmp_path) == 2
    assert "no corpus at" in capsys.readouterr().err
    for argv in (["rules", "generate", "--no-verify"], ["rules", "select", str(tmp_path / "c.json"), "--no-verify"]):
        assert main(argv) == 2
        assert "--no-verify writes unverified candidates; give --out FILE" in capsys.readouterr().err


@pytest.mark.slow  # validates every axiom symbolically (22 s on two busy cores)
def test_verify_runs_the_real_axiom_validation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _stub_axiom_validation(monkeypatch)  # the corpus written with the stub ...
    path = _verified_corpus(tmp_path)
    monkeypatch.undo()
    assert _verify(path, tmp_path) == 0  # ... passes the real check
