"""What lecture 08's training costs: training steps against the validation passes in between.

Lecture 08 trains a character GPT (4 layers, d_model 64, 4 heads, context 64, batches of 32
windows, the exact GELU, AdamW, gradient clipping) for 950 steps and measures the validation loss
every `eval_every` steps on the first 256 of its 512 validation windows. This script times, in CPU
seconds (robust on a shared machine), the median training step and the median validation pass of
that model, and prints the evaluation's share of the training's CPU time for the lecture's
setting (or the one given).

    OMP_NUM_THREADS=1 python benchmarks/bench_lecture08_eval.py [--steps 950] [--eval-every 100]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from transformer_lab import data  # noqa: E402
from transformer_lab.gpt import GPT, GPTConfig, lm_loss  # noqa: E402

BLOCK, BATCH = 64, 32


def make(vocab: int) -> GPT:
    """The lecture's model (`make_gpt` in lectures/08_gpt_lecture.ipynb), on the reference parts."""
    torch.manual_seed(0)
    return GPT(
        GPTConfig(vocab, n_positions=BLOCK, d_model=64, n_heads=4, n_layers=4, activation="gelu")
    )


def cpu_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=950, help="training steps (the lecture's)")
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--eval-windows", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()

    text = data.char_corpus()
    tok = data.CharTokenizer(text)
    train_ids, val_ids = data.train_val_split(tok.encode(text), val_fraction=0.1)
    g = torch.Generator().manual_seed(0)
    x_val, y_val = data.get_lm_batch(val_ids, BLOCK, 512, torch.Generator().manual_seed(1))

    def timings(model: GPT, windows: int) -> tuple[float, float]:
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)

        def step():
            x, y = data.get_lm_batch(train_ids, BLOCK, BATCH, g)
            loss = lm_loss(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()

        @torch.no_grad()
        def evaluate():
            model.eval()
            lm_loss(model(x_val[:windows]), y_val[:windows]).item()
            model.train()

        for _ in range(3):
            step()
        evaluate()
        return cpu_seconds(step, args.repeats), cpu_seconds(evaluate, max(3, args.repeats // 5))

    step, evaluation = timings(make(tok.vocab_size), args.eval_windows)
    n_eval = args.steps // args.eval_every
    total = args.steps * step + n_eval * evaluation
    print(f"torch {torch.__version__}, threads={torch.get_num_threads()}, CPU seconds (medians)")
    print("| setting | step (ms) | one evaluation (ms) | evaluations | steps | training CPU s "
          "| evaluation share |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {args.eval_windows} windows every {args.eval_every} steps | {step * 1e3:.1f} "
        f"| {evaluation * 1e3:.1f} | {n_eval} | {args.steps} | {total:.1f} "
        f"| {n_eval * evaluation / total:.1%} |"
    )


if __name__ == "__main__":
    main()
