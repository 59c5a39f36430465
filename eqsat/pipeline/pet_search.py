"""The saturate stage's PET search (``optimize(pet=True)``): PET's corrected mutants of the graph's convolutions,
found before the engine starts within a share of saturation's time (:mod:`eqsat.rules.pet`)."""

from __future__ import annotations

import time
from collections.abc import Callable

from eqsat.ir.graph import Graph
from eqsat.rules.pet import PetRewrite, find_rewrites

#: PET's search begins no convolution past this share of the saturation stage's time
PET_SHARE = 0.3


def pet_search(graph: Graph, deadline: float, say: Callable[[str], None]) -> tuple[list[PetRewrite], float]:
    """The corrected mutants of ``graph``'s convolutions the search finds by its share of the time left until
    ``deadline`` (a :func:`time.perf_counter` time), and the seconds it took; ``say`` hears what it found."""
    began = time.perf_counter()
    found = find_rewrites(graph, deadline=began + PET_SHARE * max(0.0, deadline - began), progress=say)
    seconds = time.perf_counter() - began
    say(f"pet: {len(found)} corrected mutants of {len({r.tensor for r in found})} convolutions join the e-graph "
        f"({sum(r.fixes for r in found)} correction kernels, {sum(r.correction_flops for r in found):.3g} FLOPs of "
        f"corrections; {seconds:.2f} s)")
    return found, seconds
