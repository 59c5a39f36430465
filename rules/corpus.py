"""The committed rule corpus: selection from generated candidates, storage, and loading as engine rules.

The corpus lives in ``rules/corpus/rules.json``: one entry per rule with an id, the S-expression sides in
*expression form* (parameters may be ``(dim ?x k)`` expressions on either side), extra conditions, whether it
is a two-output rule, whether it is applied in both directions, and its verification status and reason.
:func:`load_corpus_rules` turns entries into :class:`~eqsat.rules.rule.Rule` objects the engine compiles:
a computed parameter on a left-hand side becomes a parameter variable with an equality condition.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from eqsat.rules.rule import Rule, RuleError, Sexp, Vec, is_var, parse, split_args, unparse

CORPUS_PATH = Path(__file__).parent / "corpus" / "rules.json"


@dataclass
class Entry:
    """One corpus rule."""

    id: str
    lhs: list[str]
    rhs: list[str]
    conditions: list[str] = field(default_factory=list)
    multi: bool = False
    bidirectional: bool = False
    status: str = "unverified"  # proved | unknown | refuted | unverified
    reason: str = ""
    domain: str = ""
    ops: list[int] = field(default_factory=list)  # operator counts of (lhs, rhs)

    def text(self) -> str:
        """One-line form ``lhs => rhs``."""
        arrow = " <=> " if self.bidirectional else " => "
        return " ; ".join(self.lhs) + arrow + " ; ".join(self.rhs)


def select(cands: Iterable[Any]) -> list[Entry]:
    """Choose the corpus from confirmed generator candidates.

    Kept: two-output rules, rules that change the operator count, and rules of at most two operators per
    side (commutativity, associativity, distributivity and other enabling rewrites). Same-size rules with
    three operators per side are left out: they are numerous and mostly compositions of the smaller ones.
    """
    out: list[Entry] = []
    for c in cands:
        if not (c.multi or c.n_lhs != c.n_rhs or c.n_lhs <= 2):
            continue
        bidir = (not c.multi and c.n_rhs >= 1
                 and (c.n_lhs == c.n_rhs or (c.n_lhs - c.n_rhs == 1 and c.n_lhs <= 2)))
        out.append(Entry("", list(c.lhs), list(c.rhs), list(getattr(c, "conditions", ()) or ()), c.multi, bidir,
                         domain=c.domain, ops=[c.n_lhs, c.n_rhs]))
    out.sort(key=lambda e: (e.multi, e.domain, sum(e.ops), e.text()))
    for k, e in enumerate(out, 1):
        e.id = f"r{k:03d}"
    return out


def save_corpus(entries: Sequence[Entry], path: str | Path = CORPUS_PATH, meta: dict[str, Any] | None = None) -> None:
    """Write the corpus (one JSON object per rule, one line each, for readable diffs)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["{", f'  "meta": {json.dumps(meta or {}, sort_keys=True)},', '  "rules": [']
    for k, e in enumerate(entries):
        lines.append("    " + json.dumps(asdict(e)) + ("," if k < len(entries) - 1 else ""))
    lines += ["  ]", "}"]
    path.write_text("\n".join(lines) + "\n")


def read_corpus(path: str | Path = CORPUS_PATH) -> tuple[list[Entry], dict[str, Any]]:
    """Read the corpus entries and its metadata (empty when there is no corpus file)."""
    path = Path(path)
    if not path.exists():
        return [], {}
    data = json.loads(path.read_text())
    return [Entry(**e) for e in data.get("rules", [])], data.get("meta", {})


def _engine_lhs(e: Sexp, conds: list[str], counter: list[int]) -> Sexp:
    if not isinstance(e, list):
        return e
    spec, params, ins = split_args(e)
    new_params: list[Sexp] = []
    for p in params:
        computed = isinstance(p, list) or (isinstance(p, Vec) and any(isinstance(i, list) for i in p.items))
        if computed:
            counter[0] += 1
            var = f"?p{counter[0]}"
            if isinstance(p, list):
                conds.append(f"(= {var} {unparse(p)})")
            new_params.append(var)
        else:
            new_params.append(p)
    return [e[0], *new_params, *[_engine_lhs(x, conds, counter) for x in ins]]


def engine_rules(entry: Entry) -> list[Rule]:
    """The one-way engine rules of a corpus entry (its reverse too when bidirectional and valid)."""
    out = []
    sides = [(entry.lhs, entry.rhs, entry.id)]
    if entry.bidirectional:
        sides.append((entry.rhs, entry.lhs, entry.id + "-rev"))
    for lhs, rhs, name in sides:
        if any(is_var(parse(s)) for s in lhs):
            continue
        conds = list(entry.conditions)
        counter = [0]
        elhs = tuple(unparse(_engine_lhs(parse(s), conds, counter)) for s in lhs)
        try:
            out.append(Rule(name, elhs, tuple(rhs), tuple(conds), False, "corpus", entry.status,
                            {"id": entry.id, "reason": entry.reason}))
        except RuleError:
            continue
    return out


def load_corpus_rules(include_unproved: bool = False, path: str | Path = CORPUS_PATH) -> list[Rule]:
    """The corpus as engine rules: proved rules only unless ``include_unproved``. Empty without a corpus."""
    entries, _ = read_corpus(path)
    rules: list[Rule] = []
    for e in entries:
        if e.status == "proved" or (include_unproved and e.status != "refuted"):
            rules += engine_rules(e)
    return rules
