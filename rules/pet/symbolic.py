"""Z3 proofs over a symbolic batch: a corrected mutant searched at a few images is right for every batch size.

The random tests decide the boxes at one batch. A rewrite written for a dynamic batch must hold at every batch
the model will be run at, so its claim is proved symbolically: for every batch ``N``, every output position
outside the corrected boxes and every kernel tap, the mutant reads the same input element as the original (or
both read padding, at every window of a chain), and the same residual element. Equal reads at every tap make
equal sums of products, whatever the inputs and weights; an element-wise activation of equal values is equal.

Each program's reads are its index maps walked back from the output: a transpose permutes the position, a
reshape regroups the few axes a split or a merge touches (flattened in the output's sizes, unflattened in the
input's), and a window reads position ``o * stride - pad + tap * dilation`` of its input, valid inside it. Only
the leading axis of a tensor grows with the batch; the others are the programs' own sizes, so every division is
by a constant. The output's image is written ``P * m + j`` (``0 <= j < P``, ``P`` the product of the factors
the reshapes change the leading axis by), so the one unbounded variable ``m`` is only ever multiplied by a
constant and drops out of every comparison: the query is linear integer arithmetic over bounded variables, which
Z3 decides. The programs are the probes (one channel in and out, :func:`eqsat.rules.pet.search.probe`); every
channel reads alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import z3

from eqsat.ir.graph import Graph, Node
from eqsat.rules.pet.program import ROLES, addend
from eqsat.rules.pet.regions import Box

__all__ = ["proved_for_any_batch", "batch_scaling"]

#: seconds Z3 may take for one proof (a corrected mutant's); past it the claim counts as not proved
TIMEOUT_MS = 20_000


#: a position: its leading index, ``a * m + e`` as ``(a, e)`` with ``m`` the one unbounded variable (``a`` a
#: constant, ``e`` bounded), and the others
Position = tuple[tuple[int, z3.ArithRef], list[z3.ArithRef]]




@dataclass
class _Reads:
    """A program's reads at one output position and one tap per window: each window's read's validity (the last
    window first), the input element the first window reads, and each residual read with the condition under
    which it is reached."""

    valid: list[z3.BoolRef]
    element: tuple[str, Position]
    residuals: list[tuple[z3.BoolRef, str, Position]]


def batch_scaling(small: Graph, large: Graph) -> int | None:
    """How many times ``large``'s batch is ``small``'s (the same program at two batches), where every tensor's
    leading axis scales so and its other axes stay; else None (the program is not affine in the batch as this
    module models it)."""
    a, b = small.shapes, large.shapes
    k = b[small.inputs[0].name][0] // a[small.inputs[0].name][0]
    if set(a) != set(b) or k < 2:
        return None
    for t, s in a.items():
        if t in small.weights:
            continue
        if len(s) != len(b[t]) or s[1:] != b[t][1:] or b[t][0] != k * s[0]:
            return None
    return k


def _flatten(rest: list[z3.ArithRef], sizes: tuple[int, ...]) -> z3.ArithRef:
    flat: z3.ArithRef = z3.IntVal(0)
    for i, size in zip(rest, sizes, strict=True):
        flat = flat * size + i
    return flat


def _unflatten(flat: z3.ArithRef, sizes: tuple[int, ...]) -> list[z3.ArithRef]:
    out: list[z3.ArithRef] = []
    for size in reversed(sizes):
        out.insert(0, z3.simplify(flat % size))
        flat = flat / size  # z3's integer division by a constant: linear
    return out


def _groups(shape: tuple[int, ...], src: tuple[int, ...]) -> list[tuple[int, int, int, int]] | None:
    """A reshape's axes in groups of equal size: ``(i0, i1, j0, j1)``, axes ``[i0, i1)`` of ``shape`` holding
    what axes ``[j0, j1)`` of ``src`` do (the leading axes, which scale with the batch, in the first group)."""
    out, i, j = [], 0, 0
    while i < len(shape) or j < len(src):
        i0, j0, a, b = i, j, 1, 1
        while True:
            if a <= b and i < len(shape):
                a, i = a * shape[i], i + 1
            elif j < len(src):
                b, j = b * src[j], j + 1
            else:
                return None
            if a == b and (i0 > 0 or (i > 0 and j > 0)):  # the first group holds both leading axes
                while i < len(shape) and shape[i] == 1 and (j == len(src) or src[j] != 1):
                    i += 1
                while j < len(src) and src[j] == 1 and (i == len(shape) or shape[i] != 1):
                    j += 1
                break
        out.append((i0, i, j0, j))
    return out


def _reshaped_back(p: Position, shape: tuple[int, ...], src: tuple[int, ...]) -> Position | None:
    """Position ``p`` of a reshape's output (``shape``) as the position of its input (``src``) holding the same
    element, group by group of axes of equal size (:func:`_groups`: a split or a merge of a few axes, so the
    divisions are by their sizes); None where a division would not keep the unbounded variable's coefficient
    whole."""
    groups = _groups(shape, src)
    if groups is None:
        return None
    (a, e), rest = p
    index = [z3.IntVal(0), *rest]
    lead: tuple[int, z3.ArithRef] = (a, e)
    out: list[z3.ArithRef] = []
    for g, (i0, i1, j0, j1) in enumerate(groups):
        inner_out, inner_in = math.prod(shape[max(i0, 1):i1]), math.prod(src[max(j0, 1):j1])
        flat = _flatten(index[max(i0, 1):i1], shape[max(i0, 1):i1])  # the group's offset past its leading index
        if g == 0:  # a m + e, times the rest of the group, plus the offset; then split at the input's leading axis
            if (a * inner_out) % inner_in:
                return None
            low = z3.simplify(e * inner_out + flat)
            lead = ((a * inner_out) // inner_in, z3.simplify(low / inner_in))
            out += _unflatten(low % inner_in, src[1:j1])
        else:
            out += _unflatten(flat, src[j0:j1])
    return lead, out


def _reads(graph: Graph, taps: list[tuple[z3.ArithRef, z3.ArithRef]], pos: Position) -> _Reads | None:
    """``graph``'s reads at output position ``pos`` with ``taps[k]`` the tap of its k-th window from the output;
    None where it holds an operator this module does not model."""
    shapes, producers = graph.shapes, graph.producers
    inputs = {i.name for i in graph.inputs}
    valid: list[z3.BoolRef] = []
    residuals: list[tuple[z3.BoolRef, str, Position]] = []

    def back(t: str, p: Position) -> tuple[str, Position] | None:
        """Walk position ``p`` of ``t`` back through moves to an input or a window's output."""
        while t not in inputs and ROLES.get(producers[t].op) == "move":
            n = producers[t]
            src = n.inputs[0]
            if n.spec.permutes and n.p[n.spec.permutes][0] == 0:  # the leading axis stays
                perm = n.p[n.spec.permutes]
                rest: list[z3.ArithRef] = [p[0]] * (len(perm) - 1)
                for k, axis in enumerate(perm[1:]):
                    rest[axis - 1] = p[1][k]
                p = (p[0], rest)
            elif n.spec.view and (q := _reshaped_back(p, shapes[t], shapes[src])) is not None:
                p = q
            else:
                return None
            t = src
        return t, p

    reached: z3.BoolRef = z3.BoolVal(True)
    cur = back(graph.outputs[0], pos)
    level = 0
    while cur is not None and cur[0] not in inputs:
        t, (lead, (_, oh, ow)) = cur
        n = producers[t]
        if ROLES.get(n.op) != "window" or level >= len(taps):
            return None
        if (r := addend(n)) is not None:
            res = back(r, cur[1])
            if res is None or res[0] not in inputs:
                return None
            residuals.append((reached, *res))
        x = n.inputs[0]
        xs, (dh, dw) = shapes[x], taps[level]
        st, pads, dil = n.p["strides"], n.p["pads"], n.p["dilations"]
        row = z3.simplify(oh * st[0] - pads[0] + dh * dil[0])
        col = z3.simplify(ow * st[1] - pads[1] + dw * dil[1])
        ok = z3.And(row >= 0, row < xs[2], col >= 0, col < xs[3])
        valid.append(ok)
        reached = z3.And(reached, ok)
        cur = back(x, (lead, [z3.IntVal(0), row, col]))  # a probe: one channel
        level += 1
    if cur is None or level != len(taps):
        return None
    return _Reads(valid, cur, residuals)


def _leading_factor(graph: Graph, node: Node) -> int:
    """How many times a reshape makes its leading axis longer or shorter (1: neither)."""
    shapes = graph.shapes
    per_out, per_in = math.prod(shapes[node.output][1:]), math.prod(shapes[node.inputs[0]][1:])
    return max(per_out, per_in) // min(per_out, per_in)


def _same(a: Position, b: Position) -> z3.BoolRef:
    """The same position: for every ``m``, so the coefficients of ``m`` must be the same."""
    if a[0][0] != b[0][0]:
        return z3.BoolVal(False)
    return z3.And(a[0][1] == b[0][1], *[x == y for x, y in zip(a[1], b[1], strict=True)])


def proved_for_any_batch(original: Graph, mutant: Graph, fixes: list[Box], scale: int) -> bool:
    """Whether, for every batch, ``mutant`` reads what ``original`` reads at every output position outside
    ``fixes`` (boxes spanning the batch and the channels, as every correction of a dynamic batch does) and every
    tap: Z3 finds no batch, position and tap where they differ. Both programs are probes (one channel) built at
    a batch of ``scale`` images; at a batch of ``N`` images each leading axis is ``N / scale`` times its size
    here (a whole number for every ``N``: each is a multiple of ``scale``) and the other axes are the same
    (:func:`batch_scaling` checks that at two batches), so the claim is over every image of every batch."""
    shapes = original.shapes
    out = original.outputs[0]
    if any(s[0] % scale for g in (original, mutant) for t, s in g.shapes.items() if t not in g.weights):
        return False
    if any(box[0] != (0, shapes[out][0]) for box in fixes):  # a correction of part of the batch
        return False
    windows = [n for n in original.nodes if ROLES.get(n.op) == "window"][::-1]  # from the output back
    taps = [(z3.Int(f"dh{k}"), z3.Int(f"dw{k}")) for k in range(len(windows))]
    # the output's image is period * m + j (0 <= j < period): any image of any batch. The period is the product
    # of the factors the programs' reshapes change the leading axis by, so each division on the way back keeps
    # m's coefficient whole, and m never meets one
    period = math.prod(_leading_factor(g, n) for g in (original, mutant) for n in g.nodes if n.spec.view)
    j, h, w = z3.Ints("j h w")
    pos = ((period, j), [z3.IntVal(0), h, w])
    got = [_reads(g, taps, pos) for g in (original, mutant)]
    if got[0] is None or got[1] is None:
        return False
    a, b = got
    if a.element[0] != b.element[0] or [r[1] for r in a.residuals] != [r[1] for r in b.residuals]:
        return False
    # the same reads: each window's validity alike, and where all are valid the same element; each residual
    # alike where it is reached
    match = _same(a.element[1], b.element[1])
    for va, vb in zip(reversed(a.valid), reversed(b.valid), strict=True):
        match = z3.And(va == vb, z3.Implies(va, match))
    for (ra, _, pa), (rb, _, pb) in zip(a.residuals, b.residuals, strict=True):
        match = z3.And(match, ra == rb, z3.Implies(ra, _same(pa, pb)))
    outside = z3.Not(z3.Or([z3.And(h >= box[2][0], h < box[2][1], w >= box[3][0], w < box[3][1]) for box in fixes]
                           or [z3.BoolVal(False)]))
    bounds = [j >= 0, j < period, h >= 0, h < shapes[out][2], w >= 0, w < shapes[out][3]]
    for (dh, dw), node in zip(taps, windows, strict=True):
        kh, kw = original.shapes[node.inputs[1]][2:]
        bounds += [dh >= 0, dh < kh, dw >= 0, dw < kw]
    solver = z3.SolverFor("QF_LIA")  # linear integer arithmetic: several times faster than the default here
    solver.set("timeout", TIMEOUT_MS)
    solver.add(*bounds, outside, z3.Not(match))
    return solver.check() == z3.unsat
