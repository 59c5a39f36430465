"""A disk without room for the output is refused before any work: the optimized model takes about what the
original takes, its external data included."""

from __future__ import annotations

import os
from collections import namedtuple
from pathlib import Path

import onnx
import pytest

from eqsat import files, models
from eqsat.cli.app import main
from eqsat.errors import UsageError
from eqsat.onnx_io import stored_bytes

_Usage = namedtuple("_Usage", "total used free")


@pytest.fixture
def external(tmp_path: Path) -> Path:
    """The two-matmul model with its weights in ``m.onnx.data``."""
    path = tmp_path / "m.onnx"
    onnx.save_model(models.two_matmul_shared_input(), str(path), save_as_external_data=True,
                    location="m.onnx.data", size_threshold=0)
    return path


def _free(monkeypatch: pytest.MonkeyPatch, free: int) -> None:
    monkeypatch.setattr(files.shutil, "disk_usage", lambda p: _Usage(10**12, 10**12 - free, free))


def test_the_room_needed_counts_the_external_data(external: Path, tmp_path: Path) -> None:
    data = os.path.getsize(tmp_path / "m.onnx.data")
    assert data > 0 and stored_bytes(external) == os.path.getsize(external) + data
    inline = tmp_path / "inline.onnx"
    onnx.save(models.two_matmul_shared_input(), str(inline))
    assert stored_bytes(inline) == os.path.getsize(inline)
    assert stored_bytes(tmp_path / "missing.onnx") == 0  # the run says what is wrong with it


def test_a_disk_without_room_for_the_output_is_refused_before_any_work(
        external: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import eqsat.pipeline.run
    from eqsat.pipeline.many import optimize_many

    def no_work(*args: object, **kwargs: object) -> None:
        raise AssertionError("the run started")

    monkeypatch.setattr(eqsat.pipeline.run, "optimize", no_work)
    needed = stored_bytes(external)
    _free(monkeypatch, needed - 1)
    out = tmp_path / "out" / "m.opt.onnx"
    assert main(["optimize", str(external), "-o", str(out), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"eqsat: error: -o {out}: writing it takes about {files._size(needed)}, and only "
                   f"{files._size(needed - 1)} is free in {tmp_path}; free some space or choose another path")
    assert not out.parent.exists()
    with pytest.raises(UsageError, match="free some space"):
        optimize_many([external, external.with_name("other.onnx")], tmp_path / "many", backend="serial")
    assert not (tmp_path / "many").exists()
    # with room for it, the run starts
    _free(monkeypatch, needed)
    with pytest.raises(AssertionError, match="the run started"):
        main(["optimize", str(external), "-o", str(out), "-q"])
