"""benchmarks/pet_subprograms.py on a tiny model: a convolution and its two folds written as models of their own,
checked equal and timed in a few rounds, and the table naming each."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from _benchmarks import load_benchmark
from onnx import TensorProto, helper, numpy_helper

ps = load_benchmark("pet_subprograms")


def _model(path: Path) -> str:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")]
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1] * 4),
                               helper.make_node("Relu", ["c"], ["y"])], "conv",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4, 8, 8])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path / "conv.onnx")
    return str(path / "conv.onnx")


def test_a_convolution_and_its_folds_are_checked_and_timed(tmp_path: Path) -> None:
    path = _model(tmp_path)
    from eqsat.onnx_io import load_model

    (tensor,) = load_model(path).outputs
    r = ps.run_one(path, tensor, rounds=2)
    names = [p["program"] for p in r["programs"]]
    assert names[0] == "convolution" and len(names) == 3
    assert any(n.startswith("batch_to_width(2) > ") for n in names)
    assert any(n.startswith("batch_to_width_gapped(2,1) > ") for n in names)
    assert r["programs"][0]["speedup"] == [1.0, 1.0, 1.0] and all(p["ms"] > 0 for p in r["programs"])
    text = ps.table([r])
    assert text.count("\n") == 4 and "batch_to_width_gapped(2,1)" in text
