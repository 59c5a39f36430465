"""Operator axioms, rule generator, Z3 verifier and the committed rule corpus. Imports ``eqsat.ops`` and ``eqsat.ir``
(the derivability filter also runs ``eqsat.engine``, imported inside its functions)."""

from __future__ import annotations

import functools
from pathlib import Path

from eqsat.ir.rule import Rule, RuleError, parse, tensor_vars, unparse


def starter_rules() -> list[Rule]:
    """The hand-written starter rules (see :mod:`eqsat.rules.starter`)."""
    from eqsat.rules.starter import STARTER_RULES

    return list(STARTER_RULES)


def corpus_or_starter(max_ops: int = 3) -> list[Rule]:
    """The rules ``optimize`` uses by default: the verified corpus (else the starter set) plus the hand-written
    rules over operators the generator does not cover (batch-norm folding). With ``max_ops=4`` the proved rules
    of four operators that the corpus cannot derive (``rules/corpus/rules4.json``) are added.

    The corpus files are read and parsed once per process (about 0.1 s, every ``optimize`` call paid it), and
    again when one of them changes on disk."""
    from eqsat.rules.corpus import CORPUS4_PATH, CORPUS_PATH

    if max_ops not in (3, 4):
        raise ValueError(f"rule corpora exist for 3 and 4 operators, not {max_ops}")
    return list(_corpus_or_starter(max_ops, _stamp(CORPUS_PATH), _stamp(CORPUS4_PATH)))


def _stamp(path: Path) -> tuple[int, int] | None:
    """When a file last changed, and its size (None: there is none)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


@functools.lru_cache(maxsize=4)
def _corpus_or_starter(max_ops: int, *stamps: tuple[int, int] | None) -> tuple[Rule, ...]:
    """:func:`corpus_or_starter` for corpus files in the state ``stamps`` describe (the cache key)."""
    from eqsat.rules.corpus import CORPUS4_PATH, load_corpus_rules
    from eqsat.rules.starter import EXTRA_RULES

    rules = load_corpus_rules()
    if not rules:
        return tuple(starter_rules())
    if max_ops == 4:
        rules += load_corpus_rules(path=CORPUS4_PATH)
    names = {r.name for r in rules}
    return tuple([r for r in rules if engine_worthy(r)] + [r for r in EXTRA_RULES if r.name not in names])


def engine_worthy(rule: Rule) -> bool:
    """Whether the engine should run a rule by default.

    A two-output rule whose left-hand sides share no tensor matches every pair of matching nodes in a model
    (e.g. any two relus -> one relu over a concat); that is quadratic growth of the e-graph for merges that
    only pay off when the two sides share an input, so such rules are left out.
    """
    if not rule.multi:
        return True
    a, b = (tensor_vars(parse(side)) for side in rule.lhs)
    return bool(a & b)


__all__ = ["Rule", "RuleError", "parse", "unparse", "starter_rules", "corpus_or_starter", "engine_worthy"]
