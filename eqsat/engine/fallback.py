"""The e-graph a killed engine process leaves behind: when the process saves it after an iteration
(:class:`Fallback`), and how the parent reads it back (:func:`read_fallback`); see
:func:`eqsat.engine.saturation.saturate`."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from eqsat.engine.limits import Limits

__all__ = ["FALLBACK_FREE", "FALLBACK_GROWTH", "FALLBACK_SHARE", "Fallback", "kill_at", "read_fallback"]


def kill_at(deadline: float, limits: Limits) -> float:
    """When the parent kills an engine process still running: past the deadline by a margin (an estimate was off,
    or one rule's search ran long). The caller's later stages absorb the margin."""
    return deadline + 0.5 + 0.2 * limits.time_limit


#: the engine process saves its e-graph after an iteration when the next one, were it this many times as long,
#: would run into the kill ...
FALLBACK_GROWTH = 10.0
#: ... or when saving stays within this share of the time so far (saving costs about a third of an iteration:
#: 0.09 s after a 0.25 s iteration of NasRNN at 27 k e-nodes) ...
FALLBACK_SHARE = 0.1
#: ... or when it should take less than this many seconds (a small e-graph)
FALLBACK_FREE = 0.005


@dataclass
class Fallback:
    """The engine process's side of the fallback: after an iteration that no snapshot was asked for, it may
    save the e-graph to ``path`` (the iteration's number on the first line, then the JSON text; replaced whole,
    so the file is always one complete e-graph) for the parent to read if it has to kill the process.

    Serializing costs about a third of an iteration, so it is done only when :meth:`due`: when the next
    iteration, were it :data:`FALLBACK_GROWTH` times as long as this one, would still be running at the kill
    (a kill comes from one search that runs past the deadline by the whole margin: a sudden blow-up, or an
    iteration begun near the deadline; so the fallback is the last complete iteration unless the one killed ran
    over ten times as long as it), or when it is cheap: the time spent saving stays within
    :data:`FALLBACK_SHARE` of the time since :func:`~eqsat.engine.saturation.saturate` was called, or this
    save should take less than :data:`FALLBACK_FREE`."""

    path: Path
    kill_at: float
    started: float  # when saturate was called
    spent: float = 0.0  # seconds spent saving so far
    per_enode: float = 0.0  # seconds per e-node of the last save

    def due(self, seconds: float, enodes: int) -> bool:
        """Whether to save the e-graph of ``enodes`` e-nodes after an iteration of ``seconds``."""
        now = time.perf_counter()
        if now + FALLBACK_GROWTH * seconds >= self.kill_at:
            return True
        estimate = self.per_enode * enodes
        return estimate <= FALLBACK_FREE or self.spent + estimate <= FALLBACK_SHARE * (now - self.started)

    def save(self, iteration: int, enodes: int, serialize: Callable[[], str]) -> str:
        """Serialize (``serialize()``) and save the e-graph of ``iteration``; return the text."""
        t = time.perf_counter()
        text = serialize()
        part = self.path.with_suffix(".part")
        part.write_text(f"{iteration}\n{text}", encoding="utf-8")
        os.replace(part, self.path)
        took = time.perf_counter() - t
        self.spent += took
        self.per_enode = took / max(1, enodes)
        return text


def read_fallback(path: Path) -> tuple[int, str] | None:
    """The iteration and e-graph text the engine process last saved (:class:`Fallback`), if it saved one."""
    try:
        head, text = path.read_text(encoding="utf-8").split("\n", 1)
        return int(head), text
    except (OSError, ValueError):
        return None
