"""The committed rule corpus: selection from generated candidates, storage, and loading as engine rules.

The corpus lives in ``rules/corpus/rules.json``: one entry per rule with an id, the S-expression sides in
*expression form* (parameters may be ``(dim ?x k)`` expressions on either side), extra conditions, whether it
is a two-output rule, whether it is applied in both directions, and its verification status and reason.
:func:`load_corpus_rules` turns entries into :class:`~eqsat.rules.rule.Rule` objects the engine compiles:
a computed parameter on a left-hand side becomes a parameter variable with an equality condition.
"""

from __future__ import annotations

import json
from collections import Counter
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


def _heavy_ops(e: Sexp) -> int:
    """Matmuls and convolutions with a computed (non-constant) kernel: the operators whose count matters."""
    if not isinstance(e, list):
        return 0
    spec, _, ins = split_args(e)
    n = int(spec.name == "matmul")
    if spec.name == "conv2d":
        kernel = ins[1]
        n = int(not (isinstance(kernel, list) and str(kernel[0]).startswith("const_")))
    return n + sum(_heavy_ops(x) for x in ins)


def _subterm_uses(sides: Sequence[str]) -> dict[str, tuple[str, int]]:
    """Each distinct subterm with tensor inputs: its operator name and how often it occurs."""
    terms: dict[str, tuple[str, int]] = {}

    def walk(e: Sexp) -> None:
        if isinstance(e, list):
            spec, _, ins = split_args(e)
            if ins:
                key = unparse(e)
                terms[key] = (spec.name, terms.get(key, ("", 0))[1] + 1)
            for x in ins:
                walk(x)

    for s in sides:
        walk(parse(s))
    return terms


def _op_counts(sides: Sequence[str]) -> Counter[str]:
    """Operator names of the distinct subterms with tensor inputs (a shared subterm counts once)."""
    return Counter(name for name, _ in _subterm_uses(sides).values())


def _tree_shaped(sides: Sequence[str]) -> bool:
    """No side reuses a computed subterm (rules over DAGs with reuse compose smaller rules)."""
    return all(n == 1 for s in sides for _, n in _subterm_uses([s]).values())


def _adds_only_a_transpose(c: Any) -> bool:
    """True when the right side is the left side's operators less one transpose (a layout-moving rule)."""
    return (c.n_lhs - c.n_rhs == 1 and not c.multi
            and _op_counts(c.lhs) - _op_counts(c.rhs) == Counter({"transpose": 1})
            and not _op_counts(c.rhs) - _op_counts(c.lhs))


def _nested_transposes(e: Sexp, under: bool = False) -> bool:
    """True when a transpose has another transpose below it."""
    if not isinstance(e, list):
        return False
    _, _, ins = split_args(e)
    here = e[0] == "transpose"
    if here and under:
        return True
    return any(_nested_transposes(x, under or here) for x in ins)


def _layout_only(c: Any) -> bool:
    """Both sides are chains of transposes: a composition, to be applied one way only."""
    def only_transposes(e: Sexp) -> bool:
        return is_var(e) or (isinstance(e, list) and e[0] == "transpose" and only_transposes(e[-1]))

    return all(only_transposes(parse(s)) for s in (*c.lhs, *c.rhs))


def select(cands: Iterable[Any]) -> list[Entry]:
    """Choose the corpus from confirmed generator candidates.

    Kept: two-output rules, rules that change the operator count, rules of at most two operators per side
    (commutativity, associativity, distributivity and other enabling rewrites), and same-size rules that
    change the number of matmuls / convolutions without reusing a subterm (merges such as
    ``x1 W1 + x2 W2 = [x1 x2] [W1; W2]`` or a 1x1 and a 3x3 convolution added into one). Other same-size
    rules with three operators per side are left out: they are numerous and mostly compositions of the smaller ones.
    So are rules of three operators with a transpose below a transpose: they compose the transpose-composition
    rules (two transposes are one) with smaller rules, and there are many of them for rank-3 permutations.

    Applied in both directions: same-size rules, rules that remove one operator from two (but not two
    transposes composed into one: splitting a transpose in two is never useful), and rules that only remove a
    transpose (so that e.g. a transpose of a matmul can become a matmul of transposes).
    """
    out: list[Entry] = []
    for c in cands:
        same_size_merge = (c.n_lhs == c.n_rhs and _tree_shaped([*c.lhs, *c.rhs])
                           and sum(map(_heavy_ops, map(parse, c.lhs))) != sum(map(_heavy_ops, map(parse, c.rhs))))
        if not (c.multi or c.n_lhs != c.n_rhs or c.n_lhs <= 2 or same_size_merge):
            continue
        if not c.multi and max(c.n_lhs, c.n_rhs) >= 3 and any(_nested_transposes(parse(x)) for x in (*c.lhs, *c.rhs)):
            continue
        bidir = (not c.multi and c.n_rhs >= 1 and not _layout_only(c)
                 and (c.n_lhs == c.n_rhs or (c.n_lhs - c.n_rhs == 1 and c.n_lhs <= 2) or _adds_only_a_transpose(c)))
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
