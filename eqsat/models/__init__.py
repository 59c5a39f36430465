"""Models to optimize: the onnx package's light zoo with seeded weights, small built-in blocks, torchvision's
MobileNetV2, TASO's seven benchmark graphs and a Hugging Face BERT as torch exports it. Imports only onnx and
numpy."""

from eqsat.models.builder import ModelBuilder
from eqsat.models.builtin import (
    bert_attention_block,
    mobilenet_v2,
    nasrnn_cell,
    shared_weight_chain,
    small_cnn,
    two_matmul_shared_input,
)
from eqsat.models.hf_bert import hf_bert
from eqsat.models.registry import builtin_models, taso_suite
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
from eqsat.models.zoo import ZOO, load_zoo_model, zoo_names, zoo_path

__all__ = ["TASO_SUITE", "ZOO", "ModelBuilder", "bert_attention_block", "builtin_models", "hf_bert",
           "load_zoo_model", "mobilenet_v2", "nasrnn_cell", "shared_weight_chain", "small_cnn", "taso_bert",
           "taso_inception_v3", "taso_nasnet_a", "taso_nasrnn", "taso_resnext50", "taso_squeezenet", "taso_suite",
           "taso_vgg19", "two_matmul_shared_input", "zoo_names", "zoo_path"]
