"""What saturation reports: each iteration's statistics, the snapshots of the e-graph while it grows, and the
saturated e-graph with the run's report (:func:`eqsat.engine.saturation.saturate` makes them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from eqsat.engine.egraph import EGraph
from eqsat.engine.limits import StopReason

__all__ = ["IterationStats", "Snapshot", "SaturationResult"]


@dataclass
class IterationStats:
    """What one saturation iteration did (a last iteration cut short by a limit counts, with what it did)."""

    iteration: int
    enodes: int
    eclasses: int
    seconds: float
    matches: dict[str, int]


@dataclass(frozen=True)
class Snapshot:
    """The e-graph as it stood after one iteration, while saturation goes on (see ``on_snapshot`` of
    :func:`eqsat.engine.saturation.saturate`).

    Attributes:
        iteration: the iteration just ended (0: the input graph with its shapes).
        egraph: the e-graph then; every term of it is in each later e-graph (e-graphs only grow and merge).
        seconds: when it was taken, in seconds since :func:`~eqsat.engine.saturation.saturate` was called.
        tensor_of_global: the egglog globals of the input graph's tensors -> tensor names (as
            :attr:`SaturationResult.tensor_of_global`).
        stage: whether it is the e-graph at ``Limits.stage_nodes``, where growth paused.
    """

    iteration: int
    egraph: EGraph
    seconds: float
    tensor_of_global: dict[str, str]
    stage: bool = False


@dataclass
class SaturationResult:
    """The saturated e-graph (:class:`~eqsat.engine.egraph.EGraph`) with the run report."""

    egraph: EGraph
    iterations: list[IterationStats]
    stop_reason: StopReason
    seconds: float
    program: str = ""
    tensor_of_global: dict[str, str] = field(default_factory=dict)

    @property
    def rules_fired(self) -> dict[str, int]:
        """Total matches per rule over all iterations (shape bookkeeping excluded)."""
        out: dict[str, int] = {}
        for it in self.iterations:
            for k, v in it.matches.items():
                if not k.startswith("shape-") and k != "merge-checked" and v:
                    out[k] = out.get(k, 0) + v
        return out
