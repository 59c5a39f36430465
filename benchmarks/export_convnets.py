"""Export the convolutional networks PET's measurements use (issue 43), as users export them: torchvision's ResNet-18
and a CSRNet (VGG-16's first ten convolutions, then six 3x3 convolutions of dilation 2 and a 1x1 to one density
channel, as in Li et al., CVPR 2018), in eval mode with random weights (seed 0), at a fixed batch, through torch's
dynamo exporter (``dynamo=True``, opset 18). Batch-norm statistics are randomized too, so that folding them changes
the numbers.

Needs torch, torchvision and onnxscript (see export_dynamic.py for the separate environment). A torchvision wheel
built for CUDA on a CPU-only torch cannot load its C++ operators (``torchvision::nms does not exist``); the models
need none, so :func:`load_torchvision` then imports it without registering them.

Writes ``resnet18_b<B>.onnx`` and ``csrnet_b<B>.onnx`` into OUT (and ``mobilenet_v2_b<B>.onnx``, torchvision's,
where named); with ``--batch dynamic``, ``<name>_bdyn.onnx`` whose batch is a dynamic axis (``torch.export.Dim``),
as a model served at several batch sizes is exported.

Usage: /tmp/torchenv/bin/python benchmarks/export_convnets.py OUT [--batch 1,16,dynamic] [--image 224]
       [resnet18 csrnet mobilenet_v2]
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path
from typing import Any

import torch

#: the default models (PET's measurements), then the held-out ones exported on demand
MODELS = ("resnet18", "csrnet")
OTHER_MODELS = ("mobilenet_v2",)


def load_torchvision() -> Any:
    """torchvision, imported without its C++ operators where they do not load (a CUDA build of it beside a CPU
    torch): the models are pure Python."""
    try:
        import torchvision
    except RuntimeError as e:
        if "does not exist" not in str(e):
            raise
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
        import torchvision
    return torchvision


def _randomize_batch_norms(model: torch.nn.Module, gen: torch.Generator) -> None:
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=gen))
            m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=gen))
            m.weight.data.copy_(1 + 0.1 * torch.randn(m.weight.shape, generator=gen))
            m.bias.data.copy_(0.1 * torch.randn(m.bias.shape, generator=gen))


def csrnet(torchvision: Any) -> torch.nn.Module:
    """CSRNet: VGG-16's front end to its fourth block's third convolution (ten convolutions, three max pools),
    a back end of dilated convolutions, and a 1x1 convolution to the density map."""
    front = torchvision.models.vgg16().features[:23]
    layers: list[torch.nn.Module] = []
    c = 512
    for width in (512, 512, 512, 256, 128, 64):
        layers += [torch.nn.Conv2d(c, width, 3, padding=2, dilation=2), torch.nn.ReLU(inplace=True)]
        c = width
    return torch.nn.Sequential(front, *layers, torch.nn.Conv2d(c, 1, 1))


def build(name: str) -> torch.nn.Module:
    """The model ``name`` with seeded random weights, in eval mode."""
    torch.manual_seed(0)
    tv = load_torchvision()
    model = csrnet(tv) if name == "csrnet" else getattr(tv.models, name)()
    _randomize_batch_norms(model, torch.Generator().manual_seed(1))
    return model.eval()


def export(name: str, batch: int | None, image: int, out: Path) -> Path:
    """Export ``name`` at ``batch`` x 3 x ``image`` x ``image`` with the dynamo exporter (``batch`` None: a
    dynamic batch, traced at 2 images)."""
    model = build(name)
    x = torch.randn(batch or 2, 3, image, image, generator=torch.Generator().manual_seed(2))
    path = out / f"{name}_b{batch or 'dyn'}.onnx"
    dynamic = None if batch else ({0: torch.export.Dim("batch")},)
    with torch.no_grad():
        program = torch.onnx.export(model, (x,), dynamo=True, opset_version=18, optimize=True,
                                    input_names=["image"], output_names=["output"], dynamic_shapes=dynamic)
    program.save(str(path))
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("models", nargs="*", help=f"of {', '.join(MODELS + OTHER_MODELS)} (default: "
                                               f"{', '.join(MODELS)})")
    ap.add_argument("--batch", default="1,16", help="batch sizes, comma-separated ('dynamic': a dynamic batch)")
    ap.add_argument("--image", type=int, default=224)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    unknown = sorted(set(args.models) - set(MODELS + OTHER_MODELS))
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}: choose from {', '.join(MODELS + OTHER_MODELS)}")
    for name in args.models or MODELS:
        for b in (None if x == "dynamic" else int(x) for x in args.batch.split(",")):
            print(export(name, b, args.image, out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
