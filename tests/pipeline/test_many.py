"""Many models at once (eqsat.pipeline.many, ``eqsat optimize A B ... --out-dir DIR``): every model written as it
finishes, the same result as alone, one model's failure on its own line and never the others', clear errors
before any work."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

import eqsat
from eqsat import onnx_io
from eqsat.cli.app import main
from eqsat.models.registry import builtin_models
from eqsat.pipeline.many import ModelOutcome, optimize_many, outcomes_table

SMALL = ("small_cnn", "two_matmul_shared_input", "bert_attention_block")


def _models(folder: Path, broken: bool = True) -> list[Path]:
    paths = []
    for name in SMALL:
        paths.append(folder / f"{name}.onnx")
        onnx.save(builtin_models()[name](), str(paths[-1]))
    if broken:
        paths.insert(1, folder / "broken.onnx")
        paths[1].write_bytes(b"not an onnx file")
    return paths


@pytest.mark.slow  # three optimize runs in two worker processes, and the same three alone (about 8 s)
def test_each_model_is_written_as_alone_and_a_broken_one_fails_on_its_own_line(tmp_path: Path) -> None:
    paths = _models(tmp_path)
    lines: list[str] = []
    outcomes = optimize_many(paths, tmp_path / "out", workers=2, backend="pool", progress=lines.append,
                             time_limit=30, cache=False)
    assert [o.model for o in outcomes] == [str(p) for p in paths]  # in the order given, whatever finished first
    assert outcomes[1].written == "failed" and "ModelReadError" in outcomes[1].reason and not outcomes[1].output
    assert sum("FAILED" in line for line in lines) == 1 and len(lines) == 1 + len(paths)
    for o in (x for x in outcomes if x.written != "failed"):
        alone = eqsat.optimize(o.model, time_limit=30, cache=False)
        written = onnx.load(o.output)
        assert o.written == ("original" if alone.kept_original else "optimized")
        # the same cost (CP-SAT's parallel search may break a tie between equal-cost graphs either way)
        assert o.cost_after == pytest.approx(alone.cost_after, rel=1e-6)
        feeds = onnx_io.random_feeds(onnx.load(o.model), seed=0)
        for a, b in zip(onnx_io.run_onnxruntime(written, feeds), onnx_io.run_onnxruntime(onnx.load(o.model), feeds),
                        strict=True):
            assert abs(a - b).max() <= 1e-3 * max(1.0, abs(b).max())
    table = outcomes_table(outcomes)
    assert "broken.onnx" in table and table.splitlines()[-1].endswith("1 failed")


def test_two_models_of_one_name_and_options_that_cannot_travel_are_refused_before_any_work(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    twins = [tmp_path / "a" / "m.onnx", tmp_path / "b" / "m.onnx"]
    with pytest.raises(ValueError, match="both be written to"):
        optimize_many(twins, tmp_path / "out")
    from eqsat.costs import get_cost_model

    with pytest.raises(ValueError, match="give cost_model by name"):
        optimize_many([twins[0]], tmp_path / "out", cost_model=get_cost_model("analytic"))
    with pytest.raises(ValueError, match="one model at a time"):
        optimize_many([twins[0]], tmp_path / "out", dump_egraph=True)
    assert not (tmp_path / "out").exists()


def test_the_table_reads_each_outcome() -> None:
    rows = [ModelOutcome("a.onnx", "out/a.opt.onnx", "optimized", 2.0, 1.0, 1.3, 4.0),
            ModelOutcome("b.onnx", "out/b.opt.onnx", "original", 1.0, 1.0, None, 1.0, "no gain"),
            ModelOutcome("c.onnx", "", "failed", seconds=0.1, reason="ModelReadError: bad")]
    lines = outcomes_table(rows).splitlines()
    assert lines[1].split()[:7] == ["a.onnx", "2", "1", "2.000x", "1.300x", "4.0", "optimized"]
    assert "no gain" in lines[2] and lines[3].split()[1:4] == ["-", "-", "-"]
    assert lines[-1] == "3 models: 1 optimized, 1 kept as given, 1 failed"
    assert rows[1].speedup == 1.0 and rows[2].speedup == 1.0


def test_the_cli_optimizes_several_models_into_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = _models(tmp_path)[:2]  # small_cnn and the broken file
    assert main(["optimize", *map(str, paths), "--out-dir", str(tmp_path / "out"), "--workers", "1", "-q",
                 "--no-cache", "--time-limit", "20"]) == 1  # one failed
    out = capsys.readouterr().out
    assert (tmp_path / "out" / "small_cnn.opt.onnx").is_file()
    assert "broken.onnx" in out and "1 failed" in out


@pytest.mark.parametrize("argv, message", [
    (["a.onnx", "b.onnx", "-o", "x.onnx"], "optimize several with --out-dir"),
    (["a.onnx", "--workers", "3", "-o", "x.onnx"], "add --out-dir"),
    (["a.onnx"], "-o/--output OUT.onnx is required"),
    (["a.onnx", "--out-dir", "d", "-o", "x.onnx"], "-o applies to one model at a time"),
])
def test_the_cli_says_what_several_models_need(argv: list[str], message: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("a.onnx", "b.onnx"):
        onnx.save(builtin_models()["small_cnn"](), name)
    assert main(["optimize", *argv]) == 2
    assert message in capsys.readouterr().err
    assert not Path("x.onnx").exists() and not Path("d").exists()


@pytest.mark.slow  # starts a local Ray (about 10 s)
def test_ray_tasks_write_what_the_pool_writes(tmp_path: Path) -> None:
    paths = _models(tmp_path, broken=False)[:2]
    by_ray = optimize_many(paths, tmp_path / "ray", workers=2, backend="ray", time_limit=30, cache=False)
    by_pool = optimize_many(paths, tmp_path / "pool", workers=2, backend="pool", time_limit=30, cache=False)
    assert [o.written for o in by_ray] == [o.written for o in by_pool] == ["optimized", "optimized"]
    for a, b in zip(by_ray, by_pool, strict=True):
        assert a.cost_after == pytest.approx(b.cost_after, rel=1e-6)
        assert onnx.load(a.output).graph.output[0].name == onnx.load(b.output).graph.output[0].name
