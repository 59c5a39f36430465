"""onnxruntime helpers: random feeds within the bounds a model's integer inputs allow, and a plain run."""


from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from eqsat.ir.graph import Graph
from eqsat.ir.symbols import graph_size_inputs, graph_symbols, representative
from eqsat.onnx_io.protos import copy_fields, np_dtype, static_shape
from eqsat.onnx_io.stored import PLAIN_TYPES, is_on_disk, tensor_array, with_data_of
from eqsat.ops import Shape


def _graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


#: Integer inputs are drawn from [0, INT_INPUT_BOUND): valid token ids, token types and 0/1 attention masks
#: (a mask of 3 overflows transformers' ``(1 - mask) * float32 min`` to infinity and makes every output NaN).
#: An input that indexes a table (token ids into an embedding) is drawn from the whole table instead: with two
#: ids, a one-token step has two possible inputs, and the check's trials would often all be one of them.
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
    """Random integers for an integer input: in [0, bound) for one that indexes a table of ``bound`` rows
    (:func:`int_input_bounds`), else in [0, INT_INPUT_BOUND)."""
    return rng.integers(0, max(1, bound or INT_INPUT_BOUND), shape).astype(dtype)


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


def onnxruntime_runner(model: onnx.ModelProto, outputs: Sequence[str] = (),
                       arrays: Mapping[str, np.ndarray] | None = None
                       ) -> Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]:
    """:func:`run_onnxruntime` for several feeds: one session, made once. The run gives each graph output, then
    each tensor of ``outputs`` that is not one, by name.

    The session takes the model's large weights as inputs, fed from memory with every run, rather than as
    initializers: a 440 MB BERT took 1.2 s to serialize and 0.5 s to parse, and onnxruntime copies initializers
    it is given from memory (0.25 s), longer than the runs themselves. With graph optimizations and the packing of
    weights off, a weight fed as an input computes what the initializer does (packed, a 4-bit MatMulNBits at
    accuracy level 4 computes differently: both models of a check run unpacked). A weight left on disk
    (:mod:`eqsat.onnx_io.stored`) is fed from its file's memory map. ``arrays``: weights already in memory (the
    IR graph a model was exported from), each fed in place of the copy a weight of its name would take out of the
    model, where it holds the very bytes that weight holds (compared here)."""
    skeleton, weights = _weights_as_inputs(model, arrays or {})
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


def inference_session(model: onnx.ModelProto, so: ort.SessionOptions) -> tuple[ort.InferenceSession, list[Any]]:
    """An onnxruntime session (CPU) of ``model``, and what must stay alive while it runs: its weights left on disk
    (:mod:`eqsat.onnx_io.stored`), given to it from their files' memory maps as external initializers."""
    names, values = [], []
    for t in model.graph.initializer:
        if is_on_disk(t):
            names.append(t.name)
            values.append(ort.OrtValue.ortvalue_from_numpy(tensor_array(t)))
    if names:
        so.add_external_initializers(names, values)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]), values


#: weights of at least this many bytes go to onnxruntime from memory (smaller ones, shapes and scalars that
#: shape inference reads, stay in the model)
_WEIGHT_BYTES = 4096
def _weights_as_inputs(model: onnx.ModelProto, arrays: Mapping[str, np.ndarray]
                       ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A copy of ``model`` whose large main-graph weights are graph inputs instead, and those weights as arrays
    (onnxruntime checks each one's type and shape against its input when it is fed); a weight left on disk stays
    in the copy with its bytes where it is not fed. ``model`` is not changed."""
    skeleton = onnx.ModelProto()
    copy_fields(model, skeleton, skip=("graph",))
    copy_fields(model.graph, skeleton.graph, skip=("initializer",))
    weights: dict[str, np.ndarray] = {}
    inputs = {i.name for i in model.graph.input}  # a weight that is also an input is a default a feed overrides
    for t in model.graph.initializer:
        on_disk = is_on_disk(t)
        # the size from the dims: reading raw_data copies it
        if t.data_type not in PLAIN_TYPES or not (on_disk or t.HasField("raw_data")) \
                or (t.data_location == onnx.TensorProto.EXTERNAL and not on_disk) or t.name in weights \
                or t.name in inputs \
                or math.prod(t.dims) * helper.tensor_dtype_to_np_dtype(t.data_type).itemsize < _WEIGHT_BYTES:
            skeleton.graph.initializer.append(with_data_of(t) if on_disk else t)
            continue
        given = None if on_disk else _holding(t, arrays.get(t.name))
        weights[t.name] = given if given is not None else tensor_array(t)
        skeleton.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return skeleton, weights


def _holding(t: onnx.TensorProto, array: np.ndarray | None) -> np.ndarray | None:
    """``array`` where it holds exactly the bytes, element type and shape of ``t`` (kept in ``raw_data``), else
    None: a weight that is fed from outside the model is still the model's own."""
    if array is None or array.dtype != helper.tensor_dtype_to_np_dtype(t.data_type) \
            or tuple(array.shape) != tuple(t.dims) or sys.byteorder != "little":
        return None
    raw = t.raw_data  # a copy (protobuf's), one weight at a time
    if len(raw) != array.nbytes:
        return None
    mine = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    return array if np.array_equal(np.frombuffer(raw, dtype=np.uint8), mine) else None
