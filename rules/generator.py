"""TASO-style rule generator: enumerate small operator graphs, fingerprint them modulo a prime, pair equivalents.

Algorithm (TASO §2, Algorithm 1, re-done from the paper's description):

1. **Enumeration.** In each *domain* (matrices; NCHW activations with conv kernels) a depth-first search builds
   every acyclic graph of at most ``max_ops`` operators over a few typed input variables, without duplicated
   computation (a new tensor equal to an existing computed tensor is pruned). Ops are added in a canonical
   order (a new op either consumes the previous op's output or has a larger key), so each graph is built
   about once. Constants (C_pool, I_conv, I_matmul, I_ewmul and zero biases) are created in context by the
   templates that use them, with their shape parameters taken from their co-operand.
2. **Fingerprints.** Every tensor is evaluated with the registry's exact integer semantics modulo
   ``ops.PRIME`` (relu, sigmoid and tanh are fixed non-linear polynomials there). A graph's fingerprint is
   the sorted tuple of its outputs' hashes, so it does not depend on output order. Graphs with one or two
   outputs are kept; a split piece that nothing consumes may be dropped from the outputs.
3. **Candidates.** Graphs with equal fingerprints are paired with the smallest graph of their bucket (its
   outputs are matched by hash: the input/output mapping), giving a candidate rule ``graph => smallest``.
4. **Pruning** (TASO §4): input renaming (rules equal up to a renaming of variables), common subgraph (both
   sides share an operator applied to the same arguments) and common supergraph (both roots are the same
   operator and differ in one argument). Counts are reported per stage.
5. **Confirmation.** Each remaining candidate is evaluated in float64 on a second shape set and on random
   shape assignments where both sides are well-shaped with equal shapes (this is also what checks that the
   generalisation of concrete shapes to ``(dim ?x k)`` expressions is sound); failures are dropped.

A conv kernel variable ``?k1`` always travels with its bias variable ``?bk1``: operators applied to kernels
are applied to their biases too (concat along output channels concatenates biases, a sum of kernels sums
them, a constant kernel has a zero bias), and these bias operators are not counted.

The work is cut into independent units (one per domain and first operator) that :func:`generate` runs on
an executor of :mod:`eqsat.rules.distributed` (a process pool, or Ray tasks on this machine or a cluster); a
unit is a pure function of its description, and its result is stored by content hash, so an interrupted run
resumes. Each unit's graphs are split into shards by fingerprint; pairing and pruning then run shard by
shard (memory bounded by a shard, not by all graphs) and their outputs merge into the order a single
in-memory pass gives, so the candidates do not depend on the workers, their order or the shard counts.
"""

from __future__ import annotations

import hashlib
import pickle
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from eqsat import ops
from eqsat.ops import shapes as S
from eqsat.rules.rule import Sexp, Vec, evaluate, is_var, parse, split_args, unparse

PRIME = ops.PRIME

# ---------------------------------------------------------------------------------------------------------
# domains: typed variables with a shape per shape set (A: fingerprints, B: float confirmation, C: tests)


@dataclass(frozen=True)
class VarType:
    """A kind of input variable: name prefix, shape in each shape set, and whether it is a conv kernel."""

    prefix: str
    shapes: tuple[tuple[int, ...], ...]
    count: int
    kernel: bool = False
    #: A parameter variable (a reshape target): ``shapes`` holds its value per shape set; not a tensor.
    param: bool = False
    #: For a reshape target: the prefix of the matrix variables it reshapes (``(a, b * c)`` to ``(a, b, c)``).
    of: str = ""


@dataclass(frozen=True)
class Domain:
    """A family of operators over typed variables."""

    name: str
    types: tuple[VarType, ...]
    templates: tuple[str, ...]


MAT = Domain("mat", (
    VarType("x", ((2, 4), (3, 5), (4, 3)), 2),
    VarType("w", ((4, 4), (5, 5), (3, 3)), 3),
    VarType("s", ((), (), ()), 1),
), ("ewadd", "ewmul", "smul", "relu", "transpose", "matmul", "concat0", "concat1", "split0", "split1",
    "add_imatmul", "add_iewmul", "gelu"))

CONV = Domain("conv", (
    VarType("i", ((1, 4, 3, 3), (2, 3, 4, 4), (1, 2, 5, 4)), 2),
    VarType("k", ((4, 4, 3, 3), (3, 3, 3, 3), (2, 2, 3, 3)), 2, kernel=True),
    VarType("u", ((4, 4, 1, 1), (3, 3, 1, 1), (2, 2, 1, 1)), 1, kernel=True),
    VarType("s", ((), (), ()), 1),
), ("conv0", "conv1", "convg2", "convpool", "relu", "ewadd", "ewmul", "smul", "avgpool", "maxpool",
    "concat0", "concat1", "split0", "split1", "enlarge", "add_iconv"))

#: Attention heads: rank-3 tensors under every rank-3 transpose and batched matmul, and the reshape of a
#: matrix into heads (``?r1`` is its target shape, a parameter variable, so the rules hold for any target).
TRANSPOSES3 = {"t021": (0, 2, 1), "t102": (1, 0, 2), "t120": (1, 2, 0), "t201": (2, 0, 1), "t210": (2, 1, 0)}
HEADS = Domain("heads", (
    VarType("q", ((2, 3, 4), (3, 2, 5), (2, 4, 3)), 2),
    VarType("v", ((2, 4, 4), (3, 5, 5), (2, 3, 3)), 1),
    VarType("m", ((3, 8), (2, 15), (4, 6)), 1),
    VarType("r", ((3, 2, 4), (2, 3, 5), (4, 2, 3)), 1, param=True, of="m"),
    VarType("s", ((), (), ()), 1),
), ("ewadd", "smul", "relu", "matmul", *TRANSPOSES3, "reshape", "softmax", "gelu"))

DOMAINS: dict[str, Domain] = {d.name: d for d in (MAT, CONV, HEADS)}
SHAPE_SETS = 3

_VAR_TYPES = {t.prefix: t for d in DOMAINS.values() for t in d.types}


def var_shape(var: str, shape_set: int) -> tuple[int, ...]:
    """Shape of variable ``?name`` in a shape set (bias variables ``?bk1`` follow their kernel)."""
    name = var[1:]
    if name.startswith("b") and name[1:2] in ("k", "u"):
        return (_VAR_TYPES[name[1]].shapes[shape_set][0],)
    return _VAR_TYPES[name.rstrip("0123456789")].shapes[shape_set]


def is_param_var(var: str) -> bool:
    """True for a parameter variable of a domain (its value is a tuple, not a tensor)."""
    vt = _VAR_TYPES.get(var_prefix(var))
    return vt is not None and vt.param


def var_prefix(var: str) -> str:
    """The type prefix of a variable (``b`` + kernel prefix for biases)."""
    name = var[1:]
    if name.startswith("b") and name[1:2] in ("k", "u"):
        return "b" + name[1]
    return name.rstrip("0123456789")


# ---------------------------------------------------------------------------------------------------------
# tensors during enumeration


@dataclass(eq=False)
class Tensor:
    """A tensor of a graph under construction: its pattern, concrete (set A) shape, symbolic shape, value."""

    pat: Sexp
    key: str
    shape: tuple[int, ...]
    sym: tuple[Sexp, ...]
    val: np.ndarray
    h: int
    is_var: bool = False
    bias: Tensor | None = None  # kernels only: the bias that travels with them
    bounds: dict[int, Sexp] = field(default_factory=dict)  # split boundaries (TASO's SplitInfo)


def _hash(val: np.ndarray) -> int:
    return hash((val.shape, tuple(int(v) for v in val.flat)))


def _exact(val: np.ndarray) -> np.ndarray:
    """Make every element a Python int (numpy helpers such as np.pad insert fixed-width zeros)."""
    out = np.empty(val.shape, dtype=object)
    out.flat[:] = [int(v) for v in val.flat] if val.size else []
    return out


def _sym_add(a: Sexp, b: Sexp) -> Sexp:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return ["+", a, b]


def _sym_key(e: Sexp) -> str:
    return unparse(e) if isinstance(e, list) else str(e)


class Evaluator:
    """Builds tensors from operator applications, memoising values by pattern text."""

    def __init__(self, seed: int = 0) -> None:
        self.memo: dict[str, Tensor] = {}
        self.rng = np.random.default_rng(seed)

    def variable(self, name: str, shape: tuple[int, ...]) -> Tensor:
        """A fresh input variable with random residues."""
        val = np.empty(shape, dtype=object)
        flat = [int(v) for v in self.rng.integers(0, PRIME, size=max(1, int(np.prod(shape))))]
        if shape:
            val.flat[:] = flat[:val.size]
        else:
            val[()] = flat[0]
        sym = tuple(["dim", name, k] for k in range(len(shape)))
        t = Tensor(name, name, shape, sym, val, _hash(val), is_var=True)
        return t

    def apply(self, op: str, pparams: Sequence[Sexp], cparams: dict[str, Any], ins: Sequence[Tensor],
              sym: tuple[Sexp, ...] | None = None) -> Tensor | None:
        """Apply a registry operator; ``pparams`` are the pattern parameters, ``cparams`` the concrete ones."""
        pat = [op, *pparams, *[t.pat for t in ins]]
        key = unparse(pat)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        spec = ops.get(op)
        try:
            p = spec.normalize(cparams)
            shape = spec.shape(p, [t.shape for t in ins])
        except ops.OpError:
            return None
        val = _exact(spec.evaluate_mod(p, [t.val for t in ins], PRIME))
        t = Tensor(pat, key, shape, sym if sym is not None else _sym_shape(op, cparams, pparams, ins, shape), val,
                   _hash(val))
        self.memo[key] = t
        return t


def _sym_shape(op: str, cp: dict[str, Any], pp: Sequence[Sexp], ins: Sequence[Tensor],
               shape: tuple[int, ...]) -> tuple[Sexp, ...]:
    a = ins[0].sym if ins else ()
    if op in ("ewadd", "ewmul", "relu", "smul", "avgpool", "maxpool", "sigmoid", "tanh"):
        return a
    if op == "matmul":
        return a[:-1] + (ins[1].sym[-1],)
    if op == "transpose":
        return tuple(a[i] for i in cp["perm"])
    if op == "concat":
        ax = cp["axis"]
        return a[:ax] + (_sym_add(a[ax], ins[1].sym[ax]),) + a[ax + 1:]
    if op == "split":
        return a[:cp["axis"]] + (pp[2],) + a[cp["axis"] + 1:]
    if op == "conv2d":
        return (a[0], ins[1].sym[0], a[2], a[3])
    if op == "enlarge":
        return (a[0], a[1]) + tuple(cp["kernel"])
    spec = ops.get(op)
    if spec.inputs and spec.shape_rules == S.same_as(spec.inputs[0]):  # declared: the shape of its input
        return a
    return tuple(shape)  # constants: built with explicit symbolic shapes by their templates


# ---------------------------------------------------------------------------------------------------------
# templates


_SAME_PADS = {3: (1, 1, 1, 1), 1: (0, 0, 0, 0)}


def _v(t: Sequence[int]) -> Vec:
    return Vec(tuple(int(i) for i in t))


def _common_bounds(a: Tensor, b: Tensor) -> dict[int, Sexp]:
    return {ax: e for ax, e in a.bounds.items() if ax in b.bounds and _sym_key(b.bounds[ax]) == _sym_key(e)}


class Templates:
    """The operator templates of a domain, each applied to tuples of available tensors."""

    def __init__(self, ev: Evaluator, domain: Domain) -> None:
        self.ev = ev
        self.domain = domain

    # -- helpers
    def _const(self, op: str, pparams: Sequence[Sexp], cparams: dict[str, Any], sym: tuple[Sexp, ...]) -> Tensor:
        t = self.ev.apply(op, pparams, cparams, [], sym)
        assert t is not None, (op, cparams)
        return t

    def _zero_bias(self, kernel: Tensor) -> Tensor:
        return self._const("const_zero", [Vec((kernel.sym[0],))], {"shape": (kernel.shape[0],)}, (kernel.sym[0],))

    def _ew(self, op: str, a: Tensor, b: Tensor) -> Tensor | None:
        if a.shape != b.shape:
            return None
        t = self.ev.apply(op, [], {}, [a, b])
        if t is not None:
            t.bounds = _common_bounds(a, b)
        return t

    def _conv(self, x: Tensor, k: Tensor, act: int, groups: int, gsym: Sexp) -> Tensor | None:
        if k.bias is None or x.bias is not None or len(x.shape) != 4:
            return None
        kh = k.shape[2]
        if k.shape[3] != kh or kh not in _SAME_PADS:
            return None
        pads = _SAME_PADS[kh]
        cp = {"strides": (1, 1), "pads": pads, "dilations": (1, 1), "groups": groups, "act": act}
        pp = [_v((1, 1)), _v(pads), _v((1, 1)), gsym, act]
        t = self.ev.apply("conv2d", pp, cp, [x, k, k.bias])
        if t is not None:
            t.bounds = {ax: e for ax, e in ((0, x.bounds.get(0)), (1, k.bounds.get(0))) if e is not None}
        return t

    def _shape_of_prefix(self, prefix: str) -> tuple[int, ...] | None:
        return next((vt.shapes[0] for vt in self.domain.types if vt.prefix == prefix), None)

    # -- the templates: (name, arity) -> outputs
    def arity(self, name: str) -> int:
        """Number of tensor operands a template takes."""
        if name in _FORMS:
            return len(_FORMS[name][0].inputs)
        return 2 if name in ("ewadd", "ewmul", "smul", "matmul", "concat0", "concat1", "conv0", "conv1",
                             "convg2") else 1

    def apply(self, name: str, args: Sequence[Tensor]) -> list[Tensor] | None:
        """Apply template ``name``; returns its output tensors (two for a split) or None if not applicable."""
        ev = self.ev
        if name in ("ewadd", "ewmul"):
            a, b = args
            if a is b or (name == "ewmul" and (a.bias is not None or b.bias is not None)):
                return None
            if (a.bias is None) != (b.bias is None) or not a.shape:
                return None
            t = self._ew(name, a, b)
            if t is not None and a.bias is not None:
                t.bias = self._ew("ewadd", a.bias, b.bias)
            return [t] if t is not None else None
        if name == "smul":
            a, s = args
            if s.shape != () or not a.shape:
                return None
            t = ev.apply("smul", [], {}, [a, s])
            if t is None:
                return None
            t.bounds = dict(a.bounds)
            if a.bias is not None:
                t.bias = ev.apply("smul", [], {}, [a.bias, s])
            return [t]
        (a, *rest) = args
        if name in ("relu", "avgpool", "maxpool"):
            if not a.shape or a.bias is not None or (name != "relu" and len(a.shape) != 4):
                return None
            if name == "relu":
                t = ev.apply("relu", [], {}, [a])
            else:
                cp: dict[str, Any] = {"kernel": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1)}
                pp: list[Sexp] = [_v((3, 3)), _v((1, 1)), _v((1, 1, 1, 1))]
                if name == "avgpool":
                    cp["count_include_pad"] = 1
                    pp.append(1)
                t = ev.apply(name, pp, cp, [a])
            if t is not None:
                t.bounds = {ax: e for ax, e in a.bounds.items() if ax in (0, 1) or name == "relu"}
            return [t] if t is not None else None
        if name == "transpose":
            if len(a.shape) != 2:
                return None
            t = ev.apply("transpose", [_v((1, 0))], {"perm": (1, 0)}, [a])
            if t is not None:
                t.bounds = {1 - ax: e for ax, e in a.bounds.items()}
            return [t] if t is not None else None
        if name in TRANSPOSES3:
            if len(a.shape) != 3:
                return None
            perm = TRANSPOSES3[name]
            return _opt(ev.apply("transpose", [_v(perm)], {"perm": perm}, [a]))
        if name == "reshape":  # a matrix into heads, by the domain's target-shape parameter variable
            target = next(vt for vt in self.domain.types if vt.param)
            if a.shape != self._shape_of_prefix(target.of) or (a.is_var and var_prefix(a.key) != target.of):
                return None
            return _opt(ev.apply("reshape", [f"?{target.prefix}1"], {"shape": target.shapes[0]}, [a],
                                 tuple(target.shapes[0])))
        if name == "matmul":
            b = rest[0]
            if len(a.shape) != len(b.shape) or len(a.shape) not in (2, 3):
                return None
            t = ev.apply("matmul", [], {}, [a, b])
            if t is not None and len(a.shape) == 2:
                t.bounds = {ax: e for ax, e in ((0, a.bounds.get(0)), (1, b.bounds.get(1))) if e is not None}
            return [t] if t is not None else None
        if name in ("concat0", "concat1"):
            b = rest[0]
            ax = int(name[-1])
            if a is b or len(a.shape) < 1 or (a.bias is None) != (b.bias is None):
                return None
            t = ev.apply("concat", [ax], {"axis": ax}, [a, b])
            if t is None:
                return None
            t.bounds = _common_bounds(a, b)
            t.bounds[ax] = a.sym[ax]
            if a.bias is not None:
                if ax == 0:
                    t.bias = ev.apply("concat", [0], {"axis": 0}, [a.bias, b.bias])
                else:
                    t.bias = self._ew("ewadd", a.bias, b.bias)
                if t.bias is None:
                    return None
            return [t]
        if name in ("split0", "split1"):
            ax = int(name[-1])
            if a.bias is not None or ax not in a.bounds or len(a.shape) <= ax:
                return None
            first = a.bounds[ax]
            first_c = int(evaluate_sym(first, self.domain, 0))
            # size of the second piece: total minus first, expressed from the concat that made the boundary
            total = a.sym[ax]
            second = _sym_sub(total, first)
            second_c = a.shape[ax] - first_c
            if first_c <= 0 or second_c <= 0:
                return None
            p0 = ev.apply("split", [ax, 0, first], {"axis": ax, "start": 0, "size": first_c}, [a])
            p1 = ev.apply("split", [ax, first, second], {"axis": ax, "start": first_c, "size": second_c}, [a])
            if p0 is None or p1 is None:
                return None
            for p in (p0, p1):
                p.bounds = {k: e for k, e in a.bounds.items() if k != ax}
            return [p0, p1]
        if name in ("conv0", "conv1"):
            return _opt(self._conv(a, rest[0], int(name[-1]), 1, 1))
        if name == "convg2":
            k = rest[0]
            if k.bias is None or len(a.shape) != 4 or a.shape[1] != 2 * k.shape[1] or k.shape[0] % 2:
                return None
            return _opt(self._conv(a, k, 0, 2, 2))
        if name == "convpool":
            if a.bias is not None or len(a.shape) != 4:
                return None
            c, csym = a.shape[1], a.sym[1]
            kern = self._const("const_pool", [_v((3, 3)), csym], {"kernel": (3, 3), "channels": c},
                               (csym, 1, 3, 3))
            kern.bias = self._const("const_zero", [Vec((csym,))], {"shape": (c,)}, (csym,))
            return _opt(self._conv(a, kern, 0, c, csym))
        if name == "enlarge":
            if not a.is_var or a.bias is None or a.shape[2:] != (1, 1):
                return None
            t = ev.apply("enlarge", [_v((3, 3))], {"kernel": (3, 3)}, [a])
            if t is not None:
                t.bias = a.bias
                t.bounds = dict(a.bounds)
            return _opt(t)
        if name == "add_iconv":
            if a.bias is None or a.shape[0] != a.shape[1]:
                return None
            ident = self._const("const_iconv", [_v(a.shape[2:]), a.sym[0]],
                                {"kernel": a.shape[2:], "channels": a.shape[0]}, (a.sym[0], a.sym[0]) + a.shape[2:])
            t = self._ew("ewadd", a, ident)
            if t is not None:
                t.bias = a.bias
            return _opt(t)
        if name == "add_imatmul":
            if len(a.shape) != 2 or a.shape[0] != a.shape[1]:
                return None
            ident = self._const("const_imatmul", [a.sym[0]], {"n": a.shape[0]}, (a.sym[0], a.sym[0]))
            return _opt(self._ew("ewadd", a, ident))
        if name == "add_iewmul":
            if not a.shape or a.bias is not None:
                return None
            ones = self._const("const_iewmul", [Vec(a.sym)], {"shape": a.shape}, a.sym)
            return _opt(self._ew("ewadd", a, ones))
        if name in _FORMS:  # a form an operator declares (OpSpec.generator_forms)
            spec, params_for = _FORMS[name]
            if any(t.bias is not None for t in args) or (p := params_for(a.shape)) is None:
                return None
            p = spec.normalize(p)
            return _opt(ev.apply(spec.name, [_param_literal(p[n]) for n in spec.param_names()], p, list(args)))
        raise ValueError(f"unknown template {name!r}")


#: Template name -> (operator, parameters for a first operand's shape), from the registry's declarations.
_FORMS: dict[str, tuple[ops.OpSpec, Callable[[tuple[int, ...]], dict[str, Any] | None]]] = {
    name: (spec, fn) for spec in ops.REGISTRY.values() for name, fn in spec.generator_forms.items()}


def _param_literal(v: Any) -> Sexp:
    return _v(v) if isinstance(v, tuple) else int(v)


def _opt(t: Tensor | None) -> list[Tensor] | None:
    return [t] if t is not None else None


def _sym_sub(a: Sexp, b: Sexp) -> Sexp:
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    if isinstance(a, list) and a[0] == "+" and _sym_key(a[1]) == _sym_key(b):
        return a[2]
    return ["-", a, b]


def evaluate_sym(e: Sexp, domain: Domain | None, shape_set: int) -> int:
    """Evaluate a symbolic dimension expression with the variables' shapes in a shape set."""
    if isinstance(e, int):
        return e
    if is_var(e):
        raise ValueError(f"unbound parameter {e}")
    head = e[0]
    if head == "dim":
        return var_shape(e[1], shape_set)[int(e[2])]
    a, b = evaluate_sym(e[1], domain, shape_set), evaluate_sym(e[2], domain, shape_set)
    return {"+": a + b, "-": a - b, "*": a * b}[head]


# ---------------------------------------------------------------------------------------------------------
# enumeration


@dataclass(frozen=True)
class WorkUnit:
    """An independent piece of the enumeration: one domain, one first operator (or the bare variables)."""

    domain: str
    first: int  # index into the domain's first-operator list; -1: the zero-operator graphs
    max_ops: int
    seed: int = 0


@dataclass(frozen=True)
class GraphRecord:
    """An enumerated graph: its outputs' patterns and hashes, its counted operators."""

    outputs: tuple[str, ...]
    hashes: tuple[int, ...]
    op_keys: tuple[str, ...]
    n_ops: int
    domain: str

    @property
    def fingerprint(self) -> tuple[int, ...]:
        """Output-order independent fingerprint."""
        return tuple(sorted(self.hashes))


@dataclass
class _Op:
    key: str
    ins: tuple[int, ...]  # tensor indices
    outs: tuple[int, ...]


class Enumerator:
    """Depth-first enumeration of graphs in one domain."""

    def __init__(self, domain: Domain, max_ops: int, seed: int = 0) -> None:
        self.domain = domain
        self.max_ops = max_ops
        self.ev = Evaluator(seed)
        self.tpl = Templates(self.ev, domain)
        self.vars: list[Tensor] = []
        for vt in domain.types:
            if vt.param:
                continue
            for k in range(1, vt.count + 1):
                t = self.ev.variable(f"?{vt.prefix}{k}", vt.shapes[0])
                if vt.kernel:
                    t.bias = self.ev.variable(f"?b{vt.prefix}{k}", (vt.shapes[0][0],))
                self.vars.append(t)
        self.var_hashes = {t.h for t in self.vars}
        self.graphs: dict[tuple[str, ...], GraphRecord] = {}
        self.visited = 0

    def candidates(self, tensors: list[Tensor], dead: set[int]) -> Iterable[tuple[str, tuple[int, ...]]]:
        """Every (template, operand indices) applicable to the available tensors."""
        avail = [i for i in range(len(tensors)) if i not in dead]
        for name in self.domain.templates:
            if self.tpl.arity(name) == 1:
                for i in avail:
                    yield name, (i,)
            else:
                commutative = False  # ordered pairs, so that commutativity itself is found
                for i in avail:
                    for j in avail:
                        if commutative and j <= i:
                            continue
                        if not commutative and name.startswith("concat") and i == j:
                            continue
                        yield name, (i, j)

    def first_ops(self) -> list[tuple[str, tuple[int, ...]]]:
        """The applicable first operators, in a deterministic order (the work units)."""
        out = []
        for name, args in self.candidates(self.vars, set()):
            if self.tpl.apply(name, [self.vars[i] for i in args]) is not None:
                out.append((name, args))
        return out

    def run(self, first: int) -> list[GraphRecord]:
        """Enumerate all graphs whose canonical first operator is ``first`` (-1: just the variables)."""
        if first < 0:
            for v in self.vars:
                self.graphs[(v.key,)] = GraphRecord((v.key,), (v.h,), (), 0, self.domain.name)
            return list(self.graphs.values())
        name, args = self.first_ops()[first]
        state = self._extend(list(self.vars), [], set(), set(self.var_hashes), name, args)
        if state is not None:
            self._dfs(*state)
        return list(self.graphs.values())

    def _extend(self, tensors: list[Tensor], opl: list[_Op], dead: set[int], hashes: set[int], name: str,
                args: tuple[int, ...]) -> tuple[list[Tensor], list[_Op], set[int], set[int]] | None:
        outs = self.tpl.apply(name, [tensors[i] for i in args])
        if outs is None:
            return None
        new_dead = set(dead)
        new_hashes = set(hashes)
        base = len(tensors)
        for k, t in enumerate(outs):
            if t.h in new_hashes:
                if t.h not in self.var_hashes:
                    return None  # duplicated computation
                new_dead.add(base + k)  # equal to an input: may only be an output
            new_hashes.add(t.h)
        key = f"{name}:{outs[0].key}" if len(outs) == 1 else f"{name}:{unparse(outs[0].pat[-1])}"
        return tensors + outs, opl + [_Op(key, args, tuple(range(base, base + len(outs))))], new_dead, new_hashes

    def _dfs(self, tensors: list[Tensor], opl: list[_Op], dead: set[int], hashes: set[int]) -> None:
        self.visited += 1
        self._record(tensors, opl)
        if len(opl) >= self.max_ops:
            return
        last = opl[-1]
        for name, args in self.candidates(tensors, dead):
            new = self._extend(tensors, opl, dead, hashes, name, args)
            if new is None:
                continue
            op = new[1][-1]
            if op.key <= last.key and not any(a in last.outs for a in args):
                continue  # not the canonical order of this graph
            if op.key in {o.key for o in opl}:
                continue
            self._dfs(*new)

    def _record(self, tensors: list[Tensor], opl: list[_Op]) -> None:
        consumed = {i for o in opl for i in o.ins}
        # per op: the output choices (a split piece nobody consumes may be dropped)
        choices: list[list[tuple[int, ...]]] = []
        for o in opl:
            free = [i for i in o.outs if i not in consumed]
            if len(o.outs) == 1:
                choices.append([tuple(free)])
            elif len(free) == 2:
                choices.append([tuple(free), (free[0],), (free[1],)])
            elif len(free) == 1:
                choices.append([tuple(free), ()])
            else:
                choices.append([()])
        op_keys = tuple(sorted(o.key for o in opl))
        combos: list[tuple[int, ...]] = [()]
        for ch in choices:
            combos = [c + x for c in combos for x in ch if len(c) + len(x) <= 2]
        for outs in combos:
            if not outs:
                continue
            keys = tuple(tensors[i].key for i in outs)
            skey = tuple(sorted(keys))
            if skey in self.graphs:
                continue
            self.graphs[skey] = GraphRecord(keys, tuple(tensors[i].h for i in outs), op_keys, len(opl),
                                            self.domain.name)


def run_unit(unit: WorkUnit) -> tuple[list[GraphRecord], int]:
    """Run one work unit; returns its graphs and the number of search states visited."""
    en = Enumerator(DOMAINS[unit.domain], unit.max_ops, unit.seed)
    graphs = en.run(unit.first)
    return graphs, en.visited


def _record_order(g: GraphRecord) -> tuple[Any, ...]:
    return (g.n_ops, g.op_keys, g.outputs)


def merge_unit_results(results: Iterable[tuple[list[GraphRecord], int]]
                       ) -> tuple[dict[tuple[str, tuple[str, ...]], GraphRecord], int]:
    """Merge the graphs of work units, independently of the order in which the units finish.

    Different units (and different output orders within a unit) may record the same set of outputs; the
    record kept is the least under a total order, with its outputs in sorted order, so that the bucket
    representatives chosen later, and hence the candidate rules, do not depend on worker scheduling.
    """
    graphs: dict[tuple[str, tuple[str, ...]], GraphRecord] = {}
    states = 0
    for recs, visited in results:
        states += visited
        _least_records(recs, graphs)
    return graphs, states


def _least_records(records: Iterable[GraphRecord], graphs: dict[tuple[str, tuple[str, ...]], GraphRecord]) -> None:
    """Fold records into ``graphs``: outputs in sorted order, the least record kept per (domain, outputs)."""
    for g in records:
        order = sorted(range(len(g.outputs)), key=lambda i: g.outputs[i])
        g = GraphRecord(tuple(g.outputs[i] for i in order), tuple(g.hashes[i] for i in order), g.op_keys,
                        g.n_ops, g.domain)
        key = (g.domain, g.outputs)
        old = graphs.get(key)
        if old is None or _record_order(g) < _record_order(old):
            graphs[key] = g


def work_units(max_ops: int, domains: Sequence[str] = tuple(DOMAINS), seed: int = 0) -> list[WorkUnit]:
    """All independent units of an enumeration."""
    units = []
    for d in domains:
        n = len(Enumerator(DOMAINS[d], max_ops, seed).first_ops())
        units.append(WorkUnit(d, -1, max_ops, seed))
        units += [WorkUnit(d, i, max_ops, seed) for i in range(n)]
    return units


# ---------------------------------------------------------------------------------------------------------
# candidate rules and pruning


@dataclass
class Candidate:
    """A candidate rule ``lhs => rhs`` (one or two outputs), in expression form."""

    lhs: tuple[str, ...]
    rhs: tuple[str, ...]
    n_lhs: int
    n_rhs: int
    domain: str
    lhs_ops: tuple[str, ...] = ()
    rhs_ops: tuple[str, ...] = ()
    conditions: tuple[str, ...] = ()

    @property
    def multi(self) -> bool:
        """True for a two-output rule."""
        return len(self.lhs) == 2

    def text(self) -> str:
        """A canonical one-line form."""
        return " ; ".join(self.lhs) + " => " + " ; ".join(self.rhs)


def _rename_map(texts: Sequence[str]) -> dict[str, str]:
    seen: dict[str, str] = {}
    counters: dict[str, int] = {}
    for text in texts:
        for tok in parse_vars(text):
            pre = var_prefix(tok)
            if pre.startswith("b"):
                continue
            if tok not in seen:
                counters[pre] = counters.get(pre, 0) + 1
                seen[tok] = f"?{pre}{counters[pre]}"
    for tok in list(seen):
        pre = var_prefix(tok)
        if pre in ("k", "u"):
            seen["?b" + tok[1:]] = "?b" + seen[tok][1:]
    return seen


def parse_vars(text: str) -> list[str]:
    """Variables of a pattern text in order of appearance."""
    import re

    return re.findall(r"\?[A-Za-z_]\w*", text)


def _apply_rename(text: str, m: dict[str, str]) -> str:
    import re

    return re.sub(r"\?[A-Za-z_]\w*", lambda mt: m.get(mt.group(0), mt.group(0)), text)


def canonical(c: Candidate) -> Candidate:
    """Rename variables in order of first appearance (trying both output orders of a two-output rule)."""
    best = None
    orders = [(0, 1), (1, 0)] if c.multi else [(0,)]
    for order in orders:
        lhs = tuple(c.lhs[i] for i in order)
        rhs = tuple(c.rhs[i] for i in order)
        m = _rename_map(lhs + rhs)
        cand = Candidate(tuple(_apply_rename(t, m) for t in lhs), tuple(_apply_rename(t, m) for t in rhs),
                         c.n_lhs, c.n_rhs, c.domain, c.lhs_ops, c.rhs_ops)
        if best is None or cand.text() < best.text():
            best = cand
    assert best is not None
    return best


def _subterms(e: Sexp, out: set[str]) -> None:
    if isinstance(e, list):
        spec, _, ins = split_args(e)
        if spec.inputs or spec.variadic:
            out.add(unparse(e))
        for x in ins:
            _subterms(x, out)


def common_subgraph(c: Candidate) -> bool:
    """TASO's first pruning: both sides apply the same operator to the same arguments."""
    return bool(set(c.lhs_ops) & set(c.rhs_ops))


def _root_args(e: Sexp) -> tuple[str, list[str]] | None:
    if not isinstance(e, list):
        return None
    spec, params, ins = split_args(e)
    head = f"{e[0]} {' '.join(unparse(p) for p in params)}"
    args = [unparse(x) for x in ins]
    if e[0] == "conv2d":  # a kernel and its bias count as one operand
        args = [args[0], args[1] + " " + args[2]]
    if e[0] == "split":
        head = f"split {unparse(params[0])}"
    return head, args


def common_supergraph(c: Candidate) -> bool:
    """TASO's second pruning: both roots are the same operator with all but one operand equal."""
    if c.multi:
        return False
    a, b = _root_args(parse(c.lhs[0])), _root_args(parse(c.rhs[0]))
    if a is None or b is None or a[0] != b[0] or len(a[1]) != len(b[1]):
        return False
    return sum(x != y for x, y in zip(a[1], b[1], strict=True)) <= 1


#: Operators that only move data: two outputs sharing one of them share no work.
_LAYOUT_OPS = ("transpose", "reshape")


def _shared_ops(outputs: Sequence[str]) -> bool:
    """True when two outputs have an operator in common (a shared subgraph) that computes something."""
    if len(outputs) < 2:
        return False
    subs = []
    for o in outputs:
        s: set[str] = set()
        _subterms(parse(o), s)
        s = {t for t in s if not _weight_only(t) and parse(t)[0] not in _LAYOUT_OPS}
        if isinstance(parse(o), list) and parse(o)[0] == "split":  # both pieces of one split are one operator
            s.add(unparse(parse(o)[-1]) + "#split")
        subs.append(s)
    return bool(subs[0] & subs[1])


def _weight_only(term: str) -> bool:
    """A term over kernel variables and constants only (work done once on weights, not shared computation)."""
    return all(var_prefix(v) in ("k", "u", "bk", "bu") for v in parse_vars(term))


def orient_multi(c: Candidate) -> Candidate | None:
    """Keep a two-output rule only where exactly one side shares work; that side becomes the right side.

    A rule whose sides both share work, or neither does, is implied by single-output rules.
    """
    ls, rs = _shared_ops(c.lhs), _shared_ops(c.rhs)
    if ls == rs:
        return None
    if ls:
        return Candidate(c.rhs, c.lhs, c.n_rhs, c.n_lhs, c.domain, c.rhs_ops, c.lhs_ops)
    return c


def _skeleton(c: Candidate) -> tuple[str, tuple[str, ...]]:
    import re

    text = c.text()
    vs = tuple(re.findall(r"\?[A-Za-z_]\w*", text))
    return re.sub(r"\?[A-Za-z_]\w*", "?", text), vs


def _erase_types(c: Candidate) -> str:
    m: dict[str, str] = {}
    for tok in parse_vars(c.text()):
        if var_prefix(tok).startswith("b") or tok in m:
            continue
        m[tok] = f"?t{len(m) + 1}"
        if var_prefix(tok) in ("k", "u"):
            m["?b" + tok[1:]] = f"?bt{len(m)}"
    return _apply_rename(c.text(), m)


def prune_instances(cands: Sequence[Candidate]) -> list[Candidate]:
    """Drop rules that are instances of another rule under a (non-injective) renaming of its variables."""
    erased: dict[str, Candidate] = {}
    for c in cands:  # variable types do not matter to the engine: keep one rule per type-erased text
        erased.setdefault(_erase_types(c), c)
    cands = list(erased.values())
    groups: dict[str, list[tuple[Candidate, tuple[str, ...]]]] = {}
    for c in cands:
        sk, vs = _skeleton(c)
        groups.setdefault(sk, []).append((c, vs))
    out = []
    for c in cands:
        sk, vs = _skeleton(c)
        inst = False
        for g, gvs in groups[sk]:
            if g is c or len(set(gvs)) <= len(set(vs)):
                continue
            m: dict[str, str] = {}
            if all(m.setdefault(a, b) == b for a, b in zip(gvs, vs, strict=True)):
                inst = True
                break
        if not inst:
            out.append(c)
    return out


def _op_keys_of(rec: GraphRecord) -> tuple[str, ...]:
    return tuple(k.split(":", 1)[1] for k in rec.op_keys)


def candidates_from(graphs: Iterable[GraphRecord]) -> tuple[list[Candidate], int]:
    """Pair every graph with the smallest graph of its fingerprint bucket. Returns (candidates, #buckets)."""
    keyed, n_buckets = keyed_candidates(graphs)
    return [c for _, c in keyed], n_buckets


def keyed_candidates(graphs: Iterable[GraphRecord]) -> tuple[list[tuple[Any, Candidate]], int]:
    """:func:`candidates_from` with each candidate's place in the global order: ``(domain, fingerprint,
    position in its bucket)``. Candidates from disjoint sets of buckets (fingerprint shards) merge into the
    order of one in-memory pass by sorting on these keys."""
    buckets: dict[tuple[Any, ...], list[GraphRecord]] = {}
    for g in graphs:
        buckets.setdefault((g.domain,) + g.fingerprint, []).append(g)
    out: list[tuple[Any, Candidate]] = []
    n_buckets = 0
    for key in sorted(buckets, key=lambda k: (k[0], k[1:])):
        gs = buckets[key]
        if len(gs) < 2:
            continue
        n_buckets += 1
        gs.sort(key=lambda g: (g.n_ops, sum(len(o) for o in g.outputs), g.outputs))
        rep = gs[0]
        for j, g in enumerate(gs[1:]):
            order = [rep.hashes.index(h) for h in g.hashes]
            if sorted(order) != list(range(len(order))):
                continue
            out.append(((key[0], key[1:], j),
                        Candidate(g.outputs, tuple(rep.outputs[i] for i in order), g.n_ops, rep.n_ops, g.domain,
                                  _op_keys_of(g), _op_keys_of(rep))))
    return out, n_buckets


# ---------------------------------------------------------------------------------------------------------
# numeric confirmation (float64) and the generalisation check


def random_env(variables: Iterable[str], shape_of: Callable[[str], tuple[int, ...]],
               rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random float64 values for variables of the given shapes (a parameter variable's value is its "shape")."""
    return {v: tuple(shape_of(v)) if is_param_var(v) else rng.standard_normal(shape_of(v)) for v in variables}


def _eval_sides(sides: Sequence[str], env: dict[str, Any]) -> list[np.ndarray] | None:
    try:
        return [np.asarray(evaluate(parse(s), env)) for s in sides]
    except (ops.OpError, IndexError, ValueError, KeyError):
        return None


def _holds(conditions: Sequence[str], shapes: dict[str, tuple[int, ...]]) -> bool:
    for c in conditions:
        e = parse(c)
        if e[0] == "=" and isinstance(e[1], list) and e[1][0] == "shape":
            if shapes[e[1][1]] != shapes[e[2][1]]:
                return False
    return True


def check_numeric(lhs: Sequence[str], rhs: Sequence[str], shape_sets: Sequence[int] = (1,), random_shapes: int = 0,
                  seed: int = 0, rtol: float = 1e-6, atol: float = 1e-8, conditions: Sequence[str] = ()) -> str | None:
    """Check ``lhs == rhs`` in float64; returns None when equal, else the reason it is not.

    On each listed shape set both sides must be well-shaped and equal. On ``random_shapes`` random shape
    assignments (variables' dimensions drawn independently, then kept only where both sides are well-shaped
    with equal shapes, as the e-graph engine requires before merging) they must be equal too.
    """
    rng = np.random.default_rng(seed)
    variables = sorted(set().union(*(parse_vars(s) for s in (*lhs, *rhs))))
    for ss in shape_sets:
        env = random_env(variables, lambda v, ss=ss: var_shape(v, ss), rng)
        a, b = _eval_sides(lhs, env), _eval_sides(rhs, env)
        if a is None or b is None:
            return f"ill-shaped on shape set {ss}"
        for x, y in zip(a, b, strict=True):
            if x.shape != y.shape or not np.allclose(x, y, rtol=rtol, atol=atol):
                return f"values differ on shape set {ss}"
    tried = 0
    for _ in range(random_shapes * 20):
        if tried >= random_shapes:
            break
        shapes = _random_shapes(variables, rng)
        if not _holds(conditions, shapes):
            continue
        env = random_env(variables, shapes.__getitem__, rng)
        a = _eval_sides(lhs, env)
        if a is None:
            continue
        b = _eval_sides(rhs, env)
        if b is None or any(x.shape != y.shape for x, y in zip(a, b, strict=True)):
            continue
        tried += 1
        for x, y in zip(a, b, strict=True):
            if not np.allclose(x, y, rtol=rtol, atol=atol):
                return f"values differ for shapes {shapes}"
    return None


def _random_shapes(variables: Sequence[str], rng: np.random.Generator) -> dict[str, tuple[int, ...]]:
    """Shapes near a random base shape set: each base dimension value is split into up to two new values."""
    base = int(rng.integers(0, SHAPE_SETS))
    remap: dict[tuple[int, int], int] = {}
    out = {}
    for v in variables:
        dims = []
        for d in var_shape(v, base):
            if d in (1, 3) and var_prefix(v) in ("k", "u") and len(dims) >= 2:
                dims.append(d)  # kernel sizes stay: they decide the padding literal
                continue
            color = int(rng.integers(0, 2))
            dims.append(remap.setdefault((d, color), int(rng.integers(1, 6))))
        out[v] = tuple(dims)
    for v in variables:  # a reshape target and the matrix it reshapes: (a, b, c) and (a, b * c)
        vt = _VAR_TYPES.get(var_prefix(v))
        matrix = f"?{vt.of}{v[1 + len(vt.prefix):]}" if vt is not None and vt.of else None
        if matrix in out:
            out[matrix] = (out[v][0], int(np.prod(out[v][1:])))
    return out


# ---------------------------------------------------------------------------------------------------------
# the whole generator


@dataclass
class GenerationReport:
    """Counts per stage (TASO's Table 3) and times."""

    max_ops: int
    units: int = 0
    states: int = 0
    graphs: int = 0
    buckets: int = 0
    candidates: int = 0
    after_renaming: int = 0
    after_common_subgraph: int = 0
    after_common_supergraph: int = 0
    after_instances: int = 0
    after_float: int = 0
    after_generalisation: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    dropped: list[tuple[str, str]] = field(default_factory=list)
    #: Per stage (enumerate, pair, prune, confirm): units in all, computed in this run, reused from the folder.
    stages: dict[str, Any] = field(default_factory=dict)
    #: Each enumeration unit with the seconds it took (when it was computed, possibly in an earlier run).
    unit_seconds: list[tuple[WorkUnit, float]] = field(default_factory=list)

    def table(self) -> list[tuple[str, int]]:
        """The stage counts as (stage, count) rows."""
        return [("search states", self.states), ("graphs (<= 2 outputs)", self.graphs),
                ("fingerprint buckets (>= 2 graphs)", self.buckets), ("candidate rules", self.candidates),
                ("after input renaming", self.after_renaming),
                ("after common subgraph", self.after_common_subgraph),
                ("after common supergraph", self.after_common_supergraph),
                ("after instances / implied two-output rules", self.after_instances),
                ("after float confirmation", self.after_float),
                ("after generalisation check", self.after_generalisation)]


def shape_conditions(c: Candidate) -> tuple[str, ...]:
    """Conditions equating the shapes of same-typed tensor variables (as they were during generation)."""
    vs = sorted({v for v in parse_vars(c.text()) if not var_prefix(v).startswith("b") and var_shape(v, 0)})
    return tuple(f"(= (shape {a}) (shape {b}))" for a, b in zip(vs, vs[1:], strict=False)
                 if var_prefix(a) == var_prefix(b))


def confirm(c: Candidate) -> tuple[str | None, str | None, tuple[str, ...]]:
    """Float confirmation and the generalisation check of one candidate.

    Returns ``(None, None, conditions)`` when it is kept (with the shape conditions it needs, if any), else
    ``(stage, reason, ())`` with stage ``"float"`` (unequal on the second shape set) or ``"general"``
    (unequal on random shapes even when same-typed variables have equal shapes).
    """
    r = check_numeric(c.lhs, c.rhs, shape_sets=(1,), random_shapes=0)
    if r is not None:
        return "float", r, ()
    r = check_numeric(c.lhs, c.rhs, shape_sets=(0, 2), random_shapes=12, seed=1)
    if r is None:
        return None, None, ()
    conds = shape_conditions(c)  # e.g. sound only without broadcasting: keep it with shape conditions
    if conds and check_numeric(c.lhs, c.rhs, shape_sets=(0, 2), random_shapes=12, seed=1, conditions=conds) is None:
        return None, None, conds
    return "general", r, ()


#: Shards by fingerprint (pairing) and by canonical rule text (deduplication) per enumeration size: each
#: pairing unit holds one fingerprint shard's graphs, never all of them. Results do not depend on these.
SHARDS = {1: 2, 2: 4, 3: 16, 4: 256}


def _shard(text: str, k: int) -> int:
    """A shard index from a text, the same in every process (unlike ``hash`` of a str)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") % k


def _pack(obj: Any) -> bytes:
    return zlib.compress(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), 1)


def _unpack(blob: bytes) -> Any:
    return pickle.loads(zlib.decompress(blob))


def enumerate_unit(args: tuple[WorkUnit, int]) -> tuple[tuple[int, int, float], list[bytes]]:
    """A distributed enumeration unit: run ``unit`` and split its graphs into ``shards`` parts by fingerprint.

    Returns ``((states, graphs, seconds), parts)``; a graph with the same outputs as another has the same
    fingerprint, so deduplication across units happens within a shard.
    """
    unit, shards = args
    t = time.perf_counter()
    recs, states = run_unit(unit)
    graphs: dict[tuple[str, tuple[str, ...]], GraphRecord] = {}
    _least_records(recs, graphs)
    del recs
    parts: list[list[tuple[Any, ...]]] = [[] for _ in range(shards)]
    for g in graphs.values():
        parts[_shard(repr((g.domain, g.fingerprint)), shards)].append((g.outputs, g.hashes, g.op_keys, g.n_ops))
    n = len(graphs)
    del graphs
    blobs = [_pack((unit.domain, p)) for p in parts]
    return (states, n, time.perf_counter() - t), blobs


def pair_shard(args: tuple[list[bytes], int]) -> tuple[tuple[int, int, int], list[bytes]]:
    """A pairing unit: the graphs of one fingerprint shard (one part per enumeration unit) are merged, paired
    into candidates, renamed canonically and deduplicated (the first of each text kept). The candidates, with
    their global order keys, are split into ``text_shards`` parts by canonical text.

    Returns ``((graphs, buckets, candidates), parts)``.
    """
    blobs, text_shards = args
    graphs: dict[tuple[str, tuple[str, ...]], GraphRecord] = {}
    for blob in blobs:
        domain, rows = _unpack(blob)
        _least_records((GraphRecord(o, h, k, n, domain) for o, h, k, n in rows), graphs)
    n_graphs = len(graphs)
    keyed, n_buckets = keyed_candidates([graphs[k] for k in sorted(graphs)])
    del graphs
    parts: list[list[tuple[Any, Candidate]]] = [[] for _ in range(text_shards)]
    seen: set[str] = set()
    for key, c in keyed:
        cc = canonical(c)
        text = cc.text()
        if text not in seen:
            seen.add(text)
            parts[_shard(text, text_shards)].append((key, cc))
    return (n_graphs, n_buckets, len(keyed)), [_pack(p) for p in parts]


def prune_shard(blobs: list[bytes]) -> tuple[int, int, int, list[tuple[Any, Candidate]]]:
    """A pruning unit: the candidates of one text shard, in global order, keep the first of each canonical
    text (input renaming), then lose the common subgraph and supergraph candidates.

    Returns ``(after renaming, after common subgraph, after common supergraph, survivors with order keys)``.
    """
    rows: list[tuple[Any, Candidate]] = []
    for blob in blobs:
        rows += _unpack(blob)
    rows.sort(key=lambda r: r[0])
    first: dict[str, tuple[Any, Candidate]] = {}
    for key, c in rows:
        first.setdefault(c.text(), (key, c))
    kept = list(first.values())
    n_renamed = len(kept)
    kept = [r for r in kept if not common_subgraph(r[1])]
    n_sub = len(kept)
    kept = [r for r in kept if not common_supergraph(r[1])]
    return n_renamed, n_sub, len(kept), kept


def confirm_chunk(cands: Sequence[Candidate]) -> list[tuple[str | None, str | None, tuple[str, ...]]]:
    """A confirmation unit: :func:`confirm` over a chunk of candidates."""
    return [confirm(c) for c in cands]


def generator_salt() -> str:
    """The version of the code that generation results depend on (generator, patterns, operator registry)."""
    from eqsat.rules import distributed

    here = Path(__file__).parent
    return distributed.source_salt(here / "generator.py", here / "rule.py", Path(ops.__file__).parent)


def generate(max_ops: int = 3, workers: int = 2, domains: Sequence[str] = tuple(DOMAINS), seed: int = 0,
             progress: Callable[[str], None] | None = None, executor: str = "auto", address: str | None = None,
             results_dir: str | Path | None = None, fresh: bool = False,
             shards: tuple[int, int] | None = None) -> tuple[list[Candidate], GenerationReport]:
    """Enumerate, fingerprint, pair, prune and confirm; returns the surviving candidates and the report.

    Units run on :class:`eqsat.rules.distributed.Executor` (``executor``: auto, ray, pool or serial;
    ``address``: a Ray cluster). Every unit's result is stored in ``results_dir`` (a temporary folder when
    None) under a hash of its description and of the code, so a rerun with the same folder redoes only the
    units that did not finish (``fresh``: forget stored results first). Pairing runs per fingerprint shard
    and deduplication per canonical-text shard (``shards``: their counts, default :data:`SHARDS`), so no
    process holds every graph. The result does not depend on the workers, the backend or the shards.
    """
    from eqsat.rules.distributed import Executor, ResultStore, run_stage

    say = progress or (lambda m: None)
    rep = GenerationReport(max_ops)
    ex = Executor(workers=workers, backend=executor, address=address)
    store = ResultStore(results_dir)
    if fresh:
        store.clear()
    salt = generator_salt()
    k_fp, k_text = shards or (SHARDS.get(max_ops, SHARDS[4]),) * 2
    try:
        t0 = time.perf_counter()
        units = work_units(max_ops, domains, seed)
        rep.units = len(units)
        keys = [store.key("enumerate", salt, (u, k_fp)) for u in units]
        summaries, rep.stages["enumerate"] = run_stage(ex, store, enumerate_unit, keys, lambda i: (units[i], k_fp),
                                                       save=lambda r: r, label="enumerate", say=progress)
        rep.states = sum(s[0] for s in summaries)
        rep.unit_seconds = [(u, s[2]) for u, s in zip(units, summaries, strict=True)]
        rep.seconds["enumerate"] = time.perf_counter() - t0
        say(f"enumerated {sum(s[1] for s in summaries)} graphs in units ({rep.states} states, {len(units)} units)")

        t = time.perf_counter()
        pkeys = [store.key("pair", salt, (keys, s, k_text)) for s in range(k_fp)]
        psum, rep.stages["pair"] = run_stage(ex, store, pair_shard, pkeys,
                                             lambda s: ([store.part(k, s) for k in keys], k_text),
                                             save=lambda r: r, label="pair", say=progress)
        rep.graphs = sum(s[0] for s in psum)
        rep.buckets = sum(s[1] for s in psum)
        rep.candidates = sum(s[2] for s in psum)
        qkeys = [store.key("prune", salt, (pkeys, q)) for q in range(k_text)]
        qsum, rep.stages["prune"] = run_stage(ex, store, prune_shard, qkeys,
                                              lambda q: [store.part(k, q) for k in pkeys], label="prune",
                                              say=progress)
        rep.after_renaming = sum(s[0] for s in qsum)
        rep.after_common_subgraph = sum(s[1] for s in qsum)
        rep.after_common_supergraph = sum(s[2] for s in qsum)
        cands = [c for _, c in sorted((r for s in qsum for r in s[3]), key=lambda r: r[0])]
        del qsum
        cands = [m for m in (orient_multi(c) if c.multi else c for c in cands) if m is not None]
        cands = prune_instances(cands)
        rep.after_instances = len(cands)
        rep.seconds["pair+prune"] = time.perf_counter() - t
        say(f"{rep.graphs} graphs, {rep.candidates} candidates, {rep.after_common_supergraph} after pruning")

        t = time.perf_counter()
        chunks = [cands[i:i + CONFIRM_CHUNK] for i in range(0, len(cands), CONFIRM_CHUNK)]
        ckeys = [store.key("confirm", salt, [(c.lhs, c.rhs) for c in ch]) for ch in chunks]
        cres, rep.stages["confirm"] = run_stage(ex, store, confirm_chunk, ckeys, chunks.__getitem__,
                                                label="confirm", say=progress)
    finally:
        store.close()
    results = [r for ch in cres for r in ch]
    kept: list[Candidate] = []
    n_float = 0
    for c, (stage, reason, conds) in zip(cands, results, strict=True):
        if stage != "float":
            n_float += 1
        if stage is None:
            c.conditions = conds
            kept.append(c)
        else:
            rep.dropped.append((c.text(), f"{stage}: {reason}"))
    rep.after_float = n_float
    rep.after_generalisation = len(kept)
    rep.seconds["confirm"] = time.perf_counter() - t
    say(f"{len(kept)} candidates confirmed numerically")
    kept.sort(key=lambda c: (c.domain, c.n_lhs + c.n_rhs, c.text()))
    return kept, rep


#: Candidates per confirmation unit.
CONFIRM_CHUNK = 32
