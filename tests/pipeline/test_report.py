"""Reports that mean what they say: node counts of the written files, real speedups, explained cost gaps,
no fake fusion gains, no unused initializers, resolvable rule names, one default rule set, a README that runs."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from eqsat import models
from eqsat.cli.app import main
from eqsat.cli.egraph import stats_report
from eqsat.pipeline import OptimizeResult, default_rules, optimize
from eqsat.pipeline import run as pipeline
from eqsat.rules import starter_rules
from eqsat.testing.onnx_builders import f32, make_model

#: NasRNN's optimize result, shared with test_candidates: one worker runs them
pytestmark = pytest.mark.xdist_group("nasrnn")

README = Path(__file__).resolve().parents[2] / "README.md"


def _conv_relu(bias: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32), "w")]
    ins = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b"))
        ins.append("b")
    return make_model([helper.make_node("Conv", ins, ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
                      [f32("x", (1, 4, 8, 8))], [f32("y", (1, 8, 8, 8))], inits)


@pytest.fixture(scope="session")
def nasrnn(optimized: Callable[[str], OptimizeResult]) -> OptimizeResult:
    """optimize(the NasRNN cell, time_limit=30), shared (computed in the first user's setup)."""
    return optimized("nasrnn_cell")


def test_nodes_before_after_count_the_onnx_files(builtin_model: Callable[..., onnx.ModelProto],
                                                 nasrnn: OptimizeResult) -> None:
    model, res = builtin_model("nasrnn_cell"), nasrnn
    assert res.onnx_nodes == (len(model.graph.node), len(res.model.graph.node))
    assert f"{len(model.graph.node)} / {len(res.model.graph.node)}" in res.summary()


def test_vanished_computation_shows_its_real_speedup() -> None:
    # transpose(transpose(x)) is x: nothing is left to compute
    model = make_model([helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
                        helper.make_node("Transpose", ["t"], ["y"], perm=[1, 0])],
                       [f32("x", (16, 32))], [f32("y", (16, 32))])
    res = optimize(model, time_limit=20)
    assert res.cost_before > 0 and res.cost_after == 0
    assert math.isinf(res.speedup) and "infinite" in res.summary()
    assert res.numeric.ok


def test_extraction_and_final_cost_differences_are_explained() -> None:
    # a three-way concat is two binary concats in the e-graph and one n-ary concat once written
    model = make_model([helper.make_node("Relu", [n], [n + "r"]) for n in "abc"]
                       + [helper.make_node("Concat", ["ar", "br", "cr"], ["y"], axis=0)],
                       [f32(n, (4, 8)) for n in "abc"], [f32("y", (12, 8))])
    res = optimize(model, time_limit=20)
    assert res.cost_after != pytest.approx(res.extraction_cost, rel=1e-12)
    assert any("concat" in note for note in res.cost_notes), res.cost_notes
    assert "merged into n-ary" in res.summary()


def test_fusion_that_export_splits_back_is_not_a_gain() -> None:
    # conv-relu-fuse makes one fused conv, but export writes Conv + Relu again: no gain to report
    res = optimize(_conv_relu(bias=True), rules=starter_rules(), time_limit=20)
    assert res.cost_after == pytest.approx(res.cost_before)
    assert [n.op_type for n in res.model.graph.node].count("Relu") == 1


def test_every_fused_activation_is_priced_as_what_export_writes() -> None:
    from eqsat import ops
    from eqsat.costs import AnalyticCostModel
    from eqsat.costs.measured_cpu import one_node_model

    fused = [spec for spec in ops.REGISTRY.values() if "act" in spec.param_names()]
    assert fused
    for spec in fused:
        p = {**spec.defaults, "act": ops.ACT_RELU}
        x = (1, 8, 8, 4) if spec.name.endswith("nhwc") else (1, 4, 8, 8)
        residual = spec.name == "conv2d_add"  # a conv with a residual add: conv, add, relu
        shapes = [x, (8, 4, 3, 3), (8,)] + ([(1, 8, 6, 6)] if residual else [])
        out = spec.shape(p, shapes)
        (key,) = spec.cost_keys(p, shapes, out)
        parts = ops.runs_as_keys(key)
        want = ["conv2d", "ewadd", "relu"] if residual else [spec.name, "relu"]
        assert [k.op for k in parts] == want, spec.name
        assert dict(parts[0].params)["act"] == ops.ACT_NONE and parts[0].input_shapes == tuple(shapes[:3])
        assert all(k.input_shapes == (out,) * len(ops.get(k.op).inputs) for k in parts[1:])
        analytic = AnalyticCostModel()  # it sees no fusion: the parts' cost, so the fused form is no fake gain
        assert analytic.cost(key) == pytest.approx(sum(analytic.cost(k) for k in parts))
        # a measured model times what export writes (Conv (Add) Relu), which onnxruntime fuses
        written = [n.op_type for n in one_node_model(key).graph.node]
        assert "Conv" in written and "Relu" in written and ("Add" in written) == residual, written


def test_exported_models_carry_no_unused_initializers() -> None:
    res = optimize(_conv_relu(bias=False), time_limit=20)  # the importer adds a zero bias; export drops it
    read = {i for n in res.model.graph.node for i in n.input}
    assert res.model.graph.initializer and all(init.name in read for init in res.model.graph.initializer)


@pytest.mark.slow  # four models optimized (two shared with other tests), then `rules show` for ~70 names
def test_rules_show_resolves_every_fired_rule_name(capsys: pytest.CaptureFixture[str],
                                                   optimized: Callable[[str], OptimizeResult],
                                                   corpus_read_once: None) -> None:
    # the conv's output is also a graph output, so import leaves the batch norm for the e-graph rule to fold
    bn = make_model([helper.make_node("Conv", ["x", "w"], ["c"]),
                     helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"])],
                    [f32("x", (1, 4, 8, 8))], [f32("y", (1, 8, 6, 6)), f32("c", (1, 8, 6, 6))],
                    [numpy_helper.from_array(np.ones(s, np.float32), n)
                     for n, s in [("w", (8, 4, 3, 3)), ("s", (8,)), ("b", (8,)), ("m", (8,)), ("v", (8,))]])
    fired = set(optimize(bn, time_limit=20).rules_fired)
    for name in ("bert_attention_block", "nasrnn_cell"):
        fired |= set(optimized(name).rules_fired)
    fired |= set(optimize(_conv_relu(True), rules=starter_rules(), time_limit=20).rules_fired)
    assert any(n.endswith("-rev") for n in fired) and "conv-batchnorm-fold" in fired
    assert any(n.startswith("layout-") for n in fired)
    for name in sorted(fired):
        assert main(["rules", "show", name]) == 0, name
    capsys.readouterr()
    assert main(["rules", "show", "no-such-rule"]) == 2
    assert "no rule" in capsys.readouterr().err


def test_cli_and_api_use_the_same_default_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(models.builtin_models()["two_matmul_shared_input"](), src)
    seen = {}
    real = pipeline.optimize

    def spy(model, **kw):
        seen["rules"] = kw.get("rules")
        return real(model, **kw)

    monkeypatch.setattr(pipeline, "optimize", spy)
    assert main(["optimize", str(src), "-o", str(tmp_path / "out.onnx"), "-q"]) == 0
    assert seen["rules"] is None  # optimize's own default: corpus, extra and layout rules
    names = {r.name for r in default_rules()}
    assert any(n.startswith("layout-") for n in names) and "conv-batchnorm-fold" in names


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_python_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = _python_blocks(README.read_text())
    assert blocks, "the README has no Python example"
    monkeypatch.chdir(tmp_path)
    onnx.save(models.builtin_models()["two_matmul_shared_input"](), "model.onnx")  # the file the example names
    for code in blocks:
        exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    assert Path("model.opt.onnx").exists()
    onnx.checker.check_model(onnx.load("model.opt.onnx"), full_check=True)


# ------------------------------------------------------------------ one source for every figure of the report
def _row(summary: str, name: str) -> str:
    """The value of the report's row ``name``."""
    (line,) = [ln for ln in summary.splitlines() if re.match(rf"{re.escape(name)}\s\s", ln)]
    return line[len(name):].strip()


@pytest.mark.parametrize("gain", [1.25, 1.0])
def test_report_figures_are_the_result_fields(monkeypatch: pytest.MonkeyPatch, gain: float) -> None:
    from eqsat.pipeline import candidates

    # the candidate runs `gain` times faster, in every round (no noise): written at 1.25x, kept at 1.0x
    monkeypatch.setattr(candidates, "latencies",
                        lambda ms, *_: [[2.0, 2.1, 2.0]] + [[2.0 / gain, 2.1 / gain, 2.0 / gain]] * (len(ms) - 1))
    res = optimize(models.two_matmul_shared_input(), verify_latency=True, candidates=1, dump_egraph=True,
                   time_limit=20)
    text, data = res.summary(), res.to_dict()
    assert _row(text, "cost before (ms)") == f"{res.cost_before:.6g}" and data["cost_before_ms"] == res.cost_before
    assert _row(text, "cost after (ms)").startswith(f"{res.cost_after:.6g}")
    # the e-graph's size is the one the dump holds (and `eqsat egraph stats` reads)
    dumped = res.egraph_dump.egraph
    n_nodes, n_classes = dumped.tensor_size
    assert res.egraph_size == (n_nodes, n_classes) and n_nodes == sum(n.op not in ("TNil", "TCons")
                                                                      for n in dumped.nodes)
    assert _row(text, "e-graph") == f"{n_nodes} e-nodes, {n_classes} e-classes"
    assert data["egraph"] == {"enodes": n_nodes, "eclasses": n_classes}
    stats = stats_report(res.egraph_dump)
    assert f"{n_nodes} e-nodes (" in stats and f"{n_classes} e-classes" in stats
    lat = res.latency
    assert lat is not None and res.latency_ms == (lat.original_ms, lat.candidate_ms) == (2.0, 2.0 / gain)
    row = _row(text, "end-to-end latency")
    assert f"original {lat.original_ms:.4f} ms, candidate #0 {lat.candidate_ms:.4f} ms" in row
    assert f"speedup {lat.race}" in row and data["latency"]["race"]["median"] == lat.race.median
    # the verdict, the decision and the kept flag say the same thing
    assert res.kept_original == (gain == 1.0) == (not lat.accepted) == data["kept_original"]
    written = _row(text, "written")
    if res.kept_original:
        assert row.endswith("original kept") and written == f"the original: {res.kept_reason}"
        assert "no gain of 2% end to end" in written and res.cost_after == res.cost_before
    else:
        assert row.endswith("written") and written.startswith("the optimized graph") and "measurably" in written
    assert "original kept" not in _row(text, "extraction cost (ms)")  # the verdict has a row of its own


def test_cli_report_json_holds_the_figures_the_text_shows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    src = tmp_path / "m.onnx"
    onnx.save(models.two_matmul_shared_input(), str(src))
    report = tmp_path / "r" / "report.json"
    assert main(["optimize", str(src), "-o", str(tmp_path / "out.onnx"), "--rules", "starter", "--time-limit", "10",
                 "--report-json", str(report), "-q"]) == 0
    text, data = capsys.readouterr().out, json.loads(report.read_text())
    assert _row(text, "cost before (ms)") == f"{data['cost_before_ms']:.6g}"
    assert _row(text, "e-graph") == f"{data['egraph']['enodes']} e-nodes, {data['egraph']['eclasses']} e-classes"
    assert _row(text, "written") == data["decision"]
    # the same path for two outputs is refused before the run
    assert main(["optimize", str(src), "-o", str(report), "--report-json", str(report)]) == 2
    assert "--report-json" in capsys.readouterr().err
