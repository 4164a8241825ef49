"""One GPT training step (forward, loss, backward, AdamW step): ours against a PyTorch-built twin.

  ours   transformer_lab.gpt.GPT as it ships: pre-norm GPTBlocks (our MultiHeadAttention,
         LayerNorm, FeedForward with tanh-GELU), causal mask, final LayerNorm ln_f, tied embedding
         / head; the parts' fast paths (the default: `explicit` False)
  torch  the same architecture from PyTorch's modules: nn.Embedding (tokens, positions),
         nn.TransformerEncoder(nn.TransformerEncoderLayer(norm_first=True, tanh-GELU,
         batch_first=True)) with a causal mask, a final nn.LayerNorm and the tied head

The torch twin gets a copy of our weights, and the script checks that both give the same loss
before timing. Steps are interleaved (ours, torch, torch, ours, ...) and the table shows medians.

    python benchmarks/bench_gpt_step.py [--threads 2] [--reps 5]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from transformer_lab.gpt import GPT, GPTConfig  # noqa: E402

CONFIGS = [  # (B, L, d_model, n_heads, n_layers, vocab_size)
    (8, 128, 128, 4, 4, 256),
    (8, 128, 256, 8, 4, 256),
]


class TorchGPT(nn.Module):
    """GPT built from nn.TransformerEncoder; forward(idx (B, L)) -> logits (B, L, V)."""

    def __init__(self, vocab_size, n_positions, d_model, n_heads, n_layers, d_ff=None):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, d_model)
        self.wpe = nn.Embedding(n_positions, d_model)
        layer = nn.TransformerEncoderLayer(
            d_model,
            n_heads,
            d_ff or 4 * d_model,
            dropout=0.0,
            activation=functools.partial(F.gelu, approximate="tanh"),
            batch_first=True,
            norm_first=True,
        )
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        L = idx.shape[1]
        h = self.wte(idx) + self.wpe(torch.arange(L, device=idx.device))
        mask = nn.Transformer.generate_square_subsequent_mask(L, device=idx.device)
        h = self.encoder(h, mask=mask, is_causal=True)
        return self.lm_head(self.ln_f(h))


def copy_gpt_weights(ours: GPT, theirs: TorchGPT) -> None:
    with torch.no_grad():
        theirs.wte.weight.copy_(ours.wte.weight)
        theirs.wpe.weight.copy_(ours.wpe.weight)
        theirs.ln_f.load_state_dict(ours.ln_f.state_dict())
        for block, layer in zip(ours.blocks, theirs.encoder.layers):
            a = block.self_attn
            layer.self_attn.in_proj_weight.copy_(
                torch.cat([a.w_q.weight, a.w_k.weight, a.w_v.weight])
            )
            layer.self_attn.in_proj_bias.copy_(torch.cat([a.w_q.bias, a.w_k.bias, a.w_v.bias]))
            layer.self_attn.out_proj.load_state_dict(a.w_o.state_dict())
            layer.linear1.load_state_dict(block.ffn.w_1.state_dict())
            layer.linear2.load_state_dict(block.ffn.w_2.state_dict())
            layer.norm1.load_state_dict(block.norm1.state_dict())
            layer.norm2.load_state_dict(block.norm2.state_dict())


def loss_fn(model, idx, targets):
    logits = model(idx)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def train_step(model, optimizer, idx, targets) -> float:
    start = time.perf_counter()
    loss = loss_fn(model, idx, targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return time.perf_counter() - start


def bench(B, L, d_model, n_heads, n_layers, vocab_size, reps, warmup=2):
    torch.manual_seed(0)
    ours = GPT(GPTConfig(vocab_size, L, d_model, n_heads, n_layers))
    theirs = TorchGPT(vocab_size, L, d_model, n_heads, n_layers)
    copy_gpt_weights(ours, theirs)
    idx = torch.randint(vocab_size, (B, L))
    targets = torch.randint(vocab_size, (B, L))
    models = {"ours": ours, "torch": theirs}
    with torch.no_grad():  # same weights: same loss (so they do the same work)
        torch.testing.assert_close(
            loss_fn(theirs, idx, targets), loss_fn(ours, idx, targets), atol=1e-4, rtol=1e-4
        )
    optimizers = {k: torch.optim.AdamW(m.parameters(), lr=1e-4) for k, m in models.items()}
    times = {k: [] for k in models}
    names = list(models)
    for r in range(warmup + reps):
        for name in names[r % len(names) :] + names[: r % len(names)]:  # rotating order
            t = train_step(models[name], optimizers[name], idx, targets)
            if r >= warmup:
                times[name].append(t)
    n_params = sum(p.numel() for p in ours.parameters())
    return n_params, {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    parser.add_argument("--reps", type=int, default=5, help="timed steps per model (default 5)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    print(
        f"torch {torch.__version__}, threads={torch.get_num_threads()}, reps={args.reps}, "
        "float32, one AdamW training step\n"
    )
    print(
        "| B | L | d_model | heads | layers | V | params | ours (ms) | torch (ms) | ours / torch |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for B, L, d_model, n_heads, n_layers, V in CONFIGS:
        n_params, t = bench(B, L, d_model, n_heads, n_layers, V, args.reps)
        print(
            f"| {B} | {L} | {d_model} | {n_heads} | {n_layers} | {V} | {n_params / 1e6:.2f}M "
            f"| {t['ours'] * 1e3:.1f} | {t['torch'] * 1e3:.1f} | {t['ours'] / t['torch']:.2f}x |",
            flush=True,
        )


if __name__ == "__main__":
    main()
