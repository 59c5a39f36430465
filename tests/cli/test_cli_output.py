"""What the CLI writes: output paths checked before the run and written whole after it, special files written
through (never replaced), and the page ``eqsat egraph view`` writes.

The CLI runs in-process (``eqsat.cli.app.main``) on a one-node model with the starter rules: fast.
"""

from __future__ import annotations

import json
import os
import re
import stat
import threading
from pathlib import Path

import onnx
import pytest
from onnx import helper

from eqsat.cli.app import main
from eqsat.files import write_file
from eqsat.inspect.dump import EGraphDump
from eqsat.testing.onnx_builders import make_model


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """x -> Relu -> Transpose -> y: small, with something for the starter rules to rewrite."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Transpose", ["r"], ["y"], perm=[1, 0])]
    path = tmp_path / "m.onnx"
    onnx.save(make_model(nodes, [("x", [2, 3])], [("y", [3, 2])], name="small"), str(path))
    return path


def _optimize(*args: str) -> int:
    return main(["optimize", *args, "-q", "--time-limit", "5", "--rules", "starter"])


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("eqsat: error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def _read_fifo(path: Path) -> tuple[threading.Thread, list[bytes]]:
    """A thread reading ``path`` (a FIFO) to its end, as ``cat fifo > file`` would; its bytes land in the list."""
    got: list[bytes] = []

    def read() -> None:
        with open(path, "rb") as f:
            got.append(f.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader, got


def _release(path: Path, reader: threading.Thread) -> None:
    """End a reader still waiting for a writer (the run failed before opening the FIFO): open and close it."""
    if reader.is_alive():
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
        reader.join(timeout=10)


# -- special files are written through ------------------------------------------------------------------------


def test_output_to_a_fifo_is_written_through(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "pipe.onnx"
    os.mkfifo(fifo)
    reader, got = _read_fifo(fifo)
    try:
        code = _optimize(str(model), "-o", str(fifo))
    finally:
        _release(fifo, reader)
    assert code == 0, capsys.readouterr().err
    reader.join(timeout=30)
    assert got and got[0], "nothing came through the FIFO"
    written = onnx.load_model_from_string(got[0])
    onnx.checker.check_model(written)
    assert [o.name for o in written.graph.output] == ["y"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still the pipe, not a regular file renamed over it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "pipe.onnx"]  # no temporary file left


def test_dev_null_stays_a_character_device(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _optimize(str(model), "-o", os.devnull, "--dump-egraph", os.devnull) == 0, capsys.readouterr().err
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    assert f"wrote {os.devnull}" in capsys.readouterr().out


def test_dump_write_goes_through_a_fifo(tmp_path: Path) -> None:
    """``EGraphDump.write`` shares the CLI's writer: a FIFO gets the text, a regular file is replaced whole."""
    dump = EGraphDump.loads('{"eqsat": {"format": "eqsat-egraph", "version": 2}, "root_eclasses": ["T-0"], '
                            '"nodes": {"n0": {"op": "Input", "children": [], "eclass": "T-0", "cost": 0.0, '
                            '"in_input": true, "chosen": false}}, '
                            '"class_data": {"T-0": {"type": "T", "shape": [2]}}}')
    fifo = tmp_path / "eg.json"
    os.mkfifo(fifo)
    reader, got = _read_fifo(fifo)
    try:
        dump.write(fifo)
    finally:
        _release(fifo, reader)
    reader.join(timeout=30)
    assert got and json.loads(got[0])["root_eclasses"] == ["T-0"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    plain = tmp_path / "plain.json"
    plain.write_text("old")
    dump.write(plain)
    assert json.loads(plain.read_text())["root_eclasses"] == ["T-0"]


def test_regular_file_is_replaced_whole_and_a_link_keeps_its_target(tmp_path: Path) -> None:
    target = tmp_path / "real.txt"
    target.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    write_file(link, lambda p: p.write_text("new"))
    assert link.is_symlink() and target.read_text() == "new"

    def fail(p: Path) -> None:
        p.write_text("partial")
        raise RuntimeError("the writer failed")

    with pytest.raises(RuntimeError):
        write_file(target, fail)
    assert target.read_text() == "new"  # the old file, untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "real.txt"]


# -- unwritable paths ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["/proc/eqsat-test.onnx", "/proc/eqsat-test/deeper/o.onnx"])
def test_unwritable_output_is_refused_before_the_run(where: str, model: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Root may write anywhere by os.access, but not in /proc: the check tries, before any work."""
    from eqsat.pipeline import run as pipeline

    def no_run(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("the run started before the output path was checked")

    monkeypatch.setattr(pipeline, "optimize", no_run)
    assert _optimize(str(model), "-o", where) == 2
    line = _error_line(capsys)
    assert f"-o {where}: cannot create a file in /proc" in line and "choose another path" in line
    assert ".tmp" not in line and ".probe" not in line


def test_read_only_folder_is_refused_before_the_run(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder without write permission (os.access answers as for a user without it: root has them all)."""
    from eqsat import files

    folder = tmp_path / "ro"
    folder.mkdir()
    real = os.access
    monkeypatch.setattr(files.os, "access", lambda p, mode: os.path.realpath(p) != os.path.realpath(folder)
                        and real(p, mode))
    assert _optimize(str(model), "-o", str(folder / "o.onnx")) == 2
    assert _error_line(capsys) == (f"eqsat: error: -o {folder / 'o.onnx'}: no permission to write there; choose "
                                   "another path")
    assert list(folder.iterdir()) == []


def test_write_failing_at_the_end_names_the_users_path(model: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # a full disk: /dev/full passes the check (a writable device) and refuses the bytes
    assert Path("/dev/full").exists()
    assert _optimize(str(model), "-o", "/dev/full") == 2
    line = _error_line(capsys)
    assert "cannot write /dev/full: No space left on device; free some space" in line
    # a folder that can no longer be written when the run ends (the checks passed before): the user's path,
    # never the temporary file's name
    from eqsat.cli import app

    monkeypatch.setattr(app, "check_output", lambda path, option, example: Path(path))
    monkeypatch.setattr(app, "check_space", lambda path, needed, what: None)
    assert _optimize(str(model), "-o", "/proc/eqsat-test/o.onnx") == 2
    line = _error_line(capsys)
    assert line.startswith("eqsat: error: cannot write /proc/eqsat-test/o.onnx: ") and ".tmp" not in line


def test_every_output_option_is_checked_before_the_run(model: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Each subcommand's output option refuses a path under a file, before reading its inputs (which do not
    exist here: their error would come first otherwise)."""
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    bad = str(blocker / "out")
    missing = str(tmp_path / "missing.json")
    for argv, option in ((["optimize", str(model), "-o", str(tmp_path / "o.onnx"), "--dump-egraph", bad],
                          "--dump-egraph"),
                         (["demo", "-o", bad], "-o"),
                         (["compare", str(model), "--json", bad], "--json"),
                         (["egraph", "render", missing, "-o", bad + ".dot"], "-o"),
                         (["egraph", "view", missing, "-o", bad + ".html"], "-o"),
                         (["egraph", "export", missing, "--model", str(model), "-o", bad], "-o"),
                         (["rules", "generate", "--out", bad], "--out"),
                         (["rules", "select", missing, "--out", bad], "--out")):
        assert main(argv) == 2, argv
        line = _error_line(capsys)
        assert f"{option} {bad}" in line and "is a file, not a folder" in line, (argv, line)
    assert not (tmp_path / "o.onnx").exists()


# -- eqsat egraph view ------------------------------------------------------------------------------------------


def test_view_opens_fitted_to_the_window_with_the_choice_highlighted(model: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    dump_path, page_path = tmp_path / "eg.json", tmp_path / "eg.html"
    assert _optimize(str(model), "-o", str(tmp_path / "o.onnx"), "--dump-egraph", str(dump_path)) == 0
    assert main(["egraph", "view", str(dump_path), "-o", str(page_path)]) == 0
    capsys.readouterr()
    dump = EGraphDump.read(dump_path)
    page = page_path.read_text()
    # fitted: the drawing's panel fills the window, and the visualizer's fit on load goes through eqsat's
    module = re.search(r'<script type="module">\n(.*)</script>', page, re.S)
    assert module
    assert module.group(1).count("window.eqsatFit ? window.eqsatFit(") == 1
    assert "window.eqsatFit = (flow) =>" in module.group(1) and "flow.setViewport(" in module.group(1)
    assert re.search(r"#egraph-visualizer \{ height: calc\(100vh - [\d.]+em\)", page)
    # highlighted: every chosen e-node drawn, and no other, has a rule in the choice's stylesheet
    style = re.search(r'<style id="eqsat-chosen">\n(.*?)</style>', page, re.S)
    assert style
    marked = set(re.findall(r'\[data-id="node-([^"]+)"\]', style.group(1)))
    drawn = {n.id for n in dump.egraph.nodes if n.op not in ("TNil", "TCons")}
    assert dump.chosen and marked == dump.chosen & drawn
    assert "background-color" in style.group(1) and "highlighted in yellow" in page
