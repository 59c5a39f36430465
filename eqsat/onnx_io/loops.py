"""The types of a ``Loop`` node's outputs that ONNX shape inference leaves unknown.

A ``Loop`` stacks one value per iteration in each of its scan outputs: their leading size is the number of
iterations it runs, which its trip count (an input, a constant) bounds and a condition computed in its body may
cut short. No input's shape says it, so it is a symbol of its own (:func:`loop_counts`), shared by the Loop's
scan outputs: the sizes computed from it downstream stay sizes in it, and an export computes them from the Loop's
output at run time. Where the file fixes the count (a constant trip count, a condition that stays true), it is
that number instead.

A loop-carried output keeps the shape of its initial value where the body declares that it does
(:func:`loop_output_types`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from eqsat.ir.graph import TensorInfo
from eqsat.ir.symbols import Symbols
from eqsat.onnx_io.protos import elem_type, np_dtype, static_shape
from eqsat.ops.dims import Sym


@dataclass(frozen=True)
class LoopCount:
    """How many iterations a ``Loop`` node runs, the leading size of its scan outputs: a symbol of its own, or a
    fixed count where the file fixes it (a constant trip count, and a condition that stays true)."""

    #: the symbol ("" for a fixed count)
    symbol: str
    fixed: int | None
    #: the Loop's scan outputs (its outputs after the loop-carried ones), "" for one not written
    outputs: tuple[str, ...]
    #: the tensor that gives its trip count (its first input; "" where it has none)
    trip_count: str
    #: whether it runs at least once (else, run zero times, onnxruntime gives the scan outputs' dynamic sizes as 0)
    at_least_once: bool


def loop_counts(g: onnx.GraphProto, used: set[str], taken: Iterable[str]) -> list[LoopCount]:
    """The count of each ``Loop`` node of ``g`` with a scan output in ``used`` (read, or a graph output). A
    symbol is named as the file names the leading dimension of one of them (``value_info`` or a graph output)
    where that name is neither among ``taken`` (the inputs' symbols) nor a name the inputs declare (a
    declaration is no proof that two sizes are equal), else ``<first scan output>_0``."""
    declared = {vi.name: vi for vi in [*g.value_info, *g.output] if vi.type.HasField("tensor_type")}
    consts = _constants(g)
    names_taken = set(taken) | {d.dim_param for vi in g.input if vi.type.HasField("tensor_type")
                                for d in vi.type.tensor_type.shape.dim if d.dim_param}
    out = []
    for node, body in _loops(g.node):
        scans = tuple(node.output[max(0, len(node.input) - 2):])
        if not any(o in used for o in scans if o):
            continue
        fixed = _fixed_count(node, body, consts)
        name = ""
        if fixed is None:
            names = [d.dim_param for o in scans if o in declared
                     for d in declared[o].type.tensor_type.shape.dim[:1] if d.dim_param]
            name = next((n for n in names if n not in names_taken), "")
            if not name:
                base = re.sub(r"\W", "_", f"{next(o for o in scans if o)}_0")
                name = next(c for c in (base, *(f"{base}_{k}" for k in range(2, 2 ** 16))) if c not in names_taken)
            names_taken.add(name)
        trips, cond = (list(node.input) + ["", ""])[:2]
        once = (not trips or trips in consts and int(consts[trips].reshape(())) >= 1) and \
            (not cond or cond in consts and bool(consts[cond].reshape(())))
        out.append(LoopCount(name, fixed, scans, trips, once))
    return out


def _loops(nodes: Iterable[onnx.NodeProto]) -> Iterator[tuple[onnx.NodeProto, onnx.GraphProto]]:
    """Each ONNX ``Loop`` node of ``nodes``, with its body."""
    for node in nodes:
        body = next((a.g for a in node.attribute if a.name == "body"), None)
        if node.op_type == "Loop" and node.domain in ("", "ai.onnx") and body is not None:
            yield node, body


def untyped_scan_output(loop: LoopCount) -> str:
    """Why a scan output of ``loop`` has no type (:func:`loop_output_types` gives none)."""
    return ("shape per iteration is unknown" if loop.at_least_once else "shape per iteration is unknown or holds "
            "a dynamic size, and the Loop may run zero times (onnxruntime then gives such a size as 0)")


def _constants(g: onnx.GraphProto) -> dict[str, np.ndarray]:
    """The graph's initializers and the values of its ``Constant`` nodes that hold one scalar (what a trip count
    and a condition are written as), by name."""
    out = {t.name: numpy_helper.to_array(t) for t in g.initializer if np.prod(t.dims, dtype=np.int64) == 1}
    for n in g.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and n.output:
            for a in n.attribute:
                if a.name == "value" and np.prod(a.t.dims, dtype=np.int64) == 1:
                    out[n.output[0]] = numpy_helper.to_array(a.t)
                elif a.name == "value_int":
                    out[n.output[0]] = np.array(a.i, np.int64)
    return out


def _fixed_count(node: onnx.NodeProto, body: onnx.GraphProto, consts: Mapping[str, np.ndarray]) -> int | None:
    """The number of iterations a Loop runs where the file fixes it: a constant trip count, no condition or a
    true constant one, and a body that passes its condition through or makes it true; else None."""
    trips = consts.get(node.input[0]) if node.input and node.input[0] else None
    if trips is None or trips.dtype.kind not in "iu" or int(trips.reshape(())) < 1:
        return None  # (no iteration: a symbol, that holds at 0 too)
    cond = node.input[1] if len(node.input) > 1 else ""
    if cond and not (cond in consts and bool(consts[cond].reshape(()))):
        return None
    if len(body.input) < 2 or not body.output:
        return None
    cond_in, cond_out = body.input[1].name, body.output[0].name
    inner = _constants(body)
    copies = {n.output[0]: n.input[0] for n in body.node
              if n.op_type == "Identity" and n.domain in ("", "ai.onnx") and n.input and n.output}
    for _ in range(len(copies)):  # follow Identity back from the condition the body gives
        cond_out = copies.get(cond_out, cond_out)
    if cond_out != cond_in and not (cond_out in inner and bool(inner[cond_out].reshape(()))):
        return None
    return int(trips.reshape(()))


def loop_output_types(nodes: Sequence[onnx.NodeProto], loops: Sequence[LoopCount],
                      inferred: Mapping[str, onnx.ValueInfoProto], weights: Mapping[str, np.ndarray],
                      inputs: Sequence[TensorInfo], syms: Symbols) -> list[onnx.ValueInfoProto]:
    """Types for the outputs of Loop nodes that ONNX shape inference (``inferred``: the types it gives, by name)
    leaves without static sizes. A loop-carried output keeps its initial value's shape where the body declares
    that it does (a body may change a carried value's shape): its output's declared shape is the initial value's,
    each size static or named as the body's inputs name it. A scan output is the Loop's count (``loops``) of one
    iteration's value, shaped as inference gives it after the size it leaves unknown, else as the body declares
    it."""
    typed = {k: vi for k, vi in inferred.items() if static_shape(vi) is not None}
    known = {i.name: (i.shape, i.dtype) for i in inputs}
    known |= {k: (tuple(v.shape), str(v.dtype)) for k, v in weights.items()}
    known |= {k: (static_shape(vi), np_dtype(vi.type.tensor_type.elem_type)) for k, vi in typed.items()}
    counts = {o: loop for loop in loops for o in loop.outputs if o}
    out = []
    for node, body in _loops(nodes):
        n_carried = len(node.input) - 2
        sizes = _declared_sizes(body, node.input[2:], known)
        for k, name in enumerate(node.output[:n_carried]):
            init = known.get(node.input[k + 2])
            if not name or name in typed or init is None or len(body.output) <= k + 1:
                continue
            declared = body.output[k + 1]
            if _declared_shape(declared, sizes) == init[0] \
                    and np_dtype(declared.type.tensor_type.elem_type) == init[1]:
                out.append(helper.make_tensor_value_info(name, elem_type(init[1]), list(init[0])))
        for k, name in enumerate(node.output[n_carried:]):
            loop = counts.get(name)
            if loop is None or name in typed or len(body.output) <= 1 + n_carried + k:
                continue
            step = _declared_shape(body.output[1 + n_carried + k], sizes)
            vi = inferred.get(name)
            dims = vi.type.tensor_type.shape.dim if vi is not None else []
            if dims and all(d.HasField("dim_value") and d.dim_value > 0 for d in dims[1:]):
                step = tuple(int(d.dim_value) for d in dims[1:])
            elem = body.output[1 + n_carried + k].type.tensor_type.elem_type
            elem = elem or (vi.type.tensor_type.elem_type if vi is not None else 0)
            if step is None or not elem or not loop.at_least_once and any(
                    isinstance(syms.decode(d), Sym) for d in step):
                continue  # untyped (a dynamic size would read 0 after no iteration): the import says so
            count = loop.fixed if loop.fixed is not None else syms.generic[loop.symbol]
            out.append(helper.make_tensor_value_info(name, elem, [count, *step]))
    return out


def _declared_sizes(body: onnx.GraphProto, carried: Sequence[str],
                    known: Mapping[str, tuple[tuple[int, ...] | None, str]]) -> dict[str, int]:
    """The sizes the names in the body's declared inputs stand for: those of the carried values' initial values
    (``carried``, typed in ``known``) at the same places; a name given two sizes stands for none."""
    out: dict[str, int] = {}
    clash: set[str] = set()
    for vi, name in zip(body.input[2:], carried, strict=False):
        shape = known.get(name, (None, ""))[0]
        if shape is None or not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        dims = vi.type.tensor_type.shape.dim
        if len(dims) != len(shape):
            continue
        for d, size in zip(dims, shape, strict=True):
            if d.dim_param and out.setdefault(d.dim_param, size) != size:
                clash.add(d.dim_param)
    return {k: v for k, v in out.items() if k not in clash}


def _declared_shape(vi: onnx.ValueInfoProto, sizes: Mapping[str, int]) -> tuple[int, ...] | None:
    """The shape a body's output declares, its named sizes read in ``sizes``; None where one is unknown."""
    if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return None
    out = []
    for d in vi.type.tensor_type.shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            out.append(int(d.dim_value))
        elif d.dim_param in sizes:
            out.append(sizes[d.dim_param])
        else:
            return None
    return tuple(out)
