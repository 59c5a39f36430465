"""Cost models: what one operator configuration costs. The analytic roofline, measured onnxruntime (CPU) and a
disk cache; the CuPy/cuDNN GPU measurement (``eqsat.gpu``) plugs into the same interface. Imports ``eqsat.ops``,
``eqsat.ir`` and ``eqsat.onnx_io``."""

from __future__ import annotations

from typing import Any

from eqsat.costs.analytic import AnalyticCostModel
from eqsat.costs.base import CostModel
from eqsat.costs.cache import CachedCostModel, CostCache
from eqsat.costs.graph import graph_cost, graph_cost_keys
from eqsat.costs.measured_cpu import OnnxRuntimeCostModel


def get_cost_model(name: str = "analytic", **kw: Any) -> CostModel:
    """A cost model by name: ``analytic`` (default), ``measured``/``cpu`` (onnxruntime, cached) or ``gpu``
    (CuPy, cached). ``cache_dir`` overrides the cache location."""
    cache_dir = kw.pop("cache_dir", None)
    if name == "analytic":
        return AnalyticCostModel(**kw)
    if name in ("measured", "cpu"):
        return CachedCostModel(OnnxRuntimeCostModel(**kw), CostCache(cache_dir))
    if name == "gpu":
        from eqsat.gpu import CupyCostModel  # the GPU plugin sits above this package (it imports eqsat.costs)

        return CachedCostModel(CupyCostModel(**kw), CostCache(cache_dir))
    raise ValueError(f"unknown cost model {name!r}; use analytic, measured (cpu) or gpu")


__all__ = ["CostModel", "AnalyticCostModel", "OnnxRuntimeCostModel", "CostCache",
           "CachedCostModel", "get_cost_model", "graph_cost", "graph_cost_keys"]
