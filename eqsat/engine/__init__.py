"""The only door to egglog: compile IR graphs and rules to an egglog program (``compile``), saturate it under limits
(``limits``) in a child process (``saturation``; the e-graph a killed one leaves: ``fallback``), read egglog's
serialization back (``serialize``) as the typed, immutable e-graph (``egraph``), and read that e-graph in the IR's
terms (``readback``). Imports ``eqsat.ir``, ``eqsat.ops``, ``eqsat.ir.rule`` and ``eqsat.extract``'s e-graph
reader."""

from eqsat.engine.compile import SIBLING_MERGE
from eqsat.engine.egraph import EClass, EGraph, ENode
from eqsat.engine.errors import EngineError, LimitError
from eqsat.engine.limits import Limits, StopReason, check_seconds
from eqsat.engine.readback import (
    InputTerms,
    class_precisions,
    graph_from_selection,
    input_terms,
    node_cost_keys,
    relocate_selection,
    selection_to_graph,
    tensor_names_by_class,
    tensors_by_class,
    weight_only_classes,
)
from eqsat.engine.saturation import EGGLOG_VERSION, IterationStats, SaturationResult, Snapshot, saturate

__all__ = ["EGGLOG_VERSION", "EClass", "EGraph", "ENode", "EngineError", "InputTerms", "IterationStats",
           "LimitError", "Limits", "SIBLING_MERGE", "SaturationResult", "Snapshot", "StopReason", "check_seconds",
           "class_precisions",
           "graph_from_selection", "input_terms", "node_cost_keys", "relocate_selection", "saturate",
           "selection_to_graph", "tensor_names_by_class", "tensors_by_class", "weight_only_classes"]
