"""benchmarks/gpu_check.py, the one prepared GPU check: its CPU dry run (every step in quick mode,
one lecture among them), its refusal without CUDA, its report when a step breaks or overruns,
and the wheel folder's own check (`make gpu-wheels`).

The dry run takes about a minute on two cores; it runs once for the module.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"

_spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
gpu_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_check)


def _env(**extra) -> dict:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("GPU_CHECK", "TRANSFORMER_LAB"))
    }
    env.pop("OUT", None)
    env |= {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg"}
    return env | extra


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-check")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out)],
        env=_env(GPU_CHECK_DEVICE="cpu"),
        capture_output=True,
        text=True,
        timeout=480,
        cwd=ROOT,
    )
    report = json.loads((out / "gpu_check.json").read_text())
    return proc, report, (out / "gpu_check.md").read_text(), out


@pytest.mark.slow
def test_the_dry_run_passes_every_step(dry_run):
    proc, report, md, out = dry_run
    # on failure, the report too: a step's end of output, and its processes if it overran
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + md[-8000:]
    assert report["overall"] == "passed" and report["quick"] and report["device"] == "cpu"
    assert list(report["steps"]) and set(report["steps"]) == set(gpu_check.STEP_ORDER)
    for name, step in report["steps"].items():
        assert step["status"] == "passed", (name, step)
        assert f"| {name} | passed |" in md
    assert sorted(p.name for p in out.iterdir()) == [
        "gpu_check.json",
        "gpu_check.log",
        "gpu_check.md",
    ]
    assert report["seconds"] < report["budget_s"]


@pytest.mark.slow
def test_the_report_names_the_machine_torch_and_cuda(dry_run):
    _, report, md, _ = dry_run
    machine = report["machine"]
    assert machine["torch"] == torch.__version__
    assert machine["cuda_runtime"] == torch.version.cuda
    assert machine["cpus"] == os.cpu_count()
    assert f"torch {torch.__version__}" in md and "CUDA " in md and "no GPU" in md


@pytest.mark.slow
def test_the_course_is_installed_from_the_tree_and_torch_is_untouched(dry_run):
    _, report, _, _ = dry_run
    install = report["steps"]["install"]
    assert install["torch_untouched"] and install["torch_before"] == install["torch_after"]
    assert torch.__version__ in install["torch_before"]
    course = Path(install["course"])
    assert course.name == "__init__.py" and course.parent.name == "transformer_lab"
    assert ROOT not in course.parents  # the installed copy, not the working tree
    grader = Path(install["grader"])  # tests/checks imports the grader's package too
    assert grader.parent.name == "transformer_lab_grader"
    assert grader.parent.parent == course.parent.parent
    assert install["wheels_refused"] == [] and install["modules_missing"] == []


@pytest.mark.slow
def test_the_tests_the_catalogue_and_a_lecture_ran(dry_run):
    _, report, _, _ = dry_run
    steps = report["steps"]
    for name in ("cuda_tests", "checks"):
        assert steps[name]["tests"] > 0 and steps[name]["passed"] == steps[name]["tests"], name
        assert steps[name]["failures"] == []
    catalogue = steps["catalogue"]
    assert catalogue["exercises"] >= 2 and catalogue["mistakes"] >= 10
    known = len(catalogue["known_differences"])
    assert catalogue["caught_and_named_as_on_cpu"] + known == catalogue["mistakes"]
    lectures = steps["lectures"]["lectures"]
    assert [row["lecture"] for row in lectures] == gpu_check.QUICK_LECTURES
    for row in lectures:
        assert row["passed"] and row["seconds"] > 0
        assert row["results"], "the results a lecture prints are recorded"
        assert not any(line.startswith("interactive(") for line in row["results"])


@pytest.mark.slow
def test_the_benchmarks_compare_side_by_side(dry_run):
    _, report, md, _ = dry_run
    bench = report["steps"]["benchmarks"]
    assert bench["errors"] == []
    dtypes = {row["dtype"] for row in bench["attention"]}
    assert dtypes == {"float32", bench["low_precision_dtype"]}
    for row in bench["attention"]:
        assert row["fast_vs_torch"] == pytest.approx(row["fast_ms"] / row["torch_ms"])
    modes = [row["mode"] for row in bench["gpt_step"]]
    assert modes == ["eager", "compiled"]
    for row in bench["gpt_step"]:
        assert row["course GPT"]["tokens_per_s"] > 0 and row["nanoGPT"]["tokens_per_s"] > 0
        assert row["course GPT"]["mfu"] is None  # no GPU peak on a CPU
        # the twins start from the same weights: the same loss
        assert row["initial_loss_course"] == pytest.approx(row["initial_loss_nanogpt"], abs=1e-5)
    eager = bench["gpt_step"][0]  # and the course GPT without its token-id range check
    assert eager[gpu_check.UNCHECKED]["tokens_per_s"] > 0
    assert eager["unchecked_vs_nanogpt_time"] > 0 and gpu_check.UNCHECKED in md
    compiled = bench["gpt_step"][1]  # one graph each, compiled once (tests/models/test_gpt_compile)
    assert (compiled["graphs"], compiled["graph_breaks"]) == (2, 0)
    assert "compiled (2 graphs, 0 graph breaks)" in md
    for row in bench["tiled_attention"]:
        assert row["max_abs_difference"] < 1e-5 and row["tiled_ms"] > 0
    assert "## GPT training step" in md and "## tiled_attention" in md


def test_the_unchecked_row_skips_only_the_range_check():
    """`_ids_unchecked` runs a step without reading the ids (an id past the vocabulary passes the
    check), still checks their shape and dtype, and puts the check back afterwards."""
    from transformer_lab import gpt

    bad = torch.tensor([[0, 99]])
    seen = []

    def step():
        gpt._require_token_ids("idx", bad, 10)  # not read: no error
        with pytest.raises(ValueError, match="must have 2 dimensions|\\(B, L\\)"):
            gpt._require_token_ids("idx", bad[0], 10)
        with pytest.raises(TypeError, match="integer token ids"):
            gpt._require_token_ids("idx", bad.float(), 10)
        seen.append(True)

    gpu_check._ids_unchecked(step)
    assert seen == [True]
    with pytest.raises(ValueError, match="token ids in \\[0, 99\\]"):  # the check is back
        gpt._require_token_ids("idx", bad, 10)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_without_cuda_it_says_so_and_exits_non_zero(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path / "out")],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 2
    assert "no CUDA device" in proc.stderr and "GPU_CHECK_DEVICE=cpu" in proc.stderr
    assert not (tmp_path / "out").exists(), "nothing is checked, so no report claims anything"


def test_a_step_over_its_cap_is_stopped_and_the_report_still_written(tmp_path):
    import psutil

    run = gpu_check.Run(tmp_path, "cpu", True, budget=60, jobs=1)
    pid_file = tmp_path / "kernel.pid"
    # the step starts a "kernel" in a session of its own (as Jupyter does), then outlives its cap
    step = (
        "import subprocess, sys, time\n"
        "k = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
        " start_new_session=True)\n"
        f"open({str(pid_file)!r}, 'w').write(str(k.pid))\n"
        "time.sleep(60)\n"
    )
    call = run.call("lectures", [sys.executable, "-c", step], timeout=3)
    assert call["timed_out"] and call["rc"] is None and call["seconds"] < 20
    assert "stopped after its cap" in run.logs["lectures"]
    kernel = int(pid_file.read_text())

    def gone() -> bool:
        try:
            return psutil.Process(kernel).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    for _ in range(50):
        if gone():
            break
        time.sleep(0.1)
    assert gone(), "the kernel outlived its step"
    run.record("install", {"status": "passed", "seconds": 1.0, "wheels_installed": []})
    run.record("lectures", {"status": gpu_check._status(call, True), "seconds": 1, "lectures": []})
    md = (tmp_path / "gpu_check.md").read_text()
    assert "| lectures | timeout |" in md and "| install | passed |" in md
    assert "| benchmarks | not run |" in md
    saved = json.loads((tmp_path / "gpu_check.json").read_text())
    assert saved["steps"]["lectures"]["status"] == "timeout"


_HUNG_STEP = """
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSTOP)"])
def waiting_for_nothing():
    time.sleep(60)
waiting_for_nothing()
"""


def _overrun(tmp_path) -> tuple[dict, dict, str]:
    run = gpu_check.Run(tmp_path, "cpu", True, budget=60, jobs=1)
    call = run.call("checks", [sys.executable, "-c", _HUNG_STEP], timeout=4)
    found = gpu_check._overran(call, False, run.logs["checks"])
    return call, found, run.logs["checks"]


def test_a_step_over_its_cap_says_what_its_processes_were_doing(tmp_path):
    """Stopped, starved or stuck, and where: its processes' states and CPU time, and each Python
    process's stack (the step's own PYTHONFAULTHANDLER, SIGABRT before the kill)."""
    call, found, log = _overrun(tmp_path)
    assert call["timed_out"] and found["at_timeout"] == call["at_timeout"]
    lines = found["at_timeout"]
    assert any("stopped" in line and "SIGSTOP" in line for line in lines), lines
    assert any("sleeping" in line and "CPU s in" in line for line in lines), lines
    assert lines[-1].startswith("load average")
    assert "in waiting_for_nothing" in log and "in waiting_for_nothing" in found["tail"]
    assert "stopped after its cap" in found["tail"]


def test_mutant_kill_without_the_stacks_leaves_no_trace_of_where_it_hung(tmp_path, monkeypatch):
    kill = gpu_check._kill
    monkeypatch.setattr(gpu_check, "_kill", lambda proc, dump=False: kill(proc))
    call, found, log = _overrun(tmp_path)
    assert call["timed_out"] and found["at_timeout"]
    assert "in waiting_for_nothing" not in log


def test_a_step_that_passes_or_fails_in_time_has_no_process_list():
    assert gpu_check._overran({"rc": 0, "timed_out": False}, True, "x\ny") == {"tail": ""}
    failed = gpu_check._overran({"rc": 1, "timed_out": False}, False, "x\ny")
    assert failed == {"tail": "x\ny"}


def test_a_step_gets_no_more_than_what_is_left_of_the_budget(tmp_path):
    run = gpu_check.Run(tmp_path, "cuda", False, budget=30, jobs=8)
    assert run.cap("benchmarks") <= 30
    assert gpu_check.Run(tmp_path, "cuda", False, budget=1000, jobs=8).cap("install") == 60


def _wheel(folder: Path, name: str, version: str, requires: list[str]) -> None:
    dist = f"{name.replace('-', '_')}-{version}"
    with zipfile.ZipFile(folder / f"{dist}-py3-none-any.whl", "w") as z:
        meta = [f"Name: {name}", f"Version: {version}"] + [f"Requires-Dist: {r}" for r in requires]
        z.writestr(f"{dist}.dist-info/METADATA", "\n".join(meta) + "\n")


def test_the_wheel_folder_must_be_closed_single_versioned_and_torch_free(tmp_path):
    _wheel(
        tmp_path,
        "nbclient",
        "0.11.0",
        ["traitlets>=5", "numpy", 'pywin32; sys_platform == "win32"'],
    )
    _wheel(tmp_path, "traitlets", "5.16.1", [])
    assert gpu_check.check_wheels(tmp_path) == []  # numpy is on the machine, pywin32 is Windows'
    _wheel(tmp_path, "nbformat", "5.11.1", ["fastjsonschema>=2.15", "traitlets"])
    _wheel(tmp_path, "traitlets", "5.14.0", [])
    _wheel(tmp_path, "torch", "2.13.0", [])
    _wheel(tmp_path, "left-over", "1.0", [])
    problems = "\n".join(gpu_check.check_wheels(tmp_path))
    assert "nbformat-5.11.1-py3-none-any.whl needs fastjsonschema>=2.15" in problems
    assert "two versions of traitlets" in problems
    assert "torch-2.13.0-py3-none-any.whl would replace the machine's own" in problems
    assert "left_over-1.0-py3-none-any.whl: nothing needs it" in problems
    assert "numpy" not in problems and "pywin32" not in problems


def test_the_wheels_asked_for_are_pinned_and_none_is_already_on_the_machine():
    names = [gpu_check._name(p) for p in gpu_check.WHEEL_PINS]
    assert all("==" in p for p in gpu_check.WHEEL_PINS)
    assert len(set(names)) == len(names)
    assert not set(names) & gpu_check.DEVICE_HAS
    assert set(gpu_check.WHEEL_ROOTS) <= set(names)


def test_a_lecture_states_its_results_in_the_lines_it_prints():
    import nbformat.v4 as v4

    code = v4.new_code_cell("...")
    code.outputs = [
        v4.new_output("stream", name="stdout", text="validation loss 1.234\nno digits here\n"),
        v4.new_output("stream", name="stderr", text="warning 42\n"),
        v4.new_output("display_data", data={"text/plain": "<Figure size 640x480 with 1 Axes>"}),
        v4.new_output(
            "display_data",
            data={
                "text/plain": "interactive(children=(IntSlider(value=3),))",
                "application/vnd.jupyter.widget-view+json": {"model_id": "x"},
            },
        ),
        v4.new_output("execute_result", data={"text/plain": "accuracy 0.97"}, execution_count=1),
    ]
    prose = v4.new_markdown_cell("loss 9.99 in the text is not a result")
    assert gpu_check._stated([prose, code]) == ["validation loss 1.234", "accuracy 0.97"]


@pytest.mark.slow
def test_a_lecture_that_breaks_says_where_and_keeps_what_it_printed(tmp_path):
    import nbformat
    import nbformat.v4 as v4

    nb = v4.new_notebook()
    nb.cells = [
        v4.new_code_cell("print('loss after 10 steps: 2.5')"),
        v4.new_markdown_cell("then"),
        v4.new_code_cell("raise RuntimeError('out of memory')"),
        v4.new_code_cell("print('never 3')"),
    ]
    path = tmp_path / "07_broken.ipynb"
    nbformat.write(nb, path)
    saved, env = [], dict(os.environ)
    row = gpu_check.run_lecture(path, "cpu", True, timeout=60, save=saved.append)
    assert dict(os.environ) == env, "the lecture's settings leaked into this process"
    assert row["lecture"] == "07_broken" and row["passed"] is False
    assert row["error"].startswith("cell 3:") and "out of memory" in row["error"]
    assert row["cells_run"] == 2 and row["cells"] == 4
    assert row["results"] == ["loss after 10 steps: 2.5"]
    assert saved and saved[0]["results"] == ["loss after 10 steps: 2.5"]


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", 989.4),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H200", 989.4),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("Tesla T4", None),
        (None, None),
    ],
)
def test_mfu_is_measured_against_the_gpus_own_bf16_peak(name, peak):
    assert gpu_check.peak_tflops(name) == peak


def test_the_readme_gives_the_one_device_command_and_the_wheel_count():
    readme = (ROOT / "README.md").read_text()
    assert 'python3 benchmarks/gpu_check.py --out "$OUT"' in readme
    assert f"the {len(gpu_check.WHEEL_PINS)} wheels it lacks" in readme
    assert "make gpu-wheels" in readme and "GPU_CHECK_DEVICE=cpu" in readme


def _fake_catalogue_child(rounds: list[tuple[int, dict]]):
    """run.call for the catalogue step: each call writes the next round's JSON, returns its rc."""
    calls = []

    def call(step, argv, timeout, env=None):
        calls.append(argv)
        rc, data = rounds[len(calls) - 1]
        out = Path(argv[argv.index("--json") + 1])
        out.write_text(json.dumps(data))
        return {"rc": rc, "seconds": 1.0, "timed_out": False}

    return call, calls


def _row(exercise, key, same=True):
    return {"exercise": exercise, "mistake": key, "same": same, "cpu": {}, "cuda": {}}


def test_the_catalogue_goes_on_in_a_fresh_process_after_a_lost_gpu(tmp_path, monkeypatch):
    # a mistake that stops a CUDA kernel leaves its process without a GPU (2026-11-28's run
    # ended there, after 213 of 357 mistakes): the step starts again after it
    run = gpu_check.Run(tmp_path, "cuda", False, budget=100, jobs=1)
    lost = _row("label_smoothed_loss", "b", same=False)
    first = {"mistakes": [_row("x", "a"), lost], "done": False, "next": 2}
    second = {"mistakes": [_row("y", "c")], "done": True}
    call, calls = _fake_catalogue_child([(gpu_check.LOST_GPU, first), (0, second)])
    monkeypatch.setattr(run, "call", call)
    result = gpu_check.step_catalogue(run)
    assert [a[a.index("--start") + 1] for a in calls] == ["0", "2"]
    assert result["mistakes"] == 3 and result["exercises"] == 3
    assert result["differences"] == [lost] and result["status"] == "failed"


def test_mutant_catalogue_that_stops_at_a_lost_gpu_reports_what_it_reached_only(
    tmp_path, monkeypatch
):
    # the weakened step: one process; the report must not pass on a partial catalogue
    run = gpu_check.Run(tmp_path, "cuda", False, budget=100, jobs=1)
    first = {"mistakes": [_row("x", "a")], "done": False}  # no "next": it cannot go on
    call, calls = _fake_catalogue_child([(gpu_check.LOST_GPU, first)])
    monkeypatch.setattr(run, "call", call)
    result = gpu_check.step_catalogue(run)
    assert len(calls) == 1 and result["mistakes"] == 1 and result["status"] != "passed"


def test_a_check_that_stops_a_kernel_ends_the_catalogue_process_with_lost_gpu():
    from transformer_lab import check

    saved = []
    real = check.EXERCISES
    ex = real["label_smoothed_loss"]

    def fake_check(impl, thorough=False):
        if os.environ.get("TRANSFORMER_LAB_CHECK_DEVICES") == "cuda":
            raise RuntimeError("CUDA error: device-side assert triggered")
        raise check.CheckFailed(exercise=ex.name, problem="wrong", mistake_key="k")

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRANSFORMER_LAB_GRADING", "1")  # catalogue() sets it; put back afterwards
        mp.setattr(check, "EXERCISES", {"label_smoothed_loss": ex})
        mp.setattr(check, "label_smoothed_loss", fake_check)
        with pytest.raises(SystemExit) as info:
            gpu_check.catalogue("cuda", None, saved.append, start=1)
    assert info.value.code == gpu_check.LOST_GPU
    assert saved[-1]["next"] == 2 and len(saved[-1]["mistakes"]) == 1
    assert saved[-1]["mistakes"][0]["mistake"] == ex.mistakes[1].key


def test_a_gpu_lost_before_a_mistake_runs_that_mistake_again_in_a_fresh_process():
    # an earlier mistake's assert reported late: this mistake's CPU run already finds no GPU
    # (torch.manual_seed seeds CUDA too); its row would be wrong, so it is run again
    from transformer_lab import check

    saved, calls = [], []
    ex = check.EXERCISES["label_smoothed_loss"]

    def fake_check(impl, thorough=False):
        calls.append(impl)
        if len(calls) >= 3:  # the second mistake's runs: the GPU is gone
            raise RuntimeError("CUDA error: device-side assert triggered")
        raise check.CheckFailed(exercise=ex.name, problem="wrong", mistake_key="k")

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRANSFORMER_LAB_GRADING", "1")
        mp.setattr(check, "EXERCISES", {"label_smoothed_loss": ex})
        mp.setattr(check, "label_smoothed_loss", fake_check)
        with pytest.raises(SystemExit) as info:
            gpu_check.catalogue("cuda", None, saved.append, start=0)
    assert info.value.code == gpu_check.LOST_GPU
    assert saved[-1]["next"] == 1  # the second mistake again, not the third
    assert [r["mistake"] for r in saved[-1]["mistakes"]] == [ex.mistakes[0].key]


def test_a_mistake_that_stops_a_kernel_and_says_so_is_a_known_difference(tmp_path, monkeypatch):
    stops = _row("repeat_kv", "divisor-h-kv", same=False) | {
        "cpu": _caught("query head i reads ..."),
        "cuda": _caught("a CUDA kernel stopped ...") | {"key": "crash-device-assert"},
    }
    unnamed = stops | {"cuda": _caught(None)}  # the weakened rule would excuse this one too
    for rows, status in (([stops], "passed"), ([unnamed], "failed")):
        run = gpu_check.Run(tmp_path, "cuda", False, budget=100, jobs=1)
        call, _ = _fake_catalogue_child([(0, {"mistakes": rows, "done": True})])
        monkeypatch.setattr(run, "call", call)
        assert gpu_check.step_catalogue(run)["status"] == status


def _caught(named):
    return {"caught": True, "named": named}


def test_a_known_difference_is_listed_apart_and_an_unknown_one_fails(tmp_path, monkeypatch):
    known = _row("LayerNorm", "naive-variance", same=False) | {
        "cpu": _caught("the variance is ..."),
        "cuda": _caught(None),
    }
    other = _row("LayerNorm", "no-eps", same=False) | {"cpu": _caught("x"), "cuda": _caught(None)}
    for rows, status in (([known], "passed"), ([known, other], "failed")):
        run = gpu_check.Run(tmp_path, "cuda", False, budget=100, jobs=1)
        call, _ = _fake_catalogue_child([(0, {"mistakes": rows, "done": True})])
        monkeypatch.setattr(run, "call", call)
        result = gpu_check.step_catalogue(run)
        assert result["status"] == status
        assert [r["mistake"] for r in result["known_differences"]] == ["naive-variance"]
        assert "why" in result["known_differences"][0]


def test_a_known_mistake_that_is_not_caught_on_the_device_still_fails(tmp_path, monkeypatch):
    # the weakened exemption: listing a mistake must not excuse a GPU that lets it through
    row = _row("LayerNorm", "naive-variance", same=False) | {
        "cpu": _caught("the variance is ..."),
        "cuda": {"caught": False},
    }
    run = gpu_check.Run(tmp_path, "cuda", False, budget=100, jobs=1)
    call, _ = _fake_catalogue_child([(0, {"mistakes": [row], "done": True})])
    monkeypatch.setattr(run, "call", call)
    assert gpu_check.step_catalogue(run)["status"] == "failed"
