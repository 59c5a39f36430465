"""Greedy DAG extractor (a port of the idea of extraction-gym's faster-greedy-dag), always acyclic.

Each class keeps the "cost set" of its best sub-DAG found so far (class -> cost of the node chosen for it
in that sub-DAG); a node's set is the union of its children's sets plus itself, its cost the sum of the
set. Nodes whose children's sets already contain their own class (and self-loops) are ignored. Nodes
are re-evaluated from a FIFO work-list until nothing improves, one strongly connected component of the
class graph at a time, children first.

With negative costs, stale cost sets can let the final per-class choices form a cycle (with costs >= 0
they cannot: totals never increase along a chosen edge); the result is therefore checked, and a second
pass that fixes each class exactly once (in cost order, so choices only ever point to classes fixed
earlier) is used when that happens.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from collections.abc import Mapping, Sequence

from .egraph_json import SerializedEGraph
from .result import Extraction, NoFiniteChoice
from .validate import reachable_part, validate_selection

__all__ = ["extract_greedy", "greedy_choices", "reachable_class_mask", "strongly_connected_components",
           "class_graph"]

INF = math.inf
CostSet = dict[int, float]


def reachable_class_mask(eg: SerializedEGraph) -> bytearray:
    """1 for every class reachable from a root through any node, else 0."""
    seen = bytearray(eg.num_classes)
    stack = list(eg.roots)
    for r in stack:
        seen[r] = 1
    class_nodes, node_children = eg.class_nodes, eg.node_children
    while stack:
        for n in class_nodes[stack.pop()]:
            for d in node_children[n]:
                if not seen[d]:
                    seen[d] = 1
                    stack.append(d)
    return seen


def strongly_connected_components(succ: Mapping[int, Sequence[int]]) -> list[list[int]]:
    """Tarjan's algorithm, iterative. Components come out successors-first (a component is listed after
    every component it can reach), so the list is a children-first order of the condensed graph.
    Every successor must itself be a key of ``succ``."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    comps: list[list[int]] = []
    for start in succ:
        if start in index:
            continue
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        work = [(start, iter(succ[start]))]
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(succ[w])))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == index[v]:
                members = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    members.append(w)
                    if w == v:
                        break
                comps.append(members)
    return comps


def class_graph(eg: SerializedEGraph, mask: bytearray) -> dict[int, list[int]]:
    """class -> distinct child classes over all its nodes, for the classes in ``mask``."""
    succ: dict[int, list[int]] = {}
    for c in range(eg.num_classes):
        if mask[c]:
            seen: dict[int, None] = {}
            for n in eg.class_nodes[c]:
                seen.update(dict.fromkeys(eg.node_children[n]))
            succ[c] = list(seen)
    return succ


def _parents(eg: SerializedEGraph, mask: bytearray) -> list[list[int]]:
    """class -> nodes (of classes in ``mask``) that have it as a child."""
    parents: list[list[int]] = [[] for _ in range(eg.num_classes)]
    for n, kids in enumerate(eg.node_children):
        if mask[eg.node_class[n]]:
            for d in kids:
                parents[d].append(n)
    return parents


def _node_cost_set(c: int, cost: float, kids: tuple[int, ...], child_sets: list[CostSet],
                   best: float) -> tuple[float, CostSet | None]:
    """Cost set of a node of class ``c`` from its children's sets, or (inf, None) if it cannot help.

    ``best`` is the class's current total: a single-child node that cannot beat it is skipped early.
    """
    if not kids:
        return cost, {c: cost}
    if c in kids or any(c in s for s in child_sets):
        return INF, None
    if len(child_sets) == 1:
        total = cost + sum(child_sets[0].values())
        if total >= best:
            return INF, None
        result = dict(child_sets[0])
        result[c] = cost
        return total, result
    biggest = max(range(len(child_sets)), key=lambda i: len(child_sets[i]))
    result = dict(child_sets[biggest])
    for i, s in enumerate(child_sets):
        if i != biggest:
            result.update(s)
    result[c] = cost
    return sum(result.values()), result


def _child_sets(kids: tuple[int, ...], sets: list[CostSet | None]) -> list[CostSet] | None:
    """The children's cost sets, or None while one of them has none yet."""
    out = []
    for k in kids:
        s = sets[k]
        if s is None:
            return None
        out.append(s)
    return out


def _fifo_greedy(eg: SerializedEGraph, mask: bytearray) -> list[int]:
    """faster-greedy-dag on the classes in ``mask``; class -> chosen node index or -1.

    Strongly connected components of the class graph are solved children-first, each to a fixpoint with
    a FIFO work-list; acyclic parts are thus evaluated once per node (a long chain costs O(n) updates,
    not O(n^2)).
    """
    node_class, node_cost, node_children = eg.node_class, eg.node_cost, eg.node_children
    parents = _parents(eg, mask)
    sets: list[CostSet | None] = [None] * eg.num_classes
    totals = [INF] * eg.num_classes
    choice = [-1] * eg.num_classes
    comp_of = [-1] * eg.num_classes
    queued = bytearray(eg.num_nodes)
    for k, members in enumerate(strongly_connected_components(class_graph(eg, mask))):
        for c in members:
            comp_of[c] = k
        queue = deque(sorted(n for c in members for n in eg.class_nodes[c]))
        for n in queue:
            queued[n] = 1
        while queue:
            n = queue.popleft()
            queued[n] = 0
            kids = node_children[n]
            child_sets = _child_sets(kids, sets)
            if child_sets is None:
                continue
            c = node_class[n]
            total, cset = _node_cost_set(c, node_cost[n], kids, child_sets, totals[c])
            if total < totals[c]:
                sets[c], totals[c], choice[c] = cset, total, n
                for p in parents[c]:
                    if not queued[p] and comp_of[node_class[p]] == k:
                        queued[p] = 1
                        queue.append(p)
    return choice


def _once_greedy(eg: SerializedEGraph, mask: bytearray) -> list[int]:
    """Fix each class once, cheapest candidate first; choices only point to earlier-fixed classes."""
    node_class, node_cost, node_children = eg.node_class, eg.node_cost, eg.node_children
    parents = _parents(eg, mask)
    sets: list[CostSet | None] = [None] * eg.num_classes
    choice = [-1] * eg.num_classes
    pending = [len(kids) for kids in node_children]
    heap: list[tuple[float, int, CostSet]] = []

    def push(n: int) -> None:
        kids = node_children[n]
        child_sets = _child_sets(kids, sets)
        if child_sets is None:  # cannot happen: all children are fixed before a node is pushed
            return
        total, cset = _node_cost_set(node_class[n], node_cost[n], kids, child_sets, INF)
        if cset is not None:
            heapq.heappush(heap, (total, n, cset))

    for n, kids in enumerate(node_children):
        if not kids and mask[node_class[n]]:
            push(n)
    while heap:
        _, n, cset = heapq.heappop(heap)
        c = node_class[n]
        if choice[c] >= 0:
            continue
        choice[c], sets[c] = n, cset
        for p in parents[c]:
            pending[p] -= 1
            if pending[p] == 0 and choice[node_class[p]] < 0:
                push(p)
    return choice


def _explain(eg: SerializedEGraph, c: int, choice: list[int]) -> str:
    """Why class ``c`` has no finite choice (first few nodes)."""
    parts = []
    for n in eg.class_nodes[c][:5]:
        kids = eg.node_children[n]
        if c in kids:
            why = "itself (self-loop)"
        else:
            bad = [eg.class_ids[d] for d in kids if choice[d] < 0]
            why = f"class {bad[0]!r} (no finite choice)" if bad else "a class whose best choice depends on it"
        parts.append(f"node {eg.node_ids[n]!r} needs {why}")
    more = "" if len(eg.class_nodes[c]) <= 5 else f"; and {len(eg.class_nodes[c]) - 5} more nodes"
    return "; ".join(parts) + more


def _selection_from_choices(eg: SerializedEGraph, choice: list[int]) -> dict[int, int] | None:
    """Follow ``choice`` from the roots; class -> node, or None if the choices form a cycle.

    Raises:
        NoFiniteChoice: a class needed from a root has no choice.
    """
    selection: dict[int, int] = {}
    state: dict[int, int] = {}  # 1 = on the DFS path, 2 = done
    for root in eg.roots:
        stack = [(root, 0)]
        while stack:
            c, i = stack.pop()
            if i == 0:
                if state.get(c) == 2:
                    continue
                if choice[c] < 0:
                    name = eg.class_ids[c]
                    raise NoFiniteChoice(name, f"e-class {name!r} has no finite (acyclic) choice: "
                                               f"{_explain(eg, c, choice)}")
                selection[c] = choice[c]
                state[c] = 1
            kids = eg.node_children[choice[c]]
            if i < len(kids):
                stack.append((c, i + 1))
                d = kids[i]
                if state.get(d) == 1:
                    return None
                if state.get(d) != 2:
                    stack.append((d, 0))
            else:
                state[c] = 2
    return selection


def greedy_choices(eg: SerializedEGraph) -> dict[int, int]:
    """Greedy DAG selection as class index -> node index, for the classes reachable from the roots.

    Raises:
        NoFiniteChoice: a class needed from a root has no acyclic choice.
    """
    mask = reachable_class_mask(eg)
    selection = _selection_from_choices(eg, _fifo_greedy(eg, mask))
    if selection is None:
        selection = _selection_from_choices(eg, _once_greedy(eg, mask))
    assert selection is not None, "the once-greedy pass cannot produce a cycle"
    return selection


def extract_greedy(eg: SerializedEGraph, *, start: Mapping[str, str] | None = None) -> Extraction:
    """Greedy DAG extraction (heuristic, fast); the cost is recomputed by the validator. With ``start`` (a known
    valid selection, e.g. the input graph's own term) the cheaper of the two is returned (status ``"start"``
    when it is ``start``), so the answer is never worse than it.

    Raises:
        NoFiniteChoice: a class needed from a root has no acyclic choice (the message names it);
        InvalidExtraction: ``start`` is not a valid selection.
    """
    began = time.perf_counter()
    chosen = greedy_choices(eg)
    selection = {eg.class_ids[c]: eg.node_ids[n] for c, n in chosen.items()}
    cost = greedy_cost = validate_selection(eg, selection)
    status = "greedy"
    if start is not None:
        start_sel = reachable_part(eg, start)
        start_cost = validate_selection(eg, start_sel)
        if start_cost < cost:
            selection, cost, status = start_sel, start_cost, "start"
    return Extraction(selection=selection, cost=cost, status=status, bound=None, gap=None,
                      seconds=time.perf_counter() - began, solver="greedy", greedy_cost=greedy_cost)
