"""A persistent, process-safe cache of measured costs, keyed by device identity and operator configuration."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
import warnings
from collections.abc import Iterable
from pathlib import Path

from platformdirs import user_cache_dir

from eqsat.costs.base import CostModel, Progress
from eqsat.ops import CostKey


def default_cache_dir() -> Path:
    """``$EQSAT_CACHE_DIR`` or the user's cache directory for eqsat."""
    env = os.environ.get("EQSAT_CACHE_DIR")
    if env:
        return Path(env)

    return Path(user_cache_dir("eqsat"))


def identity_hash(identity: dict[str, str]) -> str:
    """A short stable hash of a device identity."""
    return hashlib.sha1(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


class CostCache:
    """An sqlite file of (device hash, key) -> milliseconds; safe under concurrent processes (WAL, busy timeout).

    A corrupt file is moved aside with a warning and the cache starts empty.
    """

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / "costs.sqlite"
        self._conn = self._open()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30.0)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE IF NOT EXISTS costs (device TEXT, key TEXT, ms REAL, identity TEXT, "
                     "created REAL, PRIMARY KEY (device, key))")
        conn.execute("SELECT COUNT(*) FROM costs").fetchone()
        return conn

    def _open(self) -> sqlite3.Connection:
        try:
            return self._connect()
        except sqlite3.DatabaseError as e:
            aside = self.path.with_name(f"costs.corrupt-{int(time.time())}.sqlite")
            os.replace(self.path, aside)
            for suffix in ("-wal", "-shm"):
                Path(str(self.path) + suffix).unlink(missing_ok=True)
            warnings.warn(f"cost cache {self.path} was unreadable ({e}); moved it to {aside} and started empty",
                          RuntimeWarning, stacklevel=3)
            return self._connect()

    def get_many(self, device: str, keys: Iterable[str]) -> dict[str, float]:
        """Cached values for the given keys (missing keys are absent)."""
        keys = list(keys)
        out: dict[str, float] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            q = f"SELECT key, ms FROM costs WHERE device = ? AND key IN ({','.join('?' * len(chunk))})"
            out.update(dict(self._conn.execute(q, [device, *chunk]).fetchall()))
        return out

    def put_many(self, device: str, identity: dict[str, str], values: dict[str, float]) -> None:
        """Store measured values."""
        ident = json.dumps(identity, sort_keys=True)
        with self._conn:
            self._conn.executemany("INSERT OR REPLACE INTO costs VALUES (?, ?, ?, ?, ?)",
                                   [(device, k, v, ident, time.time()) for k, v in values.items()])

    def entries(self) -> list[tuple[str, str, float, str]]:
        """Every entry: (device hash, key, ms, identity JSON)."""
        return self._conn.execute("SELECT device, key, ms, identity FROM costs ORDER BY device, key").fetchall()

    def close(self) -> None:
        """Close the database."""
        self._conn.close()


class CachedCostModel(CostModel):
    """Wraps a (measured) model: a cache hit never re-measures; the device identity namespaces the entries."""

    def __init__(self, inner: CostModel, cache: CostCache | None = None) -> None:
        self.inner = inner
        self.cache = cache or CostCache()
        self.name = f"{inner.name} (cached)"
        self.is_measured = inner.is_measured
        self.times_end_to_end = inner.times_end_to_end
        self.threads = inner.threads
        self._identity = inner.device_identity()
        self._device = identity_hash(self._identity)
        self.hits = 0
        self.misses = 0
        self._counted_by: tuple[CachedCostModel, ...] = ()  # models in_context was called on: they count too

    def cost(self, key: CostKey) -> float:
        """Cached cost, measuring on a miss."""
        return self.costs([key])[key]

    def costs(self, keys: Iterable[CostKey], progress: Progress | None = None) -> dict[CostKey, float]:
        """Look every key up at once, measure the misses, store them."""
        keys = list(dict.fromkeys(keys))
        found = self.cached(keys)  # counts the hits
        missing = [k for k in keys if k not in found]
        for m in (self, *self._counted_by):
            m.misses += len(missing)
        measured = self.inner.costs(missing, progress) if missing else {}
        if measured:
            self.cache.put_many(self._device, self._identity, {k.as_str(): v for k, v in measured.items()})
        return {k: (found[k] if k in found else measured[k]) for k in keys}

    def cached(self, keys: Iterable[CostKey]) -> dict[CostKey, float]:
        """The cached costs of ``keys`` (the others are absent); each one found counts as a hit."""
        strs = {k: k.as_str() for k in dict.fromkeys(keys)}
        found = self.cache.get_many(self._device, strs.values())
        for m in (self, *self._counted_by):
            m.hits += len(found)
        return {k: found[s] for k, s in strs.items() if s in found}

    def device_identity(self) -> dict[str, str]:
        """The wrapped model's identity."""
        return self._identity

    def in_context(self, weight_bytes: int) -> CostModel:
        """The wrapped model in that context, on the same cache (its identity, hence its entries, may differ)."""
        inner = self.inner.in_context(weight_bytes)
        if inner is self.inner:
            return self
        other = CachedCostModel(inner, self.cache)
        other._counted_by = (self, *self._counted_by)
        return other
