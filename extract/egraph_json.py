"""Load extraction-gym / egraph-serialize JSON into an immutable, integer-indexed e-graph."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

__all__ = ["SerializedEGraph", "load_egraph", "parse_egraph"]

DEFAULT_COST = 1.0


@dataclass(frozen=True, eq=False)
class SerializedEGraph:
    """An e-graph read from egraph-serialize JSON, indexed by integers.

    Classes and nodes are numbered in order of first appearance in ``nodes``. Internally everything is
    an index into the tuples below; the string accessors (``class_of`` ...) are for callers that work
    with the ids of the JSON file.

    Attributes:
        class_ids: class index -> class id.
        node_ids: node index -> node id.
        node_ops: node index -> operator string (``""`` when absent).
        node_class: node index -> class index.
        node_cost: node index -> cost (1.0 when the JSON omits it).
        node_children: node index -> child class indices, deduplicated, first-occurrence order.
        class_nodes: class index -> node indices of that class, in file order.
        roots: root class indices, deduplicated, in file order.
        class_index: class id -> class index (read-only mapping).
        node_index: node id -> node index (read-only mapping).
    """

    class_ids: tuple[str, ...]
    node_ids: tuple[str, ...]
    node_ops: tuple[str, ...]
    node_class: tuple[int, ...]
    node_cost: tuple[float, ...]
    node_children: tuple[tuple[int, ...], ...]
    class_nodes: tuple[tuple[int, ...], ...]
    roots: tuple[int, ...]
    class_index: Mapping[str, int]
    node_index: Mapping[str, int]

    @property
    def num_nodes(self) -> int:
        """Number of e-nodes."""
        return len(self.node_ids)

    @property
    def num_classes(self) -> int:
        """Number of e-classes that own at least one e-node."""
        return len(self.class_ids)

    @property
    def root_classes(self) -> tuple[str, ...]:
        """Root class ids (deduplicated, file order)."""
        return tuple(self.class_ids[c] for c in self.roots)

    def has_class(self, class_id: str) -> bool:
        """Whether ``class_id`` is a class of this e-graph."""
        return class_id in self.class_index

    def has_node(self, node_id: str) -> bool:
        """Whether ``node_id`` is a node of this e-graph."""
        return node_id in self.node_index

    def class_of(self, node_id: str) -> str:
        """The class id of node ``node_id`` (KeyError if unknown)."""
        return self.class_ids[self.node_class[self.node_index[node_id]]]

    def cost_of(self, node_id: str) -> float:
        """The cost of node ``node_id`` (KeyError if unknown)."""
        return self.node_cost[self.node_index[node_id]]

    def op_of(self, node_id: str) -> str:
        """The operator string of node ``node_id`` (KeyError if unknown)."""
        return self.node_ops[self.node_index[node_id]]

    def child_classes(self, node_id: str) -> tuple[str, ...]:
        """The distinct child class ids of node ``node_id``, in first-occurrence order."""
        return tuple(self.class_ids[c] for c in self.node_children[self.node_index[node_id]])

    def nodes_of(self, class_id: str) -> tuple[str, ...]:
        """The node ids of class ``class_id`` (KeyError if unknown)."""
        return tuple(self.node_ids[n] for n in self.class_nodes[self.class_index[class_id]])

    def __repr__(self) -> str:
        return (f"SerializedEGraph({self.num_nodes} nodes, {self.num_classes} classes, "
                f"roots={list(self.root_classes)})")


def load_egraph(src: str | Path | Mapping[str, Any] | Any) -> SerializedEGraph:
    """Load an e-graph from a JSON file path or from an already-parsed JSON object; an object with a
    ``to_serialized()`` method (the engine's :class:`eqsat.engine.egraph.EGraph`) gives its own view.

    Raises:
        FileNotFoundError: ``src`` names a file that does not exist.
        ValueError: the JSON is not valid or does not describe a well-formed e-graph.
    """
    if not isinstance(src, str | os.PathLike | Mapping) and callable(getattr(src, "to_serialized", None)):
        return src.to_serialized()
    if not isinstance(src, str | os.PathLike):
        return parse_egraph(src)
    path = Path(src)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not a UTF-8 text file ({e})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: invalid JSON: {e}") from None
    try:
        return parse_egraph(data)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def _node_fields(nid: str, node: Any) -> tuple[str, str, float, list[str]]:
    """Validate one JSON node and return (eclass, op, cost, children node ids)."""
    if not isinstance(node, Mapping):
        raise ValueError(f"node {nid!r} is not a JSON object")
    eclass = node.get("eclass")
    if not isinstance(eclass, str | int) or isinstance(eclass, bool):
        raise ValueError(f"node {nid!r} has no valid 'eclass' field (got {eclass!r})")
    raw_cost = node.get("cost", DEFAULT_COST)
    if isinstance(raw_cost, bool) or not isinstance(raw_cost, int | float):
        raise ValueError(f"node {nid!r} has a non-numeric cost {raw_cost!r}")
    cost = float(raw_cost)
    if not math.isfinite(cost):
        raise ValueError(f"node {nid!r} has a non-finite cost {raw_cost!r}")
    children = node.get("children", [])
    if not isinstance(children, list):
        raise ValueError(f"node {nid!r}: 'children' must be a list, got {type(children).__name__}")
    op = node.get("op", "")
    return str(eclass), str(op), cost, [str(c) for c in children]


def parse_egraph(data: Mapping[str, Any]) -> SerializedEGraph:
    """Build a :class:`SerializedEGraph` from parsed egraph-serialize JSON (see :func:`load_egraph`)."""
    if not isinstance(data, Mapping):
        raise ValueError(f"e-graph JSON must be an object, got {type(data).__name__}")
    nodes = data.get("nodes")
    if not isinstance(nodes, Mapping):
        raise ValueError("e-graph JSON has no 'nodes' object")
    if not nodes:
        raise ValueError("e-graph JSON has no nodes")

    node_ids: list[str] = []
    node_ops: list[str] = []
    node_cost: list[float] = []
    node_class: list[int] = []
    raw_children: list[list[str]] = []
    class_index: dict[str, int] = {}
    class_nodes: list[list[int]] = []
    for nid, node in nodes.items():
        eclass, op, cost, children = _node_fields(str(nid), node)
        c = class_index.get(eclass)
        if c is None:
            c = class_index[eclass] = len(class_nodes)
            class_nodes.append([])
        class_nodes[c].append(len(node_ids))
        node_ids.append(str(nid))
        node_ops.append(op)
        node_cost.append(cost)
        node_class.append(c)
        raw_children.append(children)

    node_index = {nid: i for i, nid in enumerate(node_ids)}
    node_children = [_child_classes(node_ids[i], kids, node_index, node_class)
                     for i, kids in enumerate(raw_children)]
    roots = _root_classes(data, class_index)
    return SerializedEGraph(
        class_ids=tuple(class_index),
        node_ids=tuple(node_ids),
        node_ops=tuple(node_ops),
        node_class=tuple(node_class),
        node_cost=tuple(node_cost),
        node_children=tuple(node_children),
        class_nodes=tuple(tuple(ns) for ns in class_nodes),
        roots=roots,
        class_index=MappingProxyType(class_index),
        node_index=MappingProxyType(node_index),
    )


def _child_classes(nid: str, kids: list[str], node_index: dict[str, int],
                   node_class: list[int]) -> tuple[int, ...]:
    """Map child node ids to their distinct classes, keeping first-occurrence order."""
    out: dict[int, None] = {}
    for kid in kids:
        k = node_index.get(kid)
        if k is None:
            raise ValueError(f"node {nid!r} has child {kid!r}, which is not a node of the e-graph")
        out[node_class[k]] = None
    return tuple(out)


def _root_classes(data: Mapping[str, Any], class_index: dict[str, int]) -> tuple[int, ...]:
    """Resolve and deduplicate ``root_eclasses``."""
    raw = data.get("root_eclasses")
    if not isinstance(raw, list) or not raw:
        raise ValueError("e-graph JSON has no (or an empty) 'root_eclasses' list")
    roots: dict[int, None] = {}
    for r in raw:
        c = class_index.get(str(r))
        if c is None:
            raise ValueError(f"root class {str(r)!r} has no nodes in the e-graph")
        roots[c] = None
    return tuple(roots)
