"""Train lecture 08's GPT on several processes with DistributedDataParallel (lesson 12).

One command for one process, several processes on one machine, or several machines:

    python -m transformer_lab.distributed --steps 40 --out one.json                  # 1 process
    torchrun --standalone --nproc_per_node 2 -m transformer_lab.distributed --steps 40 --out two.json
    torchrun --nnodes 2 --node_rank R --rdzv_backend c10d --rdzv_endpoint HOST:29500 \\
             --nproc_per_node 4 -m transformer_lab.distributed --steps 40 --out run.json

torchrun starts the processes and sets RANK, WORLD_SIZE and LOCAL_RANK; this module joins the
process group (gloo on CPU, NCCL on GPUs) and wraps the model in `DistributedDataParallel`.

Data parallelism in three lines: every step draws the same *global* batch of B windows on every
rank (same generator, same seed), rank r keeps rows [r·B/W, (r+1)·B/W), and DDP averages the
gradients over the W ranks during `backward`. The mean of W shard means of equal size is the mean
over the global batch, so W processes take the same steps as one process with batch B, up to the
order of floating-point additions. `launch` runs it from Python (the lecture and the tests).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from . import data
from .gpt import GPT, GPTConfig, lm_loss


@dataclass
class RunConfig:
    """What one training run is: the same on every rank."""

    steps: int = 40
    global_batch: int = 16  # windows per step, summed over all ranks
    block_size: int = 64
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    lr: float = 3e-3
    seed: int = 0
    corpus_chars: int = 100_000  # the first characters of data.char_corpus()


# --------------------------------------------------------------------------------------------
# The process group
# --------------------------------------------------------------------------------------------


def setup(backend: str | None = None) -> tuple[int, int, torch.device]:
    """Join the process group torchrun describes in the environment; return (rank, world, device).

    Without torchrun (no WORLD_SIZE) this is one process: rank 0 of 1, no process group.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device, default_backend = device_for(local_rank, world)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world > 1:
        dist.init_process_group(backend or default_backend)
    return rank, world, device


def device_for(local_rank: int, world: int) -> tuple[torch.device, str]:
    """(device, backend) of one process: a GPU of its own and NCCL when there is one GPU per
    process, else the CPU and gloo. NCCL refuses two processes on one GPU, so two processes on a
    one-GPU machine (a laptop, Colab, a single H100) train on the CPU."""
    n_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n_gpus >= world:
        return torch.device("cuda", local_rank), "nccl"
    return torch.device("cpu"), "gloo"


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def shard(batch: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """Rows [rank·B/W, (rank+1)·B/W) of a global batch of B rows; B must divide by W."""
    if batch.shape[0] % world:
        raise ValueError(
            f"the global batch of {batch.shape[0]} does not split evenly over {world} processes: "
            "choose a global batch that is a multiple of the number of processes"
        )
    per_rank = batch.shape[0] // world
    return batch[rank * per_rank : (rank + 1) * per_rank]


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


def flat_grad(model: torch.nn.Module) -> torch.Tensor:
    """Every parameter's gradient, flattened and concatenated in parameter order."""
    return torch.cat([p.grad.detach().reshape(-1).cpu() for p in model.parameters()])


def train(cfg: RunConfig, backend: str | None = None, grad_file: str | None = None) -> dict:
    """Train on this rank; return {"losses": [global-batch loss per step], ...} (same on all ranks).

    `grad_file`: rank 0 saves the averaged gradient of the first step there (torch.save).
    """
    rank, world, device = setup(backend)
    try:
        text = data.char_corpus()[: cfg.corpus_chars]
        tokenizer = data.CharTokenizer(text)
        ids = tokenizer.encode(text)

        torch.manual_seed(cfg.seed)  # the same initial weights on every rank
        sizes = GPTConfig(
            tokenizer.vocab_size,
            n_positions=cfg.block_size,
            d_model=cfg.d_model,
            n_heads=cfg.n_heads,
            n_layers=cfg.n_layers,
        )
        model = GPT(sizes).to(device)
        if world > 1:  # DDP broadcasts rank 0's weights and averages gradients in backward
            net = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
        else:
            net = model
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
        batches = torch.Generator().manual_seed(cfg.seed + 1)  # the same global batches everywhere

        losses = []
        for step in range(cfg.steps):
            x, y = data.get_lm_batch(ids, cfg.block_size, cfg.global_batch, batches)
            x, y = shard(x, rank, world).to(device), shard(y, rank, world).to(device)
            loss = lm_loss(net(x), y)  # through DDP's forward, so backward averages
            opt.zero_grad(set_to_none=True)
            loss.backward()  # DDP: gradients all-reduced (averaged) over the ranks here
            if step == 0 and grad_file and rank == 0:
                torch.save(flat_grad(model), grad_file)
            opt.step()
            reported = loss.detach().clone()
            if world > 1:  # the global-batch loss: the mean of the ranks' shard losses
                dist.all_reduce(reported, op=dist.ReduceOp.SUM)
                reported /= world
            losses.append(reported.item())
        return {
            "losses": losses,
            "world_size": world,
            "backend": dist.get_backend() if dist.is_initialized() else None,
            "device": str(device),
            "config": asdict(cfg),
            "n_parameters": sum(p.numel() for p in model.parameters()),
        }
    finally:
        teardown()


# --------------------------------------------------------------------------------------------
# Memory per parameter: when to shard (FSDP / ZeRO)
# --------------------------------------------------------------------------------------------


def training_bytes_per_parameter(
    world_size: int = 1, shard: str = "none", weight_bytes: int = 4, grad_bytes: int = 4
) -> float:
    """Bytes of GPU/CPU memory one parameter costs per device during training with AdamW.

    Weights (`weight_bytes`), gradients (`grad_bytes`) and AdamW's two fp32 moments (8 bytes);
    in mixed precision (weight_bytes = grad_bytes = 2) there is also an fp32 master copy (4).
    `shard`: "none" (DDP: everything replicated), "optimizer" (ZeRO-1), "gradients" (ZeRO-2:
    optimizer state and gradients), "full" (ZeRO-3 / FSDP: weights too), each divided over the
    `world_size` devices. Activations are extra and depend on batch and length.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    levels = ("none", "optimizer", "gradients", "full")
    if shard not in levels:
        raise ValueError(f"shard must be one of {levels}, got {shard!r}")
    optimizer = 8 + (4 if weight_bytes < 4 else 0)  # Adam moments (+ fp32 master weights)
    level = levels.index(shard)
    return (
        weight_bytes / (world_size if level >= 3 else 1)
        + grad_bytes / (world_size if level >= 2 else 1)
        + optimizer / (world_size if level >= 1 else 1)
    )


# --------------------------------------------------------------------------------------------
# Launching from Python (the lecture, the tests) and the command line
# --------------------------------------------------------------------------------------------


def launch(
    nproc: int,
    out: str | Path,
    cfg: RunConfig | None = None,
    grad_file: str | None = None,
    timeout: float = 600,
) -> dict:
    """Run `train` in `nproc` processes (torchrun when nproc > 1, a plain process otherwise).

    Returns the JSON result rank 0 wrote to `out`. Raises RuntimeError with the processes'
    output when the run fails.
    """
    cfg = cfg or RunConfig()
    args = ["--out", str(out)] + [
        f"--{key.replace('_', '-')}={value}" for key, value in asdict(cfg).items()
    ]
    if grad_file:
        args.append(f"--grad-file={grad_file}")
    if nproc > 1:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        command += [f"--nproc_per_node={nproc}", "-m", "transformer_lab.distributed", *args]
    else:
        command = [sys.executable, "-m", "transformer_lab.distributed", *args]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command[:6])} ... failed with exit code {done.returncode}:\n"
            + (done.stdout + done.stderr)[-3000:]
        )
    return json.loads(Path(out).read_text())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m transformer_lab.distributed",
        description="Train lecture 08's GPT with DistributedDataParallel (run it under torchrun).",
    )
    for key, value in asdict(RunConfig()).items():
        parser.add_argument(f"--{key.replace('_', '-')}", type=type(value), default=value)
    parser.add_argument("--out", required=True, help="rank 0 writes the losses here (JSON)")
    parser.add_argument("--backend", default=None, help="gloo or nccl (default: by device)")
    parser.add_argument("--grad-file", default=None, help="save step 0's averaged gradient here")
    args = vars(parser.parse_args(argv))
    out, backend, grad_file = args.pop("out"), args.pop("backend"), args.pop("grad_file")
    result = train(RunConfig(**args), backend=backend, grad_file=grad_file)
    if int(os.environ.get("RANK", "0")) == 0:
        Path(out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
