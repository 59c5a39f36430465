"""Extraction of a cheapest acyclic term DAG from a serialized e-graph (extraction-gym JSON). Imports nothing of
eqsat: it knows nothing of egglog or ONNX.

Public API::

    eg = load_egraph("egraph.json")            # or an already-parsed dict
    ext = extract(eg)                          # CP-SAT (default) or extract(eg, solver="greedy")
    ext.selection, ext.cost, ext.status        # class -> node, DAG cost, "optimal"/"feasible"/"greedy"
    extract_top_k(eg, 4)                       # up to 4 distinct near-optimal extractions, cheapest first
    extract_cpsat_parallel(eg, ParallelCost(alpha=0.25, branches=2))  # total + alpha * critical path
    validate_selection(eg, ext.selection)      # independent check; returns the DAG cost
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .cpsat import extract_cpsat
from .egraph_json import SerializedEGraph, load_egraph
from .greedy import extract_greedy
from .parallel import ParallelCost, ParallelExtraction, extract_cpsat_parallel, parallel_cost_of
from .result import Extraction, NoFiniteChoice
from .topk import extract_top_k
from .validate import InvalidExtraction, selection_critical_path, validate_selection

__all__ = [
    "Extraction",
    "InvalidExtraction",
    "NoFiniteChoice",
    "ParallelCost",
    "ParallelExtraction",
    "EXACT_SOLVERS",
    "SOLVERS",
    "SerializedEGraph",
    "extract",
    "extract_cpsat",
    "extract_cpsat_parallel",
    "extract_greedy",
    "extract_top_k",
    "load_egraph",
    "parallel_cost_of",
    "selection_critical_path",
    "validate_selection",
]

#: The extractors by name, each with what it is (its description on any command line that offers the choice)
SOLVERS = {"cpsat": "OR-Tools CP-SAT: optimal, or the best found within the time limit",
           "greedy": "a DAG-aware greedy heuristic: fast, not guaranteed optimal"}
#: The extractors that work to a time limit towards a proved optimum (the others answer at once)
EXACT_SOLVERS = frozenset({"cpsat"})
_CPSAT_OPTIONS = frozenset({"time_limit", "num_workers", "random_seed", "log_progress", "start", "progress"})


def extract(eg: SerializedEGraph | str | Path | Mapping[str, Any], *, solver: str = "cpsat",
            **kw: Any) -> Extraction:
    """Extract a cheapest acyclic DAG with the named solver (``"cpsat"`` or ``"greedy"``).

    ``kw`` are passed to :func:`extract_cpsat` (``time_limit``, ``num_workers``, ``random_seed``,
    ``log_progress``, ``start``, ``progress``: a callable that gets one-line progress messages); the greedy
    extractor takes ``start`` (a known valid selection the answer is never worse than) and ignores the others.
    ``eg`` may also be a path or a parsed JSON dict, which is loaded first.

    Raises:
        ValueError: unknown solver; TypeError: unknown option; NoFiniteChoice: no extraction exists.
    """
    unknown = set(kw) - _CPSAT_OPTIONS
    if unknown:
        raise TypeError(f"unknown extraction option(s): {', '.join(sorted(unknown))}")
    if not isinstance(eg, SerializedEGraph):
        eg = load_egraph(eg)
    if solver == "cpsat":
        return extract_cpsat(eg, **kw)
    if solver == "greedy":
        return extract_greedy(eg, start=kw.get("start"))
    raise ValueError(f"unknown extraction solver {solver!r}; choose one of {', '.join(SOLVERS)}")
