"""Repeated blocks: a model's identical layers, found so that one of them is optimized for all.

A transformer of L layers is L copies of one block: the same operators, parameters and shapes, each with its own
weights. Saturating all of them costs L times one, and rewrites between layers (the residual stream's sums
re-associated across layers) make the e-graph grow faster than L. :func:`find_repeats` finds the longest run of
consecutive blocks of nodes (in the graph's topological order) in which every node is the shift of the node one
block earlier: the same operator, parameters and output shape, weights of the same shapes, and as inputs the
shifted producers (or the very same tensors: an attention mask or a position table computed once and read by
every layer). :func:`reduce_repeats` makes the graph the engine sees from it: the nodes before the blocks (the
prefix), the first block and the nodes after the blocks (the suffix), as pieces with no tensor between them (what
one piece reads from another is a graph input under a placeholder name), so no rewrite crosses a block's boundary.
:meth:`Reduction.stitch` puts an optimized reduced graph back together: the prefix, the block once per instance
with that instance's weights and inputs, and the suffix. Pure IR: no engine, no ONNX.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from eqsat.ir.graph import Graph, Node, TensorInfo, computed_from_weights
from eqsat.ir.names import NameAllocator

__all__ = ["MIN_BLOCK_NODES", "Reduction", "Repeats", "find_repeats", "reduce_repeats"]

#: blocks smaller than this are not worth the bookkeeping (and short periods match by chance)
MIN_BLOCK_NODES = 8
_IN, _OUT, _PREFIX = "__block_in", "__block_out", "__prefix"


@dataclass(frozen=True)
class Repeats:
    """``count`` consecutive blocks of ``size`` nodes, the first starting at ``graph.nodes[start]``."""

    start: int
    size: int
    count: int

    def block(self, m: int) -> range:
        """The node indices of block ``m``."""
        return range(self.start + m * self.size, self.start + (m + 1) * self.size)

    @property
    def end(self) -> int:
        """The index of the first node after the blocks."""
        return self.start + self.count * self.size


def _same_weight(w: Mapping[str, np.ndarray], u: str, v: str) -> bool:
    """Whether ``u`` and ``v`` are both weights of one shape and dtype (their values may differ)."""
    return u in w and v in w and w[u].shape == w[v].shape and w[u].dtype == w[v].dtype


class _Shifts:
    """Whether node ``b`` is node ``a`` shifted by ``b - a`` (see the module docstring)."""

    def __init__(self, graph: Graph) -> None:
        self.g = graph
        self.nodes = graph.nodes
        self.index = {n.output: k for k, n in enumerate(graph.nodes)}
        shapes, dtypes = graph.shapes, graph.dtypes
        self.sig = [(n.op, _alike_params(n), shapes[n.output], dtypes[n.output]) for n in graph.nodes]
        self.inputs = {i.name: (i.shape, i.dtype) for i in graph.inputs}

    def own_input(self, u: str, v: str) -> bool:
        """Whether ``u`` and ``v`` are two graph inputs of one shape and dtype, each block's own (a KV cache's
        past keys and values of one layer each), like weights."""
        return u != v and u in self.inputs and self.inputs[u] == self.inputs.get(v)

    def alike(self, a: int, b: int) -> bool:
        """The same operator, parameters, output shape and dtype, and as many inputs (an opaque node: the same
        ONNX operator and attributes, whatever its node's name; never one with subgraphs)."""
        x, y = self.nodes[a], self.nodes[b]
        return self.sig[a] == self.sig[b] and len(x.inputs) == len(y.inputs) and not _has_subgraphs(x)

    def same(self, a: int, b: int) -> bool:
        if not self.alike(a, b):
            return False
        w = self.g.weights
        for u, v in zip(self.nodes[a].inputs, self.nodes[b].inputs, strict=True):
            if u in w:
                if not _same_weight(w, u, v):
                    return False
            elif u in self.index:
                if v != u and self.index.get(v, -1) != self.index[u] + (b - a):
                    return False
            elif v != u and not self.own_input(u, v):  # a graph input: the same one, or each block's own
                return False
        return True


def _alike_params(n: Node) -> tuple[tuple[str, object], ...]:
    """What makes two nodes the same operation: the parameters, less an opaque node's key (the name of the ONNX
    node it stands for, different in every layer; its operator type and attributes are compared)."""
    return tuple(kv for kv in n.params if kv[0] != "key") if n.is_opaque else n.params


def _has_subgraphs(n: Node) -> bool:
    """An opaque control-flow node, whose subgraphs read tensors from around it by name (``outer``)."""
    return n.is_opaque and bool(n.p.get("outer"))


def _opaque_key(n: Node) -> str | None:
    return n.p["key"] if n.is_opaque else None


def find_repeats(graph: Graph, min_size: int = MIN_BLOCK_NODES) -> Repeats | None:
    """The longest run (most nodes) of at least two repeated blocks of at least ``min_size`` nodes whose
    boundaries :func:`reduce_repeats` can cut (see :func:`_place`), or None."""
    sh = _Shifts(graph)
    n = len(graph.nodes)
    last: dict[object, int] = {}
    gaps: Counter[int] = Counter()
    for k, s in enumerate(sh.sig):  # candidate block sizes: distances between equal nodes
        if s in last and k - last[s] >= min_size:
            gaps[k - last[s]] += 1
        last[s] = k
    best: Repeats | None = None
    for size, _ in gaps.most_common(24):
        if 2 * size > n:
            continue
        good = [sh.same(i, i + size) for i in range(n - size)]
        i = 0
        while i < n - size:
            if not good[i]:
                i += 1
                continue
            j = i
            while j < n - size and good[j]:
                j += 1
            found = _place(graph, sh, i, j, size)  # nodes i .. j - 1 + size repeat with period size
            while found and (grown := _extend_back(graph, sh, found)) is not found:
                found = grown
            if found and (best is None or found.size * found.count > best.size * best.count):
                best = found
            i = j
    return best


#: operators whose output, passed on to the next block, could fold with what reads it there (a product with a
#: weight, read by another: ``(x @ W1) @ W2 = x @ (W1 @ W2)``): a cut after them would forbid that rewrite
_FOLDING = frozenset({"matmul", "matmul_t", "conv2d", "conv2d_add"})


def _place(graph: Graph, sh: _Shifts, i: int, j: int, size: int) -> Repeats | None:
    """Where the blocks of a periodic run ``[i, j + size)`` start: of the phases that :func:`_cut` accepts, one
    that passes the fewest products on to the next block (:data:`_FOLDING`: a rewrite lost per block), then the
    one that gives the most blocks (one more saturated whole costs only time), then the fewest tensors read from
    outside."""
    options = []
    for p in range(i, min(i + size, j)):
        count = (j - p) // size + 1
        if count < 2:
            continue
        rep = Repeats(p, size, count)
        cut = _cut(graph, sh, rep)
        if cut is not None:
            folding = sum(1 for r in cut[0] if graph.nodes[p + r].op in _FOLDING)  # chained positions
            options.append((folding, -count, len(cut[0]) + len(cut[1]), p, rep))
    return min(options, key=lambda o: o[:4])[4] if options else None


def _cut(graph: Graph, sh: _Shifts, rep: Repeats) -> tuple[dict[int, str], list[str]] | None:
    """The block's chained inputs (position in a block whose tensor the next block reads -> the tensor before the
    blocks that the first block reads in its place) and shared inputs (tensors every block reads), or None where a
    block reads anything else from outside (a tensor two blocks back, one tensor of the prefix in two places of
    the chain), or the nodes after the blocks read a block's tensor other than the last block's, or a graph
    output is an earlier block's tensor."""
    idx, nodes = sh.index, graph.nodes
    b0, b1 = rep.block(0), rep.block(1)
    chained: dict[int, str] = {}
    shared: list[str] = []
    for t in b1:
        for v, u in zip(nodes[t].inputs, nodes[t - rep.size].inputs, strict=True):
            if v in graph.weights or idx.get(v, -1) in b1 or sh.own_input(u, v):
                continue
            if idx.get(v, -1) in b0:  # the chain: block 0 reads a tensor from before the blocks there
                r = idx[v] - rep.start
                if idx.get(u, -1) >= rep.start or chained.setdefault(r, u) != u:
                    return None
            elif idx.get(v, -1) < rep.start:  # a graph input or a tensor of the prefix
                if v != u:
                    return None
                if v not in shared:
                    shared.append(v)
            else:
                return None
    if set(chained.values()) & set(shared) or len(set(chained.values())) != len(chained):
        return None  # one tensor would stand for two inputs of the block
    shapes, dtypes = graph.shapes, graph.dtypes
    for r, u in chained.items():  # the first block's input is what the others get there
        v = nodes[rep.start + r].output
        if shapes[u] != shapes[v] or dtypes[u] != dtypes[v]:
            return None
    if not all(_reads_as_block_0(graph, sh, rep, m, chained, shared) for m in range(2, rep.count)):
        return None  # block-by-block shifts do not compose: a block two on may read elsewhere
    sources = set(chained.values()) | set(shared)
    for t in b0:  # block 0 reads the prefix only in those two ways
        for u in nodes[t].inputs:
            if u not in graph.weights and idx.get(u, -1) not in b0 and u not in sources and u not in sh.inputs:
                return None
    last = rep.block(rep.count - 1)
    for n in nodes[rep.end:]:
        for v in n.inputs:
            k = idx.get(v, -1)
            if rep.start <= k < last.start:
                return None
    outputs = {idx.get(o, -1) for o in graph.outputs}
    # an earlier block's tensor may be a graph output only where every block's tensor there is one (a KV
    # cache's present keys and values): each instance then writes its own
    places = {(k - rep.start) % rep.size for k in outputs if rep.start <= k < rep.end}
    if any(idx.get(nodes[rep.start + m * rep.size + r].output, -1) not in outputs
           for r in places for m in range(rep.count)):
        return None
    return chained, shared


def _reads_as_block_0(graph: Graph, sh: _Shifts, rep: Repeats, m: int, chained: Mapping[int, str],
                      shared: list[str]) -> bool:
    """Whether every node of block ``m`` reads what its counterpart in block 0 reads, moved ``m`` blocks on: its
    own block's tensors, block ``m - 1``'s in the chain's places, the shared tensors, weights of one shape, graph
    inputs of one shape (each block's own)."""
    nodes, w, idx = graph.nodes, graph.weights, sh.index
    first = {u: r for r, u in chained.items()}
    for t in rep.block(0):
        for u, v in zip(nodes[t].inputs, nodes[t + m * rep.size].inputs, strict=True):
            if u in w:
                if not _same_weight(w, u, v):
                    return False
            elif u in first:
                if idx.get(v, -1) != rep.start + (m - 1) * rep.size + first[u]:
                    return False
            elif u in shared:
                if v != u:
                    return False
            elif idx.get(u, -1) in rep.block(0):
                if idx.get(v, -1) != idx[u] + m * rep.size:
                    return False
            elif not sh.own_input(u, v):
                return False
    return True


def _extend_back(graph: Graph, sh: _Shifts, rep: Repeats) -> Repeats:
    """``rep`` with the block before its first one added, where that block is the first one's shift except in
    what it reads from before it (the first layer reads the embeddings where the others read the layer before,
    and its input need not sit right before it: an exporter may compute a mask in between)."""
    s, size = rep.start, rep.size
    if s - size < 0:
        return rep
    w, idx, nodes = graph.weights, sh.index, graph.nodes
    for t in range(size):
        a, b = s - size + t, s + t
        if not sh.alike(a, b):
            return rep
        for u, v in zip(nodes[a].inputs, nodes[b].inputs, strict=True):
            kv = idx.get(v, -1)
            if u in w or v in w:
                if not _same_weight(w, u, v):
                    return rep
            elif kv >= s:  # inside the later block: the shift of what the earlier block reads
                if idx.get(u, -1) != kv - size:
                    return rep
            elif kv >= s - size:  # the chain: the earlier block reads something from before it
                if idx.get(u, -1) >= s - size:
                    return rep
            elif u != v and not sh.own_input(u, v):  # read by both from before: the same tensor, or own inputs
                return rep
    grown = Repeats(s - size, size, rep.count + 1)
    return grown if _cut(graph, sh, grown) is not None else rep


@dataclass(frozen=True)
class Reduction:
    """A graph with repeated blocks, and the reduced graph the engine saturates in its place."""

    graph: Graph  # the graph as imported
    reduced: Graph  # the prefix, one block and the suffix, as pieces (module docstring)
    repeats: Repeats
    block_inputs: tuple[str, ...]  # the placeholders the block piece reads, in order
    block_sources: tuple[tuple[str, ...], ...]  # per instance, the tensor each placeholder stands for
    slots: tuple[int, ...]  # positions in a block whose tensors are read after it
    weights: tuple[Mapping[str, str], ...]  # per instance, block 0's weight name -> this instance's
    prefix_reads: tuple[str, ...]  # the prefix's tensors the suffix reads, in the order of their placeholders
    #: per instance, block 0's opaque nodes' keys -> this instance's (each instance writes its own ONNX nodes)
    opaque_keys: tuple[Mapping[str, str], ...] = ()

    def describe(self) -> str:
        """One line for the report."""
        r = self.repeats
        return (f"{r.count} repeated blocks of {r.size} nodes: one optimized, its result applied to every one "
                "(rewrites across a block's boundary not tried)")

    def stitch(self, reduced: Graph) -> Graph:
        """The whole graph from an optimized reduced graph (the same inputs and outputs as :attr:`reduced`)."""
        r, g = self.repeats, self.graph
        out_of = {n.output: n for n in reduced.nodes}
        block_outputs = [g.nodes[r.start + s].output for s in self.slots]
        piece = _reachable(out_of, block_outputs)
        others = _reachable(out_of, [o for o in reduced.outputs if o not in set(block_outputs)])
        taken = {i.name for i in g.inputs} | set(g.weights) | set(reduced.weights) | {n.output for n in g.nodes}
        taken |= {n.output for n in reduced.nodes}
        names = NameAllocator(taken)
        slot_names = [[g.nodes[r.start + m * r.size + s].output for s in self.slots] for m in range(r.count)]
        # names the read-back made up for the reduced graph that a later instance's slot takes (verbatim, below)
        clash = {o for m in range(1, r.count) for o in slot_names[m]} & {n.output for n in reduced.nodes}
        if clash:
            fresh = {o: names.fresh(f"{o}_r") for o in clash}
            reduced = Graph.from_sorted(reduced.inputs, reduced.weights, tuple(
                Node(n.op, n.params, tuple(fresh.get(i, i) for i in n.inputs), fresh.get(n.output, n.output))
                for n in reduced.nodes), tuple(fresh.get(o, o) for o in reduced.outputs), reduced.name, reduced.meta)
            out_of = {n.output: n for n in reduced.nodes}
            block_outputs = [fresh.get(o, o) for o in block_outputs]
            piece = _reachable(out_of, block_outputs)
            others = _reachable(out_of, [o for o in reduced.outputs if o not in set(block_outputs)])
        nodes: list[Node] = [n for n in reduced.nodes if n.output in others]
        emitted = {n.output for n in nodes}
        for m in range(r.count):
            ren: dict[str, str] = dict(zip(self.block_inputs, self.block_sources[m], strict=True))
            ren.update(self.weights[m])
            ren.update(zip(block_outputs, slot_names[m], strict=True))
            for n in reduced.nodes:
                if n.output not in piece or n.output in ren:
                    continue
                ren[n.output] = n.output if m == 0 else names.fresh(f"{n.output}_b{m}")
            keys = self.opaque_keys[m] if self.opaque_keys else {}
            for n in reduced.nodes:
                if n.output in piece and not (m == 0 and n.output in emitted):
                    params = n.params
                    if keys and (key := _opaque_key(n)) in keys:
                        params = tuple((k, keys[key] if k == "key" else v) for k, v in n.params)
                    nodes.append(Node(n.op, params, tuple(ren.get(i, i) for i in n.inputs), ren[n.output]))
        last = dict(zip((f"{_OUT}{s}" for s in self.slots), slot_names[-1], strict=True))
        prefix = {f"{_PREFIX}{k}": v for k, v in enumerate(self.prefix_reads)}
        nodes = [Node(n.op, n.params, tuple(last.get(i, prefix.get(i, i)) for i in n.inputs), n.output)
                 if n.output in others else n for n in nodes]
        weights = {**g.weights, **{k: v for k, v in reduced.weights.items() if k not in g.weights}}
        meta = {**reduced.meta}
        return Graph(g.inputs, weights, tuple(nodes), g.outputs, g.name, meta)

def _reachable(producers: Mapping[str, Node], roots: list[str]) -> set[str]:
    """The node outputs the ``roots`` are computed from (themselves included), through ``producers``."""
    seen: set[str] = set()
    stack = [o for o in roots if o in producers]
    while stack:
        o = stack.pop()
        if o in seen:
            continue
        seen.add(o)
        stack.extend(i for i in producers[o].inputs if i in producers and i not in seen)
    return seen


def _earliest_first(graph: Graph) -> Graph:
    """``graph`` with its nodes in order of their depth (the longest path from an input or weight), then as given:
    a computation that reads only inputs (an attention mask, a position table) comes before the layers, where an
    exporter may have put it inside the first one and made that layer unlike the others."""
    depth: dict[str, int] = {}
    for n in graph.nodes:
        depth[n.output] = 1 + max((depth.get(i, 0) for i in n.inputs), default=0)
    order = sorted(range(len(graph.nodes)), key=lambda k: (depth[graph.nodes[k].output], k))
    return Graph.from_sorted(graph.inputs, graph.weights, tuple(graph.nodes[k] for k in order), graph.outputs,
                             graph.name, graph.meta, shapes=graph.shapes)


def reduce_repeats(graph: Graph, repeats: Repeats | None = None) -> Reduction | None:
    """The :class:`Reduction` of ``graph`` at ``repeats`` (found by :func:`find_repeats` when not given, in the
    graph's order or :func:`_earliest_first`, whichever covers more nodes), or None where the graph has no
    repeated blocks."""
    if repeats is None:
        found = [(r, g) for g in (graph, _earliest_first(graph)) if (r := find_repeats(g)) is not None]
        if not found:
            return None
        repeats, graph = max(found, key=lambda f: f[0].size * f[0].count)
    rep = repeats
    sh = _Shifts(graph)
    cut = _cut(graph, sh, rep)
    if cut is None:
        return None
    chained, shared = cut
    g, nodes, shapes, dtypes = graph, graph.nodes, graph.shapes, graph.dtypes
    idx = sh.index
    last = rep.block(rep.count - 1)
    after = {v for n in nodes[rep.end:] for v in n.inputs} | set(g.outputs)
    slots = sorted(set(chained) | {k - last.start for k in last if nodes[k].output in after})
    # the block piece: its external reads become placeholders
    sources: list[list[str]] = [[] for _ in range(rep.count)]
    block_inputs: list[str] = []
    for k, v in enumerate(shared):
        block_inputs.append(f"{_IN}{k}")
        for m in range(rep.count):
            sources[m].append(v)
    for s, first in sorted(chained.items()):
        block_inputs.append(f"{_IN}{len(block_inputs)}")
        sources[0].append(first)
        for m in range(1, rep.count):
            sources[m].append(nodes[rep.start + (m - 1) * rep.size + s].output)
    ren0 = dict(zip(sources[0], block_inputs, strict=True))
    block_nodes = [Node(n.op, n.params, tuple(ren0.get(i, i) for i in n.inputs), n.output)
                   for n in nodes[rep.start:rep.start + rep.size]]
    # per instance, block 0's weights and own graph inputs -> its own (node by node, input by input), and block
    # 0's opaque nodes' keys -> its own (an ONNX node of several outputs has one key for them all)
    weights: list[dict[str, str]] = []
    opaque_keys: list[dict[str, str]] = []
    for m in range(rep.count):
        wm: dict[str, str] = {}
        km: dict[str, str] = {}
        for t in rep.block(0):
            for u, v in zip(nodes[t].inputs, nodes[t + m * rep.size].inputs, strict=True):
                if (u in g.weights or sh.own_input(u, v)) and wm.setdefault(u, v) != v:
                    return None  # one weight of block 0 stands for two of another block
            ku, kv = _opaque_key(nodes[t]), _opaque_key(nodes[t + m * rep.size])
            if ku is not None and (kv is None or km.setdefault(ku, kv) != kv):
                return None
        weights.append(wm)
        opaque_keys.append(km)
    # the suffix: what it reads of the last block and of the prefix becomes placeholders
    out_ph = {nodes[last.start + s].output: f"{_OUT}{s}" for s in slots}
    prefix_reads: list[str] = []
    suffix_nodes = []
    for n in nodes[rep.end:]:
        ins = []
        for v in n.inputs:
            if v in out_ph:
                ins.append(out_ph[v])
            elif 0 <= idx.get(v, -1) < rep.start:
                if v not in prefix_reads:
                    prefix_reads.append(v)
                ins.append(f"{_PREFIX}{prefix_reads.index(v)}")
            else:
                ins.append(v)
        suffix_nodes.append(Node(n.op, n.params, tuple(ins), n.output))
    prefix_nodes = list(nodes[:rep.start])
    placeholders = [TensorInfo(ph, shapes[src], dtypes[src]) for ph, src in zip(block_inputs, sources[0], strict=True)]
    placeholders += [TensorInfo(ph, shapes[t], dtypes[t]) for t, ph in out_ph.items()
                     if any(ph in n.inputs for n in suffix_nodes)]
    placeholders += [TensorInfo(f"{_PREFIX}{k}", shapes[v], dtypes[v]) for k, v in enumerate(prefix_reads)]
    prefix_outputs = [v for v in [*sources[0], *prefix_reads] if 0 <= idx.get(v, -1) < rep.start]
    block_outputs = [nodes[rep.start + s].output for s in slots]
    mapped = [o for o in g.outputs if not rep.start <= idx.get(o, -1) < rep.end]
    outputs = list(dict.fromkeys([*mapped, *prefix_outputs, *block_outputs]))
    used = {i for n in [*prefix_nodes, *block_nodes, *suffix_nodes] for i in n.inputs}
    inputs = tuple(i for i in g.inputs if i.name in used or i.name in outputs) + tuple(placeholders)
    kept = {k: w for k, w in g.weights.items() if k in used or k in outputs}
    if not any(not computed_from_weights(n.op, n.inputs, kept) for n in block_nodes):
        return None
    reduced = Graph(inputs, kept, tuple(prefix_nodes + block_nodes + suffix_nodes), tuple(outputs), g.name,
                    dict(g.meta))
    return Reduction(graph, reduced, rep, tuple(block_inputs), tuple(tuple(s) for s in sources), tuple(slots),
                     tuple(weights), tuple(prefix_reads), tuple(opaque_keys))
