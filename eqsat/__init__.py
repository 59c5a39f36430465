"""eqsat: an ONNX tensor-graph superoptimizer by equality saturation.

``eqsat.optimize(model)`` imports an ONNX model into the IR, saturates an egglog e-graph with verified
TASO-style rewrites, extracts the cheapest acyclic graph with CP-SAT and exports a numerically checked ONNX
model. ``eqsat.compare(model)`` runs it against TASO's backtracking and OCGGS's sampling search on the same
rules and costs. See README.md for the pipeline and the CLI.

Both are the functions themselves (:func:`eqsat.pipeline.optimize`, :func:`eqsat.search.comparison.compare`),
imported on first use so that ``import eqsat`` stays light (no ortools, egglog or onnxruntime).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:  # what editors and type checkers see: the functions and their signatures
    from eqsat.pipeline.many import optimize_many
    from eqsat.pipeline.run import optimize
    from eqsat.search.comparison import compare

def __getattr__(name: str) -> Any:
    if name == "optimize":
        from eqsat.pipeline.run import optimize  # deferred: `import eqsat` stays light

        return optimize
    if name == "optimize_many":
        from eqsat.pipeline.many import optimize_many  # deferred, as optimize

        return optimize_many
    if name == "compare":
        from eqsat.search.comparison import compare  # deferred, as optimize

        return compare
    raise AttributeError(f"module 'eqsat' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), "optimize", "optimize_many", "compare"])


__all__ = ["compare", "optimize", "optimize_many", "__version__"]
