"""Forward + backward time of our MultiHeadAttention against nn.MultiheadAttention (CPU).

Three contenders with the same weights and inputs:
  ours (fast)      MultiHeadAttention, fused kernel (need_weights=False, explicit=False)
  ours (explicit)  MultiHeadAttention with explicit=True: softmax(QKᵀ/√d_k)V written out
  torch            nn.MultiheadAttention(batch_first=True, need_weights=False)

Repetitions are interleaved (every round times each contender once, in a rotating order), so
slow drifts of the machine hit all of them alike; the table shows medians and the ratios to torch.

    python benchmarks/bench_attention.py [--threads 2] [--reps 11]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from transformer_lab.masking import causal_mask  # noqa: E402
from transformer_lab.multihead import MultiHeadAttention  # noqa: E402

SIZES = [  # (B, L, d_model, h)
    (8, 128, 256, 8),
    (4, 256, 512, 8),
    (32, 32, 128, 4),
]


def copy_weights(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
        theirs.out_proj.weight.copy_(ours.w_o.weight)
        theirs.out_proj.bias.copy_(ours.w_o.bias)


def make_contenders(d_model: int, h: int, causal: bool, L: int, device="cpu", dtype=None):
    ours = MultiHeadAttention(d_model, h)
    explicit = MultiHeadAttention(d_model, h)
    explicit.load_state_dict(ours.state_dict())
    explicit.explicit = True
    theirs = nn.MultiheadAttention(d_model, h, batch_first=True)
    copy_weights(ours, theirs)
    for module in (ours, explicit, theirs):
        module.to(device, dtype)
    mask = causal_mask(L, device=device) if causal else None

    def run_ours(module):
        return lambda x: module(x, mask=mask)

    def run_torch(x):
        attn_mask = None if mask is None else ~mask  # nn.MultiheadAttention: True = NOT allowed
        return theirs(x, x, x, attn_mask=attn_mask, need_weights=False)[0]

    return {
        "ours (fast)": run_ours(ours),
        "ours (explicit)": run_ours(explicit),
        "torch": run_torch,
    }


def time_step(fn, x, grad) -> float:
    start = time.perf_counter()
    out = fn(x)
    out.backward(grad)
    elapsed = time.perf_counter() - start
    x.grad = None
    return elapsed


def bench(B, L, d_model, h, causal, reps, warmup=3):
    torch.manual_seed(0)
    contenders = make_contenders(d_model, h, causal, L)
    x = torch.randn(B, L, d_model, requires_grad=True)
    grad = torch.randn(B, L, d_model)
    outputs = [fn(x) for fn in contenders.values()]  # same weights: same result
    for out in outputs[1:]:
        torch.testing.assert_close(out, outputs[0], atol=1e-4, rtol=1e-4)
    names = list(contenders)
    times = {name: [] for name in names}
    for r in range(warmup + reps):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            t = time_step(contenders[name], x, grad)
            if r >= warmup:
                times[name].append(t)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    parser.add_argument("--reps", type=int, default=11, help="timed rounds per size (default 11)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    print(
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
        f"threads={torch.get_num_threads()}, reps={args.reps}, float32, forward+backward\n"
    )
    print(
        "| B | L | d_model | h | mask | ours fast (ms) | ours explicit (ms) | torch (ms) "
        "| fast / torch | explicit / torch |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for B, L, d_model, h in SIZES:
        for causal in (False, True):
            t = bench(B, L, d_model, h, causal, args.reps)
            fast, explicit, ref = t["ours (fast)"], t["ours (explicit)"], t["torch"]
            print(
                f"| {B} | {L} | {d_model} | {h} | {'causal' if causal else 'none'} "
                f"| {fast * 1e3:.2f} | {explicit * 1e3:.2f} | {ref * 1e3:.2f} "
                f"| {fast / ref:.2f}x | {explicit / ref:.2f}x |",
                flush=True,
            )


if __name__ == "__main__":
    main()
