"""Distributed rule generation (eqsat.rules.distributed): the same corpus with any number of workers, with and
without Ray; resumable results; a killed worker retried; the process pool without Ray; stale results ignored."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from eqsat.rules import corpus
from eqsat.rules import distributed as dist
from eqsat.rules import generator as gen

#: conftest's N = 2 generation, shared with test_rules_generator: one worker runs them (the Ray tests: group ray)
pytestmark = pytest.mark.xdist_group("generated_n2")
HAVE_RAY = dist.ray_available()
needs_ray = pytest.mark.skipif(not HAVE_RAY, reason="Ray is not installed (pip install 'eqsat[dist]')")
#: a local Ray cluster takes seconds to start: slow, and one xdist worker runs them all (one cluster at a time)
ON_RAY = [needs_ray, pytest.mark.slow, pytest.mark.xdist_group("ray")]


def _corpus_bytes(cands: list[gen.Candidate], path: Path) -> bytes:
    corpus.save_corpus(corpus.select(cands), path, {"max_ops": 2})
    return path.read_bytes()


def _facts(cands: list[gen.Candidate], rep: gen.GenerationReport) -> tuple[Any, ...]:
    return ([(c.lhs, c.rhs, c.conditions, c.n_lhs, c.n_rhs, c.domain, c.lhs_ops, c.rhs_ops) for c in cands],
            rep.table(), rep.dropped)


@pytest.fixture(scope="module")
def serial2(generated_n2: tuple[list[gen.Candidate], gen.GenerationReport],
            tmp_path_factory: pytest.TempPathFactory) -> tuple[tuple[Any, ...], bytes]:
    """The serial N = 2 generation (conftest's ``generated_n2``: generate(2, workers=1, executor="serial"))."""
    cands, rep = generated_n2
    return _facts(cands, rep), _corpus_bytes(cands, tmp_path_factory.mktemp("serial") / "rules.json")


def _shutdown_ray() -> None:
    if HAVE_RAY:
        import ray

        if ray.is_initialized():
            ray.shutdown()


@pytest.mark.parametrize("executor,workers", [pytest.param("pool", 2, marks=pytest.mark.slow),
                                              pytest.param("ray", 1, marks=ON_RAY),
                                              pytest.param("ray", 2, marks=ON_RAY)])
def test_corpus_is_the_same_with_any_workers_and_backend(serial2: tuple[tuple[Any, ...], bytes], executor: str,
                                                         workers: int, tmp_path: Path) -> None:
    _shutdown_ray()  # so that a local Ray starts with this many CPUs
    try:
        cands, rep = gen.generate(2, workers=workers, executor=executor)
    finally:
        _shutdown_ray()
    assert rep.stages["enumerate"].computed == rep.units
    assert _facts(cands, rep) == serial2[0]
    assert _corpus_bytes(cands, tmp_path / "rules.json") == serial2[1]


def test_sharded_pairing_matches_one_in_memory_pass() -> None:
    units = gen.work_units(2, domains=("mat", "heads"))
    results = [gen.run_unit(u) for u in units]
    graphs, _ = gen.merge_unit_results(results)
    ref, _ = gen.candidates_from([graphs[k] for k in sorted(graphs)])
    seen: dict[str, gen.Candidate] = {}
    for c in ref:
        cc = gen.canonical(c)
        seen.setdefault(cc.text(), cc)
    ref = [c for c in seen.values() if not gen.common_subgraph(c) and not gen.common_supergraph(c)]

    k_fp, k_text = 3, 5
    unit_parts = [gen.enumerate_unit((u, k_fp))[1] for u in units]
    pair_parts = [gen.pair_shard(([p[s] for p in unit_parts], k_text))[1] for s in range(k_fp)]
    survivors = [r for q in range(k_text) for r in gen.prune_shard([p[q] for p in pair_parts])[3]]
    sharded = [c for _, c in sorted(survivors, key=lambda r: r[0])]
    assert [c.text() for c in sharded] == [c.text() for c in ref]
    assert [(c.lhs_ops, c.rhs_ops) for c in sharded] == [(c.lhs_ops, c.rhs_ops) for c in ref]


@pytest.mark.slow  # a whole N = 2 generation (the sharded pairing test checks shards in the fast lane)
def test_shard_counts_do_not_change_the_result(serial2: tuple[tuple[Any, ...], bytes]) -> None:
    cands, rep = gen.generate(2, workers=1, executor="serial", shards=(1, 7))
    assert _facts(cands, rep) == serial2[0]


@pytest.mark.slow  # a whole N = 2 generation on a process pool: 1.2 s alone, 5.7 s under the suite
def test_pool_works_without_ray(monkeypatch: pytest.MonkeyPatch, serial2: tuple[tuple[Any, ...], bytes]) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert not dist.ray_available()
    assert dist.resolve_backend("auto", 2) == "pool"
    assert dist.resolve_backend("auto", 1) == "serial"
    with pytest.raises(RuntimeError, match="needs Ray"):
        dist.resolve_backend("ray", 2)
    cands, rep = gen.generate(2, workers=2)  # executor "auto"
    assert _facts(cands, rep) == serial2[0]


# ---------------------------------------------------------------------------------------------------------
# resuming, retries and stale results, on a toy stage (module-level functions, so workers can import them)


def _square(args: tuple[int, str]) -> int:
    """A unit that records each execution as a file in ``log`` (its item number and process id)."""
    i, log = args
    Path(log, f"{i}-{os.getpid()}-{len(os.listdir(log))}").touch()
    return i * i


def _square_killing_itself(args: tuple[int, str]) -> int:
    """Like :func:`_square`, but the process running unit 3 is killed the first time (marker file)."""
    i, log = args
    if i == 3:
        try:
            fd = os.open(Path(log, "killed-once"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            pass
        else:
            os.close(fd)
            os.kill(os.getpid(), signal.SIGKILL)
    return _square(args)


def _always_killed(args: tuple[int, str]) -> int:
    if args[0] == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return 0


def _executions(log: Path) -> list[int]:
    return sorted(int(p.name.split("-")[0]) for p in log.iterdir() if p.name[0].isdigit())


def _stage(executor: dist.Executor, store: dist.ResultStore, fn: Any, log: Path, n: int = 8,
           salt: str = "s") -> tuple[list[Any], dist.StageStats]:
    keys = [store.key("toy", salt, i) for i in range(n)]
    return dist.run_stage(executor, store, fn, keys, lambda i: (i, str(log)))


_KILLED_RUN = """
import os, signal, sys
from eqsat.rules import distributed as dist
from pathlib import Path

def unit(i):
    if i == 5:
        os.kill(os.getpid(), signal.SIGKILL)  # the whole run dies here, as if killed or out of power
    return i * i

store = dist.ResultStore(sys.argv[1])
keys = [store.key("toy", "s", i) for i in range(8)]
dist.run_stage(dist.Executor(workers=1, backend="serial"), store, unit, keys, lambda i: i)
"""


def test_resume_after_a_killed_run_redoes_only_missing_units(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-c", _KILLED_RUN, str(tmp_path / "store")], capture_output=True,
                         timeout=120)
    assert res.returncode == -signal.SIGKILL
    store = dist.ResultStore(tmp_path / "store")
    log = tmp_path / "log"
    log.mkdir()
    out, stats = _stage(dist.Executor(workers=2, backend="pool"), store, _square, log)
    assert out == [i * i for i in range(8)]
    assert _executions(log) == [5, 6, 7] and (stats.computed, stats.reused) == (3, 5)
    assert not [p for p in (tmp_path / "store").rglob("*.tmp")]  # atomic writes leave no partial files


def test_deleted_results_are_recomputed_and_nothing_else(tmp_path: Path) -> None:
    store = dist.ResultStore(tmp_path / "store")
    log = tmp_path / "log"
    log.mkdir()
    ex = dist.Executor(workers=2, backend="pool")
    first, _ = _stage(ex, store, _square, log)
    assert _executions(log) == list(range(8))
    for i in (2, 6):
        store.delete(store.key("toy", "s", i))
    for p in log.iterdir():
        p.unlink()
    again, stats = _stage(ex, store, _square, log)
    assert again == first and _executions(log) == [2, 6] and stats.computed == 2


def test_stale_results_of_other_code_are_not_reused(tmp_path: Path) -> None:
    store = dist.ResultStore(tmp_path / "store")
    log = tmp_path / "log"
    log.mkdir()
    ex = dist.Executor(workers=1, backend="serial")
    _stage(ex, store, _square, log, n=3, salt="v1")
    _, stats = _stage(ex, store, _square, log, n=3, salt="v2")
    assert stats.computed == 3 and _executions(log) == [0, 0, 1, 1, 2, 2]
    src = tmp_path / "code.py"
    src.write_text("x = 1\n")
    before = dist.source_salt(src)
    src.write_text("x = 2\n")
    assert dist.source_salt(src) != before


@pytest.mark.slow  # four generation runs (the toy stages above check resuming in the fast lane)
def test_generation_resumes_and_code_changes_invalidate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        serial2: tuple[tuple[Any, ...], bytes]) -> None:
    folder = tmp_path / "units"
    gen.generate(2, workers=1, executor="serial", results_dir=folder)
    units = gen.work_units(2)
    store = dist.ResultStore(folder)
    gone = [units[5], units[40], units[-1]]
    for u in gone:
        store.delete(store.key("enumerate", gen.generator_salt(), (u, gen.SHARDS[2])))
    cands, rep = gen.generate(2, workers=1, executor="serial", results_dir=folder)
    assert rep.stages["enumerate"].computed == len(gone)
    assert rep.stages["enumerate"].reused == len(units) - len(gone)
    assert all(rep.stages[s].computed == 0 for s in ("pair", "prune", "confirm"))
    assert _facts(cands, rep) == serial2[0]
    monkeypatch.setattr(gen, "generator_salt", lambda: "other code")
    _, rep = gen.generate(2, workers=1, executor="serial", results_dir=folder, domains=("mat",))
    assert rep.stages["enumerate"].reused == 0
    _, rep = gen.generate(2, workers=1, executor="serial", results_dir=folder, domains=("mat",), fresh=True)
    assert rep.stages["enumerate"].reused == 0


@pytest.mark.slow  # a process pool started, one worker killed and restarted: 2 to 6 s on two cores
@pytest.mark.parametrize("backend", ["pool", pytest.param("ray", marks=ON_RAY)])
def test_a_killed_worker_is_retried(backend: str, tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.mkdir()
    if backend == "ray":
        import ray.cloudpickle

        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import tests/
    try:
        out, stats = _stage(dist.Executor(workers=2, backend=backend), dist.ResultStore(), _square_killing_itself,
                            log)
    finally:
        _shutdown_ray()
    assert (log / "killed-once").exists()
    assert out == [i * i for i in range(8)] and stats.computed == 8
    assert set(_executions(log)) == set(range(8))


@needs_ray
def test_a_cluster_that_refuses_the_connection_names_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    _shutdown_ray()

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("Failed to connect to Ray cluster at 127.0.0.1:1")

    monkeypatch.setattr(ray, "init", refuse)
    ex = dist.Executor(workers=2, backend="ray", address="127.0.0.1:1")
    with pytest.raises(ConnectionError, match="127.0.0.1:1.*RAY_AUTH_MODE=token"):
        list(ex.imap(abs, 1, lambda i: -i))


def test_a_unit_that_always_kills_its_worker_stops_the_run(tmp_path: Path) -> None:
    with pytest.raises(dist.WorkerLost, match="died 2 times"):
        _stage(dist.Executor(workers=2, backend="pool", retries=1), dist.ResultStore(), _always_killed, tmp_path)


def test_parts_are_read_one_at_a_time(tmp_path: Path) -> None:
    store = dist.ResultStore(tmp_path)
    store.put("ab12", {"n": 3}, [b"zero", b"", b"two" * 1000])
    assert store.has("ab12") and store.get("ab12") == {"n": 3}
    assert [store.part("ab12", i) for i in range(3)] == [b"zero", b"", b"two" * 1000]
    with pytest.raises(IndexError):
        store.part("ab12", 3)
    temp = dist.ResultStore()
    root = temp.root
    temp.close()
    assert not root.exists()


def test_verification_is_the_same_on_any_executor_and_resumes(tmp_path: Path) -> None:
    from eqsat.rules import verifier

    eqs = [(["(ewadd ?x1 ?x2)"], ["(ewadd ?x2 ?x1)"]), (["(relu ?x1)"], ["?x1"]),
           (["(transpose [1 0] (transpose [1 0] ?x1))"], ["?x1"]),
           (["(matmul (matmul ?x1 ?w1) ?w2)"], ["(matmul ?x1 (matmul ?w1 ?w2))"]),
           (["(ewmul ?x1 ?x2)"], ["(ewmul ?x2 ?x1)"])]
    # a small budget (Z3 resource units, reproducible) keeps the unprovable relu equation short; the verdicts
    # are the same with the default budget, only reached sooner
    budget = {"rlimit": 200_000, "timeout": 5.0}
    serial = verifier.verify_many(eqs, workers=1, executor="serial", **budget)
    assert [v.status for v in serial] == ["proved", "unknown", "proved", "proved", "proved"]
    said: list[str] = []
    pooled = verifier.verify_many(eqs, workers=2, executor="pool", results_dir=tmp_path, progress=said.append,
                                  **budget)
    assert [(v.status, v.reason) for v in pooled] == [(v.status, v.reason) for v in serial]
    assert any("2 to run" in m for m in said)  # two units of up to four equations
    said.clear()
    again = verifier.verify_many(eqs, workers=2, executor="pool", results_dir=tmp_path, progress=said.append,
                                 **budget)
    assert [v.status for v in again] == [v.status for v in serial] and not said  # nothing run again
