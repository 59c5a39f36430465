"""A differential fuzzer: random ONNX graphs, optimized with the default rules and compared with the original.

The parts, in the order a fuzzing run uses them:

* :mod:`~eqsat.testing.fuzz.choices`: where every random decision comes from (a seeded RNG that records its
  decisions, a replayed decision list, or hypothesis), so one generator serves benchmarks, shrinking and tests;
* :mod:`~eqsat.testing.fuzz.graph`: a generated graph (:class:`FuzzGraph`), the builder that tracks shapes
  while motifs append nodes, and :func:`to_model`, which packs several graphs into one model;
* :mod:`~eqsat.testing.fuzz.motifs`: the few-node patterns graphs are made of, biased toward what the rules
  match, plus operators eqsat keeps opaque;
* :mod:`~eqsat.testing.fuzz.generate`: :func:`generate_graph` and :func:`generate_model`;
* :mod:`~eqsat.testing.fuzz.check`: :func:`check_model` optimizes a model (``eqsat.optimize``, default rules,
  no built-in check) and compares both models with onnxruntime, graph optimizations disabled, on several
  random inputs;
* :mod:`~eqsat.testing.fuzz.shrink`: :func:`shrink` reduces a failing decision list;
* :mod:`~eqsat.testing.fuzz.run`: :func:`run_fuzz` checks many graphs packed several to a model (one optimize
  call covers them all; a mismatch is re-run graph by graph to pin and shrink the guilty one).

Everything is importable from this package (``from eqsat.testing import fuzz; fuzz.run_fuzz(...)``).
"""

from __future__ import annotations

from eqsat.testing.fuzz.check import CaseResult, InvalidModel, check_model, compare_models
from eqsat.testing.fuzz.choices import Choices, HypothesisChoices, RandomChoices, ReplayChoices, choose, flip, weighted
from eqsat.testing.fuzz.generate import generate_graph, generate_model
from eqsat.testing.fuzz.graph import DIMS, IR_VERSION, OPSET, FuzzGraph, GraphBuilder, Shape, to_model
from eqsat.testing.fuzz.motifs import MOTIFS, OPAQUE_KINDS
from eqsat.testing.fuzz.run import Finding, FuzzReport, default_rule_names, run_fuzz
from eqsat.testing.fuzz.shrink import shrink

__all__ = [
    "DIMS", "IR_VERSION", "MOTIFS", "OPAQUE_KINDS", "OPSET", "CaseResult", "Choices", "Finding", "FuzzGraph",
    "FuzzReport", "GraphBuilder", "HypothesisChoices", "InvalidModel", "RandomChoices", "ReplayChoices", "Shape",
    "check_model", "choose", "compare_models", "default_rule_names", "flip", "generate_graph", "generate_model",
    "run_fuzz", "shrink", "to_model", "weighted",
]
