"""onnxruntime helpers: random feeds within the bounds a model's integer inputs allow, and a plain run."""


from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
import onnx
import onnxruntime as ort
from google.protobuf.message import Message
from onnx import helper, numpy_helper

from eqsat.ir.graph import Graph
from eqsat.ir.symbols import graph_size_inputs, graph_symbols, representative
from eqsat.onnx_io.protos import np_dtype, static_shape
from eqsat.ops import Shape


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
    if isinstance(graph_or_model, Graph):  # a graph with symbols: at the sizes it is costed at
        syms, sizes = graph_symbols(graph_or_model), representative(graph_or_model)
        specs = [(i.name, syms.at(i.shape, sizes) if syms else i.shape, i.dtype) for i in graph_or_model.inputs]
        feeds = random_inputs(specs, rng, {})
        for name, sym in graph_size_inputs(graph_or_model).items():  # a Loop's trip count: as many iterations
            feeds[name] = np.full(feeds[name].shape, sizes.get(sym, 1), dtype=feeds[name].dtype)
        return feeds
    specs = [(i.name, static_shape(i) or (), np_dtype(i.type.tensor_type.elem_type))
             for i in _graph_inputs(graph_or_model)]
    return random_inputs(specs, rng, int_input_bounds(graph_or_model))


def random_inputs(specs: Iterable[tuple[str, Shape, str]], rng: np.random.Generator,
                  bounds: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Random values for inputs given as (name, shape, dtype): floats ~ N(0, 1), booleans fair coins, integers
    as :func:`random_ints` below the input's bound in ``bounds``."""
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
    return list(onnxruntime_runner(model)(feeds).values())


def onnxruntime_runner(model: onnx.ModelProto, outputs: Sequence[str] = ()
                       ) -> Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]:
    """:func:`run_onnxruntime` for several feeds: one session, made once. The run gives each graph output, then
    each tensor of ``outputs`` that is not one, by name.

    The session takes the model's large weights as inputs, fed from memory with every run, rather than as
    initializers: a 440 MB BERT took 1.2 s to serialize and 0.5 s to parse, and onnxruntime copies initializers
    it is given from memory (0.25 s), longer than the runs themselves. With graph optimizations and the packing of
    weights off, a weight fed as an input computes what the initializer does (packed, a 4-bit MatMulNBits at
    accuracy level 4 computes differently: both models of a check run unpacked)."""
    skeleton, weights = _weights_as_inputs(model)
    have = {o.name for o in skeleton.graph.output}
    skeleton.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in dict.fromkeys(outputs)
                                 if n not in have)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 2
    so.log_severity_level = 4  # a failed run raises, and the caller says why in its own words
    # no weight is packed for its kernel: those fed as inputs cannot be, so the small ones kept as initializers
    # are computed the same way (packing is also what took most of a session's start before)
    so.add_session_config_entry("session.disable_prepacking", "1")
    sess = ort.InferenceSession(skeleton.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = {i.name for i in (*sess.get_inputs(), *sess.get_overridable_initializers())} - weights.keys()
    out_names = [o.name for o in sess.get_outputs()]
    return lambda feeds: dict(zip(out_names, sess.run(None, {**{k: v for k, v in feeds.items() if k in names},
                                                            **weights}), strict=True))


#: weights of at least this many bytes go to onnxruntime from memory (smaller ones, shapes and scalars that
#: shape inference reads, stay in the model)
_WEIGHT_BYTES = 4096
#: the element types whose weights go to onnxruntime from memory (numpy holds them as they are stored)
_PLAIN_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
                          onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32,
                          onnx.TensorProto.INT64, onnx.TensorProto.UINT8, onnx.TensorProto.UINT16,
                          onnx.TensorProto.UINT32, onnx.TensorProto.UINT64, onnx.TensorProto.BOOL})


def _weights_as_inputs(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A copy of ``model`` whose large main-graph weights are graph inputs instead, and those weights as arrays
    (onnxruntime checks each one's type and shape against its input when it is fed). ``model`` is not changed."""
    skeleton = onnx.ModelProto()
    _copy_fields(model, skeleton, skip="graph")
    _copy_fields(model.graph, skeleton.graph, skip="initializer")
    weights: dict[str, np.ndarray] = {}
    inputs = {i.name for i in model.graph.input}  # a weight that is also an input is a default a feed overrides
    for t in model.graph.initializer:
        # the size from the dims: reading raw_data copies it
        if t.data_location == onnx.TensorProto.EXTERNAL or t.data_type not in _PLAIN_TYPES \
                or not t.HasField("raw_data") or t.name in weights or t.name in inputs \
                or math.prod(t.dims) * helper.tensor_dtype_to_np_dtype(t.data_type).itemsize < _WEIGHT_BYTES:
            skeleton.graph.initializer.append(t)
            continue
        weights[t.name] = numpy_helper.to_array(t)
        skeleton.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return skeleton, weights


def _copy_fields(src: Message, dst: Message, skip: str) -> None:
    """Copy every set field of ``src`` but ``skip`` into ``dst`` (a message of the same type)."""
    for field, value in src.ListFields():
        if field.name == skip:
            continue
        if isinstance(value, Message):
            getattr(dst, field.name).CopyFrom(value)
        elif isinstance(value, str | bytes | int | float):
            setattr(dst, field.name, value)
        else:  # a repeated field
            getattr(dst, field.name).extend(value)
