"""Where the fuzzer's random decisions come from.

Every random decision of the generator goes through a :class:`Choices` object, so one generator serves three
drivers: a seeded ``random.Random`` (:class:`RandomChoices`, which records the decisions, for benchmarks), a
replayed decision list (:class:`ReplayChoices`, for shrinking a failure) and hypothesis
(:class:`HypothesisChoices`, in tests, so hypothesis shrinks failures itself). Hypothesis is a test dependency
only and is imported lazily. :func:`choose`, :func:`flip` and :func:`weighted` turn integer decisions into picks;
a smaller decision is always the simpler pick, which is what shrinking relies on.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Protocol


class Choices(Protocol):
    """Where the generator's decisions come from. ``int`` returns an integer in ``[lo, hi]``; smaller is
    simpler (shrinkers move decisions toward ``lo``)."""

    def int(self, lo: int, hi: int) -> int: ...


class RandomChoices:
    """Decisions from a seeded ``random.Random``; every decision is recorded (for replay and shrinking)."""

    def __init__(self, rng: random.Random | int) -> None:
        self.rng = rng if isinstance(rng, random.Random) else random.Random(rng)
        self.record: list[int] = []

    def int(self, lo: int, hi: int) -> int:
        """A uniform integer in ``[lo, hi]`` (recorded as its offset from ``lo``)."""
        v = self.rng.randint(lo, hi)
        self.record.append(v - lo)
        return v


class ReplayChoices:
    """Replays recorded decisions (offsets from ``lo``); out-of-range values wrap, an exhausted list gives
    ``lo``. Any list is a valid graph, which is what makes shrinking by editing the list work."""

    def __init__(self, record: Sequence[int]) -> None:
        self.values = list(record)
        self.pos = 0
        self.record: list[int] = []

    def int(self, lo: int, hi: int) -> int:
        """The next recorded decision, mapped into ``[lo, hi]``."""
        raw = self.values[self.pos] if self.pos < len(self.values) else 0
        self.pos += 1
        off = raw % (hi - lo + 1)
        self.record.append(off)
        return lo + off


class HypothesisChoices:
    """Decisions drawn from a hypothesis ``st.data()`` object, so hypothesis shrinks failing graphs."""

    def __init__(self, data: Any) -> None:
        from hypothesis import strategies as st  # test dependency: imported only when used

        self._data = data
        self._st = st

    def int(self, lo: int, hi: int) -> int:
        """An integer in ``[lo, hi]`` drawn from hypothesis."""
        return self._data.draw(self._st.integers(lo, hi))


def choose(c: Choices, items: Sequence[Any]) -> Any:
    """One of ``items`` (the first is the simplest)."""
    return items[c.int(0, len(items) - 1)]


def flip(c: Choices, p: float) -> bool:
    """True with probability ``p`` (a shrunk decision gives False)."""
    return c.int(0, 99) >= 100 - round(100 * p)


def weighted(c: Choices, items: Sequence[tuple[Any, int]]) -> Any:
    """One of ``(item, weight)`` pairs by weight (the first item is the simplest)."""
    total = sum(w for _, w in items)
    k = c.int(0, total - 1)
    for item, w in items:
        if k < w:
            return item
        k -= w
    raise AssertionError("unreachable")
