"""Cost models: analytic roofline, measured onnxruntime (CPU) and CuPy (GPU), with a disk cache."""

from __future__ import annotations

from typing import Any

from eqsat.gpu.analytic import AnalyticCostModel
from eqsat.gpu.base import CostModel
from eqsat.gpu.cache import CachedCostModel, CostCache
from eqsat.gpu.cpu_measure import OnnxRuntimeCostModel
from eqsat.gpu.cupy_measure import CupyCostModel


def get_cost_model(name: str = "analytic", **kw: Any) -> CostModel:
    """A cost model by name: ``analytic`` (default), ``measured``/``cpu`` (onnxruntime, cached) or ``gpu``
    (CuPy, cached). ``cache_dir`` overrides the cache location."""
    cache_dir = kw.pop("cache_dir", None)
    if name == "analytic":
        return AnalyticCostModel(**kw)
    if name in ("measured", "cpu"):
        return CachedCostModel(OnnxRuntimeCostModel(**kw), CostCache(cache_dir))
    if name == "gpu":
        return CachedCostModel(CupyCostModel(**kw), CostCache(cache_dir))
    raise ValueError(f"unknown cost model {name!r}; use analytic, measured (cpu) or gpu")


__all__ = ["CostModel", "AnalyticCostModel", "OnnxRuntimeCostModel", "CupyCostModel", "CostCache",
           "CachedCostModel", "get_cost_model"]
