"""What the engine raises: :class:`EngineError` when egglog or the engine process fails, :class:`LimitError`
for a limit that means nothing."""

from __future__ import annotations

from eqsat.errors import EqsatError, UsageError

__all__ = ["EngineError", "LimitError"]


class EngineError(EqsatError, RuntimeError):
    """egglog rejected the program or the engine process failed in a way we cannot recover from."""


class LimitError(UsageError):
    """A limit that means nothing (negative, NaN, infinite, a fractional count); a ValueError naming it."""
