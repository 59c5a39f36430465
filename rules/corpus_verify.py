"""Verifying a rule corpus, and checking that a corpus file is what verification gives.

A corpus file records, beside its rules, what it was made from (:func:`registry_record`): the axioms the
verifier asserts (core and declared ones, and the dimension axioms, by name and in order) and what the
generator enumerates (its operators, and the templates each domain applies). :func:`verify_corpus` sets every
rule's status (a numeric re-check, then Z3 from the axioms) and the header's axiom and verification fields;
``eqsat rules generate`` and ``eqsat rules select`` write its result, ``eqsat rules verify`` runs it again on a
copy of the file and compares (:func:`reverify`), and the tests compare the header with the registry without
running Z3 (:func:`record_differences`).
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eqsat import ops
from eqsat.errors import EqsatError
from eqsat.rules import axioms, corpus, verifier
from eqsat.rules.confirmation import check_numeric
from eqsat.rules.corpus import Entry
from eqsat.rules.domains import DOMAINS

#: Random shape assignments the numeric re-check before Z3 tries per rule, beside the generator's shape sets: a
#: rule true only where a broadcast happens to fit the generator's shapes (a one-channel kernel added to an
#: input) fails on some of them.
NUMERIC_RANDOM_SHAPES = 40

#: What ``--skip-redundancy`` records in place of the redundant axioms.
NOT_CHECKED = "not checked"


class AxiomsNotValidError(EqsatError):
    """An axiom failed validation: no corpus is verified (or written) from it."""


@dataclass(frozen=True)
class VerifyOptions:
    """The budgets and executor of a corpus verification (``eqsat rules generate|select|verify`` options)."""

    #: Z3 resource units per rule (reproducible, unlike time) and the wall-clock safety net in seconds.
    rlimit: int = verifier.RULE_RLIMIT
    timeout: float = 30.0
    #: The same per axiom in the redundancy check; ``redundancy=False`` skips that check.
    axiom_rlimit: int = verifier.AXIOM_RLIMIT
    axiom_timeout: float = 15.0
    redundancy: bool = True
    workers: int = 2
    #: Executor options of :func:`eqsat.rules.verifier.verify_many` (executor, address, results_dir, fresh).
    dist: dict[str, Any] = field(default_factory=dict)


def registry_record() -> dict[str, Any]:
    """What the registry gives the verifier and the generator now, as a corpus header records it:
    ``{"axioms": {"count", "names", "dimension"}, "generator": {"operators", "templates"}}``. Read from the
    registry on each call (not from import-time constants)."""
    names = [a.name for a in axioms.CORE_AXIOMS + axioms.declared_axioms()]
    templates = {d.name: list(d.templates) for d in DOMAINS.values()}
    enumerated = {t for ts in templates.values() for t in ts}
    operators = sorted(spec.name for spec in ops.REGISTRY.values() if enumerated & set(spec.generator_forms))
    return {"axioms": {"count": len(names), "names": names,
                       "dimension": [d.name for d in axioms.declared_dim_axioms()]},
            "generator": {"operators": operators, "templates": templates}}


def regenerate_command(path: str | Path) -> str:
    """The command that rewrites a corpus file (the committed size-4 corpus comes from ``select``)."""
    if Path(path).resolve() == corpus.CORPUS4_PATH.resolve():
        return "eqsat rules generate --max-ops 4 --no-verify --out cands4.json && eqsat rules select cands4.json"
    if Path(path).resolve() == corpus.CORPUS_PATH.resolve():
        return "eqsat rules generate"
    return f"eqsat rules generate --out {path}"


def rewrite_advice(path: str | Path, generator_changed: bool = False) -> str:
    """What to run to bring a corpus file up to date. Where what the generator enumerates has not changed, the
    size-4 corpus (hours to generate) can be verified again instead."""
    advice = f"run `{regenerate_command(path)}` and commit the result"
    if Path(path).resolve() == corpus.CORPUS4_PATH.resolve() and not generator_changed:
        advice += (f" (or, as what the generator enumerates is unchanged, `eqsat rules verify --corpus {path} --out "
                   "FILE` and move FILE over it)")
    return advice


def _listed(label: str, recorded: Sequence[str] | None, current: Sequence[str]) -> list[str]:
    if recorded is None:
        return [f"no {label} recorded"]
    out = []
    new = [x for x in current if x not in recorded]
    gone = [x for x in recorded if x not in current]
    if new:
        out.append(f"{label} the registry has and the corpus does not: {', '.join(new)}")
    if gone:
        out.append(f"{label} the corpus records and the registry no longer has: {', '.join(gone)}")
    if not new and not gone and list(recorded) != list(current):
        out.append(f"{label} in another order than the registry's")
    return out


def _axiom_differences(ax: dict[str, Any], now: dict[str, Any]) -> list[str]:
    out = _listed("axioms", ax.get("names"), now["names"])
    if "names" in ax and ax.get("count") != len(ax["names"]):
        out.append(f"axiom count {ax.get('count')} is not the number of axiom names recorded")
    return out + _listed("dimension axioms", ax.get("dimension"), now["dimension"])


def _generator_differences(gen: dict[str, Any], now: dict[str, Any]) -> list[str]:
    out = _listed("generator operators", gen.get("operators"), now["operators"])
    templates = gen.get("templates", {})
    for domain, names in now["templates"].items():
        out += _listed(f"templates of the {domain} domain", templates.get(domain), names)
    return out + [f"templates of a domain the generator no longer has: {d}" for d in templates
                  if d not in now["templates"]]


def record_differences(meta: dict[str, Any], current: dict[str, Any] | None = None) -> list[str]:
    """How a corpus header's record of the registry (see :func:`registry_record`) differs from ``current``
    (default: the registry now), one line per difference; empty when it matches."""
    now = registry_record() if current is None else current
    return (_axiom_differences(meta.get("axioms", {}), now["axioms"])
            + _generator_differences(meta.get("generator", {}), now["generator"]))


def stale_message(path: str | Path, meta: dict[str, Any], current: dict[str, Any] | None = None) -> str:
    """One line: the corpus file (its header ``meta``) was made from another registry than ``current`` (default:
    the registry now), how (:func:`record_differences`), and what to run."""
    now = registry_record() if current is None else current
    generator_changed = bool(_generator_differences(meta.get("generator", {}), now["generator"]))
    return (f"{path} was made from another registry than eqsat.ops declares now "
            f"({'; '.join(record_differences(meta, now))}); " + rewrite_advice(path, generator_changed))


def verify_entries(entries: Sequence[Entry], timeout: float, workers: int, rlimit: int, **dist: Any) -> None:
    """Set the status of each entry: numerically re-checked, then Z3 entailment from the axioms (within the
    deterministic resource budget ``rlimit`` and the wall-clock safety net ``timeout``); ``dist``: the executor
    options of :func:`eqsat.rules.verifier.verify_many`."""
    todo = []
    for e in entries:
        bad = check_numeric(e.lhs, e.rhs, shape_sets=(0, 1, 2), random_shapes=NUMERIC_RANDOM_SHAPES, seed=7,
                            conditions=e.conditions)
        if bad is not None:
            e.status, e.reason = "refuted", f"numeric counterexample: {bad}"
        else:
            todo.append(e)
    verdicts = verifier.verify_many([(e.lhs, e.rhs, e.conditions) for e in todo], timeout=timeout, workers=workers,
                                    rlimit=rlimit, **dist)
    for e, v in zip(todo, verdicts, strict=True):
        e.status, e.reason = v.status, v.reason


def status_counts(entries: Sequence[Entry]) -> dict[str, int]:
    """How many entries have each status, by status name."""
    counts: dict[str, int] = {}
    for e in entries:
        counts[e.status] = counts.get(e.status, 0) + 1
    return dict(sorted(counts.items()))


def verify_corpus(entries: Sequence[Entry], meta: dict[str, Any], options: VerifyOptions,
                  progress: Callable[[str], None] | None = None) -> None:
    """Validate the axioms, check which ones the others entail (unless ``options.redundancy`` is off), verify
    every entry, and record the outcome in ``meta`` (``axioms``: the registry's as :func:`registry_record`
    gives them, with the redundant ones; ``verification``: the count per status). Changes ``entries`` and
    ``meta`` in place. Raises :class:`AxiomsNotValidError` (before any rule is verified) when an axiom is not
    valid: a corpus proved from it would be unsound."""
    say = progress or (lambda _msg: None)
    current = axioms.CORE_AXIOMS + axioms.declared_axioms()
    say(f"validating {len(current)} axioms")
    bad = [c for c in verifier.validate_axioms(list(current), workers=options.workers) if c.status != "valid"]
    if bad:
        raise AxiomsNotValidError(
            "axioms not valid: " + "; ".join(f"{c.name} {c.status} ({c.reason})" for c in bad)
            + "; fix them where they are declared (OpSpec.axioms in eqsat/ops, or eqsat/rules/axioms.py)")
    redundant: list[str] | str = NOT_CHECKED
    if options.redundancy:
        say("checking which axioms the others entail")
        redundant = verifier.redundant_axioms(current, timeout=options.axiom_timeout, rlimit=options.axiom_rlimit)
    say(f"verifying {len(entries)} rules")
    verify_entries(entries, options.timeout, options.workers, options.rlimit, progress=progress, **options.dist)
    meta["axioms"] = {**registry_record()["axioms"], "redundant": redundant}
    meta["verification"] = status_counts(entries)


@dataclass
class Reverified:
    """A corpus file verified again: the file as read, what verification gives, and how they differ."""

    path: Path
    #: The file's text, rules and header.
    written: str
    old_entries: list[Entry]
    old_meta: dict[str, Any]
    #: What verification gives: the rules (ids from their content, statuses), the header and the text.
    entries: list[Entry]
    meta: dict[str, Any]
    text: str
    #: How the header's generator record differs from the registry (:func:`record_differences`).
    stale: list[str]

    @property
    def reproduces(self) -> bool:
        """Whether the file is exactly what verification gives, from the registry as it is now."""
        return self.text == self.written and not self.stale

    def summary(self) -> list[str]:
        """What differs, in words: the header's fields, rule ids, statuses."""
        out = [_field_difference(k, self.old_meta.get(k), self.meta.get(k))
               for k in sorted(set(self.old_meta) | set(self.meta)) if self.old_meta.get(k) != self.meta.get(k)]
        for old, new in zip(self.old_entries, self.entries, strict=True):
            if old.id != new.id:
                out.append(f"rule {old.id}: its content gives the id {new.id}")
            if (old.status, old.reason) != (new.status, new.reason):
                out.append(f"rule {new.id}: {old.status} -> {new.status}"
                           + (f" ({new.reason})" if new.status != "proved" else ""))
        return out

    def diff(self, max_lines: int = 30, width: int = 300) -> list[str]:
        """The first ``max_lines`` lines of a unified diff from the file to the text verification gives (each
        cut at ``width`` characters), and a last line saying how many more there are."""
        lines = list(difflib.unified_diff(self.written.splitlines(), self.text.splitlines(), str(self.path),
                                          "what verification gives", n=0, lineterm=""))
        shown = [x if len(x) <= width else x[:width] + f" ... ({len(x) - width} more characters)"
                 for x in lines[:max_lines]]
        if len(lines) > max_lines:
            shown.append(f"... {len(lines) - max_lines} more diff lines")
        return shown


def _field_difference(key: str, old: Any, new: Any) -> str:
    """``header field 'axioms' differs: count (95 -> 107), names (added), redundant``."""
    def change(a: Any, b: Any) -> str:
        if a is None or b is None:
            return "added" if a is None else "removed"
        return f"{a} -> {b}" if isinstance(a, int | str) and isinstance(b, int | str) else ""

    if isinstance(old, dict) and isinstance(new, dict):
        parts = [k + (f" ({c})" if (c := change(old.get(k), new.get(k))) else "")
                 for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
        return f"header field {key!r} differs: {', '.join(parts)}"
    c = change(old, new)
    return f"header field {key!r} differs" + (f": {c}" if c else "")


def reverify(path: str | Path, options: VerifyOptions, progress: Callable[[str], None] | None = None) -> Reverified:
    """Verify a corpus file's rules again and render what verification gives: ids from the rules' content,
    statuses, the header's axioms and verification fields, the rest of the header as the file has it (with
    ``options.redundancy`` off, the redundant axioms too)."""
    path = Path(path)
    written = path.read_text()
    old_entries, old_meta = corpus.read_corpus(path)
    entries, meta = copy.deepcopy(old_entries), copy.deepcopy(old_meta)
    corpus.assign_ids(entries)
    verify_corpus(entries, meta, options, progress)
    if not options.redundancy:
        meta["axioms"]["redundant"] = old_meta.get("axioms", {}).get("redundant", NOT_CHECKED)
    return Reverified(path, written, old_entries, old_meta, entries, meta, corpus.corpus_text(entries, meta),
                      record_differences(meta))
