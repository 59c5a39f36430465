"""Saturation limits and the budget that enforces them.

:class:`Limits` bounds a saturation (iterations, e-nodes, seconds, memory); :class:`StopReason` says which one
stopped it. :class:`Budget` turns the node, time and memory limits into e-node allowances during an iteration,
from the engine's measured costs per e-node, so that saturation (:mod:`eqsat.engine.saturation`) applies a rule
only when all its matches fit.
"""

from __future__ import annotations

import enum
import math
import numbers
import resource
import time
from dataclasses import dataclass
from typing import Any

from eqsat.engine.errors import LimitError

__all__ = ["Limits", "StopReason", "check_seconds", "Budget", "Allowance", "REASON_ORDER", "vm_bytes"]


@dataclass
class Limits:
    """Bounds on saturation. The engine stops at the first one reached, keeping the e-graph so far.

    All of them hold during an iteration, not only between iterations: a rule is applied only when all its
    matches fit in what is left of the node, memory and time budgets (see :func:`eqsat.engine.saturation.saturate`).
    Invalid values (negative, NaN, infinite, fractional counts) raise :class:`LimitError`, a ValueError naming
    the limit and what it allows.
    """

    iter_limit: int = 10
    node_limit: int = 50_000  # e-nodes; the input graph itself is never cut, even when it is larger
    time_limit: float = 30.0  # seconds of saturation, from the call to the serialized e-graph; 0 runs no iteration
    multi_iters: int = 1  # iterations in which two-output rules run (they feed on their own output)
    memory_limit_mb: int = 8192
    #: with a snapshot consumer, growth pauses once at this many e-nodes (when the e-graph starts below it and
    #: ``node_limit`` is above it): the iteration ends there, its e-graph is sent as a snapshot, asked for or not,
    #: and saturation goes on to ``node_limit``. An exact extractor can finish on an e-graph of this size while a
    #: larger one grows (:mod:`eqsat.pipeline.anytime`); None: no pause
    stage_nodes: int | None = None

    def __post_init__(self) -> None:
        self.iter_limit = _whole("iter_limit", self.iter_limit, 0, "iterations")
        self.node_limit = _whole("node_limit", self.node_limit, 1, "e-nodes")
        self.time_limit = check_seconds("time_limit", self.time_limit, allow_zero=True)
        self.multi_iters = _whole("multi_iters", self.multi_iters, 0, "iterations")
        self.memory_limit_mb = _whole("memory_limit_mb", self.memory_limit_mb, 1, "MiB")
        if self.stage_nodes is not None:
            self.stage_nodes = _whole("stage_nodes", self.stage_nodes, 1, "e-nodes")


def _whole(name: str, value: Any, minimum: int, unit: str) -> int:
    ok = (isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
          and value == int(value) and value >= minimum)
    if not ok:
        raise LimitError(f"{name} must be a whole number of {unit} >= {minimum}, got {value!r}")
    return int(value)


def check_seconds(name: str, value: Any, *, allow_zero: bool = False) -> float:
    """Return ``value`` as seconds, or raise :class:`LimitError` (a ValueError) naming ``name`` if it is not a
    finite number greater than zero (or equal to zero with ``allow_zero``)."""
    ok = (isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
          and (value >= 0 if allow_zero else value > 0))
    if not ok:
        kind = "a finite, non-negative" if allow_zero else "a finite, positive"
        raise LimitError(f"{name} must be {kind} number of seconds, got {value!r}")
    return float(value)


class StopReason(enum.StrEnum):
    """Why saturation stopped; ``str()`` is the readable form reports print ("node limit")."""

    SATURATED = "saturated"
    ITERATION_LIMIT = "iteration limit"
    NODE_LIMIT = "node limit"
    TIME_LIMIT = "time limit"
    MEMORY_LIMIT = "memory limit"




# which limit to name when several keep a rule from being applied (the e-graph being full comes first)
REASON_ORDER = [StopReason.NODE_LIMIT, StopReason.MEMORY_LIMIT, StopReason.TIME_LIMIT]

# The engine's costs per e-node, measured on 2 cores (ewadd chain under assoc/comm, shared-weight matmul chain),
# rounded up: adding one (rule actions, rebuild, shape rules) 20-40 us; serializing one at the end (egglog JSON,
# Python dicts, the pipe) 22-35 us; address space of the e-graph plus its serialization peak 1.5-3 KB. They turn
# the time and memory limits into e-node allowances, and time into the reserve kept for finishing.
_SECONDS_PER_NEW_ENODE = 40e-6
_SECONDS_PER_ENODE_OUT = 35e-6
_BYTES_PER_ENODE = 4096
_FINISH_SECONDS = 0.05  # fixed part of the last shape saturation, serialization and transfer
# With provenance (measured, same machine: built-in models, 0.5-28 k e-nodes) an e-node costs about 1.3x to add
# (the rows its rules write), 2-3x to serialize (2-3 rows per e-node go through egglog's JSON) and 1.4x the memory
_PROVENANCE_NEW, _PROVENANCE_OUT, _PROVENANCE_BYTES = 1.35, 2.0, 1.5



def vm_bytes() -> int | None:
    """Address space of this process: what RLIMIT_AS (the memory limit of the engine process) counts."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):  # pragma: no cover - platform without /proc
        return None



class Budget:
    """How many more e-nodes the node, time and memory limits allow, and which of them binds."""

    def __init__(self, limits: Limits, deadline: float, memory_base: int | None, provenance: bool = False) -> None:
        self.node_limit = limits.node_limit
        self.deadline = deadline
        self.memory_end = None if memory_base is None else memory_base + limits.memory_limit_mb * 1024 * 1024
        self.per_new = _SECONDS_PER_NEW_ENODE * (_PROVENANCE_NEW if provenance else 1)
        self.per_out = _SECONDS_PER_ENODE_OUT * (_PROVENANCE_OUT if provenance else 1)
        self.per_bytes = _BYTES_PER_ENODE * (_PROVENANCE_BYTES if provenance else 1)

    def finish_seconds(self, enodes: int) -> float:
        return _FINISH_SECONDS + self.per_out * enodes

    def out_of(self, enodes: int, pending: int) -> StopReason | None:
        """The limit already reached with ``enodes`` in the e-graph, ``pending`` of them without shapes yet."""
        if enodes >= self.node_limit:
            return StopReason.NODE_LIMIT
        if time.perf_counter() + self.finish_seconds(enodes) + self.per_new * pending >= self.deadline:
            return StopReason.TIME_LIMIT
        vm = vm_bytes()
        if self.memory_end is not None and vm is not None and vm + self.per_bytes * enodes >= self.memory_end:
            return StopReason.MEMORY_LIMIT
        return None

    def allowance(self, enodes: int, pending: int) -> Allowance:
        """E-nodes the next rules may add under each limit."""
        left = self.deadline - time.perf_counter() - self.finish_seconds(enodes) - self.per_new * pending
        out = {StopReason.NODE_LIMIT: self.node_limit - enodes,
               StopReason.TIME_LIMIT: int(left / (self.per_new + self.per_out))}
        vm = vm_bytes()
        if self.memory_end is not None and vm is not None:
            out[StopReason.MEMORY_LIMIT] = int((self.memory_end - vm) / self.per_bytes) - enodes
        return Allowance({k: max(0, v) for k, v in out.items()})


class Allowance(dict[StopReason, int]):
    """E-nodes allowed by each limit (:class:`StopReason` -> e-nodes)."""

    @property
    def nodes(self) -> int:
        return min(self.values())

    def blocking(self, need: int) -> StopReason:
        """The limit to name for holding back a rule that would add ``need`` e-nodes: the node limit if it
        alone forbids it, then memory, then time."""
        return next((r for r in REASON_ORDER if self.get(r, need) < need), StopReason.TIME_LIMIT)

