"""docs/cli.md's reference is the command line's own ``--help`` text, as ``COLUMNS=100 eqsat ... --help`` prints it:
a parser change without the docs fails here. ``python tests/cli/test_cli_docs.py`` writes the docs anew."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
#: a reference entry: the heading naming the command, then its help in a text block
ENTRY = re.compile(r"(### (eqsat[a-z ]*)\n\n```text\n)(.*?)(\n```)", re.S)


def help_text(command: str) -> str:
    """What ``COLUMNS=100 eqsat <command> --help`` prints (``command`` as the heading names it)."""
    from eqsat.cli.app import build_parser

    parser = build_parser()
    for word in command.split()[1:]:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[word]
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        return parser.format_help().rstrip("\n")
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def written(text: str) -> str:
    """``text`` (docs/cli.md) with each reference entry's block replaced by the command's help."""
    return ENTRY.sub(lambda m: m.group(1) + help_text(m.group(2)) + m.group(4), text)


def test_the_reference_is_the_command_lines_help(monkeypatch: pytest.MonkeyPatch) -> None:
    text = DOC.read_text(encoding="utf-8")
    entries = ENTRY.findall(text)
    assert len(entries) >= 20 and entries[1][1] == "eqsat optimize"
    stale = [name for _, name, block, _ in entries if block != help_text(name)]
    assert not stale, (f"docs/cli.md's reference differs from --help for {', '.join(stale)}: run "
                       "`python tests/cli/test_cli_docs.py` to write it anew")


if __name__ == "__main__":
    DOC.write_text(written(DOC.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"wrote {DOC}", file=sys.stderr)
