"""The numeric check: does the optimized model compute what the original model, as given, computes?

Both models run in onnxruntime with graph optimizations off on several sets of random inputs. Every graph
output is compared position by position: NaN and infinity must sit at the same places in both, and finite
values must agree within a tolerance relative to that output's own scale (its largest magnitude). An output
that cannot tell models apart is *saturated*: it does not change with the inputs, or it sits at the bounds
of a squashing operator (a one-hot softmax, a sigmoid at 0 or 1). For those, the tensors that feed the
squashing operators are compared as well, since a wrong rewrite upstream would not show in the output.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from eqsat.errors import EqsatError
from eqsat.ir.graph import Graph
from eqsat.ir.price_points import summed_symbols
from eqsat.ir.symbols import graph_size_inputs, graph_symbols, representative
from eqsat.onnx_io import drop_read_pages, int_input_bounds, onnxruntime_runner, random_ints
from eqsat.ops.dims import Sym

#: Operators whose output can saturate (stop reflecting their input), and whose input is checked instead.
SQUASHING_OPS = {"Softmax", "Sigmoid", "Tanh", "HardSigmoid", "Hardmax", "ArgMax", "ArgMin", "Sign", "Clip",
                 "Softsign", "Erf"}
#: Single-input operators that pass saturation through (the walk back to the pre-saturation tensor crosses
#: them).
_PASS_THROUGH = {"Flatten", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Transpose", "Cast"}
#: The input distributions of the trials, in turn: standard normal, uniform in [0, 1) (positive, for
#: ReLU-heavy models), and normal with a small spread (away from the bounds of squashing operators).
_DISTRIBUTIONS = ("normal", "uniform", "small")


class NumericCheckUnavailable(EqsatError, RuntimeError):
    """The numeric check cannot run (e.g. onnxruntime cannot execute an operator of the original model)."""


class NumericMismatch(EqsatError, RuntimeError):
    """The optimized model does not compute what the original computes. Nothing was written."""


@dataclass
class OutputComparison:
    """How one tensor of the optimized model compared with the original's."""

    name: str
    shape: tuple[int, ...]
    scale: float = 0.0  # largest finite magnitude of the reference over all trials
    max_abs: float = 0.0
    max_rel: float = 0.0  # max_abs / scale: the error relative to the tensor's own scale
    saturated: str = ""  # why the tensor cannot tell models apart, if it cannot
    problem: str = ""  # why it does not match, if it does not
    pre_saturation: bool = False  # an intermediate tensor checked because an output saturates


@dataclass
class NumericReport:
    """What was compared, against which model, and the outcome."""

    ok: bool
    reference: str = "the original model"
    trials: int = 0
    comparisons: list[OutputComparison] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    rtol: float = 1e-4
    atol: float = 1e-4
    ran: bool = True  # False when the check could not run at all (see ``problems``)
    sizes: list[dict[str, int]] = field(default_factory=list)  # the symbols' sizes the models ran at
    skipped_sizes: list[str] = field(default_factory=list)  # sizes the original itself cannot run at, and why

    @property
    def worst_rel(self) -> float:
        """The largest error relative to the tensor's own scale over every compared tensor."""
        return max((c.max_rel for c in self.comparisons), default=0.0)

    @property
    def max_abs(self) -> dict[str, float]:
        """Largest absolute error per compared tensor."""
        return {c.name: c.max_abs for c in self.comparisons}

    @property
    def saturated(self) -> list[OutputComparison]:
        """Outputs that cannot tell models apart by themselves."""
        return [c for c in self.comparisons if c.saturated and not c.pre_saturation]

    def summary(self) -> str:
        """One line: what was compared and the worst error, or what is wrong."""
        outs = [c for c in self.comparisons if not c.pre_saturation]
        pre = [c for c in self.comparisons if c.pre_saturation]
        what = (f"against {self.reference}, {self.trials} random input set(s), {len(outs)} output(s)"
                + (f" + {len(pre)} tensor(s) before saturating operators ({', '.join(c.name for c in pre)})"
                   if pre else ""))
        if self.sizes:
            what += ", at " + " and at ".join(_sizes_text(x) for x in self.sizes)
        if self.skipped_sizes:
            what += " (not at " + "; ".join(self.skipped_sizes) + ", where the original does not run)"
        if not self.ran:
            return "NOT RUN: " + "; ".join(self.problems)
        if not self.ok:
            return f"MISMATCH ({what}): " + "; ".join(self.problems)
        text = f"ok ({what}; worst error {self.worst_rel:.2e} of the tensor's scale, tolerance {self.atol:g})"
        if self.saturated:
            text += "; saturated: " + "; ".join(f"{c.name} ({c.saturated})" for c in self.saturated)
        return text


def _input_specs(model: onnx.ModelProto, sizes: Mapping[str, int] | None = None,
                 shapes: Mapping[str, tuple[int, ...]] | None = None) -> list[tuple[str, tuple[int, ...], np.dtype]]:
    inits = {i.name for i in model.graph.initializer}
    specs = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        t = vi.type.tensor_type
        dims = tuple(int(d.dim_value) if d.HasField("dim_value") else int((sizes or {}).get(d.dim_param, 1))
                     for d in t.shape.dim)
        dims = tuple((shapes or {}).get(vi.name, dims))
        specs.append((vi.name, dims, np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type))))
    return specs


def trial_feeds(model: onnx.ModelProto, trial: int, seed: int = 0, sizes: Mapping[str, int] | None = None,
                shapes: Mapping[str, tuple[int, ...]] | None = None,
                size_inputs: Mapping[str, str] | None = None) -> dict[str, np.ndarray]:
    """Random inputs for ``model`` for trial number ``trial``; an input in ``shapes`` has that shape, and a
    symbolic dimension (``dim_param``) of another its size in ``sizes`` (1 where it is not there). An integer
    input in ``size_inputs`` (a Loop's trip count) holds the size in ``sizes`` of the symbol it names.

    Floats follow the trial's distribution in turn (normal, uniform in [0, 1), normal with spread 0.01),
    integers as :func:`eqsat.onnx_io.random_ints` (0/1, or any row of a table they index), booleans are
    fair coins.
    """
    rng = np.random.default_rng([seed, trial])
    kind = _DISTRIBUTIONS[trial % len(_DISTRIBUTIONS)]
    feeds: dict[str, np.ndarray] = {}
    bounds = int_input_bounds(model)
    holding = size_inputs or {}
    for name, shape, dt in _input_specs(model, sizes, shapes):
        if dt.kind == "f":
            x = {"normal": lambda s: rng.standard_normal(s), "uniform": lambda s: rng.random(s),
                 "small": lambda s: 0.01 * rng.standard_normal(s)}[kind](shape)
            feeds[name] = np.asarray(x).astype(dt)  # arithmetic on a 0-d array gives a scalar: onnxruntime wants arrays
        elif dt.kind == "b":
            feeds[name] = rng.integers(0, 2, shape).astype(bool)
        elif name in holding:
            feeds[name] = np.full(shape, (sizes or {}).get(holding[name], 1), dtype=dt)
        else:
            feeds[name] = random_ints(rng, shape, dt, bounds.get(name))
    return feeds


def _producers(model: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    return {o: n for n in model.graph.node for o in n.output if o}


def _pre_saturation_tensor(model: onnx.ModelProto, output: str) -> tuple[str, list[Any]] | None:
    """The tensor feeding the squashing operators at the end of ``output``'s producer chain, with the
    operators crossed on the way (each as its type, attributes and constant inputs: two chains of the same
    operators map equal tensors to equal outputs, so only then are the tensors before them comparable); ``None``
    if ``output`` does not come from a squashing operator."""
    producers = _producers(model)
    constants = {t.name: t for t in model.graph.initializer}
    name, path, squashed = output, [], False
    while name in producers:
        node = producers[name]
        if node.op_type in SQUASHING_OPS:
            squashed = True
        elif node.op_type not in _PASS_THROUGH:
            break
        more = node.input[1:]
        if any(i and i not in constants for i in more):  # a shape computed at run time: not comparable across
            break
        path.append((node.op_type, sorted((a.name, str(helper.get_attribute_value(a))) for a in node.attribute),
                     [constants[i].SerializeToString() if i else b"" for i in more]))
        name = node.input[0]
    return (name, path) if squashed else None


def _saturation(op_path: Sequence[str], refs: Sequence[np.ndarray], tol: float) -> str:
    """Why an output cannot tell models apart ("" if it can)."""
    finite = [np.where(np.isfinite(r), r, 0.0) for r in refs]
    # (a shape that changes with the inputs, a loop's that ends on its own, is no saturation)
    if len(finite) > 1 and finite[0].size and all(f.shape == finite[0].shape for f in finite):
        spread = max(float(np.max(np.abs(f - finite[0]))) for f in finite[1:])
        scale = max(float(np.max(np.abs(f))) for f in finite)
        if spread <= tol * max(scale, np.finfo(np.float32).tiny):
            return "the same for every input"
    finite = [f for f in finite if f.size]
    if not op_path or not finite:
        return ""
    op = op_path[0]
    if op in ("Hardmax", "ArgMax", "ArgMin", "Sign"):
        return f"{op} output"
    at_bounds = 0.0
    for f in finite:
        if op == "Softmax":
            at_bounds += float(np.mean(np.max(f, axis=-1) > 1 - 1e-3))
        elif op in ("Sigmoid", "HardSigmoid"):
            at_bounds += float(np.mean((f < 1e-3) | (f > 1 - 1e-3)))
        elif op in ("Tanh", "Softsign", "Erf"):
            at_bounds += float(np.mean(np.abs(f) > 1 - 1e-3))
    if at_bounds / len(finite) > 0.9:
        return f"{op} at its bounds"
    return ""


def _compare(name: str, refs: Sequence[np.ndarray], gots: Sequence[np.ndarray], rtol: float,
             atol: float) -> OutputComparison:
    c = OutputComparison(name, tuple(np.shape(refs[0])))
    for t, (a, b) in enumerate(zip(refs, gots, strict=True)):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            c.problem = f"shape {b.shape} instead of {a.shape}"
            return c
        if a.dtype != b.dtype:
            c.problem = f"dtype {b.dtype} instead of {a.dtype}"
            return c
        if a.dtype.kind not in "fc":
            if not np.array_equal(a, b):
                c.problem = f"{int(np.sum(a != b))} of {a.size} values differ (input set {t})"
                return c
            continue
        for what, ma, mb in (("NaN", np.isnan(a), np.isnan(b)), ("+inf", np.isposinf(a), np.isposinf(b)),
                             ("-inf", np.isneginf(a), np.isneginf(b))):
            if not np.array_equal(ma, mb):
                c.problem = (f"{what} at {int(np.sum(ma != mb))} position(s) where the other model has "
                             f"{'none' if np.sum(mb) < np.sum(ma) else 'another value'} (input set {t})")
                return c
        fin = np.isfinite(a)
        c.scale = max(c.scale, float(np.max(np.abs(a[fin]))) if fin.any() else 0.0)
    scale = max(c.scale, np.finfo(np.float32).tiny)
    if np.asarray(refs[0]).dtype.kind not in "fc":
        return c
    for a, b in zip(refs, gots, strict=True):
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        fin = np.isfinite(a)
        diff = np.abs(a[fin] - b[fin])
        if diff.size:
            c.max_abs = max(c.max_abs, float(diff.max()))
            if np.any(diff > atol * scale + rtol * np.abs(a[fin])):
                c.problem = (f"max abs error {c.max_abs:.3e} is {c.max_abs / scale:.2e} of the output's scale "
                             f"{c.scale:.3e} (tolerance {atol:g})")
    c.max_rel = c.max_abs / scale
    return c


def check_equal(original: onnx.ModelProto, optimized: onnx.ModelProto, *, reference: str = "the original model",
                trials: int = 3, seed: int = 0, rtol: float = 1e-4, atol: float = 1e-4,
                sizes: Sequence[Mapping[str, int]] = ({},),
                input_shapes: Sequence[Mapping[str, tuple[int, ...]]] | None = None,
                size_inputs: Mapping[str, str] | None = None,
                arrays: Mapping[str, np.ndarray] | None = None) -> NumericReport:
    """Run ``original`` (as given) and ``optimized`` on ``trials`` random input sets and compare every output.

    Input shapes come from ``optimized``: its symbolic dimensions take their sizes from each entry of ``sizes``
    in turn (``trials`` input sets at the first, two at each other; ``input_shapes``, beside them, gives the
    inputs' shapes at each where the caller knows them), so a rewrite right only at one batch size shows; an
    input in ``size_inputs`` (a Loop's trip count, by the symbol of its iterations) holds its symbol's size, so
    the models run for as many iterations; sizes the original itself cannot run at are skipped and named in
    ``skipped_sizes``. An element
    matches when ``|got - ref| <= atol * scale + rtol * |ref|``
    with ``scale`` the largest finite magnitude of that output over all trials; NaN and infinities must
    match by position; integer and boolean outputs must match exactly. Outputs that come from squashing
    operators (softmax, sigmoid, ...) present in both models are also compared before those operators, and
    saturated outputs (see the module docstring) are named in the report. ``reference`` names the original
    in the report. If onnxruntime cannot run the original, the report has ``ran=False`` and the reason.
    ``arrays``: weights of ``optimized`` already in memory (the IR graph it was exported from), fed to it where
    they hold its weights' very bytes rather than copied out of it (:func:`eqsat.onnx_io.onnxruntime_runner`).
    """
    report = NumericReport(True, reference=reference, trials=trials, rtol=rtol, atol=atol)
    names = [o.name for o in original.graph.output]
    if names != [o.name for o in optimized.graph.output]:
        report.ok = False
        report.problems.append(f"output names differ: {names} vs {[o.name for o in optimized.graph.output]}")
        return report
    # the tensors before each output's squashing operators, where both models end in the same ones
    tails = {n: (_pre_saturation_tensor(original, n), _pre_saturation_tensor(optimized, n)) for n in names}
    pre = {n: (a[0], b[0]) for n, (a, b) in tails.items()
           if a and b and a[1] == b[1] and a[0] in _producers(original) and b[0] in _producers(optimized)}
    a_extra, b_extra = [a for a, _ in pre.values()], [b for _, b in pre.values()]
    feeds, refs = [], []
    run_a: Callable[[Mapping[str, np.ndarray]], list[np.ndarray]] | None = None
    for k, at in enumerate(sizes):
        fixed = input_shapes[k] if input_shapes else None
        some = [trial_feeds(optimized, t, seed, at, fixed, size_inputs)
                for t in range(trials if k == 0 else min(2, trials))]
        try:
            run_a = run_a or onnxruntime_runner(original, a_extra)
            ran = [run_a(f) for f in some]
        except Exception as e:  # onnxruntime's errors share no base class
            if k:  # the model does not run at those sizes (a position table shorter than seq, say)
                report.skipped_sizes.append(f"{_sizes_text(at)}: {_first_line(e)[:160]}")
                continue
            report.ok = report.ran = False
            report.problems.append(f"onnxruntime cannot run the original model: {_first_line(e)}")
            return report
        feeds += some
        refs += ran
        if at:
            report.sizes.append(dict(at))
    first = refs[:trials]  # the trials at the first sizes, for the saturation test
    report.trials = len(feeds)
    run_a = None  # its session and its copy of the weights go before the optimized model's are made
    drop_read_pages()  # the original's weights left on disk: the optimized model reads back only those it uses
    try:
        run_b = onnxruntime_runner(optimized, b_extra, arrays)
        gots = [run_b(f) for f in feeds]
    except Exception as e:
        report.ok = False
        report.problems.append(f"onnxruntime cannot run the optimized model: {_first_line(e)}")
        return report
    for name in names:
        c = _compare(name, [r[name] for r in refs], [g[name] for g in gots], rtol, atol)
        if not c.problem and np.asarray(refs[0][name]).dtype.kind == "f":
            tail_a, tail_b = tails[name]
            ops = [op for op, _, _ in tail_a[1]] if tail_a else []
            c.saturated = _saturation(ops, [r[name] for r in first], atol)
            if c.saturated and name not in pre:
                c.saturated += ("; no squashing operator to look behind" if not tail_a else
                                "; the models do not end in the same squashing operators, so the tensor "
                                "before them was not checked")
        report.comparisons.append(c)
    for name, (a, b) in pre.items():
        c = _compare(f"{name} (before {a})", [r[a] for r in refs], [g[b] for g in gots], rtol, atol)
        c.pre_saturation = True
        report.comparisons.append(c)
    for c in report.comparisons:
        if c.problem:
            report.ok = False
            report.problems.append(f"{c.name}: {c.problem}")
    return report


def _sizes_text(sizes: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


def other_sizes(sizes: Mapping[str, int]) -> dict[str, int]:
    """Sizes for the symbols other than ``sizes`` (each a small prime not in ``sizes``, a different one per
    symbol), for a second check: a rewrite right only at batch 1 shows there."""
    pool = [p for p in (3, 17, 5, 11, 7, 13, 19, 23) if p not in sizes.values()]
    return {s: pool[k % len(pool)] for k, s in enumerate(sizes)}


def sizes_to_check(graph: Graph) -> tuple[list[dict[str, int]], list[dict[str, tuple[int, ...]]] | None]:
    """The ``sizes`` and ``input_shapes`` :func:`check_equal` runs a model imported as ``graph`` at: for a
    graph with symbols its representative sizes and :func:`other_sizes` of those the inputs give (their shapes,
    a trip count), each with its inputs' shapes; for a static one its own shapes."""
    syms = graph_symbols(graph)
    # only the symbols the feeds hold: an input's size, or a Loop's trip count given as an input (the count of a
    # loop that ends on its own, or runs a constant number of times, is what it is whatever the sizes say)
    fed = {s for i in graph.inputs for d in syms.decode_shape(i.shape) if isinstance(d, Sym) for s in d.symbols}
    fed |= set(graph_size_inputs(graph).values())
    rep = {s: v for s, v in representative(graph).items() if s in fed}
    if not rep:
        return [{}], None
    sizes = [rep, other_sizes(rep)]
    # symbols a size adds up (a KV cache's past + new length): each long while the others stay at their sizes,
    # a decode step (one new token, a long past) and a prefill (many new tokens, a short past)
    for s in summed_symbols(graph):
        if s not in fed:
            continue
        long = {**rep, s: LONG_SIZE}
        if long not in sizes:
            sizes.append(long)
    return sizes, [{i.name: syms.at(i.shape, at) for i in graph.inputs} for at in sizes]


#: the size a summed symbol is checked at, alone long (a past of 31 tokens)
LONG_SIZE = 31


def describe_reference(src: str | Path | bytes | onnx.ModelProto) -> str:
    """How the report names the model the optimized one was checked against: the original as given."""
    if isinstance(src, onnx.ModelProto):
        return "the original model (ModelProto as given)"
    if isinstance(src, bytes):
        return "the original model (bytes as given)"
    return f"the original model as given ({src})"


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]
