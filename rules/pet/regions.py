"""PET's region analysis: the output of a subprogram and of a mutant cut into boxes (hyper-rectangles on which
each program reads its inputs the same way), and each box decided equal or not by random tests at ``m + 1``
representative positions (PET's Theorems 1 and 2).

Boxes come from the footprints (:func:`eqsat.rules.pet.program.footprint`): along each output axis a box ends
where, for either program, the set of taps that read something changes (a padding border, a seam) or the step
between neighbours' input elements does (the read stops being a translation, as across the images a reshape
folded together). So on a box every position reads the same taps, shifted: PET's "same summation interval".
The split points are derived from the programs' structure, one axis at a time, and the boxes are their product.

A box is decided by the positions ``v0`` (its first corner) and ``v0 + e_j`` for every axis ``j`` along which
it is wider than one, compared on ``tests`` random inputs modulo :data:`~eqsat.rules.pet.program.PRIME`. By
Theorem 1 agreement there for every input means agreement on the whole box; by Theorem 2 a position where the
programs differ agrees on one random input with probability at most ``n / p`` (``n`` the program's inputs, its
weights included), so a wrong "equal" has probability at most ``(n / p) ** tests`` per box (:attr:`error_bound`).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import numpy as np

from eqsat.ir.graph import Graph
from eqsat.rules.pet.program import PRIME, evaluate_mod, footprint, random_values

__all__ = ["Box", "BoxDecision", "RegionAnalysis", "axis_cuts", "boxes", "analyse", "merge_boxes", "DEFAULT_TESTS",
           "repeats_along_batch"]

#: random inputs per box (PET leaves it open); with p = 8191 and three inputs one test errs at most 3.7e-4
DEFAULT_TESTS = 4

Box = tuple[tuple[int, int], ...]  # per output axis, [start, stop)


def axis_cuts(ids: np.ndarray, axis: int) -> list[int]:
    """Where boxes of one program's footprint ``ids`` (output shape + taps) end along ``axis``: the positions
    ``i`` such that ``i - 1`` and ``i`` lie in different boxes."""
    a = np.moveaxis(ids, axis, 0)
    valid = a != 0  # an element (or, negative, a position of a window's output) rather than padding
    cuts: list[int] = []
    start = 0
    first_step: np.ndarray | None = None
    for i in range(a.shape[0] - 1):
        same_taps = np.array_equal(valid[i], valid[i + 1])
        step = np.where(valid[i] & valid[i + 1], a[i + 1] - a[i], 0)
        if same_taps and (i == start or np.array_equal(step, first_step)):
            if i == start:
                first_step = step
            continue
        cuts.append(i + 1)
        start = i + 1
        first_step = None
    return cuts


def boxes(shape: tuple[int, ...], cuts: list[list[int]]) -> list[Box]:
    """The boxes of ``shape`` cut at ``cuts`` (per axis), in row-major order."""
    ranges = []
    for size, cs in zip(shape, cuts, strict=True):
        edges = [0, *sorted(set(cs)), size]
        ranges.append([(a, b) for a, b in itertools.pairwise(edges)])
    return [tuple(b) for b in itertools.product(*ranges)]


def representatives(box: Box) -> list[tuple[int, ...]]:
    """Theorem 1's positions of a box: its first corner ``v0`` and ``v0 + e_j`` along each axis wider than one."""
    v0 = tuple(a for a, _ in box)
    out = [v0]
    for j, (a, b) in enumerate(box):
        if b - a > 1:
            out.append(v0[:j] + (a + 1,) + v0[j + 1:])
    return out


@dataclass(frozen=True)
class BoxDecision:
    """One box's decision and its evidence: the positions compared and how many random inputs agreed there
    (``agreed == tests`` for an equal box; the first position that differed otherwise)."""

    box: Box
    equal: bool
    positions: tuple[tuple[int, ...], ...]
    tests: int
    differing: tuple[int, ...] | None = None


@dataclass(frozen=True)
class RegionAnalysis:
    """The analysis of a mutant against its original: every box's decision, the number of inputs ``n`` and
    tests ``t`` behind PET's bound, and the field."""

    shape: tuple[int, ...]
    decisions: tuple[BoxDecision, ...]
    inputs: int
    tests: int
    prime: int = PRIME
    #: the images the random tests ran on (fewer than the output's batch where its footprints repeat over them)
    images: int | None = None
    #: the channels they ran on (1 for a probe's programs)
    channels: int | None = None

    @functools.cached_property
    def wrong(self) -> list[Box]:
        """The non-equal boxes, adjacent ones merged (:func:`merge_boxes`)."""
        return merge_boxes([d.box for d in self.decisions if not d.equal])

    @property
    def wrong_fraction(self) -> float:
        """The share of output positions in non-equal boxes."""
        total = float(np.prod(self.shape))
        return sum(float(np.prod([b - a for a, b in box])) for box in self.wrong) / total

    @property
    def error_bound(self) -> float:
        """PET's bound on a box wrongly found equal: ``(n / p) ** t`` per box, times the boxes."""
        return len(self.decisions) * (self.inputs / self.prime) ** self.tests

    def summary(self) -> dict[str, object]:
        """The evidence as plain data (for a rule's provenance and reports)."""
        return {"boxes": len(self.decisions), "wrong_boxes": [list(map(list, b)) for b in self.wrong],
                "positions_tested": sum(len(d.positions) for d in self.decisions), "tests": self.tests,
                "prime": self.prime, "error_bound": self.error_bound, "wrong_fraction": self.wrong_fraction,
                "tested_on_images": self.images, "tested_on_channels": self.channels}


def repeats_along_batch(full: np.ndarray, reduced: np.ndarray, image: int) -> bool:
    """Whether footprint ``full`` (batch ``b``) is footprint ``reduced`` (batch ``r``, ``r`` dividing ``b``) again
    for every block of ``r`` images, reading the input moved by those images (``image`` elements each): then each
    output position of block ``k`` is the same sum of products as its position in block 0, over the input's
    block ``k``, and whatever holds of one holds of the other."""
    b, r = full.shape[0], reduced.shape[0]
    if b % r or full.shape[1:] != reduced.shape[1:]:
        return False
    for k in range(b // r):
        if not np.array_equal(full[k * r:(k + 1) * r], np.where(reduced > 0, reduced + k * r * image, reduced)):
            return False
    return True


def analyse(original: Graph, mutant: Graph, tests: int = DEFAULT_TESTS, seed: int = 0,
            prints: tuple[np.ndarray, np.ndarray] | None = None,
            reduced: tuple[Graph, Graph] | None = None) -> RegionAnalysis:
    """Cut the output into boxes common to ``original`` and ``mutant`` (same signature) and decide each one
    with ``tests`` random inputs shared by all boxes, as PET's corrector does.

    ``prints``: the two programs' footprints where the caller has them, possibly of a probe of the programs with
    size 1 along axes every position of which reads alike (the channels: :func:`eqsat.rules.pet.search`'s probe),
    along which there is then no cut.

    ``reduced``: the same two programs on a block of the output that every other block repeats, which the caller
    has checked: a batch of ``r`` images whose footprints the full ones repeat along the batch
    (:func:`repeats_along_batch`), or a probe's one channel (every channel reads alike), or both. The random tests
    then run on those, and a position is decided at its place modulo their output's shape: ``(n, c, ...)`` at
    ``(n mod r, c mod 1, ...)``, the same sum of products (a 64-channel batch of 16 analysed as one channel of 2
    images does a 512th of the work)."""
    shape = tuple(original.shapes[original.outputs[0]])
    if tuple(mutant.shapes[mutant.outputs[0]]) != shape:
        raise ValueError(f"pet: the mutant's output {mutant.shapes[mutant.outputs[0]]} is not the original's {shape}")
    prints = prints or (footprint(original), footprint(mutant))
    for ids in prints:
        if any(n not in (size, 1) for n, size in zip(ids.shape[:-1], shape, strict=True)):
            raise ValueError(f"pet: a footprint of shape {ids.shape[:-1]} for an output of shape {shape}")
    cuts = [sorted({c for ids in prints if ids.shape[ax] == shape[ax] for c in axis_cuts(ids, ax)})
            for ax in range(len(shape))]
    rng = np.random.default_rng(seed)
    tested = (original, mutant) if reduced is None else reduced
    block = tuple(tested[0].shapes[tested[0].outputs[0]])
    if len(block) != len(shape) or any(size % b for size, b in zip(shape, block, strict=True)):
        raise ValueError(f"pet: programs of output {block} tested for an output of shape {shape}")
    runs = []
    for _ in range(tests):
        values = random_values(tested[0], rng)
        runs.append((evaluate_mod(tested[0], values), evaluate_mod(tested[1], values)))

    def at(v: tuple[int, ...]) -> tuple[int, ...]:  # where the runs hold position v
        return tuple(i % b for i, b in zip(v, block, strict=True))

    decisions = []
    for box in boxes(shape, cuts):
        reps = representatives(box)
        differing = next((v for v in reps for a, b in runs if a[at(v)] != b[at(v)]), None)
        decisions.append(BoxDecision(box, differing is None, tuple(reps), tests, differing))
    n_inputs = len(original.inputs) + len(original.weights)
    return RegionAnalysis(shape, tuple(decisions), n_inputs, tests, images=block[0], channels=block[1])


def merge_boxes(found: list[Box]) -> list[Box]:
    """Boxes merged while two are adjacent along one axis and equal along all others (a union, as boxes): along
    each axis in turn, the boxes alike on all other axes are sorted and each run of touching ones joined, until a
    pass over all axes joins none."""
    out = sorted(set(found))
    merged = True
    while merged:
        merged = False
        for k in range(len(out[0]) if out else 0):
            rows: dict[Box, list[tuple[int, int]]] = {}
            for box in out:
                rows.setdefault(box[:k] + box[k + 1:], []).append(box[k])
            joined: list[Box] = []
            for rest, spans in rows.items():
                spans.sort()
                runs = [list(spans[0])]
                for a, b in spans[1:]:
                    if a == runs[-1][1]:
                        runs[-1][1] = b
                        merged = True
                    else:
                        runs.append([a, b])
                joined += [rest[:k] + ((a, b),) + rest[k:] for a, b in runs]
            out = sorted(joined)
    return out
