"""PET's partially equivalent transformations with automated corrections (OSDI'21; issue 43): mutants of a
graph's multi-linear subprograms, the output regions on which each differs from the original (decided by
random tests over a prime field), and the correction that recomputes those regions, so that what enters the
e-graph is fully equivalent. Imports ``eqsat.ops`` and ``eqsat.ir`` only; see docs/pet.md.

* :mod:`~eqsat.rules.pet.program`: the subprograms, their exact evaluation modulo a prime and their footprints;
* :mod:`~eqsat.rules.pet.mutants`: the depth-bounded mutation generator;
* :mod:`~eqsat.rules.pet.regions`: boxes and their equal / non-equal decisions, with the evidence;
* :mod:`~eqsat.rules.pet.corrections`: correction kernels, the corrected mutant and its check;
* :mod:`~eqsat.rules.pet.search`: all of it over a graph, as alternatives for the e-graph;
* :mod:`~eqsat.rules.pet.edges`: the rules that join consecutive mutants where their moves cancel;
* :mod:`~eqsat.rules.pet.symbolic`: Z3's proof that a rewrite searched at a few images holds at every batch.
"""

from eqsat.rules.pet.corrections import CorrectedMutant, CorrectionError, check_equal, correct
from eqsat.rules.pet.mutants import Mutant, generate_mutants
from eqsat.rules.pet.program import PRIME, Subprogram, subprogram_of
from eqsat.rules.pet.regions import Box, BoxDecision, RegionAnalysis, analyse
from eqsat.rules.pet.search import PET_RULE_PREFIX, PetRewrite, chosen_rewrites, find_rewrites

__all__ = ["PRIME", "Subprogram", "subprogram_of", "Mutant", "generate_mutants", "Box", "BoxDecision",
           "RegionAnalysis", "analyse", "CorrectedMutant", "CorrectionError", "correct", "check_equal",
           "PetRewrite", "find_rewrites", "chosen_rewrites", "PET_RULE_PREFIX"]
