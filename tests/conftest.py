"""Fixtures shared by the whole suite, and the suite's speed rules.

Speed rules
-----------
``bash scripts/test.sh`` runs every test on two xdist workers; ``bash scripts/test.sh --fast`` runs the tests
not marked ``slow`` (``-m "not slow"``), which is what to run after each change (under 90 s on two cores; the
whole suite under 6 minutes). A test whose call takes more than ``SLOW_S`` (5 s) is marked ``slow``
(``pytestmark = pytest.mark.slow`` where a whole module is); so are the tests of about 1.5 s or more on a quiet
machine that run a full-size model, Ray, a child process, a time or memory limit used up, or the default rules
again where a sibling test in the fast lane already covers the same code with a smaller input. The reason is
written beside each mark.

This file enforces the rule after every run, from the call phase of each test (fixtures' setup is not
counted: a shared fixture is paid once, by whichever test needs it first):

* a test not marked slow whose call took more than ``FAIL_S`` (10 s) fails the run (exit status 1, its name
  and time in the "tests too slow to be unmarked" section);
* one that took more than ``SLOW_S`` (5 s) is named in a warning only.

Why two thresholds: durations are wall-clock times on machines that are often shared (two xdist workers on two
cores, other jobs beside them); a test of 2-3 s on a quiet machine can take over 5 s under load, and that
must not break a developer's run, while twice the limit is a test that is slow on any machine.
``EQSAT_TEST_FAIL_S`` overrides ``FAIL_S`` (``0`` turns the check off, e.g. while profiling or in a
debugger; ``--pdb`` turns it off too) and ``EQSAT_TEST_SLOW_S`` overrides ``SLOW_S`` (tests/test_speed_rules.py
uses both to check the rules on tests that sleep a fraction of a second).

Tests are ordered slow first (stable otherwise), so that xdist starts the long tests early instead of leaving
one worker with a long test at the end. ``scripts/test.sh`` runs ``--dist loadgroup``: the tests of one
``xdist_group`` (modules sharing a module cache or a session result; the Ray tests) run on one worker, so what
they share is computed once (``_XdistGroups`` below keeps that working under pytest 9.2).

Shared fixtures (session scope: computed once per worker process, and read-only for the tests; a test that
needs to change one copies it first):

* ``default_rules``: the rules ``optimize`` uses by default, as a tuple;
* ``builtin_model(name, **kw)`` / ``zoo_model(name)``: built-in models and seeded zoo models, built once;
* ``optimized(name)``: ``optimize`` of a small built-in model with its default options, for tests that only
  read the result;
* ``fired_rules(name)``: the default rules that matched while ``optimized(name)`` ran: with only these,
  saturation builds the same e-graph (a rule that never matches adds nothing) in about half the time, for
  tests of what comes after saturation;
* ``generated_n2``: the rule generator's candidates and report at N = 2 (serial executor);
* ``corpus_read_once`` (per test): ``eqsat.rules.corpus.read_corpus`` remembers each file it read, for tests
  that run ``eqsat rules show`` once per rule name.

Each worker also gets its own measured-cost cache folder (``EQSAT_CACHE_DIR``), so that no test reads or
writes the user's cache and workers never share one, and each test its own folder of cached transformations
(``EQSAT_TRANSFORMS_DIR``), so that a test's run never replays what another test's stored.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import onnx

pytest_plugins = ["pytester"]

SLOW_S = 5.0
FAIL_S = 10.0


# ---------------------------------------------------------------------------------------------------------
# the speed rules


# read once, when the suite starts (a test that sets these variables for a child pytest changes nothing here)
_SLOW_S = float(os.environ.get("EQSAT_TEST_SLOW_S", SLOW_S))
_FAIL_S = float(os.environ.get("EQSAT_TEST_FAIL_S", FAIL_S))


def _slow_s() -> float:
    return _SLOW_S


def _fail_s(config: pytest.Config) -> float:
    if config.getoption("usepdb", False) or config.getoption("trace", False):
        return 0.0
    return _FAIL_S


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow tests first (a stable sort: the same order in every xdist worker)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


class _XdistGroups:
    """``--dist loadgroup`` for pytest >= 9.2: pytest-xdist 3.8 names a test's group by renaming
    ``item._nodeid``, which pytest no longer reads (the id is ``item._id``), so every group was split across
    workers. Done here the same way (``<nodeid>@<group>``, groups joined by ``_``), in xdist's workers only,
    and left alone where xdist already did it."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if not getattr(config.option, "loadgroup", False):
            return
        from _pytest.nodeid import NodeId

        for item in items:
            names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                            for m in item.iter_markers("xdist_group")})
            if names and item.nodeid.rfind("@") <= item.nodeid.rfind("]"):
                item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_XdistGroups(), "eqsat-xdist-groups")


#: (test id, call seconds) of tests over SLOW_S not marked slow, as reported to this process (xdist's
#: controller, or the only process)
_UNMARKED_SLOW: list[tuple[str, float]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and "slow" not in report.keywords and report.duration > _slow_s():
        _UNMARKED_SLOW.append((report.nodeid, report.duration))


def _offenders(config: pytest.Config) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """(tests that fail the run, tests only warned about), slowest first."""
    limit = _fail_s(config)
    times = sorted(_UNMARKED_SLOW, key=lambda t: -t[1])
    failing = [t for t in times if limit > 0 and t[1] > limit]
    return failing, [t for t in times if t not in failing]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _is_worker(session.config):
        return
    failing, _ = _offenders(session.config)
    if failing and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if _is_worker(config):
        return
    failing, warned = _offenders(config)
    if warned:
        terminalreporter.write_sep("=", f"tests over {_slow_s():g} s not marked slow (warning)", yellow=True)
        for nodeid, t in warned:
            terminalreporter.write_line(f"{t:6.1f} s  {nodeid}")
        terminalreporter.write_line("mark them @pytest.mark.slow, or make them faster (tests/conftest.py)")
    if failing:
        terminalreporter.write_sep("=", f"tests too slow to be unmarked: over {_fail_s(config):g} s, not marked "
                                        "slow (this fails the run)", red=True)
        for nodeid, t in failing:
            terminalreporter.write_line(f"{t:6.1f} s  {nodeid}")
        terminalreporter.write_line("mark them @pytest.mark.slow, or make them faster (tests/conftest.py)")


# ---------------------------------------------------------------------------------------------------------
# isolation


@pytest.fixture(scope="session", autouse=True)
def _own_cost_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A measured-cost cache folder per worker process (tests that need their own still set theirs)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EQSAT_CACHE_DIR", str(tmp_path_factory.mktemp("eqsat-cost-cache")))
        yield


@pytest.fixture(autouse=True)
def _own_transform_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder of cached transformations per test (eqsat.pipeline.transforms)."""
    monkeypatch.setenv("EQSAT_TRANSFORMS_DIR", str(tmp_path_factory.mktemp("transforms", numbered=True)))


# ---------------------------------------------------------------------------------------------------------
# shared, read-only inputs


@pytest.fixture(scope="session")
def default_rules() -> tuple[Any, ...]:
    """The rules ``optimize`` uses when given none (corpus, extra and layout rules)."""
    from eqsat.pipeline import default_rules as rules

    return tuple(rules())


@pytest.fixture(scope="session")
def builtin_model() -> Callable[..., onnx.ModelProto]:
    """``builtin_model(name, **kw)``: ``eqsat.models.<name>(**kw)``, built once per session."""
    from eqsat import models

    cache: dict[tuple[str, tuple[tuple[str, Any], ...]], onnx.ModelProto] = {}

    def build(name: str, **kw: Any) -> onnx.ModelProto:
        key = (name, tuple(sorted(kw.items())))
        if key not in cache:
            cache[key] = getattr(models, name)(**kw) if kw else models.builtin_models()[name]()
        return cache[key]

    return build


@pytest.fixture(scope="session")
def zoo_model() -> Callable[[str], onnx.ModelProto]:
    """``zoo_model(name)``: the light zoo model with seed 0 (:func:`eqsat.models.load_zoo_model`), loaded once."""
    from eqsat import models

    cache: dict[str, onnx.ModelProto] = {}

    def load(name: str) -> onnx.ModelProto:
        if name not in cache:
            cache[name] = models.load_zoo_model(name, seed=0)
        return cache[name]

    return load


@pytest.fixture(scope="session")
def optimized(builtin_model: Callable[..., onnx.ModelProto]) -> Callable[[str], Any]:
    """``optimized(name)``: ``optimize(builtin model, time_limit=30)`` with the default rules and analytic costs,
    run once per session. The small built-in models saturate well within the limit, so the result does not depend
    on it, except the NasRNN cell's: its e-graph reaches the node limit (40 813 e-nodes, the element-wise
    operators over a split), where how far saturation got in its share depends on the machine's speed."""
    from eqsat.pipeline import optimize

    cache: dict[str, Any] = {}

    def run(name: str) -> Any:
        if name not in cache:
            cache[name] = optimize(builtin_model(name), time_limit=30)
        return cache[name]

    return run


@pytest.fixture(scope="session")
def generated_n2() -> tuple[list[Any], Any]:
    """``eqsat.rules.generator.generate(2)`` on the serial executor: (candidates, report). The distributed
    tests check that every executor and worker count gives exactly these."""
    from eqsat.rules import generator

    return generator.generate(2, workers=1, executor="serial")


@pytest.fixture(scope="session")
def fired_rules(optimized: Callable[[str], Any], default_rules: tuple[Any, ...],
                builtin_model: Callable[..., onnx.ModelProto]) -> Callable[..., list[Any]]:
    """``fired_rules(name, rules=None)``: of ``rules`` (the default ones when None), those with a direction that
    matched while the built-in model ``name`` was optimized with them (``optimized(name)`` for the default rules,
    else ``optimize(model, rules=rules, time_limit=30)``, run once a session), in their order."""
    from eqsat.pipeline import optimize

    runs: dict[tuple[str, tuple[str, ...]], Any] = {}

    def fired(name: str, rules: Sequence[Any] | None = None) -> list[Any]:
        if rules is None:
            res, rules = optimized(name), default_rules
        else:
            key = (name, tuple(r.name for r in rules))
            if key not in runs:
                runs[key] = optimize(builtin_model(name), rules=list(rules), time_limit=30)
            res = runs[key]
        names = set(res.rules_fired)
        return [r for r in rules if any(d.name in names for d in r.directions())]

    return fired


_CORPUS_READS: dict[tuple[str, int], tuple[list[Any], dict[str, Any]]] = {}


@pytest.fixture
def corpus_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``eqsat.rules.corpus.read_corpus`` remembers what it read, by path and modification time (each call
    gets its own lists, of the same entries)."""
    from eqsat.rules import corpus

    real = corpus.read_corpus

    def read(path: str | Path = corpus.CORPUS_PATH) -> tuple[list[Any], dict[str, Any]]:
        p = Path(path)
        key = (str(p.resolve()), p.stat().st_mtime_ns if p.exists() else -1)
        if key not in _CORPUS_READS:
            _CORPUS_READS[key] = real(path)
        entries, meta = _CORPUS_READS[key]
        return list(entries), dict(meta)

    monkeypatch.setattr(corpus, "read_corpus", read)
