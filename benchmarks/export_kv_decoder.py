"""Export a LLaMA-style decoder *step with a KV cache*, as generation runtimes export them, in plain PyTorch.

Inputs ``input_ids [batch, sequence]`` and per layer ``past_key_L``/``past_value_L [batch, kv_heads,
past_sequence, head]``; outputs ``logits [batch, sequence, vocab]`` and per layer ``present_key_L``/
``present_value_L [batch, kv_heads, past_sequence + sequence, head]``. Rotary positions start at the past
length; the causal mask covers past and new positions; grouped-query heads (kv_heads < heads); RMSNorm and a
SwiGLU MLP. transformers' cache objects do not export as tensors, so the module is written here: the same
arithmetic a LLaMA layer does. Random weights (``--seed``), eval mode, traced at batch 2, sequence 3, past 5.

Needs torch and onnxscript (``/tmp/torchenv``, as ``export_dynamic.py``). Writes
``kv_decoder_<LAYERS>l_dynamo.onnx`` (torch's dynamo exporter, opset 18, dynamic batch, sequence and past length)
into OUT.

Usage: /tmp/torchenv/bin/python benchmarks/export_kv_decoder.py OUT [--layers 2] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

HIDDEN, HEADS, KV_HEADS, INTER, VOCAB = 256, 8, 2, 688, 1000
HEAD = HIDDEN // HEADS


class RMSNorm(torch.nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight, self.eps = torch.nn.Parameter(torch.ones(dim)), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-b, a), dim=-1)


class Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(HIDDEN), RMSNorm(HIDDEN)
        self.q = torch.nn.Linear(HIDDEN, HEADS * HEAD, bias=False)
        self.k = torch.nn.Linear(HIDDEN, KV_HEADS * HEAD, bias=False)
        self.v = torch.nn.Linear(HIDDEN, KV_HEADS * HEAD, bias=False)
        self.o = torch.nn.Linear(HEADS * HEAD, HIDDEN, bias=False)
        self.gate = torch.nn.Linear(HIDDEN, INTER, bias=False)
        self.up = torch.nn.Linear(HIDDEN, INTER, bias=False)
        self.down = torch.nn.Linear(INTER, HIDDEN, bias=False)

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor,
                past_k: torch.Tensor, past_v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, s, _ = h.shape
        x = self.norm1(h)
        q = self.q(x).view(b, s, HEADS, HEAD).transpose(1, 2)
        k = self.k(x).view(b, s, KV_HEADS, HEAD).transpose(1, 2)
        v = self.v(x).view(b, s, KV_HEADS, HEAD).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)  # the present cache
        rep = HEADS // KV_HEADS
        kk, vv = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        att = torch.softmax(q @ kk.transpose(-1, -2) / math.sqrt(HEAD) + mask, dim=-1)
        h = h + self.o((att @ vv).transpose(1, 2).reshape(b, s, HEADS * HEAD))
        x = self.norm2(h)
        h = h + self.down(torch.nn.functional.silu(self.gate(x)) * self.up(x))
        return h, k, v


class DecoderStep(torch.nn.Module):
    def __init__(self, layers: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, HIDDEN)
        self.layers = torch.nn.ModuleList(Layer() for _ in range(layers))
        self.norm = RMSNorm(HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, HEAD, 2).float() / HEAD))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, input_ids: torch.Tensor, *past: torch.Tensor) -> tuple[torch.Tensor, ...]:
        s, p = input_ids.shape[1], past[0].shape[2]
        pos = torch.arange(p, p + s, dtype=torch.float32)  # rotary positions start at the past length
        freqs = pos[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        # causal over past and new: new token i sees every past position and new positions <= i
        cols = torch.arange(p + s)[None, :]
        rows = torch.arange(s)[:, None] + p
        mask = torch.where(cols <= rows, 0.0, torch.finfo(torch.float32).min)[None, None]
        h = self.embed(input_ids)
        present = []
        for k, layer in enumerate(self.layers):
            h, pk, pv = layer(h, cos, sin, mask, past[2 * k], past[2 * k + 1])
            present += [pk, pv]
        return (self.head(self.norm(h)), *present)


def export(out: Path, layers: int, seed: int) -> Path:
    torch.manual_seed(seed)
    model = DecoderStep(layers).eval()
    batch, seq, past_len = 2, 3, 5
    ids = torch.randint(0, VOCAB, (batch, seq))
    past = [torch.randn(batch, KV_HEADS, past_len, HEAD) for _ in range(2 * layers)]
    names = [f"past_{kind}_{k}" for k in range(layers) for kind in ("key", "value")]
    b = torch.export.Dim("batch", min=1, max=64)
    s = torch.export.Dim("sequence", min=1, max=1024)
    p = torch.export.Dim("past_sequence", min=1, max=4096)
    shapes = ({0: b, 1: s}, *({0: b, 2: p} for _ in names))
    path = out / f"kv_decoder_{layers}l_dynamo.onnx"
    with torch.no_grad():
        program = torch.onnx.export(
            model, (ids, *past), dynamo=True, opset_version=18, optimize=True,
            input_names=["input_ids", *names],
            output_names=["logits", *[n.replace("past", "present") for n in names]],
            dynamic_shapes=(shapes[0], tuple(shapes[1:])))
        program.save(str(path), external_data=False)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    print(f"wrote {export(Path(args.out), args.layers, args.seed)}")


if __name__ == "__main__":
    main()
