"""AutoGraph's search (AAAI'23), the baseline for inter-operator parallelism: backtracking under the mixed
critical-path cost, piece by piece, with a dynamic program choosing how the pieces are grouped.

As we read the paper (``../shared/notes/autograph.md``; its partition's details are in an appendix we do not have):

* the graph is cut into pieces of fewer than ``size_low`` (40) operators, and adjacent pieces are merged into
  larger windows of at most ``size_high`` (120) operators, all kept as options. *Ours*: the cut follows the
  topological order (AutoGraph's is a minimum vertex cut weighted by how many rule matches a cut destroys);
* each window is searched by backtracking restricted to it: a rewrite applies when every node it matches lies in
  the window or was made by the window's own search; a graph is kept while its mixed cost is within ``beta``
  (1.1) of the best found, and the search stops when the queue is empty or the window's time share is spent;
* a dynamic program over the front of what remains (``MCP[G] = min_p MCP[G - p] + BS(p)``) takes the best of the
  ways to cover the graph by windows. *Ours*: the windows run left to right, each state is a whole graph and
  states are compared by the whole graph's mixed cost, which is exact where AutoGraph adds up pieces' costs.

Every graph is priced by the same cost model and rules as eqsat's, and its critical path is recomputed from its
nodes' costs (:func:`eqsat.costs.graph_parallel_cost`'s definition).
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable, Sequence

from eqsat.costs import CostModel
from eqsat.costs.parallel import critical_path
from eqsat.extract import ParallelCost
from eqsat.ir import matching as rw
from eqsat.ir.graph import Graph
from eqsat.ir.passes import flatten_concats
from eqsat.ir.rule import Rule
from eqsat.ir.symbols import costed_at
from eqsat.pipeline.neighbours import Expander, GraphCoster
from eqsat.search.searches import SearchResult, _Clock, _strip, _unseen, check_limits

#: AutoGraph's piece sizes (operators) and its relaxation
SIZE_LOW = 40
SIZE_HIGH = 120
BETA = 1.1
#: AutoGraph's cost: alpha 0.25, any number of branches at once
MIXED = ParallelCost()


def mixed_cost(coster: GraphCoster, graph: Graph, parallel: ParallelCost) -> float:
    """The mixed critical-path cost of ``graph`` (each node as ``coster`` prices it)."""
    _, costs = coster.node_costs(graph)
    return parallel.of(sum(costs.values()), critical_path(graph, costs))


def cut(graph: Graph, size_low: int = SIZE_LOW) -> dict[str, int]:
    """Each node's piece (by its output): the nodes in topological order, in pieces of fewer than ``size_low``."""
    count = max(1, -(-len(graph.nodes) // max(1, size_low - 1)))
    per = -(-len(graph.nodes) // count)
    return {n.output: k // per for k, n in enumerate(graph.nodes)}


def windows(piece_of: dict[str, int], size_high: int = SIZE_HIGH) -> list[tuple[int, int]]:
    """The pool of windows, as ranges ``[i, j)`` of pieces in the order the dynamic program takes them: every
    piece, and every run of adjacent pieces of at most ``size_high`` nodes."""
    sizes: dict[int, int] = {}
    for p in piece_of.values():
        sizes[p] = sizes.get(p, 0) + 1
    count = len(sizes)
    pool = []
    for i in range(count):
        total = 0
        for j in range(i + 1, count + 1):
            total += sizes[j - 1]
            if total > size_high and j > i + 1:
                break
            pool.append((i, j))
    return pool


def autograph(graph: Graph, rules: Sequence[Rule], cost_model: CostModel, *,
              parallel: ParallelCost = MIXED, beta: float = BETA, seconds: float = 60.0,
              size_low: int = SIZE_LOW, size_high: int = SIZE_HIGH,
              progress: Callable[[str], None] | None = None) -> SearchResult:
    """AutoGraph's search (see the module docstring) under ``parallel``'s mixed cost, within ``seconds``."""
    check_limits(beta, None, seconds)
    clock = _Clock(seconds)
    say = progress or (lambda msg: None)
    start = rw.prepare(graph)
    coster = GraphCoster(cost_model, costed_at(graph))
    cost0 = mixed_cost(coster, flatten_concats(start).live(), parallel)
    piece_of = cut(start, size_low)
    count = len(set(piece_of.values()))
    pool = windows(piece_of, size_high)
    # MCP[i]: the best graph once the pieces before i are optimized (its mixed cost as written, the graph)
    best_at: dict[int, tuple[float, Graph, list[str]]] = {0: (cost0, start, [])}
    trace = [(0.0, cost0)]
    best = (cost0, flatten_concats(start).live(), [])
    expansions = generated = 0
    for k, (i, j) in enumerate(pool):
        if clock.out():
            break
        if i not in best_at:
            continue
        share = max(0.0, clock.deadline - time.perf_counter()) / max(1, len(pool) - k)
        _, g, path = best_at[i]
        members = {t for t, p in piece_of.items() if i <= p < j}
        found, done, made = _search_window(g, members, rules, coster, parallel, beta, share, clock)
        expansions, generated = expansions + done, generated + made
        c, new, steps = found
        if j not in best_at or c < best_at[j][0]:
            best_at[j] = (c, new, path + steps)
        if c < best[0] * (1 - 1e-9):  # float noise is no improvement
            best = (c, flatten_concats(new).live(), path + steps)
            trace.append((clock.elapsed(), c))
            say(f"  autograph: window {i}-{j} of {count} pieces, best {c:.6g}")
    return SearchResult(best[1], best[0], cost0, trace, expansions, generated, clock.elapsed(),
                        "time budget" if clock.out() else "every window searched", best[2])


def _search_window(graph: Graph, members: set[str], rules: Sequence[Rule], coster: GraphCoster,
                   parallel: ParallelCost, beta: float, seconds: float, outer: _Clock
                   ) -> tuple[tuple[float, Graph, list[str]], int, int]:
    """Backtracking restricted to one window (see the module docstring): the best graph found as (mixed cost as
    written, graph, rules applied), the graphs expanded and generated."""
    clock = _Clock(min(seconds, max(0.0, outer.deadline - time.perf_counter())))
    base = {n.output for n in graph.nodes}
    expander = Expander(graph, rules, coster, 2 * max(len(graph.nodes), 1))
    c0 = mixed_cost(coster, flatten_concats(graph).live(), parallel)
    best = (c0, graph, [])
    tie = itertools.count()
    h0 = rw.structure_hash(graph)
    queue = [(c0, next(tie), graph, h0, [])]
    seen = {h0}
    done = made = 0
    while queue and not clock.out():
        cost, _, g, ghash, path = heapq.heappop(queue)
        if done and cost > beta * best[0]:
            continue
        done += 1
        for m, _, _, hash_of, build in expander.neighbours(g, coster(g), ghash, clock):
            if not all(t in members or t not in base for t in m.nodes):
                continue  # a match reaching outside the window (or its own new nodes)
            made += 1
            fresh = _unseen(hash_of, build, seen)
            if fresh is None:
                continue
            h, new = fresh
            c = mixed_cost(coster, flatten_concats(new).live(), parallel)
            if c > beta * best[0]:
                continue
            if c < best[0] * (1 - 1e-9):
                best = (c, new, path + [m.rule.name])
            heapq.heappush(queue, (c, next(tie), _strip(new), h, path + [m.rule.name]))
    return best, done, made
