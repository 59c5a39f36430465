"""Correction kernels: for each box on which a mutant differs from its original, the original subprogram run on
just the input window that box reads, written over the mutant's output there (splits and concats, plain ONNX
Slice and Concat once exported), so that the corrected mutant is fully equivalent; and the check that says so.

The original is one window node (a convolution) or a chain of them. A box of a window's output ``[o0, o1)``
along a spatial axis reads input rows ``[o0*s - pad, (o1-1)*s - pad + (k-1)*d + 1)``; where that leaves the
input, the part outside becomes the correction's own zero padding, so the correction is the same convolution
with other pads. Through a chain the rows are followed back from the last window to the first, each window's
read clipped to its input: the correction computes the real part of each intermediate, and the next window pads
it with zeros where the original would (not with a convolution of padding, which holds the bias).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from eqsat.ir.graph import Graph, Node, make_node
from eqsat.ir.names import NameAllocator
from eqsat.ops import Shape
from eqsat.rules.pet.mutants import Mutant
from eqsat.rules.pet.program import ROLES, Subprogram, addend, evaluate_mod, random_values
from eqsat.rules.pet.regions import Box, RegionAnalysis, analyse, merge_boxes

__all__ = ["CorrectionError", "CorrectedMutant", "correct", "correction_nodes", "overwrite", "blocks_of", "check_equal",
           "Reference", "MAX_WRONG_FRACTION"]

#: a mutant wrong on more of its output than this is not worth correcting (the correction would redo most of it)
MAX_WRONG_FRACTION = 0.25


class CorrectionError(ValueError):
    """A mutant cannot be corrected here (too much of it is wrong, a window outside the input), or its corrected
    form failed the equality check."""


@dataclass(frozen=True)
class CorrectedMutant:
    """A mutant with its corrections: ``graph`` computes the original's output (same input, weights and output
    names) and passed :func:`check_equal`; ``fixes`` are the boxes recomputed, ``correction_flops`` their work,
    ``corrections`` the correction kernels that do it (fewer than the boxes where one serves every block of
    images, :func:`blocks_of`)."""

    sub: Subprogram
    mutant: Mutant
    analysis: RegionAnalysis
    graph: Graph
    fixes: tuple[Box, ...]
    correction_flops: float
    evidence: dict[str, object] = field(default_factory=dict)
    corrections: int = 0

    @property
    def nodes(self) -> tuple[Node, ...]:
        """The corrected mutant's nodes, over the host graph's tensor names; the last computes the output."""
        return self.graph.nodes


def _split(src: str, axis: int, start: int, size: int, names: NameAllocator, nodes: list[Node]) -> str:
    dst = names.fresh(f"{src}_s")
    nodes.append(make_node("split", {"axis": axis, "start": start, "size": size}, [src], dst))
    return dst


def correction_nodes(sub: Subprogram, box: Box, names: NameAllocator, nodes: list[Node],
                     shift: int = 0, period: int | None = None) -> str:
    """Append to ``nodes`` the original's window nodes on the input window ``box`` reads, and return the tensor
    holding the original's output on ``box``. ``shift`` moves the first window's read by that many columns: only
    the tests that break a correction on purpose use it.

    ``period``: ``box`` is one of images ``[n0, n1)`` of every block of ``period`` images, and the result is
    held as (blocks, n1 - n0, channels, height, width): the images are taken from the input seen as
    (blocks, period, ...), so one correction serves every block."""
    chain, shapes = sub.windows, sub.graph.shapes
    (n0, n1), (c0, c1), *spatial = box
    # per window: its input rows, its pads, its output rows
    plan: list[tuple[Node, list[tuple[int, int]], tuple[int, ...], list[tuple[int, int]]]] = []
    rows = list(spatial)
    for level in range(len(chain) - 1, -1, -1):  # from the last window back to the first
        node = chain[level]
        xs, ws, p = shapes[node.inputs[0]], shapes[node.inputs[1]], node.p
        pads, reads = [0, 0, 0, 0], []
        for i, (o0, o1) in enumerate(rows):
            k, s, d, pb = ws[2 + i], p["strides"][i], p["dilations"][i], p["pads"][i]
            moved = shift if i == 1 and level == 0 else 0
            a = o0 * s - pb + moved
            e = (o1 - 1) * s - pb + (k - 1) * d + 1 + moved
            lo, hi = max(a, 0), min(e, xs[2 + i])
            if hi <= lo:
                raise CorrectionError(f"pet: box {box} of {node.output!r} reads only padding")
            pads[i], pads[i + 2] = lo - a, e - hi
            reads.append((lo, hi))
        plan.insert(0, (node, reads, tuple(pads), rows))
        rows = reads

    def take(t: str, channels: tuple[int, int] | None, spatial_rows: list[tuple[int, int]]) -> str:
        """Input ``t`` (the activation, or a residual) on the box's images, ``channels`` and ``spatial_rows``."""
        ts = shapes[t]
        if period is not None:  # images [n0, n1) of every block, as one batch
            blocks = ts[0] // period
            src = _reshape(t, (blocks, period, *ts[1:]), names, nodes)
            if (n0, n1) != (0, period):
                src = _split(src, 1, n0, n1 - n0, names, nodes)
            src = _reshape(src, (blocks * (n1 - n0), *ts[1:]), names, nodes)
        else:
            src = t if (n0, n1) == (0, ts[0]) else _split(t, 0, n0, n1 - n0, names, nodes)
        if channels is not None and channels != (0, ts[1]):
            src = _split(src, 1, channels[0], channels[1] - channels[0], names, nodes)
        for i, (lo, hi) in enumerate(spatial_rows):
            if (lo, hi) != (0, ts[2 + i]):
                src = _split(src, 2 + i, lo, hi - lo, names, nodes)
        return src

    src = take(chain[0].inputs[0], None, plan[0][1])
    for level, (node, _, pads, out_rows) in enumerate(plan):
        last = level == len(plan) - 1
        r = addend(node)
        reads = []
        for i in node.inputs[1:]:
            if i == r:  # the residual on the positions this window computes
                reads.append(take(i, (c0, c1) if last else None, out_rows))
            elif last and (c0, c1) != (0, shapes[node.inputs[1]][0]):  # the box's output channels
                if node.p.get("groups", 1) != 1:
                    raise CorrectionError(f"pet: box {box} holds part of a grouped convolution's channels")
                reads.append(_split(i, 0, c0, c1 - c0, names, nodes))
            else:
                reads.append(i)
        dst = names.fresh(f"{node.output}_fix")
        nodes.append(make_node(node.op, {**node.p, "pads": pads}, [src, *reads], dst))
        src = dst
    if period is not None:
        xs = shapes[chain[0].inputs[0]]
        rows_out = tuple(b - a for a, b in spatial)
        src = _reshape(src, (xs[0] // period, n1 - n0, c1 - c0, *rows_out), names, nodes)
    return src


def _reshape(src: str, shape: Shape, names: NameAllocator, nodes: list[Node]) -> str:
    dst = names.fresh(f"{src}_r")
    nodes.append(make_node("reshape", {"shape": tuple(shape)}, [src], dst))
    return dst


def overwrite(target: str, shape: Shape, patches: list[tuple[Box, str]], names: NameAllocator,
              nodes: list[Node]) -> str:
    """Append the nodes that write each patch (a tensor of its box's extent) over its box of ``target`` (of
    ``shape``; the boxes disjoint), and return the result. One pass: along the axis most boxes do not span,
    ``target`` is cut at every box's ends, the slabs no box meets are taken as they are (a run of them as one
    split), the others written by the same procedure along the next axes, and the slabs concatenated once.
    So each axis costs one copy of its slabs, however many boxes there are (a concat per box would copy the whole
    tensor each time), and no part of ``target`` a patch covers is split off."""
    return _overwrite(lambda: target, shape, patches, names, nodes)


def _overwrite(target: Callable[[], str], shape: Shape, patches: list[tuple[Box, str]], names: NameAllocator,
               nodes: list[Node]) -> str:
    """:func:`overwrite` of the tensor ``target()`` makes (called only if some part of it is kept, at most once)."""
    if not patches:
        return target()
    # cut first along the axis most boxes are narrower than (a seam's columns: one cut for all of them)
    narrower = [sum(box[k] != (0, shape[k]) for box, _ in patches) for k in range(len(shape))]
    if not any(narrower):  # one box, the whole tensor
        return patches[0][1]
    k = max(range(len(shape)), key=lambda j: (narrower[j], j))
    made: list[str] = []

    def source() -> str:
        if not made:
            made.append(target())
        return made[0]

    def cut(lo: int, hi: int) -> Callable[[], str]:
        return lambda: source() if (lo, hi) == (0, shape[k]) else _split(source(), k, lo, hi - lo, names, nodes)

    edges = sorted({0, shape[k], *(e for box, _ in patches for e in box[k])})
    pieces: list[str] = []
    untouched: tuple[int, int] | None = None  # a run of slabs no box meets, taken as one split
    for lo, hi in itertools.pairwise(edges):
        inside = [(box, patch) for box, patch in patches if box[k][0] <= lo and hi <= box[k][1]]
        if not inside:
            untouched = (untouched[0] if untouched else lo, hi)
            continue
        if untouched is not None:
            pieces.append(cut(*untouched)())
            untouched = None
        within = []
        for box, patch in inside:  # each box cut to the slab, its patch with it
            a, b = box[k]
            if (a, b) != (lo, hi):
                patch = _split(patch, k, lo - a, hi - lo, names, nodes)
            within.append((box[:k] + ((0, hi - lo),) + box[k + 1:], patch))
        pieces.append(_overwrite(cut(lo, hi), shape[:k] + (hi - lo,) + shape[k + 1:], within, names, nodes))
    if untouched is not None:
        pieces.append(cut(*untouched)())
    if len(pieces) == 1:
        return pieces[0]
    dst = names.fresh("pet_w")
    nodes.append(make_node("concat", {"axis": k}, pieces, dst))
    return dst


def corrected_graph(sub: Subprogram, mutant: Mutant, fixes: list[Box], shift: int = 0,
                    period: int | None = None) -> Graph:
    """The mutant with ``fixes`` recomputed by the original and written over its output (no check).

    ``period``: where the boxes repeat on every block of that many images (:func:`blocks_of`), each of block 0's
    is corrected once for all blocks, and the output written as (blocks, period, ...): a seam between two
    images folded side by side is two corrections over half the batch, not two per image pair."""
    g = sub.graph
    out = sub.output
    shape = g.shapes[out]
    names = NameAllocator(set(mutant.graph.shapes))
    raw = names.fresh(f"{out}_mutant")
    nodes = [Node(n.op, n.params, n.inputs, raw if n.output == out else n.output) for n in mutant.graph.nodes]
    nodes = [Node(n.op, n.params, tuple(raw if i == out else i for i in n.inputs), n.output) for n in nodes]
    block = None if period is None or not fixes else blocks_of(fixes, shape, period)
    if block is None:
        patches = [(box, correction_nodes(sub, box, names, nodes, shift)) for box in fixes]
        cur = overwrite(raw, shape, patches, names, nodes)
    else:
        view = (shape[0] // period, period, *shape[1:])
        patches = [(((0, view[0]), *box), correction_nodes(sub, box, names, nodes, shift, period)) for box in block]
        cur = _reshape(overwrite(_reshape(raw, view, names, nodes), view, patches, names, nodes), shape, names,
                       nodes)
    last = nodes[-1]
    nodes[-1] = Node(last.op, last.params, last.inputs, out)
    if last.output != cur:
        raise CorrectionError("pet: the corrected output is not the last node written")  # never: overwrite ends so
    return Graph(g.inputs, g.weights, tuple(nodes), (out,), name=f"{g.name}_corrected")


def blocks_of(fixes: list[Box], shape: Shape, period: int) -> list[Box] | None:
    """Block 0's boxes (images ``[0, period)``) where ``fixes`` (over ``shape``) are exactly those repeated on
    every block of ``period`` images, with more than one block; else None. Boxes must span the channels."""
    batch = shape[0]
    if not 1 < period < batch or batch % period or any(box[1] != (0, shape[1]) for box in fixes):
        return None
    cover = np.zeros((batch, *shape[2:]), dtype=bool)
    for (n0, n1), _, *rest in fixes:
        cover[(slice(n0, n1), *(slice(a, b) for a, b in rest))] = True
    first = cover[:period]
    if not all(np.array_equal(cover[k:k + period], first) for k in range(period, batch, period)):
        return None
    return merge_boxes([((max(n0, 0), min(n1, period)), *box[1:]) for box in fixes
                        for (n0, n1) in [box[0]] if n0 < period])


class Reference:
    """The original's side of :func:`check_equal`: its random inputs and outputs, computed when first needed and
    then shared by every candidate checked against it (a convolution's mutants). ``exact``: the program the
    trials run, where it is not ``original`` (a probe of it with one channel in and out); ``original`` itself is
    then run once more in float32."""

    def __init__(self, original: Graph, trials: int = 3, seed: int = 1, exact: Graph | None = None) -> None:
        self.original, self.trials, self.seed = original, trials, seed
        self.exact = original if exact is None else exact

    @functools.cached_property
    def runs(self) -> list[tuple[dict[str, np.ndarray], np.ndarray, dict[str, np.ndarray], np.ndarray]]:
        """Per trial of the exact program: residues and its output modulo the prime, normal inputs and its float32
        output (with the fused activations)."""
        rng = np.random.default_rng(self.seed)
        out = []
        for _ in range(self.trials):
            values = random_values(self.exact, rng)
            feeds = _normal(self.exact, rng)
            out.append((values, evaluate_mod(self.exact, values), feeds, self.exact.evaluate(feeds)[0]))
        return out

    @functools.cached_property
    def whole(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Normal inputs and ``original``'s float32 output (for a check whose trials ran on a probe)."""
        feeds = _normal(self.original, np.random.default_rng(self.seed + 1))
        return feeds, self.original.evaluate(feeds)[0]


def _normal(graph: Graph, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in graph.inputs}


def _close(want: np.ndarray, got: np.ndarray) -> bool:
    return want.shape == got.shape and bool(np.allclose(want, got, rtol=1e-4, atol=1e-4))


def check_equal(original: Graph, candidate: Graph, trials: int = 3, seed: int = 1,
                reference: Reference | None = None, exact: tuple[Graph, Graph] | None = None) -> bool:
    """Whether ``candidate`` computes ``original``'s output at every position: exactly modulo the prime on
    ``trials`` random inputs (the linear cores, weights random too), and in float32 with the fused activations
    on as many random normal inputs (the graphs' own weights). ``reference``: the original's runs, where the
    caller keeps them for several candidates (its graph must be ``original``, its exact program ``exact[0]``).

    ``exact``: the original and the candidate to run these trials on instead, at full batch and size: a probe of
    both with one channel in and out, built by the same code (the moves never touch the channels and a window
    reads every channel alike, so a position is right in the probe where it is right for every channel; the
    probe's weights are the graph's first channel's). ``candidate`` itself is then run once in float32, every
    position of every channel."""
    tested = (original, candidate) if exact is None else exact
    if reference is None or reference.original is not original or reference.exact is not tested[0]:
        reference = Reference(original, trials, seed, tested[0])
    for values, want_mod, feeds, want in reference.runs:
        if not np.array_equal(want_mod, evaluate_mod(tested[1], values)):
            return False
        if not _close(want, tested[1].evaluate(feeds)[0]):
            return False
    if exact is not None:
        feeds, want = reference.whole
        return _close(want, candidate.evaluate(feeds)[0])
    return True


def correct(sub: Subprogram, mutant: Mutant, analysis: RegionAnalysis | None = None,
            max_wrong_fraction: float = MAX_WRONG_FRACTION, reference: Reference | None = None,
            probe: tuple[Subprogram, Mutant] | None = None) -> CorrectedMutant:
    """The corrected mutant of ``mutant``: its non-equal boxes (from ``analysis``, else :func:`analyse`)
    recomputed by the original, checked equal to the original at every position (:func:`check_equal`, with
    ``reference``: ``Reference(sub.graph)`` shared by the mutants of one subprogram).

    ``probe``: the subprogram and this mutant with one channel in and out; the exact test then runs on the probe
    corrected on the same boxes (``reference`` built with ``exact=`` the probe's graph).

    Raises :class:`CorrectionError` where more than ``max_wrong_fraction`` of the output is wrong, or the check
    refuses the result."""
    analysis = analysis if analysis is not None else analyse(sub.graph, mutant.graph)
    if analysis.wrong_fraction > max_wrong_fraction:
        raise CorrectionError(f"pet: {mutant.name} is wrong on {analysis.wrong_fraction:.0%} of the output "
                              f"(at most {max_wrong_fraction:.0%} is corrected)")
    fixes = analysis.wrong
    period = analysis.images  # the boxes repeat every block of the images the tests ran on
    graph = corrected_graph(sub, mutant, fixes, period=period)
    exact = None
    if probe is not None:  # the same boxes over the probe's one channel (no box cuts the channels)
        if any(box[1] != (0, sub.graph.shapes[sub.output][1]) for box in fixes):
            raise CorrectionError(f"pet: {mutant.name} has a box of part of the channels, which a probe lacks")
        narrow = [box[:1] + ((0, 1),) + box[2:] for box in fixes]
        exact = (probe[0].graph, corrected_graph(probe[0], probe[1], narrow, period=period))
    if not check_equal(sub.graph, graph, reference=reference, exact=exact):
        raise CorrectionError(f"pet: {mutant.name} corrected on {fixes} still differs from the original")
    shapes, before = graph.shapes, mutant.graph.shapes
    flops = sum(n.spec.flops_fn(n.p, [shapes[i] for i in n.inputs], shapes[n.output])
                for n in graph.nodes if ROLES.get(n.op) == "window" and n.output not in before)
    block = blocks_of(fixes, sub.graph.shapes[sub.output], period) if period is not None else None
    kernels = len(block) if block is not None else len(fixes)
    evidence = {**analysis.summary(), "mutant": mutant.name, "fixes": [list(map(list, b)) for b in fixes],
                "correction_flops": flops, "checked_exactly_on": "probe" if probe is not None else "graph",
                "corrections": kernels}
    return CorrectedMutant(sub, mutant, analysis, graph, tuple(fixes), float(flops), evidence, kernels)
