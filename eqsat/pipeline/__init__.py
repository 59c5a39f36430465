"""``optimize``: ONNX -> IR -> e-graph -> costs -> extraction -> IR -> ONNX, and the numeric check against the
original, as a list of stages passing one state (:mod:`eqsat.pipeline.stages`) under one
:class:`OptimizeOptions` (:mod:`eqsat.pipeline.options`); :mod:`eqsat.pipeline.result` is what it returns and
:mod:`eqsat.pipeline.candidates` the end-to-end timing of the candidates. Imports onnx_io, engine, costs, extract,
inspect, ir, ops and rules; nothing below imports it."""

from eqsat.pipeline.check import NumericCheckUnavailable, NumericMismatch, NumericReport, check_equal
from eqsat.pipeline.options import OptimizeOptions, default_rules
from eqsat.pipeline.result import CandidateTiming, OptimizeResult
from eqsat.pipeline.run import optimize

__all__ = ["CandidateTiming", "NumericCheckUnavailable", "NumericMismatch", "NumericReport", "OptimizeOptions",
           "OptimizeResult", "check_equal", "default_rules", "optimize"]
