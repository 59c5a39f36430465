"""``optimize``: ONNX -> IR -> e-graph -> costs -> extraction -> IR -> ONNX, and the numeric check against the
original. Imports every stage's package (onnx_io, engine, costs, extract, inspect); nothing below imports it."""

from eqsat.pipeline.check import NumericCheckUnavailable, NumericReport, check_equal
from eqsat.pipeline.run import NumericMismatch, OptimizeResult, default_rules, graph_cost, optimize

__all__ = ["NumericCheckUnavailable", "NumericMismatch", "NumericReport", "OptimizeResult", "check_equal",
           "default_rules", "graph_cost", "optimize"]
