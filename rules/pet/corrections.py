"""Correction kernels: for each box on which a mutant differs from its original, the original subprogram run on
just the input window that box reads, written over the mutant's output there (splits and concats, plain ONNX
Slice and Concat once exported), so that the corrected mutant is fully equivalent; and the check that says so.

The original is one window node (a convolution); a box of its output ``[o0, o1)`` along a spatial axis reads
input rows ``[o0*s - pad, (o1-1)*s - pad + (k-1)*d + 1)``; where that leaves the input, the part outside
becomes the correction's own zero padding, so the correction is the same convolution with other pads.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from eqsat.ir.graph import Graph, Node, make_node
from eqsat.ir.names import NameAllocator
from eqsat.ops import Shape
from eqsat.rules.pet.mutants import Mutant
from eqsat.rules.pet.program import Subprogram, evaluate_mod, random_values
from eqsat.rules.pet.regions import Box, RegionAnalysis, analyse

__all__ = ["CorrectionError", "CorrectedMutant", "correct", "correction_nodes", "overwrite", "check_equal", "Reference",
           "MAX_WRONG_FRACTION"]

#: a mutant wrong on more of its output than this is not worth correcting (the correction would redo most of it)
MAX_WRONG_FRACTION = 0.25


class CorrectionError(ValueError):
    """A mutant cannot be corrected here (too much of it is wrong, a window outside the input), or its corrected
    form failed the equality check."""


@dataclass(frozen=True)
class CorrectedMutant:
    """A mutant with its corrections: ``graph`` computes the original's output (same input, weights and output
    names) and passed :func:`check_equal`; ``fixes`` are the boxes recomputed, ``correction_flops`` their work."""

    sub: Subprogram
    mutant: Mutant
    analysis: RegionAnalysis
    graph: Graph
    fixes: tuple[Box, ...]
    correction_flops: float
    evidence: dict[str, object] = field(default_factory=dict)

    @property
    def nodes(self) -> tuple[Node, ...]:
        """The corrected mutant's nodes, over the host graph's tensor names; the last computes the output."""
        return self.graph.nodes


def _split(src: str, axis: int, start: int, size: int, names: NameAllocator, nodes: list[Node]) -> str:
    dst = names.fresh(f"{src}_s")
    nodes.append(make_node("split", {"axis": axis, "start": start, "size": size}, [src], dst))
    return dst


def correction_nodes(sub: Subprogram, box: Box, names: NameAllocator, nodes: list[Node],
                     shift: int = 0) -> str:
    """Append to ``nodes`` the original window node on the input window ``box`` reads, and return the tensor
    holding the original's output on ``box``. ``shift`` moves the window by that many columns: only the tests
    that break a correction on purpose use it."""
    node, shapes = sub.node, sub.graph.shapes
    x, w, b = node.inputs
    xs, ws = shapes[x], shapes[w]
    p = node.p
    (n0, n1), (c0, c1), *spatial = box
    src = x if (n0, n1) == (0, xs[0]) else _split(x, 0, n0, n1 - n0, names, nodes)
    pads = [0, 0, 0, 0]
    for i, (o0, o1) in enumerate(spatial):
        k, s, d, pb = ws[2 + i], p["strides"][i], p["dilations"][i], p["pads"][i]
        a = o0 * s - pb + (shift if i == 1 else 0)
        e = (o1 - 1) * s - pb + (k - 1) * d + 1 + (shift if i == 1 else 0)
        lo, hi = max(a, 0), min(e, xs[2 + i])
        if hi <= lo:
            raise CorrectionError(f"pet: box {box} of {node.output!r} reads only padding")
        pads[i], pads[i + 2] = lo - a, e - hi
        if (lo, hi) != (0, xs[2 + i]):
            src = _split(src, 2 + i, lo, hi - lo, names, nodes)
    if (c0, c1) != (0, ws[0]):
        w, b = _split(w, 0, c0, c1 - c0, names, nodes), _split(b, 0, c0, c1 - c0, names, nodes)
    dst = names.fresh(f"{node.output}_fix")
    nodes.append(make_node(node.op, {**p, "pads": tuple(pads)}, [src, w, b], dst))
    return dst


def overwrite(target: str, shape: Shape, box: Box, patch: str, names: NameAllocator, nodes: list[Node]) -> str:
    """Append the nodes that write ``patch`` (of the box's extent) over ``box`` of ``target`` (of ``shape``): the
    parts of ``target`` around the box split off and concatenated back around it, one axis at a time."""
    axes = [k for k, (a, b) in enumerate(box) if (a, b) != (0, shape[k])]
    if not axes:
        return patch
    k = axes[0]
    a, b = box[k]
    pieces = [_split(target, k, 0, a, names, nodes)] if a > 0 else []
    middle = _split(target, k, a, b - a, names, nodes)
    inner_shape = shape[:k] + (b - a,) + shape[k + 1:]
    inner_box = box[:k] + ((0, b - a),) + box[k + 1:]
    pieces.append(overwrite(middle, inner_shape, inner_box, patch, names, nodes))
    if b < shape[k]:
        pieces.append(_split(target, k, b, shape[k] - b, names, nodes))
    dst = names.fresh(f"{target}_w")
    nodes.append(make_node("concat", {"axis": k}, pieces, dst))
    return dst


def corrected_graph(sub: Subprogram, mutant: Mutant, fixes: list[Box], shift: int = 0) -> Graph:
    """The mutant with ``fixes`` recomputed by the original and written over its output (no check)."""
    g = sub.graph
    out = sub.output
    names = NameAllocator(set(mutant.graph.shapes))
    raw = names.fresh(f"{out}_mutant")
    nodes = [Node(n.op, n.params, n.inputs, raw if n.output == out else n.output) for n in mutant.graph.nodes]
    nodes = [Node(n.op, n.params, tuple(raw if i == out else i for i in n.inputs), n.output) for n in nodes]
    cur, shape = raw, g.shapes[out]
    for box in fixes:
        cur = overwrite(cur, shape, box, correction_nodes(sub, box, names, nodes, shift), names, nodes)
    last = nodes[-1]
    nodes[-1] = Node(last.op, last.params, last.inputs, out)
    if last.output != cur:
        raise CorrectionError("pet: the corrected output is not the last node written")  # never: overwrite ends so
    return Graph(g.inputs, g.weights, tuple(nodes), (out,), name=f"{g.name}_corrected")


class Reference:
    """The original's side of :func:`check_equal`: its random inputs and outputs, computed when first needed and
    then shared by every candidate checked against it (a convolution's mutants)."""

    def __init__(self, original: Graph, trials: int = 3, seed: int = 1) -> None:
        self.original, self.trials, self.seed = original, trials, seed

    @functools.cached_property
    def runs(self) -> list[tuple[dict[str, np.ndarray], np.ndarray, dict[str, np.ndarray], np.ndarray]]:
        """Per trial: residues and the original's output modulo the prime, normal inputs and its float32 output."""
        rng = np.random.default_rng(self.seed)
        out = []
        for _ in range(self.trials):
            values = random_values(self.original, rng)
            feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in self.original.inputs}
            out.append((values, evaluate_mod(self.original, values), feeds, self.original.evaluate(feeds)[0]))
        return out


def check_equal(original: Graph, candidate: Graph, trials: int = 3, seed: int = 1,
                reference: Reference | None = None) -> bool:
    """Whether ``candidate`` computes ``original``'s output at every position: exactly modulo the prime on
    ``trials`` random inputs (the linear cores, weights random too), and in float32 with the fused activations
    on as many random normal inputs (the graphs' own weights). ``reference``: the original's runs, where the
    caller keeps them for several candidates (its graph must be ``original``)."""
    if reference is None or reference.original is not original:
        reference = Reference(original, trials, seed)
    for values, want_mod, feeds, want in reference.runs:
        if not np.array_equal(want_mod, evaluate_mod(candidate, values)):
            return False
        got = candidate.evaluate(feeds)[0]
        if want.shape != got.shape or not np.allclose(want, got, rtol=1e-4, atol=1e-4):
            return False
    return True


def correct(sub: Subprogram, mutant: Mutant, analysis: RegionAnalysis | None = None,
            max_wrong_fraction: float = MAX_WRONG_FRACTION, reference: Reference | None = None) -> CorrectedMutant:
    """The corrected mutant of ``mutant``: its non-equal boxes (from ``analysis``, else :func:`analyse`)
    recomputed by the original, checked equal to the original at every position (:func:`check_equal`, with
    ``reference``: ``Reference(sub.graph)`` shared by the mutants of one subprogram).

    Raises :class:`CorrectionError` where more than ``max_wrong_fraction`` of the output is wrong, or the check
    refuses the result."""
    analysis = analysis if analysis is not None else analyse(sub.graph, mutant.graph)
    if analysis.wrong_fraction > max_wrong_fraction:
        raise CorrectionError(f"pet: {mutant.name} is wrong on {analysis.wrong_fraction:.0%} of the output "
                              f"(at most {max_wrong_fraction:.0%} is corrected)")
    fixes = analysis.wrong
    graph = corrected_graph(sub, mutant, fixes)
    if not check_equal(sub.graph, graph, reference=reference):
        raise CorrectionError(f"pet: {mutant.name} corrected on {fixes} still differs from the original")
    shapes, before = graph.shapes, mutant.graph.shapes
    flops = sum(n.spec.flops_fn(n.p, [shapes[i] for i in n.inputs], shapes[n.output])
                for n in graph.nodes if n.op == sub.node.op and n.output not in before)
    evidence = {**analysis.summary(), "mutant": mutant.name, "fixes": [list(map(list, b)) for b in fixes],
                "correction_flops": flops}
    return CorrectedMutant(sub, mutant, analysis, graph, tuple(fixes), float(flops), evidence)
