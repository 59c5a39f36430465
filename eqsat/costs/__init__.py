"""Cost models: what one operator configuration costs (the :class:`CostModel` protocol), and what a whole IR graph
costs (:func:`graph_cost`). The analytic roofline, a simulated V100 on the same roofline (``gpu-sim``), measured
onnxruntime (CPU) and a disk cache; the CuPy/cuDNN GPU measurement (``eqsat.gpu``) implements the same protocol.
Imports ``eqsat.ops``, ``eqsat.ir`` and ``eqsat.onnx_io``."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

from eqsat.costs.analytic import AnalyticCostModel
from eqsat.costs.base import CostModel, InPrecision
from eqsat.costs.budget import PricedCostModel, Pricing, price_within
from eqsat.costs.cache import CachedCostModel, CostCache
from eqsat.costs.gpu_sim import GpuSimCostModel
from eqsat.costs.graph import graph_cost, graph_cost_keys
from eqsat.costs.measured_cpu import OnnxRuntimeCostModel
from eqsat.costs.parallel import SUM, Objective, ParallelFigures, graph_parallel_cost

#: the names :func:`get_cost_model` knows
COST_MODEL_NAMES = ("analytic", "gpu-sim", "measured", "cpu", "gpu", "gpu-graph")


def check_cost_model_name(name: str) -> None:
    """Raise ValueError unless :func:`get_cost_model` knows ``name``."""
    if name not in COST_MODEL_NAMES:
        raise ValueError(f"unknown cost model {name!r}; use analytic, gpu-sim (simulated V100), measured (cpu), "
                         "gpu or gpu-graph")


def get_cost_model(name: str = "analytic", **kw: Any) -> CostModel:
    """A cost model by name: ``analytic`` (default), ``gpu-sim`` (a simulated V100 roofline: computed, not cached),
    ``measured``/``cpu`` (onnxruntime, cached), ``gpu`` (CuPy, cached) or ``gpu-graph`` (CuPy, each operator
    timed as a CUDA graph runs it, for a deployment that captures the model; cached). ``cache_dir`` overrides the
    cache location."""
    check_cost_model_name(name)
    cache_dir = kw.pop("cache_dir", None)
    if name == "analytic":
        return AnalyticCostModel(**kw)
    if name == "gpu-sim":
        return GpuSimCostModel(**kw)
    if name in ("measured", "cpu"):
        return CachedCostModel(OnnxRuntimeCostModel(**kw), CostCache(cache_dir))
    return CachedCostModel(_plugin(name)(**kw), CostCache(cache_dir))


#: the entry-point group of cost models declared by packages above this one (``pyproject.toml``)
PLUGIN_GROUP = "eqsat.cost_models"


def _plugin(name: str) -> Any:
    """The class of a cost model that sits above this package (``gpu``: :mod:`eqsat.gpu`, which imports
    ``eqsat.costs``), loaded through its entry point, so that this package never imports it."""
    found = entry_points(group=PLUGIN_GROUP, name=name)
    if not found:
        raise RuntimeError(f"no cost model {name!r} is installed (entry point group {PLUGIN_GROUP}); reinstall "
                           "eqsat (pip install -e .)")
    return next(iter(found)).load()


__all__ = ["COST_MODEL_NAMES", "CostModel", "InPrecision", "AnalyticCostModel", "GpuSimCostModel",
           "OnnxRuntimeCostModel",
           "CostCache", "CachedCostModel", "Pricing", "PricedCostModel", "price_within", "check_cost_model_name",
           "get_cost_model", "graph_cost", "graph_cost_keys", "Objective", "ParallelFigures", "SUM",
           "graph_parallel_cost"]
