"""The engine's saturated e-graph as one immutable, typed object.

:func:`eqsat.engine.serialize.clean_serialized` makes it from egglog's serialization (the only place that reads
egglog's JSON); :func:`eqsat.engine.saturation.saturate` returns it (``SaturationResult.egraph``), and the cost
step, the extractors, the read-back of an extraction and the e-graph dump read it. It extends the extraction's
:class:`eqsat.extract.SerializedEGraph` with what the cost models and the IR need: operator parameters, e-class
types and shapes, the egglog globals (tensors of the input graph) each e-class holds and, when the engine recorded
it, which rules built each e-node. :meth:`EGraph.to_serialized` gives the extractors' view, :meth:`EGraph.to_json`
the extraction-gym JSON (nodes' ``children`` are node ids there: the first e-node of each child e-class).

Costs are set by :meth:`EGraph.with_costs`, which returns a new object."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, NamedTuple

from eqsat import ops
from eqsat.extract.egraph_json import SerializedEGraph, parse_egraph

__all__ = ["ENode", "EClass", "EGraph"]


class ENode(NamedTuple):
    """One e-node (a named tuple: cheap to send between processes).

    Attributes:
        id: the node id (egglog's, e.g. ``function-3-matmul``).
        op: the registry operator, ``Input``/``Weight`` for leaves, ``TNil``/``TCons`` for opaque nodes' input
            lists.
        params: named, decoded parameters as ``(name, value)`` pairs, in the operator's order (``p`` gives a
            dict); integer tuples are tuples.
        children: child e-class ids, in argument order (duplicates kept).
        eclass: the e-class id.
        cost: the node's cost (0 until :meth:`EGraph.with_costs` sets it).
        rules: with provenance, (rule, first iteration in which that rule built the node), ordered by iteration
            then name; empty otherwise.
    """

    id: str
    op: str
    params: tuple[tuple[str, Any], ...]
    children: tuple[str, ...]
    eclass: str
    cost: float = 0.0
    rules: tuple[tuple[str, int], ...] = ()

    @property
    def p(self) -> dict[str, Any]:
        """Parameters as a dict."""
        return dict(self.params)

    @property
    def is_opaque(self) -> bool:
        """Whether the node holds an opaque node's place (``OpSpec.opaque``): its parameters are that node's key and
        output index, its one child the list of its inputs."""
        return ops.is_opaque(self.op)


class EClass(NamedTuple):
    """One e-class.

    Attributes:
        id: the e-class id.
        type: ``"T"`` (a tensor) or ``"TList"`` (an opaque node's input list).
        shape: the tensor's shape; None for lists.
        lets: the egglog globals (``$g0_`` ...) naming this e-class, as egglog's serializer lists them.
    """

    id: str
    type: str
    shape: tuple[int, ...] | None = None
    lets: tuple[str, ...] = ()


def sorted_rules(rules: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    """Rule -> iteration as pairs ordered by iteration, then name."""
    return tuple(sorted(((str(r), int(k)) for r, k in rules.items()), key=lambda rk: (rk[1], rk[0])))


@dataclass(frozen=True)
class EGraph:
    """A saturated e-graph of tensor and list e-classes (see the module docstring).

    Attributes:
        nodes: the e-nodes, in the serializer's order.
        classes: the e-classes, in order of their first e-node.
        roots: the root e-class ids (the graph's outputs, in order; an e-class may repeat).
        provenance: whether the nodes carry ``rules`` (the engine recorded provenance).
    """

    nodes: tuple[ENode, ...]
    classes: tuple[EClass, ...]
    roots: tuple[str, ...]
    provenance: bool = False

    @classmethod
    def build(cls, nodes: Iterable[ENode], classes: Mapping[str, EClass], roots: Iterable[str],
              provenance: bool = False) -> EGraph:
        """An e-graph of ``nodes``, with the ``classes`` they belong to (listed in order of first node)."""
        nodes = tuple(nodes)
        order = dict.fromkeys(n.eclass for n in nodes)
        return cls(nodes, tuple(classes[c] for c in order), tuple(roots), provenance)

    # -- lookups ------------------------------------------------------------------------------------------
    @cached_property
    def _node_index(self) -> dict[str, ENode]:
        return {n.id: n for n in self.nodes}

    @cached_property
    def _class_index(self) -> dict[str, EClass]:
        return {c.id: c for c in self.classes}

    @cached_property
    def _members(self) -> dict[str, tuple[ENode, ...]]:
        out: dict[str, list[ENode]] = {c.id: [] for c in self.classes}
        for n in self.nodes:
            out[n.eclass].append(n)
        return {k: tuple(v) for k, v in out.items()}

    @cached_property
    def _parents(self) -> dict[str, tuple[ENode, ...]]:
        out: dict[str, dict[str, ENode]] = {c.id: {} for c in self.classes}
        for n in self.nodes:
            for c in n.children:
                out[c][n.id] = n
        return {k: tuple(v.values()) for k, v in out.items()}

    @property
    def num_nodes(self) -> int:
        """Number of e-nodes."""
        return len(self.nodes)

    @property
    def tensor_size(self) -> tuple[int, int]:
        """(e-nodes, e-classes) of tensors: the e-graph's size as every report gives it (the optimize report,
        ``eqsat egraph stats``); the list e-nodes that hold an opaque node's inputs are plumbing, not counted."""
        tensors = {c.id for c in self.classes if c.type == "T"}
        return sum(n.eclass in tensors for n in self.nodes), len(tensors)

    def node(self, node_id: str) -> ENode:
        """The e-node with this id (KeyError if none)."""
        return self._node_index[node_id]

    def eclass(self, class_id: str) -> EClass:
        """The e-class with this id (KeyError if none)."""
        return self._class_index[class_id]

    def has_node(self, node_id: str) -> bool:
        """Whether ``node_id`` is an e-node of this e-graph."""
        return node_id in self._node_index

    def has_class(self, class_id: str) -> bool:
        """Whether ``class_id`` is an e-class of this e-graph."""
        return class_id in self._class_index

    def members(self, class_id: str) -> tuple[ENode, ...]:
        """The e-nodes of an e-class, in node order (KeyError if no such class)."""
        return self._members[class_id]

    def parents(self, class_id: str) -> tuple[ENode, ...]:
        """The e-nodes that have this e-class as a child, each once, in node order (KeyError if no such class)."""
        return self._parents[class_id]

    def shape(self, class_id: str) -> tuple[int, ...] | None:
        """The shape of a tensor e-class (None for a list; KeyError if no such class)."""
        return self._class_index[class_id].shape

    # -- derived e-graphs and forms -----------------------------------------------------------------------
    def with_costs(self, costs: Mapping[str, float]) -> EGraph:
        """A copy with node costs set from ``costs`` (node id -> cost; other nodes keep theirs)."""
        nodes = tuple(n._replace(cost=float(costs[n.id])) if n.id in costs else n for n in self.nodes)
        return replace(self, nodes=nodes)

    def to_json(self) -> dict[str, Any]:
        """Extraction-gym JSON with eqsat's fields: ``nodes`` (``op``, ``params``, ``children`` as node ids: the
        first node of each child e-class, ``eclass``, ``cost``), ``root_eclasses`` and ``class_data``
        (``type``, ``shape`` for tensors, ``let`` where egglog named the class)."""
        rep: dict[str, str] = {}
        for n in self.nodes:
            rep.setdefault(n.eclass, n.id)
        nodes = {n.id: {"op": n.op, "params": dict(n.params), "children": [rep[c] for c in n.children],
                        "eclass": n.eclass, "cost": n.cost} for n in self.nodes}
        class_data: dict[str, dict[str, Any]] = {}
        for c in self.classes:
            d: dict[str, Any] = {"type": c.type}
            if c.shape is not None:
                d["shape"] = list(c.shape)
            if c.lets:
                d["let"] = ", ".join(c.lets)
            class_data[c.id] = d
        return {"nodes": nodes, "root_eclasses": list(self.roots), "class_data": class_data}

    @cached_property
    def serialized(self) -> SerializedEGraph:
        """The e-graph as the extractors see it (:class:`eqsat.extract.SerializedEGraph`, with the costs)."""
        return parse_egraph(self.to_json())

    def to_serialized(self) -> SerializedEGraph:
        """The e-graph as the extractors see it (:class:`eqsat.extract.SerializedEGraph`, with the costs)."""
        return self.serialized

    def __repr__(self) -> str:
        return f"EGraph({len(self.nodes)} nodes, {len(self.classes)} classes, roots={list(self.roots)})"
