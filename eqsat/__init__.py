"""eqsat: an ONNX tensor-graph superoptimizer by equality saturation.

``eqsat.optimize(model)`` imports an ONNX model into the IR, saturates an egglog e-graph with verified
TASO-style rewrites, extracts the cheapest acyclic graph with CP-SAT and exports a numerically checked ONNX
model. See README.md for the pipeline and the CLI.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def optimize(*args: Any, **kwargs: Any) -> Any:
    """Optimize an ONNX model; see :func:`eqsat.pipeline.optimize`."""
    from eqsat.pipeline import optimize as _optimize

    return _optimize(*args, **kwargs)


__all__ = ["optimize", "__version__"]
