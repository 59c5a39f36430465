"""The cost-model protocol: what one operator configuration costs, in milliseconds, and what the pipeline may
ask of the model besides (is it measured, can whole models be timed in its runtime)."""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Iterable
from typing import Protocol, runtime_checkable

from eqsat.ops import CostKey

Progress = Callable[[int, int], None]


@runtime_checkable
class CostModel(Protocol):
    """Prices one operator configuration (a :class:`~eqsat.ops.CostKey`) in milliseconds.

    The models here (analytic, onnxruntime, cached, CuPy) subclass it and inherit the defaults below; any
    object with these attributes and methods is one too. The pipeline asks nothing else of a cost model: it
    reads these attributes, never a model's name or class.

    Conventions shared by every model: ``reshape`` is a view and costs nothing; work on weights only is
    priced 0 by the caller (it is precomputed at export).
    """

    #: how reports and e-graph dumps name the model
    name: str = "cost-model"
    #: True when costs are timed on a device (onnxruntime, CuPy), False when they are computed (a formula)
    is_measured: bool = False
    #: True when whole models can be timed end to end in the runtime the costs come from (onnxruntime on this
    #: CPU): ``optimize`` then checks by default that the optimized model runs faster
    times_end_to_end: bool = False
    #: intra-op threads of that runtime, for the end-to-end timings (0: the runtime's default)
    threads: int = 0

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

    def cached(self, keys: Iterable[CostKey]) -> dict[CostKey, float]:
        """The costs of ``keys`` known without measuring anything (a cache's entries); none by default."""
        return {}

    def device_identity(self) -> dict[str, str]:
        """What the costs depend on (device, library versions); cached costs are keyed by it."""
        return {"model": self.name}

    def in_context(self, weight_bytes: int) -> CostModel:
        """The model to price the operators of one whole model whose weights take ``weight_bytes``: a measured
        model times each operator with as many bytes in play as that model reads per run, so weights that fit
        in the caches together are timed from the caches. Models that measure nothing return themselves."""
        return self


class InPrecision(CostModel):
    """``inner``'s costs for a model that computes in ``dtype`` (a half-precision model, imported as its float32
    copy): each configuration in ``source`` (float32) is priced as ``dtype``'s (half the bytes moved). For a
    computed model; a measured one times what its runtime runs (a mixed-precision model's half-precision keys
    as float32: ``source`` the half type, ``dtype`` float32)."""

    def __init__(self, inner: CostModel, dtype: str, source: str = "float32") -> None:
        self.inner, self.dtype, self.source = inner, dtype, source
        self.name = f"{inner.name}, in {dtype}"
        self.is_measured, self.times_end_to_end, self.threads = inner.is_measured, inner.times_end_to_end, \
            inner.threads

    def _key(self, key: CostKey) -> CostKey:
        return dataclasses.replace(key, dtype=self.dtype) if key.dtype == self.source else key

    def cost(self, key: CostKey) -> float:
        return self.inner.cost(self._key(key))

    def costs(self, keys: Iterable[CostKey], progress: Progress | None = None) -> dict[CostKey, float]:
        keys = list(dict.fromkeys(keys))
        priced = self.inner.costs([self._key(k) for k in keys], progress)
        return {k: priced[self._key(k)] for k in keys}

    def cached(self, keys: Iterable[CostKey]) -> dict[CostKey, float]:
        keys = list(keys)
        known = self.inner.cached([self._key(k) for k in keys])
        return {k: known[self._key(k)] for k in keys if self._key(k) in known}

    def device_identity(self) -> dict[str, str]:
        # priced as float32 (a measured model's half keys): the same costs as the inner model's own
        return self.inner.device_identity() if self.dtype == "float32" else {**self.inner.device_identity(),
                                                                               "dtype": self.dtype}

    def in_context(self, weight_bytes: int) -> CostModel:
        return InPrecision(self.inner.in_context(weight_bytes), self.dtype, self.source)
