"""Rewrite searches that apply rules to one graph at a time, the baselines eqsat is compared against.

* :func:`backtracking` — TASO's cost-based backtracking search (Jia et al., SOSP'19, §5 and Algorithm 2): a
  priority queue of graphs ordered by cost; each popped graph is expanded by every applicable match of every
  rule, and a new graph is queued when it costs less than ``alpha`` times the best cost so far, has fewer than
  twice the original's nodes, and was never seen before (structural graph hashing).
* :func:`sampling` — OCGGS's sampling heuristic (Fang et al., PVLDB'20), see its docstring.

Both use the same IR, rules (:mod:`eqsat.search.matching`) and cost model as :func:`eqsat.optimize`, record an
anytime trace of (seconds, best cost so far), and stop at a budget of expansions and of wall time, which also
holds inside an expansion.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from eqsat.costs import CostModel
from eqsat.engine.errors import LimitError
from eqsat.engine.limits import check_seconds
from eqsat.ir import matching as rw
from eqsat.ir.graph import Graph
from eqsat.ir.passes import flatten_concats
from eqsat.ir.rule import Rule
from eqsat.ir.symbols import costed_at
from eqsat.pipeline.neighbours import Expander, GraphCoster


@dataclass
class SearchResult:
    """What a search found: the cheapest graph as it will be written (n-ary concats restored), its cost and
    the original's priced the same way, and how the search went."""

    graph: Graph
    cost: float
    original_cost: float
    trace: list[tuple[float, float]]  # (seconds since start, best cost so far), one entry per improvement
    expansions: int
    graphs_generated: int
    seconds: float
    stop_reason: str
    applied: list[str] = field(default_factory=list)  # rules applied on the way to the best graph
    expanded_costs: list[float] = field(default_factory=list)  # cost of each expanded graph, in order

    @property
    def seconds_to_best(self) -> float:
        """When the best graph was found."""
        return self.trace[-1][0] if self.trace else 0.0


class _Best:
    """The best graph so far as it will be written (n-ary concats restored, dead nodes gone), priced from
    scratch: the searches work on binary concat chains, whose extra kernels are not in the written model."""

    def __init__(self, graph: Graph, coster: GraphCoster, clock: _Clock, eps: float) -> None:
        self.coster, self.clock, self.eps = coster, clock, eps
        self.graph = flatten_concats(graph).live()
        self.cost = coster(self.graph)
        self.path: list[str] = []
        self.trace = [(0.0, self.cost)]

    def offer(self, graph: Graph, path: list[str]) -> None:
        """Keep ``graph`` if it is cheaper as written."""
        g = flatten_concats(graph).live()
        c = self.coster(g)
        if c < self.cost - self.eps:
            self.graph, self.cost, self.path = g, c, path
            self.trace.append((self.clock.elapsed(), c))


class _Clock:
    def __init__(self, seconds: float) -> None:
        self.start = time.perf_counter()
        self.deadline = self.start + seconds

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def out(self) -> bool:
        return time.perf_counter() >= self.deadline


def check_limits(alpha: float, expansions: int | None, seconds: float, what: str = "expansions") -> None:
    """Raise :class:`~eqsat.engine.errors.LimitError` for a meaningless alpha, count (``what``) or time budget."""
    check_seconds("budget seconds", seconds)
    if not (isinstance(alpha, int | float) and math.isfinite(alpha) and alpha >= 1.0):
        raise LimitError(f"alpha must be a finite number >= 1.0, got {alpha!r}")
    if expansions is not None and (not isinstance(expansions, int) or expansions < 1):
        raise LimitError(f"{what} must be a whole number >= 1, got {expansions!r}")


def _strip(graph: Graph) -> Graph:
    """Drop a queued graph's cached tables (recomputed when it is expanded) to keep the queue small."""
    for k in ("shapes", "producers", "consumers", "dtypes", "_positions", "_structure", "_by_op", "_node_costs"):
        graph.__dict__.pop(k, None)
    return graph


def _unseen(hash_of: Callable[[], int], build: Callable[[], Graph], seen: set[int]) -> tuple[int, Graph] | None:
    """A neighbour's hash and graph, marked seen, unless it was seen before or cannot be built (a two-output
    rewrite that closes a cycle)."""
    h = hash_of()
    if h in seen:
        return None
    try:
        new = build()
    except rw.NotApplicable:
        return None
    seen.add(h)
    return h, new


def backtracking(graph: Graph, rules: Sequence[Rule], cost_model: CostModel, *, alpha: float = 1.05,
                 expansions: int | None = None, seconds: float = 60.0,
                 progress: Callable[[str], None] | None = None) -> SearchResult:
    """TASO's cost-based backtracking search (see the module docstring).

    ``alpha`` >= 1 is the relaxation factor: a graph up to ``alpha`` times costlier than the best so far is
    still explored (1.0 makes it a greedy descent: every expanded graph is strictly cheaper than the one
    expanded before it). A queued graph no longer within ``alpha`` of the best when it is popped is dropped
    (TASO would still expand it). ``expansions`` bounds the graphs expanded, ``seconds`` the wall time.
    """
    check_limits(alpha, expansions, seconds)
    clock = _Clock(seconds)
    say = progress or (lambda msg: None)
    start = rw.prepare(graph)
    coster = GraphCoster(cost_model, costed_at(graph))
    expander = Expander(start, rules, coster, 2 * max(len(start.nodes), 1))
    cost0 = coster(start)
    eps = 1e-9 * max(abs(cost0), 1e-9)  # costs are sums updated incrementally: ignore rounding-level changes
    best_cost = cost0  # in the search's own terms (binary concats)
    best = _Best(start, coster, clock, eps)
    expanded_best = cost0  # the threshold's base, as TASO's bestCost: the cheapest graph expanded
    tie = itertools.count()
    hash0 = rw.structure_hash(start)
    queue: list[tuple[float, int, Graph, int, list[str]]] = [(cost0, next(tie), start, hash0, [])]
    seen = {hash0}
    done = generated = 0
    expanded_costs: list[float] = []
    reason = "queue empty"
    while queue:
        if expansions is not None and done >= expansions:
            reason = "expansion budget"
            break
        if clock.out():
            reason = "time budget"
            break
        cost, _, g, ghash, path = heapq.heappop(queue)
        if done and cost >= alpha * expanded_best - eps:
            continue  # no longer within alpha of the best
        expanded_best = min(expanded_best, cost)
        expanded_costs.append(cost)
        done += 1
        for m, _, c, hash_of, build in expander.neighbours(g, cost, ghash, clock):
            generated += 1
            if c >= alpha * expanded_best - eps:
                continue
            fresh = _unseen(hash_of, build, seen)
            if fresh is None:
                continue
            h, new = fresh
            new_path = path + [m.rule.name]
            if c < best_cost - eps:
                best_cost = c
                best.offer(new, new_path)
            heapq.heappush(queue, (c, next(tie), _strip(new), h, new_path))
        if done % 10 == 0:
            say(f"  backtracking: {done} expansions, {len(queue)} queued, best {best_cost:.6g}")
    return SearchResult(best.graph, best.cost, best.trace[0][1], best.trace, done, generated, clock.elapsed(),
                        reason, best.path, expanded_costs)


# ---------------------------------------------------------------------------------------------------------
# OCGGS sampling


@dataclass
class _Seq:
    """A node of OCGGS's search tree: a graph and the substitution sequence that produced it."""

    graph: Graph
    cost: float
    change: float  # cost change of the last step (0 for the root)
    created: frozenset[str]  # tensors the last step's new nodes compute
    labels: dict[str, tuple[int, int]]  # op order for pruning: (step, index) for created ops, (-1, topo) else
    key: tuple[int, int]  # the largest op the last step matched under that order
    path: list[str]
    hash: int
    potential: float = 0.0
    followups: list[_Seq] | None = None  # cost-lowering dependent children, found when ranking a raise


def sampling(graph: Graph, rules: Sequence[Rule], cost_model: CostModel, *, sample_size: int = 20,
             depth: int | None = None, prune: bool = False, seed: int = 0, seconds: float = 60.0,
             progress: Callable[[str], None] | None = None) -> SearchResult:
    """OCGGS's sampling search (Fang et al., PVLDB'20, its sampling heuristic as its public code runs it).

    The search goes level by level over substitution sequences. Of a level's graphs, it keeps the
    ``sample_size // 2`` cheapest whose last step lowered (or kept) the cost, and the ``sample_size // 2``
    cost-raising ones with the best *potential* (the largest cost drop of a follow-up step that uses what the
    raising step created). Each kept cost-raising graph is expanded at once and only its cost-lowering
    dependent children survive, so a cost increase is kept only when a dependent decrease follows (the
    "two-step" sampling). The kept graphs' children form the next level. The best graph is the cheapest ever
    generated. ``depth`` bounds the sequence length (OCGGS's K; unbounded by default, the wall-time budget
    ``seconds`` then ends it). With ``prune``, OCGGS's partial order is applied: a step independent of the
    previous one must match an op later in the order (original ops by position, created ops by the step
    that created them), so independent steps are tried in one order only. OCGGS's code selects the top graphs
    deterministically; ``seed`` breaks ties between equal costs.
    """
    check_limits(1.0, depth, seconds, "depth")
    if not isinstance(sample_size, int) or sample_size < 2:
        raise LimitError(f"sample_size must be a whole number >= 2, got {sample_size!r}")
    clock = _Clock(seconds)
    say = progress or (lambda msg: None)
    rng = random.Random(seed)
    k = sample_size // 2
    start = rw.prepare(graph)
    coster = GraphCoster(cost_model, costed_at(graph))
    expander = Expander(start, rules, coster, 2 * max(len(start.nodes), 1))
    cost0 = coster(start)
    eps = 1e-9 * max(abs(cost0), 1e-9)
    labels0 = {n.output: (-1, i) for i, n in enumerate(start.nodes)}
    root = _Seq(start, cost0, 0.0, frozenset(), labels0, (-2, -1), [], rw.structure_hash(start))
    best = root
    written = _Best(start, coster, clock, eps)
    expanded = generated = 0
    seen = {root.hash}  # OCGGS deduplicates within a level; across levels too here, so it ends

    def children(s: _Seq, dependent_only: bool = False) -> list[_Seq]:
        nonlocal best, expanded, generated
        if depth is not None and len(s.path) >= depth:
            return []  # OCGGS's K: sequences no longer than depth
        expanded += 1
        out = []
        step = len(s.path)
        for m, change, c, hash_of, build in expander.neighbours(s.graph, s.cost, s.hash, clock):
            dependent = bool(m.nodes & s.created)
            if dependent_only and not dependent:
                continue
            key = max(s.labels.get(t, (-1, -1)) for t in m.nodes)
            if prune and s.path and not dependent and not key > s.key:
                continue
            fresh = _unseen(hash_of, build, seen)
            if fresh is None:
                continue
            h, new = fresh
            generated += 1
            created = frozenset(n.output for n in change.added if n.output in new.producers)
            labels = dict(s.labels)
            for i, t in enumerate(sorted(created)):
                labels[t] = (step, i)
            change_cost = c - s.cost
            child = _Seq(new, c, 0.0 if abs(change_cost) <= eps else change_cost, created, labels, key,
                         s.path + [m.rule.name], h)
            out.append(child)
            if c < best.cost - eps:
                best = child
                written.offer(new, child.path)
        return out

    def potential(s: _Seq) -> float:
        """The largest drop of a dependent follow-up step (negative: a drop), OCGGS's ranking of raises."""
        s.followups = children(s, dependent_only=True)
        return min((c.change for c in s.followups), default=math.inf)

    def top(items: list[_Seq], key: Callable[[_Seq], float]) -> list[_Seq]:
        items = list(items)  # every graph is new (hashed when generated)
        rng.shuffle(items)
        return sorted(items, key=key)[:k]

    level = children(root)
    reason = "no more substitutions"
    while level:
        if clock.out():
            reason = "time budget"
            break
        if depth is not None and len(level[0].path) >= depth:
            reason = "depth budget"
            break
        ups = [s for s in level if s.change > 0]
        for s in ups:
            if clock.out():
                break
            s.potential = potential(s)
        down = top([s for s in level if s.change <= 0], lambda s: s.cost)
        up = top(ups, lambda s: s.potential)
        pairs: list[_Seq] = []
        for s in up:
            pairs += [c for c in s.followups or () if c.change <= 0]
        chosen = down + top(pairs, lambda s: s.cost)
        say(f"  sampling: level {len(level[0].path)}, {len(level)} graphs, {len(chosen)} kept, best {best.cost:.6g}")
        level = [c for s in chosen for c in children(s)]
    if clock.out():
        reason = "time budget"
    return SearchResult(written.graph, written.cost, written.trace[0][1], written.trace, expanded, generated,
                        clock.elapsed(), reason, written.path)

