"""Passes over IR graphs: the folds the import makes, the flattening of the e-graph's binary chains, the views
as export writes them, and the n-way merges of operators that share their first input (the registry's
``sibling_merge``).

The import folds what a runtime fuses when it loads a model, so that a graph is priced as it runs: an operator
into the convolution whose kernel and bias absorb it (``OpSpec.weight_fold``: a batch norm), a pair of operators
into the fused form that computes them (``OpSpec.fuses``: a conv2d and a residual ewadd as conv2d_add), and an
activation into the operator before it (``OpSpec.activation``: a relu as a conv's ``act``). What folds into what
is the registry's; each pass here is the graph surgery, and returns the same graph object where nothing applies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from eqsat import ops
from eqsat.ir.graph import Graph, Node, computed_from_weights, make_node
from eqsat.ir.names import NameAllocator


def flatten_concats(graph: Graph) -> Graph:
    """Merge a variadic node (a concat) into its only consumer of the same operator and parameters (a concat
    along the same axis): the e-graph's left-nested binary chains back to n-ary nodes."""
    consumers = graph.consumers
    outputs = set(graph.outputs)
    by_out = graph.producers
    merged: dict[str, Node] = {}
    dropped: set[str] = set()
    for n in graph.nodes:
        if not n.spec.variadic:
            continue
        ins: list[str] = []
        for i in n.inputs:
            src = merged.get(i) or by_out.get(i)
            if (src is not None and src.op == n.op and src.params == n.params
                    and len(consumers.get(i, [])) == 1 and i not in outputs):
                ins.extend(src.inputs)
                dropped.add(i)
            else:
                ins.append(i)
        if len(ins) != len(n.inputs):
            merged[n.output] = Node(n.op, n.params, tuple(ins), n.output)
    if not merged:
        return graph
    new_nodes = tuple(merged.get(n.output, n) for n in graph.nodes if n.output not in dropped)
    return Graph(graph.inputs, graph.weights, new_nodes, graph.outputs, graph.name, graph.meta)


def import_folds(graph: Graph) -> Graph:
    """The folds the import makes, in order: weights (:func:`fold_weights`), pairs (:func:`fuse_pairs`), then
    activations (:func:`fuse_activations`), on the live graph."""
    return fuse_activations(fuse_pairs(fold_weights(graph.live())))


def _fuse_producers(graph: Graph, fuse: Callable[[Node, Node, int], Node | None],
                    weights: Mapping[str, np.ndarray] | None = None) -> Graph:
    """Replace each node ``n`` by ``fuse(n, p, k)`` where ``p`` computes ``n``'s input ``k``, ``n`` is the only
    reader of that tensor and it is not a graph output; ``p`` goes. ``fuse`` returns ``None`` where it does not
    apply (the first input for which it applies wins). ``weights``: the graph's weights with any ``fuse`` added."""
    consumers = graph.consumers
    outputs = set(graph.outputs)
    by_out = graph.producers
    replaced: dict[str, Node] = {}  # output of a node -> the fused node that now computes it
    dropped: set[str] = set()  # outputs of the producers fused away
    for n in graph.nodes:
        for k, name in enumerate(n.inputs):
            p = by_out.get(name)
            if p is None or name in outputs or name in dropped or len(consumers.get(name, [])) != 1:
                continue
            new = fuse(n, p, k)
            if new is not None:
                replaced[n.output] = new
                dropped.add(name)
                break
    if not replaced:
        return graph
    nodes = tuple(replaced.get(n.output, n) for n in graph.nodes if n.output not in dropped)
    return Graph(graph.inputs, graph.weights if weights is None else weights, nodes, graph.outputs, graph.name,
                 graph.meta)


def _no_activation(n: Node) -> bool:
    """Whether ``n`` applies no fused activation (it has no ``act`` parameter, or it is none)."""
    return n.p.get("act", ops.ACT_NONE) == ops.ACT_NONE


def fold_weights(graph: Graph) -> Graph:
    """Fold an operator with a weight fold (``OpSpec.weight_fold``: a batch norm) into the operator computing its
    first input (a conv2d), as onnxruntime does when it loads a model: that operator reads in place of its weights
    the ones the fold's operators compute (``bnfold_w``, ``bnfold_b``: kernel ``w * f`` and bias ``(b - mean) * f +
    bias`` per output channel, ``f = scale / sqrt(var + eps)``), once here, from the folded operator's weights in
    float64. Only where that is the same computation up to rounding: the producer has no fused activation, its
    output is read by the folded operator alone and is not a graph output, and every other input of both is a
    weight. Leaves every other such operator as it is (the rule ``conv-batchnorm-fold`` still folds it inside the
    e-graph, where a conv may have other readers)."""
    weights = dict(graph.weights)
    # a taken name gets the first free of _2, _3, ...
    names = NameAllocator([i.name for i in graph.inputs] + list(weights) + [n.output for n in graph.nodes], start=2)

    def fold(n: Node, src: Node, k: int) -> Node | None:
        how = n.spec.weight_fold
        if (how is None or k != 0 or src.op != how.into or not _no_activation(src)
                or not all(i in graph.weights for i in (*src.inputs[1:], *n.inputs[1:]))):
            return None
        # the fold's operators read their inputs by name: the producer's weights as they are, the folded ones
        # in float64
        named = {**{x: graph.weights[i] for x, i in zip(src.spec.inputs[1:], src.inputs[1:], strict=True)},
                 **{x: graph.weights[i].astype(np.float64) for x, i in zip(n.spec.inputs[1:], n.inputs[1:],
                                                                           strict=True)}}
        new = []
        for op in how.weights:
            spec = ops.get(op)
            params = spec.normalize({q: v for q, v in n.p.items() if q in spec.param_names()})
            name = names.fresh(f"{n.output}_{op}")
            weights[name] = spec.evaluate(params, [named[x] for x in spec.inputs])
            new.append(name)
        return Node(src.op, src.params, (src.inputs[0], *new), n.output)

    folded = _fuse_producers(graph, fold, weights)
    return graph if folded is graph else folded.live()


def fuse_pairs(graph: Graph) -> Graph:
    """Fold a pair of operators into the fused form that computes them (``OpSpec.fuses``: an ``ewadd`` of a
    ``conv2d`` and a residual as a ``conv2d_add``, which onnxruntime runs as one kernel that adds the residual while
    writing the output): where the producer has no fused activation, its output is read by the consumer alone and is
    not a graph output, and the consumer's two operands have one shape (no broadcast). The first operand that
    qualifies is the producer's; the other becomes the fused form's last input."""
    shapes = graph.shapes
    fused = {spec.fuses: spec for spec in ops.REGISTRY.values() if spec.fuses is not None}

    def fuse(n: Node, src: Node, k: int) -> Node | None:
        spec = fused.get((src.op, n.op))
        if (spec is None or len(n.inputs) != 2 or shapes[n.inputs[0]] != shapes[n.inputs[1]]
                or not _no_activation(src)):
            return None
        return Node(spec.name, spec.param_tuple(src.p), (*src.inputs, n.inputs[1 - k]), n.output)

    return _fuse_producers(graph, fuse)


def fuse_activations(graph: Graph) -> Graph:
    """Fold an activation (``OpSpec.activation``: a relu) into the operator that computes its input when that
    operator has a fused-activation parameter (``act``) set to none and the activation is the only reader of its
    output (as onnxruntime fuses Conv + Relu). The graph computes the same, and is priced as the runtime runs it."""

    def fuse(n: Node, src: Node, k: int) -> Node | None:
        act = n.spec.activation
        if act is None or "act" not in src.spec.param_names() or not _no_activation(src):
            return None
        return Node(src.op, src.spec.param_tuple({**src.p, "act": act}), src.inputs, n.output)

    return _fuse_producers(graph, fuse)


def unflagged(n: Node) -> Node:
    """``n`` as its plain operator (``TransposeFlags.plain``: matmul for matmul_t) where no flag is set: the same
    product (a MatMul or a Gemm)."""
    flags = n.spec.transpose_flags
    if flags is None or not flags.plain or any(n.p[f] for f in flags.params):
        return n
    return make_node(flags.plain, {}, n.inputs, n.output)


def _row_product(n: Node, producers: Mapping[str, Node]) -> tuple[str, str, str] | None:
    """``(operator, rows, matrix)`` where ``n`` multiplies rows by a matrix as that operator (``OpSpec.row_product``,
    without parameters): itself, its flagless form's plain operator, or that operator reading a 2-D transpose's
    input where ``n`` flags the transpose of its second operand (a projection whose weight the e-graph transposed
    and export writes back as the weight with Gemm's flag); else None."""
    plain = unflagged(n)
    if plain.spec.row_product and not plain.params:
        return plain.op, plain.inputs[0], plain.inputs[1]
    flags = n.spec.transpose_flags
    if flags is None or not flags.plain or not ops.get(flags.plain).row_product \
            or tuple(n.p[f] for f in flags.params) != (0, 1):
        return None
    t = producers.get(n.inputs[1])
    if t is None or not t.spec.permutes or tuple(t.p[t.spec.permutes]) != (1, 0):
        return None
    return flags.plain, n.inputs[0], t.inputs[0]


def written_views(graph: Graph) -> Graph:
    """The graph as export writes its views: the same computation in fewer nodes. First a product of rows by a
    matrix (``OpSpec.row_product``; a flagless ``matmul_t`` as its plain form) whose rows a view flattened from
    a tensor of rank 3 or more, as the import reads a transformer's projection (activations ``(batch, seq,
    hidden)`` as ``(batch * seq, hidden)`` rows), is computed on that tensor, its weight-only matrix viewed to
    that rank with leading sizes 1, where every reader of the product is a view or a piece of its columns that
    only views read (the pieces then cut its last axis): the rows' data is the same, read under the leading
    sizes, and no view is written before and after the product. Then a view of a view reads the first one's
    input, and a view to its input's own shape is dropped: its readers read that input, or, where the view is a
    graph output and the only reader of a node's output, that node writes the graph output. Returns the same
    graph object where nothing applies."""
    shapes, producers, consumers = graph.shapes, graph.producers, graph.consumers
    outputs = set(graph.outputs)
    weight_only = set(graph.weights)
    for n in graph.nodes:
        if computed_from_weights(n.op, n.inputs, weight_only):
            weight_only.add(n.output)
    names = NameAllocator([i.name for i in graph.inputs] + list(graph.weights) + [n.output for n in graph.nodes])
    replaced: dict[str, Node] = {}  # by output
    added: dict[str, Node] = {}  # by the product they are read by
    for n in graph.nodes:
        product = None if n.output in outputs else _row_product(n, producers)
        if product is None:
            continue
        op, rows, matrix = product
        flat = producers.get(rows)
        if flat is None or not flat.spec.view or matrix not in weight_only or len(shapes[matrix]) != 2:
            continue
        x = flat.inputs[0]
        lead = shapes[x][:-1]
        if len(lead) < 2 or shapes[rows] != (int(np.prod(lead)), shapes[x][-1]):
            continue
        readers = consumers.get(n.output, [])
        pieces = [r for r in readers if not r.spec.view]
        if not readers or not all(
                r.spec.glue == "cut" and r.p[r.spec.piece_axis] == 1 and r.output not in outputs
                and all(c.spec.view for c in consumers.get(r.output, [])) for r in pieces):
            continue
        viewed = names.fresh(f"{matrix}_rank{len(lead) + 1}")
        added[n.output] = make_node(flat.op, {flat.spec.params[0][0]: (1,) * (len(lead) - 1) + shapes[matrix]},
                                    [matrix], viewed)
        replaced[n.output] = make_node(op, {}, [x, viewed], n.output)
        for r in pieces:
            replaced[r.output] = make_node(r.op, {**r.p, r.spec.piece_axis: len(lead)}, r.inputs, r.output)
    nodes = [m for n in graph.nodes for m in ((added[n.output],) if n.output in added else ()) + (
        replaced.get(n.output, n),)]
    # views of views, and views that change nothing
    source: dict[str, str] = {}  # tensor -> the tensor it is read as
    renamed: dict[str, str] = {}  # a node's output -> the graph output its only reader, a view, was
    out: list[Node] = []
    by_out = {n.output: n for n in nodes}
    new = Graph(graph.inputs, graph.weights, tuple(nodes), graph.outputs, graph.name, graph.meta)
    new_shapes, readers = new.shapes, {t: len(r) for t, r in new.consumers.items()}
    changed = bool(replaced)
    for n in nodes:
        ins = tuple(source.get(i, i) for i in n.inputs)
        if n.spec.view:
            first = by_out.get(ins[0])
            while first is not None and first.spec.view:
                ins = first.inputs
                first = by_out.get(ins[0])
            if new_shapes[ins[0]] == new_shapes[n.output]:
                if n.output not in outputs:
                    source[n.output] = ins[0]
                    changed = True
                    continue
                src = by_out.get(ins[0])
                if (src is not None and not src.is_opaque and ins[0] not in outputs and ins == n.inputs
                        and readers.get(ins[0]) == 1):
                    renamed[ins[0]] = n.output  # its producer writes the graph output itself
                    changed = True
                    continue
        if ins != n.inputs:
            changed = True
            n = Node(n.op, n.params, ins, n.output)
        by_out[n.output] = n
        out.append(n)
    if not changed:
        return graph
    out = [Node(n.op, n.params, n.inputs, renamed.get(n.output, n.output)) for n in out]
    return Graph(graph.inputs, graph.weights, tuple(out), graph.outputs, graph.name, graph.meta).live()
def sibling_groups(graph: Graph, min_size: int = 3) -> list[tuple[list[Node], tuple[tuple[int, ...], int]]]:
    """Nodes that share their first input and merge into one (the registry's ``sibling_merge``), in groups of
    at least ``min_size`` (the engine leaves pairs to the two-output rules; the first answer merges them too),
    each with its merge plan."""
    shapes = graph.shapes
    groups: dict[tuple[Any, ...], list[Node]] = {}
    # the same computation of the same tensors is one e-class in the e-graph (three projections importing
    # their own reshape of one activation share it): group by structure, not by tensor name
    same: dict[str, Any] = {}
    ids: dict[tuple[Any, ...], int] = {}  # hash-consing: a structure is an int, never a nested tuple
    for n in graph.nodes:
        if n.is_opaque:
            same[n.output] = n.output
        else:
            key = (n.op, n.params, tuple(same.get(i, i) for i in n.inputs))
            same[n.output] = ids.setdefault(key, len(ids))
    for n in graph.nodes:
        spec = n.spec
        plan = spec.sibling_merge(n.p, [shapes[i] for i in n.inputs]) if spec.sibling_merge else None
        if plan is None:
            continue
        axes, _ = plan
        rest = tuple(tuple(d for a, d in enumerate(shapes[i]) if a != axis)
                     for i, axis in zip(n.inputs[1:], axes, strict=True))
        groups.setdefault((n.op, n.params, same.get(n.inputs[0], n.inputs[0]), plan, rest), []).append(n)
    return [(members, key[3]) for key, members in groups.items() if len(members) >= min_size]


def sibling_merge(graph: Graph, members: Sequence[Node], plan: tuple[tuple[int, ...], int],
                  names: NameAllocator) -> list[Node]:
    """The nodes that compute ``members`` (a group of :func:`sibling_groups`, with its merge ``plan``) as one: each
    of their other inputs concatenated along the plan's axis, the merged node, and its output split back along the
    split axis, each piece under its member's name (so what read a member reads its piece). These are the terms
    the engine adds as the group's merged alternative (:func:`eqsat.engine.compile.compile_graph`), so the e-graph
    holds them from its first iteration."""
    axes, split_axis = plan
    first = members[0]
    shapes = graph.shapes
    added: list[Node] = []
    stacked = []
    for j, axis in enumerate(axes, start=1):
        cat = names.fresh(f"{first.output}_merged_in{j}")
        added.append(Node(*_concat(axis), tuple(m.inputs[j] for m in members), cat))
        stacked.append(cat)
    merged = names.fresh(f"{first.output}_merged")
    added.append(Node(first.op, first.params, (first.inputs[0], *stacked), merged))
    start = 0
    for m in members:
        size = shapes[m.output][split_axis]
        added.append(Node(*_split(split_axis, start, size), (merged,), m.output))
        start += size
    return added


def merge_siblings(graph: Graph, merges: Sequence[tuple[Sequence[Node], Sequence[Node]]]) -> Graph:
    """``graph`` with each group of ``merges`` (its members, the nodes of :func:`sibling_merge` for them) computed
    by those nodes, and the nodes no output needs any more (another member's own copy of the shared input)
    dropped. Raises :class:`~eqsat.ir.graph.GraphError` where a merge would close a cycle (a member reading
    another's output)."""
    gone = {m.output for members, _ in merges for m in members}
    placed = _in_place(graph, merges)
    if placed is None:  # the general case: sorted and shaped anew
        nodes = [n for n in graph.nodes if n.output not in gone] + [n for _, new in merges for n in new]
        return Graph(graph.inputs, graph.weights, tuple(nodes), graph.outputs, graph.name, graph.meta).live()
    # each group where its first member was: the order stays topological and the shapes are known
    shapes = dict(graph.shapes)
    nodes = []
    for n in graph.nodes:
        for a in placed.get(n.output, ()):
            shapes[a.output] = a.spec.shape(a.p, [shapes[i] for i in a.inputs])
            nodes.append(a)
        if n.output not in gone:
            nodes.append(n)
    needed = set(graph.outputs)
    live = []
    for n in reversed(nodes):
        if n.output in needed:
            live.append(n)
            needed.update(n.inputs)
    weights = {k: v for k, v in graph.weights.items() if k in needed}
    return Graph.from_sorted(graph.inputs, weights, tuple(reversed(live)), graph.outputs, graph.name, graph.meta,
                             {k: v for k, v in shapes.items() if k in needed or k in graph.outputs})


def _in_place(graph: Graph, merges: Sequence[tuple[Sequence[Node], Sequence[Node]]]) -> dict[str, list[Node]] | None:
    """The nodes of each merge by the first member they go before, where each group reads only what is defined
    before its first member (weights, the shared input: the usual case); else None."""
    pos = {n.output: k for k, n in enumerate(graph.nodes)}
    placed: dict[str, list[Node]] = {}
    for members, nodes in merges:
        first = min(pos[m.output] for m in members)
        made = {n.output for n in nodes}
        if any(pos.get(i, -1) >= first for n in nodes for i in n.inputs if i not in made):
            return None
        placed.setdefault(graph.nodes[first].output, []).extend(nodes)
    return placed


def _concat(axis: int) -> tuple[str, tuple[Any, ...]]:
    """The operator and parameters of a concatenation along ``axis`` (the registry's joining glue)."""
    n = make_node("concat", {"axis": axis}, ("a", "b"), "c")
    return n.op, n.params


def _split(axis: int, start: int, size: int) -> tuple[str, tuple[Any, ...]]:
    """The operator and parameters of the piece ``[start, start + size)`` along ``axis`` (the registry's cut)."""
    n = make_node("split", {"axis": axis, "start": start, "size": size}, ("x",), "y")
    return n.op, n.params
