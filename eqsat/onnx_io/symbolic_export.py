"""The export of a graph with symbols (:mod:`eqsat.ir.symbols`): the model written keeps its dynamic axes.

Inputs and outputs declare their symbolic sizes (``dim_param``: the symbol's name, or the polynomial's text,
``batch*seq``). A size the graph computes from the symbols (a reshape target, a slice end, a mask's shape)
cannot stay a constant: a ``Reshape`` target says it with ONNX's own conventions where they suffice (``0``: the
input's size on that axis, ``-1``: what the other sizes leave), and anything else is computed at run time from
the inputs' shapes (``Shape``, ``Gather``, ``Mul``, ``Add``, ``Concat``); a Loop's count of iterations, from the
shape of its scan output.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from eqsat.ir.names import NameAllocator
from eqsat.ir.symbols import SymbolicShapeError, Symbols, graph_symbols, symbolic_shapes
from eqsat.onnx_io.dynamic import symbolic_array
from eqsat.onnx_io.protos import outer_names
from eqsat.ops.dims import Dim, Sym, concrete, symbol_of


def dim_text(d: Dim) -> str:
    """How a symbolic size is written as a ``dim_param``."""
    return str(d)


def _set_dims(vi: onnx.ValueInfoProto, shape: Sequence[Dim]) -> None:
    dims = vi.type.tensor_type.shape.dim
    for proto, d in zip(dims, shape, strict=True):
        if isinstance(d, Sym):
            proto.ClearField("dim_value")
            proto.dim_param = dim_text(d)


#: the most elements an integer tensor that holds sizes has (a larger one is a weight: never read here)
MAX_SIZE_ELEMENTS = 4096


def may_hold_sizes(array: np.ndarray) -> bool:
    """Whether a constant could hold sizes that :func:`symbolize` rewrites: a small int64 or int32 tensor."""
    return array.dtype in (np.int64, np.int32) and array.size <= MAX_SIZE_ELEMENTS


def symbolize(model: onnx.ModelProto, graph: object, reserved: Iterable[str] = ()) -> None:
    """Give the exported ``model`` of ``graph`` its symbolic sizes (in place); nothing for a static graph.
    ``reserved``: names of tensors not yet in ``model`` (weights that go in later), which new ones must not take.
    Raises :class:`SymbolicShapeError` where a size would have to be written into an attribute."""
    syms = graph_symbols(graph)
    if not syms:
        return
    shapes = symbolic_shapes(graph)
    g = model.graph
    for vi in [*g.input, *g.output]:
        if vi.name in shapes:
            _set_dims(vi, shapes[vi.name])
    known = {concrete((d,), syms.generic)[0]: d for s in shapes.values() for d in s if isinstance(d, Sym)}
    sources = _sources(graph, shapes)
    _Rewriter(model, syms, known, shapes, sources, reserved).run()


def _sources(graph: object, shapes: Mapping[str, Sequence[Dim]]) -> dict[str, tuple[str, int]]:
    """symbol -> (tensor, axis) whose size it is: a graph input's, else an opaque node's output's (a Loop's
    scan output, whose leading size is its count of iterations)."""
    out: dict[str, tuple[str, int]] = {}
    tensors = [i.name for i in graph.inputs]  # type: ignore[attr-defined]
    tensors += [n.output for n in graph.nodes if n.is_opaque]  # type: ignore[attr-defined]
    for name in tensors:
        for axis, d in enumerate(shapes[name]):
            s = symbol_of(d)
            if s is not None:
                out.setdefault(s, (name, axis))
    return out


class _Rewriter:
    """Replaces the integer constants that hold symbolic sizes by computations on the inputs' shapes."""

    def __init__(self, model: onnx.ModelProto, syms: Symbols, known: Mapping[int, Dim],
                 shapes: Mapping[str, Sequence[Dim]], sources: Mapping[str, tuple[str, int]],
                 reserved: Iterable[str] = ()) -> None:
        self.g = model.graph
        self.syms, self.known, self.shapes, self.sources = syms, known, shapes, sources
        taken = {i.name for i in self.g.input} | {t.name for t in self.g.initializer} | set(reserved)
        taken |= {o for n in self.g.node for o in n.output}
        self.names = NameAllocator(taken)
        self.new_nodes: list[onnx.NodeProto] = []
        self.inputs = {i.name for i in self.g.input}
        self.late = False  # a size read from a tensor the graph computes: the new nodes go after it
        self.new_inits: list[onnx.TensorProto] = []
        self._cache: dict[object, str] = {}

    def run(self) -> None:
        for n in self.g.node:
            for a in n.attribute:
                vals = [a.i] if a.type == onnx.AttributeProto.INT else list(a.ints) \
                    if a.type == onnx.AttributeProto.INTS else []
                if any(isinstance(self.syms.decode(int(v), self.known), Sym) for v in vals):
                    raise SymbolicShapeError(f"{n.op_type} node {n.name!r} would need a symbolic size in its "
                                             f"attribute {a.name!r}")
        inits = {t.name: t for t in self.g.initializer}
        consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
        for n in self.g.node:
            for k, i in enumerate(n.input):
                if i in inits:
                    consumers.setdefault(i, []).append((n, k))
        replaced: set[str] = set()
        small_ints = (onnx.TensorProto.INT64, onnx.TensorProto.INT32)
        for name, t in inits.items():
            if t.data_type not in small_ints or np.prod(t.dims, dtype=np.int64) > MAX_SIZE_ELEMENTS:
                continue  # weights: never sizes (read without copying them)
            array = numpy_helper.to_array(t)
            sym = symbolic_array(self.syms, array, self.known)
            if sym is None:
                continue
            replaced.add(name)
            for node, k in consumers.get(name, []):
                node.input[k] = self.value_for(node, k, array, sym)
        if not replaced:
            return
        keep = [t for t in self.g.initializer if t.name not in replaced]
        del self.g.initializer[:]
        self.g.initializer.extend(keep + self.new_inits)
        nodes = self.new_nodes + list(self.g.node)
        if self.late:
            nodes = _topological(nodes, self.inputs | {t.name for t in self.g.initializer})
        del self.g.node[:]
        self.g.node.extend(nodes)

    def value_for(self, node: onnx.NodeProto, k: int, array: np.ndarray, sym: np.ndarray) -> str:
        """The tensor that gives ``node``'s input ``k`` the sizes ``sym`` (``array`` at the generic point)."""
        if node.op_type == "Reshape" and k == 1 and array.ndim == 1 and node.input[0] in self.shapes:
            allow_zero = any(a.name == "allowzero" and a.i for a in node.attribute)
            target = _reshape_target(list(sym), self.shapes[node.input[0]], allow_zero)
            if all(isinstance(v, int) for v in target):
                return self.const(np.array(target, dtype=array.dtype), "shape")
            sym = np.array(target, dtype=object)
        return self.computed(sym, array.dtype)

    def const(self, array: np.ndarray, hint: str) -> str:
        key = ("const", str(array.dtype), array.shape, array.tobytes())
        if key not in self._cache:
            name = self.names.fresh(hint)
            self.new_inits.append(numpy_helper.from_array(array, name))
            self._cache[key] = name
        return self._cache[key]

    def node(self, op: str, ins: list[str], hint: str, **attrs: object) -> str:
        key = (op, tuple(ins), tuple(sorted(attrs.items())))
        if key not in self._cache:
            out = self.names.fresh(hint)
            self.new_nodes.append(helper.make_node(op, ins, [out], name=self.names.fresh(f"n_{hint}"), **attrs))
            self._cache[key] = out
        return self._cache[key]

    def symbol(self, s: str) -> str:
        """A 1-element int64 tensor holding the symbol's size at run time."""
        if s not in self.sources:
            raise SymbolicShapeError(f"no input has the size {s} alone on an axis, so it cannot be computed")
        src, axis = self.sources[s]
        self.late |= src not in self.inputs
        shape = self.node("Shape", [src], f"{src}_shape")
        return self.node("Gather", [shape, self.const(np.array([axis], dtype=np.int64), "axis")], s, axis=0)

    def entry(self, d: Dim) -> str:
        """A 1-element int64 tensor of the size ``d``."""
        if isinstance(d, int):
            return self.const(np.array([d], dtype=np.int64), "size")
        total: str | None = None
        for mono, coef in d.terms:
            term = None
            for s, power in mono:
                for _ in range(power):
                    v = self.symbol(s)
                    term = v if term is None else self.node("Mul", [term, v], "size")
            if term is None:
                term = self.const(np.array([coef], dtype=np.int64), "size")
            elif coef != 1:
                term = self.node("Mul", [term, self.const(np.array([coef], dtype=np.int64), "size")], "size")
            total = term if total is None else self.node("Add", [total, term], "size")
        assert total is not None
        return total

    def computed(self, sym: np.ndarray, dtype: np.dtype) -> str:
        parts = [self.entry(d) for d in sym.ravel()]
        vec = parts[0] if len(parts) == 1 else self.node("Concat", parts, "sizes", axis=0)
        if sym.shape != (len(parts),):
            vec = self.node("Reshape", [vec, self.const(np.array(sym.shape, dtype=np.int64), "shape")], "sizes")
        if np.dtype(dtype) != np.int64:
            vec = self.node("Cast", [vec], "sizes", to=int(helper.np_dtype_to_tensor_dtype(np.dtype(dtype))))
        return vec


def _topological(nodes: Sequence[onnx.NodeProto], given: set[str]) -> list[onnx.NodeProto]:
    """``nodes`` in an order where each comes after what it reads (its subgraphs' outer reads too), otherwise as
    listed; ``given``: the names defined before any node (inputs, initializers)."""
    ready = set(given)
    left = list(nodes)
    out: list[onnx.NodeProto] = []
    while left:
        waiting = []
        for n in left:
            if all(not i or i in ready for i in (*n.input, *outer_names(n))):
                out.append(n)
                ready.update(o for o in n.output if o)
            else:
                waiting.append(n)
        if len(waiting) == len(left):  # a read of a name nothing defines: left where it was for the checker to say
            return out + waiting
        left = waiting
    return out


def _reshape_target(target: list[Dim], in_shape: Sequence[Dim], allow_zero: bool) -> list[Dim]:
    """A reshape target with ONNX's ``0`` (copy the input's size on that axis) and ``-1`` (the rest) where
    they replace symbolic sizes."""
    out = list(target)
    if not allow_zero:
        for i, d in enumerate(out):
            if isinstance(d, Sym) and i < len(in_shape) and in_shape[i] == d:
                out[i] = 0
    left = [i for i, d in enumerate(out) if isinstance(d, Sym)]
    if len(left) == 1 and -1 not in out:
        out[left[0]] = -1
    return out
