"""Z3 verification of rules from operator axioms, and validation of the axioms themselves (TASO §3).

* **Model.** Tensors are an uninterpreted sort ``T``; every registry operator is an uninterpreted function
  of its parameters (Int; tuples through injective-by-use ``vecN`` functions) and tensor inputs; ``dim(T,
  Int) -> Int`` stands for shapes. Axioms (:mod:`eqsat.rules.axioms`) become ``ForAll`` formulas,
  instantiated for each value of their parameter variables.
* **Rules.** A rule is *proved* when the negation of ``lhs == rhs`` (every output) is unsatisfiable with the
  axioms and its conditions (shape equalities, and comparisons of parameters such as an even group count, as
  hypotheses), within a per-rule timeout; *refuted* when Z3 finds a model of the axioms where it fails (it is not
  entailed); *unknown* otherwise.
* **Axiom validation** (:mod:`eqsat.rules.validation`, re-exported here). Each axiom is executed symbolically
  with the registry's reference implementations on small tensors of Z3 reals (relu an uninterpreted function
  with ``relu(0) = 0``; max pooling through ``If``), for every parameter combination and several small shape
  assignments, and both sides must be equal.
* **Redundancy.** An axiom entailed by the others within a timeout is reported as redundant.
"""

from __future__ import annotations

import operator
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import z3

from eqsat import ops
from eqsat.ir import rule as rule_language
from eqsat.ir.rule import Sexp, Vec, eval_param, is_var, param_vars, parse, shape_equality, split_args, tensor_vars
from eqsat.rules import distributed
from eqsat.rules.axioms import AXIOMS, CORE_AXIOMS, DIM_AXIOMS, Axiom, DimAxiom, declared_axioms
from eqsat.rules.distributed import Executor, ResultStore, run_stage
from eqsat.rules.validation import (
    AxiomCheck,
    _tensor_vars,
    param_combos,
    shape_assignments,
    validate_axiom,
    validate_axioms,
)

__all__ = ["AXIOM_RLIMIT", "RULE_RLIMIT", "AxiomCheck", "Encoder", "Verdict", "axiom_formulas", "condition_hypotheses",
           "redundant_axioms", "shape_assignments", "shape_hypotheses", "validate_axiom", "validate_axioms",
           "verifier_salt", "verify_equation", "verify_many"]

# ---------------------------------------------------------------------------------------------------------
# encoding


#: Parameter arithmetic on Z3 integers: Z3's ``/`` and ``%`` on Ints (Euclidean) agree with Python's ``//`` and ``%``
#: on the non-negative sizes and counts rules divide.
_Z3_ARITHMETIC = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "%": operator.mod}


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
            return _Z3_ARITHMETIC[e[0]](a, b)
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


def _param_vars(text: str) -> set[str]:
    return param_vars(parse(text))


#: Ranks up to which a shape condition equates dimensions (the domains' tensors have at most four).
MAX_RANK = 4


def shape_hypotheses(enc: Encoder, conditions: Sequence[str], env: Mapping[str, Any]) -> list[z3.BoolRef]:
    """Shape conditions ``(= (shape ?a) (shape ?b))`` as equalities of the uninterpreted dimensions."""
    out = []
    for c in conditions:
        pair = shape_equality(c)
        if pair is None:
            raise ValueError(f"only shape equalities are supported as conditions here: {c}")
        a, b = enc.term(pair[0], env), enc.term(pair[1], env)
        out += [enc.dim(a, z3.IntVal(k, enc.ctx)) == enc.dim(b, z3.IntVal(k, enc.ctx)) for k in range(MAX_RANK)]
    return out


#: Comparisons a rule condition may make between parameter expressions.
_COMPARISONS = {"=": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
                "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


def condition_hypotheses(enc: Encoder, conditions: Sequence[str], env: Mapping[str, Any]) -> list[z3.BoolRef]:
    """Conditions on parameters (``(= (% ?g 2) 0)``, ``(< 1 ?g)``) as Z3 constraints. Shape equalities are
    :func:`shape_hypotheses`' and distinct tensors (``(!= ?x ?y)``, which only keeps a rule from matching one
    e-class twice) are left out: a rule proved without a hypothesis holds with it."""
    out = []
    for c in conditions:
        e = parse(c)
        if shape_equality(e) is not None or not (isinstance(e, list) and e[0] in _COMPARISONS and len(e) == 3):
            continue
        if any(is_var(x) and isinstance(env.get(x), z3.ExprRef) and env[x].sort() == enc.T for x in e[1:]):
            continue
        out.append(_COMPARISONS[e[0]](enc.param(e[1], env), enc.param(e[2], env)))
    return out


def axiom_formulas(enc: Encoder, axioms: Sequence[Axiom] = AXIOMS,
                   dim_axioms: Sequence[DimAxiom] = DIM_AXIOMS) -> list[tuple[str, z3.BoolRef]]:
    """Every axiom instance as a quantified Z3 formula, with its name."""
    out = []
    for ax in axioms:
        for combo in param_combos(ax.params, ax.quantified):
            tv = ax.tensor_vars
            consts = {v: z3.Const(f"q_{v[1:]}", enc.T) for v in tv}
            qparams = {v: z3.Int(f"qp_{v[1:]}", enc.ctx) for v in ax.quantified}
            env = {**consts, **qparams, **combo}
            enc.abstract = []
            lhs = enc.term(ax.terms[0], env)
            abstracted, enc.abstract = enc.abstract, None
            rhs = enc.term(ax.terms[1], env)
            body = lhs == rhs
            bound = list(consts.values()) + list(qparams.values()) + [n for n, _ in abstracted]
            hyps = [n == v for n, v in abstracted] + shape_hypotheses(enc, ax.conditions, env)
            if hyps:
                body = z3.Implies(z3.And(hyps), body)
            pats = [lhs] if not is_var(ax.terms[0]) else []
            if (not abstracted and not is_var(ax.terms[1]) and tensor_vars(ax.terms[1]) == set(tv)
                    and set(ax.quantified) <= param_vars(ax.terms[1])):
                pats.append(rhs)
            if bound:
                out.append((ax.name, z3.ForAll(bound, body, patterns=pats) if pats else z3.ForAll(bound, body)))
            else:
                out.append((ax.name, body))
    for da in dim_axioms:
        for combo in param_combos(da.params):
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
    for h in condition_hypotheses(enc, conditions, env):
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
    here = Path(__file__).parent
    return distributed.source_salt(here / "verifier.py", here / "validation.py", here / "axioms.py",
                                   Path(rule_language.__file__), Path(ops.__file__).parent, extra=z3.get_full_version())


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
# redundancy


def redundant_axioms(axioms: Sequence[Axiom] = AXIOMS, timeout: float = 2.0,
                     rlimit: int | None = AXIOM_RLIMIT) -> list[str]:
    """Names of axioms entailed by the others, within ``rlimit`` (Z3 resource units, reproducible) and
    ``timeout`` seconds each; each axiom is checked in a fresh Z3 context."""
    out = []
    core = {a.name for a in CORE_AXIOMS}
    for ax in axioms:
        # as in proofs: a core axiom against the other core ones, an operator's against those and its own
        mine = core if ax.name in core else core | {a.name for a in declared_axioms(_operators(ax.terms[0]))}
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
        for combo in param_combos(ax.params, ax.quantified):
            tv = ax.tensor_vars
            env = {**{v: z3.Const(f"sk_{v[1:]}", enc.T) for v in tv},
                   **{v: z3.Int(f"skp_{v[1:]}", ctx) for v in ax.quantified}, **combo}
            diff = enc.term(ax.terms[0], env) != enc.term(ax.terms[1], env)
            diffs.append(z3.And(*shape_hypotheses(enc, ax.conditions, env), diff) if ax.conditions else diff)
        s.add(z3.Or(diffs))
        if s.check() == z3.unsat:
            out.append(ax.name)
    return out
