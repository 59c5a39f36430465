"""Z3 verification of rules from operator axioms, and validation of the axioms themselves (TASO §3).

* **Model.** Tensors are an uninterpreted sort ``T``; every registry operator is an uninterpreted function
  of its parameters (Int; tuples through injective-by-use ``vecN`` functions) and tensor inputs; ``dim(T,
  Int) -> Int`` stands for shapes. Axioms (:mod:`eqsat.rules.axioms`) become ``ForAll`` formulas,
  instantiated for each value of their parameter variables.
* **Rules.** A rule is *proved* when the negation of ``lhs == rhs`` (every output) is unsatisfiable with the
  axioms, within a per-rule timeout; *refuted* when Z3 finds a model of the axioms where it fails (it is not
  entailed); *unknown* otherwise.
* **Axiom validation.** Each axiom is executed symbolically with the registry's reference implementations
  on small tensors of Z3 reals (relu an uninterpreted function with ``relu(0) = 0``; max pooling through
  ``If``), for every parameter combination and several small shape assignments, and both sides must be equal.
* **Redundancy.** An axiom entailed by the others within a timeout is reported as redundant.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import z3

from eqsat import ops
from eqsat.ops import shapes as S
from eqsat.rules.axioms import AXIOMS, CORE_AXIOMS, DIM_AXIOMS, Axiom, DimAxiom, declared_axioms
from eqsat.rules.rule import Sexp, Vec, eval_param, is_var, param_vars, parse, split_args, tensor_vars

# ---------------------------------------------------------------------------------------------------------
# encoding


class Encoder:
    """Translates patterns into Z3 terms over the uninterpreted tensor sort."""

    def __init__(self, ctx: z3.Context | None = None) -> None:
        self.ctx = ctx
        self.abstract: list[tuple[z3.ArithRef, z3.ArithRef]] | None = None
        self.T = z3.DeclareSort("T", ctx)
        self.dim = z3.Function("dim", self.T, z3.IntSort(ctx), z3.IntSort(ctx))
        self._funcs: dict[tuple[str, int, int], z3.FuncDeclRef] = {}
        self._vecs: dict[int, z3.FuncDeclRef] = {}

    def func(self, op: str, n_params: int, n_inputs: int) -> z3.FuncDeclRef:
        """The uninterpreted function of an operator."""
        key = (op, n_params, n_inputs)
        if key not in self._funcs:
            sig = [z3.IntSort(self.ctx)] * n_params + [self.T] * n_inputs + [self.T]
            self._funcs[key] = z3.Function(op, *sig)
        return self._funcs[key]

    def vec(self, n: int) -> z3.FuncDeclRef:
        """The function packing an n-tuple parameter into an Int."""
        if n not in self._vecs:
            self._vecs[n] = z3.Function(f"vec{n}", *([z3.IntSort(self.ctx)] * n), z3.IntSort(self.ctx))
        return self._vecs[n]

    def param(self, e: Sexp, env: Mapping[str, Any]) -> z3.ArithRef:
        """A parameter expression as a Z3 Int."""
        if isinstance(e, int):
            return z3.IntVal(e, self.ctx)
        if isinstance(e, float):  # its bits as an Int: equal floats, equal Ints (parameters are only compared)
            return z3.IntVal(struct.unpack("<q", struct.pack("<d", e))[0], self.ctx)
        if is_var(e):
            v = env[e]
            return self._value(v)
        if isinstance(e, Vec):
            return self.vec(len(e.items))(*[self.param(i, env) for i in e.items])
        if isinstance(e, list) and self.abstract is not None:
            # in a trigger, a computed parameter becomes a bound Int constrained to its value, so that the
            # axiom also matches terms whose parameter is only provably (not syntactically) equal
            self.abstract, saved = None, self.abstract
            value = self.param(e, env)
            self.abstract = saved
            n = z3.Int(f"n_{len(saved)}", self.ctx)
            saved.append((n, value))
            return n
        if isinstance(e, list) and e[0] == "compose":  # of concrete permutations: computed here
            return self._value(eval_param(e, env))
        if isinstance(e, list):
            if e[0] == "dim":
                return self.dim(self.term(e[1], env), self.param(e[2], env))
            a, b = self.param(e[1], env), self.param(e[2], env)
            return {"+": a + b, "-": a - b, "*": a * b}[e[0]]
        raise ValueError(f"cannot encode parameter {e!r}")

    def _value(self, v: Any) -> z3.ArithRef:
        if isinstance(v, tuple):
            return self.vec(len(v))(*[z3.IntVal(int(i), self.ctx) for i in v])
        if isinstance(v, int):
            return z3.IntVal(v, self.ctx)
        return v

    def term(self, e: Sexp, env: Mapping[str, Any]) -> z3.ExprRef:
        """A tensor pattern as a Z3 term (tensor variables looked up in ``env``)."""
        if is_var(e):
            return env[e]
        spec, params, ins = split_args(e)
        f = self.func(spec.name, len(params), len(ins))
        return f(*[self.param(p, env) for p in params], *[self.term(x, env) for x in ins])


def _tensor_vars(text: str) -> list[str]:
    return sorted(tensor_vars(parse(text)))


def _param_combos(params: Mapping[str, tuple], skip: Sequence[str] = ()) -> list[dict[str, Any]]:
    names = sorted(n for n in params if n not in skip)
    return [dict(zip(names, vals, strict=True)) for vals in itertools.product(*(params[n] for n in names))]


def _param_vars(text: str) -> set[str]:
    return param_vars(parse(text))


#: Ranks up to which a shape condition equates dimensions (the domains' tensors have at most four).
MAX_RANK = 4


def shape_hypotheses(enc: Encoder, conditions: Sequence[str], env: Mapping[str, Any]) -> list[z3.BoolRef]:
    """Shape conditions ``(= (shape ?a) (shape ?b))`` as equalities of the uninterpreted dimensions."""
    out = []
    for c in conditions:
        e = parse(c)
        if not (e[0] == "=" and isinstance(e[1], list) and e[1][0] == "shape" and isinstance(e[2], list)
                and e[2][0] == "shape"):
            raise ValueError(f"only shape equalities are supported as conditions here: {c}")
        a, b = enc.term(e[1][1], env), enc.term(e[2][1], env)
        out += [enc.dim(a, z3.IntVal(k, enc.ctx)) == enc.dim(b, z3.IntVal(k, enc.ctx)) for k in range(MAX_RANK)]
    return out


def axiom_formulas(enc: Encoder, axioms: Sequence[Axiom] = AXIOMS,
                   dim_axioms: Sequence[DimAxiom] = DIM_AXIOMS) -> list[tuple[str, z3.BoolRef]]:
    """Every axiom instance as a quantified Z3 formula, with its name."""
    out = []
    for ax in axioms:
        for combo in _param_combos(ax.params, ax.quantified):
            tv = sorted(set(_tensor_vars(ax.lhs)) | set(_tensor_vars(ax.rhs)))
            consts = {v: z3.Const(f"q_{v[1:]}", enc.T) for v in tv}
            qparams = {v: z3.Int(f"qp_{v[1:]}", enc.ctx) for v in ax.quantified}
            env = {**consts, **qparams, **combo}
            enc.abstract = []
            lhs = enc.term(parse(ax.lhs), env)
            abstracted, enc.abstract = enc.abstract, None
            rhs = enc.term(parse(ax.rhs), env)
            body = lhs == rhs
            bound = list(consts.values()) + list(qparams.values()) + [n for n, _ in abstracted]
            hyps = [n == v for n, v in abstracted] + shape_hypotheses(enc, ax.conditions, env)
            if hyps:
                body = z3.Implies(z3.And(hyps), body)
            pats = [lhs] if not is_var(parse(ax.lhs)) else []
            if (not abstracted and not is_var(parse(ax.rhs)) and set(_tensor_vars(ax.rhs)) == set(tv)
                    and set(ax.quantified) <= _param_vars(ax.rhs)):
                pats.append(rhs)
            if bound:
                out.append((ax.name, z3.ForAll(bound, body, patterns=pats) if pats else z3.ForAll(bound, body)))
            else:
                out.append((ax.name, body))
    for da in dim_axioms:
        for combo in _param_combos(da.params):
            tv = _tensor_vars(da.term)
            consts = {v: z3.Const(f"q_{v[1:]}", enc.T) for v in tv}
            env = {**consts, **combo}
            axis = parse(str(da.axis)) if isinstance(da.axis, str) else da.axis
            lhs = enc.dim(enc.term(parse(da.term), env), enc.param(axis, env))
            out.append((da.name, z3.ForAll(list(consts.values()), lhs == enc.param(parse(da.expr), env))))
    return out


# ---------------------------------------------------------------------------------------------------------
# rules


@dataclass
class Verdict:
    """The outcome of verifying one rule."""

    status: str  # proved | unknown | refuted
    reason: str
    seconds: float


#: Default Z3 resource budget (``rlimit``) per rule. Unlike wall-clock time it makes the outcome, and so the
#: committed corpus, the same on every machine: each check runs in a fresh Z3 context, so it does not depend
#: on what a worker process verified before either. Proofs of corpus rules take about 30 000 units; 5 000 000
#: is about 4 s of Z3 time on a 2024 x86 core.
RULE_RLIMIT = 5_000_000
#: Default resource budget per axiom in the redundancy check (about 2 s).
AXIOM_RLIMIT = 2_500_000


def _unknown_reason(s: z3.Solver, rlimit: int | None, timeout: float, elapsed: float) -> str:
    """A reproducible reason for an ``unknown`` answer: which limit stopped Z3, never how long it took."""
    used = _rlimit_used(s)
    if (rlimit and used is not None and used >= rlimit) or elapsed >= timeout:
        # one text for either limit: on a loaded machine the wall-clock safety net can end a check that the
        # resource budget would have ended on an idle one, and the corpus must not depend on the load
        return f"z3: undecided within its budget (rlimit {rlimit}, safety net {timeout:g} s)"
    return f"z3: {s.reason_unknown()}"


def _rlimit_used(s: z3.Solver) -> int | None:
    st = s.statistics()
    return int(st.get_key_value("rlimit count")) if "rlimit count" in st.keys() else None


def _operators(e: Sexp) -> set[str]:
    """Registry operators a pattern applies."""
    if isinstance(e, list) and e and isinstance(e[0], str) and e[0] in ops.REGISTRY:
        return {e[0]}.union(*(_operators(x) for x in e[1:]))
    if isinstance(e, list):
        return set().union(*(_operators(x) for x in e))
    return set()


def verify_equation(lhs: Sequence[str], rhs: Sequence[str], timeout: float = 10.0,
                    rlimit: int | None = RULE_RLIMIT, conditions: Sequence[str] = ()) -> Verdict:
    """Check that the axioms entail ``lhs[i] == rhs[i]`` for every output ``i`` (under the rule's shape
    ``conditions``, which become hypotheses).

    ``rlimit`` bounds Z3's deterministic resource counter (reproducible outcomes); ``timeout`` (seconds) is
    a wall-clock safety net on top of it.
    """
    t0 = time.perf_counter()
    ctx = z3.Context()
    enc = Encoder(ctx)
    variables = sorted(set().union(*(_tensor_vars(s) for s in (*lhs, *rhs))))
    env: dict[str, Any] = {v: z3.Const(v[1:], enc.T) for v in variables}
    # a parameter variable (a reshape's target shape, say) stands for any value: the rule must hold for all
    env.update({v: z3.Int(f"p_{v[1:]}", ctx) for v in sorted(set().union(*(_param_vars(s) for s in lhs)))})
    s = z3.Solver(ctx=ctx)
    s.set("timeout", int(timeout * 1000))
    if rlimit:
        s.set("rlimit", int(rlimit))
    s.set("max_memory", 2048)
    used = set().union(*(_operators(parse(x)) for x in (*lhs, *rhs)))
    for _, f in axiom_formulas(enc, CORE_AXIOMS + declared_axioms(used)):
        s.add(f)
    for h in shape_hypotheses(enc, [c for c in conditions if "(shape" in c], env):
        s.add(h)
    diffs = [enc.term(parse(a), env) != enc.term(parse(b), env) for a, b in zip(lhs, rhs, strict=True)]
    s.add(z3.Or(diffs))
    try:
        r = s.check()
    except z3.Z3Exception as e:  # pragma: no cover - memory
        return Verdict("unknown", f"z3: {e}", time.perf_counter() - t0)
    dt = time.perf_counter() - t0
    if r == z3.unsat:
        return Verdict("proved", "entailed by the axioms", dt)
    if r == z3.sat:
        return Verdict("refuted", "not entailed: z3 found a model of the axioms where it fails", dt)
    return Verdict("unknown", _unknown_reason(s, rlimit, timeout, dt), dt)


def _verify_unit(args: tuple[tuple[str, ...], tuple[str, ...], float, int | None, tuple[str, ...]]) -> Verdict:
    return verify_equation(*args)


def _verify_chunk(jobs: Sequence[tuple[tuple[str, ...], tuple[str, ...], float, int | None, tuple[str, ...]]]
                  ) -> list[Verdict]:
    return [verify_equation(*j) for j in jobs]


def verifier_salt() -> str:
    """The version of the code that verdicts depend on (verifier, axioms, patterns, operator registry)."""
    from pathlib import Path

    from eqsat.rules import distributed

    here = Path(__file__).parent
    return distributed.source_salt(here / "verifier.py", here / "axioms.py", here / "rule.py",
                                   Path(ops.__file__).parent, extra=z3.get_full_version())


#: Equations per verification unit.
VERIFY_CHUNK = 4


def verify_many(equations: Sequence[tuple[Sequence[str], ...]], timeout: float = 10.0, workers: int = 2,
                progress: Callable[[str], None] | None = None, rlimit: int | None = RULE_RLIMIT,
                executor: str = "auto", address: str | None = None, results_dir: Any = None,
                fresh: bool = False) -> list[Verdict]:
    """Verify many equations ``(lhs, rhs)`` or ``(lhs, rhs, conditions)`` (independent units, each in its own
    Z3 context) on an executor of :mod:`eqsat.rules.distributed` (``executor``: auto, ray, pool or serial;
    ``address``: a Ray cluster). Verdicts are stored in ``results_dir`` (a temporary folder when None) by a
    hash of the equations, budget and code, so a rerun redoes only what did not finish (``fresh``: forget
    them first). Verdicts come back in the order of ``equations``."""
    from eqsat.rules.distributed import Executor, ResultStore, run_stage

    jobs = [(tuple(eq[0]), tuple(eq[1]), timeout, rlimit, tuple(eq[2]) if len(eq) > 2 else ()) for eq in equations]
    chunks = [jobs[i:i + VERIFY_CHUNK] for i in range(0, len(jobs), VERIFY_CHUNK)]
    # a fresh pool of processes every ~50 equations per worker, as Z3 keeps memory it does not give back
    ex = Executor(workers=workers, backend=executor, address=address, recycle_after=50 // VERIFY_CHUNK)
    store = ResultStore(results_dir)
    if fresh:
        store.clear()
    salt = verifier_salt()
    try:
        keys = [store.key("verify", salt, ch) for ch in chunks]
        out, _ = run_stage(ex, store, _verify_chunk, keys, chunks.__getitem__, label="verify", say=progress)
    finally:
        store.close()
    return [v for ch in out for v in ch]


# ---------------------------------------------------------------------------------------------------------
# axiom validation by symbolic execution


class _Symbolic:
    """Evaluates patterns on object arrays of Z3 reals with the registry's reference implementations."""

    def __init__(self) -> None:
        self._functions: dict[tuple[str, int, int], z3.FuncDeclRef] = {}

    def _function(self, op: str, arity: int, position: int) -> z3.FuncDeclRef:
        key = (op, arity, position)
        if key not in self._functions:
            name = op if arity == 1 else f"{op}_{arity}_{position}"
            self._functions[key] = z3.Function(name, *([z3.RealSort()] * (arity + 1)))
        return self._functions[key]

    @staticmethod
    def _instance(spec: ops.OpSpec, p: Mapping[str, Any]) -> str:
        """The function's name for one parameter setting (clip(0, 6) and clip(0, 1) are different functions);
        the axis an along-axis operator reads is not part of it (the rows are)."""
        u = spec.uninterpreted
        rest = [f"{k}={v}" for k, v in sorted(p.items()) if not (u and u.kind == "along_axis" and k == u.axis_param)]
        return spec.name + (f"[{','.join(rest)}]" if rest else "")

    def uninterpreted(self, spec: ops.OpSpec, p: Mapping[str, Any], x: np.ndarray) -> np.ndarray:
        """An operator the registry declares uninterpreted (:class:`eqsat.ops.Uninterpreted`), applied to
        an array of reals: per element, or per row along its axis (one function per row length and position)."""
        u = spec.uninterpreted
        assert u is not None, spec.name
        out = np.empty(x.shape, dtype=object)
        if u.kind == "elementwise":
            f = self._function(self._instance(spec, p), 1, 0)
            facts = {a: b for a, b in u.facts}
            for idx, v in np.ndenumerate(x):
                c = z3.simplify(self.real(v))
                known = z3.is_rational_value(c) and c.as_fraction().denominator == 1 and int(c.as_long()) in facts
                out[idx] = self.real(facts[int(c.as_long())]) if known else f(self.real(v))
            return out
        assert u.kind == "along_axis", u.kind
        ax = p[u.axis_param]
        rows, outs = np.moveaxis(x, ax, -1), np.moveaxis(out, ax, -1)  # views: writing outs fills out
        n = rows.shape[-1]
        for idx in np.ndindex(*rows.shape[:-1]):
            args = [self.real(v) for v in rows[idx]]
            for i in range(n):
                outs[idx + (i,)] = self._function(self._instance(spec, p), n, i)(*args)
        return out

    def real(self, v: Any) -> Any:
        if isinstance(v, z3.ExprRef):
            return v
        if isinstance(v, float | np.floating):
            f = Fraction(float(v)).limit_denominator(10_000)
            return z3.RealVal(f.numerator) / f.denominator
        return z3.RealVal(int(v))

    def clean(self, a: np.ndarray) -> np.ndarray:
        out = np.empty(np.shape(a), dtype=object)
        out.flat[:] = [self.real(v) for v in np.asarray(a, dtype=object).flat] if out.size else []
        return out

    def eval(self, e: Sexp, env: Mapping[str, Any]) -> np.ndarray:
        if is_var(e):
            return env[e]
        spec, params, ins = split_args(e)
        args = [self.eval(x, env) for x in ins]
        p = spec.normalize({n: eval_param(v, env) for (n, _), v in zip(spec.params, params, strict=True)})
        spec.shape(p, [np.shape(a) for a in args])
        chain = spec.runs_as(p) if spec.runs_as else None
        if chain:  # a fused form (conv2d with relu): its operators in turn, as the registry declares
            y = self._apply(ops.get(chain[0][0]), ops.get(chain[0][0]).normalize(chain[0][1]), args)
            for op, q in chain[1:]:
                y = self._apply(ops.get(op), ops.get(op).normalize(q), [y])
            return y
        return self._apply(spec, p, args)

    def _apply(self, spec: ops.OpSpec, p: Mapping[str, Any], args: list[np.ndarray]) -> np.ndarray:
        name = spec.name
        if spec.uninterpreted is not None:
            return self.uninterpreted(spec, p, args[0])
        if name == "avgpool":
            cols = ops._patches(args[0], *p["kernel"], p["strides"], p["pads"], (1, 1))
            total = cols.sum(axis=(2, 3))
            k = p["kernel"][0] * p["kernel"][1]
            assert p["count_include_pad"], "symbolic avgpool only counts padding"
            return self.clean(total) * (z3.RealVal(1) / k)
        if name == "maxpool":
            return self._maxpool(p, args[0])
        if name == "const_pool":
            out = np.empty(spec.shape(p, []), dtype=object)
            out.flat[:] = [z3.RealVal(1) / (p["kernel"][0] * p["kernel"][1])] * out.size
            return out
        return self.clean(spec.numpy_fn(p, *args))

    def _maxpool(self, p: Mapping[str, Any], x: np.ndarray) -> np.ndarray:
        n, c, h, w = x.shape
        kh, kw = p["kernel"]
        out = np.empty((n, c, h, w), dtype=object)
        for i, j, a, b in itertools.product(range(n), range(c), range(h), range(w)):
            vals = [x[i, j, a + da, b + db] for da in range(-(kh // 2), kh // 2 + 1)
                    for db in range(-(kw // 2), kw // 2 + 1) if 0 <= a + da < h and 0 <= b + db < w]
            m = vals[0]
            for v in vals[1:]:
                m = z3.If(v > m, v, m)
            out[i, j, a, b] = m
        return out


def _shape_of(e: Sexp, shapes: Mapping[str, tuple[int, ...]], params: Mapping[str, Any]) -> tuple[int, ...]:
    if is_var(e):
        return tuple(shapes[e])
    spec, pars, ins = split_args(e)
    arg_shapes = [_shape_of(x, shapes, params) for x in ins]
    if spec.name in ("ewadd", "ewmul") and arg_shapes[0] != arg_shapes[1]:
        raise ops.OpError("axioms are stated for element-wise operands of equal shapes")
    env = {**{k: np.empty(v) for k, v in shapes.items()}, **params}
    p = spec.normalize({n: eval_param(v, env) for (n, _), v in zip(spec.params, pars, strict=True)})
    return spec.shape(p, arg_shapes)


def _ranks(text: str, ranks: dict[str, int], params: Mapping[str, Any]) -> None:
    """Ranks of tensor variables implied by the operators that use them (a transpose's permutation fixes
    the rank of what it reaches through rank-preserving operators)."""
    keep_rank = ("relu", "smul", "ewadd", "ewmul", "matmul", "transpose",
                 *(n for n, sp in ops.REGISTRY.items() if sp.uninterpreted and sp.inputs and
                   sp.shape_rules[:1] == S.same_as(sp.inputs[0]) and sp.axioms))

    def walk(e: Sexp, rank: int | None) -> None:
        if not isinstance(e, list):
            return
        spec, pars, ins = split_args(e)
        if spec.name == "transpose":
            perm = pars[0]
            perm = params.get(perm) if is_var(perm) else perm.items if isinstance(perm, Vec) else None
            rank = len(perm) if isinstance(perm, tuple) else rank
        for pos, x in enumerate(ins):
            if is_var(x) and x not in ranks:
                if spec.name == "conv2d":
                    ranks[x] = (4, 4, 1)[pos]
                elif spec.name in ("avgpool", "maxpool"):
                    ranks[x] = 4
                elif spec.name == "smul" and pos == 1:
                    ranks[x] = 0
                elif spec.name == "enlarge":
                    ranks[x] = 4
                elif rank is not None and spec.name in keep_rank:
                    ranks[x] = rank
            walk(x, rank if spec.name in keep_rank and not (spec.name == "smul" and pos == 1) else None)

    walk(parse(text), None)


def _axis_rank(text: str) -> int:
    """The least rank the literal axes in a pattern need (a concat or softmax along axis 2 needs rank 3)."""
    need = 0

    def walk(e: Sexp) -> None:
        nonlocal need
        if isinstance(e, list) and e and isinstance(e[0], str) and e[0] in ops.REGISTRY:
            spec, pars, ins = split_args(e)
            for (name, _), v in zip(spec.params, pars, strict=True):
                if name == "axis" and isinstance(v, int):
                    need = max(need, v + 1)
            for x in ins:
                walk(x)

    walk(parse(text))
    return need


def shape_assignments(lhs: str, rhs: str, params: Mapping[str, Any], count: int = 3, seed: int = 0,
                      tries: int = 4000, conditions: Sequence[str] = ()) -> list[dict[str, tuple[int, ...]]]:
    """Small random shape assignments where both sides are well-shaped with equal shapes (and the shape
    ``conditions`` hold)."""
    equal = [(parse(c)[1][1], parse(c)[2][1]) for c in conditions]
    rng = np.random.default_rng(seed)
    ranks: dict[str, int] = {}
    _ranks(lhs, ranks, params)
    _ranks(rhs, ranks, params)
    variables = sorted(set(_tensor_vars(lhs)) | set(_tensor_vars(rhs)))
    default_rank = max(4 if any(r == 4 for r in ranks.values()) else 2, _axis_rank(lhs), _axis_rank(rhs))
    out: list[dict[str, tuple[int, ...]]] = []
    seen: set[tuple] = set()
    for _ in range(tries):
        shapes: dict[str, Any] = {}
        for v in variables:
            r = ranks.get(v, default_rank)
            dims = [int(rng.integers(1, 3)) for _ in range(r)]
            if r == 4 and int(rng.integers(0, 2)):
                dims[2:] = [int(rng.choice([1, 3]))] * 2
            shapes[v] = tuple(dims)
        try:
            a, b = _shape_of(parse(lhs), shapes, params), _shape_of(parse(rhs), shapes, params)
        except (ops.OpError, IndexError, KeyError, ValueError, TypeError):
            continue
        key = tuple(sorted(shapes.items()))
        if a != b or key in seen or any(shapes[x] != shapes[y] for x, y in equal):
            continue
        seen.add(key)
        out.append(dict(shapes))
        if len(out) >= count:
            break
    return out


@dataclass
class AxiomCheck:
    """The outcome of validating one axiom."""

    name: str
    status: str  # valid | invalid | unknown | untested
    reason: str
    cases: int


def _equal(a: np.ndarray, b: np.ndarray, timeout: float) -> str:
    pending = []
    for x, y in zip(a.flat, b.flat, strict=True):
        d = z3.simplify(z3.ToReal(x) - z3.ToReal(y) if not isinstance(x, z3.ArithRef) else x - y, som=True)
        if not (z3.is_rational_value(d) and d.as_fraction() == 0):
            pending.append(x != y)
    if not pending:
        return "valid"
    s = z3.Solver()
    s.set("timeout", int(timeout * 1000))
    s.add(z3.Or(pending))
    r = s.check()
    return "valid" if r == z3.unsat else ("invalid" if r == z3.sat else "unknown")


def validate_axiom(ax: Axiom, cases: int = 3, timeout: float = 20.0, seed: int = 0) -> AxiomCheck:
    """Symbolically execute both sides on small tensors for every parameter combination."""
    sym = _Symbolic()
    n = 0
    for combo in _param_combos(ax.params):
        for shapes in shape_assignments(ax.lhs, ax.rhs, combo, cases, seed, conditions=ax.conditions):
            env: dict[str, Any] = dict(combo)
            for v, shp in shapes.items():
                arr = np.empty(shp, dtype=object)
                arr.flat[:] = [z3.Real(f"{v[1:]}_{k}") for k in range(arr.size)] if arr.size else []
                if not shp:
                    arr[()] = z3.Real(f"{v[1:]}_0")
                env[v] = arr
            a, b = sym.eval(parse(ax.lhs), env), sym.eval(parse(ax.rhs), env)
            n += 1
            if a.shape != b.shape:
                return AxiomCheck(ax.name, "invalid", f"shapes differ for {shapes} {combo}", n)
            st = _equal(a, b, timeout)
            if st != "valid":
                return AxiomCheck(ax.name, st, f"for shapes {shapes}, parameters {combo}", n)
    if n == 0:
        return AxiomCheck(ax.name, "untested", "no well-shaped small instance found", 0)
    return AxiomCheck(ax.name, "valid", f"{n} symbolic cases", n)


def validate_axioms(axioms: Sequence[Axiom] = AXIOMS, workers: int = 2) -> list[AxiomCheck]:
    """Validate every axiom (one unit per axiom)."""
    if workers <= 1:
        return [validate_axiom(a) for a in axioms]
    with mp.get_context("fork").Pool(workers) as pool:
        return list(pool.map(validate_axiom, axioms))


def redundant_axioms(axioms: Sequence[Axiom] = AXIOMS, timeout: float = 2.0,
                     rlimit: int | None = AXIOM_RLIMIT) -> list[str]:
    """Names of axioms entailed by the others, within ``rlimit`` (Z3 resource units, reproducible) and
    ``timeout`` seconds each; each axiom is checked in a fresh Z3 context."""
    out = []
    core = {a.name for a in CORE_AXIOMS}
    for ax in axioms:
        # as in proofs: a core axiom against the other core ones, an operator's against those and its own
        mine = core if ax.name in core else core | {a.name for a in declared_axioms(_operators(parse(ax.lhs)))}
        others = [a for a in axioms if a.name != ax.name and a.name in mine]
        ctx = z3.Context()
        enc = Encoder(ctx)
        s = z3.Solver(ctx=ctx)
        s.set("timeout", int(timeout * 1000))
        if rlimit:
            s.set("rlimit", int(rlimit))
        for _, f in axiom_formulas(enc, others):
            s.add(f)
        diffs = []
        for combo in _param_combos(ax.params, ax.quantified):
            tv = sorted(set(_tensor_vars(ax.lhs)) | set(_tensor_vars(ax.rhs)))
            env = {**{v: z3.Const(f"sk_{v[1:]}", enc.T) for v in tv},
                   **{v: z3.Int(f"skp_{v[1:]}", ctx) for v in ax.quantified}, **combo}
            diff = enc.term(parse(ax.lhs), env) != enc.term(parse(ax.rhs), env)
            diffs.append(z3.And(*shape_hypotheses(enc, ax.conditions, env), diff) if ax.conditions else diff)
        s.add(z3.Or(diffs))
        if s.check() == z3.unsat:
            out.append(ax.name)
    return out
