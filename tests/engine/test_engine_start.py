"""The engine's start: egglog's compiled core loaded by itself, so a later ``import egglog`` still works."""

from __future__ import annotations

import subprocess
import sys


def test_egglog_core_loaded_alone_is_the_one_the_package_uses() -> None:
    code = (
        "import sys\n"
        "from eqsat.engine.saturation import egglog_bindings\n"
        "b = egglog_bindings()\n"
        "assert 'egglog' not in sys.modules, 'the package was imported'\n"
        "eg = b.EGraph()\n"
        "eg.run_program(*eg.parse_program('(datatype N (Num i64)) (let x (Num 1))'))\n"
        "import egglog\n"
        "from egglog import bindings\n"
        "assert bindings is b\n"
        "class V(egglog.Expr):\n"
        "    def __init__(self, v: egglog.i64Like) -> None: ...\n"
        "egglog.EGraph().let('v', V(1))\n"
        "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
