"""The only door to egglog: compile IR graphs and rules to an egglog program, saturate it under limits in a
child process, and return the typed, immutable e-graph. Imports ``eqsat.ir``, ``eqsat.ops``, ``eqsat.rules.rule``."""

from eqsat.engine.egraph import EClass, EGraph, ENode
from eqsat.engine.saturation import (
    EGGLOG_VERSION,
    EngineError,
    IterationStats,
    LimitError,
    Limits,
    SaturationResult,
    StopReason,
    saturate,
)

__all__ = ["EGGLOG_VERSION", "EClass", "EGraph", "ENode", "EngineError", "IterationStats", "LimitError", "Limits",
           "SaturationResult", "StopReason", "saturate"]
