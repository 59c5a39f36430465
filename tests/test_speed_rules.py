"""tests/conftest.py's speed rules on a throwaway suite: slow tests run first, and a test not marked slow fails
the run past the limit (named in the summary) and is only warned about between the two thresholds.

The thresholds come from EQSAT_TEST_SLOW_S / EQSAT_TEST_FAIL_S so the tests sleep a fraction of a second."""

from __future__ import annotations

from pathlib import Path

import pytest

CONFTEST = Path(__file__).with_name("conftest.py")

SUITE = """
import time

import pytest


def test_quick():
    pass


def test_over_the_warning():
    time.sleep(0.3)


def test_over_the_limit():
    time.sleep(0.8)


@pytest.mark.slow
def test_marked_slow():
    time.sleep(0.8)
"""


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str) -> pytest.RunResult:
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n    gpu: gpu\n")
    pytester.makepyfile(test_suite=SUITE)
    monkeypatch.setenv("EQSAT_TEST_SLOW_S", "0.2")
    monkeypatch.setenv("EQSAT_TEST_FAIL_S", "0.6")
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def test_an_unmarked_test_over_the_limit_fails_the_run_and_is_named(pytester: pytest.Pytester,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    res = _run(pytester, monkeypatch, "-v")
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    res.assert_outcomes(passed=4)
    out = res.stdout.str()
    failing = out[out.index("tests too slow to be unmarked"):]
    assert "test_suite.py::test_over_the_limit" in failing and "test_marked_slow" not in failing
    warned = out[out.index("not marked slow (warning)"):out.index("tests too slow to be unmarked")]
    assert "test_suite.py::test_over_the_warning" in warned and "test_quick" not in warned
    # slow tests first, the others in file order
    order = [line.split("::")[1].split()[0] for line in res.outlines if "::test_" in line and "PASSED" in line]
    assert order == ["test_marked_slow", "test_quick", "test_over_the_warning", "test_over_the_limit"]


def test_the_fast_lane_passes_when_the_unmarked_tests_are_quick(pytester: pytest.Pytester,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    res = _run(pytester, monkeypatch, "-m", "not slow", "-k", "quick or warning")
    assert res.ret == pytest.ExitCode.OK
    res.assert_outcomes(passed=2, deselected=2)
    assert "not marked slow (warning)" in res.stdout.str() and "too slow to be unmarked" not in res.stdout.str()


def test_the_check_can_be_turned_off(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EQSAT_TEST_FAIL_S", "0")
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n    gpu: gpu\n")
    pytester.makepyfile(test_suite=SUITE)
    monkeypatch.setenv("EQSAT_TEST_SLOW_S", "0.2")
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "limit")
    assert res.ret == pytest.ExitCode.OK


GROUPED = """
import pytest

pytestmark = pytest.mark.xdist_group("shared")


@pytest.mark.parametrize("k", range(6))
def test_member(k):
    pass
"""


@pytest.mark.slow  # two xdist workers in a child pytest
def test_a_group_runs_on_one_worker(pytester: pytest.Pytester) -> None:
    """conftest's loadgroup fix: the tests of one xdist_group all run on the same worker."""
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n    gpu: gpu\n")
    pytester.makepyfile(test_grouped=GROUPED, test_loose="def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "-v")
    res.assert_outcomes(passed=8)
    members = [line.split()[0] for line in res.outlines
               if line.startswith("[gw") and "test_member[" in line and "@shared" in line]
    assert len(members) == 6 and len(set(members)) == 1, res.stdout.str()  # "[gw0]" six times
