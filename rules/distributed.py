"""Run independent work units in parallel, locally or on a Ray cluster, with resumable results.

Three pieces, used by the rule generator (enumeration, pairing and confirmation units) and the verifier:

* :class:`Executor` maps a pure, module-level function over items and yields ``(index, result)`` as units
  finish. Backends: ``"serial"`` (in this process), ``"pool"`` (a fork process pool; needs nothing beyond
  the standard library) and ``"ray"`` (Ray tasks: ``ray.init()`` on this machine with ``num_cpus=workers``
  unless ``address`` or ``RAY_ADDRESS`` names an existing cluster). ``"auto"`` is Ray when it is importable,
  else the pool, and serial for one worker. Ray is an optional extra (``pip install eqsat[dist]``) and is
  only imported when that backend runs. A worker process that dies mid-unit is replaced and its unit run
  again, up to ``retries`` times (Ray's ``max_retries``; for the pool, a fresh pool after
  ``BrokenProcessPool``), then the run stops with an error naming the units.
* :class:`ResultStore` keeps each unit's result in a folder under a content hash of the unit's description
  and a *salt* (a hash of the source code the result depends on, so results of older code are never
  reused). Files are written atomically (temporary file, then rename), so a run that dies, or is
  interrupted, leaves only complete results, and a rerun with the same folder redoes only the missing units.
  Large results can be stored as numbered *parts* (e.g. shards by fingerprint) that readers load one at a
  time. All results are written by the driver process, so Ray workers need no shared file system.
* :func:`run_stage` ties them: it skips units whose results are stored, runs the others, stores their
  results, reports progress (done/total, rate, time remaining) and returns every unit's stored summary in
  unit order, so the outcome does not depend on the number of workers or the order in which units finish.

Functions given to an executor must be importable by module and name (Ray workers on other machines need
``eqsat`` installed).
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import importlib.util
import multiprocessing as mp
import os
import pickle
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from platformdirs import user_cache_dir

BACKENDS = ("auto", "ray", "pool", "serial")

#: Bumped when the layout of stored results changes.
STORE_VERSION = "1"


def default_results_dir() -> Path:
    """The default results folder: ``eqsat/rules-units`` in the user's cache directory (outside the repo)."""

    return Path(user_cache_dir("eqsat")) / "rules-units"


def ray_available() -> bool:
    """Whether Ray can be imported (without importing it)."""

    if "ray" in sys.modules:
        return sys.modules["ray"] is not None
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        return False


def resolve_backend(backend: str, workers: int, address: str | None = None) -> str:
    """The backend that runs: ``auto`` is ``ray`` when importable, else ``pool``; one worker is ``serial``
    unless Ray is asked for (or a cluster address is given)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown executor {backend!r}; one of {', '.join(BACKENDS)}")
    if backend == "ray" and not ray_available():
        raise RuntimeError("executor 'ray' needs Ray: pip install 'eqsat[dist]' (or use --executor pool)")
    if backend == "auto":
        if address or os.environ.get("RAY_ADDRESS"):
            backend = "ray" if ray_available() else "pool"
        elif workers <= 1:
            return "serial"
        else:
            backend = "ray" if ray_available() else "pool"
    if backend == "pool" and workers <= 1:
        return "serial"
    return backend


def source_salt(*paths: str | Path, extra: str = "") -> str:
    """A hash of the given source files (folders: their ``*.py`` files) and ``extra``: the version of the code a
    stored result depends on."""
    h = hashlib.sha256(f"{STORE_VERSION}|{extra}".encode())
    files: list[Path] = []
    for p in map(Path, paths):
        files += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


# ---------------------------------------------------------------------------------------------------------
# results folder


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


_PARTS_MAGIC = b"EQSPARTS"


class ResultStore:
    """Unit results stored by content hash in a folder (see the module docstring).

    A result is ``<key>.pkl`` (a pickled summary) and optionally ``<key>.parts`` (numbered byte blobs); the
    parts file is written first, so a summary on disk means the whole result is complete.
    """

    def __init__(self, root: str | Path | None = None) -> None:
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if root is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="eqsat-units-")
            root = self._tmp.name
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def key(kind: str, salt: str, description: Any) -> str:
        """The content hash naming a unit's result: its kind, the code salt and ``repr(description)``."""
        return hashlib.sha256(f"{kind}|{salt}|{description!r}".encode()).hexdigest()[:32]

    def _path(self, key: str, suffix: str) -> Path:
        return self.root / key[:2] / f"{key}{suffix}"

    def has(self, key: str) -> bool:
        """Whether a complete result is stored under ``key``."""
        return self._path(key, ".pkl").exists()

    def get(self, key: str) -> Any:
        """The stored summary of a result."""
        return pickle.loads(self._path(key, ".pkl").read_bytes())

    def put(self, key: str, summary: Any, parts: Sequence[bytes] | None = None) -> None:
        """Store a result atomically: its parts (if any), then its summary."""
        if parts is not None:
            head = _PARTS_MAGIC + struct.pack("<Q", len(parts))
            offsets, pos = [], len(head) + 8 * (len(parts) + 1)
            for p in parts:
                offsets.append(pos)
                pos += len(p)
            offsets.append(pos)
            index = struct.pack(f"<{len(offsets)}Q", *offsets)
            _atomic_write(self._path(key, ".parts"), head + index + b"".join(parts))
        _atomic_write(self._path(key, ".pkl"), pickle.dumps(summary, protocol=pickle.HIGHEST_PROTOCOL))

    def part(self, key: str, index: int) -> bytes:
        """Part ``index`` of a stored result (read without loading the others)."""
        with open(self._path(key, ".parts"), "rb") as f:
            head = f.read(16)
            if head[:8] != _PARTS_MAGIC:
                raise ValueError(f"not a parts file: {self._path(key, '.parts')}")
            (n,) = struct.unpack("<Q", head[8:])
            if not 0 <= index < n:
                raise IndexError(index)
            f.seek(16 + 8 * index)
            start, end = struct.unpack("<2Q", f.read(16))
            f.seek(start)
            return f.read(end - start)

    def delete(self, key: str) -> None:
        """Forget one result (tests use it to simulate an interrupted run)."""
        for suffix in (".pkl", ".parts"):
            self._path(key, suffix).unlink(missing_ok=True)

    def clear(self) -> None:
        """Forget every stored result (``--fresh``)."""
        for child in self.root.iterdir():
            if child.is_dir() and len(child.name) == 2:
                shutil.rmtree(child, ignore_errors=True)

    def close(self) -> None:
        """Remove a temporary store's folder (a named folder stays)."""
        if self._tmp is not None:
            self._tmp.cleanup()


# ---------------------------------------------------------------------------------------------------------
# executors


class WorkerLost(RuntimeError):
    """Units whose worker died more often than the retry budget allows."""


@dataclass
class Executor:
    """Maps a function over items on a backend (see the module docstring)."""

    workers: int = 2
    backend: str = "auto"
    address: str | None = None
    retries: int = 3
    #: Pool backend: replace the worker processes after this many units each (None: never).
    recycle_after: int | None = None
    #: How many units may be submitted ahead of those finished, per worker (bounds memory in flight).
    window: int = 2
    resolved: str = field(init=False)

    def __post_init__(self) -> None:
        self.resolved = resolve_backend(self.backend, self.workers, self.address)

    def describe(self) -> str:
        """The backend in words, e.g. ``pool, 2 workers``."""
        if self.resolved == "serial":
            return "serial"
        if self.resolved == "ray":
            return f"ray ({self.address or os.environ.get('RAY_ADDRESS') or f'local, {self.workers} CPUs'})"
        return f"pool, {self.workers} workers"

    def imap(self, fn: Callable[[Any], Any], n: int, item: Callable[[int], Any]) -> Iterator[tuple[int, Any]]:
        """Run ``fn(item(i))`` for ``i in range(n)``; yields ``(i, result)`` in completion order.

        ``item`` is called in this process just before unit ``i`` is submitted, so that inputs (e.g. shards
        read from disk) are materialised only for units in flight.
        """
        if n == 0:
            return iter(())
        if self.resolved == "serial":
            return ((i, fn(item(i))) for i in range(n))
        if self.resolved == "ray":
            return self._ray(fn, n, item)
        return self._pool(fn, n, item)

    def _pool(self, fn: Callable[[Any], Any], n: int, item: Callable[[int], Any]) -> Iterator[tuple[int, Any]]:
        todo = list(range(n - 1, -1, -1))  # a stack: pop() gives the lowest index first
        attempts = [0] * n
        limit = max(1, self.workers * self.window)
        ctx = mp.get_context("fork")
        while todo:
            ex = cf.ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx)
            running: dict[cf.Future[Any], int] = {}
            lost: list[int] = []
            broken = False
            submitted = 0
            try:
                while (todo or running) and not broken:
                    full = self.recycle_after is not None and submitted >= self.recycle_after * self.workers
                    while todo and len(running) < limit and not full:
                        i = todo.pop()
                        try:
                            running[ex.submit(fn, item(i))] = i
                        except cf.process.BrokenProcessPool:  # a worker died since the last wait
                            todo.append(i)
                            broken = True
                            break
                        submitted += 1
                    if broken or not running:
                        break  # broken, or recycled: a fresh pool takes the remaining units
                    done, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
                    for fut in done:
                        i = running.pop(fut)
                        try:
                            result = fut.result()
                        except cf.process.BrokenProcessPool:
                            lost.append(i)
                            broken = True
                            continue
                        yield i, result
            finally:
                ex.shutdown(wait=True, cancel_futures=True)
            if broken:
                # a worker died (killed, out of memory): the units in flight that did not finish are lost, and
                # each counts an attempt (which of them killed its worker is not known)
                for fut, i in list(running.items()):
                    if fut.done() and not fut.cancelled() and fut.exception() is None:
                        del running[fut]
                        yield i, fut.result()
                lost += running.values()
                for i in lost:
                    attempts[i] += 1
                dead = sorted(i for i in lost if attempts[i] > self.retries)
                if dead:
                    raise WorkerLost(f"worker processes died {self.retries + 1} times while running units "
                                     f"{dead[:10]}{'...' if len(dead) > 10 else ''} (killed, or out of memory?)")
                todo = sorted(set(todo) | set(lost), reverse=True)

    def _ray(self, fn: Callable[[Any], Any], n: int, item: Callable[[int], Any]) -> Iterator[tuple[int, Any]]:
        import ray

        if not ray.is_initialized():
            address = self.address or os.environ.get("RAY_ADDRESS")
            if address:
                try:
                    ray.init(address=address, log_to_driver=False)
                except ConnectionError as e:
                    raise ConnectionError(f"{e}. A cluster started by Ray >= 2.59 requires its token: set "
                                          "RAY_AUTH_MODE=token here, with the cluster's token in RAY_AUTH_TOKEN or "
                                          "~/.ray/auth_token (`ray get-auth-token` on the head prints it)") from e
            else:
                ray.init(num_cpus=self.workers, include_dashboard=False, log_to_driver=False)
        cpus = max(1, int(ray.cluster_resources().get("CPU", self.workers)))
        # a unit whose worker (or node) died more often than max_retries allows, or that Ray killed for memory
        lost_errors = tuple(getattr(ray.exceptions, name) for name in ("WorkerCrashedError", "NodeDiedError",
                                                                       "OutOfMemoryError")
                            if hasattr(ray.exceptions, name))
        def unit(x: Any) -> Any:  # Ray takes functions and classes only, not callables (a functools.partial)
            return fn(x)

        remote = ray.remote(num_cpus=1, max_retries=self.retries, retry_exceptions=False)(unit)
        limit = max(1, cpus * self.window)
        todo = list(range(n - 1, -1, -1))
        running: dict[Any, int] = {}
        while todo or running:
            while todo and len(running) < limit:
                i = todo.pop()
                running[remote.remote(item(i))] = i
            ready, _ = ray.wait(list(running), num_returns=1, timeout=1.0)  # a timeout keeps Ctrl-C working
            for ref in ready:
                i = running.pop(ref)
                try:
                    result = ray.get(ref)
                except lost_errors as e:
                    for r in running:
                        ray.cancel(r)
                    raise WorkerLost(f"unit {i} failed after {self.retries} retries: {e}") from e
                yield i, result


# ---------------------------------------------------------------------------------------------------------
# stages


class Progress:
    """Progress over units on one line per update: done/total, rate and time remaining."""

    def __init__(self, label: str, total: int, say: Callable[[str], None] | None, every: float = 2.0) -> None:
        self.label, self.total, self.say, self.every = label, total, say, every
        self.done = 0
        self.t0 = self._last = time.perf_counter()

    def step(self, k: int = 1) -> None:
        """Count ``k`` finished units; prints at most every ``every`` seconds, and at the end."""
        self.done += k
        now = time.perf_counter()
        if self.say is None or (now - self._last < self.every and self.done < self.total):
            return
        self._last = now
        dt = now - self.t0
        rate = self.done / dt if dt > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else float("nan")
        self.say(f"{self.label}: {self.done}/{self.total} ({100 * self.done / max(1, self.total):.0f}%), "
                 f"{rate:.2f}/s, {_hms(dt)} elapsed, {_hms(eta)} left")


def _hms(s: float) -> str:
    if s != s:  # nan
        return "?"
    s = int(round(s))
    return f"{s // 3600}h{s // 60 % 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


@dataclass
class StageStats:
    """What a stage did: units in all, computed now, and reused from the results folder."""

    units: int = 0
    computed: int = 0
    reused: int = 0
    seconds: float = 0.0


def run_stage(executor: Executor, store: ResultStore, fn: Callable[[Any], Any], keys: Sequence[str],
              item: Callable[[int], Any], save: Callable[[Any], tuple[Any, Sequence[bytes] | None]] | None = None,
              label: str = "units", say: Callable[[str], None] | None = None) -> tuple[list[Any], StageStats]:
    """Run the units whose results are not stored yet, store them, and return every unit's summary in order.

    ``fn(item(i))`` computes unit ``i``; ``save(result)`` splits it into ``(summary, parts)`` for the store
    (default: the whole result as summary, no parts). Returns the summaries (``store.get``) in unit order and
    the stage's counts.
    """
    t0 = time.perf_counter()
    todo = [i for i, k in enumerate(keys) if not store.has(k)]
    stats = StageStats(units=len(keys), computed=len(todo), reused=len(keys) - len(todo))
    progress = Progress(label, len(todo), say)
    if say is not None and todo:
        say(f"{label}: {len(todo)} to run ({stats.reused} of {len(keys)} reused), {executor.describe()}")
    out: list[Any] = [None] * len(keys)
    for j, result in executor.imap(fn, len(todo), lambda j: item(todo[j])):
        summary, parts = save(result) if save is not None else (result, None)
        store.put(keys[todo[j]], summary, parts)
        out[todo[j]] = summary
        progress.step()
    for i, k in enumerate(keys):
        if out[i] is None:
            out[i] = store.get(k)
    stats.seconds = time.perf_counter() - t0
    return out, stats
