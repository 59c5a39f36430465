"""Import: ONNX -> IR (parse, fix input shapes, fold constants, infer shapes, collapse multi-node spellings,
map each node through the registry's importers; anything else stays an ``opaque`` node)."""


from __future__ import annotations

import math
import operator
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from eqsat import ops
from eqsat.errors import DynamicShapeError, InputShapeError, ModelLoadError, ModelReadError, UnsupportedModelError
from eqsat.ir.graph import Graph, Node, TensorInfo, make_node
from eqsat.ir.names import NameAllocator
from eqsat.ir.passes import import_folds
from eqsat.ir.symbols import META_KEY, SIZE_INPUTS_KEY, VALUES_KEY, SymbolicShapeError, Symbols, symbolic_shapes
from eqsat.onnx_io.collapse import collapse_fusions
from eqsat.onnx_io.dynamic import (
    fold_allowed,
    may_fold,
    range_dtype,
    static_ints,
    symbol_names,
    symbolic_output_shape,
)
from eqsat.onnx_io.loops import LoopCount, loop_counts, loop_output_types, untyped_scan_output
from eqsat.onnx_io.precision import CONSTANT_RTOL, MIXED_KEY, PRECISION_KEY, float32_copy
from eqsat.onnx_io.protos import (
    attr_dict,
    declared_dims,
    elem_type,
    eval_node,
    format_dims,
    has_subgraph,
    input_shape_hint,
    lacks_onnx_schema,
    np_dtype,
    outer_names,
    shape_text,
    static_shape,
)
from eqsat.onnx_io.run_types import types_by_running
from eqsat.onnx_io.stored import read_model, tensor_array
from eqsat.ops import OpError, Shape
from eqsat.ops.dims import Sym

#: Ops never folded even when all inputs are constant (non-deterministic).
_NEVER_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
               "Bernoulli", "Dropout"}
_FLOAT_TYPES = {"float32"}


class _Importer:
    """Mutable state of one import; implements :class:`eqsat.ops.ImportContext`."""

    def __init__(self, model: onnx.ModelProto, label: str, input_shapes: Mapping[str, Shape] | None,
                 symbolic: bool = False) -> None:
        self.model = model
        self.label = label
        self.input_shapes = dict(input_shapes or {})
        self.symbolic = symbolic  # dynamic dimensions become symbols (else: DynamicShapeError)
        self.syms = Symbols({})
        self.stated: set[int] = set()  # with symbols: the sizes the model states (initializers, attributes, dims)
        self.symbolic_consts: set[str] = set()  # constants computed from the symbols (eqsat.onnx_io.dynamic)
        self.symbol_values: dict[str, int] = {}  # the sizes input_shapes gives the symbols
        self.loops: list[LoopCount] = []  # how many iterations each Loop runs (eqsat.onnx_io.loops)
        self.ran: dict[str, tuple[Shape, str]] | None = None  # types found by running the model (run_types)
        g = model.graph
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        if not self.opset:
            raise UnsupportedModelError(f"{label}: the model imports no default-domain (ai.onnx) opset; export it "
                                        "with a standard ONNX opset")
        self.weights: dict[str, np.ndarray] = {}
        for init in g.initializer:
            self.weights[init.name] = tensor_array(init)  # a weight left on disk: a view of its file
        self.types: dict[str, tuple[Shape | None, str]] = {}
        self.names = NameAllocator([o for n in g.node for o in n.output] + [i.name for i in g.input],
                                   also=(self.weights, self.types))
        self.ir: list[Node] = []
        self.opaque_count = 0
        # a control-flow node's subgraphs read tensors of this graph too (its implicit inputs)
        self.used = ({i for n in g.node for i in (*n.input, *outer_names(n))} | {o.name for o in g.output})
        self.why: str | None = None  # what the importer of the current node said it cannot map
        self.opaque_reasons: dict[str, Counter[str]] = {}  # op type -> reason -> nodes
        self.given: dict[str, str] = {}  # a mixed-precision model's float tensors: their precision as given

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

    def given_dtype(self, name: str) -> str:
        return self.given.get(name, "")

    def is_static(self, size: int) -> bool:
        # a size computed from a symbol need not decode as one (d + 16, a + b): with symbols, only a size the
        # model states is taken as fixed (a hidden size is a projection weight's dimension)
        return not self.syms or (size in self.stated and not isinstance(self.syms.decode(size), Sym))

    def const(self, name: str) -> np.ndarray | None:
        return self.weights.get(name)

    def add_weight(self, array: np.ndarray, hint: str) -> str:
        name = self.fresh(hint)
        self.weights[name] = np.array(array, order="C")  # ascontiguousarray would make 0-d arrays 1-d
        return name

    def unsupported(self, reason: str) -> None:
        self.why = reason

    def fresh(self, hint: str) -> str:
        return self.names.fresh(hint)


def load_model(src: str | Path | bytes | onnx.ModelProto,
               input_shapes: Mapping[str, Sequence[int]] | None = None, *, label: str | None = None,
               symbolic: bool = False, as_written: bool = False) -> Graph:
    """Import an ONNX model (opsets 7-21, IR version 3 or later) into the IR.

    ``input_shapes`` fixes the shape of graph inputs with dynamic dimensions (CLI: ``--input-shape``; with
    ``symbolic`` it gives the sizes of the input's symbols instead, ``graph.meta["symbol_values"]``); an entry
    must name a graph input, give positive sizes and agree with the input's static dimensions.
    ``label`` names the model in messages (default: the path). Raises a :class:`ModelLoadError` subclass with
    a one-line, actionable message: :class:`ModelReadError` (missing, empty or malformed file, empty graph),
    :class:`InputShapeError`, :class:`DynamicShapeError` or :class:`UnsupportedModelError` (no default-domain
    opset, an input that is no tensor). With ``symbolic``, a dynamic dimension input_shapes does not fix becomes
    a symbol: the graph is built at a generic point (:mod:`eqsat.ir.symbols`, ``graph.meta["symbols"]``), and a
    :class:`~eqsat.ir.symbols.SymbolicShapeError` says where a size cannot be followed in the symbols. A
    control-flow node (If, Loop, Scan) imports as an opaque node that also reads the tensors its subgraphs use
    from around it; the leading size of a Loop's scan outputs, how many times it runs, is a symbol of its own
    whether or not ``symbolic`` (:mod:`eqsat.onnx_io.loops`; ``graph.meta["size_inputs"]`` names a graph input
    that gives its trip count), or the number the file fixes. The import folds what onnxruntime fuses when it
    loads a model (:func:`eqsat.ir.passes.import_folds`: Conv + BatchNormalization, Conv + Add, Conv + Relu);
    ``as_written`` keeps those nodes apart, as TASO and Tensat import a model (constants are still folded and the
    unused nodes dropped).
    """
    model, default_label = read_model(src)  # never mutated: fixed shapes go into a copy for shape inference
    label = label or default_label
    model, precision, mixed, given = float32_copy(model)  # a half-precision model: written back in its precisions
    g = model.graph
    if not g.node and not g.output:
        raise ModelReadError(f"{label}: the graph is empty (no nodes and no outputs); export the model again")
    if not g.output:
        raise ModelReadError(f"{label}: the graph has no outputs; declare its outputs when exporting the model")
    imp = _Importer(model, label, _normalized_shapes(label, input_shapes), symbolic)
    imp.given = given
    inputs = _fix_inputs(imp, g)
    # weights given as graph inputs with an initializer (old opsets) are weights, not inputs
    _fold_constants(imp, model)
    _infer_types(imp, model, inputs)
    for _ in range(16):  # Shape of a static tensor is a constant: fold what depends on it, which may type more
        if not _fold_static_shapes(imp, model):
            break
        _fold_constants(imp, model)
        _infer_types(imp, model, inputs)
    live = [n for n in g.node if not all(o in imp.weights or o == "" for o in n.output)]  # others: folded
    # multi-node spellings of one operator (the registry's fusions: GELU before opset 20, layer norm before 17)
    # become that operator's node (a constant a collapse adds, say a layer norm's unit scale, is dropped with it
    # if it does not import)
    nodes, collapsed = collapse_fusions(live, imp.weights, {o.name for o in g.output},
                                        lambda name: imp.types.get(name, (None, ""))[0], imp.is_float,
                                        imp.add_weight, precision=imp.given_dtype if mixed else None,
                                        const_rtol=CONSTANT_RTOL.get(precision or mixed, 0.0))
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
            "output_dtypes": {o.name: np_dtype(o.type.tensor_type.elem_type) for o in g.output},
            # why each opaque node type stayed opaque: {op type: {reason: nodes}}
            "opaque_reasons": {k: dict(v) for k, v in imp.opaque_reasons.items()}}
    if imp.syms:
        trip_counts = _trip_count_inputs(imp, inputs)
        meta[META_KEY] = dict(imp.syms.generic)
        meta[VALUES_KEY] = dict(imp.symbol_values)
        if trip_counts:
            meta[SIZE_INPUTS_KEY] = trip_counts
    if precision:
        meta[PRECISION_KEY] = precision
    if mixed:
        meta[MIXED_KEY] = {"half": mixed, "types": given}
    graph = Graph(tuple(inputs), imp.weights, tuple(imp.ir), outputs, g.name or "graph", meta)
    try:
        # as onnxruntime runs the model: Conv + BatchNormalization folded, Conv + Add and Conv (+ Add) + Relu as
        # one node each; as written, the rules that relate the two forms let a search choose them
        graph = (graph.live() if as_written else import_folds(graph)).validate()
    except ValueError as e:
        raise ModelLoadError(f"{label}: import produced an invalid graph ({e}); this is an eqsat bug, please "
                             "report it with the model") from None
    if imp.syms:
        try:
            symbolic_shapes(graph)
        except SymbolicShapeError as e:
            raise SymbolicShapeError(f"{label}: {e}; fix the dynamic dimensions with "
                                     f"{input_shape_hint(_dynamic_inputs(g, imp.weights))}") from None
    return graph


def _dynamic_inputs(g: onnx.GraphProto, weights: Mapping[str, np.ndarray]) -> list[tuple[str, tuple | None]]:
    return [(vi.name, declared_dims(vi)) for vi in g.input if vi.name not in weights and static_shape(vi) is None]


#: a Loop's constant trip count up to this is the size its symbol is costed at (beyond, a bound such as
#: 2**63 - 1 on a loop its condition ends: 1, as any symbol the user gives no size)
_MAX_COSTED_TRIPS = 4096


def _trip_count_inputs(imp: _Importer, inputs: Sequence[TensorInfo]) -> dict[str, str]:
    """The graph inputs that give a Loop's trip count, with the symbol of its iterations (a run feeds them the
    symbol's size); a constant trip count is the size its symbol is costed at where the user gives none."""
    names = {i.name for i in inputs}
    out: dict[str, str] = {}
    for loop in imp.loops:
        if not loop.symbol:
            continue
        trips = imp.weights.get(loop.trip_count)
        if loop.trip_count in names:
            out.setdefault(loop.trip_count, loop.symbol)
        elif trips is not None and trips.size == 1 and 0 < int(trips.reshape(())) <= _MAX_COSTED_TRIPS:
            imp.symbol_values.setdefault(loop.symbol, int(trips.reshape(())))
    return out


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
            raise InputShapeError(f"{label}: --input-shape {shape_text(name, shape)}: dimension {bad[0]} is not "
                                  "positive; give every dimension as a positive integer")
        out[name] = shape
    return out


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
        text = shape_text(name, shape)
        declared = declared_dims(by_name[name])
        if declared is None:
            continue
        if len(declared) != len(shape):
            raise InputShapeError(f"{imp.label}: --input-shape {text} gives {len(shape)} dimensions but input "
                                  f"{name!r} has {len(declared)}: {format_dims(declared)}; give one size per dimension")
        if any(isinstance(d, int) and d != s for d, s in zip(declared, shape, strict=True)):
            if all(isinstance(d, int) for d in declared):
                raise InputShapeError(f"{imp.label}: input {name!r} has the static shape {format_dims(declared)}; "
                                      f"--input-shape {text} conflicts with it: drop that --input-shape (a static "
                                      "input needs none) or give the same shape")
            raise InputShapeError(f"{imp.label}: input {name!r} has the shape {format_dims(declared)}; --input-shape "
                                  f"{text} changes a static dimension: change only the dynamic ones "
                                  f"({input_shape_hint([(name, declared)])})")
    inputs: list[TensorInfo] = []
    dynamic: list[onnx.ValueInfoProto] = []
    named = symbol_names(real, {}) if imp.symbolic else {}
    if named:  # an input shape given for a dynamic input gives its symbols' sizes (costed at), not a fixed shape
        for name, shape in list(imp.input_shapes.items()):
            for axis, size in enumerate(shape):
                sym = named.get((name, axis))
                if sym is not None and imp.symbol_values.setdefault(sym, size) != size:
                    raise InputShapeError(f"{imp.label}: --input-shape gives {sym} two sizes "
                                          f"({imp.symbol_values[sym]} and {size}); give it one")
            if any((name, axis) in named for axis in range(len(shape))):
                del imp.input_shapes[name]
    # a Loop's scan outputs are as long as it runs: a symbol whatever the inputs (symbolic or not), unless fixed
    imp.loops = loop_counts(g, imp.used, named.values())
    counted = [loop.symbol for loop in imp.loops if loop.symbol]
    if named or counted:
        imp.stated = static_ints(imp.model)
        imp.syms = Symbols.choose([*dict.fromkeys(named.values()), *counted], imp.stated)
    for vi in real:
        if not vi.type.HasField("tensor_type"):
            raise UnsupportedModelError(f"{imp.label}: input {vi.name!r} is a {vi.type.WhichOneof('value')}, not a "
                                        "tensor; eqsat optimizes graphs of tensors only")
        dtype = np_dtype(vi.type.tensor_type.elem_type)
        shape = imp.input_shapes[vi.name] if vi.name in imp.input_shapes else static_shape(vi)
        if shape is None and named and all((vi.name, k) in named or d.HasField("dim_value")
                                           for k, d in enumerate(vi.type.tensor_type.shape.dim)) \
                and vi.type.tensor_type.HasField("shape"):
            shape = tuple(imp.syms.generic[named[(vi.name, k)]] if (vi.name, k) in named else int(d.dim_value)
                          for k, d in enumerate(vi.type.tensor_type.shape.dim))
        if shape is None:
            dynamic.append(vi)
            continue
        inputs.append(TensorInfo(vi.name, tuple(int(d) for d in shape), dtype))
    if dynamic:
        which = " and ".join(f"{vi.name!r} {format_dims(declared_dims(vi))}" for vi in dynamic)
        noun = "input" if len(dynamic) == 1 else "inputs"
        verb = "has a dynamic shape" if len(dynamic) == 1 else "have dynamic shapes"
        raise DynamicShapeError(f"{imp.label}: {noun} {which} {verb}; fix "
                                f"{'it' if len(dynamic) == 1 else 'them'} with "
                                f"{input_shape_hint([(vi.name, declared_dims(vi)) for vi in dynamic])}")
    for i in inputs:
        imp.types[i.name] = (i.shape, i.dtype)
    return inputs


def _fold_constants(imp: _Importer, model: onnx.ModelProto) -> None:
    opset = list(model.opset_import)
    for node in model.graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            try:
                imp.weights[node.output[0]] = eval_node(node, [], opset, model.ir_version)[0]
            except Exception:  # e.g. a sparse constant the evaluators cannot build: keep the node
                pass
            continue
        if node.domain not in ("", "ai.onnx") or node.op_type in _NEVER_FOLD or not node.input or outer_names(node):
            continue  # (a subgraph reading outer values would need them in the evaluation's scope)
        if not all(i == "" or i in imp.weights for i in node.input):
            continue
        if imp.syms and not may_fold(node, imp.symbolic_consts):
            continue
        args = [imp.weights[i] if i else None for i in node.input]
        try:
            values = eval_node(node, args, opset, model.ir_version)
        except Exception:  # the reference evaluator lacks this op: keep the node
            continue
        if imp.syms and not fold_allowed(node, args, values, imp.syms, imp.symbolic_consts):
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
            attrs = attr_dict(node)
            start, end = attrs.get("start", 0), attrs.get("end", len(shape))
            imp.weights[node.output[0]] = np.array(shape, dtype=np.int64)[start:end]  # Python slicing = ONNX's
        if imp.syms and any(isinstance(d, Sym) for d in imp.syms.decode_shape(shape)):
            imp.symbolic_consts.add(node.output[0])
        folded = True
    return folded


def _infer_types(imp: _Importer, model: onnx.ModelProto, inputs: list[TensorInfo]) -> None:
    g = model.graph
    live_nodes = [n for n in g.node if not all(o in imp.weights or o == "" for o in n.output)]
    used = {i for n in live_nodes for i in (*n.input, *outer_names(n))} | {o.name for o in g.output}
    # small constants travel as data (shape inference may need their values); large ones only as types
    small = {k: v for k, v in imp.weights.items() if k in used and v.size <= 4096}
    big = [helper.make_tensor_value_info(k, elem_type(str(v.dtype)), list(v.shape))
           for k, v in imp.weights.items() if k in used and k not in small]
    real = [helper.make_tensor_value_info(i.name, elem_type(i.dtype), list(i.shape)) for i in inputs]
    inits = [numpy_helper.from_array(v, k) for k, v in small.items()]

    # a slice bounded by a symbol ends within its data, a range up to one has its length: typed here (inference
    # would clamp the one at the generic value and cannot type the other)
    sliced = []
    if imp.syms:
        shape_of = {**{k: tuple(v.shape) for k, v in imp.weights.items()}, **{i.name: i.shape for i in inputs}}
        producers = {o: n for n in live_nodes for o in n.output if o}
        for n in live_nodes:
            out = symbolic_output_shape(n, shape_of.get(n.input[0]) if n.input else None, imp.weights,
                                        imp.symbolic_consts, imp.syms, producers)
            if out is not None:
                if n.op_type == "Range":
                    dtype = range_dtype(n, imp.weights, producers)
                    if dtype is None:
                        continue
                else:
                    dtype = str(imp.weights[n.input[0]].dtype) if n.input[0] in imp.weights else \
                        next(i.dtype for i in inputs if i.name == n.input[0])
                sliced.append(n)
                real.append(helper.make_tensor_value_info(n.output[0], elem_type(str(dtype)), list(out)))
    inferred_nodes = [n for n in live_nodes if n not in sliced]
    g2 = helper.make_graph(inferred_nodes, g.name or "g", real + big, list(g.output), inits)
    # IR 4 lets the initializers stand without a matching graph input (IR 3 shape inference ignores them)
    m2 = helper.make_model(g2, opset_imports=list(model.opset_import), ir_version=max(model.ir_version, 4))

    def infer(value_info: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
        del m2.graph.value_info[:]
        m2.graph.value_info.extend(value_info)
        try:
            return shape_inference.infer_shapes(m2, strict_mode=False, data_prop=True)
        except Exception as e:
            detail = " ".join(str(e).split())
            raise ModelLoadError(f"{imp.label}: ONNX shape inference failed ({detail}); check the model with "
                                 "onnx.checker.check_model(model, full_check=True)") from None

    # the computation decides a tensor's type: a shape the file declares (value_info) is read only for what
    # inference cannot work out (e.g. a custom operator's outputs), never over what it can (a wrong declaration
    # would otherwise be believed, and the nodes around it left unoptimized)
    inferred = infer([])
    typed = {vi.name: vi for vi in [*inferred.graph.value_info, *inferred.graph.output]
             if vi.type.HasField("tensor_type") and static_shape(vi) is not None}
    partial = {vi.name: vi for vi in [*inferred.graph.value_info, *inferred.graph.output]
               if vi.type.HasField("tensor_type")}
    loop_types = loop_output_types(live_nodes, imp.loops, partial, imp.weights, inputs, imp.syms)
    # (a Loop's scan output as long as it runs, not as long as the file says it ran once)
    skip = set(imp.weights) | set(typed) | {vi.name for vi in loop_types}
    declared = [vi for vi in g.value_info if vi.name not in skip] + loop_types
    # a declaration without static sizes ("batch", as exporters write them) types nothing here: such tensors are
    # typed by running the model like undeclared ones
    ran = _run_types(imp, live_nodes, used, typed, [vi for vi in declared if static_shape(vi) is not None], inputs)
    found = {vi.name for vi in ran}
    declared = [vi for vi in declared if vi.name not in found] + ran
    if declared:
        inferred = infer(declared)
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        if vi.type.HasField("tensor_type") and (static_shape(vi) is not None or imp.types.get(vi.name) is None):
            imp.types[vi.name] = (static_shape(vi), np_dtype(vi.type.tensor_type.elem_type))
    for vi in declared:  # a graph output declared with dynamic axes keeps them in inference: typed here
        if imp.types.get(vi.name, (None, ""))[0] is None and static_shape(vi) is not None:
            imp.types[vi.name] = (static_shape(vi), np_dtype(vi.type.tensor_type.elem_type))
    for i in inputs:
        imp.types[i.name] = (i.shape, i.dtype)
    for vi in real[len(inputs):]:  # the slices typed above
        imp.types[vi.name] = (static_shape(vi), np_dtype(vi.type.tensor_type.elem_type))


def _run_types(imp: _Importer, nodes: Sequence[onnx.NodeProto], used: set[str],
               typed: Mapping[str, onnx.ValueInfoProto], declared: Sequence[onnx.ValueInfoProto],
               inputs: Sequence[TensorInfo]) -> list[onnx.ValueInfoProto]:
    """Types for what the outputs of operators of other domains (onnxruntime's fused kernels) leave untyped,
    from running the model (:mod:`eqsat.onnx_io.run_types`): those outputs and what is computed from them."""
    known = set(typed) | {vi.name for vi in declared} | set(imp.weights)
    untyped = [o for n in nodes for o in n.output if o and o in used and o not in known]
    # an operator of another domain, or one onnxruntime adds to the default domain (ONNX has no schema for it)
    foreign = [n for n in nodes if n.domain not in ("", "ai.onnx") or lacks_onnx_schema(n)]
    if not any(o in untyped for n in foreign for o in n.output):
        return []  # a shape that depends on the data (NonZero): running once would fix it wrongly
    if imp.ran is None:  # once an import: the inference passes after each round of folding ask again
        imp.ran = types_by_running(imp.model, untyped, [(i.name, i.shape, i.dtype) for i in inputs], imp.syms)
    found = {k: v for k, v in imp.ran.items() if k in untyped}
    return [helper.make_tensor_value_info(k, elem_type(dtype), list(shape)) for k, (shape, dtype) in found.items()]


#: Operators whose outputs after the first are optional (statistics, a fused kernel's sum): importers see those
#: nobody reads as "".
_OPTIONAL_OUTPUTS = {"LayerNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization",
                     "SkipSimplifiedLayerNormalization"}


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
    importer = ops.ONNX_IMPORTERS.get(node.op_type if default_domain else f"{node.domain}:{node.op_type}")
    outs = list(node.output)
    if node.op_type in _OPTIONAL_OUTPUTS:
        outs = outs[:1] + [o if o in imp.used else "" for o in outs[1:]]
    plain = (node.op_type, list(node.input), outs, attr_dict(node))
    produced: list[Node] | None = None
    why = ""
    if not default_domain and importer is None:
        why = f"an operator of domain {node.domain!r} eqsat does not import"
    elif has_subgraph(node):
        why = "control flow: kept as it is, the graph around it optimized (its subgraphs are not)"
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

    live = Counter(op_key(n) for n in {n.p["key"]: n for n in graph.nodes if n.is_opaque}.values())
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


def _loop_counts_read(imp: _Importer, node: onnx.NodeProto) -> list[str]:
    """The symbols of Loop counts that are sizes of ``node``'s inputs."""
    sizes = {d for i in node.input if i for d in (imp.types.get(i, (None, ""))[0] or ())}
    return [loop.symbol for loop in imp.loops if loop.symbol and imp.syms.generic[loop.symbol] in sizes]


def _opaque(imp: _Importer, node: onnx.NodeProto) -> list[Node]:
    key = f"{node.name or node.op_type}#{imp.opaque_count}"
    imp.opaque_count += 1
    attrs = tuple(a.SerializeToString() for a in node.attribute)
    slots = "".join("1" if i else "0" for i in node.input)
    outer = tuple(outer_names(node))  # the IR reads them as inputs, so their producers stay and keep their order
    ins = tuple(i for i in node.input if i) + outer
    out: list[Node] = []
    for k, name in enumerate(node.output):
        if not name:
            continue
        shape, dtype = imp.types.get(name, (None, ""))
        if name in imp.weights or name not in imp.used:
            continue  # nobody reads it (e.g. a Dropout mask): export gives the slot a fresh name
        if shape is None or not dtype:
            what = f"{node.op_type} node {node.name!r}" if node.name else f"a {node.op_type} node"
            counts = _loop_counts_read(imp, node)
            scanned = next((loop for loop in imp.loops if name in loop.outputs), None)
            if scanned is not None:
                why = f"a scan output, as long as the Loop runs, whose {untyped_scan_output(scanned)}"
            elif counts:
                why = (f"its size depends on how many times a Loop runs ({', '.join(counts)}) in a way eqsat cannot "
                       "follow (a reshape to a constant length, say): compute such sizes from the Loop's output's "
                       "shape, or give the Loop a fixed trip count and a condition that stays true")
            else:
                why = ("eqsat needs static shapes: if its shape is fixed, add it to the model's value_info (a shape "
                       "that depends on input values is not supported)")
            raise DynamicShapeError(f"{imp.label}: ONNX shape inference gives no static shape for {name!r} (output "
                                    f"of {what}); {why}")
        params = {"key": key, "index": k, "op_type": node.op_type, "domain": node.domain, "attrs": attrs,
                  "shape": shape, "dtype": dtype, "n_outputs": len(node.output),
                  "slots": "" if "0" not in slots else slots, "outer": outer}
        out.append(Node("opaque", ops.get("opaque").param_tuple(ops.get("opaque").normalize(params)), ins, name))
    return out
