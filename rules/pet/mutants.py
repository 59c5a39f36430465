"""PET's mutation generator (Algorithm 1), depth-bounded, over one subprogram: programs of the same signature
(the activation's shape in, the output's shape out, the same weights), built from a window operator with the
original's weights and compound reshape/transpose (R/T) moves, each counting one step of depth as in PET.

A chain of window operators (:func:`~eqsat.rules.pet.program.chain_of`) is one step: its nodes in order, so a
mutant moves the data once around all of them (PET's R/T amortized over a subprogram of several operators). A
residual a window adds (:func:`~eqsat.rules.pet.program.addend`: its input that is no weight) is moved by the
moves before the window step, so the window adds it in the layout it computes in.

The moves are the layout changes of an NCHW tensor PET's families are made of: fold part of the batch into
the width or the height (one image twice as wide), cut the width or the height into tiles stacked on the
batch, and gather every ``d``-th pixel into ``d x d`` sub-images on the batch (and each one's inverse); around
one convolution, also the fold with a zero gap between the images (a pad before it) and its inverse (a split
dropping the gap's outputs after the window), which PET's fused seam correction comes to. The
window operators come with the original's parameters, or with their dilation made 1 (pads divided alike). A
mutant is any sequence of at most ``depth`` steps, no two moves in a row (they would be one R/T), holding the
window operator once, whose output has the original's shape; the original itself is left out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eqsat import ops
from eqsat.ir.graph import Graph, Node, make_node
from eqsat.ir.names import NameAllocator
from eqsat.ops import Shape
from eqsat.rules.pet.program import Subprogram

__all__ = ["Move", "Mutant", "moves_for", "moves_over", "generate_mutants", "DEFAULT_DEPTH"]

#: PET's default depth
DEFAULT_DEPTH = 4

#: nodes as (operator, parameters) of a move, or (operator, parameters, the weights it reads) of a window
Steps = list[tuple[Any, ...]]
#: the registry operators a move is written with
RESHAPE = "reshape"
TRANSPOSE = "transpose"
PAD = "pad"
SPLIT = "split"


@dataclass(frozen=True)
class Move:
    """A compound move (one step of depth): ``name`` says what it does, ``steps`` its nodes for an input shape
    (reshapes and transposes, and a gap's pad or split; ``None`` where it does not apply); ``side``:
    ``"before"`` or ``"after"`` where it only goes before or after the window step (a gap padded in goes before
    it, the gap's outputs dropped after it), else ``""``."""

    name: str
    steps: Callable[[Shape], Steps | None]
    side: str = ""


def _batch_to(axis: int, k: int) -> Move:
    """Fold the batch by ``k`` into spatial ``axis`` (2: height, 3: width): images ``k*m .. k*m+k-1`` side by side."""
    def steps(s: Shape) -> Steps | None:
        n, c, h, w = s
        if n % k:
            return None
        perm = (0, 2, 1, 3, 4) if axis == 2 else (0, 2, 3, 1, 4)
        out = (n // k, c, k * h, w) if axis == 2 else (n // k, c, h, k * w)
        return [(RESHAPE, {"shape": (n // k, k, c, h, w)}), (TRANSPOSE, {"perm": perm}),
                (RESHAPE, {"shape": out})]
    return Move(f"batch_to_{'height' if axis == 2 else 'width'}({k})", steps)


def _to_batch(axis: int, k: int) -> Move:
    """Cut spatial ``axis`` into ``k`` tiles stacked on the batch (the inverse of :func:`_batch_to`)."""
    def steps(s: Shape) -> Steps | None:
        n, c, h, w = s
        if s[axis] % k or s[axis] == k:
            return None
        if axis == 2:
            return [(RESHAPE, {"shape": (n, c, k, h // k, w)}), (TRANSPOSE, {"perm": (0, 2, 1, 3, 4)}),
                    (RESHAPE, {"shape": (n * k, c, h // k, w)})]
        return [(RESHAPE, {"shape": (n, c, h, k, w // k)}), (TRANSPOSE, {"perm": (0, 3, 1, 2, 4)}),
                (RESHAPE, {"shape": (n * k, c, h, w // k)})]
    return Move(f"{'height' if axis == 2 else 'width'}_to_batch({k})", steps)


def _gapped_batch_to(axis: int, k: int, gap: int) -> Move:
    """Fold the batch by ``k`` into spatial ``axis`` with ``gap`` zero rows or columns after each image: PET's seam
    correction fused into the main kernel (its input joined to the main one, one convolution, the result split).
    A window of stride 1 whose pads are at most ``gap`` then reads zeros across the seam, as the original reads
    its padding, so the mutant needs no correction kernel; :func:`_gapped_to_batch` drops the gap's outputs."""
    fold = _batch_to(axis, k)

    def steps(s: Shape) -> Steps | None:
        pads = [0] * 8
        pads[4 + axis] = gap  # after the image, along axis
        rest = fold.steps((*s[:axis], s[axis] + gap, *s[axis + 1:]))
        return None if rest is None else [(PAD, {"pads": tuple(pads)}), *rest]
    return Move(f"batch_to_{'height' if axis == 2 else 'width'}_gapped({k},{gap})", steps, "before")


def _gapped_to_batch(axis: int, k: int, gap: int) -> Move:
    """The inverse of :func:`_gapped_batch_to`: ``k`` images cut back onto the batch, each one's last ``gap`` rows
    or columns dropped."""
    cut = _to_batch(axis, k)

    def steps(s: Shape) -> Steps | None:
        rest = cut.steps(s)
        if rest is None or s[axis] // k <= gap:
            return None
        return [*rest, (SPLIT, {"axis": axis, "start": 0, "size": s[axis] // k - gap})]
    return Move(f"{'height' if axis == 2 else 'width'}_gapped_to_batch({k},{gap})", steps, "after")


def _phases_to_batch(d: int) -> Move:
    """Gather every ``d``-th pixel into ``d x d`` sub-images stacked on the batch (PET's dilated-conv family)."""
    def steps(s: Shape) -> Steps | None:
        n, c, h, w = s
        if h % d or w % d or h == d or w == d:
            return None
        return [(RESHAPE, {"shape": (n, c, h // d, d, w // d, d)}), (TRANSPOSE, {"perm": (0, 3, 5, 1, 2, 4)}),
                (RESHAPE, {"shape": (n * d * d, c, h // d, w // d)})]
    return Move(f"phases_to_batch({d})", steps)


def _batch_to_phases(d: int) -> Move:
    """The inverse of :func:`_phases_to_batch`: ``d x d`` sub-images interleaved back into one."""
    def steps(s: Shape) -> Steps | None:
        n, c, h, w = s
        if n % (d * d):
            return None
        return [(RESHAPE, {"shape": (n // (d * d), d, d, c, h, w)}), (TRANSPOSE, {"perm": (0, 3, 4, 1, 5, 2)}),
                (RESHAPE, {"shape": (n // (d * d), c, h * d, w * d)})]
    return Move(f"batch_to_phases({d})", steps)


def moves_for(windows: tuple[Node, ...]) -> list[Move]:
    """The moves tried around ``windows``: batch folds and spatial tiles by 2, and phase gathers by 2 and by the
    windows' dilations (:func:`moves_over`); around one window of stride 1 and some padding along an axis, also
    the fold into that axis with a gap as wide as its pads and its inverse (:func:`_gapped_batch_to`). A chain
    gets no gap: the first window's outputs in it are not zeros, so the next window's seam would still be
    wrong."""
    out = moves_over({int(d) for w in windows for d in w.p["dilations"]})
    if len(windows) == 1:
        p = windows[0].p
        for axis in (2, 3):
            gap = max(p["pads"][axis - 2], p["pads"][axis])
            if gap and p["strides"][axis - 2] == 1:
                out += [_gapped_batch_to(axis, 2, gap), _gapped_to_batch(axis, 2, gap)]
    return out


def moves_over(dilations: set[int]) -> list[Move]:
    """The R/T moves tried around windows of these ``dilations`` (:func:`moves_for`)."""
    dil = sorted({2} | {d for d in dilations if d > 1})
    return ([_batch_to(a, 2) for a in (2, 3)] + [_to_batch(a, 2) for a in (2, 3)]
            + [_phases_to_batch(d) for d in dil] + [_batch_to_phases(d) for d in dil])


def _undilated(p: dict[str, Any]) -> dict[str, Any] | None:
    """``p`` with dilation 1 and its pads divided by the dilation, or None where it has none or they don't divide."""
    dil = tuple(int(d) for d in p["dilations"])
    if not any(d > 1 for d in dil) or any(pad % dil[i % 2] for i, pad in enumerate(p["pads"])):
        return None
    return {**p, "dilations": (1, 1), "pads": tuple(pad // dil[i % 2] for i, pad in enumerate(p["pads"]))}


def _window_variants(windows: tuple[Node, ...]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The window operators' parameters a mutant may use, with a label: the originals', and dilation 1 with pads
    divided by the dilation (PET's dilated conv as a plain one), for a chain only where all have one dilation."""
    out: list[tuple[str, list[dict[str, Any]]]] = [("same", [w.p for w in windows])]
    plain = [_undilated(w.p) for w in windows]
    if all(p is not None for p in plain) and len({tuple(w.p["dilations"]) for w in windows}) == 1:
        out.append(("undilated", plain))  # type: ignore[arg-type]
    return out


def _window_label(windows: tuple[Node, ...], variant: str) -> str:
    """``conv2d``, ``conv2d[undilated]``, ``conv2d+conv2d`` (a chain), ..."""
    return "+".join(w.op if variant == "same" else f"{w.op}[{variant}]" for w in windows)


@dataclass(frozen=True)
class Mutant:
    """A mutant of a subprogram: ``graph`` has the original's signature; ``steps`` names its steps in order."""

    graph: Graph
    steps: tuple[str, ...]

    @property
    def name(self) -> str:
        """The steps joined, e.g. ``batch_to_width(2) > conv2d > width_to_batch(2)``."""
        return " > ".join(self.steps)


def _after(shape: Shape, steps: Steps) -> Shape:
    """The shape a move's ``steps`` make of ``shape`` (the registry's shape functions)."""
    for op, params, *_ in steps:
        spec = ops.get(op)
        shape = tuple(spec.shape(spec.normalize(dict(params)), [shape]))
    return shape


def _moved_shape(shape: Shape, moves: list[Move]) -> Shape | None:
    """``shape`` after ``moves`` in turn, or None where one does not apply."""
    for mv in moves:
        steps = mv.steps(shape)
        if steps is None:
            return None
        shape = _after(shape, steps)
    return shape


def generate_mutants(sub: Subprogram, depth: int = DEFAULT_DEPTH) -> list[Mutant]:
    """Every mutant of ``sub`` of at most ``depth`` steps (see the module docstring), each once, in the order of
    the depth-first enumeration; the shapes are the registry's shape functions'."""
    g = sub.graph
    windows = sub.windows
    x, out = sub.activation, sub.output
    target = g.shapes[out]
    moves = moves_for(windows)
    found: dict[tuple[str, ...], Mutant] = {}
    # a step: (label, its nodes (Steps), the move or None for the window step); a window's nodes carry the other
    # inputs they read
    Step = tuple[str, Steps, Move | None]

    def build(seq: list[Step]) -> Graph | None:
        names = NameAllocator(set(g.shapes))
        cur, nodes = x, []
        before: list[Move] = []  # the moves before the window step: its residuals are moved by them too
        moved: dict[str, str] = {}

        def residual(r: str) -> str | None:
            if r not in moved:
                src, shape = r, g.shapes[r]
                for mv in before:
                    steps = mv.steps(shape)
                    if steps is None:
                        return None
                    for op, params in steps:
                        dst = names.fresh(f"{r}_pet")
                        nodes.append(make_node(op, params, [src], dst))
                        src = dst
                    shape = _after(shape, steps)
                moved[r] = src
            return moved[r]

        for _, steps, move in seq:
            if move is None:  # the window step: the activation as moved so far is its own residual, moved
                moved[x] = cur
            for op, params, *reads in steps:
                # a window's other inputs: its weights, and a residual it adds (moved as its activation was)
                others = [i if i in g.weights else residual(i) for i in (reads[0] if reads else ())]
                if None in others:
                    return None
                dst = names.fresh(f"{out}_pet")
                nodes.append(make_node(op, params, [cur, *others], dst))
                cur = dst
            if move is not None:
                before.append(move)
        nodes[-1] = Node(nodes[-1].op, nodes[-1].params, nodes[-1].inputs, out)
        try:
            mg = Graph(g.inputs, g.weights, tuple(nodes), (out,), name=g.name)
            return mg if mg.shapes[out] == target else None
        except ValueError:
            return None

    def walk(seq: list[Step], shape: Shape, used_window: bool, last_move: bool) -> None:
        labels = tuple(label for label, _, _ in seq)
        original = labels == (_window_label(windows, "same"),)
        if used_window and shape == target and not original and labels not in found:
            if (mg := build(seq)) is not None:
                found[labels] = Mutant(mg, labels)
        if len(seq) >= depth:
            return
        if not last_move and len(shape) == 4:  # two moves in a row would be one R/T
            for mv in moves:
                if mv.side and mv.side != ("after" if used_window else "before"):
                    continue
                steps = mv.steps(shape)
                if steps is not None:
                    walk(seq + [(mv.name, steps, mv)], _after(shape, steps), used_window, True)  # type: ignore[arg-type]
        if not used_window:
            before = [mv for _, _, mv in seq if mv is not None]
            for label, params in _window_variants(windows):
                s: Shape | None = shape
                for w, p in zip(windows, params, strict=True):
                    reads = [g.shapes[i] if i in g.weights else _moved_shape(g.shapes[i], before)
                             for i in w.inputs[1:]]
                    try:
                        if any(r is None for r in reads):
                            raise ValueError("a residual the moves do not apply to")
                        s = w.spec.shape(w.spec.normalize(dict(p)), [s, *reads])
                    except ValueError:
                        s = None
                        break
                if s is not None:
                    steps = [(w.op, p, w.inputs[1:]) for w, p in zip(windows, params, strict=True)]
                    walk(seq + [(_window_label(windows, label), steps, None)], s, True, False)

    walk([], g.shapes[x], False, False)
    return list(found.values())
