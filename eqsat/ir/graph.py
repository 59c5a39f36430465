"""The graph IR: an immutable DAG of registry operators over named tensors.

A :class:`Graph` has graph inputs (name, shape, dtype), weights (constant arrays), nodes (each computes one
named tensor with a registry operator) and an ordered list of output tensor names. Shapes and dtypes are
derived from the operator registry; :meth:`Graph.validate` checks every invariant. The passes over graphs (the
import's folds, flattening) are :mod:`eqsat.ir.passes`. This module never imports onnx or egglog.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from eqsat import ops
from eqsat.ops import OpError, ParamValue, Shape


class GraphError(ValueError):
    """The graph breaks an IR invariant (dangling name, cycle, shape mismatch, ...)."""


@dataclass(frozen=True)
class TensorInfo:
    """A graph input: name, static shape and numpy dtype name."""

    name: str
    shape: Shape
    dtype: str = "float32"


@dataclass(frozen=True)
class Node:
    """One operator application computing the tensor ``output``."""

    op: str
    params: tuple[tuple[str, ParamValue], ...]
    inputs: tuple[str, ...]
    output: str

    @property
    def p(self) -> dict[str, Any]:
        """Parameters as a dict."""
        return dict(self.params)

    @property
    def spec(self) -> ops.OpSpec:
        """The registry entry of this node's operator."""
        return ops.get(self.op)

    @property
    def is_opaque(self) -> bool:
        """Whether the node stands for an ONNX node the registry does not describe (``OpSpec.opaque``): its
        parameters carry that node, its dtype and output shape."""
        return ops.is_opaque(self.op)


def make_node(op: str, params: Mapping[str, Any], inputs: Sequence[str], output: str) -> Node:
    """Build a node with parameters checked and normalised by the registry."""
    spec = ops.get(op)
    p = spec.normalize(dict(params))
    return Node(op, spec.param_tuple(p), tuple(inputs), output)


@dataclass(frozen=True)
class Alternative:
    """Another computation of a tensor of a graph, fully equivalent, that a tool outside the rules found for this
    graph alone (PET's corrected mutants, :mod:`eqsat.rules.pet`): ``nodes`` read the graph's tensors and each
    other, the last computes ``tensor``; ``name`` is the rule name the e-graph's provenance gives it."""

    tensor: str
    nodes: tuple[Node, ...]
    name: str


OpaqueEvaluator = Callable[[Node, list[np.ndarray]], np.ndarray]


@dataclass(frozen=True)
class Graph:
    """An immutable tensor DAG. Nodes are kept in a topological order."""

    inputs: tuple[TensorInfo, ...]
    weights: Mapping[str, np.ndarray]
    nodes: tuple[Node, ...]
    outputs: tuple[str, ...]
    name: str = "graph"
    meta: Mapping[str, Any] = field(default_factory=dict)  # e.g. opset, producer, opaque-node protos

    def __post_init__(self) -> None:
        for arr in self.weights.values():
            arr.setflags(write=False)
        object.__setattr__(self, "nodes", tuple(_toposort(self.nodes, self._leaf_names())))

    @classmethod
    def from_sorted(cls, inputs: tuple[TensorInfo, ...], weights: Mapping[str, np.ndarray], nodes: tuple[Node, ...],
                    outputs: tuple[str, ...], name: str = "graph", meta: Mapping[str, Any] | None = None,
                    shapes: dict[str, Shape] | None = None) -> Graph:
        """A graph whose ``nodes`` the caller guarantees to be in topological order (and, if given, ``shapes``
        to be every tensor's shape): no sort, no shape inference. For searches that derive thousands of graphs
        from one by local rewrites; anything else should use the constructor."""
        g = object.__new__(cls)
        for k, v in (("inputs", inputs), ("weights", weights), ("nodes", nodes), ("outputs", outputs),
                     ("name", name), ("meta", {} if meta is None else meta)):
            object.__setattr__(g, k, v)
        if shapes is not None:
            g.__dict__["shapes"] = shapes
        return g

    def _leaf_names(self) -> set[str]:
        return {i.name for i in self.inputs} | set(self.weights)

    # -- derived facts --------------------------------------------------------------------------------------
    @cached_property
    def producers(self) -> dict[str, Node]:
        """Tensor name -> the node computing it."""
        return {n.output: n for n in self.nodes}

    @cached_property
    def consumers(self) -> dict[str, list[Node]]:
        """Tensor name -> nodes reading it."""
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                out.setdefault(i, []).append(n)
        return out

    @property
    def weight_bytes(self) -> int:
        """Bytes of all weights: what one run of the model reads besides its activations."""
        return sum(int(w.nbytes) for w in self.weights.values())

    @cached_property
    def shapes(self) -> dict[str, Shape]:
        """Static shape of every tensor (inputs, weights, node outputs)."""
        shapes: dict[str, Shape] = {i.name: tuple(i.shape) for i in self.inputs}
        shapes.update({k: tuple(v.shape) for k, v in self.weights.items()})
        for n in self.nodes:
            try:
                shapes[n.output] = n.spec.shape(n.p, [shapes[i] for i in n.inputs])
            except KeyError as e:
                raise GraphError(f"node {n.output!r} ({n.op}) reads undefined tensor {e.args[0]!r}") from None
            except OpError as e:
                raise GraphError(f"node {n.output!r}: {e}") from None
        return shapes

    @cached_property
    def dtypes(self) -> dict[str, str]:
        """numpy dtype name of every tensor.

        An opaque node carries its dtype in its parameters; a registry op keeps its first input's dtype; a
        registry op without inputs (a constant such as ``const_pool``) is float32, the dtype it exports as.
        """
        dt: dict[str, str] = {i.name: i.dtype for i in self.inputs}
        dt.update({k: str(v.dtype) for k, v in self.weights.items()})
        for n in self.nodes:
            dt[n.output] = _node_dtype(n, dt)
        return dt

    def validate(self) -> Graph:
        """Check every invariant; raise :class:`GraphError` naming the problem. Returns self."""
        names = [i.name for i in self.inputs] + list(self.weights) + [n.output for n in self.nodes]
        dup = [k for k, c in Counter(names).items() if c > 1]
        if dup:
            raise GraphError(f"tensor names defined more than once: {dup[:5]}")
        for n in self.nodes:
            spec = ops.get(n.op)
            spec.normalize(n.p)
            try:
                spec.check_arity(len(n.inputs))
            except OpError as e:
                raise GraphError(f"node {n.output!r}: {e}") from None
            if not n.is_opaque:
                bad = [i for i in n.inputs if self.dtypes.get(i) != self.dtypes.get(n.inputs[0])]
                if bad:
                    raise GraphError(f"node {n.output!r} ({n.op}) mixes dtypes")
        missing = [o for o in self.outputs if o not in self.shapes]
        if missing:
            raise GraphError(f"graph outputs not computed by the graph: {missing}")
        if not self.outputs:
            raise GraphError("graph has no outputs")
        return self

    def op_histogram(self) -> Counter[str]:
        """Count of nodes per operator (opaque nodes counted by their ONNX op type)."""
        return Counter(n.p["op_type"] if n.is_opaque else n.op for n in self.nodes)

    def live(self) -> Graph:
        """The graph without nodes and weights that no output depends on."""
        needed: set[str] = set(self.outputs)
        keep: list[Node] = []
        for n in reversed(self.nodes):
            if n.output in needed:
                keep.append(n)
                needed.update(n.inputs)
        weights = {k: v for k, v in self.weights.items() if k in needed}
        return Graph(self.inputs, weights, tuple(reversed(keep)), self.outputs, self.name, self.meta)

    # -- evaluation -----------------------------------------------------------------------------------------
    def evaluate(self, feeds: Mapping[str, np.ndarray], opaque: OpaqueEvaluator | None = None) -> list[np.ndarray]:
        """Run the graph with the registry's numpy semantics; returns the outputs in order."""
        env: dict[str, np.ndarray] = dict(self.weights)
        for i in self.inputs:
            if i.name not in feeds:
                raise GraphError(f"missing value for graph input {i.name!r}")
            env[i.name] = np.asarray(feeds[i.name])
        for n in self.nodes:
            args = [env[i] for i in n.inputs]
            if n.is_opaque:
                if opaque is None:
                    raise GraphError(f"graph has opaque node {n.output!r} ({n.p['op_type']}): pass an evaluator")
                env[n.output] = opaque(n, args)
            else:
                env[n.output] = n.spec.evaluate(n.p, args)
        return [env[o] for o in self.outputs]


def computed_from_weights(op: str, inputs: Iterable[str], weight_only: Container[str]) -> bool:
    """Whether a node computes a weight-only tensor, given the ``weight_only`` tensors (or e-classes) so far: any
    operator but the opaque one whose inputs are all weight-only (none, for a constant such as ``const_pool``).

    A tensor is weight-only when it is a weight or such a node computes it: a constant at run time, which export
    precomputes and cost models price at nothing. The one definition: the IR (export, the searches' costs) and
    the e-graph (:func:`eqsat.engine.readback.weight_only_classes`) use it.
    """
    return not ops.is_opaque(op) and all(i in weight_only for i in inputs)


def node_hashes(graph: Graph) -> dict[str, int]:
    """A structural hash per tensor, independent of the names of computed tensors (leaves hash by name)."""
    h: dict[str, int] = {}
    for n in graph.nodes:
        h[n.output] = hash((n.op, n.params, tuple(h.get(i, hash(i)) for i in n.inputs)))
    return h


def graph_hash(graph: Graph) -> int:
    """A structural hash of a graph: equal for graphs that differ only in the names of computed tensors."""
    h = node_hashes(graph)
    return hash((tuple(sorted(h.values())), tuple(h.get(o, hash(o)) for o in graph.outputs)))


#: dtype of registry operators without inputs (the constants of :mod:`eqsat.ops`, exported as float32)
CONSTANT_DTYPE = "float32"


def _node_dtype(n: Node, known: Mapping[str, str]) -> str:
    if n.is_opaque:
        return str(n.p["dtype"])
    if not n.inputs:
        return CONSTANT_DTYPE
    try:
        return known[n.inputs[0]]
    except KeyError:
        raise GraphError(f"node {n.output!r} ({n.op}) reads undefined tensor {n.inputs[0]!r}") from None


def _toposort(nodes: Iterable[Node], leaves: set[str]) -> list[Node]:
    nodes = list(nodes)
    by_out: dict[str, Node] = {}
    for n in nodes:
        if n.output in by_out:
            raise GraphError(f"tensor {n.output!r} is computed by more than one node")
        by_out[n.output] = n
    order: list[Node] = []
    state: dict[str, int] = {}  # 1 = on stack, 2 = done
    for root in nodes:
        if state.get(root.output):
            continue
        stack: list[tuple[Node, int]] = [(root, 0)]
        state[root.output] = 1
        while stack:
            node, k = stack.pop()
            if k < len(node.inputs):
                stack.append((node, k + 1))
                name = node.inputs[k]
                child = by_out.get(name)
                if child is None:
                    if name not in leaves:
                        raise GraphError(f"node {node.output!r} ({node.op}) reads undefined tensor {name!r}")
                    continue
                s = state.get(child.output)
                if s == 1:
                    raise GraphError(f"graph has a cycle through {child.output!r}")
                if s is None:
                    state[child.output] = 1
                    stack.append((child, 0))
            else:
                state[node.output] = 2
                order.append(node)
    return order
