"""Helpers shared by the benchmark scripts (each run as ``python benchmarks/NAME.py``)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git_commit(mark_uncommitted: bool = False) -> str:
    """Short hash of HEAD (``unknown`` outside git), with " (with uncommitted changes)" when asked and the
    tracked files differ from it, so a results file says what it measured."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                              timeout=10, cwd=here).stdout.strip()
        dirty = mark_uncommitted and subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, check=True,
            timeout=10, cwd=here).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head or "unknown") + (" (with uncommitted changes)" if dirty else "")
