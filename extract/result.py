"""Result type shared by the extractors, and the error raised when a needed class has no finite choice."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Extraction", "NoFiniteChoice", "STATUSES"]

STATUSES = ("optimal", "feasible", "greedy", "start")


class NoFiniteChoice(ValueError):
    """A class needed from a root has no acyclic choice (each of its nodes needs itself or such a class)."""

    def __init__(self, class_id: str, message: str | None = None) -> None:
        self.class_id = class_id
        super().__init__(message or f"e-class {class_id!r} has no finite (acyclic) choice: every e-node "
                                    "of it depends on a cycle or on a class without one")


@dataclass(frozen=True)
class Extraction:
    """An acyclic extraction: one e-node per e-class reachable from the roots.

    Attributes:
        selection: class id -> chosen node id, only for classes reachable from the roots.
        cost: DAG cost (sum of the costs of the distinct chosen nodes), recomputed by the validator.
        status: ``"optimal"`` (proven), ``"feasible"`` (solver solution, not proven), ``"greedy"`` (the
            greedy DAG heuristic's selection, e.g. when the solver found nothing better) or ``"start"`` (the
            caller's start selection, cheaper than greedy's and not improved on).
        bound: a lower bound on the optimal DAG cost, when a solver provided one.
        gap: relative gap ``(cost - bound) / |cost|`` when ``bound`` is known.
        seconds: wall time of the whole extraction (including greedy and model building).
        solver: which extractor produced the result (``"cpsat"`` or ``"greedy"``).
        greedy_cost: the greedy DAG cost, for comparison.
        found_after: when the selection returned was found, in seconds into the call (CP-SAT: when the solver
            reported that solution; None when the extractor does not say, e.g. greedy, or the start returned).
    """

    selection: dict[str, str]
    cost: float
    status: str
    bound: float | None
    gap: float | None
    seconds: float
    solver: str
    greedy_cost: float | None
    found_after: float | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
