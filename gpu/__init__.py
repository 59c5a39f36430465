"""Measured GPU costs through CuPy/cuDNN; a :class:`eqsat.costs.CostModel` like the others. Imports
``eqsat.costs`` and ``eqsat.ops``; CuPy is imported only when a measurement runs."""

from eqsat.gpu.cupy_measure import CupyCostModel, CupyGraphCostModel

__all__ = ["CupyCostModel", "CupyGraphCostModel"]
