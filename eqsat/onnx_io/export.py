"""Export: IR -> ONNX through the registry's export mappings, regrouping split pieces and opaque outputs."""


from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from eqsat.ir.graph import Graph, Node, computed_from_weights, make_node
from eqsat.ir.names import NameAllocator
from eqsat.ir.passes import unflagged, written_views
from eqsat.ir.symbols import graph_symbols
from eqsat.onnx_io.precision import (
    HALF_TYPES,
    MIXED_KEY,
    PRECISION_KEY,
    convert_floats,
    float32_casts,
    restore_precisions,
)
from eqsat.onnx_io.protos import (
    all_graphs,
    elem_type,
    eval_node,
    lacks_onnx_schema,
    nodes_within,
    outer_names,
    rename_outer,
)
from eqsat.onnx_io.symbolic_export import may_hold_sizes, symbolize
from eqsat.ops import Shape, flagged_form
from eqsat.ops.dims import Sym

#: how many elements of an array its content key reads (evenly spaced): equal arrays share a key, and different
#: weights almost never do; a shared key is confirmed by comparing the arrays (hashing every byte of a 400 MB
#: model took 0.3 s)
_KEY_SAMPLES = 1024


def _content_key(array: np.ndarray) -> tuple[str, Shape, str]:
    flat = array.reshape(-1)
    sample = flat[::max(1, flat.size // _KEY_SAMPLES)]
    return str(array.dtype), tuple(array.shape), hashlib.sha1(np.ascontiguousarray(sample).tobytes()).hexdigest()


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays of one dtype and shape hold the same bytes (a -0.0 is not a 0.0, a NaN is itself)."""
    if a.dtype.kind in "OUSV":
        return bool(np.array_equal(a, b))
    return bool(np.array_equal(np.ascontiguousarray(a).reshape(-1).view(np.uint8),
                               np.ascontiguousarray(b).reshape(-1).view(np.uint8)))


class _Exporter:
    """Implements :class:`eqsat.ops.ExportContext` while writing one model."""

    def __init__(self, opset: int, taken: Iterable[str], shapes: dict[str, Shape] | None = None) -> None:
        self.opset = opset
        self.names = NameAllocator(taken)
        self.initializers: dict[str, np.ndarray] = {}
        self._by_content: dict[tuple[str, Shape, str], list[str]] = {}  # content key -> names stored
        self._shapes = shapes or {}

    def shape(self, name: str) -> Shape | None:
        if name in self.initializers:
            return tuple(self.initializers[name].shape)
        return self._shapes.get(name)

    def constant(self, name: str) -> np.ndarray | None:
        return self.initializers.get(name)

    def add_initializer(self, array: np.ndarray, hint: str) -> str:
        array = np.asarray(array, order="C")
        return self._stored(array) or self._store(self.fresh(hint), array)

    def add_named_initializer(self, name: str, array: np.ndarray) -> str:
        """Add a weight under its own name unless an identical array is already stored."""
        array = np.asarray(array, order="C")
        if (same := self._stored(array)) is not None:
            return same
        self.names.take(name)
        return self._store(name, array)

    def _stored(self, array: np.ndarray) -> str | None:
        """The name of a stored array equal to ``array`` (same dtype, shape and bytes), if any."""
        for name in self._by_content.get(_content_key(array), ()):
            if _same_bytes(self.initializers[name], array):
                return name
        return None

    def _store(self, name: str, array: np.ndarray) -> str:
        self.initializers[name] = array
        self._by_content.setdefault(_content_key(array), []).append(name)
        return name

    def rename_initializer(self, name: str, new: str) -> str:
        """Store the initializer ``name`` as ``new`` instead; returns ``new``."""
        array = self.initializers[new] = self.initializers.pop(name)
        names = self._by_content[_content_key(array)]
        names[names.index(name)] = new
        return new

    def unsupported(self, reason: str) -> None:
        self.why = reason

    def fresh(self, hint: str) -> str:
        return self.names.fresh(hint)


def to_onnx(graph: Graph, *, opset: int | None = None) -> onnx.ModelProto:
    """Export an IR graph to a checker-valid ONNX model with the original input/output names and order (its views
    as :func:`eqsat.ir.passes.written_views` writes them)."""
    opset = opset or int(graph.meta.get("opset", 17))
    graph = written_views(graph)
    shapes, dtypes = graph.shapes, graph.dtypes
    taken = {i.name for i in graph.inputs} | set(graph.weights) | {n.output for n in graph.nodes}
    ex = _Exporter(opset, taken, shapes)
    # weight-only work is precomputed (weight transforms cost nothing at run time), when a node reads it
    computed, live = _split_weight_work(graph, opset)
    consts = _Precomputed(graph.weights, computed)
    rename: dict[str, str] = {}

    def ref(name: str) -> str:
        if name in consts:
            if name not in rename:
                rename[name] = ex.add_named_initializer(name, consts[name])
            return rename[name]
        return name

    nodes: list[onnx.NodeProto] = []
    emitted_pieces: set[str] = set()
    piece_groups = _piece_groups(live, shapes)
    opaque_groups: dict[str, list[Node]] = {}
    for n in live:
        if n.is_opaque:
            opaque_groups.setdefault(n.p["key"], []).append(n)
    done_opaque: set[str] = set()
    for n in live:
        if n.is_opaque:
            key = n.p["key"]
            if key not in done_opaque:
                done_opaque.add(key)
                nodes.append(_export_opaque(opaque_groups[key], ref, ex))
            continue
        if n.output in piece_groups:  # pieces that tile a tensor: one node writes them all (a Split)
            group = piece_groups[n.output]
            if group[0].output in emitted_pieces:
                continue
            emitted_pieces.update(m.output for m in group)
            size = n.spec.piece_params[1]
            written = n.spec.export_pieces(n.p[n.spec.piece_axis], [m.p[size] for m in group], ref(n.inputs[0]),
                                           [m.output for m in group], ex)
        else:
            written = n.spec.export_fn(n.p, [ref(i) for i in n.inputs], [n.output], ex)
        for op_type, nins, nouts, attrs in written:
            if op_type == "Conv" and len(nins) == 3 and nins[2] in ex.initializers \
                    and not np.any(ex.initializers[nins[2]]):
                nins = nins[:2]  # an all-zero bias is implied
            nodes.append(written_node(op_type, nins, nouts, name=ex.fresh(f"n_{n.op}"), **attrs))
    outputs = []
    input_names = {i.name for i in graph.inputs}
    for o in graph.outputs:
        if o in consts and o not in input_names:
            src = ref(o)
            if src == o:  # the output name itself is an initializer: move it aside and copy it out
                src = ex.rename_initializer(o, ex.fresh(o + "_value"))
            nodes.append(helper.make_node("Identity", [src], [o], name=ex.fresh("n_identity")))
        # an output that is a graph input passes through as it is: ONNX allows a name to be both
        dtype = graph.meta.get("output_dtypes", {}).get(o, dtypes.get(o, "float32"))
        outputs.append(helper.make_tensor_value_info(o, elem_type(dtype), list(shapes[o])))
    inputs = [helper.make_tensor_value_info(i.name, elem_type(i.dtype), list(i.shape)) for i in graph.inputs]
    read = {i for n in nodes for i in (*n.input, *outer_names(n))} | {o.name for o in outputs}
    # weights nobody reads (e.g. a zero bias dropped from a Conv) stay out of the file
    inits = {k: v for k, v in ex.initializers.items() if k in read}
    opsets = [helper.make_opsetid(d, v) for d, v in graph.meta.get("opset_imports", []) if d not in ("", "ai.onnx")]
    opsets.insert(0, helper.make_opsetid("", opset))
    opsets += kernel_opsets(nodes, {o.domain for o in opsets})
    ir_version = int(graph.meta.get("ir_version") or 0) or onnx.helper.VERSION_TABLE[-1][1]
    ir_version = max(ir_version, 4)  # IR 4+: initializers need not be listed as graph inputs
    model = helper.make_model(helper.make_graph(_topo_order(nodes, inputs, inits), graph.name, inputs, outputs),
                              opset_imports=opsets, ir_version=ir_version, producer_name="eqsat")
    large = sum(v.nbytes for v in inits.values()) > CHECK_WEIGHTS_BYTES
    # a mixed-precision model (or any graph with a change of precision) is checked as its float32 copy, then
    # given its precisions: the model's as given, each cast's
    mixed = graph.meta.get(MIXED_KEY) or ({"types": {}} if any(n.spec.precision_param for n in graph.nodes)
                                          else None)
    cast_types = float32_casts(model) if mixed else {}
    symbolic = bool(graph_symbols(graph))
    # the weights go in last, once the graph is complete: the symbolic rewrite reads only small integer tensors
    # and rebuilds the initializer list, and the checker serializes what it checks (see _check)
    weights = {k: v for k, v in inits.items() if not may_hold_sizes(v)} if large else {}
    for k, v in inits.items():
        if k not in weights:
            append_initializer(model.graph, k, v)
    if symbolic:  # dynamic axes: symbolic sizes declared, sizes computed from the inputs' shapes at run time
        symbolize(model, graph, reserved=weights)
    if large:
        _check(model, weights, full_check=not symbolic)
    # written into the model in place: a large model's weights are copied once, and each one export computed (a
    # fused projection's concatenated weights) is let go once written (the model and the rest are all that is held)
    ex.initializers.clear()
    consts.forget()
    inits.clear()
    for k in list(weights):
        append_initializer(model.graph, k, weights.pop(k))
    if not large:
        _check(model, {}, full_check=True)
    precision = graph.meta.get(PRECISION_KEY)
    if precision:  # a half-precision model, optimized as its float32 copy: written back in its own precision
        model = convert_floats(model, onnx.TensorProto.FLOAT, HALF_TYPES[precision])
    if mixed:  # a mixed-precision model: each tensor in its region's precision
        model = restore_precisions(model, {**mixed["types"], **cast_types})
    return model


def written_node(op_type: str, inputs: Sequence[str], outputs: Sequence[str], name: str | None = None,
                 **attrs: Any) -> onnx.NodeProto:
    """The node an operator's export writes as ``op_type``: ``"Add"``, or ``"com.microsoft:SkipLayerNormalization"``
    for a kernel of another domain (:mod:`eqsat.ops.ort_kernels`)."""
    domain, _, op = op_type.rpartition(":")
    return helper.make_node(op, list(inputs), list(outputs), name=name, domain=domain or None, **attrs)


def kernel_opsets(nodes: Iterable[onnx.NodeProto], present: Iterable[str]) -> list[onnx.OperatorSetIdProto]:
    """The opset imports (version 1) the domains of ``nodes`` need beyond those ``present`` (the default domain
    is always there): the kernels export writes in a runtime's own domain."""
    have = {"", "ai.onnx", *present}
    domains = {m.domain for n in nodes for m in (n, *nodes_within(n))}  # a body's kernels count too
    return [helper.make_opsetid(d, 1) for d in sorted(domains - have)]


def _split_weight_work(graph: Graph, opset: int) -> tuple[dict[str, Node], list[Node]]:
    """The nodes export precomputes (weight-only work, by output) and the others, as written: a 2-D product
    reading a weight's transpose reads the weight through Gemm's flag instead (from opset 11; before it,
    matmul_t is written with Transpose nodes)."""
    computed: dict[str, Node] = {}
    live: list[Node] = []
    syms = graph_symbols(graph)
    shapes = graph.shapes
    for n in graph.nodes:
        # constants and weight transforms; not one as large as a symbol (a weight expanded to the batch): its
        # size is known at run time only
        if computed_from_weights(n.op, n.inputs, graph.weights.keys() | computed) and not (
                syms and any(isinstance(d, Sym) for d in syms.decode_shape(shapes[n.output]))):
            computed[n.output] = n
        else:
            live.append(n)
    if opset >= 11:
        live = [_transposed_weight_as_flag(n, computed, shapes) for n in live]
    return computed, live


def as_written(graph: Graph, opset: int | None = None) -> Graph:
    """``graph`` with the rewrites :func:`to_onnx` makes as it writes (its views, a transposed weight read through
    Gemm's flag), a flagless 2-D product as matmul, and without what no output then needs: two graphs that compute
    alike as written are equal here (``graph_hash``), as they are once the written model is imported again."""
    graph = written_views(graph)
    computed, live = _split_weight_work(graph, opset or int(graph.meta.get("opset", 17)))
    # a 2-D product with neither flag computes what matmul does (a MatMul or a Gemm: the same product)
    live = [unflagged(n) for n in live]
    nodes = tuple(n for n in graph.nodes if n.output in computed) + tuple(live)
    return Graph(graph.inputs, graph.weights, nodes, graph.outputs, graph.name, graph.meta).live()


class _Precomputed(Mapping[str, np.ndarray]):
    """The weights, and the weight-only tensors the nodes ``computed`` give, each evaluated when first read."""

    def __init__(self, weights: Mapping[str, np.ndarray], computed: Mapping[str, Node]) -> None:
        self._values = dict(weights)
        self._computed = computed

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._values:
            n = self._computed[name]
            self._values[name] = n.spec.evaluate(n.p, [self[i] for i in n.inputs])
        return self._values[name]

    def __contains__(self, name: object) -> bool:
        return name in self._values or name in self._computed

    def forget(self) -> None:
        """Let go of every value read (they are evaluated again when read again)."""
        self._values.clear()

    def __iter__(self) -> Iterator[str]:
        return iter(self._values.keys() | self._computed.keys())

    def __len__(self) -> int:
        return len(self._values.keys() | self._computed.keys())


def _transposed_weight_as_flag(n: Node, computed: Mapping[str, Node], shapes: Mapping[str, Shape]) -> Node:
    """``n``, a 2-D product, reading a weight's transpose as the weight with Gemm's transpose flag for it flipped
    (``OpSpec.transpose_flags``): the same product, and the weight stays as it was (its name, no transposed copy
    to compute)."""
    def transposed(name: str) -> str | None:  # the weight-only tensor whose 2-D transpose ``name`` is
        t = computed.get(name)
        perm = t.spec.permutes if t is not None else ""
        return t.inputs[0] if perm and tuple(t.p[perm]) == (1, 0) else None

    flagged = flagged_form(n.op)  # matmul as matmul_t
    if flagged is not None and all(len(shapes[i]) == 2 for i in n.inputs) and any(map(transposed, n.inputs)):
        n = make_node(flagged.name, dict.fromkeys(flagged.transpose_flags.params, 0), n.inputs, n.output)
    flags = n.spec.transpose_flags
    if flags is None:
        return n
    p, inputs = n.p, list(n.inputs)
    for k, flag in enumerate(flags.params):
        if (source := transposed(inputs[k])) is not None and isinstance(p[flag], int):
            inputs[k], p[flag] = source, 1 - p[flag]
    return n if tuple(inputs) == n.inputs else make_node(n.op, p, inputs, n.output)


def append_initializer(graph: onnx.GraphProto, name: str, array: np.ndarray) -> None:
    """Append ``array`` to ``graph``'s initializers as ``numpy_helper.from_array`` writes it, built in place for a
    plain numeric array (``from_array`` and then ``append`` copy a weight twice more)."""
    if array.dtype.kind not in "fiub" or array.dtype.byteorder == ">" or array.dtype.itemsize > 8:
        graph.initializer.append(numpy_helper.from_array(array, name))
        return
    t = graph.initializer.add()
    t.name, t.data_type = name, helper.np_dtype_to_tensor_dtype(array.dtype)
    t.dims.extend(array.shape)
    t.raw_data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False).tobytes()


#: weights above this many bytes in all are checked by their types and shapes only (see :func:`_check`)
CHECK_WEIGHTS_BYTES = 64 * 1024 * 1024


#: the domain the checker sees a default-domain operator ONNX has no schema for in (onnxruntime's
#: ``SimplifiedLayerNormalization``, say, which onnxruntime registers in the default domain): it checks the
#: graph around such a node as it checks operators of other domains, without their own schema
_UNREGISTERED = "eqsat.unregistered"


def _check(model: onnx.ModelProto, inits: Mapping[str, np.ndarray], full_check: bool = True) -> None:
    """The ONNX checker (with shape inference when ``full_check``) on ``model`` as it is once given ``inits`` as
    weights: those as graph inputs of the same names, types and shapes.

    The checker serializes the model it checks, twice with shape inference (2.5 s for VGG-19's 548 MB). With
    the weights as typed inputs the graph is checked and its shapes inferred exactly as with them, and the
    weights themselves are tensors numpy_helper writes, whose own checks (one data field, its size) hold by
    construction."""
    unregistered = any(lacks_onnx_schema(n) for g in all_graphs(model.graph) for n in g.node)
    if inits or unregistered:
        checked = onnx.ModelProto()
        checked.CopyFrom(model)
        checked.graph.input.extend(helper.make_tensor_value_info(k, elem_type(str(v.dtype)), list(v.shape))
                                   for k, v in inits.items())
        if unregistered:
            for n in (n for g in all_graphs(checked.graph) for n in g.node if lacks_onnx_schema(n)):
                n.domain = _UNREGISTERED
            checked.opset_import.append(helper.make_opsetid(_UNREGISTERED, 1))
        model = checked
    onnx.checker.check_model(model, full_check=full_check)


def _topo_order(nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
                inits: Mapping[str, np.ndarray]) -> list[onnx.NodeProto]:
    """``nodes`` in an order where each one comes after the nodes whose outputs it reads."""
    avail = {i.name for i in inputs} | set(inits) | {""}
    pending = list(nodes)
    order: list[onnx.NodeProto] = []
    while pending:
        rest = []
        for n in pending:
            if all(i in avail for i in (*n.input, *outer_names(n))):  # a subgraph's outer reads count
                order.append(n)
                avail.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            raise ValueError("exported graph has a cycle or a dangling input")
        pending = rest
    return order


def _piece_groups(nodes: Sequence[Node], shapes: Mapping[str, Shape]) -> dict[str, list[Node]]:
    """Pieces (``OpSpec.export_pieces``: a split's) of one tensor along one axis that tile it exactly, in order,
    keyed by each piece's output."""
    by_src: dict[tuple[str, str, tuple[Any, ...]], list[Node]] = {}
    for n in nodes:
        spec = n.spec
        if spec.export_pieces is not None:  # grouped by operator, input and the parameters besides the piece's
            rest = tuple((k, v) for k, v in n.params if k not in spec.piece_params)
            by_src.setdefault((n.op, n.inputs[0], rest), []).append(n)
    out: dict[str, list[Node]] = {}
    for (_, src, rest), pieces in by_src.items():
        spec = pieces[0].spec
        start, size = spec.piece_params
        pieces = sorted(pieces, key=lambda m: (m.p[start], m.p[size]))
        pos, ok = 0, True
        for m in pieces:
            if m.p[start] != pos:
                ok = False
                break
            pos += m.p[size]
        if ok and pos == shapes[src][dict(rest)[spec.piece_axis]] and len(pieces) > 1:
            for m in pieces:
                out[m.output] = pieces
    return out


def _export_opaque(group: list[Node], ref: Callable[[str], str], ex: _Exporter) -> onnx.NodeProto:
    p = group[0].p
    outs = [""] * p["n_outputs"]
    for m in group:
        outs[m.p["index"]] = m.output
    try:  # trailing outputs nobody reads are dropped, down to what the operator's schema requires
        required = onnx.defs.get_schema(p["op_type"], ex.opset, p["domain"] or "").min_output
    except onnx.defs.SchemaError:  # a custom operator: keep every output it had
        required = p["n_outputs"]
    while len(outs) > required and not outs[-1]:
        outs.pop()
    outs = [o or ex.fresh(f"{p['key']}_unused{k}") for k, o in enumerate(outs)]  # nobody reads them: any name
    return opaque_node(p, [ref(i) for i in group[0].inputs], outs, ex.fresh("n_" + p["op_type"]))


def opaque_node(p: Mapping[str, Any], ins: Sequence[str], outs: Sequence[str], name: str | None = None
                ) -> onnx.NodeProto:
    """The ONNX node an opaque node's parameters ``p`` stand for, reading ``ins`` (the IR node's inputs under
    the names they are written as: the present inputs, put back in their slots, then the tensors its subgraphs
    read from around it, which the subgraphs are made to read under those names) and writing ``outs``, with its
    original attributes."""
    outer = tuple(p.get("outer", ()))
    ins = list(ins)
    ins, outer_as = ins[:len(ins) - len(outer)], ins[len(ins) - len(outer):]
    if p["slots"]:
        it = iter(ins)
        ins = [next(it) if c == "1" else "" for c in p["slots"]]
    node = helper.make_node(p["op_type"], ins, list(outs), name=name, domain=p["domain"] or None)
    for raw in p["attrs"]:
        a = onnx.AttributeProto()
        a.ParseFromString(raw)
        node.attribute.append(a)
    rename_outer(node.attribute, {o: w for o, w in zip(outer, outer_as, strict=True) if o != w})
    return node


# ---------------------------------------------------------------------------------------------------------
# evaluation and numeric checks


def onnx_opaque_evaluator(graph: Graph) -> Callable[[Node, list[np.ndarray]], np.ndarray]:
    """An evaluator for opaque nodes (ONNX reference implementation) for :meth:`Graph.evaluate`."""
    opset = [helper.make_opsetid(d or "", v) for d, v in graph.meta.get("opset_imports", [("", 17)])]
    ir_version = int(graph.meta.get("ir_version") or 8)
    cache: dict[str, list[np.ndarray]] = {}

    def evaluate(node: Node, args: list[np.ndarray]) -> np.ndarray:
        p = node.p
        if p["key"] not in cache:
            proto = onnx.NodeProto()
            proto.op_type, proto.domain = p["op_type"], p["domain"]
            proto.output.extend(f"o{k}" for k in range(p["n_outputs"]))
            for raw in p["attrs"]:
                a = onnx.AttributeProto()
                a.ParseFromString(raw)
                proto.attribute.append(a)
            outer = tuple(p.get("outer", ()))
            explicit, around = list(args[:len(args) - len(outer)]), args[len(args) - len(outer):]
            values: list[np.ndarray | None] = list(explicit)
            if p["slots"]:
                it = iter(explicit)
                values = [next(it) if c == "1" else None for c in p["slots"]]
            cache[p["key"]] = eval_node(proto, values, opset, ir_version, dict(zip(outer, around, strict=True)))
        return cache[p["key"]][p["index"]]

    return evaluate
