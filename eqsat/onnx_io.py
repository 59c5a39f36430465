"""ONNX import and export: the boundary between ONNX protos and the IR (the IR and the engine never see onnx).

Import: parse, fix input shapes, fold constants, infer shapes, collapse multi-node spellings of one operator
(:mod:`eqsat.onnx_patterns`: GELU below opset 20, layer norm below 17), map each node through the registry's
ONNX importers (anything else becomes an ``opaque`` node kept verbatim). Export: write registry ops back through
their export mappings, regroup split pieces and opaque outputs, precompute weight-only work, and check the
result with ``onnx.checker``. Also the onnxruntime helpers that :mod:`eqsat.numeric` builds on.
"""

from __future__ import annotations

import hashlib
import math
import operator
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from eqsat import ops
from eqsat.errors import DynamicShapeError, InputShapeError, ModelLoadError, ModelReadError, UnsupportedModelError
from eqsat.graph import Graph, Node, TensorInfo, fold_batchnorms, fuse_activations, fuse_residual_adds, make_node
from eqsat.onnx_patterns import collapse_patterns
from eqsat.ops import OpError, Shape

#: Ops never folded even when all inputs are constant (non-deterministic).
_NEVER_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
               "Bernoulli", "Dropout"}
_FLOAT_TYPES = {"float32"}


class ModelNotFoundError(ModelReadError, FileNotFoundError):
    """The model file does not exist."""


def _np_dtype(elem_type: int) -> str:
    return str(np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)))


def _elem_type(dtype: str) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def read_model(src: str | Path | bytes | onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """Parse an ONNX model from a path, bytes or a ``ModelProto``; returns it and a label for messages.

    Raises :class:`ModelReadError` (:class:`ModelNotFoundError` for a missing file) with a one-line message
    for a missing, empty, truncated or non-ONNX file.
    """
    if isinstance(src, onnx.ModelProto):
        return src, "<model>"
    label = "<bytes>" if isinstance(src, bytes) else str(src)
    hint = "check that it is a complete .onnx file (re-export or download it again)"
    if isinstance(src, bytes | bytearray):
        if not src:
            raise ModelReadError(f"{label} is empty (0 bytes); {hint}")
    else:
        path = Path(src)
        if not path.exists():
            raise ModelNotFoundError(f"no such model file: {src}; check the path")
        if path.is_dir():
            raise ModelReadError(f"{label} is a directory, not an ONNX model file; give the path of a .onnx file")
        try:
            size = path.stat().st_size
        except OSError as e:
            raise ModelReadError(f"{label}: cannot read it ({e.strerror or e}); check its permissions") from None
        if size == 0:
            raise ModelReadError(f"{label} is empty (0 bytes); {hint}")
    try:
        model = onnx.load_from_string(bytes(src)) if isinstance(src, bytes | bytearray) else onnx.load(str(src))
    except FileNotFoundError as e:  # external data next to the model is missing
        raise ModelNotFoundError(f"{label}: a file it needs is missing ({e.filename or e}); keep the model's "
                                 "external data files next to it") from None
    except PermissionError as e:
        raise ModelReadError(f"{label}: cannot read it ({e.strerror or e}); check its permissions") from None
    except Exception as e:
        detail = " ".join(f"{type(e).__name__}: {e}".split())
        raise ModelReadError(f"{label}: not a readable ONNX model ({detail}); {hint}") from None
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
            raise UnsupportedModelError(f"{label}: the model imports no default-domain (ai.onnx) opset; export it "
                                        "with a standard ONNX opset")
        self.weights: dict[str, np.ndarray] = {}
        for init in g.initializer:
            self.weights[init.name] = numpy_helper.to_array(init)
        self.types: dict[str, tuple[Shape | None, str]] = {}
        self.names: set[str] = {o for n in g.node for o in n.output} | {i.name for i in g.input}
        self.ir: list[Node] = []
        self.opaque_count = 0
        self.used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
        self.why: str | None = None  # what the importer of the current node said it cannot map
        self.opaque_reasons: dict[str, Counter[str]] = {}  # op type -> reason -> nodes

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

    def unsupported(self, reason: str) -> None:
        self.why = reason

    def fresh(self, hint: str) -> str:
        name, k = hint, 0
        while name in self.names or name in self.weights or name in self.types:
            k += 1
            name = f"{hint}_{k}"
        self.names.add(name)
        return name


def load_model(src: str | Path | bytes | onnx.ModelProto,
               input_shapes: Mapping[str, Sequence[int]] | None = None, *, label: str | None = None) -> Graph:
    """Import an ONNX model (opsets 7-21, IR version 3 or later) into the IR.

    ``input_shapes`` fixes the shape of graph inputs with dynamic dimensions (CLI: ``--input-shape``); an
    entry must name a graph input, give positive sizes and agree with the input's static dimensions.
    ``label`` names the model in messages (default: the path). Raises a :class:`ModelLoadError` subclass with
    a one-line, actionable message: :class:`ModelReadError` (missing, empty or malformed file, empty graph),
    :class:`InputShapeError`, :class:`DynamicShapeError` or :class:`UnsupportedModelError` (control flow).
    """
    model, default_label = read_model(src)  # never mutated: fixed shapes go into a copy for shape inference
    label = label or default_label
    g = model.graph
    if not g.node and not g.output:
        raise ModelReadError(f"{label}: the graph is empty (no nodes and no outputs); export the model again")
    if not g.output:
        raise ModelReadError(f"{label}: the graph has no outputs; declare its outputs when exporting the model")
    for n in g.node:
        if _has_subgraph(n):
            raise UnsupportedModelError(
                f"{label}: node {n.name or n.op_type!r} ({n.op_type}) holds a subgraph; control flow (If, Loop, "
                "Scan) cannot be optimized: export the model with the loop unrolled or the branch fixed "
                "(eqsat inspect describes the model)")
    imp = _Importer(model, label, _normalized_shapes(label, input_shapes))
    inputs = _fix_inputs(imp, g)
    # weights given as graph inputs with an initializer (old opsets) are weights, not inputs
    _fold_constants(imp, model)
    _infer_types(imp, model, inputs)
    if _fold_static_shapes(imp, model):  # Shape of a static tensor is a constant: fold what depends on it
        _fold_constants(imp, model)
        _infer_types(imp, model, inputs)
    live = [n for n in g.node if not all(o in imp.weights or o == "" for o in n.output)]  # others: folded
    # multi-node spellings of one operator (GELU before opset 20, layer norm before 17) become that operator's
    # node (a constant a collapse adds, say a layer norm's unit scale, is dropped with it if it does not import)
    nodes, collapsed = collapse_patterns(live, imp.weights, {o.name for o in g.output},
                                         lambda name: imp.types.get(name, (None, ""))[0], imp.is_float,
                                         imp.add_weight)
    for node in nodes:
        if id(node) in collapsed:
            produced, _ = _map_node(imp, node)
            if produced is not None:
                imp.ir.extend(produced)
                continue
            for original in collapsed[id(node)].originals:  # the operator did not import: the nodes as given
                _import_node(imp, original)
            continue
        _import_node(imp, node)
    outputs = tuple(o.name for o in g.output)
    meta = {"opset": imp.opset, "ir_version": model.ir_version, "producer": model.producer_name,
            "opset_imports": [(o.domain, o.version) for o in model.opset_import],
            "output_dtypes": {o.name: _np_dtype(o.type.tensor_type.elem_type) for o in g.output},
            # why each opaque node type stayed opaque: {op type: {reason: nodes}}
            "opaque_reasons": {k: dict(v) for k, v in imp.opaque_reasons.items()}}
    graph = Graph(tuple(inputs), imp.weights, tuple(imp.ir), outputs, g.name or "graph", meta)
    try:
        # as onnxruntime runs the model: Conv + BatchNormalization folded, Conv + Add and Conv (+ Add) + Relu as
        # one node each
        return fuse_activations(fuse_residual_adds(fold_batchnorms(graph.live()))).validate()
    except ValueError as e:
        raise ModelLoadError(f"{label}: import produced an invalid graph ({e}); this is an eqsat bug, please "
                             "report it with the model") from None


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


def _normalized_shapes(label: str, input_shapes: Mapping[str, Sequence[int]] | None) -> dict[str, Shape]:
    """``input_shapes`` as tuples of positive ints; :class:`InputShapeError` for anything else."""
    out: dict[str, Shape] = {}
    for name, dims in (input_shapes or {}).items():
        try:
            shape = tuple(operator.index(d) for d in dims)
        except TypeError:
            raise InputShapeError(f"{label}: input shape {name}={dims!r} is not a list of integers; give it as "
                                  f"--input-shape {name}=1,3,224,224 (Python: input_shapes={{{name!r}: "
                                  "(1, 3, 224, 224)}})") from None
        bad = [d for d in shape if d <= 0]
        if bad:
            raise InputShapeError(f"{label}: --input-shape {_shape_text(name, shape)}: dimension {bad[0]} is not "
                                  "positive; give every dimension as a positive integer")
        out[name] = shape
    return out


def _shape_text(name: str, dims: Sequence[int | str]) -> str:
    return f"{name}={','.join(str(d) for d in dims)}"


def _dims(vi: onnx.ValueInfoProto) -> tuple[int | str, ...] | None:
    """Declared dimensions of a tensor: ints, symbolic names, ``"?"`` for unnamed unknowns; ``None`` when
    even the rank is unknown."""
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    return tuple(int(d.dim_value) if d.HasField("dim_value") and d.dim_value >= 0 else (d.dim_param or "?")
                 for d in t.shape.dim)


def _fmt_dims(dims: Sequence[int | str] | None) -> str:
    return "[?]" if dims is None else "[" + ", ".join(str(d) for d in dims) + "]"


def input_shape_hint(inputs: Sequence[tuple[str, Sequence[int | str] | None]]) -> str:
    """The ``--input-shape`` options that fix the given (name, declared dims) inputs, with each dynamic
    dimension written as its symbolic name (or ``N``) for the user to replace by a size."""
    opts, names = [], []
    for name, dims in inputs:
        if dims is None:
            opts.append(f"--input-shape {name}=d1,d2,...")
            continue
        shown = []
        for d in dims:
            if isinstance(d, int):
                shown.append(str(d))
            else:
                sym = d if d.isidentifier() else "N"
                shown.append(sym)
                if sym not in names:
                    names.append(sym)
        opts.append(f"--input-shape {_shape_text(name, shown)}")
    what = f", replacing {', '.join(names)} by the size{'s' if len(names) > 1 else ''} to optimize for" if names \
        else ""
    return " ".join(opts) + what


def _fix_inputs(imp: _Importer, g: onnx.GraphProto) -> list[TensorInfo]:
    real = [vi for vi in g.input if vi.name not in imp.weights]
    by_name = {vi.name: vi for vi in real}
    unknown = [name for name in imp.input_shapes if name not in by_name]
    if unknown:
        weights = [name for name in unknown if name in imp.weights]
        note = f" ({', '.join(repr(n) for n in weights)}: a weight, not an input)" if weights else ""
        raise InputShapeError(f"{imp.label}: --input-shape names unknown inputs: {', '.join(repr(n) for n in unknown)}"
                              f"{note}; the model's inputs are {', '.join(repr(n) for n in by_name) or 'none'}")
    for name, shape in imp.input_shapes.items():
        text = _shape_text(name, shape)
        declared = _dims(by_name[name])
        if declared is None:
            continue
        if len(declared) != len(shape):
            raise InputShapeError(f"{imp.label}: --input-shape {text} gives {len(shape)} dimensions but input "
                                  f"{name!r} has {len(declared)}: {_fmt_dims(declared)}; give one size per dimension")
        if any(isinstance(d, int) and d != s for d, s in zip(declared, shape, strict=True)):
            if all(isinstance(d, int) for d in declared):
                raise InputShapeError(f"{imp.label}: input {name!r} has the static shape {_fmt_dims(declared)}; "
                                      f"--input-shape {text} conflicts with it: drop that --input-shape (a static "
                                      "input needs none) or give the same shape")
            raise InputShapeError(f"{imp.label}: input {name!r} has the shape {_fmt_dims(declared)}; --input-shape "
                                  f"{text} changes a static dimension: change only the dynamic ones "
                                  f"({input_shape_hint([(name, declared)])})")
    inputs: list[TensorInfo] = []
    dynamic: list[onnx.ValueInfoProto] = []
    for vi in real:
        if not vi.type.HasField("tensor_type"):
            raise UnsupportedModelError(f"{imp.label}: input {vi.name!r} is a {vi.type.WhichOneof('value')}, not a "
                                        "tensor; eqsat optimizes graphs of tensors only")
        dtype = _np_dtype(vi.type.tensor_type.elem_type)
        shape = imp.input_shapes[vi.name] if vi.name in imp.input_shapes else _static_shape(vi)
        if shape is None:
            dynamic.append(vi)
            continue
        inputs.append(TensorInfo(vi.name, tuple(int(d) for d in shape), dtype))
    if dynamic:
        which = " and ".join(f"{vi.name!r} {_fmt_dims(_dims(vi))}" for vi in dynamic)
        noun = "input" if len(dynamic) == 1 else "inputs"
        verb = "has a dynamic shape" if len(dynamic) == 1 else "have dynamic shapes"
        raise DynamicShapeError(f"{imp.label}: {noun} {which} {verb}; fix "
                                f"{'it' if len(dynamic) == 1 else 'them'} with "
                                f"{input_shape_hint([(vi.name, _dims(vi)) for vi in dynamic])}")
    for i in inputs:
        imp.types[i.name] = (i.shape, i.dtype)
    return inputs


def _fold_constants(imp: _Importer, model: onnx.ModelProto) -> None:
    opset = list(model.opset_import)
    for node in model.graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            try:
                imp.weights[node.output[0]] = _eval_node(node, [], opset, model.ir_version)[0]
            except Exception:  # e.g. a sparse constant the evaluators cannot build: keep the node
                pass
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


def _fold_static_shapes(imp: _Importer, model: onnx.ModelProto) -> bool:
    """Fold ``Shape`` and ``Size`` nodes whose input has a static inferred shape (exporters compute attention
    scales and reshape targets from them at run time); True if any was folded."""
    folded = False
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("Shape", "Size") or not node.output[0] \
                or node.output[0] in imp.weights:
            continue
        shape = imp.types.get(node.input[0], (None, ""))[0]
        if shape is None:
            continue
        if node.op_type == "Size":
            imp.weights[node.output[0]] = np.array(math.prod(shape), dtype=np.int64)
        else:
            attrs = _attr_dict(node)
            start, end = attrs.get("start", 0), attrs.get("end", len(shape))
            imp.weights[node.output[0]] = np.array(shape, dtype=np.int64)[start:end]  # Python slicing = ONNX's
        folded = True
    return folded


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
    # IR 4 lets the initializers stand without a matching graph input (IR 3 shape inference ignores them)
    m2 = helper.make_model(g2, opset_imports=list(model.opset_import), ir_version=max(model.ir_version, 4))
    try:
        inferred = shape_inference.infer_shapes(m2, strict_mode=False, data_prop=True)
    except Exception as e:
        detail = " ".join(str(e).split())
        raise ModelLoadError(f"{imp.label}: ONNX shape inference failed ({detail}); check the model with "
                             "onnx.checker.check_model(model, full_check=True)") from None
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        if vi.type.HasField("tensor_type"):
            imp.types[vi.name] = (_static_shape(vi), _np_dtype(vi.type.tensor_type.elem_type))
    for i in inputs:
        imp.types[i.name] = (i.shape, i.dtype)


#: Operators whose outputs after the first are optional statistics: importers see those nobody reads as "".
_OPTIONAL_OUTPUTS = {"LayerNormalization"}


def _import_node(imp: _Importer, node: onnx.NodeProto) -> None:
    produced, why = _map_node(imp, node)
    if produced is None:
        produced = _opaque(imp, node)
        key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}"
        imp.opaque_reasons.setdefault(key, Counter())[why] += 1
    imp.ir.extend(produced)


def _map_node(imp: _Importer, node: onnx.NodeProto) -> tuple[list[Node] | None, str]:
    """The IR nodes an ONNX node imports as through the registry, or ``None`` and why it stays opaque."""
    default_domain = node.domain in ("", "ai.onnx")
    importer = ops.ONNX_IMPORTERS.get(node.op_type) if default_domain else None
    outs = list(node.output)
    if node.op_type in _OPTIONAL_OUTPUTS:
        outs = outs[:1] + [o if o in imp.used else "" for o in outs[1:]]
    plain = (node.op_type, list(node.input), outs, _attr_dict(node))
    produced: list[Node] | None = None
    why = ""
    if not default_domain:
        why = f"an operator of domain {node.domain!r} (only the default ONNX domain is imported)"
    elif importer is None:
        why = f"eqsat has no operator for {node.op_type}"
    elif not all(i == "" or i in imp.weights or i in imp.types for i in node.input):
        why = "an input without a static shape and type"
    else:
        imp.why = None
        try:
            result = importer(imp, plain)
            if result is not None:
                produced = _materialize(imp, result)
                why = "eqsat's shape for it disagrees with ONNX shape inference"
            else:
                why = f"unsupported: {imp.why}" if imp.why else "an unsupported configuration"
        except (OpError, KeyError, ValueError, TypeError) as e:
            why = f"its import failed ({' '.join(str(e).split()) or type(e).__name__})"
    return produced, why


def opaque_reasons(graph: Graph) -> list[tuple[str, int, str]]:
    """Why the opaque operators of an imported graph stayed opaque: (op type, ONNX nodes, reason), most
    frequent type first, one entry per (type, reason) as recorded at import."""
    def op_key(n: Node) -> str:
        return n.p["op_type"] if n.p["domain"] in ("", "ai.onnx") else f"{n.p['domain']}:{n.p['op_type']}"

    live = Counter(op_key(n) for n in {n.p["key"]: n for n in graph.nodes if n.op == "opaque"}.values())
    recorded = graph.meta.get("opaque_reasons", {})
    out = []
    for op_type in sorted(live, key=lambda k: (-live[k], k)):
        reasons = recorded.get(op_type) or {"not recorded (the graph was not imported from ONNX)": live[op_type]}
        out += [(op_type, n, why) for why, n in sorted(reasons.items(), key=lambda kv: -kv[1])]
    return out


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
            what = f"{node.op_type} node {node.name!r}" if node.name else f"a {node.op_type} node"
            raise DynamicShapeError(f"{imp.label}: ONNX shape inference gives no static shape for {name!r} (output "
                                    f"of {what}); eqsat needs static shapes: if its shape is fixed, add it to the "
                                    "model's value_info (a shape that depends on input values is not supported)")
        params = {"key": key, "index": k, "op_type": node.op_type, "domain": node.domain, "attrs": attrs,
                  "shape": shape, "dtype": dtype, "n_outputs": len(node.output),
                  "slots": "" if "0" not in slots else slots}
        out.append(Node("opaque", ops.get("opaque").param_tuple(ops.get("opaque").normalize(params)), ins, name))
    return out



@dataclass(frozen=True)
class TensorSummary:
    """A graph input or output as the ONNX file declares it."""

    name: str
    dims: tuple[int | str, ...] | None  # ints, symbolic names, "?" for unnamed unknowns; None: rank unknown
    dtype: str

    @property
    def dynamic(self) -> list[str]:
        """The dimensions that are not fixed sizes (all of them, as ``"?"``, when the rank is unknown)."""
        return ["?"] if self.dims is None else [str(d) for d in self.dims if not isinstance(d, int)]

    def shape_text(self) -> str:
        """``[batch, 3, 224, 224]``."""
        return _fmt_dims(self.dims)


@dataclass
class ModelSummary:
    """What an ONNX file contains, read from the file alone (no shape inference, no import): it describes
    models that eqsat cannot import, such as models with dynamic shapes or control flow."""

    label: str
    ir_version: int
    opset: int | None
    producer: str
    inputs: list[TensorSummary]
    outputs: list[TensorSummary]
    initializers: int
    op_histogram: Counter[str]  # top-level nodes per op type ("domain:Op" outside the default domain)
    subgraph_op_histogram: Counter[str]  # nodes inside If/Loop/Scan bodies
    control_flow: list[str] = field(default_factory=list)  # "Loop 'loop1'" for each node holding a subgraph

    @property
    def nodes(self) -> int:
        """Top-level ONNX nodes."""
        return sum(self.op_histogram.values())

    def dynamic_inputs(self) -> list[TensorSummary]:
        """Inputs with a dimension that is not a fixed size."""
        return [i for i in self.inputs if i.dynamic]

    def input_shape_hint(self) -> str:
        """The ``--input-shape`` options that would fix every dynamic input ("" when none is dynamic)."""
        dyn = self.dynamic_inputs()
        return input_shape_hint([(i.name, i.dims) for i in dyn]) if dyn else ""


def _op_key(node: onnx.NodeProto) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}"


def _subgraph_nodes(node: onnx.NodeProto) -> list[onnx.NodeProto]:
    out: list[onnx.NodeProto] = []
    for a in node.attribute:
        graphs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs) \
            if a.type == onnx.AttributeProto.GRAPHS else []
        for sub in graphs:
            for n in sub.node:
                out.append(n)
                out.extend(_subgraph_nodes(n))
    return out


def _tensor_summary(vi: onnx.ValueInfoProto) -> TensorSummary:
    if not vi.type.HasField("tensor_type"):
        return TensorSummary(vi.name, None, vi.type.WhichOneof("value") or "unknown type")
    try:
        dtype = _np_dtype(vi.type.tensor_type.elem_type)
    except Exception:  # undefined or exotic element type
        dtype = onnx.TensorProto.DataType.Name(vi.type.tensor_type.elem_type).lower()
    return TensorSummary(vi.name, _dims(vi), dtype)


def summarize_model(src: str | Path | bytes | onnx.ModelProto, *, label: str | None = None) -> ModelSummary:
    """Describe an ONNX model from the file alone: declared input/output shapes (symbolic dimensions kept),
    operator histogram, control-flow nodes. ``label`` names the model (default: the path). Raises
    :class:`ModelReadError` only for unreadable files."""
    model, default_label = read_model(src)
    label = label or default_label
    g = model.graph
    inits = {i.name for i in g.initializer}
    hist: Counter[str] = Counter(_op_key(n) for n in g.node)
    sub: Counter[str] = Counter()
    flow: list[str] = []
    for n in g.node:
        inner = _subgraph_nodes(n)
        if inner or _has_subgraph(n):
            flow.append(f"{n.op_type} {n.name!r} ({len(inner)} nodes inside)" if n.name
                        else f"{n.op_type} ({len(inner)} nodes inside)")
            sub.update(_op_key(m) for m in inner)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    return ModelSummary(label, model.ir_version, opset, model.producer_name,
                        [_tensor_summary(vi) for vi in g.input if vi.name not in inits],
                        [_tensor_summary(vi) for vi in g.output], len(inits), hist, sub, flow)


# ---------------------------------------------------------------------------------------------------------
# export


class _Exporter:
    """Implements :class:`eqsat.ops.ExportContext` while writing one model."""

    def __init__(self, opset: int, taken: set[str], shapes: dict[str, Shape] | None = None) -> None:
        self.opset = opset
        self.taken = set(taken)
        self.initializers: dict[str, np.ndarray] = {}
        self._by_content: dict[tuple[str, Shape, str], str] = {}
        self._shapes = shapes or {}

    def shape(self, name: str) -> Shape | None:
        if name in self.initializers:
            return tuple(self.initializers[name].shape)
        return self._shapes.get(name)

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

    def unsupported(self, reason: str) -> None:
        self.why = reason

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
    ex = _Exporter(opset, taken, shapes)
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
    input_names = {i.name for i in graph.inputs}
    for o in graph.outputs:
        if o in consts and o not in input_names:
            src = ref(o)
            if src == o:  # the output name itself is an initializer: move it aside and copy it out
                alias = ex.fresh(o + "_value")
                ex.initializers[alias] = ex.initializers.pop(o)
                for k, v in list(ex._by_content.items()):
                    if v == o:
                        ex._by_content[k] = alias
                src = alias
            nodes.append(helper.make_node("Identity", [src], [o], name=ex.fresh("n_identity")))
        # an output that is a graph input passes through as it is: ONNX allows a name to be both
        dtype = graph.meta.get("output_dtypes", {}).get(o, dtypes.get(o, "float32"))
        outputs.append(helper.make_tensor_value_info(o, _elem_type(dtype), list(shapes[o])))
    inputs = [helper.make_tensor_value_info(i.name, _elem_type(i.dtype), list(i.shape)) for i in graph.inputs]
    read = {i for n in nodes for i in n.input} | {o.name for o in outputs}
    # weights nobody reads (e.g. a zero bias dropped from a Conv) stay out of the file
    inits = [numpy_helper.from_array(v, k) for k, v in ex.initializers.items() if k in read]
    g = helper.make_graph(nodes, graph.name, inputs, outputs, inits)
    opsets = [helper.make_opsetid(d, v) for d, v in graph.meta.get("opset_imports", []) if d not in ("", "ai.onnx")]
    opsets.insert(0, helper.make_opsetid("", opset))
    ir_version = int(graph.meta.get("ir_version") or 0) or onnx.helper.VERSION_TABLE[-1][1]
    ir_version = max(ir_version, 4)  # IR 4+: initializers need not be listed as graph inputs
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
    """The ONNX node an opaque node's parameters ``p`` stand for, reading ``ins`` (the present inputs, put back
    in their slots) and writing ``outs``, with its original attributes."""
    ins = list(ins)
    if p["slots"]:
        it = iter(ins)
        ins = [next(it) if c == "1" else "" for c in p["slots"]]
    node = helper.make_node(p["op_type"], ins, list(outs), name=name, domain=p["domain"] or None)
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


#: Integer inputs are drawn from [0, INT_INPUT_BOUND): valid token ids, token types and 0/1 attention masks
#: (a mask of 3 overflows transformers' ``(1 - mask) * float32 min`` to infinity and makes every output NaN).
INT_INPUT_BOUND = 2


def int_input_bounds(model: onnx.ModelProto) -> dict[str, int]:
    """For integer graph inputs that index a constant table (``Gather`` on an initializer), the table's size
    along the gathered axis: random indices must stay below it (a one-row token-type table, say)."""
    tables = {t.name: tuple(t.dims) for t in model.graph.initializer}
    bounds: dict[str, int] = {}
    for n in model.graph.node:
        if n.op_type == "Gather" and len(n.input) > 1 and n.input[0] in tables:
            axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
            dims = tables[n.input[0]]
            if dims and -len(dims) <= axis < len(dims):
                bounds[n.input[1]] = min(bounds.get(n.input[1], dims[axis]), dims[axis])
    return bounds


def random_ints(rng: np.random.Generator, shape: Shape, dtype: np.dtype, bound: int | None) -> np.ndarray:
    """Random integers for an integer input, in [0, min(INT_INPUT_BOUND, bound))."""
    return rng.integers(0, max(1, min(INT_INPUT_BOUND, bound or INT_INPUT_BOUND)), shape).astype(dtype)


def random_feeds(graph_or_model: Graph | onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random values for every graph input (floats ~ N(0, 1), integers as :func:`random_ints`)."""
    rng = np.random.default_rng(seed)
    if isinstance(graph_or_model, Graph):
        specs = [(i.name, i.shape, i.dtype) for i in graph_or_model.inputs]
        bounds: dict[str, int] = {}
    else:
        specs = [(i.name, _static_shape(i) or (), _np_dtype(i.type.tensor_type.elem_type))
                 for i in _graph_inputs(graph_or_model)]
        bounds = int_input_bounds(graph_or_model)
    feeds = {}
    for name, shape, dtype in specs:
        dt = np.dtype(dtype)
        if dt.kind == "f":
            feeds[name] = rng.standard_normal(shape).astype(dt)
        elif dt.kind == "b":
            feeds[name] = rng.integers(0, 2, shape).astype(bool)
        else:
            feeds[name] = random_ints(rng, shape, dt, bounds.get(name))
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
