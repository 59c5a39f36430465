"""Ctrl-C: at any phase, ``eqsat optimize`` stops within 2 s, writes nothing and exits with status 130.

Each test runs the CLI in a child process, reads its progress lines (stderr) until the phase it is about has
begun, sends SIGINT and times the exit. CP-SAT's own SIGINT handler used to take Ctrl-C during extraction as
"stop searching": the run went on with the solver's incumbent, wrote its files and exited 0.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest

from eqsat import models

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process is POSIX only")


def _interrupt(tmp_path: Path, model: onnx.ModelProto, options: list[str], marker: str) -> tuple[int, float, str]:
    """Run ``eqsat optimize`` on ``model`` with ``options``; once a stderr line contains ``marker``, send SIGINT.
    Returns the exit status, the seconds from the signal to the exit, and stderr."""
    src, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(model, str(src))
    # SIGINT as a terminal delivers it: a suite started in the background by a shell without job control ignores
    # SIGINT, its children inherit that, and Python installs no KeyboardInterrupt handler then
    proc = subprocess.Popen([sys.executable, "-m", "eqsat", "optimize", str(src), "-o", str(out), "--no-check",
                             *options], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stderr is not None
    try:
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if marker in line:
                break
        else:
            pytest.fail(f"the run ended (status {proc.wait()}) before a line with {marker!r}:\n{''.join(seen)}")
        t = time.monotonic()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
        waited = time.monotonic() - t
        seen.append(proc.stderr.read())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not out.exists(), "an interrupted run wrote its model"
    return code, waited, "".join(seen)


@pytest.mark.slow  # a child process: Python, imports, saturation and a CP-SAT solve that would run for minutes
def test_ctrl_c_during_extraction_stops_the_run(tmp_path: Path) -> None:
    """NasRNN (hidden 256) after 3 iterations: CP-SAT is far from proving its extraction optimal in minutes on
    two cores, so the signal comes while it searches (the first solution it reports is the sign it does)."""
    code, waited, err = _interrupt(tmp_path, models.taso_nasrnn(hidden=256),
                                   ["--iter-limit", "3", "--no-anytime", "--time-limit", "600"], "cpsat: cost ")
    assert code == 130, err
    assert waited < 2.0, (waited, err)
    assert "eqsat: interrupted" in err and "cpsat: done" not in err and "Traceback" not in err, err


@pytest.mark.slow  # a child process: Python, imports and a saturation that would run for minutes
@pytest.mark.parametrize("anytime", [False, True], ids=["engine", "anytime"])
def test_ctrl_c_during_saturation_stops_the_run(tmp_path: Path, anytime: bool) -> None:
    """Saturation runs in an engine process and, with anytime, snapshots are extracted by CP-SAT meanwhile:
    Ctrl-C stops both (the engine process is killed)."""
    code, waited, err = _interrupt(tmp_path, models.taso_nasrnn(hidden=64),
                                   ["--time-limit", "600", *([] if anytime else ["--no-anytime"])], "iteration 1:")
    assert code == 130, err
    assert waited < 2.0, (waited, err)
    assert "eqsat: interrupted" in err and "costing" not in err and "Traceback" not in err, err


@pytest.mark.slow  # a child process that times operators in onnxruntime
def test_ctrl_c_while_timing_operators_stops_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Measured costs: Ctrl-C while operators are timed (an empty cache, so there is timing to do)."""
    monkeypatch.setenv("EQSAT_CACHE_DIR", str(tmp_path / "cache"))
    code, waited, err = _interrupt(tmp_path, models.mobilenet_v2(), ["--costs", "measured", "--time-limit", "600",
                                                                     "--iter-limit", "1"], "timed ")
    assert code == 130, err
    assert waited < 2.0, (waited, err)
    assert "eqsat: interrupted" in err and "extracted" not in err and "Traceback" not in err, err
