"""Lesson 12: DistributedDataParallel under torchrun (2 CPU processes, gloo) takes the same steps as
one process with the same global batch, because the gradients are averaged correctly.

The runs are real: `torchrun --standalone --nproc_per_node 2` on loopback. Two mutants, each a
plausible mistake, run the same way and must NOT match: every rank training on the same rows
(forgotten sharding), and no gradient synchronisation (the model not wrapped in DDP).
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest
import torch

from transformer_lab import distributed as dist_train

CFG = dist_train.RunConfig(steps=6, global_batch=8, block_size=32, d_model=32, n_layers=1)
LOSS_TOL = 1e-5  # float32, additions in another order
GRAD_TOL = {"atol": 1e-6, "rtol": 1e-4}


# gloo on loopback can abort a process (SIGABRT from its C++ transport) when a connection breaks
# on a loaded machine, not because of the code under test: seen once, in a fresh clone's
# `make test` on 2 busy cores (rank 1 exited -6 in the `every-rank-same-rows` mutant; 20 runs of
# it beside two CPU burners, and the file alone, did not repeat it). Such a run is started again
# once, and a second abort fails the test with the processes' error lines.
ABORTED = re.compile(r"exit ?code\s*:?\s*-6\b|SIGABRT|terminate called|gloo::IoException")


def _aborted(output: str) -> bool:
    return ABORTED.search(output) is not None


def _error_lines(output: str) -> str:
    """The lines that say what went wrong, then the end of the output."""
    marks = ("Error", "error", "what()", "terminate", "Traceback", "exitcode")
    lines = [line for line in output.splitlines() if any(m in line for m in marks)]
    return "\n".join(lines[:40]) + "\n...\n" + output[-2000:]


def _launch(nproc: int, out, **kwargs) -> dict:
    try:
        return dist_train.launch(nproc, out, CFG, **kwargs)
    except RuntimeError as error:
        if not _aborted(str(error)):
            raise
        print(f"gloo aborted a process; running again once:\n{_error_lines(str(error))}")
        return dist_train.launch(nproc, out, CFG, **kwargs)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ddp")
    one = _launch(1, folder / "one.json", grad_file=str(folder / "g1.pt"))
    two = _launch(2, folder / "two.json", grad_file=str(folder / "g2.pt"))
    grads = torch.load(folder / "g1.pt"), torch.load(folder / "g2.pt")
    return one, two, grads


def _mutant_run(tmp_path, patch: str) -> dict:
    """Run the training under torchrun with one line of the module replaced (a plausible bug)."""
    script = tmp_path / "mutant.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys
            from transformer_lab import distributed as d
            {patch}
            d.main(sys.argv[1:])
            """
        )
    )
    out = tmp_path / "mutant.json"
    args = [f"--{k.replace('_', '-')}={v}" for k, v in vars(CFG).items()]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc_per_node=2", str(script), "--out", str(out), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != 0 and _aborted(done.stdout + done.stderr):
        print(f"gloo aborted a process; running again once:\n{_error_lines(done.stderr)}")
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, _error_lines(done.stdout + done.stderr)
    import json

    return json.loads(out.read_text())


@pytest.mark.slow
def test_two_processes_follow_the_single_process_loss_curve(runs):
    one, two, _ = runs
    assert one["world_size"] == 1 and two["world_size"] == 2
    two_gpus = torch.cuda.is_available() and torch.cuda.device_count() >= 2
    assert two["backend"] == ("nccl" if two_gpus else "gloo")
    assert len(one["losses"]) == len(two["losses"]) == CFG.steps
    assert one["losses"][-1] < one["losses"][0]  # it trains
    diff = max(abs(a - b) for a, b in zip(one["losses"], two["losses"]))
    assert diff < LOSS_TOL, f"loss curves differ by {diff}"


@pytest.mark.slow
def test_gradients_are_averaged_over_the_processes(runs):
    _, _, (single, averaged) = runs
    assert single.shape == averaged.shape and single.abs().max() > 0
    torch.testing.assert_close(averaged, single, **GRAD_TOL)
    # summed instead of averaged would be twice as large: the tolerance tells them apart
    assert not torch.allclose(2 * averaged, single, **GRAD_TOL)


@pytest.mark.slow
@pytest.mark.parametrize(
    "patch",
    [
        "d.shard = lambda batch, rank, world: batch[: batch.shape[0] // world]",  # same rows
        "d.DDP = lambda model, device_ids=None: model",  # no gradient averaging
    ],
    ids=["every-rank-same-rows", "no-ddp-wrapper"],
)
def test_mutants_do_not_match_the_single_process_run(runs, tmp_path, patch):
    one, _, _ = runs
    mutant = _mutant_run(tmp_path, patch)
    diff = max(abs(a - b) for a, b in zip(one["losses"], mutant["losses"]))
    assert diff > 100 * LOSS_TOL, f"a wrong DDP run matched the single process (diff {diff})"


@pytest.mark.parametrize(
    ("gpus", "world", "local_rank", "expected"),
    [
        (0, 1, 0, ("cpu", "gloo")),
        (0, 2, 1, ("cpu", "gloo")),
        (1, 1, 0, ("cuda:0", "nccl")),
        (1, 2, 1, ("cpu", "gloo")),  # one GPU, two processes: NCCL would refuse; no cuda:1
        (2, 2, 1, ("cuda:1", "nccl")),
        (8, 2, 0, ("cuda:0", "nccl")),
    ],
)
def test_each_process_gets_a_gpu_of_its_own_or_the_cpu(
    monkeypatch, gpus, world, local_rank, expected
):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    device, backend = dist_train.device_for(local_rank, world)
    assert (str(device), backend) == expected


def test_a_global_batch_must_split_evenly():
    batch = torch.arange(10).reshape(5, 2)
    assert dist_train.shard(batch, 0, 1).tolist() == batch.tolist()
    assert dist_train.shard(torch.arange(8), 1, 4).tolist() == [2, 3]
    with pytest.raises(ValueError, match="multiple of the number of processes"):
        dist_train.shard(batch, 0, 2)


def test_memory_per_parameter_under_each_sharding_level():
    per = dist_train.training_bytes_per_parameter
    assert per() == 16  # fp32 weights 4 + gradients 4 + AdamW moments 8
    assert per(weight_bytes=2, grad_bytes=2) == 16  # bf16 2 + 2, fp32 master 4 + moments 8
    assert per(8, "optimizer") == 4 + 4 + 8 / 8
    assert per(8, "gradients") == 4 + 4 / 8 + 8 / 8
    assert per(8, "full") == 16 / 8
    # sharding never costs more, and full sharding scales with the number of devices
    for world in (1, 2, 64):
        levels = [per(world, s) for s in ("none", "optimizer", "gradients", "full")]
        assert levels == sorted(levels, reverse=True)
    with pytest.raises(ValueError, match="shard must be one of"):
        per(2, "zero3")
    with pytest.raises(ValueError, match="world_size"):
        per(0)
