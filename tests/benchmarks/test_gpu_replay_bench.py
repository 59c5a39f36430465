"""benchmarks/gpu_replay.py's pure parts: configurations survive their JSON form, and a replayed cost model
answers from the GPU's times, pricing what was not measured by the saved roofline (no GPU needed)."""

from __future__ import annotations

import json

import pytest
from _benchmarks import load_benchmark

from eqsat import ops

gr = load_benchmark("gpu_replay")


def _keys() -> list[ops.CostKey]:
    conv = ops.get("conv2d")
    ln = ops.get("layernorm")
    return [conv.cost_key(conv.normalize({"pads": (1, 1, 1, 1), "act": 1}), [(1, 4, 8, 8), (8, 4, 3, 3), (8,)],
                          (1, 8, 8, 8), weights=(1, 2)),
            ln.cost_key(ln.normalize({"axis": 2, "epsilon": 1e-12}), [(1, 5, 8), (8,), (8,)], (1, 5, 8),
                        weights=(1, 2)),
            ops.get("transpose").cost_key({"perm": (0, 2, 1)}, [(2, 3, 4)], (2, 4, 3))]


def test_configurations_survive_their_json_form() -> None:
    for key in _keys():
        back = gr.key_from_json(json.loads(json.dumps(gr.key_to_json(key))))
        assert back == key and back.as_str() == key.as_str()


def test_a_replayed_model_answers_from_the_gpus_times_and_prices_the_rest_by_its_roofline() -> None:
    known, other, _ = _keys()
    calibration = {"gflops": 50_000.0, "bandwidth_gbs": 2_000.0, "launch_ms": 0.01, "resident_threads": 100_000}
    replayed = gr.Replayed({"identity": {"gpu": "a GPU"}, "calibration": calibration,
                            "costs": [{"key": known.as_str(), "ms": 0.123}]})
    assert replayed.cost(known) == 0.123 and not replayed.missed
    from eqsat.gpu.cupy_measure import Calibration

    assert replayed.cost(other) == pytest.approx(Calibration(**calibration).roofline().cost(other))
    assert replayed.missed == {other.as_str()}
