"""Reading a saturated e-graph back in the IR's terms, for the stages after saturation: the cost keys of every
e-node (what it runs as once exported), the input graph's terms and tensor names in the e-graph, and the IR graph
an extraction chooses."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eqsat import ops
from eqsat.engine.egraph import EGraph, ENode
from eqsat.engine.saturation import SaturationResult, Snapshot
from eqsat.ir.graph import Graph, Node, computed_from_weights, make_node
from eqsat.ir.names import NameAllocator
from eqsat.ir.passes import flatten_concats
from eqsat.ir.precision import node_precision

__all__ = ["weight_only_classes", "class_precisions",
           "node_cost_keys", "selection_to_graph", "tensors_by_class", "tensor_names_by_class",
           "InputTerms", "input_terms", "relocate_selection"]


def weight_only_classes(egraph: EGraph) -> set[str]:
    """Tensor e-classes equal to a constant: some node of theirs computes from weights only
    (:func:`eqsat.ir.graph.computed_from_weights`: a Weight, a constant leaf such as const_pool, or work on
    weight-only classes)."""
    wo: set[str] = set()
    changed = True
    while changed:
        changed = False
        for n in egraph.nodes:
            c = n.eclass
            if c in wo or n.op == "Input" or egraph.eclass(c).type != "T":
                continue
            if computed_from_weights(n.op, n.children, wo):
                wo.add(c)
                changed = True
    return wo


def class_precisions(egraph: EGraph, graph: Graph, tensors: Mapping[str, str]) -> dict[str, str]:
    """The precision of each tensor e-class of an e-graph of a mixed-precision ``graph``: that of the input
    graph's tensors it holds (``tensors``: :func:`eqsat.ir.precision.tensor_precisions`), else what its nodes
    compute in (:func:`eqsat.ir.precision.node_precision`); constants have none."""
    where = input_terms(egraph, graph).tensor_class
    prec = {where[t]: p for t, p in tensors.items() if t in where}
    changed = True
    while changed:  # classes the rules made, each from its children's
        changed = False
        for n in egraph.nodes:
            if n.eclass in prec or n.is_opaque or n.op in ("Input", "Weight", "TNil", "TCons"):
                continue
            p = node_precision(n.op, n.p, [prec.get(k) for k in n.children])
            if p:
                prec[n.eclass] = p
                changed = True
    return prec


def node_cost_keys(egraph: EGraph) -> dict[str, tuple[ops.CostKey, ...]]:
    """Cost keys of every node (what it runs as once exported); none for nodes that cost nothing (leaves,
    lists, weight-only work)."""
    wo = weight_only_classes(egraph)
    keys: dict[str, tuple[ops.CostKey, ...]] = {}
    for n in egraph.nodes:
        kids = n.children
        if n.op in ("Input", "Weight", "TNil", "TCons") or n.eclass in wo and computed_from_weights(n.op, kids, wo):
            keys[n.id] = ()
            continue
        in_shapes = [] if n.is_opaque else [egraph.shape(k) for k in kids]  # opaque: a TList child
        keys[n.id] = ops.get(n.op).cost_keys(n.p, in_shapes, egraph.shape(n.eclass),
                                             weights=[i for i, k in enumerate(kids) if k in wo])
    return keys


def selection_to_graph(egraph: EGraph, selection: Mapping[str, str], original: Graph,
                       tensor_of_class: Mapping[str, str] | None = None, *, flatten: bool = True) -> Graph:
    """Build the IR graph chosen by an extraction (``selection``: e-class -> node id).

    Graph inputs, weights, output names and opaque nodes are taken from ``original``. Intermediate tensors
    keep a name from ``tensor_of_class`` where one is known. With ``flatten``, chains of binary concats
    (the e-graph's form) become n-ary concats (:func:`eqsat.ir.passes.flatten_concats`).
    """
    nodes = egraph.node
    opaque = {(n.p["key"], n.p["index"]): n for n in original.nodes if n.is_opaque}
    names: dict[str, str] = {}
    used = NameAllocator([i.name for i in original.inputs] + list(original.weights))
    ir: list[Node] = []
    tensor_of_class = dict(tensor_of_class or {})

    def fresh(cls: str) -> str:
        return used.fresh(tensor_of_class.get(cls) or f"t_{cls}")

    def list_items(cls: str) -> list[str]:
        out = []
        while True:
            n = nodes(selection[cls])
            if n.op == "TNil":
                return out
            head, tail = n.children
            out.append(visit(head))
            cls = tail

    out_names = {}
    for cls, name in zip(egraph.roots, original.outputs, strict=True):
        out_names.setdefault(cls, name)

    def visit(cls: str) -> str:
        # iterative would be nicer for very deep graphs; the recursion limit is raised by the caller
        if cls in names:
            return names[cls]
        n = nodes(selection[cls])
        op, p = n.op, n.p
        if op in ("Input", "Weight"):
            names[cls] = p["name"]
            return names[cls]
        if n.is_opaque:
            orig = opaque[(p["key"], p["index"])]
            ins = list_items(n.children[0])
            name = out_names.get(cls) or fresh(cls)
            used.take(name)
            names[cls] = name
            ir.append(Node("opaque", orig.params, tuple(ins), name))
            return name
        ins = [visit(k) for k in n.children]
        name = out_names.get(cls) or fresh(cls)
        used.take(name)
        names[cls] = name
        ir.append(make_node(op, p, ins, name))
        return name

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 20 * egraph.num_nodes + 1000))
    try:
        for cls in egraph.roots:
            visit(cls)
    finally:
        sys.setrecursionlimit(old)
    outputs = []
    for cls, name in zip(egraph.roots, original.outputs, strict=True):
        t = names[cls]
        if t != name:  # an output shared with another output, or a leaf: an identity keeps its name
            shape = egraph.shape(cls)
            ir.append(make_node("reshape", {"shape": shape}, [t], name))
        outputs.append(name)
    weights = {k: v for k, v in original.weights.items()}
    graph = Graph(original.inputs, weights, tuple(ir), tuple(outputs), original.name, original.meta)
    return (flatten_concats(graph) if flatten else graph).live()


def tensors_by_class(result: SaturationResult | Snapshot) -> dict[str, list[str]]:
    """Map e-classes to every tensor name of the input graph they hold (graph inputs, weights, intermediates,
    outputs), in the input graph's order.

    Each tensor is an egglog ``let`` global (:func:`eqsat.engine.compile.compile_graph`); an e-class lists the
    globals naming it (``EClass.lets``). Globals that name no tensor (the links of an n-ary concat's binary chain,
    sibling merges) are skipped.
    """
    order = {g: k for k, g in enumerate(result.tensor_of_global)}  # creation order: inputs, weights, nodes
    out: dict[str, list[str]] = {}
    for c in result.egraph.classes:
        names = sorted((g for g in c.lets if g in order), key=order.__getitem__)
        if names:
            out[c.id] = [result.tensor_of_global[g] for g in names]
    return out


def tensor_names_by_class(result: SaturationResult | Snapshot) -> dict[str, str]:
    """Map e-classes to one original tensor name (the first, in the input graph's order), for readable output."""
    return {cls: names[0] for cls, names in tensors_by_class(result).items()}


@dataclass(frozen=True)
class InputTerms:
    """Where the input graph's terms are in an e-graph (see :func:`input_terms`).

    Attributes:
        nodes: ids of the e-nodes that are terms of the input graph: one per graph input, weight and node, the
            links of the binary chain an n-ary concat compiles to, and the ``TCons``/``TNil`` lists of opaque
            nodes' inputs.
        tensor_class: every tensor of the input graph -> its e-class.
        missing: tensors whose term is not in the e-graph (none for an e-graph
            :func:`eqsat.engine.saturation.saturate` returned for this graph; some when the e-graph comes from
            another model).
        selection: e-class -> the input graph's first term in it (in the order the graph defines them): the
            input graph as an extraction. It is acyclic, since each chosen term's children hold earlier terms,
            and it is the start extraction improves on (:func:`eqsat.extract.extract_cpsat`).
    """

    nodes: frozenset[str]
    tensor_class: Mapping[str, str]
    missing: tuple[str, ...]
    selection: Mapping[str, str]


def _canonical_param(value: Any, kind: str) -> Any:
    """A parameter as the serializer decodes it back from egglog (written by :mod:`eqsat.engine.compile`, read by
    :mod:`eqsat.engine.serialize`)."""
    if kind == "int":
        return int(value)
    if kind == "ints":
        return tuple(int(v) for v in value)
    if kind == "float":
        return float(value)
    return str(value)


def _term_key(value: Any) -> Any:
    """A parameter as a lookup key: arrays as tuples, floats by their text (so that NaN finds NaN)."""
    if isinstance(value, list | tuple):
        return tuple(_term_key(v) for v in value)
    return ("float", repr(value)) if isinstance(value, float) else value


def _term_index(egraph: EGraph) -> dict[tuple[Any, ...], ENode]:
    """Every e-node by its term: operator, parameters (as lookup keys) and child e-classes."""
    index: dict[tuple[Any, ...], ENode] = {}
    for n in egraph.nodes:
        index.setdefault((n.op, _term_key(tuple(v for _, v in n.params)), n.children), n)
    return index


def relocate_selection(old: EGraph, selection: Mapping[str, str], new: EGraph) -> dict[str, str] | None:
    """The terms an extraction chose in ``old`` (``selection``: e-class -> node id, e.g. the best graph an
    anytime run found in an earlier snapshot) as a selection of ``new``, an e-graph that holds every term of
    ``old`` (a later snapshot of the same saturation, or its final e-graph); None if some term is missing.

    Only the part reachable from ``old``'s roots is relocated. Where terms of several old e-classes meet in
    one new e-class (a later merge), the first one relocated (children first) is kept: each chosen e-node's
    children were chosen before it, so the selection stays acyclic, and it costs at most what the old one did
    (the same e-nodes, some shared).
    """
    index = _term_index(new)
    mapped: dict[str, str] = {}  # old e-class -> new e-class
    out: dict[str, str] = {}
    old_node = old.node
    for root in old.roots:
        stack: list[tuple[str, bool]] = [(root, False)]
        while stack:  # iterative post-order: e-graphs of large models are deeper than Python's recursion limit
            cls, expanded = stack.pop()
            if cls in mapped:
                continue
            n = old_node(selection[cls])
            if not expanded:
                stack.append((cls, True))
                stack.extend((k, False) for k in reversed(n.children) if k not in mapped)
                continue
            term = index.get((n.op, _term_key(tuple(v for _, v in n.params)), tuple(mapped[k] for k in n.children)))
            if term is None:
                return None
            mapped[cls] = term.eclass
            out.setdefault(term.eclass, term.id)
    return out


def input_terms(egraph: EGraph, graph: Graph) -> InputTerms:
    """Find the input graph's terms in an e-graph (the engine's, or an e-graph dump's: ``EGraphDump.egraph``).

    The input graph is walked bottom-up, as :func:`eqsat.engine.compile.compile_graph` writes it, looking each
    term up by its operator, parameters and child e-classes. An e-graph holds each such term once (congruence closure,
    and the serializer writes canonical e-nodes), so the lookup is exact whatever the rules merged later:
    the e-node found is the one egglog made from the input graph's ``let``.
    """
    index = _term_index(egraph)
    found: set[str] = set()
    cls: dict[str, str] = {}
    missing: list[str] = []
    first: dict[str, str] = {}

    def look(op: str, params: tuple[Any, ...], kids: tuple[str, ...]) -> str | None:
        n = index.get((op, _term_key(params), kids))
        if n is None:
            return None
        found.add(n.id)
        first.setdefault(n.eclass, n.id)
        return n.eclass

    for inp in graph.inputs:
        c = look("Input", (inp.name,), ())
        if c is None:
            missing.append(inp.name)
        else:
            cls[inp.name] = c
    for w in graph.weights:
        c = look("Weight", (w,), ())
        if c is None:
            missing.append(w)
        else:
            cls[w] = c
    for n in graph.nodes:
        if any(i not in cls for i in n.inputs):
            missing.append(n.output)
            continue
        kids = [cls[i] for i in n.inputs]
        p = n.p
        c: str | None
        if n.is_opaque:
            c = look("TNil", (), ())
            for k in reversed(kids):
                c = None if c is None else look("TCons", (), (k, c))
            c = None if c is None else look("opaque", (str(p["key"]), int(p["index"])), (c,))
        else:
            spec = n.spec
            params = tuple(_canonical_param(p[name], kind) for name, kind in spec.params)
            if spec.variadic:  # the left-nested binary chain compile_graph writes
                c = kids[0]
                for k in kids[1:]:
                    c = None if c is None else look(spec.name, params, (c, k))
            else:
                c = look(spec.name, params, tuple(kids))
        if c is None:
            missing.append(n.output)
        else:
            cls[n.output] = c
    return InputTerms(frozenset(found), cls, tuple(missing), first)


def graph_from_selection(egraph: EGraph, selection: Mapping[str, str], original: Graph,
                         tensor_names: Mapping[str, str]) -> tuple[Graph, Graph]:
    """The IR graph an extraction chose (``selection``: e-class -> node id of ``egraph``), as
    read back (binary concats, as the e-graph has them) and as written (n-ary concats, dead nodes dropped),
    both validated. Tensors keep their names from ``tensor_names`` (e-class -> name) where one is known."""
    extracted = selection_to_graph(egraph, selection, original, tensor_names, flatten=False).validate()
    return extracted, flatten_concats(extracted).live().validate()
