"""The operator registry: the single description of every operator eqsat knows.

Each :class:`OpSpec` says, once, what an operator is: its tensor inputs, its integer/tuple parameters, its
shape function, a float numpy reference, an exact integer reference modulo a prime (for rule fingerprints),
its FLOP count, the egglog shape rule of its constructor, how ONNX nodes import to it and how it exports
back, and the key a cost model measures. Everything else in eqsat (IR validation, the e-graph compiler,
ONNX I/O, cost models, the rule generator) is derived from this table.

This module imports neither onnx nor egglog: ONNX mappings are expressed as plain
``(op_type, inputs, outputs, attributes)`` tuples that :mod:`eqsat.onnx_io` turns into protobuf.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

Shape = tuple[int, ...]
ParamValue = int | float | str | tuple[int, ...]
Params = dict[str, Any]

#: Prime used for exact fingerprints (2^31 - 1).
PRIME = 2_147_483_647

ACT_NONE = 0
ACT_RELU = 1


class OpError(ValueError):
    """An operator was used with inputs or parameters it does not accept."""


def require(cond: bool, msg: str) -> None:
    """Raise :class:`OpError` with ``msg`` unless ``cond`` holds."""
    if not cond:
        raise OpError(msg)


# ---------------------------------------------------------------------------------------------------------
# ONNX mapping interfaces (implemented by eqsat.onnx_io)


OnnxNode = tuple[str, list[str], list[str], dict[str, Any]]
"""An ONNX node as plain data: (op_type, input names, output names, attributes)."""

IRNode = tuple[str, Params, list[str], list[str]]
"""An IR node as plain data, produced by importers: (op, params, input names, output names)."""


class ImportContext(Protocol):
    """What an ONNX importer may ask about the model being imported."""

    opset: int

    def shape(self, name: str) -> Shape: ...

    def is_float(self, name: str) -> bool: ...

    def const(self, name: str) -> np.ndarray | None: ...

    def add_weight(self, array: np.ndarray, hint: str) -> str: ...

    def fresh(self, hint: str) -> str: ...

    def unsupported(self, reason: str) -> None:
        """Record why this node stays opaque (what the importer cannot map); returns None for ``return``."""
        ...


class ExportContext(Protocol):
    """What an exporter may ask for while writing ONNX."""

    opset: int

    def add_initializer(self, array: np.ndarray, hint: str) -> str: ...

    def fresh(self, hint: str) -> str: ...


# ---------------------------------------------------------------------------------------------------------
# The spec


@dataclass(frozen=True)
class CostKey:
    """What a cost model measures: one operator configuration on concrete shapes."""

    op: str
    params: tuple[tuple[str, ParamValue], ...]
    input_shapes: tuple[Shape, ...]
    output_shape: Shape
    dtype: str = "float32"
    layout: str = "default"
    #: positions of the inputs that are weights (constant at run time): runtimes pre-pack constant matrix
    #: operands, so the same product costs differently with a weight or an activation in a given slot
    weights: tuple[int, ...] = ()

    def as_str(self) -> str:
        """A stable, human-readable string form (used as a cache key)."""
        ps = ",".join(f"{k}={v}" for k, v in self.params)
        ins = ";".join("x".join(map(str, s)) for s in self.input_shapes)
        out = "x".join(map(str, self.output_shape))
        consts = f":w={','.join(map(str, self.weights))}" if self.weights else ""
        return f"{self.op}({ps})[{ins}]->[{out}]:{self.dtype}:{self.layout}{consts}"


@dataclass(frozen=True)
class OpSpec:
    """One operator, described once."""

    name: str
    inputs: tuple[str, ...]
    params: tuple[tuple[str, str], ...]  # (name, kind); kind in int | ints | float | str
    shape_fn: Callable[..., Shape]
    numpy_fn: Callable[..., np.ndarray]
    modular_fn: Callable[..., np.ndarray] | None
    flops_fn: Callable[[Params, Sequence[Shape], Shape], float]
    export_fn: Callable[[Params, list[str], list[str], ExportContext], list[OnnxNode]] | None
    egglog_shape: Callable[[], list[str]]
    variadic: bool = False  # inputs are a list (concat); egglog sees a binary, left-nested chain
    elementwise: bool = False
    doc: str = ""
    defaults: dict[str, Any] = field(default_factory=dict)
    #: The operators this one runs as once exported, applied in a chain (``None``: itself). A fused form
    #: that export writes back as several ONNX nodes is priced as those nodes, so it never shows as a gain.
    runs_as: Callable[[Params], list[tuple[str, Params]] | None] | None = None
    #: How applications that share their first input merge into one (TASO's matmul/conv merges, n-way at
    #: once): given the parameters and input shapes, ``(concat axis of each other input, split axis of the
    #: output)``, or ``None`` where they cannot. Siblings merge when they have equal parameters and equal
    #: other-input shapes off the concat axes; the e-graph gets the merged form as an alternative.
    sibling_merge: Callable[[Params, Sequence[Shape]], tuple[tuple[int, ...], int] | None] | None = None

    # -- parameters -------------------------------------------------------------------------------------
    def param_names(self) -> tuple[str, ...]:
        """Names of the parameters, in declaration order."""
        return tuple(n for n, _ in self.params)

    def normalize(self, params: Params) -> Params:
        """Check parameter names/kinds and return a canonical dict (tuples, ints)."""
        out: Params = {}
        for name, kind in self.params:
            if name in params:
                v = params[name]
            elif name in self.defaults:
                v = self.defaults[name]
            else:
                raise OpError(f"{self.name}: missing parameter {name!r}")
            if kind == "int":
                v = int(v)
            elif kind == "ints":
                v = tuple(int(i) for i in v)
            elif kind == "float":
                v = float(v)
            elif kind == "str":
                v = str(v)
            elif kind == "any":
                pass
            else:  # pragma: no cover - registry bug
                raise AssertionError(kind)
            out[name] = v
        extra = set(params) - set(out)
        require(not extra, f"{self.name}: unknown parameter(s) {sorted(extra)}")
        return out

    def param_tuple(self, params: Params) -> tuple[tuple[str, ParamValue], ...]:
        """Parameters as a hashable tuple of (name, value) in declaration order."""
        return tuple((n, params[n]) for n in self.param_names())

    # -- semantics ----------------------------------------------------------------------------------------
    def check_arity(self, n: int) -> None:
        """Raise unless ``n`` tensor inputs is valid for this operator."""
        if self.variadic:
            require(n >= 1, f"{self.name}: needs at least one input")
        elif self.name != "opaque":
            require(n == len(self.inputs), f"{self.name}: expects {len(self.inputs)} inputs, got {n}")

    def shape(self, params: Params, in_shapes: Sequence[Shape]) -> Shape:
        """Output shape; raises :class:`OpError` on invalid inputs."""
        self.check_arity(len(in_shapes))
        return tuple(int(d) for d in self.shape_fn(params, *[tuple(s) for s in in_shapes]))

    def evaluate(self, params: Params, inputs: Sequence[np.ndarray]) -> np.ndarray:
        """Float reference semantics (numpy)."""
        self.check_arity(len(inputs))
        return self.numpy_fn(params, *inputs)

    def evaluate_mod(self, params: Params, inputs: Sequence[np.ndarray], p: int = PRIME) -> np.ndarray:
        """Exact integer semantics modulo ``p`` (object arrays of Python ints)."""
        require(self.modular_fn is not None, f"{self.name}: has no modular semantics")
        return self.modular_fn(params, *inputs, p)  # type: ignore[misc]

    def flops(self, params: Params, in_shapes: Sequence[Shape], out_shape: Shape) -> float:
        """Floating-point operations of one evaluation."""
        return float(self.flops_fn(params, in_shapes, out_shape))

    def cost_key(self, params: Params, in_shapes: Sequence[Shape], out_shape: Shape,
                 dtype: str = "float32", layout: str = "default", weights: Sequence[int] = ()) -> CostKey:
        """The key a cost model uses for this configuration (``weights``: positions of constant inputs)."""
        return CostKey(self.name, self.param_tuple(params), tuple(tuple(s) for s in in_shapes),
                       tuple(out_shape), dtype, layout, tuple(sorted(weights)))

    def cost_keys(self, params: Params, in_shapes: Sequence[Shape], out_shape: Shape,
                  weights: Sequence[int] = ()) -> tuple[CostKey, ...]:
        """The keys of what this configuration runs as after export (see ``runs_as``); the first of a chain
        takes the inputs, each later one the previous output."""
        if self.name == "opaque":  # priced by identity: the node it stands for, and which of its outputs
            return (CostKey("opaque", (("key", params["key"]), ("index", params["index"])), (), tuple(out_shape)),)
        chain = self.runs_as(params) if self.runs_as else None
        if not chain:
            return (self.cost_key(params, in_shapes, out_shape, weights=weights),)
        keys = []
        for k, (op, p) in enumerate(chain):
            spec = get(op)
            keys.append(spec.cost_key(spec.normalize(p), in_shapes if k == 0 else [out_shape], out_shape,
                                      weights=weights if k == 0 else ()))
        return tuple(keys)


REGISTRY: dict[str, OpSpec] = {}
#: ONNX op_type -> importer(ctx, onnx_node) -> list of IR nodes, or None to keep the node opaque.
ONNX_IMPORTERS: dict[str, Callable[[ImportContext, OnnxNode], list[IRNode] | None]] = {}


def get(name: str) -> OpSpec:
    """Look up an operator by name, with a clear error."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise OpError(f"unknown operator {name!r}; known: {sorted(REGISTRY)}") from None


def _register(spec: OpSpec) -> OpSpec:
    assert spec.name not in REGISTRY, spec.name
    REGISTRY[spec.name] = spec
    return spec


def _importer(*op_types: str):
    def deco(fn):
        for t in op_types:
            ONNX_IMPORTERS[t] = fn
        return fn

    return deco


# ---------------------------------------------------------------------------------------------------------
# egglog shape-rule helpers. Convention (see eqsat.egraph): the matched node is `t`, parameters are bound
# to variables named after them, inputs to variables named after them, and each input's shape to
# `s_<input>`. A helper returns (extra facts, result IVec expression).

MAX_RANK = 6


def _vget(v: str, i: int | str) -> str:
    return f"(vec-get {v} {i})"


def _rule(name: str, facts: list[str], result: str) -> str:
    # `t`, params and inputs are bound by the pattern the compiler prepends; see eqsat.egraph.
    return "\n".join(["PATTERN", *facts, f"=> {result}"])


def _same_shape_rule(src: str) -> Callable[[], list[str]]:
    return lambda: [_rule("", [], f"s_{src}")]


# ---------------------------------------------------------------------------------------------------------
# numpy helpers (float and modular share code: object arrays of Python ints are exact)


def _mod(a: np.ndarray, p: int) -> np.ndarray:
    return np.asarray(a, dtype=object) % p


def _poly(x: np.ndarray, p: int, a: int, b: int, c: int) -> np.ndarray:
    x = np.asarray(x, dtype=object)
    return (x * x * a + x * b + c) % p


def _relu_mod(x: np.ndarray, p: int) -> np.ndarray:
    # relu is not algebraic; like TASO we fingerprint it with a fixed non-linear polynomial.
    return _poly(x, p, 3, 5, 7)


def _conv_out(size: int, k: int, stride: int, pad_total: int, dil: int) -> int:
    return (size + pad_total - dil * (k - 1) - 1) // stride + 1


def _patches(x: np.ndarray, kh: int, kw: int, strides: Shape, pads: Shape, dil: Shape,
             fill: Any = 0) -> np.ndarray:
    """Gather sliding windows: (N, C, H, W) -> (N, C, kh, kw, OH, OW)."""
    n, c, h, w = x.shape
    if x.dtype == object:  # np.pad would fill with numpy int64 scalars, which overflow in exact arithmetic
        xp = np.full((n, c, h + pads[0] + pads[2], w + pads[1] + pads[3]), fill, dtype=object)
        xp[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + w] = x
    else:
        xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])), constant_values=fill)
    oh = _conv_out(h, kh, strides[0], pads[0] + pads[2], dil[0])
    ow = _conv_out(w, kw, strides[1], pads[1] + pads[3], dil[1])
    out = np.empty((n, c, kh, kw, oh, ow), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            hs, ws = i * dil[0], j * dil[1]
            out[:, :, i, j] = xp[:, :, hs:hs + strides[0] * (oh - 1) + 1:strides[0],
                                 ws:ws + strides[1] * (ow - 1) + 1:strides[1]]
    return out


def _conv_core(p: Params, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    g = p["groups"]
    o, cg, kh, kw = w.shape
    cols = _patches(x, kh, kw, p["strides"], p["pads"], p["dilations"])
    n, _, _, _, oh, ow = cols.shape
    og = o // g
    outs = []
    for gi in range(g):
        cg_cols = cols[:, gi * cg:(gi + 1) * cg].reshape(n, cg * kh * kw, oh * ow)
        wg = w[gi * og:(gi + 1) * og].reshape(og, cg * kh * kw)
        outs.append(np.matmul(wg, cg_cols))
    return np.concatenate(outs, axis=1).reshape(n, o, oh, ow)


# ---------------------------------------------------------------------------------------------------------
# Leaves-free operators


def _unary(name: str, fn: Callable[[np.ndarray], np.ndarray], mod: Callable[[np.ndarray, int], np.ndarray],
           onnx_type: str, flops_per: int, doc: str) -> OpSpec:
    spec = _register(OpSpec(
        name=name, inputs=("x",), params=(), doc=doc, elementwise=True,
        shape_fn=lambda p, x: x,
        numpy_fn=lambda p, x: fn(x).astype(x.dtype, copy=False),
        modular_fn=lambda p, x, m: mod(x, m),
        flops_fn=lambda p, ins, out: flops_per * math.prod(out),
        export_fn=lambda p, ins, outs, ctx: [(onnx_type, ins, outs, {})],
        egglog_shape=_same_shape_rule("x"),
    ))

    @_importer(onnx_type)
    def _imp(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
        _, ins, outs, _ = node
        if not ctx.is_float(ins[0]):
            return ctx.unsupported('a non-float input')
        return [(name, {}, list(ins), list(outs))]

    return spec


RELU = _unary("relu", lambda x: np.maximum(x, 0), _relu_mod, "Relu", 1, "max(x, 0)")
SIGMOID = _unary("sigmoid", lambda x: 1.0 / (1.0 + np.exp(-x)), lambda x, m: _poly(x, m, 11, 13, 17),
                 "Sigmoid", 4, "1 / (1 + exp(-x))")
TANH = _unary("tanh", np.tanh, lambda x, m: _poly(x, m, 19, 23, 29), "Tanh", 4, "tanh(x)")


# -- element-wise binary with ONNX (numpy) broadcasting over equal ranks ----------------------------------

def _broadcast_shape(op: str, a: Shape, b: Shape) -> Shape:
    require(len(a) == len(b), f"{op}: operands must have equal rank (got {a} and {b}); the importer "
            "reshapes lower-rank operands")
    out = []
    for da, db in zip(a, b, strict=True):
        require(da == db or da == 1 or db == 1, f"{op}: shapes {a} and {b} do not broadcast")
        out.append(max(da, db))
    return tuple(out)


def _broadcast_rules() -> list[str]:
    rules = []
    for r in range(MAX_RANK + 1):
        dims = " ".join(f"(max {_vget('s_a', i)} {_vget('s_b', i)})" for i in range(r))
        # each pair of dims broadcasts: equal, or one of them 1 (a product that is zero, as queries have no "or")
        fits = [f"(= 0 (* (- {_vget('s_a', i)} {_vget('s_b', i)}) (* (- {_vget('s_a', i)} 1) (- {_vget('s_b', i)} 1))))"
                for i in range(r)]
        rules.append(_rule("", [f"(= (vec-length s_a) {r})", f"(= (vec-length s_b) {r})", *fits],
                           f"(vec-of {dims})" if r else "(vec-empty)"))
    return rules


def _binary(name: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], onnx_type: str, doc: str) -> OpSpec:
    return _register(OpSpec(
        name=name, inputs=("a", "b"), params=(), doc=doc, elementwise=True,
        shape_fn=lambda p, a, b: _broadcast_shape(name, a, b),
        numpy_fn=lambda p, a, b: fn(a, b),
        modular_fn=lambda p, a, b, m: fn(np.asarray(a, dtype=object), np.asarray(b, dtype=object)) % m,
        flops_fn=lambda p, ins, out: math.prod(out),
        export_fn=lambda p, ins, outs, ctx: [(onnx_type, ins, outs, {})],
        egglog_shape=_broadcast_rules,
    ))


EWADD = _binary("ewadd", np.add, "Add", "element-wise a + b (broadcasting over equal ranks)")
EWMUL = _binary("ewmul", np.multiply, "Mul", "element-wise a * b (broadcasting over equal ranks)")


def _align_rank(ctx: ImportContext, name: str, rank: int, out: list[IRNode]) -> str:
    """Make ``name`` have ``rank`` dims (numpy right-alignment) for a broadcasting op."""
    shape = ctx.shape(name)
    if len(shape) == rank:
        return name
    new_shape = (1,) * (rank - len(shape)) + tuple(shape)
    const = ctx.const(name)
    if const is not None:
        return ctx.add_weight(const.reshape(new_shape), name)
    res = ctx.fresh(name + "_aligned")
    out.append(("reshape", {"shape": new_shape}, [name], [res]))
    return res


def _import_chain(op: str) -> Callable[[ImportContext, OnnxNode], list[IRNode] | None]:
    def imp(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
        _, ins, outs, _ = node
        if not all(ctx.is_float(i) for i in ins):
            return ctx.unsupported('a non-float input')
        rank = max(len(ctx.shape(i)) for i in ins)
        res: list[IRNode] = []
        if op == "ewmul" and len(ins) == 2:
            # a product with a rank-0 / single-element constant is a scalar multiplication
            for x, s in ((ins[0], ins[1]), (ins[1], ins[0])):
                c = ctx.const(s)
                if c is not None and c.size == 1 and len(ctx.shape(x)) == rank:
                    sname = ctx.add_weight(c.reshape(()), s)
                    return [("smul", {}, [x, sname], list(outs))]
        names = [_align_rank(ctx, i, rank, res) for i in ins]
        acc = names[0]
        for k, nxt in enumerate(names[1:]):
            last = k == len(names) - 2
            dst = outs[0] if last else ctx.fresh(outs[0] + f"_part{k}")
            res.append((op, {}, [acc, nxt], [dst]))
            acc = dst
        if len(names) == 1:
            res.append(("reshape", {"shape": ctx.shape(names[0])}, [names[0]], [outs[0]]))
        return res

    return imp


ONNX_IMPORTERS["Add"] = _import_chain("ewadd")
ONNX_IMPORTERS["Sum"] = _import_chain("ewadd")
ONNX_IMPORTERS["Mul"] = _import_chain("ewmul")


SMUL = _register(OpSpec(
    name="smul", inputs=("x", "s"), params=(), doc="x * s for a rank-0 tensor s", elementwise=True,
    shape_fn=lambda p, x, s: (require(len(s) == 0, f"smul: scalar must have rank 0, got {s}"), x)[1],
    numpy_fn=lambda p, x, s: x * s,
    modular_fn=lambda p, x, s, m: (np.asarray(x, dtype=object) * np.asarray(s, dtype=object)) % m,
    flops_fn=lambda p, ins, out: math.prod(out),
    export_fn=lambda p, ins, outs, ctx: [("Mul", ins, outs, {})],
    egglog_shape=lambda: [_rule("", ["(= (vec-length s_s) 0)"], "s_x")],
))


# -- matmul ----------------------------------------------------------------------------------------------

def _matmul_shape(p: Params, a: Shape, b: Shape) -> Shape:
    require(len(a) >= 2 and len(a) == len(b), f"matmul: operands need equal rank >= 2, got {a} and {b}")
    require(a[:-2] == b[:-2], f"matmul: batch dimensions differ: {a} vs {b}")
    require(a[-1] == b[-2], f"matmul: inner dimensions differ: {a} @ {b}")
    return a[:-1] + (b[-1],)


MATMUL = _register(OpSpec(
    name="matmul", inputs=("a", "b"), params=(), doc="(batched) matrix product a @ b, equal batch dims",
    shape_fn=_matmul_shape,
    numpy_fn=lambda p, a, b: np.matmul(a, b),
    modular_fn=lambda p, a, b, m: np.matmul(np.asarray(a, dtype=object), np.asarray(b, dtype=object)) % m,
    flops_fn=lambda p, ins, out: 2 * math.prod(out) * ins[0][-1],
    export_fn=lambda p, ins, outs, ctx: [("MatMul", ins, outs, {})],
    # a @ [b1 b2 ...] = [a @ b1, a @ b2, ...] along the last axis
    sibling_merge=lambda p, ins: ((len(ins[1]) - 1,), len(ins[1]) - 1),
    egglog_shape=lambda: [_rule("", [
        "(= (vec-length s_a) (vec-length s_b))",
        "(>= (vec-length s_a) 2)",
        "(= (vec-pop (vec-pop s_a)) (vec-pop (vec-pop s_b)))",
        "(= (vec-get s_a (- (vec-length s_a) 1)) (vec-get s_b (- (vec-length s_b) 2)))",
    ], "(vec-set s_a (- (vec-length s_a) 1) (vec-get s_b (- (vec-length s_b) 1)))")],
))


@_importer("MatMul")
def _import_matmul(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    _, (a, b), outs, _ = node
    sa, sb = ctx.shape(a), ctx.shape(b)
    if not (ctx.is_float(a) and ctx.is_float(b)):
        return ctx.unsupported("a non-float input")
    if len(sa) > 2 and len(sb) == 2:
        # activations (batch, seq, hidden) @ weight (hidden, out), as every transformer projection is: one
        # matrix product over the flattened rows, between two reshapes (views), so the matrix rules apply
        rows, flat, prod = (math.prod(sa[:-1]), sa[-1]), ctx.fresh(f"{outs[0]}_rows"), ctx.fresh(f"{outs[0]}_2d")
        return [("reshape", {"shape": rows}, [a], [flat]), ("matmul", {}, [flat, b], [prod]),
                ("reshape", {"shape": (*sa[:-1], sb[-1])}, [prod], list(outs))]
    if len(sa) < 2 or len(sa) != len(sb) or sa[:-2] != sb[:-2]:
        return ctx.unsupported("a 1-D or broadcast-batch matmul (eqsat's needs equal ranks and batch dims, or "
                               "N-D activations times a matrix)")
    return [("matmul", {}, [a, b], list(outs))]


@_importer("Gemm")
def _import_gemm(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    _, ins, outs, attrs = node
    a, b = ins[0], ins[1]
    if not all(ctx.is_float(i) for i in ins):
        return ctx.unsupported('a non-float input')
    res: list[IRNode] = []

    def trans(name: str) -> str:
        c = ctx.const(name)
        if c is not None:
            return ctx.add_weight(np.ascontiguousarray(c.T), name + "_T")
        dst = ctx.fresh(name + "_T")
        res.append(("transpose", {"perm": (1, 0)}, [name], [dst]))
        return dst

    if attrs.get("transA", 0):
        a = trans(a)
    if attrs.get("transB", 0):
        b = trans(b)
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    has_c = len(ins) > 2 and ins[2] != ""
    prod = outs[0] if (alpha == 1.0 and not has_c) else ctx.fresh(outs[0] + "_mm")
    res.append(("matmul", {}, [a, b], [prod]))
    if alpha != 1.0:
        scaled = outs[0] if not has_c else ctx.fresh(outs[0] + "_alpha")
        s = ctx.add_weight(np.array(alpha, dtype=np.float32), "alpha")
        res.append(("smul", {}, [prod, s], [scaled]))
        prod = scaled
    if has_c:
        c_name = ins[2]
        c = ctx.const(c_name)
        if c is not None:
            cval = (c * beta).astype(np.float32)
            cval = cval.reshape((1,) * (2 - cval.ndim) + cval.shape)
            c_name = ctx.add_weight(cval, c_name)
        else:
            if beta != 1.0:
                return ctx.unsupported('a Gemm with beta != 1')
            c_name = _align_rank(ctx, c_name, 2, res)
        res.append(("ewadd", {}, [prod, c_name], [outs[0]]))
    return res


# -- convolution -----------------------------------------------------------------------------------------

def _conv_shape(p: Params, x: Shape, w: Shape, b: Shape) -> Shape:
    require(len(x) == 4 and len(w) == 4, f"conv2d: needs 4-D input and kernel, got {x} and {w}")
    g = p["groups"]
    require(x[1] == w[1] * g, f"conv2d: input channels {x[1]} != kernel channels {w[1]} x groups {g}")
    require(w[0] % g == 0, f"conv2d: output channels {w[0]} not divisible by groups {g}")
    require(b == (w[0],), f"conv2d: bias shape {b} != ({w[0]},)")
    require(p["act"] in (ACT_NONE, ACT_RELU), f"conv2d: unknown activation {p['act']}")
    st, pd, dl = p["strides"], p["pads"], p["dilations"]
    oh = _conv_out(x[2], w[2], st[0], pd[0] + pd[2], dl[0])
    ow = _conv_out(x[3], w[3], st[1], pd[1] + pd[3], dl[1])
    require(oh > 0 and ow > 0, f"conv2d: empty output for input {x}, kernel {w}")
    return (x[0], w[0], oh, ow)


def _conv_np(p: Params, x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    y = _conv_core(p, x, w) + b.reshape(1, -1, 1, 1)
    if p["act"] == ACT_RELU:
        y = np.maximum(y, 0)
    return y.astype(x.dtype, copy=False)


def _conv_mod(p: Params, x: np.ndarray, w: np.ndarray, b: np.ndarray, m: int) -> np.ndarray:
    y = (_conv_core(p, np.asarray(x, dtype=object), np.asarray(w, dtype=object))
         + np.asarray(b, dtype=object).reshape(1, -1, 1, 1)) % m
    return _relu_mod(y, m) if p["act"] == ACT_RELU else y


def _conv_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
    attrs = {"strides": list(p["strides"]), "pads": list(p["pads"]), "dilations": list(p["dilations"]),
             "group": p["groups"]}
    # a kernel with weight shape (O, C/g, kh, kw) is implied by the weight; the bias is always given
    if p["act"] == ACT_NONE:
        return [("Conv", ins, outs, attrs)]
    mid = ctx.fresh(outs[0] + "_preact")
    return [("Conv", ins, [mid], attrs), ("Relu", [mid], outs, {})]


def _conv_dim(i: int) -> str:
    # output size along spatial dim i (0: H, 1: W) following _conv_out
    k = _vget("s_w", 2 + i)
    size = _vget("s_x", 2 + i)
    pad_total = f"(+ {_vget('pads', i)} {_vget('pads', i + 2)})"
    return (f"(+ (/ (- (+ {size} {pad_total}) (+ (* {_vget('dilations', i)} (- {k} 1)) 1)) "
            f"{_vget('strides', i)}) 1)")


CONV2D = _register(OpSpec(
    name="conv2d", inputs=("x", "w", "b"),
    params=(("strides", "ints"), ("pads", "ints"), ("dilations", "ints"), ("groups", "int"), ("act", "int")),
    defaults={"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "groups": 1, "act": ACT_NONE},
    doc="2-D convolution NCHW with bias and fused activation (0 none, 1 relu); pads (top, left, bottom, right)",
    shape_fn=_conv_shape, numpy_fn=_conv_np, modular_fn=_conv_mod,
    flops_fn=lambda p, ins, out: 2 * math.prod(out) * ins[1][1] * ins[1][2] * ins[1][3],
    export_fn=_conv_export,
    runs_as=lambda p: [("conv2d", {**p, "act": ACT_NONE}), ("relu", {})] if p["act"] == ACT_RELU else None,
    # output channels of one input: kernels and biases stack, the output splits by channel
    sibling_merge=lambda p, ins: ((0, 0), 1) if p["groups"] == 1 else None,
    egglog_shape=lambda: [_rule("", [
        "(= (vec-length s_x) 4)", "(= (vec-length s_w) 4)",
        f"(= {_vget('s_x', 1)} (* groups {_vget('s_w', 1)}))",
        f"(= s_b (vec-of {_vget('s_w', 0)}))",
    ], f"(vec-of {_vget('s_x', 0)} {_vget('s_w', 0)} {_conv_dim(0)} {_conv_dim(1)})")],
))


def _spatial_attrs(attrs: dict[str, Any], shape_w: Shape) -> tuple[Shape, Shape, Shape] | None:
    if attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID", b"NOTSET", b"VALID"):
        return None
    kh, kw = shape_w
    strides = tuple(attrs.get("strides", (1, 1)))
    pads = tuple(attrs.get("pads", (0, 0, 0, 0)))
    dil = tuple(attrs.get("dilations", (1, 1)))
    if len(strides) != 2 or len(pads) != 4 or len(dil) != 2:
        return None
    return strides, pads, dil


@_importer("Conv")
def _import_conv(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    _, ins, outs, attrs = node
    x, w = ins[0], ins[1]
    if not all(ctx.is_float(i) for i in ins if i) or len(ctx.shape(x)) != 4:
        return ctx.unsupported('a non-float input or an input that is not 4-D (NCHW)')
    sw = ctx.shape(w)
    sp = _spatial_attrs(attrs, sw[2:])
    if sp is None:
        return ctx.unsupported('auto_pad SAME_UPPER/SAME_LOWER, or strides/pads/dilations that are not 2-D')
    if len(ins) > 2 and ins[2]:
        b = ins[2]
    else:
        b = ctx.add_weight(np.zeros((sw[0],), dtype=np.float32), outs[0] + "_zero_bias")
    p = {"strides": sp[0], "pads": sp[1], "dilations": sp[2], "groups": int(attrs.get("group", 1)),
         "act": ACT_NONE}
    return [("conv2d", p, [x, w, b], list(outs))]


# -- enlarge ---------------------------------------------------------------------------------------------

def _enlarge_np(p: Params, w: np.ndarray) -> np.ndarray:
    kh, kw = p["kernel"]
    dh, dw = kh - w.shape[2], kw - w.shape[3]
    return np.pad(w, ((0, 0), (0, 0), (dh // 2, dh - dh // 2), (dw // 2, dw - dw // 2)))


def _enlarge_shape(p: Params, w: Shape) -> Shape:
    kh, kw = p["kernel"]
    require(len(w) == 4, f"enlarge: needs a 4-D kernel, got {w}")
    require(kh >= w[2] and kw >= w[3] and (kh - w[2]) % 2 == 0 and (kw - w[3]) % 2 == 0,
            f"enlarge: cannot centre kernel {w[2:]} in {kh}x{kw}")
    return (w[0], w[1], kh, kw)


def _enlarge_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
    # normally folded away (weights only); otherwise a zero Pad on the spatial dims
    raise OpError("enlarge on a non-constant tensor cannot be exported; it is folded when its input is a weight")


ENLARGE = _register(OpSpec(
    name="enlarge", inputs=("w",), params=(("kernel", "ints"),),
    doc="zero-pad a conv kernel (O, I, h, w) to (O, I, kh, kw), centred",
    shape_fn=_enlarge_shape, numpy_fn=_enlarge_np,
    modular_fn=lambda p, w, m: _enlarge_np(p, np.asarray(w, dtype=object)) % m,
    flops_fn=lambda p, ins, out: 0,
    export_fn=_enlarge_export,
    egglog_shape=lambda: [_rule("", [
        "(= (vec-length s_w) 4)",
        f"(>= {_vget('kernel', 0)} {_vget('s_w', 2)})", f"(>= {_vget('kernel', 1)} {_vget('s_w', 3)})",
        f"(= 0 (% (- {_vget('kernel', 0)} {_vget('s_w', 2)}) 2))",
        f"(= 0 (% (- {_vget('kernel', 1)} {_vget('s_w', 3)}) 2))",
    ], f"(vec-of {_vget('s_w', 0)} {_vget('s_w', 1)} {_vget('kernel', 0)} {_vget('kernel', 1)})")],
))


# -- transpose / reshape ---------------------------------------------------------------------------------

def _transpose_shape(p: Params, x: Shape) -> Shape:
    perm = p["perm"]
    require(sorted(perm) == list(range(len(x))), f"transpose: perm {perm} invalid for rank {len(x)}")
    return tuple(x[i] for i in perm)


def _transpose_rules() -> list[str]:
    rules = []
    for r in range(1, MAX_RANK + 1):
        dims = " ".join(_vget("s_x", _vget("perm", i)) for i in range(r))
        rules.append(_rule("", [f"(= (vec-length s_x) {r})", f"(= (vec-length perm) {r})"], f"(vec-of {dims})"))
    return rules


TRANSPOSE = _register(OpSpec(
    name="transpose", inputs=("x",), params=(("perm", "ints"),), doc="permute dimensions",
    shape_fn=_transpose_shape,
    numpy_fn=lambda p, x: np.ascontiguousarray(np.transpose(x, p["perm"])),
    modular_fn=lambda p, x, m: np.transpose(np.asarray(x, dtype=object), p["perm"]) % m,
    flops_fn=lambda p, ins, out: 0,
    export_fn=lambda p, ins, outs, ctx: [("Transpose", ins, outs, {"perm": list(p["perm"])})],
    egglog_shape=_transpose_rules,
))


@_importer("Transpose")
def _import_transpose(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    _, ins, outs, attrs = node
    if not ctx.is_float(ins[0]):
        return ctx.unsupported('a non-float input')
    rank = len(ctx.shape(ins[0]))
    perm = tuple(attrs.get("perm", tuple(reversed(range(rank)))))
    return [("transpose", {"perm": perm}, [ins[0]], list(outs))]


def _reshape_shape(p: Params, x: Shape) -> Shape:
    shp = p["shape"]
    require(all(d >= 0 for d in shp), f"reshape: target {shp} must be fully resolved")
    require(math.prod(shp) == math.prod(x), f"reshape: cannot reshape {x} to {shp}")
    return shp


def _reshape_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
    shape = ctx.add_initializer(np.array(p["shape"], dtype=np.int64), outs[0] + "_shape")
    return [("Reshape", [ins[0], shape], outs, {})]


RESHAPE = _register(OpSpec(
    name="reshape", inputs=("x",), params=(("shape", "ints"),), doc="reshape to a static shape",
    shape_fn=_reshape_shape,
    numpy_fn=lambda p, x: np.reshape(x, p["shape"]),
    modular_fn=lambda p, x, m: np.reshape(np.asarray(x, dtype=object), p["shape"]) % m,
    flops_fn=lambda p, ins, out: 0,
    export_fn=_reshape_export,
    egglog_shape=lambda: [_rule("", [], "shape")],
))


@_importer("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def _import_reshape(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    # every shape-only op with a statically known output is a reshape; the output shape comes from
    # onnx shape inference via ctx (it is the node's only output)
    _, ins, outs, _ = node
    if not ctx.is_float(ins[0]):
        return ctx.unsupported('a non-float input')
    try:
        out_shape = ctx.shape(outs[0])
    except Exception:
        return ctx.unsupported('an output shape that shape inference does not give')
    if any(d < 0 for d in out_shape) or math.prod(out_shape) != math.prod(ctx.shape(ins[0])):
        return ctx.unsupported('a target shape that is dynamic or does not keep the size')
    return [("reshape", {"shape": tuple(out_shape)}, [ins[0]], list(outs))]


# -- concat / split --------------------------------------------------------------------------------------

def _concat_shape(p: Params, *xs: Shape) -> Shape:
    ax = p["axis"]
    r = len(xs[0])
    require(0 <= ax < r, f"concat: axis {ax} out of range for rank {r}")
    for s in xs[1:]:
        require(len(s) == r and all(a == b for i, (a, b) in enumerate(zip(s, xs[0], strict=True)) if i != ax),
                f"concat: shapes {xs} differ off axis {ax}")
    return xs[0][:ax] + (sum(s[ax] for s in xs),) + xs[0][ax + 1:]


CONCAT = _register(OpSpec(
    name="concat", inputs=("a", "b"), params=(("axis", "int"),), variadic=True,
    doc="concatenate along axis (n-ary in the IR; a left-nested binary chain in the e-graph)",
    shape_fn=_concat_shape,
    numpy_fn=lambda p, *xs: np.concatenate(xs, axis=p["axis"]),
    modular_fn=lambda p, *xs: np.concatenate([np.asarray(x, dtype=object) for x in xs[:-1]],
                                              axis=p["axis"]) % xs[-1],
    flops_fn=lambda p, ins, out: 0,
    export_fn=lambda p, ins, outs, ctx: [("Concat", ins, outs, {"axis": p["axis"]})],
    egglog_shape=lambda: [_rule("", [
        "(= (vec-length s_a) (vec-length s_b))",
        "(< axis (vec-length s_a))",
        "(= (vec-set s_a axis 0) (vec-set s_b axis 0))",
    ], f"(vec-set s_a axis (+ {_vget('s_a', 'axis')} {_vget('s_b', 'axis')}))")],
))


def _norm_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


@_importer("Concat")
def _import_concat(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    _, ins, outs, attrs = node
    if not all(ctx.is_float(i) for i in ins):
        return ctx.unsupported('a non-float input')
    if len(ins) == 1:  # a one-input Concat is an identity; the e-graph only knows concats of two or more
        return [("reshape", {"shape": ctx.shape(ins[0])}, list(ins), list(outs))]
    ax = _norm_axis(int(attrs["axis"]), len(ctx.shape(ins[0])))
    return [("concat", {"axis": ax}, list(ins), list(outs))]


def _split_shape(p: Params, x: Shape) -> Shape:
    ax, start, size = p["axis"], p["start"], p["size"]
    require(0 <= ax < len(x), f"split: axis {ax} out of range for {x}")
    require(start >= 0 and size > 0 and start + size <= x[ax], f"split: [{start}, {start + size}) outside {x}")
    return x[:ax] + (size,) + x[ax + 1:]


def _split_np(p: Params, x: np.ndarray) -> np.ndarray:
    idx = [slice(None)] * x.ndim
    idx[p["axis"]] = slice(p["start"], p["start"] + p["size"])
    return np.ascontiguousarray(x[tuple(idx)])


def _split_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
    # a lone piece; eqsat.onnx_io groups the pieces of one tensor into a single ONNX Split when they tile it
    ax, start, size = p["axis"], p["start"], p["size"]
    if ctx.opset < 10:
        return [("Slice", ins, outs, {"axes": [ax], "starts": [start], "ends": [start + size]})]
    st = ctx.add_initializer(np.array([start], dtype=np.int64), outs[0] + "_starts")
    en = ctx.add_initializer(np.array([start + size], dtype=np.int64), outs[0] + "_ends")
    axes = ctx.add_initializer(np.array([ax], dtype=np.int64), outs[0] + "_axes")
    return [("Slice", [ins[0], st, en, axes], outs, {})]


SPLIT = _register(OpSpec(
    name="split", inputs=("x",), params=(("axis", "int"), ("start", "int"), ("size", "int")),
    doc="one piece of a split: x[..., start:start+size, ...] along axis (explicit sizes)",
    shape_fn=_split_shape, numpy_fn=_split_np,
    modular_fn=lambda p, x, m: _split_np(p, np.asarray(x, dtype=object)) % m,
    flops_fn=lambda p, ins, out: 0,
    export_fn=_split_export,
    egglog_shape=lambda: [_rule("", [
        "(< axis (vec-length s_x))", "(>= start 0)", "(> size 0)",
        f"(<= (+ start size) {_vget('s_x', 'axis')})",
    ], "(vec-set s_x axis size)")],
))


@_importer("Split")
def _import_split(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    _, ins, outs, attrs = node
    if not ctx.is_float(ins[0]):
        return ctx.unsupported('a non-float input')
    shape = ctx.shape(ins[0])
    ax = _norm_axis(int(attrs.get("axis", 0)), len(shape))
    sizes = attrs.get("split")
    if len(ins) > 1 and ins[1]:
        c = ctx.const(ins[1])
        if c is None:
            return ctx.unsupported('split sizes that are not a constant')
        sizes = [int(v) for v in c.reshape(-1)]
    if sizes is None:
        sizes = [ctx.shape(o)[ax] for o in outs]
    res: list[IRNode] = []
    start = 0
    for o, size in zip(outs, sizes, strict=True):
        if o:
            res.append(("split", {"axis": ax, "start": start, "size": int(size)}, [ins[0]], [o]))
        start += int(size)
    return res


# -- pools -----------------------------------------------------------------------------------------------

def _pool_shape(p: Params, x: Shape) -> Shape:
    require(len(x) == 4, f"pool: needs a 4-D input, got {x}")
    kh, kw = p["kernel"]
    st, pd = p["strides"], p["pads"]
    oh = _conv_out(x[2], kh, st[0], pd[0] + pd[2], 1)
    ow = _conv_out(x[3], kw, st[1], pd[1] + pd[3], 1)
    require(oh > 0 and ow > 0, f"pool: empty output for {x}")
    return (x[0], x[1], oh, ow)


def _maxpool_np(p: Params, x: np.ndarray) -> np.ndarray:
    fill = -np.inf if x.dtype != object else -1
    cols = _patches(x, *p["kernel"], p["strides"], p["pads"], (1, 1), fill=fill)
    return cols.max(axis=(2, 3)).astype(x.dtype, copy=False)


def _avgpool_parts(p: Params, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    cols = _patches(x, *p["kernel"], p["strides"], p["pads"], (1, 1))
    total = cols.sum(axis=(2, 3))
    if p["count_include_pad"]:
        count = np.full(total.shape[2:], p["kernel"][0] * p["kernel"][1], dtype=np.int64)
    else:
        ones = np.ones((1, 1) + x.shape[2:], dtype=np.int64)
        count = _patches(ones, *p["kernel"], p["strides"], p["pads"], (1, 1)).sum(axis=(2, 3))[0, 0]
    return total, count


def _avgpool_np(p: Params, x: np.ndarray) -> np.ndarray:
    total, count = _avgpool_parts(p, x)
    return (total / count).astype(x.dtype, copy=False)


def _avgpool_mod(p: Params, x: np.ndarray, m: int) -> np.ndarray:
    total, count = _avgpool_parts(p, np.asarray(x, dtype=object))
    inv = np.vectorize(lambda c: pow(int(c), -1, m), otypes=[object])(count)
    return (total * inv) % m


def _pool_export(onnx_type: str) -> Callable[[Params, list[str], list[str], ExportContext], list[OnnxNode]]:
    def export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
        attrs: dict[str, Any] = {"kernel_shape": list(p["kernel"]), "strides": list(p["strides"]),
                                 "pads": list(p["pads"])}
        if onnx_type == "AveragePool":
            attrs["count_include_pad"] = p["count_include_pad"]
        return [(onnx_type, ins, outs, attrs)]

    return export


def _pool_rule() -> list[str]:
    def dim(i: int) -> str:
        pad_total = f"(+ {_vget('pads', i)} {_vget('pads', i + 2)})"
        return (f"(+ (/ (- (+ {_vget('s_x', 2 + i)} {pad_total}) {_vget('kernel', i)}) "
                f"{_vget('strides', i)}) 1)")

    return [_rule("", ["(= (vec-length s_x) 4)"],
                  f"(vec-of {_vget('s_x', 0)} {_vget('s_x', 1)} {dim(0)} {dim(1)})")]


_POOL_PARAMS = (("kernel", "ints"), ("strides", "ints"), ("pads", "ints"))
MAXPOOL = _register(OpSpec(
    name="maxpool", inputs=("x",), params=_POOL_PARAMS, doc="2-D max pooling",
    defaults={"pads": (0, 0, 0, 0)},
    shape_fn=_pool_shape, numpy_fn=_maxpool_np,
    modular_fn=lambda p, x, m: _maxpool_np(p, np.asarray(x, dtype=object)) % m,
    flops_fn=lambda p, ins, out: math.prod(out) * p["kernel"][0] * p["kernel"][1],
    export_fn=_pool_export("MaxPool"), egglog_shape=_pool_rule,
))
AVGPOOL = _register(OpSpec(
    name="avgpool", inputs=("x",), params=_POOL_PARAMS + (("count_include_pad", "int"),),
    doc="2-D average pooling", defaults={"pads": (0, 0, 0, 0), "count_include_pad": 0},
    shape_fn=_pool_shape, numpy_fn=_avgpool_np, modular_fn=_avgpool_mod,
    flops_fn=lambda p, ins, out: math.prod(out) * p["kernel"][0] * p["kernel"][1],
    export_fn=_pool_export("AveragePool"), egglog_shape=_pool_rule,
))


@_importer("MaxPool", "AveragePool")
def _import_pool(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    op_type, ins, outs, attrs = node
    live_outs = [o for o in outs if o]
    if len(live_outs) != 1 or outs[0] == "" or not ctx.is_float(ins[0]) or len(ctx.shape(ins[0])) != 4:
        return ctx.unsupported("MaxPool's indices output is used, or the input is not 4-D float")
    if attrs.get("ceil_mode", 0) or attrs.get("storage_order", 0):
        return ctx.unsupported('ceil_mode or storage_order')
    sp = _spatial_attrs(attrs, tuple(attrs["kernel_shape"]))
    if sp is None or sp[2] != (1, 1):
        return ctx.unsupported('auto_pad SAME_*, or dilations')
    p: Params = {"kernel": tuple(attrs["kernel_shape"]), "strides": sp[0], "pads": sp[1]}
    if op_type == "AveragePool":
        p["count_include_pad"] = int(attrs.get("count_include_pad", 0))
        return [("avgpool", p, [ins[0]], [outs[0]])]
    return [("maxpool", p, [ins[0]], [outs[0]])]


@_importer("GlobalAveragePool", "GlobalMaxPool")
def _import_global_pool(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    op_type, ins, outs, _ = node
    shape = ctx.shape(ins[0])
    if not ctx.is_float(ins[0]) or len(shape) != 4:
        return ctx.unsupported('a non-float input or an input that is not 4-D')
    p: Params = {"kernel": tuple(shape[2:]), "strides": (1, 1), "pads": (0, 0, 0, 0)}
    if op_type == "GlobalAveragePool":
        p["count_include_pad"] = 0
        return [("avgpool", p, [ins[0]], list(outs))]
    return [("maxpool", p, [ins[0]], list(outs))]


# -- batch normalisation (inference) ---------------------------------------------------------------------

def _bn_shape(p: Params, x: Shape, scale: Shape, bias: Shape, mean: Shape, var: Shape) -> Shape:
    require(len(x) >= 2, f"batchnorm: input rank must be >= 2, got {x}")
    for n, s in (("scale", scale), ("bias", bias), ("mean", mean), ("var", var)):
        require(s == (x[1],), f"batchnorm: {n} shape {s} != ({x[1]},)")
    return x


def _bn_np(p: Params, x: np.ndarray, scale: np.ndarray, bias: np.ndarray, mean: np.ndarray,
           var: np.ndarray) -> np.ndarray:
    shp = (1, -1) + (1,) * (x.ndim - 2)
    inv = scale / np.sqrt(var + p["epsilon"])
    return ((x - mean.reshape(shp)) * inv.reshape(shp) + bias.reshape(shp)).astype(x.dtype, copy=False)


BATCHNORM = _register(OpSpec(
    name="batchnorm", inputs=("x", "scale", "bias", "mean", "var"), params=(("epsilon", "float"),),
    defaults={"epsilon": 1e-5}, doc="inference batch normalisation over axis 1",
    shape_fn=_bn_shape, numpy_fn=_bn_np, modular_fn=None,
    flops_fn=lambda p, ins, out: 2 * math.prod(out),
    export_fn=lambda p, ins, outs, ctx: [("BatchNormalization", ins, outs, {"epsilon": p["epsilon"]})],
    egglog_shape=_same_shape_rule("x"),
))


@_importer("BatchNormalization")
def _import_bn(ctx: ImportContext, node: OnnxNode) -> list[IRNode] | None:
    _, ins, outs, attrs = node
    if len([o for o in outs if o]) != 1 or not all(ctx.is_float(i) for i in ins) or attrs.get("training_mode", 0):
        return ctx.unsupported('training mode, several outputs or a non-float input')
    if attrs.get("spatial", 1) != 1:
        return ctx.unsupported('spatial=0 (per-activation statistics)')
    return [("batchnorm", {"epsilon": float(attrs.get("epsilon", 1e-5))}, list(ins), [outs[0]])]


# -- batch-norm folding (weight transforms; precomputed at export when their inputs are weights) ---------

def _bn_factor(eps: float, scale: np.ndarray, var: np.ndarray) -> np.ndarray:
    return scale / np.sqrt(var + eps)


def _bnfold_export(which: str) -> Callable[[Params, list[str], list[str], ExportContext], list[OnnxNode]]:
    def export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
        eps = ctx.add_initializer(np.array(p["epsilon"], dtype=np.float32), outs[0] + "_eps")
        if which == "w":
            w, scale, var = ins
        else:
            b, scale, bias, mean, var = ins
        f = [ctx.fresh(outs[0] + s) for s in ("_v", "_sd", "_f")]
        nodes: list[OnnxNode] = [("Add", [var, eps], [f[0]], {}), ("Sqrt", [f[0]], [f[1]], {}),
                                 ("Div", [scale, f[1]], [f[2]], {})]
        if which == "w":
            shp = ctx.add_initializer(np.array([-1, 1, 1, 1], dtype=np.int64), outs[0] + "_shape")
            f4 = ctx.fresh(outs[0] + "_f4")
            return nodes + [("Reshape", [f[2], shp], [f4], {}), ("Mul", [w, f4], outs, {})]
        d, m = ctx.fresh(outs[0] + "_d"), ctx.fresh(outs[0] + "_m")
        return nodes + [("Sub", [b, mean], [d], {}), ("Mul", [d, f[2]], [m], {}), ("Add", [m, bias], outs, {})]

    return export


BNFOLD_W = _register(OpSpec(
    name="bnfold_w", inputs=("w", "scale", "var"), params=(("epsilon", "float"),), defaults={"epsilon": 1e-5},
    doc="conv kernel with a following batch norm folded in: w * scale / sqrt(var + eps) per output channel",
    shape_fn=lambda p, w, s, v: (require(len(w) == 4 and s == (w[0],) and v == (w[0],),
                                         f"bnfold_w: bad shapes {w}, {s}, {v}"), w)[1],
    numpy_fn=lambda p, w, s, v: (w * _bn_factor(p["epsilon"], s, v).reshape(-1, 1, 1, 1)).astype(w.dtype),
    modular_fn=None, flops_fn=lambda p, ins, out: 2 * math.prod(out), export_fn=_bnfold_export("w"),
    egglog_shape=lambda: [_rule("", ["(= (vec-length s_w) 4)", f"(= s_scale (vec-of {_vget('s_w', 0)}))",
                                     "(= s_var s_scale)"], "s_w")],
))
BNFOLD_B = _register(OpSpec(
    name="bnfold_b", inputs=("b", "scale", "bias", "mean", "var"), params=(("epsilon", "float"),),
    defaults={"epsilon": 1e-5}, doc="conv bias with a following batch norm folded in: (b - mean) * f + bias",
    shape_fn=lambda p, b, *rest: (require(all(r == b for r in rest) and len(b) == 1,
                                          f"bnfold_b: bad shapes {b}, {rest}"), b)[1],
    numpy_fn=lambda p, b, s, bias, m, v: ((b - m) * _bn_factor(p["epsilon"], s, v) + bias).astype(b.dtype),
    modular_fn=None, flops_fn=lambda p, ins, out: 4 * math.prod(out), export_fn=_bnfold_export("b"),
    egglog_shape=lambda: [_rule("", ["(= (vec-length s_b) 1)", "(= s_scale s_b)", "(= s_bias s_b)",
                                     "(= s_mean s_b)", "(= s_var s_b)"], "s_b")],
))


# -- data-layout variants: the same result computed from differently laid-out operands ------------------

def _swap_last(s: Shape) -> Shape:
    return s[:-2] + (s[-1], s[-2])


def _matmul_t_shape(p: Params, a: Shape, b: Shape) -> Shape:
    require(len(a) == 2 and len(b) == 2, f"matmul_t: operands need rank 2, got {a} and {b}")
    return _matmul_shape({}, _swap_last(a) if p["trans_a"] else a, _swap_last(b) if p["trans_b"] else b)


def _matmul_t_np(p: Params, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.matmul(np.swapaxes(a, -1, -2) if p["trans_a"] else a, np.swapaxes(b, -1, -2) if p["trans_b"] else b)


def _matmul_t_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
    if ctx.opset >= 11:  # Gemm's bias input is optional from opset 11
        return [("Gemm", list(ins), outs, {"transA": p["trans_a"], "transB": p["trans_b"]})]
    a, b = ins
    nodes: list[OnnxNode] = []
    if p["trans_a"]:
        a = ctx.fresh(outs[0] + "_aT")
        nodes.append(("Transpose", [ins[0]], [a], {"perm": [1, 0]}))
    if p["trans_b"]:
        b = ctx.fresh(outs[0] + "_bT")
        nodes.append(("Transpose", [ins[1]], [b], {"perm": [1, 0]}))
    return nodes + [("MatMul", [a, b], outs, {})]


MATMUL_T = _register(OpSpec(
    name="matmul_t", inputs=("a", "b"), params=(("trans_a", "int"), ("trans_b", "int")),
    doc="layout variant of 2-D matmul: op(a) @ op(b) with op = transpose where the flag is set "
        "(cuBLAS transpose flags; ONNX Gemm transA/transB)",
    shape_fn=_matmul_t_shape, numpy_fn=_matmul_t_np,
    modular_fn=lambda p, a, b, m: _matmul_t_np(p, np.asarray(a, dtype=object), np.asarray(b, dtype=object)) % m,
    flops_fn=lambda p, ins, out: 2 * math.prod(out) * (ins[0][-2] if p["trans_a"] else ins[0][-1]),
    export_fn=_matmul_t_export,
    egglog_shape=lambda: [_rule("", [
        "(= (vec-length s_a) 2)", "(= (vec-length s_b) 2)",
        "(= (vec-get s_a (- 1 trans_a)) (vec-get s_b trans_b))",
    ], "(vec-of (vec-get s_a trans_a) (vec-get s_b (- 1 trans_b)))")],
))


def _nchw(s: Shape) -> Shape:
    return (s[0], s[3], s[1], s[2])


def _nhwc(s: Shape) -> Shape:
    return (s[0], s[2], s[3], s[1])


def _conv_nhwc_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext) -> list[OnnxNode]:
    x, w, b = ins
    xc, yc = ctx.fresh(outs[0] + "_nchw_in"), ctx.fresh(outs[0] + "_nchw_out")
    conv = _conv_export(p, [xc, w, b], [yc], ctx)
    return [("Transpose", [x], [xc], {"perm": [0, 3, 1, 2]}), *conv,
            ("Transpose", [yc], outs, {"perm": [0, 2, 3, 1]})]


CONV2D_NHWC = _register(OpSpec(
    name="conv2d_nhwc", inputs=("x", "w", "b"), params=CONV2D.params, defaults=CONV2D.defaults,
    doc="layout variant of conv2d: input and output in NHWC (kernel OIHW); exported as Transpose-Conv-Transpose",
    shape_fn=lambda p, x, w, b: _nhwc(_conv_shape(p, _nchw(x) if len(x) == 4 else x, w, b)),
    numpy_fn=lambda p, x, w, b: np.ascontiguousarray(np.transpose(
        _conv_np(p, np.transpose(x, (0, 3, 1, 2)), w, b), (0, 2, 3, 1))),
    modular_fn=lambda p, x, w, b, m: np.transpose(
        _conv_mod(p, np.transpose(np.asarray(x, dtype=object), (0, 3, 1, 2)), w, b, m), (0, 2, 3, 1)),
    flops_fn=CONV2D.flops_fn, export_fn=_conv_nhwc_export,
    runs_as=lambda p: [("conv2d_nhwc", {**p, "act": ACT_NONE}), ("relu", {})] if p["act"] == ACT_RELU else None,
    egglog_shape=lambda: [_rule("", [
        "(= (vec-length s_x) 4)", "(= (vec-length s_w) 4)",
        f"(= {_vget('s_x', 3)} (* groups {_vget('s_w', 1)}))",
        f"(= s_b (vec-of {_vget('s_w', 0)}))",
    ], f"(vec-of {_vget('s_x', 0)} {_conv_dim_nhwc(0)} {_conv_dim_nhwc(1)} {_vget('s_w', 0)})")],
))


def _conv_dim_nhwc(i: int) -> str:
    return _conv_dim(i).replace(_vget("s_x", 2 + i), _vget("s_x", 1 + i))


# -- opaque ----------------------------------------------------------------------------------------------

def _opaque_shape(p: Params, *xs: Shape) -> Shape:
    return tuple(p["shape"])


def _opaque_np(p: Params, *xs: np.ndarray) -> np.ndarray:
    raise OpError(f"opaque node {p['key']!r} ({p['op_type']}) has no numpy semantics; evaluate the graph "
                  "with an opaque evaluator (eqsat.onnx_io.onnx_opaque_evaluator)")


OPAQUE = _register(OpSpec(
    name="opaque", inputs=(), variadic=False,
    params=(("key", "str"), ("index", "int"), ("op_type", "str"), ("domain", "str"), ("attrs", "any"),
            ("shape", "ints"), ("dtype", "str"), ("n_outputs", "int"), ("slots", "str")),
    defaults={"domain": "", "index": 0, "n_outputs": 1, "slots": ""},
    doc="any other ONNX node, kept verbatim (attributes as serialized protobuf) with inferred output shapes; "
        "never optimized across, never dropped. One IR node per output (index); key identifies the node; "
        "slots marks which ONNX input positions are present ('1' present, '0' empty; '' = all present).",
    shape_fn=_opaque_shape, numpy_fn=_opaque_np, modular_fn=None,
    flops_fn=lambda p, ins, out: math.prod(out),
    export_fn=None,  # written by eqsat.onnx_io (it needs the original attributes and all outputs at once)
    egglog_shape=lambda: [],  # shapes of opaque outputs are set as facts when the graph is loaded
))


# -- constants (TASO's C_pool, I_conv, I_matmul, I_ewmul; a zero bias) -------------------------------------
# Zero-input operators whose parameters give their shape. They appear in generated rules (eqsat.rules) and
# export as an initializer; work that only reads constants and weights is folded like work on weights.


def _const_export(p: Params, ins: list[str], outs: list[str], ctx: ExportContext, spec_name: str) -> list[OnnxNode]:
    arr = np.asarray(REGISTRY[spec_name].numpy_fn(p), dtype=np.float32)
    name = ctx.add_initializer(arr, outs[0] + "_const")
    return [("Identity", [name], outs, {})]


def _const_spec(name: str, params: tuple[tuple[str, str], ...], shape_fn: Callable[..., Shape],
                numpy_fn: Callable[..., np.ndarray], modular_fn: Callable[..., np.ndarray], egg_result: str,
                egg_facts: list[str], doc: str) -> OpSpec:
    return _register(OpSpec(
        name=name, inputs=(), params=params, doc=doc,
        shape_fn=shape_fn, numpy_fn=numpy_fn, modular_fn=modular_fn,
        flops_fn=lambda p, ins, out: 0,
        export_fn=lambda p, ins, outs, ctx: _const_export(p, ins, outs, ctx, name),
        egglog_shape=lambda: [_rule("", egg_facts, egg_result)],
    ))


def _kernel_of(p: Params) -> tuple[int, int]:
    kh, kw = p["kernel"]
    require(kh > 0 and kw > 0, f"constant kernel {p['kernel']} must be positive")
    return kh, kw


def _const_pool_np(p: Params) -> np.ndarray:
    kh, kw = _kernel_of(p)
    return np.full((p["channels"], 1, kh, kw), 1.0 / (kh * kw), dtype=np.float32)


def _const_pool_mod(p: Params, m: int) -> np.ndarray:
    kh, kw = _kernel_of(p)
    out = np.empty((p["channels"], 1, kh, kw), dtype=object)
    out[...] = pow(kh * kw, -1, m)
    return out


def _iconv(p: Params, one: Any, zero: Any, dtype: Any) -> np.ndarray:
    kh, kw = _kernel_of(p)
    require(kh % 2 == 1 and kw % 2 == 1, f"const_iconv: kernel {p['kernel']} must be odd")
    c = p["channels"]
    out = np.full((c, c, kh, kw), zero, dtype=dtype)
    for i in range(c):
        out[i, i, kh // 2, kw // 2] = one
    return out


def _pos(v: int, what: str) -> int:
    require(v > 0, f"{what} must be positive, got {v}")
    return v


CONST_POOL = _const_spec(
    "const_pool", (("kernel", "ints"), ("channels", "int")),
    lambda p: (_pos(p["channels"], "const_pool channels"), 1) + _kernel_of(p),
    _const_pool_np, lambda p, m: _const_pool_mod(p, m),
    "(vec-of channels 1 (vec-get kernel 0) (vec-get kernel 1))", ["(> channels 0)"],
    "C_pool: a depthwise (channels, 1, kh, kw) kernel of 1/(kh*kw); conv with it (groups=channels) is an "
    "average pool counting padding")
CONST_ICONV = _const_spec(
    "const_iconv", (("kernel", "ints"), ("channels", "int")),
    lambda p: (_pos(p["channels"], "const_iconv channels"), p["channels"]) + _kernel_of(p),
    lambda p: _iconv(p, 1.0, 0.0, np.float32), lambda p, m: _iconv(p, 1, 0, object),
    "(vec-of channels channels (vec-get kernel 0) (vec-get kernel 1))", ["(> channels 0)"],
    "I_conv: the identity kernel (channels, channels, kh, kw), 1 at the centre where out == in")
CONST_IMATMUL = _const_spec(
    "const_imatmul", (("n", "int"),),
    lambda p: (_pos(p["n"], "const_imatmul n"),) * 2,
    lambda p: np.eye(p["n"], dtype=np.float32),
    lambda p, m: np.array([[1 if i == j else 0 for j in range(p["n"])] for i in range(p["n"])], dtype=object)
    .reshape(p["n"], p["n"]),
    "(vec-of n n)", ["(> n 0)"], "I_matmul: the n x n identity matrix")
CONST_IEWMUL = _const_spec(
    "const_iewmul", (("shape", "ints"),),
    lambda p: tuple(_pos(d, "const_iewmul dim") for d in p["shape"]),
    lambda p: np.ones(p["shape"], dtype=np.float32),
    lambda p, m: np.full(p["shape"], 1, dtype=object),
    "shape", [], "I_ewmul: a tensor of ones of the given shape")
CONST_ZERO = _const_spec(
    "const_zero", (("shape", "ints"),),
    lambda p: tuple(_pos(d, "const_zero dim") for d in p["shape"]),
    lambda p: np.zeros(p["shape"], dtype=np.float32),
    lambda p, m: np.full(p["shape"], 0, dtype=object),
    "shape", [], "a tensor of zeros of the given shape (the bias of a conv with a constant kernel)")


# ---------------------------------------------------------------------------------------------------------


def ops_for_generator() -> list[str]:
    """Operators with exact modular semantics (usable by the rule generator)."""
    return [n for n, s in REGISTRY.items() if s.modular_fn is not None]
