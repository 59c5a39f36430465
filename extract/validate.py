"""Independent checker of an extraction: roots chosen, children chosen, acyclic; recomputes the DAG cost.

This module deliberately shares no code with the extractors: it works on the e-graph's string ids
through its public accessors and walks the selection on its own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from .egraph_json import SerializedEGraph

__all__ = ["InvalidExtraction", "validate_selection", "reachable_classes", "reachable_part", "selection_critical_path"]


class InvalidExtraction(ValueError):
    """A selection is not a valid acyclic extraction of the e-graph."""


def _check_membership(eg: SerializedEGraph, selection: Mapping[str, str]) -> None:
    """Every entry names a known class and a node of that class."""
    for cid, nid in selection.items():
        if not eg.has_class(cid):
            raise InvalidExtraction(f"selection names class {cid!r}, which is not in the e-graph")
        if not eg.has_node(nid):
            raise InvalidExtraction(f"class {cid!r} is mapped to node {nid!r}, which is not in the e-graph")
        owner = eg.class_of(nid)
        if owner != cid:
            raise InvalidExtraction(f"class {cid!r} is mapped to node {nid!r}, "
                                    f"which belongs to class {owner!r}")


def _cycle_message(path: list[str], selection: Mapping[str, str], back_to: str) -> str:
    cycle = path[path.index(back_to):] + [back_to]
    if len(cycle) == 2:
        return (f"selected node {selection[back_to]!r} of class {back_to!r} is a self-loop "
                "(its child is its own class)")
    shown = " -> ".join(f"{c}[{selection[c]}]" for c in cycle[:-1]) + f" -> {back_to}"
    return f"selection contains a cycle: {shown}"


def reachable_classes(eg: SerializedEGraph, selection: Mapping[str, str]) -> list[str]:
    """Classes reachable from the roots through the selection, in DFS post-order (children first).

    Raises:
        InvalidExtraction: a root or a needed child class is unselected, or the selection has a cycle.
    """
    _check_membership(eg, selection)
    done: set[str] = set()
    on_path: set[str] = set()
    order: list[str] = []
    for root in eg.root_classes:
        if root not in selection:
            raise InvalidExtraction(f"root class {root!r} is not selected")
        if root in done:
            continue
        path = [root]
        on_path.add(root)
        stack = [iter(eg.child_classes(selection[root]))]
        while stack:
            parent = path[-1]
            child = next(stack[-1], None)
            if child is None:
                stack.pop()
                path.pop()
                on_path.discard(parent)
                done.add(parent)
                order.append(parent)
                continue
            if child in done:
                continue
            if child in on_path:
                raise InvalidExtraction(_cycle_message(path, selection, child))
            if child not in selection:
                raise InvalidExtraction(f"node {selection[parent]!r} of class {parent!r} needs child class "
                                        f"{child!r}, which is not selected")
            path.append(child)
            on_path.add(child)
            stack.append(iter(eg.child_classes(selection[child])))
    return order


def validate_selection(eg: SerializedEGraph, selection: Mapping[str, str]) -> float:
    """Check that ``selection`` (class id -> node id) is a valid acyclic extraction; return its DAG cost.

    Checks: every entry maps a class to one of its own nodes; every root class is selected; every child
    class of every selected node reachable from the roots is selected; the reachable selected sub-graph is
    acyclic. The cost is the sum of the costs of the distinct chosen nodes reachable from the roots.

    Raises:
        InvalidExtraction: with a message naming the offending class / node / cycle.
    """
    if not isinstance(selection, Mapping):
        raise InvalidExtraction("selection must be a mapping class id -> node id, "
                                f"got {type(selection).__name__}")
    order = reachable_classes(eg, selection)
    return math.fsum(eg.cost_of(selection[c]) for c in order)


def selection_critical_path(eg: SerializedEGraph, selection: Mapping[str, str]) -> float:
    """The critical path of a valid selection: the largest sum of chosen nodes' costs along a path from a leaf to
    a root (what a runtime that runs independent operators at once needs at the least). Raises
    :class:`InvalidExtraction` for an invalid selection."""
    finish: dict[str, float] = {}
    for c in reachable_classes(eg, selection):  # children first
        n = selection[c]
        finish[c] = eg.cost_of(n) + max((finish[d] for d in eg.child_classes(n)), default=0.0)
    return max(finish.values(), default=0.0)


def reachable_part(eg: SerializedEGraph, selection: Mapping[str, str]) -> dict[str, str]:
    """The part of ``selection`` reachable from the roots through its own choices (a selection may name more
    classes, e.g. every class of the input graph's term); unknown classes are left for the validator."""
    out: dict[str, str] = {}
    stack = [eg.class_ids[r] for r in eg.roots]
    while stack:
        c = stack.pop()
        if c in out or c not in selection:
            continue
        out[c] = n = selection[c]
        if n in eg.node_index:
            stack.extend(eg.class_ids[d] for d in eg.node_children[eg.node_index[n]])
    return out
