"""A check on a GPU must leave the GPU usable, whatever the student's code does.

On CUDA an index out of range is a device-side assert: the kernel stops, and nothing in the
process can use the GPU again. The GPU check of 2026-11-28 (benchmarks/gpu) met one in the
checks' own machinery: naming `label_smoothed_loss`'s "clamped-targets" ran the catalogued mistakes
"pad-column-excluded" and "pad-not-ignored" on a case with ignore_index=-100, which index with
-100. So FunctionDriver and ModuleDriver run a mistake on the CPU before the GPU
(``drivers.cpu_first``): one that raises there is skipped, and one that runs goes on to the case's
device, where its ties and rounding are the student's. A device-side assert of the student's own
code, wherever CUDA reports it, is a check failure that says to restart the kernel
(``crash-device-assert``).

The tests with "cuda" in their names run in the GPU check's cuda_tests step; the rest here run
everywhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from transformer_lab import check
from transformer_lab.check import answer_drivers, compare, crashes, drivers
from transformer_lab.check.devices import CHECK_DEVICES_ENV
from transformer_lab.check.drivers import CustomDriver
from transformer_lab.check.exercise import Mistake

CPU = torch.device("cpu")
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
SHARED = Path(__file__).resolve().parents[2] / "shared"
# The students whose naming runs the out-of-range mistakes (found on the CPU, where the same
# indexing raises IndexError and the diagnosis skips it)
STUDENTS = ("clamped-targets", "hard-coded-pad", "pad-id-zero")


def _runs_seen(monkeypatch, device: str) -> list[tuple[str, str, bool]]:
    """(mistake, device, raised) for every run of a catalogued mistake of label_smoothed_loss
    while the thorough check, on `device` alone, names the students in STUDENTS."""
    ex = check.EXERCISES["label_smoothed_loss"]
    runs: list[tuple[str, str, bool]] = []

    def spying(key, impl):
        def wrapped(logits, *args, **kwargs):
            try:
                out = impl(logits, *args, **kwargs)
            except Exception:
                runs.append((key, logits.device.type, True))
                raise
            runs.append((key, logits.device.type, False))
            return out

        return wrapped

    monkeypatch.setenv(CHECK_DEVICES_ENV, device)
    students = {key: ex.mistake(key).impl for key in STUDENTS}
    spied = [type(m)(m.key, m.sentence, spying(m.key, m.impl)) for m in ex.mistakes]
    monkeypatch.setattr(ex, "mistakes", spied)
    for key, impl in students.items():
        with pytest.raises(check.CheckFailed) as info:
            check.label_smoothed_loss(impl, thorough=True)
        assert info.value.mistake_key == key
    return runs


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=cuda)])
def test_a_mistake_reaches_the_gpu_only_after_it_ran_on_the_cpu(monkeypatch, device):
    runs = _runs_seen(monkeypatch, device)
    raised_on_cpu = [r for r in runs if r[1] == "cpu" and r[2]]
    assert raised_on_cpu, "the students' naming meets the mistakes that index with -100"
    for i, (key, where, _) in enumerate(runs):
        if where != "cpu":  # the run before it: the same mistake, on the CPU, without an error
            assert i > 0 and runs[i - 1] == (key, "cpu", False)
    if device == "cuda":
        assert any(where == "cuda" for _, where, _ in runs)  # then on the case's own device
    else:
        assert {where for _, where, _ in runs} == {"cpu"}


def test_a_mistake_that_raises_on_the_cpu_never_runs_on_the_device():
    # a stand-in accelerator (meta) on a machine without a GPU; the mutant that goes straight to
    # the device (test_cuda_mutant_diagnosing_on_the_gpu_loses_the_gpu) would record ["meta"]
    seen = []

    def run(where):
        seen.append(where.type)
        if where.type == "cpu":
            raise IndexError("index -100 is out of bounds for dimension 1 with size 9")
        return "ran on the device"

    with pytest.raises(IndexError):
        drivers.cpu_first(run, torch.device("meta"))
    assert seen == ["cpu"]


_CHILD = """
import os, sys, contextlib, io
os.environ["TRANSFORMER_LAB_GRADING"] = "1"
os.environ["{env}"] = "cuda"
import torch
from transformer_lab import check
from transformer_lab.check import drivers
if sys.argv[1] == "mutant":
    drivers.cpu_first = lambda run, device: run(device)
ex = check.EXERCISES["label_smoothed_loss"]
named = []
for key in {students!r}:
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            check.label_smoothed_loss(ex.mistake(key).impl, thorough=True)
    except check.CheckFailed as err:
        named.append(err.mistake_key)
print("named", named, flush=True)
print("gpu still works:", torch.ones(3, device="cuda").sum().item(), flush=True)
"""


def _child(mode: str) -> subprocess.CompletedProcess:
    code = textwrap.dedent(_CHILD).format(env=CHECK_DEVICES_ENV, students=STUDENTS)
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(SHARED), os.environ.get("PYTHONPATH", "")])
    )
    return subprocess.run(
        [sys.executable, "-c", code, mode], capture_output=True, text=True, env=env, timeout=300
    )


@cuda
def test_cuda_naming_a_mistake_leaves_the_gpu_usable():
    done = _child("right")
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"named {list(STUDENTS)}" in done.stdout
    assert "gpu still works: 3.0" in done.stdout


@cuda
def test_cuda_mutant_diagnosing_on_the_gpu_loses_the_gpu():
    # the weakened version: the mistakes go straight to the case's device; -100 stops a kernel
    done = _child("mutant")
    assert "gpu still works" not in done.stdout
    assert "device-side assert" in done.stdout + done.stderr


# ----------------------------------------------------------------------------------------------
# The student's own device-side assert, wherever CUDA reports it


def _device_assert(*_):
    raise getattr(torch, "AcceleratorError", RuntimeError)(
        "CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously "
        "reported at some other API call, so the stacktrace below might be incorrect."
    )


def test_a_device_assert_reported_late_is_a_check_failure_that_says_restart(monkeypatch):
    # CUDA raises it at the next synchronisation: in the check's comparison, not the student's call
    ex = check.EXERCISES["label_smoothed_loss"]
    monkeypatch.setattr(ex, "driver", CustomDriver(_device_assert))
    with pytest.raises(check.CheckFailed) as info:
        check.label_smoothed_loss(lambda *a, **k: None)
    assert info.value.mistake_key == "crash-device-assert"
    assert "restart the kernel" in info.value.mistake
    assert "device-side assert" in info.value.problem


def test_mutant_that_lets_a_device_assert_through_raw(monkeypatch):
    ex = check.EXERCISES["label_smoothed_loss"]
    monkeypatch.setattr(ex, "driver", CustomDriver(_device_assert))
    monkeypatch.setattr(crashes, "is_device_assert", lambda err: False)
    with pytest.raises(RuntimeError) as info:
        check.label_smoothed_loss(lambda *a, **k: None)
    assert not isinstance(info.value, check.CheckFailed)


def test_other_runtime_errors_of_a_check_are_not_renamed(monkeypatch):
    def broken(*_):
        raise RuntimeError("a bug in the check itself")

    ex = check.EXERCISES["label_smoothed_loss"]
    monkeypatch.setattr(ex, "driver", CustomDriver(broken))
    with pytest.raises(RuntimeError, match="a bug in the check itself"):
        check.label_smoothed_loss(lambda *a, **k: None)


# ----------------------------------------------------------------------------------------------
# The index a message quotes: the same on every device


def test_a_difference_shared_by_many_entries_is_quoted_at_its_first_entry():
    # one wrong value added to every row (ViTEmbedding's cls-added-to-patches): the differences
    # tie up to rounding, and a GPU rounds them otherwise (the GPU check of 2026-11-28 quoted
    # index (0, 4, 3) where the CPU quotes (0, 2, 3)); the first of the near-ties is quoted
    expected = torch.zeros(1, 4, 2, dtype=torch.float64)
    got = expected.clone()
    got[0, :, 1] = 0.5
    got[0, 2, 1] = 0.5 + 1e-15  # a rounding's worth larger, two rows on
    assert "(0, 0, 1)" in compare.compare_tensor(expected, got, "z", torch.float64, CPU)


def test_mutant_quoting_the_argmax_depends_on_rounding():
    expected = torch.zeros(1, 4, 2, dtype=torch.float64)
    got = expected.clone()
    got[0, :, 1] = 0.5
    got[0, 2, 1] = 0.5 + 1e-15
    diff = (got - expected).abs()
    assert compare.format_index(diff.flatten().argmax().item(), got.shape) == "(0, 2, 1)"


def test_a_clearly_largest_difference_is_still_the_one_quoted():
    expected = torch.zeros(1, 4, 2, dtype=torch.float64)
    got = expected.clone()
    got[0, :, 1] = 0.5
    got[0, 3, 0] = 0.9
    assert "(0, 3, 0)" in compare.compare_tensor(expected, got, "z", torch.float64, CPU)


def test_a_trial_diagnosis_runs_each_mistake_on_the_cpu_first():
    # TrialDriver (greedy decoding, sampling, the KV cache): the same guard, with a stand-in
    # accelerator (meta); the mutant that runs a mistake's trial on the device at once would
    # record ("indexes_out_of_range", "meta")
    seen = []

    def trial(impl, case, setting, call):
        device = setting[0]
        seen.append((impl.__name__, device.type))
        call(lambda: impl(device))
        return answer_drivers.Finding("wrong", "a case", "tag", "evidence")

    def indexes_out_of_range(device):
        if device.type == "cpu":
            raise IndexError("index 9 is out of bounds for dimension 0 with size 9")

    def finds_the_same(device):
        return None

    ex = SimpleNamespace(
        mistakes=[
            Mistake("oob", "indexes out of range", indexes_out_of_range),
            Mistake("same", "finds the same", finds_the_same),
        ],
        reference=None,
    )
    driver = answer_drivers.TrialDriver(lambda thorough: [0], trial)
    finding = answer_drivers.Finding("wrong", "a case", "tag", "evidence")
    named = driver._name(ex, 0, (torch.device("meta"), torch.float64), finding)
    assert named is not None and named.key == "same"
    assert seen == [
        ("indexes_out_of_range", "cpu"),
        ("finds_the_same", "cpu"),
        ("finds_the_same", "meta"),
    ]


@pytest.mark.parametrize(
    "setting, device",
    [
        (torch.device("meta"), "meta"),
        ((torch.device("meta"), torch.float32), "meta"),
        (None, "cpu"),
        ((3, "x"), "cpu"),
    ],
)
def test_a_trial_setting_names_its_device_and_moves_to_the_cpu(setting, device):
    assert drivers.device_of(setting).type == device
    moved = drivers.setting_on(setting, CPU)
    assert drivers.device_of(moved).type == "cpu"
    if isinstance(setting, tuple):
        assert len(moved) == len(setting) and moved[1:] == setting[1:]
