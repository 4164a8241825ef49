"""What lecture 08's training costs: training steps against the validation passes in between.

Lecture 08 trains a character GPT (4 layers, d_model 64, 4 heads, context 64, batches of 32
windows, AdamW, gradient clipping) and measures the validation loss every `eval_every` steps on
a fixed set of validation windows. This script times, in CPU seconds (robust on a shared
machine), the median training step and the median validation pass, for

  before  the LayerNorm written out (the old default), validation on 512 windows every 50 steps
  after   the fused LayerNorm (the default now), validation every `--eval-every` steps

and prints each run's share of evaluation in the training time, and how many steps the "after"
setting fits into the "before" budget.

    OMP_NUM_THREADS=1 python benchmarks/bench_lecture08_eval.py [--steps 600] [--eval-every 100]
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
from transformer_lab.add_norm import LayerNorm  # noqa: E402
from transformer_lab.gpt import GPT, lm_loss  # noqa: E402

BLOCK, BATCH = 64, 32


def make(explicit_norm: bool, vocab: int) -> GPT:
    torch.manual_seed(0)
    model = GPT(vocab, n_positions=BLOCK, d_model=64, n_heads=4, n_layers=4)
    for module in model.modules():
        if isinstance(module, LayerNorm):
            module.explicit = explicit_norm
    return model


def cpu_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600, help="the lecture's budget before")
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--eval-windows", type=int, default=512)
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

    step_b, eval_b = timings(make(True, tok.vocab_size), 512)
    step_a, eval_a = timings(make(False, tok.vocab_size), args.eval_windows)
    n_eval_b = args.steps // 50
    budget = args.steps * step_b + n_eval_b * eval_b
    per_step_a = step_a + eval_a / args.eval_every
    steps_a = int(budget / per_step_a)
    n_eval_a = steps_a // args.eval_every
    print(f"torch {torch.__version__}, threads={torch.get_num_threads()}, CPU seconds (medians)")
    print("| setting | step (ms) | one evaluation (ms) | evaluations | steps | training CPU s "
          "| evaluation share |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for name, step, ev, n_ev, n in (
        ("before: written-out LayerNorm, 512 windows every 50 steps", step_b, eval_b, n_eval_b,
         args.steps),
        (f"after: fused LayerNorm, {args.eval_windows} windows every {args.eval_every} steps",
         step_a, eval_a, n_eval_a, steps_a),
    ):  # fmt: skip
        total = n * step + n_ev * ev
        print(
            f"| {name} | {step * 1e3:.1f} | {ev * 1e3:.1f} | {n_ev} | {n} | {total:.1f} "
            f"| {n_ev * ev / total:.1%} |"
        )


if __name__ == "__main__":
    main()
