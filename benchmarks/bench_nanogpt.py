"""The course GPT against a nanoGPT-architecture model: one training step, interleaved.

  nanoGPT  nanoGPT's model.py (karpathy/nanoGPT, bias=True as GPT-2, dropout=0.0) written again
           here, line for line where it costs time: token + position embeddings (`arange`), its
           Dropout(0.0) after them, blocks x = x + attn(ln_1(x)), x = x + mlp(ln_2(x)) with its
           LayerNorm (F.layer_norm), one fused qkv nn.Linear(d, 3d), F.scaled_dot_product_attention
           (is_causal=True), `.contiguous().view`, c_proj and its Dropout(0.0); an MLP
           d -> 4d -> d with nn.GELU and its Dropout(0.0); a final LayerNorm, the output layer
           tied to wte, and the loss inside forward(idx, targets) as nanoGPT computes it.
           A second copy uses GPT-2's tanh GELU (Hugging Face GPT-2's function, slower on a CPU
           than the exact GELU nanoGPT uses). --twin-ab adds the twin this script used before
           2026-11-27, which skipped the Dropout(0.0) modules nanoGPT calls.
  course   transformer_lab.gpt.GPT with GPTConfig's defaults (the fused kernels, the exact GELU:
           nanoGPT's architecture), and the same with `activation="gelu_tanh"`, GPT-2's (what
           `GPT.from_hf` sets); its loss is `GPT.loss`.
  explicit the course GPT with `set_explicit(model)`: the written-out attention and LayerNorm.

Shape: nanoGPT's CPU configuration (4 layers, 4 heads, d_model 128, block 64, batch 12) on a
character vocabulary of 65. Same batch, same AdamW (lr 1e-3) for each; the steps are interleaved
in one process (the order rotates every round) and the table gives the median step time, wall
clock and CPU (process) time, and the ratios of medians. On a busy machine the CPU time is the
fairer clock: it does not count the time other programs hold the cores. Before timing, nanoGPT
gets the course GPT's weights and the script checks that the losses agree (exactly where the GELU
is the same). --repeats N runs the whole interleaved measurement N times and ends with the median
(and range) of each CPU ratio over the repeats. --compile times the two nanoGPTs and the course
GPT only, each one's loss compiled with torch.compile (inductor, which needs a C++ compiler; a
first step compiles, a minute or two each on a CPU): `GPT.loss`, nanoGPT's forward(idx, targets).

    OMP_NUM_THREADS=1 python benchmarks/bench_nanogpt.py --threads 1 [--steps 300] [--repeats 3]
        [--compile]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from transformer_lab import set_explicit  # noqa: E402
from transformer_lab.gpt import GPT, GPTConfig  # noqa: E402

N_LAYERS, N_HEADS, D_MODEL, BLOCK, BATCH, VOCAB = 4, 4, 128, 64, 12, 65
COMPILED = ("nanoGPT", "nanoGPT, tanh GELU", "course GPT")  # what --compile times


class NanoLayerNorm(nn.Module):
    """nanoGPT's LayerNorm (with its bias, as GPT-2's): F.layer_norm with eps 1e-5."""

    def __init__(self, d: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class NanoAttention(nn.Module):
    """nanoGPT's CausalSelfAttention, its flash branch (the one PyTorch >= 2 runs)."""

    def __init__(self, d: int, h: int, dropout: float = 0.0, faithful: bool = True):
        super().__init__()
        self.h, self.dropout, self.faithful = h, dropout, faithful
        self.qkv = nn.Linear(d, 3 * d)  # nanoGPT's c_attn
        self.w_o = nn.Linear(d, d)  # nanoGPT's c_proj; the course's name (GPT's init scales it)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x):
        B, T, d = x.shape
        q, k, v = (
            t.view(B, T, self.h, d // self.h).transpose(1, 2) for t in self.qkv(x).split(d, dim=2)
        )
        p = self.dropout if self.training else 0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        y = self.w_o(y.transpose(1, 2).contiguous().view(B, T, d))
        return self.resid_dropout(y) if self.faithful else y


class OneQKVAttention(NanoAttention):
    """nanoGPT's attention (one qkv parameter) as a course part: attention(d_model, n_heads,
    dropout=p), called with the causal mask and is_causal (the course's block applies the
    dropout after it). For --attention-ab only."""

    def __init__(self, d: int, h: int, dropout: float = 0.0):
        super().__init__(d, h, dropout, faithful=False)

    def forward(self, x, mask=None, is_causal=False):
        assert is_causal, "the plain causal mask only"
        return super().forward(x)


class NanoBlock(nn.Module):
    """nanoGPT's Block with its MLP (c_fc, nn.GELU, c_proj, Dropout) written inline."""

    def __init__(self, d: int, h: int, gelu: str, faithful: bool):
        super().__init__()
        self.ln_1, self.ln_2 = NanoLayerNorm(d), NanoLayerNorm(d)
        self.attn = NanoAttention(d, h, faithful=faithful)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.gelu, self.dropout = nn.GELU(approximate=gelu), nn.Dropout(0.0)
        self.faithful = faithful

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        y = self.out(self.gelu(self.fc(self.ln_2(x))))
        return x + (self.dropout(y) if self.faithful else y)


class NanoGPT(nn.Module):
    """nanoGPT's GPT at dropout 0.0: its forward(idx, targets) returns the loss as nanoGPT's does.
    faithful=False leaves out the Dropout(0.0) modules nanoGPT calls (this benchmark's twin
    before 2026-11-27; --twin-ab)."""

    def __init__(
        self,
        vocab: int,
        block: int,
        d: int,
        h: int,
        n_layers: int,
        gelu: str = "none",
        faithful: bool = True,
    ):
        super().__init__()
        self.block_size, self.faithful = block, faithful
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.drop = nn.Dropout(0.0)
        self.blocks = nn.ModuleList(NanoBlock(d, h, gelu, faithful) for _ in range(n_layers))
        self.ln_f = NanoLayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx, targets):
        b, t = idx.size()
        assert t <= self.block_size, f"Cannot forward sequence of length {t}"
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        x = self.drop(x) if self.faithful else x
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


def copy_weights(course: GPT, nano: NanoGPT) -> None:
    with torch.no_grad():
        nano.wte.weight.copy_(course.wte.weight)
        nano.wpe.weight.copy_(course.wpe.weight)
        nano.ln_f.load_state_dict(course.ln_f.state_dict())
        for ours, theirs in zip(course.blocks, nano.blocks):
            _copy_attention(ours.self_attn, theirs.attn)
            theirs.fc.load_state_dict(ours.ffn.w_1.state_dict())
            theirs.out.load_state_dict(ours.ffn.w_2.state_dict())
            theirs.ln_1.load_state_dict(ours.norm1.state_dict())
            theirs.ln_2.load_state_dict(ours.norm2.state_dict())


def _copy_attention(ours, theirs: NanoAttention) -> None:
    """W^Q, W^K, W^V (and biases) stacked into qkv; W^O as is. Under no_grad."""
    theirs.qkv.weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
    theirs.qkv.bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
    theirs.w_o.load_state_dict(ours.w_o.state_dict())


def one_qkv_twin(course: GPT) -> GPT:
    """The course GPT built with nanoGPT's attention as its attention part (Parts): W^Q, W^K,
    W^V stacked into one parameter; everything else is the course's."""
    from transformer_lab.encoder_decoder import Parts

    twin = GPT(course.cfg, parts=Parts(attention=OneQKVAttention))
    with torch.no_grad():
        for ours, theirs in zip(course.blocks, twin.blocks):
            _copy_attention(ours.self_attn, theirs.self_attn)
            for name in ("norm1", "norm2", "ffn"):
                getattr(theirs, name).load_state_dict(getattr(ours, name).state_dict())
        for name in ("wte", "wpe", "ln_f"):
            getattr(twin, name).load_state_dict(getattr(course, name).state_dict())
    return twin


def loss_of(model, x, y):
    """Each model's own loss: the course GPT's `loss`, nanoGPT's forward(idx, targets)."""
    return model.loss(x, y) if isinstance(model, GPT) else model(x, y)


def step(model, opt, x, y) -> tuple[float, float]:
    """One training step; returns its (wall, CPU) seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    loss = loss_of(model, x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return time.perf_counter() - wall, time.process_time() - cpu


def compiled_loss(name, model, opt, x, y):
    """torch.compile of the model's own loss (`loss_of`), compiled by one training step."""
    loss = torch.compile(model.loss if isinstance(model, GPT) else model)
    start = time.perf_counter()
    step(loss, opt, x, y)
    print(f"{name}: compiled in {time.perf_counter() - start:.1f} s", flush=True)
    return loss


def measure(models, opts, names, x, y, warmup: int, steps: int):
    """Median (wall, CPU) seconds of a step for each model, the steps interleaved."""
    times = {k: [] for k in names}
    for r in range(warmup + steps):
        for name in names[r % len(names) :] + names[: r % len(names)]:  # rotating order
            t = step(models[name], opts[name], x, y)
            if r >= warmup:
                times[name].append(t)
    wall = {k: statistics.median(w for w, _ in v) for k, v in times.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in times.items()}
    return wall, cpu


def build(attention_ab: bool = False, twin_ab: bool = False):
    torch.manual_seed(0)
    cfg = GPTConfig(VOCAB, BLOCK, D_MODEL, N_HEADS, N_LAYERS)  # the defaults, at these sizes
    course = GPT(cfg)
    nano = NanoGPT(VOCAB, BLOCK, D_MODEL, N_HEADS, N_LAYERS)
    nano_tanh = NanoGPT(VOCAB, BLOCK, D_MODEL, N_HEADS, N_LAYERS, gelu="tanh")
    copy_weights(course, nano)
    copy_weights(course, nano_tanh)
    tanh = GPT(dataclasses.replace(cfg, activation="gelu_tanh"))
    tanh.load_state_dict(course.state_dict())
    explicit = set_explicit(GPT(cfg))
    explicit.load_state_dict(course.state_dict())
    twins = {"course GPT, one qkv parameter": one_qkv_twin(course)} if attention_ab else {}
    if twin_ab:
        minimal = NanoGPT(VOCAB, BLOCK, D_MODEL, N_HEADS, N_LAYERS, faithful=False)
        copy_weights(course, minimal)
        twins["nanoGPT without its Dropout(0.0) calls"] = minimal
    return {
        "nanoGPT": nano,
        "nanoGPT, tanh GELU": nano_tanh,
        "course GPT": course,
        "course GPT, tanh GELU": tanh,
        "course GPT, explicit": explicit,
    } | twins


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--steps", type=int, default=300, help="timed steps per model")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=1, help="whole measurements, one table each")
    parser.add_argument("--profile", action="store_true", help="print the top ops of each")
    parser.add_argument(
        "--attention-ab",
        action="store_true",
        help="also the course GPT with nanoGPT's attention (one qkv parameter) as its part",
    )
    parser.add_argument(
        "--twin-ab",
        action="store_true",
        help="also nanoGPT without the Dropout(0.0) modules it calls (the twin before 2026-11-27)",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="the two nanoGPTs and the course GPT only, each loss compiled with torch.compile",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    models = build(args.attention_ab, args.twin_ab)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(VOCAB, (BATCH, BLOCK), generator=g)
    y = torch.randint(VOCAB, (BATCH, BLOCK), generator=g)
    with torch.no_grad():
        losses = {k: loss_of(m, x, y).item() for k, m in models.items()}
    assert abs(losses["nanoGPT"] - losses["course GPT"]) < 1e-5, losses
    assert abs(losses["nanoGPT, tanh GELU"] - losses["course GPT, tanh GELU"]) < 1e-5, losses
    assert abs(losses["nanoGPT"] - losses["course GPT, tanh GELU"]) < 1e-3, losses
    assert abs(losses["course GPT, explicit"] - losses["course GPT"]) < 1e-5, losses
    for name in models:
        if "one qkv" in name or "without" in name:
            assert abs(losses[name] - losses["course GPT"]) < 1e-5, losses
    opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-3) for k, m in models.items()}
    if args.compile:
        models = {k: compiled_loss(k, models[k], opts[k], x, y) for k in COMPILED}
    names = list(models)
    print(
        f"torch {torch.__version__}, threads={torch.get_num_threads()}, {args.steps} interleaved "
        f"steps each, L={N_LAYERS} h={N_HEADS} d={D_MODEL} block={BLOCK} batch={BATCH} V={VOCAB}"
    )
    ratios = {k: [] for k in names}  # CPU / nanoGPT of each repeat
    ratios_tanh = {k: [] for k in names}  # CPU / nanoGPT with the tanh GELU
    for repeat in range(args.repeats):
        wall, cpu = measure(models, opts, names, x, y, args.warmup, args.steps)
        print(f"\nrepeat {repeat + 1} of {args.repeats}")
        print(
            "| model | wall (ms) | / nanoGPT | / nanoGPT, tanh GELU "
            "| CPU (ms) | / nanoGPT | / nanoGPT, tanh GELU |"
        )
        print("|---|---|---|---|---|---|---|")
        for name in names:
            ratios[name].append(cpu[name] / cpu["nanoGPT"])
            ratios_tanh[name].append(cpu[name] / cpu["nanoGPT, tanh GELU"])
            print(
                f"| {name} | {wall[name] * 1e3:.2f} | {wall[name] / wall['nanoGPT']:.3f}x "
                f"| {wall[name] / wall['nanoGPT, tanh GELU']:.3f}x | {cpu[name] * 1e3:.2f} "
                f"| {ratios[name][-1]:.3f}x | {ratios_tanh[name][-1]:.3f}x |"
            )
    if args.repeats > 1:
        print(f"\nCPU ratios over the {args.repeats} repeats: median [min, max]")
        print("| model | CPU / nanoGPT | CPU / nanoGPT, tanh GELU |")
        print("|---|---|---|")
        for name in names:
            a, b = sorted(ratios[name]), sorted(ratios_tanh[name])
            print(
                f"| {name} | {statistics.median(a):.3f}x [{a[0]:.3f}, {a[-1]:.3f}] "
                f"| {statistics.median(b):.3f}x [{b[0]:.3f}, {b[-1]:.3f}] |"
            )
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        for name in names:
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(20):
                    step(models[name], opts[name], x, y)
            print(f"\n== {name}")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14))


if __name__ == "__main__":
    main()
