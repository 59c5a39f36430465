"""PET over a whole graph: every window node's subprogram (the node alone, and the chain of windows ending at it),
its mutants, their region analysis and corrections, kept where the corrected mutant passes the check, as
:class:`PetRewrite` s the engine adds to the e-graph beside the node (each an alternative computation of the
node's tensor, fully equivalent)."""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from eqsat.ir.graph import Alternative, Graph, Node, TensorInfo, make_node
from eqsat.ir.names import NameAllocator
from eqsat.ir.symbols import Symbols, graph_symbols
from eqsat.rules.pet.corrections import (
    MAX_WRONG_FRACTION,
    CorrectedMutant,
    CorrectionError,
    Reference,
    correct,
    corrected_graph,
)
from eqsat.rules.pet.mutants import DEFAULT_DEPTH, Mutant, generate_mutants
from eqsat.rules.pet.program import (
    ROLES,
    NotMultiLinear,
    Subprogram,
    addend,
    chain_of,
    footprint,
    image_elements,
    subprogram_of,
)
from eqsat.rules.pet.regions import DEFAULT_TESTS, RegionAnalysis, analyse, repeats_along_batch
from eqsat.rules.pet.symbolic import batch_scaling, proved_for_any_batch

__all__ = ["PetRewrite", "find_rewrites", "chosen_rewrites", "subprograms", "PET_RULE_PREFIX", "DEFAULT_CHAIN",
           "BATCH_PROXY", "MAX_FOOTPRINT_BYTES", "footprint_bytes"]

#: the longest chain of window nodes one subprogram holds (2: a convolution and the one it reads)
DEFAULT_CHAIN = 2
#: the most memory one footprint of a probe may take (a chain's at batch 16 and 224x224: 578 MiB)
MAX_FOOTPRINT_BYTES = 1 << 30

#: the provenance name of a PET rewrite starts with this (``pet:<the mutant's steps>``)
PET_RULE_PREFIX = "pet:"


@dataclass(frozen=True)
class PetRewrite:
    """A corrected mutant of one node of a graph: ``nodes`` compute the node's ``tensor`` again from the graph's
    own tensors (intermediate names fresh in the graph), the last one writing ``tensor``; ``name`` is its rule
    name in the e-graph's provenance; ``evidence`` the region analysis and the corrections (plain data);
    ``fixes`` the correction kernels (one per wrong box, or per box of a block of images all blocks repeat)."""

    tensor: str
    name: str
    nodes: tuple[Node, ...]
    correction_flops: float
    fixes: int
    evidence: dict[str, object] = field(default_factory=dict)
    #: the mutant's own window nodes, each as (operator, parameters, weights read, activation shape): a graph
    #: holding nodes like them holds this rewrite (:func:`chosen_rewrites`)
    windows: tuple[tuple[object, ...], ...] = ()

    @property
    def alternative(self) -> Alternative:
        """The rewrite as the engine adds it to the e-graph."""
        return Alternative(self.tensor, self.nodes, self.name)


def _renamed(nodes: tuple[Node, ...], keep: set[str], names: NameAllocator) -> tuple[Node, ...]:
    """``nodes`` with every tensor they compute but the last renamed fresh in the host graph."""
    ren: dict[str, str] = {}
    out = []
    for k, n in enumerate(nodes):
        dst = n.output if k == len(nodes) - 1 or n.output in keep else ren.setdefault(n.output, names.fresh(n.output))
        out.append(Node(n.op, n.params, tuple(ren.get(i, i) for i in n.inputs), dst))
    return tuple(out)


def probe(sub: Subprogram) -> Subprogram:
    """``sub`` with one input and one output channel: the window and the moves read every channel alike (the moves
    regroup batch, height and width only), so each output channel's footprint is the probe's, at a fraction of the
    size (a 64-channel 3x3 convolution's footprint has 64 x 576 entries per pixel, its probe's 9)."""
    g = sub.graph
    weights = {k: w[(slice(0, 1),) * min(2, w.ndim)] for k, w in g.weights.items()}
    inputs = tuple(TensorInfo(i.name, (i.shape[0], 1, *i.shape[2:]), i.dtype) for i in g.inputs)  # residuals too
    # a grouped window's group of one channel reads one channel: a plain window in the probe
    nodes = tuple(make_node(n.op, {**n.p, "groups": 1}, n.inputs, n.output) if n.p.get("groups", 1) != 1 else n
                  for n in g.nodes)
    return Subprogram(Graph(inputs, weights, nodes, g.outputs, name=g.name), sub.node)


def at_batch(sub: Subprogram, batch: int) -> Subprogram:
    """``sub`` on a batch of ``batch`` images (a window node's parameters do not depend on the batch)."""
    g = sub.graph
    inputs = tuple(TensorInfo(i.name, (batch, *i.shape[1:]), i.dtype) for i in g.inputs)
    return Subprogram(Graph(inputs, g.weights, g.nodes, g.outputs, name=g.name), sub.node)


class _AtBatch:
    """One subprogram at one batch size: its mutants and its probe's, by name, and the probes' footprints, each
    built when first asked for (a batch's analysis may need none of the smaller batches)."""

    def __init__(self, sub: Subprogram, depth: int, mutants: list[Mutant] | None = None) -> None:
        self.sub, self.depth, self.probed = sub, depth, probe(sub)
        self._prints: dict[str, np.ndarray] = {}
        if mutants is not None:  # the caller's, already generated
            self.mutants = {m.name: m for m in mutants}

    @functools.cached_property
    def mutants(self) -> dict[str, Mutant]:
        """The subprogram's mutants by name."""
        return {m.name: m for m in generate_mutants(self.sub, self.depth)}

    @functools.cached_property
    def small(self) -> dict[str, Mutant]:
        """The probe's mutants by name."""
        return {m.name: m for m in generate_mutants(self.probed, self.depth)}

    def footprint(self, name: str) -> np.ndarray:
        """The probe's footprint of the mutant ``name`` ("": of the original)."""
        if name not in self._prints:
            self._prints[name] = footprint(self.probed.graph if not name else self.small[name].graph)
        return self._prints[name]


def subprograms(graph: Graph, chain: int = DEFAULT_CHAIN) -> list[Subprogram]:
    """The subprograms of ``graph`` PET searches, in the graph's order: each window node alone, then each chain of
    2 to ``chain`` window nodes ending at it."""
    out = []
    for node in graph.nodes:
        if (sub := subprogram_of(graph, node)) is not None:
            out.append(sub)
            out.extend(c for n in range(2, chain + 1) if (c := chain_of(graph, node, n)) is not None)
    return out


def find_rewrites(graph: Graph, depth: int = DEFAULT_DEPTH, tests: int = DEFAULT_TESTS,
                  max_wrong_fraction: float = MAX_WRONG_FRACTION, deadline: float | None = None,
                  progress: Callable[[str], None] | None = None, chain: int = DEFAULT_CHAIN,
                  max_footprint_bytes: int = MAX_FOOTPRINT_BYTES) -> list[PetRewrite]:
    """Every corrected mutant of every subprogram of ``graph`` (:func:`subprograms`; see :mod:`eqsat.rules.pet`)
    that is wrong on at most ``max_wrong_fraction`` of its output before correction and equal to the original
    after it.

    Subprograms of one configuration (operators, parameters, shapes) share their mutants' region analyses, which
    random weights decide; each corrected mutant is still checked with its own nodes' weights. They are searched
    smallest first (their probe's footprint per image). With ``deadline`` (a :func:`time.perf_counter` time) no
    subprogram is begun past it, nor one that the time per footprint byte so far says would end past it, and
    ``progress`` hears how many were left.

    A dynamic batch (a graph with symbols, :mod:`eqsat.ir.symbols`, at its generic size): the subprogram is
    searched at :data:`BATCH_PROXY` images, and a corrected mutant is kept where each image is decided alone (its
    footprints repeat every image) and corrected alike (every box spans the batch), then written for the batch
    the symbol stands for. A subprogram over another dynamic axis is left out (its boxes would move with the
    size), and so is one whose probe's footprint would take more than ``max_footprint_bytes``; ``progress``
    hears how many."""
    names = NameAllocator(set(graph.shapes))
    found: list[PetRewrite] = []
    analyses: dict[tuple[object, ...], dict[str, RegionAnalysis | None]] = {}
    proofs: dict[tuple[object, ...], bool] = {}  # by configuration, mutant and boxes: the weights play no part
    symbols = graph_symbols(graph)
    # the smallest first (a probe's footprint per image): a deadline then leaves out the largest, which cost most
    sized = sorted(((footprint_bytes(sub), sub) for sub in subprograms(graph, chain)),
                   key=lambda pair: pair[0] / pair[1].graph.inputs[0].shape[0])
    dynamic = large = 0
    spent, done = 0.0, 0  # seconds and footprint bytes of the subprograms searched so far: the rate a next one
    for k, (size, sub) in enumerate(sized):
        now = time.perf_counter()
        # none is begun past the deadline, nor one the rate so far says would end past it (the rest are larger)
        if deadline is not None and (now > deadline or (done and now + spent / done * size > deadline)):
            if progress is not None:
                progress(f"pet: stopped at its deadline, {len(sized) - k} of {len(sized)} subprograms left")
            break
        axes = _symbolic_axes(sub, symbols)
        if axes - {0}:
            dynamic += 1
            continue
        if axes:
            proxy = at_batch(sub, BATCH_PROXY)
            full = {m.name: m for m in generate_mutants(sub, depth)}
            fixed_all = [f for c in _corrected(proxy, depth, tests, max_wrong_fraction, analyses)
                         if (f := _for_any_batch(sub, full, c, proofs)) is not None]
        elif size > max_footprint_bytes:
            large += 1
            continue
        else:
            fixed_all = _corrected(sub, depth, tests, max_wrong_fraction, analyses)
            spent, done = spent + time.perf_counter() - now, done + size
        for fixed in fixed_all:
            nodes = _renamed(fixed.nodes, set(sub.graph.shapes) - {sub.output}, names)
            found.append(PetRewrite(sub.node.output, PET_RULE_PREFIX + fixed.mutant.name, nodes,
                                    fixed.correction_flops, fixed.corrections, fixed.evidence,
                                    _windows_of(fixed.mutant.graph)))
    if dynamic and progress is not None:
        progress(f"pet: {dynamic} of {len(sized)} subprograms over a dynamic axis other than the batch left out "
                 "(their boxes would move with its size)")
    if large and progress is not None:
        progress(f"pet: {large} of {len(sized)} subprograms left out: a footprint would take more than "
                 f"{max_footprint_bytes / 2**20:.3g} MiB")
    return found


def footprint_bytes(sub: Subprogram) -> int:
    """The bytes of the footprint of ``sub``'s probe (one channel): an int64 per output position and tap; a
    window over a window's output reads its own taps, each with a mark and the taps before it, and a residual
    it adds one more."""
    shapes = sub.graph.shapes
    n, _, h, w = shapes[sub.output]
    taps = 0
    for node in sub.windows:
        kh, kw = shapes[node.inputs[1]][2:]
        taps = (kh * kw * (1 + taps) if taps else kh * kw) + (addend(node) is not None)
    return 8 * n * h * w * taps


#: the images a subprogram of a dynamic batch is searched at (odd: a fold of image pairs needs an even batch)
BATCH_PROXY = 3


def _symbolic_axes(sub: Subprogram, symbols: Symbols) -> set[int]:
    """The axes of ``sub``'s inputs or output whose size stands for a symbol's (a dynamic axis)."""
    if not symbols:
        return set()
    shapes = sub.graph.shapes
    return {ax for t in (sub.activation, *sub.residuals, sub.output) for ax, v in enumerate(shapes[t])
            if not isinstance(symbols.decode(v), int)}


def _corrected(sub: Subprogram, depth: int, tests: int, max_wrong_fraction: float,
               analyses: dict[tuple[object, ...], dict[str, RegionAnalysis | None]]) -> list[CorrectedMutant]:
    """``sub``'s corrected mutants; ``analyses`` holds the region analyses by configuration, shared."""
    mutants = generate_mutants(sub, depth)
    config = _config(sub)
    at = _AtBatch(sub, depth, mutants)
    if config not in analyses:
        fewer = _fewer_images(sub, depth)
        analyses[config] = {m.name: _analysis(at, m.name, tests, fewer) for m in mutants}
    # the original's runs, for the checks of all its corrected mutants: exactly on the probe where it has the
    # mutant, else on the subprogram itself
    references = {True: Reference(sub.graph, exact=at.probed.graph), False: Reference(sub.graph)}
    out = []
    for mutant in mutants:
        analysis = analyses[config].get(mutant.name)
        if analysis is None:
            continue
        small = at.small.get(mutant.name)
        try:
            out.append(correct(sub, mutant, analysis, max_wrong_fraction, references[small is not None],
                               None if small is None else (at.probed, small)))
        except (CorrectionError, NotMultiLinear):
            continue
    return out


def _config(sub: Subprogram) -> tuple[object, ...]:
    """What a subprogram's analyses depend on: its windows' operators, parameters and input shapes, and which
    of its inputs each one adds (the activation itself, or another: the inputs PET's bound counts)."""
    inputs = [i.name for i in sub.graph.inputs]
    return tuple((n.op, n.params, tuple(sub.graph.shapes[i] for i in n.inputs),
                  None if (r := addend(n)) is None else inputs.index(r)) for n in sub.windows)


def _for_any_batch(sub: Subprogram, mutants: dict[str, Mutant], fixed: CorrectedMutant,
                   proofs: dict[tuple[object, ...], bool]) -> CorrectedMutant | None:
    """``fixed`` (a corrected mutant of ``sub`` at :data:`BATCH_PROXY` images) written for ``sub``'s own batch,
    where each image was decided alone and every correction spans the batch; else None. Its correction FLOPs
    are one image's."""
    if fixed.analysis.images != 1 or fixed.mutant.name not in mutants:
        return None
    if any(box[0] != (0, BATCH_PROXY) for box in fixed.fixes):
        return None
    key = (_config(fixed.sub), fixed.mutant.name, fixed.fixes)
    if key not in proofs:
        proofs[key] = _proved_for_any_batch(fixed)
    if not proofs[key]:
        return None
    batch = sub.graph.inputs[0].shape[0]
    fixes = tuple(((0, batch), *box[1:]) for box in fixed.fixes)
    mutant = mutants[fixed.mutant.name]
    evidence = {**fixed.evidence, "fixes": [list(map(list, b)) for b in fixes], "searched_at_batch": BATCH_PROXY,
                "batch": "dynamic", "correction_flops": fixed.correction_flops / BATCH_PROXY,
                "proved_for_any_batch": "z3: the same reads outside the corrected boxes at every batch"}
    return dataclasses.replace(fixed, sub=sub, mutant=mutant, graph=corrected_graph(sub, mutant, list(fixes)),
                               fixes=fixes, correction_flops=fixed.correction_flops / BATCH_PROXY,
                               evidence=evidence)


def _proved_for_any_batch(fixed: CorrectedMutant) -> bool:
    """Whether Z3 proves ``fixed`` (at :data:`BATCH_PROXY` images) right for every batch: its probe reads what the
    original's probe reads outside the corrected boxes (:func:`~eqsat.rules.pet.symbolic.proved_for_any_batch`),
    both programs scaling with the batch as the proof models them (checked at twice the images)."""
    name, small = fixed.mutant.name, probe(fixed.sub)
    large = probe(at_batch(fixed.sub, 2 * BATCH_PROXY))
    ms, ml = ({m.name: m for m in generate_mutants(p)} for p in (small, large))
    if name not in ms or name not in ml:
        return False
    if batch_scaling(small.graph, large.graph) != 2 or batch_scaling(ms[name].graph, ml[name].graph) != 2:
        return False
    return proved_for_any_batch(small.graph, ms[name].graph, list(fixed.fixes), BATCH_PROXY)


def _fewer_images(sub: Subprogram, depth: int) -> list[_AtBatch]:
    """``sub`` on each proper divisor of its batch, fewest images first (their mutants built when first needed)."""
    batch = sub.graph.inputs[0].shape[0]
    return [_AtBatch(at_batch(sub, r), depth) for r in range(1, batch) if batch % r == 0]


def _analysis(full: _AtBatch, name: str, tests: int, fewer: Sequence[_AtBatch] = ()) -> RegionAnalysis | None:
    """The region analysis of ``full``'s mutant ``name``, from the probes' footprints where the probe has the same
    mutant, its random tests run on the probes (every channel reads alike); None where the programs are not
    multi-linear as the analysis needs. The tests run on the fewest images whose footprints both programs' repeat
    along the batch (``fewer``: :func:`_fewer_images`), if any."""
    sub, mutant = full.sub, full.mutants[name]
    try:
        if name not in full.small:  # a grouped window's full footprint reads more than it does: none then
            grouped = any(n.p.get("groups", 1) != 1 for n in sub.windows)
            return None if grouped else analyse(sub.graph, mutant.graph, tests)
        prints = (full.footprint(""), full.footprint(name))
        image = image_elements(full.probed.graph)
        for f in fewer:
            if name in f.small and all(repeats_along_batch(whole, f.footprint(n), image)
                                       for whole, n in zip(prints, ("", name), strict=True)):
                return analyse(sub.graph, mutant.graph, tests, prints=prints,
                               reduced=(f.probed.graph, f.small[name].graph))
        return analyse(sub.graph, mutant.graph, tests, prints=prints,
                       reduced=(full.probed.graph, full.small[name].graph))
    except NotMultiLinear:
        return None


def _signature(n: Node, graph: Graph, shapes: dict[str, tuple[int, ...]]) -> tuple[object, ...]:
    """A node of ``graph`` as :attr:`PetRewrite.windows` holds it: operator, parameters, weights, activation shape."""
    return (n.op, n.params, tuple(i for i in n.inputs if i in graph.weights), shapes[n.inputs[0]])


def _windows_of(graph: Graph) -> tuple[tuple[object, ...], ...]:
    """The signatures of ``graph``'s window nodes."""
    shapes = graph.shapes
    return tuple(_signature(n, graph, shapes) for n in graph.nodes if ROLES.get(n.op) == "window")


def chosen_rewrites(graph: Graph, rewrites: list[PetRewrite]) -> list[PetRewrite]:
    """The ``rewrites`` a graph (an optimized one) holds: those whose mutant's window nodes it has, the same
    operators and parameters reading the same weights from activations of the mutant's shapes (the original's
    nodes read other shapes or have other parameters: a mutant has at least one move or another window). A
    window node counts for one rewrite only, the one of the longest chain (a chain's mutant holds the window a
    mutant of its first node alone would)."""
    shapes = graph.shapes
    present = {_signature(n, graph, shapes) for n in graph.nodes if n.inputs}
    claimed: set[tuple[object, ...]] = set()
    chosen: set[int] = set()
    for k in sorted(range(len(rewrites)), key=lambda j: -len(rewrites[j].windows)):
        ws = rewrites[k].windows
        if ws and all(w in present and w not in claimed for w in ws):
            chosen.add(k)
            claimed.update(ws)
    return [r for k, r in enumerate(rewrites) if k in chosen]
