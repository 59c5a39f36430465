"""Cached transformations, Dali's idea: what a run wrote for a model is kept, and replayed on a later model of the
same structure (a fine-tune, a re-export: other tensor names, other weights) instead of searching again.

An entry is keyed by the model's structure (:func:`eqsat.ir.structure.structure_key`: operators, parameters,
edges, dtypes, shapes, symbols), the rules, the cost model and the options that decide what a search finds. It
holds the graph the run wrote, over the model's places (:func:`eqsat.ir.structure.encode`), or that it kept the
original, and why. Entries live in ``transforms/`` of the folder measured costs use
(:func:`eqsat.costs.cache.default_cache_dir`; ``$EQSAT_TRANSFORMS_DIR`` moves them), one JSON file each, written
whole and renamed into place, so runs sharing the folder read whole entries only. Only a run whose numeric check
passed (or that kept the original) stores one. An entry that does not read back (damaged, of another format or
version, or whose graph does not fit the model) is ignored with a one-line warning, and the search runs; a
replayed graph is checked against the new model as any other.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from eqsat.costs import CostModel
from eqsat.costs.cache import default_cache_dir
from eqsat.ir.graph import Graph
from eqsat.ir.rule import Rule
from eqsat.ir.structure import StructureError, decode, encode, structure_key
from eqsat.pipeline.options import OptimizeOptions

__all__ = ["FORMAT", "Recalled", "TransformCache", "run_key"]

log = logging.getLogger(__name__)

#: the entries' format; an entry of another is ignored
FORMAT = 1
#: eqsat's version, as installed (an entry made by another version is another key)
VERSION = metadata.version("eqsat")
#: the options that decide what a search finds (the time limit, the check, the dump and progress do not;
#: :data:`NOT_DECIDING` are the others, the cost model and the rules are in the key on their own)
_OPTIONS = ("node_limit", "iter_limit", "multi_iters", "memory_limit_mb", "solver", "layouts", "reuse_blocks",
            "dynamic", "dims", "input_shapes", "anytime", "verify_latency", "latency_margin", "candidates", "target",
            "parallel", "critical_path_weight", "as_written", "pet", "first_answer")
NOT_DECIDING = ("cache", "check", "cost_model", "dump_egraph", "progress", "provenance", "rules", "time_limit")


@dataclass(frozen=True)
class Recalled:
    """A cached transformation, replayed on this run's model: the graph to write (None: the first run kept the
    original), why, and when it was stored."""

    key: str
    graph: Graph | None
    reason: str
    stored: str


def run_key(graph: Graph, rules: Sequence[Rule], cost_model: CostModel, options: OptimizeOptions) -> str | None:
    """The key of what a run of ``options`` finds for ``graph``: its structure, the rules, the cost model (its
    name, threads and device) and the options that decide a search; None for a graph whose structure cannot be
    written down (a parameter of a type the cache does not store): no caching then."""
    try:
        structure = structure_key(graph)
    except StructureError as e:
        log.info("no cached transformation: %s", e)
        return None
    rules_hash = hashlib.sha256("\n".join(repr(r) for r in rules).encode()).hexdigest()
    decided = {name: _jsonable(getattr(options, name)) for name in _OPTIONS}
    form = {"format": FORMAT, "eqsat": VERSION, "structure": structure, "rules": rules_hash,
            "cost_model": [cost_model.name, cost_model.threads, cost_model.device_identity()], "options": decided}
    return hashlib.sha256(json.dumps(form, sort_keys=True).encode()).hexdigest()


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in sorted(v.items())}
    if isinstance(v, tuple | list):
        return [_jsonable(x) for x in v]
    return v


def _folder() -> Path:
    env = os.environ.get("EQSAT_TRANSFORMS_DIR")
    return Path(env) if env else default_cache_dir() / "transforms"


class TransformCache:
    """The folder of cached transformations (``folder``: default ``$EQSAT_TRANSFORMS_DIR``, else ``transforms/``
    of the cost cache's folder)."""

    def __init__(self, folder: str | Path | None = None) -> None:
        self.folder = Path(folder) if folder is not None else _folder()

    def path(self, key: str) -> Path:
        """Where the entry of ``key`` is stored."""
        return self.folder / f"{key}.json"

    def recall(self, key: str, base: Graph) -> Recalled | None:
        """The entry of ``key`` replayed on ``base`` (this run's imported model), or None: no entry, or one that
        does not read back or fit (said in a one-line warning)."""
        path = self.path(key)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            log.warning("cached transformation %s unreadable (%s); searching", path, e.strerror or e)
            return None
        try:
            entry = json.loads(raw.decode("utf-8"))
            if entry.get("format") != FORMAT or entry.get("key") != key:
                raise StructureError(f"of format {entry.get('format')!r}, key {str(entry.get('key'))[:12]}")
            graph = None if entry["graph"] is None else decode(entry["graph"], base)
            return Recalled(key, graph, str(entry["reason"]), str(entry["stored"]))
        except (ValueError, KeyError, TypeError, AttributeError) as e:  # json, structure and shape errors
            log.warning("cached transformation %s ignored: %s; searching", path, " ".join(str(e).split())[:200])
            return None

    def remember(self, key: str, base: Graph, found: Graph | None, reason: str) -> bool:
        """Store what a run wrote for ``base``: ``found`` (None: the original was kept) and why; False (and a
        one-line log) where it cannot be (a graph not written over ``base``'s places, a folder not writable)."""
        try:
            data = None if found is None else encode(found, base)
        except StructureError as e:
            log.info("transformation not cached: %s", e)
            return False
        entry = {"format": FORMAT, "key": key, "eqsat": VERSION, "reason": reason, "graph": data,
                 "stored": time.strftime("%Y-%m-%d %H:%M:%S")}
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=f".{key[:16]}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(entry, f)
                os.replace(tmp, self.path(key))  # whole: a run reading it sees the old entry or this one
            finally:
                Path(tmp).unlink(missing_ok=True)
        except OSError as e:
            log.warning("transformation not cached in %s: %s", self.folder, e.strerror or e)
            return False
        return True
