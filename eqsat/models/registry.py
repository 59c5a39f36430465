"""The built-in models by name, as the CLI and the benchmarks look them up."""

from __future__ import annotations

from collections.abc import Callable

import onnx

from eqsat.models.builtin import (
    bert_attention_block,
    mobilenet_v2,
    nasrnn_cell,
    small_cnn,
    two_matmul_shared_input,
)
from eqsat.models.hf_bert import hf_bert
from eqsat.models.taso import (
    TASO_SUITE,
    taso_bert,
    taso_inception_v3,
    taso_nasnet_a,
    taso_nasrnn,
    taso_resnext50,
    taso_squeezenet,
    taso_vgg19,
)


def taso_suite() -> dict[str, Callable[[], onnx.ModelProto]]:
    """Name -> builder of TASO's seven benchmark graphs (full size, seed 0), in :data:`TASO_SUITE` order."""
    builders: dict[str, Callable[[], onnx.ModelProto]] = {
        "taso_bert": taso_bert, "taso_nasrnn": taso_nasrnn, "taso_resnext50": taso_resnext50,
        "taso_nasnet_a": taso_nasnet_a, "taso_inception_v3": taso_inception_v3,
        "taso_squeezenet": taso_squeezenet, "taso_vgg19": taso_vgg19}
    return {name: builders[name] for name in TASO_SUITE}


def builtin_models() -> dict[str, Callable[[], onnx.ModelProto]]:
    """Name -> builder of each built-in model (default sizes, seed 0), TASO's suite included."""
    return {"bert_attention_block": bert_attention_block, "nasrnn_cell": nasrnn_cell,
            "two_matmul_shared_input": two_matmul_shared_input, "small_cnn": small_cnn, **taso_suite(),
            "hf_bert": hf_bert, "mobilenet_v2": mobilenet_v2}


def builtin_model(name: str) -> onnx.ModelProto | str:
    """The built-in model of that name, or ``name`` itself (an ONNX file's path) where there is none."""
    builders = builtin_models()
    return builders[name]() if name in builders else name
