"""Small helpers over ONNX protos shared by import, export and the summary: reading and writing a model, dtypes,
shapes, attributes, evaluating one node."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, shape_inference
from onnx.external_data_helper import load_external_data_for_model, set_external_data
from onnx.reference import ReferenceEvaluator

from eqsat.errors import ModelReadError
from eqsat.files import is_special_file, write_file
from eqsat.ops import Shape

#: Ops never folded even when all inputs are constant (non-deterministic).

class ModelNotFoundError(ModelReadError, FileNotFoundError):
    """The model file does not exist."""


def np_dtype(elem_type: int) -> str:
    """The numpy dtype name (``"float32"``) of an ONNX element type."""
    return str(np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)))


def elem_type(dtype: str) -> int:
    """The ONNX element type of a numpy dtype name."""
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def read_model(src: str | Path | bytes | onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """Parse an ONNX model from a path, bytes or a ``ModelProto``; returns it and a label for messages.

    Raises :class:`ModelReadError` (:class:`ModelNotFoundError` for a missing file) with a one-line message
    for a missing, empty, truncated or non-ONNX file.
    """
    model, label, _ = read_model_stored(src)
    return model, label


def read_model_stored(src: str | Path | bytes | onnx.ModelProto) -> tuple[onnx.ModelProto, str, bool]:
    """:func:`read_model`, and whether the file kept tensors as external data (loaded into the model here)."""
    if isinstance(src, onnx.ModelProto):
        return src, "<model>", False
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
    external = False
    try:
        if isinstance(src, bytes | bytearray):
            model = onnx.load_from_string(bytes(src))
        else:  # as onnx.load does, noting whether there was external data to load
            model = onnx.load(str(src), load_external_data=False)
            external = any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
            load_external_data_for_model(model, str(Path(src).parent))  # any tensor's, control-flow bodies' too
    except FileNotFoundError as e:  # external data next to the model is missing
        raise ModelNotFoundError(f"{label}: a file it needs is missing ({e.filename or e}); keep the model's "
                                 "external data files next to it") from None
    except PermissionError as e:
        raise ModelReadError(f"{label}: cannot read it ({e.strerror or e}); check its permissions") from None
    except Exception as e:
        detail = " ".join(f"{type(e).__name__}: {e}".split())
        raise ModelReadError(f"{label}: not a readable ONNX model ({detail}); {hint}") from None
    return model, label, external


#: weights of at least this many bytes go to the external data file when a model is written with one
EXTERNAL_DATA_THRESHOLD = 1024


def write_model(model: onnx.ModelProto, path: str | Path, data: str | None = None) -> None:
    """Save ``model`` to ``path``; with ``data``, a file name, its weights of :data:`EXTERNAL_DATA_THRESHOLD`
    bytes and more go to that file beside it (an older one is replaced, not appended to), which gets the
    permissions the model file got from the user's umask (onnx creates data files readable by their owner
    only). ``model`` itself is not changed.

    onnx's own ``save_model(save_as_external_data=True)`` refuses a data file name that exists in the current
    folder, wherever the model goes: a second run writing next to its first output failed there."""
    path = Path(path)
    if data is None:
        onnx.save(model, str(path))
        return
    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # marking a weight external moves its bytes out of the proto saved
    for g in all_graphs(copy.graph):
        for t in g.initializer:
            if t.HasField("raw_data") and len(t.raw_data) >= EXTERNAL_DATA_THRESHOLD:
                set_external_data(t, data)
    target = path.parent / data
    target.unlink(missing_ok=True)
    onnx.save_model(copy, str(path))  # writes the external tensors' bytes to ``target``
    if target.exists():
        shutil.copymode(path, target)


def save_model(model: onnx.ModelProto, out: str | Path, external_data: bool = False) -> None:
    """Write ``model`` to ``out`` as a finished file only (through a temporary one, :func:`eqsat.files.write_file`;
    missing folders are created). With ``external_data`` and a regular file, its weights go to ``<name>.data``
    beside it: both files are written aside first and then moved into place, so a failed write leaves an older
    model and its data as they were. Raises :class:`eqsat.errors.OutputError`."""
    out = Path(out)
    if not external_data or is_special_file(out):
        write_file(out, lambda p: write_model(model, p))
        return
    target = out.resolve()  # where write_file puts the model (a link's target)
    data = target.with_name(target.name + ".data")

    def aside_then_replace(path: Path) -> None:
        with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{target.name}.") as tmp:
            aside = Path(tmp) / target.name
            write_model(model, aside, data.name)
            if (Path(tmp) / data.name).exists():
                os.replace(Path(tmp) / data.name, data)
            os.replace(aside, path)

    write_file(out, aside_then_replace)


def static_shape(vi: onnx.ValueInfoProto) -> Shape | None:
    """A tensor's shape when every dimension is a known size, else None."""
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    dims = []
    for d in t.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:
            return None
        dims.append(int(d.dim_value))
    return tuple(dims)


def attr_dict(node: onnx.NodeProto) -> dict[str, Any]:
    """A node's attributes as plain Python values (strings decoded)."""
    out: dict[str, Any] = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        elif isinstance(v, list) and v and isinstance(v[0], bytes):
            v = [x.decode("utf-8", "replace") for x in v]
        out[a.name] = v
    return out


def eval_node(node: onnx.NodeProto, values: Sequence[np.ndarray | None], opset: list[onnx.OperatorSetIdProto],
               ir_version: int, outer: Mapping[str, np.ndarray] | None = None) -> list[np.ndarray]:
    """Evaluate one node on constant inputs with the ONNX reference implementation; ``outer``: the values its
    subgraphs read from around it, by name."""
    outer = dict(outer or {})
    inputs = [helper.make_tensor_value_info(f"i{k}", elem_type(str(v.dtype)), list(v.shape))
              for k, v in enumerate(values) if v is not None]
    inputs += [helper.make_tensor_value_info(k, elem_type(str(v.dtype)), list(v.shape)) for k, v in outer.items()]
    in_names = [f"i{k}" if v is not None else "" for k, v in enumerate(values)]
    outs = [f"o{k}" for k in range(len(node.output))]
    n = helper.make_node(node.op_type, in_names, outs, domain=node.domain)
    n.attribute.extend(node.attribute)
    g = helper.make_graph([n], "fold", inputs, [helper.make_value_info(o, onnx.TypeProto()) for o in outs])
    m = helper.make_model(g, opset_imports=opset, ir_version=ir_version)
    feeds = {f"i{k}": v for k, v in enumerate(values) if v is not None} | outer
    # onnxruntime honours old opset semantics (the reference evaluator runs e.g. Softmax-1 as Softmax-13);
    # the reference evaluator covers what onnxruntime cannot run
    try:
        typed = shape_inference.infer_shapes(m)
        so = ort.SessionOptions()
        so.log_severity_level = 4
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(typed.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return [np.asarray(r) for r in sess.run(None, feeds)]
    except Exception:
        return [np.asarray(r) for r in ReferenceEvaluator(m).run(None, feeds)]


def has_subgraph(node: onnx.NodeProto) -> bool:
    """Whether a node carries a graph attribute (control flow: If, Loop, Scan)."""
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


def _subgraphs(attrs: Sequence[onnx.AttributeProto]) -> list[onnx.GraphProto]:
    out: list[onnx.GraphProto] = []
    for a in attrs:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def all_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and the control-flow bodies within it, at any depth."""
    yield graph
    for n in graph.node:
        for body in _subgraphs(n.attribute):
            yield from all_graphs(body)


def nodes_within(node: onnx.NodeProto) -> list[onnx.NodeProto]:
    """The nodes of ``node``'s control-flow bodies, at any depth (none for a node without a body)."""
    return [m for body in _subgraphs(node.attribute) for g in all_graphs(body) for m in g.node]


def lacks_onnx_schema(node: onnx.NodeProto) -> bool:
    """Whether ``node`` is in the default domain but no ONNX operator: one onnxruntime adds there
    (``SimplifiedLayerNormalization``), which ONNX's checker and shape inference do not know."""
    return node.domain in ("", "ai.onnx") and not onnx.defs.has(node.op_type)


def _defined(g: onnx.GraphProto) -> set[str]:
    """The names a (sub)graph defines: its inputs, initializers and node outputs."""
    return ({i.name for i in g.input} | {t.name for t in g.initializer} | {t.name for t in g.sparse_initializer}
            | {o for n in g.node for o in n.output if o})


def outer_names(node: onnx.NodeProto) -> list[str]:
    """The names a control-flow node's subgraphs read from the scope around the node (its implicit inputs), in
    the order they are first read; none for a node without subgraphs."""
    found: dict[str, None] = {}
    for sub in _subgraphs(node.attribute):
        found.update(dict.fromkeys(graph_outer_names(sub)))
    return list(found)


def graph_outer_names(graph: onnx.GraphProto) -> list[str]:
    """The names a (sub)graph, its own subgraphs included, reads from the scope around it, in the order they
    are first read."""
    found: dict[str, None] = {}

    def visit(g: onnx.GraphProto, local: set[str]) -> None:
        local = local | _defined(g)
        for n in g.node:
            for i in n.input:
                if i and i not in local:
                    found.setdefault(i)
            for sub in _subgraphs(n.attribute):
                visit(sub, local)
        for o in g.output:
            if o.name not in local:
                found.setdefault(o.name)

    visit(graph, set())
    return list(found)


def rename_outer(attrs: Sequence[onnx.AttributeProto], mapping: Mapping[str, str]) -> None:
    """Rename, in place, the reads of outer-scope names in the subgraphs of ``attrs`` (a control-flow node's
    attributes) by ``mapping``; a name a subgraph defines itself shadows the outer one and is left alone."""
    if not mapping:
        return

    def visit(g: onnx.GraphProto, local: set[str]) -> None:
        local = local | _defined(g)
        for n in g.node:
            for k, i in enumerate(n.input):
                if i and i not in local and i in mapping:
                    n.input[k] = mapping[i]
            for sub in _subgraphs(n.attribute):
                visit(sub, local)
        for o in g.output:  # an output passed straight through from the outer scope
            if o.name not in local and o.name in mapping:
                o.name = mapping[o.name]

    for sub in _subgraphs(attrs):
        visit(sub, set())


def shape_text(name: str, dims: Sequence[int | str]) -> str:
    """An input's shape as ``--input-shape`` takes it: ``name=d0,d1,...``."""
    return f"{name}={','.join(str(d) for d in dims)}"


def declared_dims(vi: onnx.ValueInfoProto) -> tuple[int | str, ...] | None:
    """Declared dimensions of a tensor: ints, symbolic names, ``"?"`` for unnamed unknowns; ``None`` when
    even the rank is unknown."""
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    return tuple(int(d.dim_value) if d.HasField("dim_value") and d.dim_value >= 0 else (d.dim_param or "?")
                 for d in t.shape.dim)


def format_dims(dims: Sequence[int | str] | None) -> str:
    """Declared dimensions for a message: ``[1, seq, 768]``, ``[?]`` for an unknown rank."""
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
        opts.append(f"--input-shape {shape_text(name, shown)}")
    what = f", replacing {', '.join(names)} by the size{'s' if len(names) > 1 else ''} to optimize for" if names \
        else ""
    return " ".join(opts) + what
