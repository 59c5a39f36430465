"""The ONNX boundary: import (ONNX -> IR), export (IR -> ONNX), the registry's fusions, onnxruntime helpers.
The only package that turns protos into IR and back; imports ``eqsat.ir``, ``eqsat.ops`` and ``eqsat.errors``."""

from eqsat.onnx_io.axes import load_with_axes
from eqsat.onnx_io.dynamic import fixed_input_shapes
from eqsat.onnx_io.export import kernel_opsets, onnx_opaque_evaluator, opaque_node, to_onnx, written_node
from eqsat.onnx_io.load import load_model, opaque_reasons
from eqsat.onnx_io.precision import (
    CHECK_TOLERANCE,
    HALF_TYPES,
    MIXED_KEY,
    PRECISION_KEY,
    PrecisionError,
    convert_floats,
    half_type,
    mixed_half,
    restore_precisions,
    uniform_half,
)
from eqsat.onnx_io.protos import input_shape_hint
from eqsat.onnx_io.runtime import (
    INT_INPUT_BOUND,
    inference_session,
    int_input_bounds,
    onnxruntime_runner,
    random_feeds,
    random_ints,
    run_onnxruntime,
)
from eqsat.onnx_io.signature import carry_signature, signature_changes
from eqsat.onnx_io.stored import (
    ModelNotFoundError,
    drop_read_pages,
    read_model,
    read_model_stored,
    save_model,
    stored_bytes,
    with_data,
    write_model,
)
from eqsat.onnx_io.summary import ModelSummary, TensorSummary, summarize_model

__all__ = ["CHECK_TOLERANCE", "HALF_TYPES", "INT_INPUT_BOUND", "MIXED_KEY", "PRECISION_KEY", "PrecisionError",
           "ModelNotFoundError", "ModelSummary",
           "TensorSummary", "carry_signature",
           "convert_floats", "half_type", "mixed_half", "restore_precisions", "drop_read_pages", "fixed_input_shapes",
           "kernel_opsets",
           "load_with_axes",
           "inference_session", "input_shape_hint", "int_input_bounds", "load_model", "onnx_opaque_evaluator",
           "opaque_node",
           "opaque_reasons", "random_feeds", "random_ints", "read_model", "read_model_stored", "run_onnxruntime",
           "save_model", "stored_bytes", "with_data",
           "onnxruntime_runner", "signature_changes",
           "summarize_model", "to_onnx", "uniform_half", "write_model", "written_node"]
