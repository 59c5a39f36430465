"""Shape functions and shape rules on symbolic sizes (eqsat.ops.dims.Sym).

The property: where an operator's shape function (or its rules as data) gives a shape for inputs holding
symbols, that shape at any positive values of the symbols is exactly the concrete shape at those values; where
the answer would depend on the values, it raises OpError (UndecidedDim) instead.
"""

from __future__ import annotations

import importlib.util
import random
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from eqsat import ops
from eqsat.ops import shapes as S
from eqsat.ops.dims import Dim, Sym, UndecidedDim, concrete

Case = tuple[str, dict[str, Any], list[tuple[Any, ...]]]


def _load_cases() -> list[Case]:
    # tests/ is not a package: read the operator cases from test_ops.py by its path (no copy to drift)
    spec = importlib.util.spec_from_file_location("_eqsat_test_ops_cases", Path(__file__).with_name("test_ops.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.CASES)


#: operators test_ops has no cases for (weight-only, generator constants, opaque): sized by parameters
EXTRA_CASES: list[Case] = [
    ("enlarge", {"kernel": (3, 3)}, [(4, 3, 1, 1)]),
    ("const_pool", {"kernel": (3, 3), "channels": 2}, []),
    ("const_iconv", {"kernel": (3, 3), "channels": 4}, []),
    ("const_imatmul", {"n": 5}, []),
    ("const_iewmul", {"shape": (2, 3)}, []),
    ("const_zero", {"shape": (4,)}, []),
    ("opaque", {"key": "n0", "op_type": "Hardmax", "attrs": {}, "shape": (2, 5), "dtype": "float32"}, [(2, 5)]),
    ("reshape", {"shape": (2, 12)}, [(2, 3, 4)]),  # keeps the leading (batch) dimension
    ("maxpool", {"kernel": (6, 6), "strides": (1, 1)}, [(2, 3, 6, 6)]),  # a global pool: the window is the input
]
CASES: list[Case] = _load_cases() + EXTRA_CASES

BATCH, SEQ = Sym.var("batch"), Sym.var("seq")
#: values the symbols take (1, where broadcasting and most guards change, among them)
SYMBOL_VALUES = (1, 2, 3, 4, 7, 13)
#: parameters that carry a size, rewritten with the input dimension they match
SIZE_PARAMS = {"reshape": ("shape",), "expand": ("shape",), "opaque": ("shape",), "const_iewmul": ("shape",),
               "const_zero": ("shape",), "ort_mha": ("split",), "ort_mha_bias": ("split",)}


def test_the_cases_cover_every_operator() -> None:
    assert {c[0] for c in CASES} == set(ops.REGISTRY)


# ---------------------------------------------------------------------------------------------------------
# symbolic versions of a case


def _replace(x: Any, old: int, new: Sym) -> Any:
    """``x`` (an int or a tuple of ints) with every entry equal to ``old`` replaced by ``new``."""
    if isinstance(x, tuple):
        return tuple(_replace(v, old, new) for v in x)
    return new if isinstance(x, int) and not isinstance(x, bool) and x == old else x


def _int_params(op: str, params: dict[str, Any]) -> set[str]:
    """The parameters of kind int or ints (the kinds normalize keeps symbolic), given or defaulted."""
    spec = ops.get(op)
    return {n for n, kind in spec.params if kind in ("int", "ints") and (n in params or n in spec.defaults)}


def _with_batch(case: Case) -> Case | None:
    """The leading dimension of the first input, and of every input and size parameter led by the same size,
    replaced by ``batch`` (None where nothing is replaced)."""
    op, params, shapes = case
    if not shapes or not shapes[0]:
        return None
    lead = shapes[0][0]
    new_shapes = [(BATCH, *s[1:]) if s and s[0] == lead else s for s in shapes]
    new_params = dict(params)
    for name in SIZE_PARAMS.get(op, ()):
        v = params.get(name)
        if v and v[0] == lead:
            new_params[name] = (BATCH, *v[1:])
    return op, new_params, new_shapes


def _with_value(case: Case, value: int, with_params: bool) -> Case | None:
    """Every input dimension equal to ``value`` (and, ``with_params``, every int parameter entry equal to it, axes
    and strides too) replaced by ``seq`` (None where nothing is)."""
    op, params, shapes = case
    new_shapes = [_replace(s, value, SEQ) for s in shapes]
    spec = ops.get(op)
    full = {**spec.defaults, **params}
    new_params = dict(params)
    if with_params:
        for name in _int_params(op, params):
            if (v := _replace(full[name], value, SEQ)) != full[name]:
                new_params[name] = v
    if new_shapes == shapes and new_params == params:
        return None
    return op, new_params, new_shapes


def _with_batch_and_value(case: Case, value: int) -> Case | None:
    """``batch`` as :func:`_with_batch`, then what is left equal to ``value`` as ``seq``: two symbols."""
    batched = _with_batch(case)
    if batched is None:
        return None
    return _with_value(batched, value, with_params=False)


def _variants(case: Case) -> Iterator[tuple[str, Case]]:
    op, params, shapes = case
    if (b := _with_batch(case)) is not None:
        yield "batch", b
    spec = ops.get(op)
    full = {**spec.defaults, **params}
    values = {d for s in shapes for d in s}
    values |= {d for n in _int_params(op, params) for d in (full[n] if isinstance(full[n], tuple) else (full[n],))}
    for v in sorted(values):
        for with_params in (False, True):
            if (c := _with_value(case, v, with_params)) is not None:
                yield f"value{v}{'+params' if with_params else ''}", c
        if (c := _with_batch_and_value(case, v)) is not None:
            yield f"batch+value{v}", c


# ---------------------------------------------------------------------------------------------------------
# the property


def _symbols(case: Case) -> list[str]:
    _, params, shapes = case
    found: set[str] = set()

    def walk(x: Any) -> None:
        if isinstance(x, Sym):
            found.update(x.symbols)
        elif isinstance(x, (tuple, list)):
            for v in x:
                walk(v)

    walk(shapes)
    walk(list(params.values()))
    return sorted(found)


def _assignments(symbols: Sequence[str], seed: int) -> list[dict[str, int]]:
    """Values for the symbols: each of ``SYMBOL_VALUES`` for all of them at once (where one symbol meets
    another's size), then mixed ones, a few drawn from a wider range."""
    rng = random.Random(seed)
    rows = [(v,) * len(symbols) for v in SYMBOL_VALUES]
    rows += [tuple(rng.choice(SYMBOL_VALUES) for _ in symbols) for _ in range(6)]
    rows += [tuple(rng.randint(1, 40) for _ in symbols) for _ in range(2)]
    return [dict(zip(symbols, row, strict=True)) for row in rows]


def _at(x: Any, values: Mapping[str, int]) -> Any:
    """``x`` (a size, or tuples, lists and dicts of them) with the symbols given their values."""
    if isinstance(x, dict):
        return {k: _at(v, values) for k, v in x.items()}
    if isinstance(x, Sym):
        return x.subs(values)
    if isinstance(x, tuple):
        return tuple(_at(v, values) for v in x)
    if isinstance(x, list):
        return [_at(v, values) for v in x]
    return x


def _rule_shape(op: str, params: dict[str, Any], shapes: Sequence[Sequence[Dim]]) -> tuple[Dim, ...] | None:
    """The shape the rules as data give (a left-nested chain of binary applications for concat, as the e-graph
    sees it)."""
    spec = ops.get(op)
    p = spec.normalize(params)
    if spec.variadic:
        acc: tuple[Dim, ...] | None = tuple(shapes[0])
        for nxt in shapes[1:]:
            if acc is None:
                return None
            acc = S.evaluate(spec.shape_rules, {"a": acc, "b": nxt}, p)
        return acc
    return S.evaluate(spec.shape_rules, dict(zip(spec.inputs, shapes, strict=True)), p)


def _symbolic(fn: Any, *args: Any) -> tuple[Dim, ...] | None:
    """``fn(*args)``, or None where it refuses (OpError: UndecidedDim among them); anything else is a bug."""
    try:
        return fn(*args)
    except ops.OpError:
        return None


def _check(case: Case, seed: int, label: str = "") -> tuple[bool, bool]:
    """Hold the symbolic shape (function and rules) to the concrete one at many values; (whether the shape
    function gave a shape, whether the rules did)."""
    op, params, shapes = case
    spec = ops.get(op)
    symbols = _symbols(case)
    out = _symbolic(lambda: spec.shape(spec.normalize(params), shapes))
    has_rules = bool(spec.shape_rules)
    rule_out = _symbolic(_rule_shape, op, params, shapes) if has_rules else None
    for values in _assignments(symbols, seed):
        c_params, c_shapes = _at(params, values), _at(shapes, values)
        where = f"{label} {op} {params} {shapes} at {values}"
        if out is not None:
            try:
                want = spec.shape(spec.normalize(c_params), c_shapes)
            except ops.OpError as e:
                pytest.fail(f"{where}: symbolic shape {out}, but the concrete shape function refuses: {e}")
            assert concrete(out, values) == want, where
        if rule_out is not None:
            want_rule = _rule_shape(op, c_params, c_shapes)
            assert want_rule is not None, f"{where}: symbolic rules give {rule_out}, the concrete rules nothing"
            assert concrete(rule_out, values) == want_rule, where
    return out is not None, rule_out is not None


def _all_variants() -> list[tuple[str, Case]]:
    return [(f"{c[0]}-{i}-{name}", v) for i, c in enumerate(CASES) for name, v in _variants(c)]


VARIANTS = _all_variants()


def test_symbolic_shapes_are_the_concrete_shapes_at_every_value() -> None:
    # one test over every variant (hundreds, each a few microseconds): parametrizing would only add overhead
    decided_fn = decided_rules = 0
    for k, (name, case) in enumerate(VARIANTS):
        fn, rules = _check(case, seed=k, label=name)
        decided_fn += fn
        decided_rules += rules
    # refusing everything would pass the loop: a good share must be decided (as of writing 524 and 567 of 711)
    assert len(VARIANTS) > 500
    assert decided_fn > len(VARIANTS) // 3, (decided_fn, len(VARIANTS))
    assert decided_rules > len(VARIANTS) // 3, (decided_rules, len(VARIANTS))


#: batch-led cases that must refuse: a reshape to a target not led by the batch, a transposed product whose
#: inner dimension becomes batch against a number, an expansion of a size-1 dimension (now batch) to a number, a
#: kernel regrouped by merge_gconv whose output channels (its leading dimension) are a symbol: whether they divide
#: into the groups depends on its value
BATCH_REFUSED = {("reshape", (2, 3, 4), (6, 4)), ("matmul_t", (4, 3), (5, 4)), ("expand", (1, 1, 6), (5, 1, 6)),
                 ("merge_gconv", (8, 3, 3, 3), None), ("merge_gconv", (6, 2, 1, 3), None)}


def _key(case: Case) -> tuple[Any, ...]:
    op, params, shapes = case
    return (op, shapes[0], params.get("shape", shapes[1] if len(shapes) > 1 else None))


def test_a_symbolic_batch_passes_through_every_operator() -> None:
    # every case with inputs, its leading dimension a symbol: the shape function and the rules both decide it
    refused_fn, refused_rules = set(), set()
    for k, case in enumerate(CASES):
        batched = _with_batch(case)
        if batched is None:
            continue
        fn, rules = _check(batched, seed=k)
        if not fn:
            refused_fn.add(_key(case))
        if not rules and ops.get(case[0]).shape_rules:
            refused_rules.add(_key(case))
    assert refused_fn == BATCH_REFUSED
    # the reshape rule gives its target without checking the element count (on ints too)
    assert refused_rules == BATCH_REFUSED - {("reshape", (2, 3, 4), (6, 4))}


# ---------------------------------------------------------------------------------------------------------
# targeted cases


def _shape(op: str, params: dict[str, Any], shapes: list[tuple[Any, ...]]) -> tuple[Dim, ...]:
    spec = ops.get(op)
    return spec.shape(spec.normalize(params), shapes)


def _both(op: str, params: dict[str, Any], shapes: list[tuple[Any, ...]]) -> tuple[Dim, ...]:
    """The shape function's answer, checked equal to the rules' (and to the concrete shapes at some values)."""
    out = _shape(op, params, shapes)
    assert _rule_shape(op, params, shapes) == out
    assert _check((op, params, shapes), seed=0) == (True, True)
    return out


def _refused(op: str, params: dict[str, Any], shapes: list[tuple[Any, ...]], rules: bool = True) -> None:
    """The shape function refuses, and so do the rules (by raising, or by no rule applying) unless ``rules`` is
    False: the rules leave out some guards of the shape function (a reshape's element count, a convolution's
    non-empty output), as they do on ints (the e-graph reads only validated graphs)."""
    with pytest.raises(ops.OpError):
        _shape(op, params, shapes)
    if rules:
        assert _symbolic(_rule_shape, op, params, shapes) is None


def test_broadcasting_a_symbol_against_one_and_against_another_symbol() -> None:
    assert _both("ewadd", {}, [(BATCH, 64), (1, 64)]) == (BATCH, 64)
    assert _both("ewmul", {}, [(1, 64), (BATCH, 64)]) == (BATCH, 64)  # the symbol on the right: max(1, batch)
    assert _both("ewadd", {}, [(BATCH, SEQ), (BATCH, SEQ)]) == (BATCH, SEQ)
    _refused("ewadd", {}, [(BATCH, 64), (SEQ, 64)])
    _refused("ewadd", {}, [(BATCH, 64), (3, 64)])  # broadcasts at batch = 1 or 3 only
    _refused("ewadd", {}, [(BATCH, 64), (BATCH * SEQ, 64)])  # equal at seq = 1 only


def test_reshape_to_a_symbolic_target_keeps_the_element_count() -> None:
    assert _both("reshape", {"shape": (BATCH * SEQ, 768)}, [(BATCH, SEQ, 768)]) == (BATCH * SEQ, 768)
    assert _both("reshape", {"shape": (BATCH, SEQ, 12, 64)}, [(BATCH, SEQ, 768)]) == (BATCH, SEQ, 12, 64)
    _refused("reshape", {"shape": (BATCH, 2 * SEQ * 768)}, [(BATCH, SEQ, 768)], rules=False)
    _refused("reshape", {"shape": (8, 768)}, [(BATCH, 768)], rules=False)  # right at batch = 8 only


def test_concat_along_a_symbolic_axis_adds_the_sizes() -> None:
    past = Sym.var("past")
    out = _both("concat", {"axis": 1}, [(BATCH, past, 64), (BATCH, SEQ, 64)])
    assert out == (BATCH, SEQ + past, 64)
    assert _both("concat", {"axis": 1}, [(BATCH, past, 64), (BATCH, SEQ, 64), (BATCH, 1, 64)])[1] == SEQ + past + 1
    _refused("concat", {"axis": 1}, [(BATCH, past, 64), (SEQ, SEQ, 64)])


def test_matmul_of_symbolic_rows_by_a_weight() -> None:
    assert _both("matmul", {}, [(BATCH, SEQ, 768), (1, 768, 3072)]) == (BATCH, SEQ, 3072)
    assert _both("matmul", {}, [(BATCH * SEQ, 768), (768, 3072)]) == (BATCH * SEQ, 3072)
    # attention scores: (batch, heads, seq, dk) @ (batch, heads, dk, seq)
    assert _both("matmul", {}, [(BATCH, 12, SEQ, 64), (BATCH, 12, 64, SEQ)]) == (BATCH, 12, SEQ, SEQ)
    _refused("matmul", {}, [(BATCH, SEQ, 768), (1, SEQ, 3072)])  # inner sizes seq and 768


def test_a_symbolic_transpose_flag_is_set_only_where_it_is_for_every_value() -> None:
    a, b = (768, BATCH), (768, 64)
    assert _shape("matmul_t", {"trans_a": SEQ, "trans_b": 0}, [a, b]) == (BATCH, 64)  # seq >= 1: always set
    with pytest.raises(ops.OpError):  # 0 at seq = 1: a product of a (768, batch) matrix there, not its transpose
        _shape("matmul_t", {"trans_a": SEQ - 1, "trans_b": 0}, [a, b])


def test_conv_with_a_symbolic_batch_and_a_symbolic_image() -> None:
    w, b = (16, 3, 3, 3), (16,)
    strided = {"strides": (2, 2), "pads": (1, 1, 1, 1)}
    assert _both("conv2d", strided, [(BATCH, 3, 32, 32), w, b]) == (BATCH, 16, 16, 16)
    h = Sym.var("h")
    assert _both("conv2d", {"pads": (1, 1, 1, 1)}, [(BATCH, 3, h, h), w, b]) == (BATCH, 16, h, h)
    _refused("conv2d", strided, [(BATCH, 3, h, h), w, b])  # floor((h - 1) / 2) + 1 is no polynomial
    _refused("conv2d", {}, [(BATCH, 3, h, h), w, b], rules=False)  # h - 2 is empty at h <= 2
    # (2h + 1 - 3) // 2 + 1 = h: an exact quotient (pads: top, left, bottom, right)
    assert _both("conv2d", {"strides": (2, 2), "pads": (0, 0, 1, 1)}, [(BATCH, 3, 2 * h, 2 * h), w, b]) == \
        (BATCH, 16, h, h)


def test_a_global_pool_over_a_symbolic_image() -> None:
    h, w = Sym.var("h"), Sym.var("w")
    assert _both("avgpool", {"kernel": (h, w), "strides": (1, 1)}, [(BATCH, 8, h, w)]) == (BATCH, 8, 1, 1)


def test_split_of_a_symbolic_axis() -> None:
    past = Sym.var("past")
    x = (BATCH, SEQ + past, 64)
    assert _both("split", {"axis": 1, "start": 0, "size": SEQ}, [x]) == (BATCH, SEQ, 64)
    assert _both("split", {"axis": 1, "start": SEQ, "size": past}, [x]) == (BATCH, past, 64)
    assert _both("split", {"axis": 0, "start": 0, "size": 1}, [x]) == (1, SEQ + past, 64)
    assert _both("split", {"axis": 1, "start": 0, "size": SEQ + 1}, [x]) == (BATCH, SEQ + 1, 64)  # past >= 1
    _refused("split", {"axis": 1, "start": 1, "size": SEQ + past}, [x])  # too long for every value
    _refused("split", {"axis": 1, "start": 0, "size": 4}, [x])  # fits only where seq + past >= 4
    _refused("split", {"axis": SEQ, "start": 0, "size": 1}, [x])


def _rule_value(expr: S.Expr, **params: Any) -> Dim:
    out = S.evaluate((S.rule(S.vec(expr)),), {}, params)
    assert out is not None
    return out[0]


def test_rule_arithmetic_on_symbols_is_exact_or_refused() -> None:
    n = S.param("n")
    assert _rule_value(n // 2, n=2 * BATCH + 4) == BATCH + 2
    assert _rule_value((n - 7) // -1, n=BATCH) == 7 - BATCH  # truncation by a negative divisor
    assert _rule_value(n % 2, n=2 * BATCH + 5) == 1
    # a dividend negative for every value: the truncated remainder has its sign (-3 % 2 is -1 in egglog)
    assert _rule_value(n % 2, n=-2 * BATCH - 1) == -1
    m = S.param("m")
    assert _rule_value(n // m, n=BATCH * SEQ + 2 * SEQ, m=SEQ) == BATCH + 2
    for expr, values in ((n // 2, {"n": BATCH}), (n % 2, {"n": 2 * BATCH - 3}), (S.Expr("/", (6, n)), {"n": BATCH}),
                         (n // m, {"n": BATCH, "m": SEQ}), (n % m, {"n": BATCH + 1, "m": BATCH})):
        with pytest.raises(UndecidedDim):
            _rule_value(expr, **values)
    for b in range(1, 6):  # the refusals above aside, the same numbers as on ints
        assert concrete([_rule_value(n % 2, n=2 * BATCH + 5)], {"batch": b}) == (_rule_value(n % 2, n=2 * b + 5),)
        assert _rule_value(n % 2, n=-2 * b - 1) == -1


def test_max_dim_is_decided_in_either_order() -> None:
    assert S.max_dim(1, BATCH) == BATCH and S.max_dim(BATCH, 1) == BATCH
    assert S.max_dim(BATCH + 1, BATCH) == BATCH + 1 and S.max_dim(3, 5) == 5
    with pytest.raises(UndecidedDim):
        S.max_dim(BATCH, SEQ)
    with pytest.raises(UndecidedDim):
        S.max_dim(BATCH, 2)
