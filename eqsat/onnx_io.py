"""ONNX import and export: the only place (besides tests and benchmarks) that imports onnx.

Import: parse, fix input shapes, fold constants, infer shapes, map each node through the registry's ONNX
importers (anything else becomes an ``opaque`` node kept verbatim). Export: write registry ops back through
their export mappings, regroup split pieces and opaque outputs, precompute weight-only work, and check the
result with ``onnx.checker``. Also the onnxruntime helpers used for the numeric check.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from eqsat import ops
from eqsat.graph import Graph, Node, TensorInfo, make_node
from eqsat.ops import OpError, Shape

#: Ops never folded even when all inputs are constant (non-deterministic).
_NEVER_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
               "Bernoulli", "Dropout"}
_FLOAT_TYPES = {"float32"}


class ModelLoadError(ValueError):
    """The model cannot be imported (malformed file, dynamic shape, unsupported construct)."""


def _np_dtype(elem_type: int) -> str:
    return str(np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)))


def _elem_type(dtype: str) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _read_model(src: str | Path | bytes | onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    if isinstance(src, onnx.ModelProto):
        return src, "<model>"
    label = "<bytes>" if isinstance(src, bytes) else str(src)
    try:
        if isinstance(src, bytes):
            model = onnx.load_from_string(src)
        else:
            if not Path(src).exists():
                raise FileNotFoundError(f"no such model file: {src}")
            model = onnx.load(str(src))
    except FileNotFoundError:
        raise
    except Exception as e:
        raise ModelLoadError(f"{label}: not a readable ONNX model ({type(e).__name__}: {e})") from None
    return model, label


def _static_shape(vi: onnx.ValueInfoProto) -> Shape | None:
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    dims = []
    for d in t.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:
            return None
        dims.append(int(d.dim_value))
    return tuple(dims)


def _attr_dict(node: onnx.NodeProto) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        elif isinstance(v, list) and v and isinstance(v[0], bytes):
            v = [x.decode("utf-8", "replace") for x in v]
        out[a.name] = v
    return out


def _eval_node(node: onnx.NodeProto, values: Sequence[np.ndarray | None], opset: list[onnx.OperatorSetIdProto],
               ir_version: int) -> list[np.ndarray]:
    """Evaluate one node on constant inputs with the ONNX reference implementation."""
    from onnx.reference import ReferenceEvaluator

    inputs = [helper.make_tensor_value_info(f"i{k}", _elem_type(str(v.dtype)), list(v.shape))
              for k, v in enumerate(values) if v is not None]
    in_names = [f"i{k}" if v is not None else "" for k, v in enumerate(values)]
    outs = [f"o{k}" for k in range(len(node.output))]
    n = helper.make_node(node.op_type, in_names, outs, domain=node.domain)
    n.attribute.extend(node.attribute)
    g = helper.make_graph([n], "fold", inputs, [helper.make_value_info(o, onnx.TypeProto()) for o in outs])
    m = helper.make_model(g, opset_imports=opset, ir_version=ir_version)
    feeds = {f"i{k}": v for k, v in enumerate(values) if v is not None}
    # onnxruntime honours old opset semantics (the reference evaluator runs e.g. Softmax-1 as Softmax-13);
    # the reference evaluator covers what onnxruntime cannot run
    try:
        import onnxruntime as ort

        typed = shape_inference.infer_shapes(m)
        so = ort.SessionOptions()
        so.log_severity_level = 4
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(typed.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return [np.asarray(r) for r in sess.run(None, feeds)]
    except Exception:
        return [np.asarray(r) for r in ReferenceEvaluator(m).run(None, feeds)]


class _Importer:
    """Mutable state of one import; implements :class:`eqsat.ops.ImportContext`."""

    def __init__(self, model: onnx.ModelProto, label: str, input_shapes: Mapping[str, Shape] | None) -> None:
        self.model = model
        self.label = label
        self.input_shapes = dict(input_shapes or {})
        g = model.graph
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        if not self.opset:
            raise ModelLoadError(f"{label}: the model imports no default-domain opset")
        self.weights: dict[str, np.ndarray] = {}
        for init in g.initializer:
            self.weights[init.name] = numpy_helper.to_array(init)
        self.types: dict[str, tuple[Shape | None, str]] = {}
        self.names: set[str] = {o for n in g.node for o in n.output} | {i.name for i in g.input}
        self.ir: list[Node] = []
        self.opaque_count = 0
        self.used = {i for n in g.node for i in n.input} | {o.name for o in g.output}

    # -- ImportContext ----------------------------------------------------------------------------------
    def shape(self, name: str) -> Shape:
        if name in self.weights:
            return tuple(self.weights[name].shape)
        s = self.types.get(name, (None, ""))[0]
        if s is None:
            raise OpError(f"shape of {name!r} is unknown")
        return s

    def is_float(self, name: str) -> bool:
        if name in self.weights:
            return str(self.weights[name].dtype) in _FLOAT_TYPES
        return self.types.get(name, (None, ""))[1] in _FLOAT_TYPES

    def const(self, name: str) -> np.ndarray | None:
        return self.weights.get(name)

    def add_weight(self, array: np.ndarray, hint: str) -> str:
        name = self.fresh(hint)
        self.weights[name] = np.array(array, order="C")  # ascontiguousarray would make 0-d arrays 1-d
        return name

    def fresh(self, hint: str) -> str:
        name, k = hint, 0
        while name in self.names or name in self.weights or name in self.types:
            k += 1
            name = f"{hint}_{k}"
        self.names.add(name)
        return name


def load_model(src: str | Path | bytes | onnx.ModelProto,
               input_shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    """Import an ONNX model (opsets 9-21) into the IR.

    ``input_shapes`` fixes the shape of graph inputs with dynamic dimensions (CLI: ``--input-shape``).
    Raises :class:`ModelLoadError` with an actionable message for malformed files, empty graphs, dynamic
    shapes and unsupported constructs.
    """
    model, label = _read_model(src)  # never mutated: fixed input shapes go into a copy for shape inference
    g = model.graph
    if not g.node and not g.output:
        raise ModelLoadError(f"{label}: the graph is empty (no nodes and no outputs)")
    if not g.output:
        raise ModelLoadError(f"{label}: the graph has no outputs")
    for n in g.node:
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute):
            raise ModelLoadError(f"{label}: node {n.name or n.op_type!r} ({n.op_type}) has a subgraph; control "
                                 "flow is not supported yet")
    imp = _Importer(model, label, {k: tuple(v) for k, v in (input_shapes or {}).items()})
    inputs = _fix_inputs(imp, g)
    # weights given as graph inputs with an initializer (old opsets) are weights, not inputs
    _fold_constants(imp, model)
    _infer_types(imp, model, inputs)
    for node in g.node:
        if all(o in imp.weights or o == "" for o in node.output):
            continue  # folded
        _import_node(imp, node)
    outputs = tuple(o.name for o in g.output)
    meta = {"opset": imp.opset, "ir_version": model.ir_version, "producer": model.producer_name,
            "opset_imports": [(o.domain, o.version) for o in model.opset_import],
            "output_dtypes": {o.name: _np_dtype(o.type.tensor_type.elem_type) for o in g.output}}
    graph = Graph(tuple(inputs), imp.weights, tuple(imp.ir), outputs, g.name or "graph", meta)
    try:
        return graph.live().validate()
    except ValueError as e:
        raise ModelLoadError(f"{label}: import produced an invalid graph: {e}") from None


def _fix_inputs(imp: _Importer, g: onnx.GraphProto) -> list[TensorInfo]:
    inputs: list[TensorInfo] = []
    unknown = set(imp.input_shapes)
    for vi in g.input:
        if vi.name in imp.weights:
            continue
        unknown.discard(vi.name)
        if not vi.type.HasField("tensor_type"):
            raise ModelLoadError(f"{imp.label}: input {vi.name!r} is not a tensor")
        dtype = _np_dtype(vi.type.tensor_type.elem_type)
        shape = imp.input_shapes.get(vi.name) or _static_shape(vi)
        if shape is None:
            dims = [d.dim_param or "?" if not d.HasField("dim_value") else str(d.dim_value)
                    for d in vi.type.tensor_type.shape.dim]
            raise ModelLoadError(
                f"{imp.label}: input {vi.name!r} has dynamic shape [{', '.join(dims)}]; fix it with "
                f"--input-shape {vi.name}=d1,d2,... (Python: input_shapes={{{vi.name!r}: (...)}})")
        inputs.append(TensorInfo(vi.name, tuple(int(d) for d in shape), dtype))
    if unknown:
        raise ModelLoadError(f"{imp.label}: --input-shape names unknown inputs {sorted(unknown)}; inputs are "
                             f"{[i.name for i in inputs]}")
    for i in inputs:
        imp.types[i.name] = (i.shape, i.dtype)
    return inputs


def _fold_constants(imp: _Importer, model: onnx.ModelProto) -> None:
    opset = list(model.opset_import)
    for node in model.graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            imp.weights[node.output[0]] = _eval_node(node, [], opset, model.ir_version)[0]
            continue
        if node.domain not in ("", "ai.onnx") or node.op_type in _NEVER_FOLD or not node.input:
            continue
        if not all(i == "" or i in imp.weights for i in node.input):
            continue
        try:
            values = _eval_node(node, [imp.weights[i] if i else None for i in node.input], opset, model.ir_version)
        except Exception:  # the reference evaluator lacks this op: keep the node
            continue
        for name, v in zip(node.output, values, strict=False):
            if name:
                imp.weights[name] = v


def _infer_types(imp: _Importer, model: onnx.ModelProto, inputs: list[TensorInfo]) -> None:
    g = model.graph
    live_nodes = [n for n in g.node if not all(o in imp.weights or o == "" for o in n.output)]
    used = {i for n in live_nodes for i in n.input} | {o.name for o in g.output}
    # small constants travel as data (shape inference may need their values); large ones only as types
    small = {k: v for k, v in imp.weights.items() if k in used and v.size <= 4096}
    big = [helper.make_tensor_value_info(k, _elem_type(str(v.dtype)), list(v.shape))
           for k, v in imp.weights.items() if k in used and k not in small]
    real = [helper.make_tensor_value_info(i.name, _elem_type(i.dtype), list(i.shape)) for i in inputs]
    inits = [numpy_helper.from_array(v, k) for k, v in small.items()]
    known = [vi for vi in g.value_info if vi.name not in imp.weights]  # e.g. shapes of custom-op outputs
    g2 = helper.make_graph(live_nodes, g.name or "g", real + big, list(g.output), inits, value_info=known)
    m2 = helper.make_model(g2, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    try:
        inferred = shape_inference.infer_shapes(m2, strict_mode=False, data_prop=True)
    except Exception as e:
        raise ModelLoadError(f"{imp.label}: ONNX shape inference failed: {e}") from None
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        if vi.type.HasField("tensor_type"):
            imp.types[vi.name] = (_static_shape(vi), _np_dtype(vi.type.tensor_type.elem_type))
    for i in inputs:
        imp.types[i.name] = (i.shape, i.dtype)


def _import_node(imp: _Importer, node: onnx.NodeProto) -> None:
    importer = ops.ONNX_IMPORTERS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    plain = (node.op_type, list(node.input), list(node.output), _attr_dict(node))
    produced: list[Node] | None = None
    if importer is not None and all(i == "" or i in imp.weights or i in imp.types for i in node.input):
        try:
            result = importer(imp, plain)
            if result is not None:
                produced = _materialize(imp, result)
        except (OpError, KeyError, ValueError, TypeError):
            produced = None
    if produced is None:
        produced = _opaque(imp, node)
    imp.ir.extend(produced)


def _materialize(imp: _Importer, result: list[ops.IRNode]) -> list[Node] | None:
    """Turn importer output into IR nodes, checking shapes against ONNX's inference."""
    out: list[Node] = []
    local: dict[str, Shape] = {}
    for op, params, ins, outs in result:
        node = make_node(op, params, ins, outs[0])
        shapes = [local[i] if i in local else imp.shape(i) for i in ins]
        shape = node.spec.shape(node.p, shapes)
        expected = imp.types.get(outs[0], (None, ""))[0]
        if expected is not None and tuple(expected) != tuple(shape):
            return None  # disagreement with ONNX: keep the node opaque rather than guess
        local[outs[0]] = shape
        out.append(node)
    for name, shape in local.items():
        dtype = imp.types.get(name, (None, "float32"))[1] or "float32"
        imp.types[name] = (shape, dtype)
    return out


def _opaque(imp: _Importer, node: onnx.NodeProto) -> list[Node]:
    key = f"{node.name or node.op_type}#{imp.opaque_count}"
    imp.opaque_count += 1
    attrs = tuple(a.SerializeToString() for a in node.attribute)
    slots = "".join("1" if i else "0" for i in node.input)
    ins = tuple(i for i in node.input if i)
    out: list[Node] = []
    for k, name in enumerate(node.output):
        if not name:
            continue
        shape, dtype = imp.types.get(name, (None, ""))
        if name in imp.weights or name not in imp.used:
            continue  # nobody reads it (e.g. a Dropout mask): export gives the slot a fresh name
        if shape is None or not dtype:
            raise ModelLoadError(f"{imp.label}: cannot infer the static shape of {name!r} produced by "
                                 f"{node.op_type}; fix dynamic input shapes with --input-shape, or give the "
                                 "model value_info for it")
        params = {"key": key, "index": k, "op_type": node.op_type, "domain": node.domain, "attrs": attrs,
                  "shape": shape, "dtype": dtype, "n_outputs": len(node.output),
                  "slots": "" if "0" not in slots else slots}
        out.append(Node("opaque", ops.get("opaque").param_tuple(ops.get("opaque").normalize(params)), ins, name))
    return out


# ---------------------------------------------------------------------------------------------------------
# export


class _Exporter:
    """Implements :class:`eqsat.ops.ExportContext` while writing one model."""

    def __init__(self, opset: int, taken: set[str]) -> None:
        self.opset = opset
        self.taken = set(taken)
        self.initializers: dict[str, np.ndarray] = {}
        self._by_content: dict[tuple[str, Shape, str], str] = {}

    def add_initializer(self, array: np.ndarray, hint: str) -> str:
        array = np.asarray(array, order="C")
        key = (str(array.dtype), tuple(array.shape), hashlib.sha1(array.tobytes()).hexdigest())
        if key in self._by_content:
            return self._by_content[key]
        name = self.fresh(hint)
        self.initializers[name] = array
        self._by_content[key] = name
        return name

    def add_named_initializer(self, name: str, array: np.ndarray) -> str:
        """Add a weight under its own name unless an identical array is already stored."""
        array = np.asarray(array, order="C")
        key = (str(array.dtype), tuple(array.shape), hashlib.sha1(array.tobytes()).hexdigest())
        if key in self._by_content:
            return self._by_content[key]
        self.taken.add(name)
        self.initializers[name] = array
        self._by_content[key] = name
        return name

    def fresh(self, hint: str) -> str:
        name, k = hint, 0
        while name in self.taken:
            k += 1
            name = f"{hint}_{k}"
        self.taken.add(name)
        return name


def to_onnx(graph: Graph, *, opset: int | None = None) -> onnx.ModelProto:
    """Export an IR graph to a checker-valid ONNX model with the original input/output names and order."""
    opset = opset or int(graph.meta.get("opset", 17))
    shapes, dtypes = graph.shapes, graph.dtypes
    taken = {i.name for i in graph.inputs} | set(graph.weights) | {n.output for n in graph.nodes}
    ex = _Exporter(opset, taken)
    # precompute weight-only work (weight transforms cost nothing at run time)
    consts: dict[str, np.ndarray] = dict(graph.weights)
    live: list[Node] = []
    for n in graph.nodes:
        if n.op != "opaque" and all(i in consts for i in n.inputs):  # constants and weight transforms
            consts[n.output] = n.spec.evaluate(n.p, [consts[i] for i in n.inputs])
        else:
            live.append(n)
    rename: dict[str, str] = {}

    def ref(name: str) -> str:
        if name in consts:
            if name not in rename:
                rename[name] = ex.add_named_initializer(name, consts[name])
            return rename[name]
        return name

    nodes: list[onnx.NodeProto] = []
    emitted_splits: set[str] = set()
    split_groups = _split_groups(live, shapes)
    opaque_groups: dict[str, list[Node]] = {}
    for n in live:
        if n.op == "opaque":
            opaque_groups.setdefault(n.p["key"], []).append(n)
    done_opaque: set[str] = set()
    for n in live:
        if n.op == "opaque":
            key = n.p["key"]
            if key not in done_opaque:
                done_opaque.add(key)
                nodes.append(_export_opaque(opaque_groups[key], ref, ex))
            continue
        if n.op == "split" and n.output in split_groups:
            group = split_groups[n.output]
            if group[0].output not in emitted_splits:
                emitted_splits.update(m.output for m in group)
                nodes.append(_export_split_group(group, ref(n.inputs[0]), ex))
            continue
        ins = [ref(i) for i in n.inputs]
        for op_type, nins, nouts, attrs in n.spec.export_fn(n.p, ins, [n.output], ex):
            if op_type == "Conv" and len(nins) == 3 and nins[2] in ex.initializers \
                    and not np.any(ex.initializers[nins[2]]):
                nins = nins[:2]  # an all-zero bias is implied
            nodes.append(helper.make_node(op_type, nins, nouts, name=ex.fresh(f"n_{n.op}"), **attrs))
    outputs = []
    for o in graph.outputs:
        if o in consts or o in {i.name for i in graph.inputs}:
            src = ref(o) if o in consts else o
            if src == o:  # the output name itself is an initializer or an input: copy it out
                alias = ex.fresh(o + "_value")
                if o in consts:
                    ex.initializers[alias] = ex.initializers.pop(o)
                    for k, v in list(ex._by_content.items()):
                        if v == o:
                            ex._by_content[k] = alias
                    src = alias
                else:
                    raise ValueError(f"graph output {o!r} is a graph input; ONNX cannot express that")
            nodes.append(helper.make_node("Identity", [src], [o], name=ex.fresh("n_identity")))
        dtype = graph.meta.get("output_dtypes", {}).get(o, dtypes.get(o, "float32"))
        outputs.append(helper.make_tensor_value_info(o, _elem_type(dtype), list(shapes[o])))
    inputs = [helper.make_tensor_value_info(i.name, _elem_type(i.dtype), list(i.shape)) for i in graph.inputs]
    inits = [numpy_helper.from_array(v, k) for k, v in ex.initializers.items()]
    g = helper.make_graph(nodes, graph.name, inputs, outputs, inits)
    opsets = [helper.make_opsetid(d, v) for d, v in graph.meta.get("opset_imports", []) if d not in ("", "ai.onnx")]
    opsets.insert(0, helper.make_opsetid("", opset))
    ir_version = int(graph.meta.get("ir_version") or 0) or onnx.helper.VERSION_TABLE[-1][1]
    model = helper.make_model(g, opset_imports=opsets, ir_version=ir_version, producer_name="eqsat")
    model = _topo_sorted(model)
    onnx.checker.check_model(model, full_check=True)
    return model


def _topo_sorted(model: onnx.ModelProto) -> onnx.ModelProto:
    g = model.graph
    avail = {i.name for i in g.input} | {i.name for i in g.initializer} | {""}
    pending = list(g.node)
    order: list[onnx.NodeProto] = []
    while pending:
        rest = []
        for n in pending:
            if all(i in avail for i in n.input):
                order.append(n)
                avail.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            raise ValueError("exported graph has a cycle or a dangling input")
        pending = rest
    del g.node[:]
    g.node.extend(order)
    return model


def _split_groups(nodes: Sequence[Node], shapes: Mapping[str, Shape]) -> dict[str, list[Node]]:
    """Split pieces of one tensor along one axis that tile it exactly, keyed by each piece's output."""
    by_src: dict[tuple[str, int], list[Node]] = {}
    for n in nodes:
        if n.op == "split":
            by_src.setdefault((n.inputs[0], n.p["axis"]), []).append(n)
    out: dict[str, list[Node]] = {}
    for (src, axis), pieces in by_src.items():
        pieces = sorted(pieces, key=lambda m: (m.p["start"], m.p["size"]))
        pos, ok = 0, True
        for m in pieces:
            if m.p["start"] != pos:
                ok = False
                break
            pos += m.p["size"]
        if ok and pos == shapes[src][axis] and len(pieces) > 1:
            for m in pieces:
                out[m.output] = pieces
    return out


def _export_split_group(group: list[Node], src: str, ex: _Exporter) -> onnx.NodeProto:
    axis = group[0].p["axis"]
    sizes = [m.p["size"] for m in group]
    outs = [m.output for m in group]
    if ex.opset >= 13:
        s = ex.add_initializer(np.array(sizes, dtype=np.int64), outs[0] + "_sizes")
        return helper.make_node("Split", [src, s], outs, name=ex.fresh("n_split"), axis=axis)
    return helper.make_node("Split", [src], outs, name=ex.fresh("n_split"), axis=axis, split=sizes)


def _export_opaque(group: list[Node], ref: Callable[[str], str], ex: _Exporter) -> onnx.NodeProto:
    p = group[0].p
    outs = [""] * p["n_outputs"]
    for m in group:
        outs[m.p["index"]] = m.output
    for k, o in enumerate(outs):  # outputs nobody reads still need a name when later ones are used
        if not o and any(outs[k + 1:]):
            outs[k] = ex.fresh(f"{p['key']}_unused{k}")
    while outs and not outs[-1]:
        outs.pop()
    ins = [ref(i) for i in group[0].inputs]
    if p["slots"]:
        it = iter(ins)
        ins = [next(it) if c == "1" else "" for c in p["slots"]]
    node = helper.make_node(p["op_type"], ins, outs, name=ex.fresh("n_" + p["op_type"]), domain=p["domain"] or None)
    for raw in p["attrs"]:
        a = onnx.AttributeProto()
        a.ParseFromString(raw)
        node.attribute.append(a)
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
            values: list[np.ndarray | None] = list(args)
            if p["slots"]:
                it = iter(args)
                values = [next(it) if c == "1" else None for c in p["slots"]]
            cache[p["key"]] = _eval_node(proto, values, opset, ir_version)
        return cache[p["key"]][p["index"]]

    return evaluate


def _graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def random_feeds(graph_or_model: Graph | onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random values for every graph input (floats ~ N(0, 1), integers in [0, 4))."""
    rng = np.random.default_rng(seed)
    if isinstance(graph_or_model, Graph):
        specs = [(i.name, i.shape, i.dtype) for i in graph_or_model.inputs]
    else:
        specs = [(i.name, _static_shape(i) or (), _np_dtype(i.type.tensor_type.elem_type))
                 for i in _graph_inputs(graph_or_model)]
    feeds = {}
    for name, shape, dtype in specs:
        dt = np.dtype(dtype)
        if dt.kind == "f":
            feeds[name] = rng.standard_normal(shape).astype(dt)
        elif dt.kind == "b":
            feeds[name] = rng.integers(0, 2, shape).astype(bool)
        else:
            feeds[name] = rng.integers(0, 4, shape).astype(dt)
    return feeds


def run_onnxruntime(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Run a model on the CPU with onnxruntime (graph optimizations off, for a faithful reference)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 2
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    return sess.run(None, {k: v for k, v in feeds.items() if k in names})


@dataclass
class NumericReport:
    """Outcome of comparing two models' outputs on the same random inputs."""

    ok: bool
    max_abs: dict[str, float] = field(default_factory=dict)
    max_rel: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    rtol: float = 1e-4

    def summary(self) -> str:
        """One line: ok/mismatch and the worst error."""
        worst = max(self.max_abs.values(), default=0.0)
        if self.ok:
            return f"ok (max abs error {worst:.2e}, rtol {self.rtol:g})"
        return "MISMATCH: " + "; ".join(self.problems)


def check_equal(original: onnx.ModelProto, optimized: onnx.ModelProto, *, seed: int = 0, rtol: float = 1e-4,
                atol: float = 1e-4, trials: int = 1) -> NumericReport:
    """Run both models in onnxruntime on seeded random inputs and compare every output.

    The absolute tolerance scales with the output's magnitude: ``atol * max(1, max|reference|)``.
    """
    report = NumericReport(True, rtol=rtol)
    names = [o.name for o in original.graph.output]
    if names != [o.name for o in optimized.graph.output]:
        return NumericReport(False, problems=[f"output names differ: {names}"])
    for t in range(trials):
        feeds = random_feeds(original, seed + t)
        ref = run_onnxruntime(original, feeds)
        got = run_onnxruntime(optimized, feeds)
        for name, a, b in zip(names, ref, got, strict=True):
            a, b = np.asarray(a), np.asarray(b)
            if a.shape != b.shape:
                report.ok = False
                report.problems.append(f"{name}: shape {b.shape} != {a.shape}")
                continue
            if a.dtype.kind not in "fc":
                if not np.array_equal(a, b):
                    report.ok = False
                    report.problems.append(f"{name}: values differ")
                continue
            diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
            scale = max(1.0, float(np.max(np.abs(a)))) if a.size else 1.0
            max_abs = float(diff.max()) if diff.size else 0.0
            report.max_abs[name] = max(report.max_abs.get(name, 0.0), max_abs)
            rel = diff / np.maximum(np.abs(a), 1e-12)
            report.max_rel[name] = max(report.max_rel.get(name, 0.0), float(rel.max()) if rel.size else 0.0)
            bad = ~(diff <= atol * scale + rtol * np.abs(a)) | ~np.isfinite(b)
            if np.any(bad & np.isfinite(a)):
                report.ok = False
                report.problems.append(f"{name}: max abs error {max_abs:.3e} over rtol {rtol:g}")
    return report
