"""``optimize``: one run of the stages of :mod:`eqsat.pipeline.stages` under one :class:`OptimizeOptions`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx

from eqsat.pipeline.options import OptimizeOptions, resolve_options
from eqsat.pipeline.result import OptimizeResult
from eqsat.pipeline.stages import State, run_stages


def optimize(model_or_path: str | Path | bytes | onnx.ModelProto, *, options: OptimizeOptions | None = None,
             **kwargs: Any) -> OptimizeResult:
    """Optimize an ONNX model (a path, bytes or a ``ModelProto``) by equality saturation and exact DAG extraction.

    The options are the fields of :class:`OptimizeOptions`, given as keyword arguments
    (``optimize(model, time_limit=30, cost_model="measured")``), as an object
    (``optimize(model, options=OptimizeOptions(time_limit=30))``), or both (the keywords override the object's
    fields). They are validated before the model is read. The run is :data:`eqsat.pipeline.stages.STAGES`:
    import, saturation, costs, extraction, export, the end-to-end latency check, the numeric check, the e-graph
    dump; ``result.stage_seconds`` has each one's time.
    """
    state = State(model_or_path, resolve_options(options, kwargs))
    run_stages(state)
    return state.result
