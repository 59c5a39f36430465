"""The import of a model with dynamic axes: its symbols, their generic values, and which computations on sizes
may be folded into constants (:mod:`eqsat.ir.symbols` says why the graph is built at a generic point).

A dynamic dimension becomes a symbol named by its ``dim_param`` (the same name on two inputs is one symbol),
or ``<input>_<axis>`` where the file leaves it unnamed. Exporters compute reshape targets and masks from the
inputs' shapes at run time (``Shape``, ``Gather``, ``Concat``, arithmetic); the import folds that arithmetic at
the generic point, and keeps a value computed from the symbols (a *symbolic* constant) only where it is the
same polynomial for every value of them: a comparison or a division whose answer depends on the sizes is not
folded, the node stays as it is. A constant whose own shape depends on a symbol is never folded.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from eqsat.ir.symbols import Symbols
from eqsat.ops.dims import Dim, Sym, UndecidedDim, concrete

#: operators folded on symbolic sizes because they only move values: their result at the generic point reads
#: back element by element
_MOVES = {"Shape", "Size", "Gather", "GatherElements", "Concat", "Slice", "Unsqueeze", "Squeeze", "Reshape",
          "Identity", "Flatten", "Transpose", "Where", "Expand", "Tile", "Split", "ConcatFromSequence", "Cast"}
#: element-wise arithmetic folded where its symbolic result is a polynomial (checked against the generic point)
_ARITH = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
          "Div": lambda a, b: a // b, "Mod": lambda a, b: a % b, "Neg": lambda a: -a,
          "Max": lambda *xs: _reduce_max(xs), "Min": lambda *xs: _reduce_min(xs),
          "Equal": lambda a, b: _equal(a, b), "Less": lambda a, b: a < b, "Greater": lambda a, b: a > b,
          "LessOrEqual": lambda a, b: a <= b, "GreaterOrEqual": lambda a, b: a >= b,
          "Not": lambda a: np.logical_not(a)}


def symbol_names(inputs: Sequence[onnx.ValueInfoProto], fixed: Mapping[str, object]) -> dict[tuple[str, int], str]:
    """(input name, axis) -> symbol, for every dynamic dimension of ``inputs`` not in ``fixed``."""
    out: dict[tuple[str, int], str] = {}
    for vi in inputs:
        if vi.name in fixed or not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                continue
            out[(vi.name, axis)] = d.dim_param or re.sub(r"\W", "_", f"{vi.name}_{axis}")
    return out


def static_ints(model: onnx.ModelProto) -> set[int]:
    """The integers the model states (dimensions, integer attributes, small integer constants): the generic
    values must not be, or lie near, a multiple of any of them."""
    out: set[int] = set()
    g = model.graph

    def dims(vis: Iterable[onnx.ValueInfoProto]) -> None:
        for vi in vis:
            if vi.type.HasField("tensor_type"):
                out.update(d.dim_value for d in vi.type.tensor_type.shape.dim if d.HasField("dim_value"))

    def array(t: onnx.TensorProto) -> None:
        if t.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32) and np.prod(t.dims, dtype=np.int64) <= 4096:
            out.update(int(v) for v in numpy_helper.to_array(t).ravel())
        out.update(int(d) for d in t.dims)

    dims([*g.input, *g.output, *g.value_info])
    for t in g.initializer:
        array(t)
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.INT:
                out.add(a.i)
            elif a.type == onnx.AttributeProto.INTS:
                out.update(a.ints)
            elif a.type == onnx.AttributeProto.TENSOR:
                array(a.t)
    return {abs(v) for v in out if v and abs(v) < 2 ** 62}


def symbolic_array(syms: Symbols, a: np.ndarray, known: Mapping[int, Dim] | None = None) -> np.ndarray | None:
    """``a`` (an integer constant) with each entry read back as a size (an object array; ``known`` as for
    :meth:`Symbols.decode`), or ``None`` when no entry depends on a symbol."""
    if a.dtype.kind not in "iu" or a.size > 4096:
        return None
    decoded = np.array([syms.decode(int(v), known) for v in a.ravel()], dtype=object).reshape(a.shape)
    return decoded if any(isinstance(v, Sym) for v in decoded.ravel()) else None


def may_fold(node: onnx.NodeProto, symbolic: set[str]) -> bool:
    """Whether to evaluate ``node`` at all (before its constant inputs are computed with): a node reading a
    symbolic constant is evaluated only to move or combine sizes, never to build a tensor as large as a symbol
    (a mask of ``seq x seq``) nor to index a weight with one (a ``Slice`` of a position table up to ``seq``
    would clamp at the generic value)."""
    reads = [k for k, i in enumerate(node.input) if i and i in symbolic]
    if not reads or node.domain not in ("", "ai.onnx"):
        return not reads
    if node.op_type in _ARITH:
        return True
    return node.op_type in _MOVES and (node.op_type in ("Concat", "Where") or reads == [0])


def fold_allowed(node: onnx.NodeProto, values: Sequence[np.ndarray | None], results: Sequence[np.ndarray],
                 syms: Symbols, symbolic: set[str]) -> bool:
    """Whether the results of ``node`` on constant ``values`` may stand as constants of a graph with symbols
    (``symbolic``: the constants computed from the symbols so far, extended with the node's outputs where they
    are too)."""
    reads_symbols = any(i in symbolic for i in node.input if i)
    for r in results:
        if any(isinstance(d, Sym) for d in syms.decode_shape(np.shape(r))):
            return False  # a tensor whose size depends on a symbol is computed at run time
    if not reads_symbols:
        return True
    if node.op_type in _ARITH and node.domain in ("", "ai.onnx"):
        args = [symbolic_array(syms, v) if v is not None and v.dtype.kind in "iu" else v for v in values]
        args = [a if a is not None else v for a, v in zip(args, values, strict=True)]
        try:
            expected = np.vectorize(_ARITH[node.op_type], otypes=[object])(*args)
        except UndecidedDim:
            return False  # the answer depends on the sizes: keep the node
        got = np.asarray(results[0])
        at_generic = np.vectorize(lambda d: concrete((d,), syms.generic)[0] if isinstance(d, Sym) else d,
                                  otypes=[object])(expected)
        if got.shape != at_generic.shape or not np.array_equal(got.astype(object), at_generic):
            return False  # e.g. an integer division whose result is no polynomial
    elif node.op_type not in _MOVES or node.domain not in ("", "ai.onnx"):
        return False
    if any(r.dtype.kind not in "iub" for r in results):
        return False  # a size turned into a float (a scale computed from seq) is computed at run time
    if node.op_type in ("Shape", "Size") and all(symbolic_array(syms, np.asarray(r)) is None for r in results):
        return True  # the shape of a vector of sizes, say: no size in it depends on a symbol
    symbolic.update(o for o in node.output if o)
    return True


def _equal(a: object, b: object) -> bool:
    if a == b:
        return True
    if isinstance(a, Sym) or isinstance(b, Sym):
        d = a - b  # type: ignore[operator]
        if isinstance(d, int):
            return d == 0
        if d >= 1 or d <= -1:  # raises UndecidedDim where they are equal for some values only
            return False
    return False


def _reduce_max(xs: Sequence[object]) -> object:
    out = xs[0]
    for x in xs[1:]:
        out = x if x >= out else out  # type: ignore[operator]
    return out


def _reduce_min(xs: Sequence[object]) -> object:
    out = xs[0]
    for x in xs[1:]:
        out = x if x <= out else out  # type: ignore[operator]
    return out


def fixed_input_shapes(model: onnx.ModelProto, sizes: Mapping[str, int],
                       given: Mapping[str, Sequence[int]] | None = None) -> dict[str, tuple[int, ...]]:
    """Input shapes that fix every dynamic dimension of ``model`` (for a static import): ``given`` where it
    names the input, else each symbol at its size in ``sizes`` (1 where it has none)."""
    inits = {t.name for t in model.graph.initializer}
    real = [vi for vi in model.graph.input if vi.name not in inits]
    named = symbol_names(real, {})
    out = {k: tuple(v) for k, v in (given or {}).items()}
    for vi in real:
        if vi.name in out or not any(key[0] == vi.name for key in named):
            continue
        dims = vi.type.tensor_type.shape.dim
        out[vi.name] = tuple(int(sizes.get(named[(vi.name, k)], 1)) if (vi.name, k) in named else int(d.dim_value)
                             for k, d in enumerate(dims))
    return out


def symbolic_output_shape(node: onnx.NodeProto, data_shape: Sequence[int] | None, consts: Mapping[str, np.ndarray],
                          symbolic: set[str], syms: Symbols,
                          producers: Mapping[str, onnx.NodeProto] | None = None) -> tuple[int, ...] | None:
    """The output shape, at the generic point, of a node whose output size a symbol sets and that ONNX shape
    inference cannot type (a ``Range`` up to ``seq``, or from ``past`` to ``past + seq``) or types wrongly there
    (a ``Slice`` of a table up to ``seq``, clamped at the generic value); ``None`` for any other node.
    ``producers`` lets a range read its bounds through a ``Cast`` (rotary positions counted in floats)."""
    if node.op_type == "Range" and node.domain in ("", "ai.onnx") and len(node.input) == 3:
        bounds = [range_bound(i, consts, symbolic, producers or {}) for i in node.input]
        if any(b is None for b in bounds) or not any(b[1] for b in bounds):  # type: ignore[index]
            return None
        start, limit, delta = (b[0] for b in bounds)  # type: ignore[index]
        if delta == 1 and start == int(start) and limit == int(limit) \
                and isinstance(syms.decode(int(limit) - int(start)), Sym):
            return (int(limit) - int(start),)
        return None
    if data_shape is None:
        return None
    return unclamped_slice_shape(node, data_shape, consts, symbolic, syms)


def range_bound(name: str, consts: Mapping[str, np.ndarray], symbolic: set[str],
                producers: Mapping[str, onnx.NodeProto]) -> tuple[float, bool] | None:
    """A range's bound as ``(value at the generic point, whether a symbol sets it)``: a constant, or a ``Cast``
    of one to a float type that holds it exactly (generic values are far below 2**24); None otherwise."""
    if name in consts:
        return consts[name].reshape(()).item(), name in symbolic
    cast = producers.get(name)
    if cast is None or cast.op_type != "Cast" or cast.domain not in ("", "ai.onnx") or cast.input[0] not in consts:
        return None
    value = consts[cast.input[0]]
    if value.size != 1 or value.dtype.kind not in "iu" or abs(int(value.reshape(()))) >= 2 ** 24 \
            or _float_cast_type(cast) is None:
        return None
    return float(value.reshape(())), cast.input[0] in symbolic


def range_dtype(node: onnx.NodeProto, consts: Mapping[str, np.ndarray],
                producers: Mapping[str, onnx.NodeProto]) -> str | None:
    """The element type of a range :func:`symbolic_output_shape` typed (its start's), where it can be read."""
    start = node.input[0]
    if start in consts:
        return str(consts[start].dtype)
    cast = producers.get(start)
    return _float_cast_type(cast) if cast is not None and cast.op_type == "Cast" else None


def _float_cast_type(cast: onnx.NodeProto) -> str | None:
    """The type a ``Cast`` converts to where it is float32 or float64 (which hold a generic size exactly)."""
    to = next((a.i for a in cast.attribute if a.name == "to"), None)
    return {onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.DOUBLE: "float64"}.get(to)


def unclamped_slice_shape(node: onnx.NodeProto, data_shape: Sequence[int], consts: Mapping[str, np.ndarray],
                          symbolic: set[str], syms: Symbols) -> tuple[int, ...] | None:
    """The output shape of a ``Slice`` whose bounds depend on a symbol, at the generic point, where the slice
    ends within the data (a position table sliced to ``seq`` rows holds ``seq <= 512``; at the generic value,
    far above 512, ONNX's clamping would give all 512). ``None``: not such a slice, or bounds it cannot read."""
    if node.op_type != "Slice" or node.domain not in ("", "ai.onnx") or len(node.input) < 3:
        return None
    if not any(i in symbolic for i in node.input[1:3]):
        return None
    ins = list(node.input) + [""] * (5 - len(node.input))
    if any(i and i not in consts for i in ins[1:5]):
        return None
    starts, ends = consts[ins[1]].ravel(), consts[ins[2]].ravel()
    axes = consts[ins[3]].ravel() if ins[3] else np.arange(len(starts))
    steps = consts[ins[4]].ravel() if ins[4] else np.ones(len(starts), dtype=np.int64)
    out = list(data_shape)
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        a = int(a) % len(out)
        if st != 1 or s < 0 or e < 0:
            return None
        if isinstance(syms.decode(int(e)), Sym):
            out[a] = int(e) - int(s)  # ends within the data, for every value the model accepts
        else:
            out[a] = max(0, min(int(e), out[a]) - int(s))
    return tuple(out)
