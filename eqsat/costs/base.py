"""The cost-model interface: what one operator configuration costs, in milliseconds."""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable

from eqsat.ops import CostKey

Progress = Callable[[int, int], None]


class CostModel(abc.ABC):
    """Prices one operator configuration (a :class:`~eqsat.ops.CostKey`) in milliseconds.

    Conventions shared by every model: ``reshape`` is a view and costs nothing; work on weights only is
    priced 0 by the caller (it is precomputed at export).
    """

    name: str = "cost-model"

    @abc.abstractmethod
    def cost(self, key: CostKey) -> float:
        """Cost of one configuration in milliseconds (>= 0)."""

    def costs(self, keys: Iterable[CostKey], progress: Progress | None = None) -> dict[CostKey, float]:
        """Costs of many configurations; ``progress(done, total)`` is called as they are priced."""
        keys = list(dict.fromkeys(keys))
        out: dict[CostKey, float] = {}
        for k, key in enumerate(keys):
            out[key] = float(self.cost(key))
            if progress:
                progress(k + 1, len(keys))
        return out

    def device_identity(self) -> dict[str, str]:
        """What the costs depend on (device, library versions); cached costs are keyed by it."""
        return {"model": self.name}

    def in_context(self, weight_bytes: int) -> CostModel:
        """The model to price the operators of one whole model whose weights take ``weight_bytes``: a measured
        model times each operator with as many bytes in play as that model reads per run, so weights that fit
        in the caches together are timed from the caches. Models that measure nothing return themselves."""
        return self
