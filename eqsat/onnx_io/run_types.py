"""Types ONNX shape inference cannot give: the outputs of operators of another domain (onnxruntime's
``com.microsoft`` fused kernels such as ``SkipLayerNormalization`` or ``FastGelu``, left by onnxruntime's own
optimizers), found by running the model once in onnxruntime with those tensors as outputs.

A model with symbols (:mod:`eqsat.ir.symbols`) cannot run at its generic sizes (batch 10007); it runs at two
small sets of sizes instead, each symbol a different small prime in each, and each size of a tensor is read as
the one monomial ``c * batch^i * seq^j`` that gives both (a size that is none, say ``seq + past``, stays unknown).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from eqsat.ir.symbols import Symbols
from eqsat.ops.dims import Sym, concrete

#: the sizes each symbol runs at, in the first and the second run (primes, so that a monomial reads back alone)
_FIRST = (3, 5, 7, 11, 13)
_SECOND = (17, 19, 23, 29, 31)


def types_by_running(model: onnx.ModelProto, names: Sequence[str], inputs: Sequence[tuple[str, tuple[int, ...], str]],
                     syms: Symbols) -> dict[str, tuple[tuple[int, ...], str]]:
    """Shape (at the generic point, for a graph with symbols) and dtype of each tensor in ``names`` that one
    run of ``model`` in onnxruntime gives; ``inputs``: the graph inputs (name, shape as imported, dtype). A
    tensor whose sizes cannot be read, or a model onnxruntime cannot run, gives nothing."""
    if not names or len(syms.generic) > len(_FIRST):
        return {}
    from eqsat.onnx_io.runtime import int_input_bounds, onnxruntime_runner, random_inputs  # onnxruntime when needed

    order = list(syms.generic)
    runs = [{s: _FIRST[k] for k, s in enumerate(order)}]
    if syms:
        runs.append({s: _SECOND[k] for k, s in enumerate(order)})
    results: list[dict[str, np.ndarray]] = []
    rng = np.random.default_rng(0)
    bounds = int_input_bounds(model)
    try:
        run = onnxruntime_runner(model, names)  # one session for both runs
        for sizes in runs:
            feeds = random_inputs([(name, concrete(syms.decode_shape(shape), sizes) if syms else tuple(shape),
                                    dtype) for name, shape, dtype in inputs], rng, bounds)
            results.append(run(feeds))
    except Exception:  # onnxruntime cannot run it (a custom operator): the types stay unknown
        return {}
    out: dict[str, tuple[tuple[int, ...], str]] = {}
    for n in names:
        got = [r.get(n) for r in results]
        if any(g is None for g in got):
            continue
        dims = _read_sizes([np.shape(g) for g in got], runs, syms)
        if dims is not None:
            out[n] = (dims, str(np.asarray(got[0]).dtype))
    return out


def _read_sizes(shapes: Sequence[tuple[int, ...]], runs: Sequence[Mapping[str, int]],
                syms: Symbols) -> tuple[int, ...] | None:
    """A tensor's shape at the generic point from its shapes in the runs, or None where a size is no monomial."""
    if len({len(s) for s in shapes}) != 1:
        return None
    if not syms:
        return tuple(int(d) for d in shapes[0])
    out = []
    for values in zip(*shapes, strict=True):
        size = _monomial(values, runs, list(syms.generic))
        if size is None:
            return None
        out.append(concrete((size,), syms.generic)[0] if isinstance(size, Sym) else size)
    return tuple(out)


def _monomial(values: Sequence[int], runs: Sequence[Mapping[str, int]], order: list[str]) -> int | Sym | None:
    """The ``c * prod(s ** k)`` (powers 0 to 2) that takes ``values`` in ``runs``, or None."""
    if len(set(values)) == 1:
        return int(values[0])  # the same in both runs: not a symbol's size
    for powers in itertools.product(range(3), repeat=len(order)):
        if not any(powers):
            continue
        at = [math.prod(run[s] ** k for s, k in zip(order, powers, strict=True)) for run in runs]
        if values[0] % at[0] or values[0] // at[0] == 0:
            continue
        c = values[0] // at[0]
        if all(c * a == v for a, v in zip(at, values, strict=True)):
            term: int | Sym = c
            for s, k in zip(order, powers, strict=True):
                for _ in range(k):
                    term = term * Sym.var(s)
            return term
    return None
