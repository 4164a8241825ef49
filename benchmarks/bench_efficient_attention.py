"""Wall time and peak memory of exact and cheaper attention against the sequence length n (CPU).

Contenders, one forward pass each on the same q, k, v of shape (B, h, n, d_head), no gradients:

  exact         transformer_lab.attention.scaled_dot_product_attention: softmax(QKᵀ/√d)V written
                out; forms the (n, n) scores and weights
  tiled         transformer_lab.efficient.tiled_attention (FlashAttention's forward in plain
                PyTorch: key blocks with an online softmax; exact, never forms (n, n))
  fused         torch.nn.functional.scaled_dot_product_attention (PyTorch's fused CPU kernel)
  sparse mask   exact attention with bigbird_mask(n, window, n_global, n_random): the mask is
                (n, n) and so are the masked scores: as slow as exact, it saves nothing
  sparse block  bigbird_attention: the same result, block-sparse (local blocks as a batched
                matmul, global and random keys gathered): no (n, n) tensor
  linformer     linformer_attention with (k, n) projections E, F
  performer     performer_attention with m fixed random features

The mask, E, F and the Performer features exist before the call (they are a fixed pattern or
parameters), so neither their time nor their memory is counted. Peak memory = the peak of the
running sum of PyTorch allocations and frees during one call, recorded by torch.profiler
(profile_memory=True), inputs excluded, output included (`scaling.peak_memory_bytes`).
Time = the best of `--reps` calls after one warm-up, the contenders interleaved in a rotating
order round by round (`scaling.wall_time`). By default the clock is the process's CPU time
(`--clock cpu`, time.process_time): with one thread it is the work done, and a machine shared
with other programs does not inflate it the way it inflates wall time (`--clock wall`).
Compare within one run.

    python benchmarks/bench_efficient_attention.py [--threads 1] [--reps 5] [--max-n 4096]
"""

from __future__ import annotations

import argparse
import datetime
import functools
import platform
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from transformer_lab.attention import scaled_dot_product_attention  # noqa: E402
from transformer_lab.efficient import tiled_attention  # noqa: E402
from transformer_lab.scaling import (  # noqa: E402
    bigbird_attention,
    bigbird_mask,
    crossover,
    linformer_attention,
    peak_memory_bytes,
    performer_attention,
    wall_time,
)

CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
NAMES = ["exact", "tiled", "fused", "sparse mask", "sparse block", "linformer", "performer"]


def contenders(n: int, d_head: int, args) -> dict:
    """name -> fn(q, k, v) for sequence length n (fixed patterns and parameters built here)."""
    mask = bigbird_mask(n, args.window, args.n_global, args.n_random)
    g = torch.Generator().manual_seed(0)
    proj = min(args.proj, n)
    e = torch.randn(proj, n, generator=g) / proj**0.5
    f = torch.randn(proj, n, generator=g) / proj**0.5
    w = torch.randn(args.features, d_head, generator=g)
    return {
        "exact": lambda q, k, v: scaled_dot_product_attention(q, k, v)[0],
        "tiled": lambda q, k, v: tiled_attention(q, k, v, block_size=args.block),
        "fused": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
        "sparse mask": lambda q, k, v: scaled_dot_product_attention(q, k, v, mask)[0],
        "sparse block": lambda q, k, v: bigbird_attention(
            q, k, v, args.window, args.n_global, args.n_random
        ),
        "linformer": lambda q, k, v: linformer_attention(q, k, v, e, f),
        "performer": lambda q, k, v: performer_attention(q, k, v, w=w),
    }


def measure(ns, args) -> tuple[dict, dict]:
    """Best-of-`reps` time (rounds interleaved, in a rotating order) and peak memory."""
    times = {name: [] for name in NAMES}
    peaks = {name: [] for name in NAMES}
    g = torch.Generator().manual_seed(0)
    for n in ns:
        q, k, v = (
            torch.randn(args.batch, args.heads, n, args.d_head, generator=g) for _ in range(3)
        )
        fns = contenders(n, args.d_head, args)
        with torch.no_grad():
            exact = fns["exact"](q, k, v)
            for name, ref in (("tiled", exact), ("fused", exact), ("sparse block", None)):
                ref = fns["sparse mask"](q, k, v) if ref is None else ref  # exact ones are exact
                torch.testing.assert_close(fns[name](q, k, v), ref, atol=1e-4, rtol=1e-4)
            best = dict.fromkeys(NAMES, float("inf"))
            for r in range(args.reps):
                order = NAMES[r % len(NAMES) :] + NAMES[: r % len(NAMES)]
                for name in order:
                    fn = fns[name]
                    call = functools.partial(fn, q, k, v)
                    t = wall_time(call, repeats=1, warmup=int(r == 0), clock=CLOCKS[args.clock])
                    best[name] = min(best[name], t)
            for name in NAMES:
                times[name].append(best[name])
                peaks[name].append(peak_memory_bytes(functools.partial(fns[name], q, k, v)))
        row = "  ".join(f"{name} {1e3 * times[name][-1]:8.2f} ms" for name in NAMES)
        print(f"n={n:5d}  {row}", flush=True)
    return times, peaks


def table(ns, values, fmt) -> str:
    lines = ["| n | " + " | ".join(NAMES) + " |", "|---|" + "---|" * len(NAMES)]
    for i, n in enumerate(ns):
        lines.append(f"| {n} | " + " | ".join(fmt(values[name][i]) for name in NAMES) + " |")
    return "\n".join(lines)


def crossovers(ns, values, what) -> list[str]:
    lines = []
    for name in NAMES[1:]:
        n_star = crossover(ns, values["exact"], values[name])
        where = f"from n = {n_star} on" if n_star is not None else f"nowhere up to n = {ns[-1]}"
        lines.append(f"- {name}: {what} than exact {where}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    parser.add_argument("--reps", type=int, default=5, help="timed rounds per size (default 5)")
    parser.add_argument(
        "--clock", choices=sorted(CLOCKS), default="cpu", help="process CPU time or wall time"
    )
    parser.add_argument("--min-n", type=int, default=128)
    parser.add_argument("--max-n", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--d-head", type=int, default=64)
    parser.add_argument("--block", type=int, default=128, help="tiled: key block size")
    parser.add_argument("--window", type=int, default=32, help="sparse: local half-width")
    parser.add_argument("--n-global", type=int, default=2)
    parser.add_argument("--n-random", type=int, default=8)
    parser.add_argument("--proj", type=int, default=128, help="linformer: projected length k")
    parser.add_argument("--features", type=int, default=128, help="performer: random features m")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    ns = []
    n = args.min_n
    while n <= args.max_n:
        ns.append(n)
        n *= 2
    print(
        f"# {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"{args.threads} thread(s), {args.clock} time; B={args.batch}, h={args.heads}, d_head={args.d_head}; "
        f"sparse window={args.window} global={args.n_global} random={args.n_random}; "
        f"linformer k={args.proj}; performer m={args.features}; tiled block={args.block}",
        flush=True,
    )
    times, peaks = measure(ns, args)
    print(f"\n### Time ({args.clock}, ms, best of the rounds)\n")
    print(table(ns, times, lambda t: f"{1e3 * t:.2f}"))
    print("\n### Peak memory (MiB, torch.profiler allocations during the call)\n")
    print(table(ns, peaks, lambda b: f"{b / 2**20:.2f}"))
    print(
        "\n### Crossover points (first n of the grid from which on the method stays below exact)\n"
    )
    print("\n".join(crossovers(ns, times, "faster") + crossovers(ns, peaks, "smaller")))


if __name__ == "__main__":
    main()
