"""The version is written once (``eqsat.__version__``): ``eqsat --version``, ``python -m eqsat --version`` and the
installed distribution's metadata all report it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import eqsat


def _version_line(*command: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.strip()


def test_distribution_metadata_has_the_package_version() -> None:
    assert metadata.version("eqsat") == eqsat.__version__


def test_python_m_eqsat_version() -> None:
    assert _version_line(sys.executable, "-m", "eqsat", "--version") == f"eqsat {eqsat.__version__}"


def test_console_script_version() -> None:
    # the script the installation put beside this interpreter (a virtual environment's bin/), else the one on PATH
    beside = Path(sys.executable).with_name("eqsat")
    script = str(beside) if beside.exists() else shutil.which("eqsat")
    assert script, "the eqsat console script is not installed"
    assert _version_line(script, "--version") == f"eqsat {metadata.version('eqsat')}"
