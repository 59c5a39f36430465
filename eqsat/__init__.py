"""eqsat: an ONNX tensor-graph superoptimizer by equality saturation.

``eqsat.optimize(model)`` imports an ONNX model into the IR, saturates an egglog e-graph with verified
TASO-style rewrites, extracts the cheapest acyclic graph with CP-SAT and exports a numerically checked ONNX
model. ``eqsat.compare(model)`` runs it against TASO's backtracking and OCGGS's sampling search on the same
rules and costs. See README.md for the pipeline and the CLI.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def optimize(*args: Any, **kwargs: Any) -> Any:
    """Optimize an ONNX model; see :func:`eqsat.pipeline.optimize` and :class:`eqsat.pipeline.OptimizeOptions`."""
    from eqsat.pipeline.run import optimize as _optimize  # deferred: `import eqsat` stays light (no ortools, egglog)

    return _optimize(*args, **kwargs)


def compare(*args: Any, **kwargs: Any) -> Any:
    """Compare eqsat with TASO's backtracking and OCGGS's sampling search on one model (same rules, costs and
    budget); see :func:`eqsat.search.comparison.compare`."""
    from eqsat.search.comparison import compare as _compare

    return _compare(*args, **kwargs)


__all__ = ["compare", "optimize", "__version__"]
