"""``optimize``: ONNX -> IR -> e-graph -> costs -> extraction -> IR -> ONNX, and the numeric check against the
original, as a table of stages (:mod:`eqsat.pipeline.run`), each a function from the records it reads to the one
it makes (:mod:`eqsat.pipeline.stages`, :mod:`eqsat.pipeline.records`), under one :class:`OptimizeOptions`
(:mod:`eqsat.pipeline.options`; the solver, target and rule sets it names: :mod:`eqsat.pipeline.choices`);
:mod:`eqsat.pipeline.result` is what it returns and :mod:`eqsat.pipeline.candidates` the end-to-end timing of the
candidates. Imports onnx_io, engine, costs, extract, inspect, ir, ops and rules; nothing below imports it."""

from eqsat.pipeline.check import NumericCheckUnavailable, NumericMismatch, NumericReport, check_equal
from eqsat.pipeline.choices import default_rules
from eqsat.pipeline.options import OptimizeKeywords, OptimizeOptions
from eqsat.pipeline.result import CandidateTiming, OptimizeResult
from eqsat.pipeline.run import optimize

__all__ = ["CandidateTiming", "NumericCheckUnavailable", "NumericMismatch", "NumericReport", "OptimizeKeywords",
           "OptimizeOptions", "OptimizeResult", "check_equal", "default_rules", "optimize"]
