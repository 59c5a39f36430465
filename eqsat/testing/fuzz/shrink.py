"""Shrinking a failing decision list: drop whole motifs, then chunks of decisions, then lower single
decisions, as long as the graph replayed from the list still fails. Any decision list replays to a valid
graph (:class:`~eqsat.testing.fuzz.choices.ReplayChoices`), which is what makes editing the list work."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def shrink(record: list[int], fails: Callable[[list[int]], bool], *, budget: int = 200,
           marks: Sequence[int] = ()) -> list[int]:
    """A shorter/simpler decision list that still ``fails``, within ``budget`` calls of ``fails``.

    First whole motifs are dropped (``marks``: where each motif's decisions start, see
    :attr:`FuzzGraph.marks`; decision 1 is the number of motifs), then chunks of decisions are deleted and
    single decisions lowered.
    """
    best = list(record)
    calls = 0

    def attempt(cand: list[int]) -> bool:
        nonlocal best, calls
        if calls >= budget:
            return False
        calls += 1
        if fails(cand):
            best = cand
            return True
        return False

    ends = [*marks[1:], None]
    for start, end in reversed(list(zip(marks, ends, strict=True))):
        tail = best[end:] if end is not None and end <= len(best) else []
        if len(best) > 1 and best[1] > 0:
            attempt(best[:1] + [best[1] - 1] + best[2:start] + tail)

    improved = True
    while improved and calls < budget:
        improved = False
        for size in (16, 8, 4, 2, 1):
            i = len(best) - size
            while i >= 0 and calls < budget:
                if attempt(best[:i] + best[i + size:]):
                    improved = True
                i -= size if size > 1 else 1
                i = min(i, len(best) - size)
        for i in range(len(best)):
            if calls >= budget:
                break
            for v in (0, best[i] // 2):
                if v < best[i] and attempt(best[:i] + [v] + best[i + 1:]):
                    improved = True
                    break
    return best
