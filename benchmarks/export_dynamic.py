"""Export the models users export today with dynamic axes, as they export them, for benchmarks/dynamic_axes.py.

torchvision ResNet-18 and MobileNetV2 and a Hugging Face ViT (2 layers) with a dynamic batch, and Hugging Face
BERT, GPT-2 and a LLaMA-style decoder (2 layers each; the decoder with grouped-query attention, RMSNorm, rotary
embeddings and SwiGLU) with dynamic batch and sequence, each with both of torch's exporters: TorchScript
(``dynamo=False``, opset 17, ``dynamic_axes``) and dynamo (``dynamo=True``, opset 18, ``dynamic_shapes``). Random
weights (seed 0; no model hub is reached), eval mode, eager attention, traced at batch 2 and sequence 16 so that
no size specialises to 1.

Needs torch, torchvision, transformers and onnxscript, which eqsat does not depend on: install them in a separate
environment (``python -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch torchvision transformers
onnxscript onnx``) and run this script with it. Writes ``<model>_<ts|dynamo>.onnx`` into OUT.

Usage: /tmp/torchenv/bin/python benchmarks/export_dynamic.py OUT [MODEL ...] [--seed N] [--attention sdpa] [--half]
[--hidden N]
(models: resnet18
mobilenet_v2 bert gpt2 llama vit; default all; a transformer as NAME:LAYERS, e.g. bert:12, gets that many layers
instead of 2; ``--seed`` other random weights, as a fine-tune of the same architecture would have;
``--attention sdpa`` PyTorch's fused attention instead of eager, written as ``NAME_sdpa_KIND.onnx``; ``--half``
the model in float16, written as ``NAME_fp16_KIND.onnx``; ``--hidden N`` the LLaMA-style decoder's width, 512 by
default: ``llama:11 --hidden 2048`` has 2.2 GB of weights, written as external data as over 1 GB are)
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Any

import torch
import transformers

MODELS = ("resnet18", "mobilenet_v2", "bert", "gpt2", "llama", "vit")
BATCH, SEQ = 2, 16
#: the random weights' seed (``--seed``)
SEED = 0
#: transformers' attention (``--attention``): "eager" (matrix products and a softmax) or "sdpa" (PyTorch's fused
#: attention, which the dynamo exporter writes with a NaN guard, IsNaN and Where, after the softmax)
ATTENTION = "eager"
#: the LLaMA-style decoder's hidden size (``--hidden``; 2048 with 11 layers is 2.2 GB of float32 weights)
HIDDEN = 512
#: export in float16 (``--half``: the model's weights and float inputs in half precision, as ``model.half()``)
HALF = False


class _Bert(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.m = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.m(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
        return out.last_hidden_state, out.pooler_output


class _Decoder(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.m = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.m(input_ids=input_ids, use_cache=False, return_dict=True).last_hidden_state


class _Vit(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.m = model

    def forward(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.m(pixel_values=pixel_values, return_dict=True)
        return out.last_hidden_state, out.pooler_output


def build(name: str, layers: int = 2) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...], dict[str, Any]]:
    """The model (``layers`` transformer layers), its example inputs, and the names and dynamic axes of its
    export."""
    torch.manual_seed(SEED)
    batch = torch.export.Dim("batch", min=1, max=1024)
    if name in ("resnet18", "mobilenet_v2"):
        import torchvision  # only the CNNs need it

        model = getattr(torchvision.models, name)(weights=None).eval()
        return model, (torch.randn(BATCH, 3, 224, 224),), {
            "input_names": ["input"], "output_names": ["output"],
            "dynamic_axes": {"input": {0: "batch"}, "output": {0: "batch"}},
            "dynamic_shapes": {"x": {0: batch}}}
    if name == "bert":
        cfg = transformers.BertConfig(num_hidden_layers=layers, attn_implementation=ATTENTION)
        ids = torch.randint(0, cfg.vocab_size, (BATCH, SEQ))
        mask = torch.ones(BATCH, SEQ, dtype=torch.int64)
        mask[1, 12:] = 0  # padding in the example, as in a real batch
        seq = torch.export.Dim("sequence", min=2, max=cfg.max_position_embeddings)
        return _Bert(transformers.BertModel(cfg)).eval(), (ids, mask), {
            "input_names": ["input_ids", "attention_mask"], "output_names": ["last_hidden_state", "pooler_output"],
            "dynamic_axes": {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
                             "last_hidden_state": {0: "batch", 1: "sequence"}, "pooler_output": {0: "batch"}},
            "dynamic_shapes": {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}}
    if name in ("gpt2", "llama"):
        if name == "gpt2":
            cfg = transformers.GPT2Config(n_layer=layers, attn_implementation=ATTENTION)
            model, longest = transformers.GPT2Model(cfg), cfg.n_positions
        else:
            cfg = transformers.LlamaConfig(num_hidden_layers=layers, hidden_size=HIDDEN,
                                           intermediate_size=HIDDEN * 43 // 16, num_attention_heads=HIDDEN // 64,
                                           num_key_value_heads=HIDDEN // 256, vocab_size=32000,
                                           max_position_embeddings=2048, attn_implementation=ATTENTION)
            model, longest = transformers.LlamaModel(cfg), cfg.max_position_embeddings
        seq = torch.export.Dim("sequence", min=2, max=longest)
        return _Decoder(model).eval(), (torch.randint(0, cfg.vocab_size, (BATCH, SEQ)),), {
            "input_names": ["input_ids"], "output_names": ["last_hidden_state"],
            "dynamic_axes": {"input_ids": {0: "batch", 1: "sequence"},
                             "last_hidden_state": {0: "batch", 1: "sequence"}},
            "dynamic_shapes": {"input_ids": {0: batch, 1: seq}}}
    if name == "vit":
        cfg = transformers.ViTConfig(num_hidden_layers=layers, image_size=224, patch_size=16,
                                     attn_implementation=ATTENTION)
        return _Vit(transformers.ViTModel(cfg)).eval(), (torch.randn(BATCH, 3, 224, 224),), {
            "input_names": ["pixel_values"], "output_names": ["last_hidden_state", "pooler_output"],
            "dynamic_axes": {"pixel_values": {0: "batch"}, "last_hidden_state": {0: "batch"},
                             "pooler_output": {0: "batch"}},
            "dynamic_shapes": {"pixel_values": {0: batch}}}
    raise KeyError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")


def export(name: str, kind: str, out: Path) -> Path:
    """Export one model with one exporter (``ts`` or ``dynamo``); ``NAME:LAYERS`` (``bert:12``) gives a transformer
    that many layers (2 by default), written as ``NAME_LAYERSl_KIND.onnx``."""
    base, _, layers = name.partition(":")
    model, args, spec = build(base, int(layers or 2))
    if HALF:
        model = model.half()
        args = tuple(a.half() if a.is_floating_point() else a for a in args)
    tag = f"{base}_{layers}l" if layers else base
    tag += ("" if ATTENTION == "eager" else "_" + ATTENTION) + ("_fp16" if HALF else "")
    path = out / f"{tag}_{kind}.onnx"
    with torch.no_grad():
        if kind == "dynamo":
            program = torch.onnx.export(model, args, dynamo=True, opset_version=18, optimize=True,
                                        input_names=spec["input_names"], output_names=spec["output_names"],
                                        dynamic_shapes=spec["dynamic_shapes"])
            # a model over protobuf's 2 GB keeps its weights in a data file beside it, as exporters write it
            program.save(str(path), external_data=sum(p.numel() for p in model.parameters()) * 4 > 2**30)
            return path
        import transformers.masking_utils as masking

        packed = masking.find_packed_sequence_indices
        # without an attention mask, transformers 5 looks for packed sequences with torch.diff, which the
        # TorchScript exporter cannot write; for ordinary positions it finds none, so say so for the trace
        masking.find_packed_sequence_indices = lambda position_ids: None
        try:
            torch.onnx.export(model, args, str(path), dynamo=False, opset_version=17, do_constant_folding=True,
                              input_names=spec["input_names"], output_names=spec["output_names"],
                              dynamic_axes=spec["dynamic_axes"])
        finally:
            masking.find_packed_sequence_indices = packed
    return path


def main() -> int:
    global SEED, ATTENTION, HALF, HIDDEN
    args = sys.argv[1:]
    if "--hidden" in args:
        k = args.index("--hidden")
        HIDDEN = int(args[k + 1])
        del args[k:k + 2]
    if "--half" in args:
        HALF = True
        args.remove("--half")
    if "--seed" in args:
        k = args.index("--seed")
        SEED = int(args[k + 1])
        del args[k:k + 2]
    if "--attention" in args:
        k = args.index("--attention")
        ATTENTION = args[k + 1]
        del args[k:k + 2]
    if not args:
        print(__doc__)
        return 2
    out = Path(args[0])
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in args[1:] or MODELS:
        for kind in ("ts", "dynamo"):
            try:
                print(f"wrote {export(name, kind, out)}", flush=True)
            except Exception as e:  # an exporter's failure is reported, the other exports go on
                failed += 1
                print(f"FAILED {name}_{kind}: {type(e).__name__}: {str(e)[:300]}\n"
                      + "".join(traceback.format_exc().splitlines(True)[-4:]), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
