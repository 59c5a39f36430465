"""Fresh names for tensors, weights and nodes: one :class:`NameAllocator` per graph or model being written.

Two schemes, as the callers have always named things (tests and dumps compare names):

* by default a hint is used as it is when free, else with the first free suffix ``{sep}{k}``, ``k`` counting
  from ``start`` (``t``, ``t_1``, ``t_2``, ... with the defaults);
* ``numbered``: every name gets the next number of one counter shared by all hints (``{hint}{sep}{n}``, ``n``
  from ``start``), skipping names already taken (``_r_0``, ``x_cat_1``, ...).
"""

from __future__ import annotations

from collections.abc import Container, Iterable

__all__ = ["NameAllocator"]


class NameAllocator:
    """Unique names: :meth:`fresh` turns a hint into a name not taken yet, and takes it.

    Args:
        taken: names already in use (copied).
        sep: what joins a hint and its number.
        start: the first number tried (per hint; with ``numbered``, the counter's first value).
        numbered: always number names, from one counter shared by all hints (see the module docstring).
        also: more names in use, looked up at each call (containers the caller keeps filling, such as the
            weights of a model being imported).
    """

    def __init__(self, taken: Iterable[str] = (), *, sep: str = "_", start: int = 1, numbered: bool = False,
                 also: Iterable[Container[str]] = ()) -> None:
        self.taken: set[str] = set(taken)
        self._also = tuple(also)
        self._sep = sep
        self._start = start
        self._numbered = numbered
        self._next = start

    def fresh(self, hint: str) -> str:
        """A name from ``hint`` that is not taken; it is taken from now on."""
        if self._numbered:
            name = f"{hint}{self._sep}{self._next}"
            self._next += 1
            while name in self:
                name = f"{hint}{self._sep}{self._next}"
                self._next += 1
        else:
            name, k = hint, self._start
            while name in self:
                name = f"{hint}{self._sep}{k}"
                k += 1
        self.taken.add(name)
        return name

    def take(self, name: str) -> None:
        """Mark ``name`` as in use (a name chosen elsewhere, such as a graph output's)."""
        self.taken.add(name)

    def __contains__(self, name: object) -> bool:
        return name in self.taken or any(name in c for c in self._also)
