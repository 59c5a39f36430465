"""Multi-linear subprograms (PET's MLTPs) over registry operators: what they are made of, their exact evaluation
modulo a prime, and their footprints (which activation element each output position reads through each tap).

A subprogram is an IR :class:`~eqsat.ir.graph.Graph` with one activation input (the first), the residuals its
windows add (:func:`addend`), its weights and one output, built only from the operators of :data:`ROLES`: window
operators (convolutions, one with its residual add) and operators that move data (reshape, transpose, split,
concat, zero padding). A host graph's subprogram is one convolution, or a chain of them (each reading the one
before), which PET's mutants then transform as one (one R/T around two convolutions).

A fused activation (``act``) is element-wise. The analysis runs on the linear core (``act`` 0), and what it
decides holds with the activations on: where the two linear cores agree as polynomials of the inputs and weights,
every product of the kind ``w2[t2] w1[t1] x[e]`` appears in both, so each tap of the last window reads an
intermediate position whose own taps read the same elements; an element-wise function of equal intermediates is
equal, so the outputs are too (:func:`footprint` marks which taps read an intermediate position at all, since one
whose taps all read padding still holds the bias).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from eqsat.ir.graph import Graph, Node, TensorInfo, make_node
from eqsat.ops.conv import patches

__all__ = ["PRIME", "ROLES", "Subprogram", "subprogram_of", "chain_of", "linear_core", "random_values", "evaluate_mod",
           "footprint", "NotMultiLinear", "addend", "image_elements"]

#: The field the random tests compute in: 2^13 - 1, a Mersenne prime. Values below it, products below 2^26 and
#: sums of up to 2^27 products are exact in float64, so the tests run on BLAS (PET uses 2^31 - 1 in integers).
PRIME = 8191

#: PET's operator set as far as this slice handles it (PET's Table 1 has more), and each one's role in a
#: footprint: ``window`` reads a window of its first input per output position (a convolution), ``move`` only
#: moves data, ``padding`` moves it and reads nothing at its borders (zero padding). A window operator that is a
#: fused form (``OpSpec.fuses``: conv2d_add, a convolution and the residual add after it) adds its last input at
#: each output position (:func:`addend`); the sum stays linear in every input.
ROLES: dict[str, str] = {"conv2d": "window", "conv2d_add": "window", "reshape": "move", "transpose": "move",
                         "split": "move", "concat": "move", "pad": "padding"}


class NotMultiLinear(ValueError):
    """The graph holds an operator outside :data:`ROLES`, or a shape of one the analysis does not handle."""


@dataclass(frozen=True)
class Subprogram:
    """One multi-linear subprogram: ``graph`` reads the activation ``graph.inputs[0]``, the residuals its windows
    add (the other inputs, :attr:`residuals`) and weights, and computes ``graph.outputs[0]``; ``node`` is the node
    of the host graph whose tensor it computes (the last of a chain; the tensor names are the host's)."""

    graph: Graph
    node: Node

    @property
    def windows(self) -> tuple[Node, ...]:
        """The window nodes, in order (one, or a chain each reading the one before)."""
        return tuple(n for n in self.graph.nodes if ROLES.get(n.op) == "window")

    @property
    def activation(self) -> str:
        """The name of the activation input."""
        return self.graph.inputs[0].name

    @property
    def residuals(self) -> tuple[str, ...]:
        """The names of the inputs a window adds at each of its output positions (none for plain convolutions)."""
        return tuple(i.name for i in self.graph.inputs[1:])

    @property
    def output(self) -> str:
        """The name of the output tensor."""
        return self.graph.outputs[0]


def addend(node: Node) -> str | None:
    """The input a window node of :data:`ROLES` adds at each output position (a fused residual add's: the fused
    form's last input, ``OpSpec.fuses``), or None."""
    return node.inputs[-1] if ROLES.get(node.op) == "window" and node.spec.fuses is not None else None


def _is_window(graph: Graph, node: Node) -> bool:
    """Whether ``node`` is a window operator of :data:`ROLES` over an activation and weights (and an activation it
    adds, :func:`addend`). Grouped convolutions are windows too: each output channel reads its group's channels
    with the same taps, as a plain convolution reads all of them."""
    if ROLES.get(node.op) != "window":
        return False
    x, *rest = node.inputs
    r = addend(node)
    return (x not in graph.weights and (r is None or r not in graph.weights)
            and all(i in graph.weights for i in rest if i != r))


def _subprogram(graph: Graph, chain: list[Node]) -> Subprogram | None:
    x, shapes = chain[0].inputs[0], graph.shapes
    inner = {n.output for n in chain}
    residuals = list(dict.fromkeys(r for n in chain if (r := addend(n)) is not None and r != x))
    if inner & set(residuals):  # a window adding what the chain computes: not one activation in
        return None
    weights = {r: graph.weights[r] for n in chain for r in n.inputs[1:] if r in graph.weights}
    inputs = tuple(TensorInfo(t, shapes[t], graph.dtypes[t]) for t in (x, *residuals))
    sub = Graph(inputs, weights, tuple(chain), (chain[-1].output,),
                name=f"pet_{chain[-1].output}" + (f"_chain{len(chain)}" if len(chain) > 1 else ""))
    return Subprogram(sub, chain[-1])


def subprogram_of(graph: Graph, node: Node) -> Subprogram | None:
    """The subprogram of one window node of ``graph`` over its activation and weights, or ``None`` where the node
    is not a window operator of :data:`ROLES` (or reads no activation and weights)."""
    return _subprogram(graph, [node]) if _is_window(graph, node) else None


def chain_of(graph: Graph, node: Node, length: int = 2) -> Subprogram | None:
    """The subprogram of the ``length`` window nodes of ``graph`` that end at ``node``, each reading the output of
    the one before (fused activations between them allowed), or ``None`` where there is no such chain. The chain's
    inner tensors may have other readers: the subprogram only computes ``node``'s tensor again."""
    chain = [node]
    while len(chain) < length and _is_window(graph, chain[0]):  # each node checked before the one it reads joins
        before = graph.producers.get(chain[0].inputs[0])
        if before is None:
            return None
        chain.insert(0, before)
    return _subprogram(graph, chain) if len(chain) == length and _is_window(graph, chain[0]) else None


def linear_core(graph: Graph) -> Graph:
    """``graph`` with every fused activation off: the multi-linear program the theorems speak of."""
    nodes = tuple(make_node(n.op, {**n.p, "act": 0}, n.inputs, n.output) if n.p.get("act", 0) else n
                  for n in graph.nodes)
    return Graph(graph.inputs, graph.weights, nodes, graph.outputs, graph.name)


def random_values(graph: Graph, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Uniform random residues modulo :data:`PRIME` for every input and weight of ``graph`` (PET's Theorem 2
    draws all of a program's inputs, weights included)."""
    shapes = graph.shapes
    names = [i.name for i in graph.inputs] + list(graph.weights)
    return {n: rng.integers(0, PRIME, size=shapes[n]).astype(np.float64) for n in names}


def evaluate_mod(graph: Graph, values: Mapping[str, np.ndarray]) -> np.ndarray:
    """The output of ``graph``'s linear core on ``values`` (residues), exactly, modulo :data:`PRIME`."""
    env = dict(values)
    for n in linear_core(graph).nodes:
        if n.op not in ROLES:
            raise NotMultiLinear(f"pet: {n.op} ({n.output!r}) is not one of the multi-linear operators handled")
        args = [env[i] for i in n.inputs]
        if ROLES[n.op] == "window":
            reduction = int(np.prod(graph.shapes[n.inputs[1]][1:]))
            if reduction * (PRIME - 1) ** 2 >= 2 ** 53:
                raise NotMultiLinear(f"pet: {n.output!r} sums too many products to stay exact in float64")
            env[n.output] = np.mod(n.spec.numpy_fn(n.p, *args), PRIME)
        else:  # a move only moves residues (zero padding adds zeros): they stay residues
            env[n.output] = n.spec.numpy_fn(n.p, *args)
    return env[graph.outputs[0]]


#: a footprint's entry for a tap that reads a position of a window's output (padding there reads 0)
READS_INTERMEDIATE = -1


def image_elements(graph: Graph) -> int:
    """The elements one image holds over all of ``graph``'s inputs: the step between images in a footprint's
    element ids (:func:`footprint`)."""
    return sum(int(np.prod(i.shape[1:])) for i in graph.inputs)


def _input_ids(graph: Graph) -> dict[str, np.ndarray]:
    """Each input's element ids (flat index plus one, a tap axis of one), image by image over all inputs: image
    ``n`` of every input lies in ``[n * image, (n + 1) * image)``, so a batch block's ids are block 0's moved by
    its images (:func:`~eqsat.rules.pet.regions.repeats_along_batch`)."""
    batch = {i.shape[0] for i in graph.inputs}
    if len(batch) != 1:
        raise NotMultiLinear(f"pet: inputs of different batches {sorted(batch)}")
    (n,), image, base = batch, image_elements(graph), 0
    out = {}
    for i in graph.inputs:
        per = int(np.prod(i.shape[1:]))
        ids = np.arange(n, dtype=np.int64)[:, None] * image + base + np.arange(per, dtype=np.int64)[None, :] + 1
        out[i.name] = ids.reshape(i.shape + (1,))
        base += per
    return out


def footprint(graph: Graph) -> np.ndarray:
    """Which input element each output position reads through each tap: an int array of the output's shape plus
    a tap axis, holding the element's id (:func:`_input_ids`; 0: nothing, a zero of padding). A window node
    reads its window's ``C x kh x kw`` taps, every output channel the same (a grouped one: all ``C`` channels, more
    than it reads, so the search takes grouped windows' boxes from one-channel probes only), and then what its
    addend's position reads (a residual); a move reads one. A window over a window's output reads, through each
    of its taps, :data:`READS_INTERMEDIATE` (or 0 at padding) and then what that position's own taps read.

    Raises :class:`NotMultiLinear` for another operator, or for zero padding of a window's output (a pad would
    read 0 where a position whose taps read padding holds the bias)."""
    shapes = graph.shapes
    env: dict[str, np.ndarray] = _input_ids(graph)
    windowed: set[str] = set()  # the tensors computed from a window's output
    for n in graph.nodes:
        role = ROLES.get(n.op)
        if role is None or any(i not in env for i in n.inputs if i not in graph.weights):
            raise NotMultiLinear(f"pet: no footprint through {n.op} ({n.output!r})")
        if role == "window":
            ids = env[n.inputs[0]]
            if n.inputs[0] in windowed:
                ids = np.concatenate([np.full(ids.shape[:-1] + (1,), READS_INTERMEDIATE, np.int64), ids], axis=-1)
            kh, kw = shapes[n.inputs[1]][2:]
            win = np.stack([patches(ids[..., t], kh, kw, n.p["strides"], n.p["pads"], n.p["dilations"])
                            for t in range(ids.shape[-1])], axis=-1)  # N,C,kh,kw,OH,OW,taps
            nb, c, _, _, oh, ow, t = win.shape
            taps = win.transpose(0, 4, 5, 1, 2, 3, 6).reshape(nb, 1, oh, ow, c * kh * kw * t)
            taps = np.broadcast_to(taps, (nb, shapes[n.output][1], oh, ow, c * kh * kw * t))
            if (r := addend(n)) is not None:  # the residual, read at the output position
                if r in windowed:
                    raise NotMultiLinear(f"pet: {n.output!r} adds a window's output")
                taps = np.concatenate([taps, env[r]], axis=-1)
            env[n.output] = taps
            windowed.add(n.output)
        else:
            if any(i in windowed for i in n.inputs):
                if role == "padding":
                    raise NotMultiLinear(f"pet: zero padding of a window's output ({n.output!r})")
                windowed.add(n.output)
            args = [env[i] for i in n.inputs]
            taps = args[0].shape[-1]
            if any(a.shape[-1] != taps for a in args):
                raise NotMultiLinear(f"pet: {n.output!r} joins tensors of different footprints")
            env[n.output] = np.stack([n.spec.numpy_fn(n.p, *[a[..., t] for a in args]) for t in range(taps)],
                                     axis=-1).astype(np.int64)
    return np.asarray(env[graph.outputs[0]])
