"""Rules that join PET's mutants where they meet (PET's R/T fusion at the mutants' edges): where one corrected
mutant's output is moved back to its layout and the next subprogram's mutant moves it away again the same way,
the two moves cancel, and the second mutant's window reads the first one's output in the moved layout.

A mutant that needs no correction (phase images around dilated convolutions) ends in a move, so consecutive
ones meet move to move, and with these rules the e-graph holds the whole run of them with one gather and one
scatter, however long the run: what a chain of two (:func:`~eqsat.rules.pet.program.chain_of`) does for two
convolutions, for any number. A reshape of a reshape is one reshape (to the last shape, the same row-major
order); a reshape to its input's shape is its input (``reshape-identity``, a default rule); and a transpose
of a transpose is its input where the two permutations of PET's moves are inverses (:func:`move_rules`).
Where an element-wise operator stands between two moves (a ReLU the rules split off a convolution), the moves
pass it as PET's post-optimization moves R/T past activations, so they meet: a transpose or a reshape of a
unary element-wise operator's output is that operator of the moved input (:func:`elementwise_rules`).
``optimize(pet=True)`` adds them where the search found a rewrite."""

from __future__ import annotations

from eqsat import ops
from eqsat.ir.rule import Rule
from eqsat.rules.pet.mutants import RESHAPE, TRANSPOSE, moves_over

__all__ = ["move_rules", "move_permutations", "elementwise_rules"]


def move_permutations() -> list[tuple[int, ...]]:
    """The permutations of the transposes PET's moves are written with (folds, tiles and phase gathers, and
    their inverses), each once: the moves' steps on a probe shape every move applies to."""
    perms: dict[tuple[int, ...], None] = {}
    for move in moves_over({2}):
        steps = move.steps((4, 1, 8, 8))
        assert steps is not None  # every move applies to 4 images of 8x8
        perms.update({tuple(p["perm"]): None for op, p, *_ in steps if op == TRANSPOSE})
    return list(perms)


def _inverse(p: tuple[int, ...], q: tuple[int, ...]) -> bool:
    """Whether ``transpose(transpose(x, q), p)`` is ``x``: axis ``i`` of the result is axis ``q[p[i]]`` of x."""
    return len(p) == len(q) and all(q[p[i]] == i for i in range(len(p)))


def _vector(p: tuple[int, ...]) -> str:
    return "[" + " ".join(map(str, p)) + "]"


def move_rules() -> tuple[Rule, ...]:
    """``pet-reshape-reshape``, and ``pet-transpose-inverse-<p>-<q>`` for each pair of the moves' permutations
    that cancel (``p`` after ``q``)."""
    perms = move_permutations()
    inverse = tuple(
        Rule(f"pet-transpose-inverse-{''.join(map(str, p))}-{''.join(map(str, q))}",
             (f"(transpose {_vector(p)} (transpose {_vector(q)} ?x))",), ("?x",))
        for p in perms for q in perms if _inverse(p, q))
    return (Rule("pet-reshape-reshape", ("(reshape ?r (reshape ?t ?x))",), ("(reshape ?r ?x)",)), *inverse,
            *elementwise_rules())


def elementwise_rules() -> tuple[Rule, ...]:
    """``pet-<move>-past-<op>``, both ways, for each unary element-wise operator of the registry without
    parameters: ``move(op(x)) = op(move(x))`` for a transpose or a reshape (each entry is moved alone)."""
    unary = sorted(s.name for s in ops.REGISTRY.values() if s.elementwise and len(s.inputs) == 1 and not s.params)
    return tuple(Rule(f"pet-{move}-past-{op}", (f"({move} ?p ({op} ?x))",), (f"({op} ({move} ?p ?x))",),
                      bidirectional=True)
                 for move in (TRANSPOSE, RESHAPE) for op in unary)
