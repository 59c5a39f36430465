"""The graph IR: an immutable DAG of registry operators over named tensors, and the rewrite rules over it
(:mod:`eqsat.ir.rule`: the pattern language the engine compiles and :mod:`eqsat.rules` generates). Imports only
``eqsat.ops`` and ``eqsat.errors``; never onnx or egglog."""

from eqsat.ir.graph import CONSTANT_DTYPE, Graph, GraphError, Node, TensorInfo, make_node
from eqsat.ir.names import NameAllocator

__all__ = ["CONSTANT_DTYPE", "Graph", "GraphError", "NameAllocator", "Node", "TensorInfo", "make_node"]
