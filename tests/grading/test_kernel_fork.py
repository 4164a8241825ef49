"""The grading kernel is a fork of the pre-imported grading job (`instructor.kernel_fork`).

Kernel half: a stand-in for the job (a process that made a private pipe, as the job's result
pipe, ran the job's trusted imports and used torch's generator) executes probe notebooks with
nbclient and `ForkingKernelManager`, in a subprocess of its own. The kernel is a fork (torch
was imported before the notebook imported it), leads its own session, has the environment,
folder and command line a launched kernel has, holds no descriptor of the private pipe, draws
random numbers of its own, runs a two-thread matmul (GNU OpenMP after the fork); a per-cell
timeout interrupts it and the next cell runs; `os._exit` in a cell is a dead kernel. Mutants: a
provisioner that keeps the inherited descriptors, one that keeps the parent's random state,
must fail those checks; switched off, or where the fork fails, the kernel is launched the usual
way and says so.

Pipeline half: a lesson-02 solution graded by `grade` (sandbox, job, nbgrader) runs in a forked
kernel and scores as before; with the fork switched off in the job's environment it scores the
same and the record carries the flag.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from transformer_lab.instructor import grade, kernel_fork, nbgrader_app

REPO = Path(__file__).resolve().parents[2]
LESSON = "02_qkv_attention"
NAME = f"{LESSON}.ipynb"

# The stand-in for a grading job: argv = mode, notebook, output file.
HARNESS = r"""
import json, os, sys, time
from pathlib import Path

mode, nb_path, out_path = sys.argv[1:4]
secret_r, secret_w = os.pipe()  # as the job's result pipe: never inheritable
from transformer_lab.instructor import job
job.trusted_imports()
import torch
torch.rand(5)  # the parent uses its generator before the fork
import nbformat
from nbclient import NotebookClient
from transformer_lab.instructor import kernel_fork
if mode == "keeps-descriptors":
    kernel_fork._only_standard_descriptors = lambda keep: None
if mode == "keeps-random-state":
    kernel_fork._fresh_random_state = lambda: None
if mode == "switched-off":
    os.environ[kernel_fork.SWITCH] = "0"
if mode == "fork-fails":
    def no_fork():
        raise OSError(12, "Cannot allocate memory")
    os.fork = no_fork
os.environ["KFORK_PROBE"] = "yes"
nb = nbformat.read(nb_path, as_version=4)
client = NotebookClient(
    nb,
    kernel_manager_class=kernel_fork.ForkingKernelManager,
    kernel_name="python3",
    timeout=float(os.environ.get("CELL_TIMEOUT", "120")),
    startup_timeout=120,
    interrupt_on_timeout=True,
    allow_errors=True,
    error_on_timeout={"ename": "CellTimeoutError", "evalue": "", "traceback": []},
    resources={"metadata": {"path": str(Path(nb_path).parent)}},
)
result = {"pipe": f"pipe:[{os.fstat(secret_w).st_ino}]", "pid": os.getpid()}
start = time.monotonic()
try:
    client.execute()
except Exception as error:
    result["error"] = f"{type(error).__name__}: {error}"
result["seconds"] = time.monotonic() - start
result["parent_next_rand"] = torch.rand(3).tolist()  # what the parent's generator draws next
result["outputs"] = [c.get("outputs", []) for c in nb.cells]
Path(out_path).write_text(json.dumps(result))
"""

PROBE = r"""
import json, os, signal, sys
facts = {
    "torch_preloaded": "torch" in sys.modules,
    "pid": os.getpid(), "ppid": os.getppid(), "sid": os.getsid(0), "pgid": os.getpgid(0),
    "argv0": os.path.basename(sys.argv[0]), "cwd": os.getcwd(),
    "probe_env": os.environ.get("KFORK_PROBE"), "jpy_parent": os.environ.get("JPY_PARENT_PID"),
    "sigint": str(signal.getsignal(signal.SIGINT)), "fds": {},
}
for name in os.listdir("/proc/self/fd"):
    try:
        facts["fds"][name] = os.readlink(f"/proc/self/fd/{name}")
    except OSError:
        pass
import zmq
facts["zmq_context_is_own"] = zmq.Context.instance() is zmq.Context.instance() and (
    zmq.Context._instance_pid == os.getpid()
)
import torch
facts["rand"] = torch.rand(3).tolist()
torch.set_num_threads(2)
a = torch.ones(300, 300)
facts["matmul"] = float((a @ a).sum())
torch.set_num_threads(1)
print(json.dumps(facts))
"""


def _notebook(path: Path, *cells: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, path)
    return path


def _run(tmp_path: Path, mode: str, *cells: str, cell_timeout: float = 120) -> dict:
    """The harness in a subprocess (as a job: its own interpreter, the grading environment)."""
    folder = tmp_path / mode
    folder.mkdir()
    notebook = _notebook(folder / "probe.ipynb", *cells)
    out = folder / "out.json"
    env = dict(os.environ, MPLBACKEND="Agg", OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
    env["CELL_TIMEOUT"] = str(cell_timeout)
    env.pop("PYTEST_CURRENT_TEST", None)
    env.pop(kernel_fork.SWITCH, None)
    proc = subprocess.run(
        [sys.executable, "-c", HARNESS, mode, str(notebook), str(out)],
        cwd=tmp_path,  # not the repository: the job's imports take their folder off sys.path
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    result["stderr"] = proc.stderr
    result["folder"] = str(folder)
    return result


def _facts(result: dict) -> dict:
    assert "error" not in result, result
    return json.loads(result["outputs"][0][0]["text"])


@pytest.fixture(scope="module")
def forked(tmp_path_factory) -> dict:
    return _run(tmp_path_factory.mktemp("kfork"), "fork", PROBE)


@pytest.mark.slow
def test_the_kernel_is_a_fork_of_the_pre_imported_process(forked):
    facts = _facts(forked)
    assert facts["torch_preloaded"], "torch was not imported before the notebook imported it"
    assert facts["ppid"] == forked["pid"] and facts["jpy_parent"] == str(forked["pid"])
    assert kernel_fork.FALLBACK_MARK not in forked["stderr"]


@pytest.mark.slow
def test_the_forked_kernel_starts_as_a_launched_one(forked):
    facts = _facts(forked)
    assert facts["sid"] == facts["pgid"] == facts["pid"]  # own session and process group
    assert facts["argv0"] == "ipykernel_launcher.py"
    assert facts["cwd"] == forked["folder"] and facts["probe_env"] == "yes"
    assert facts["fds"]["0"] == os.devnull
    assert facts["sigint"] == str(__import__("signal").default_int_handler)
    assert facts["matmul"] == 300.0**3  # GNU OpenMP with two threads after the fork
    assert facts["zmq_context_is_own"]  # pyzmq's Context.instance() made after the fork


@pytest.mark.slow
def test_the_result_pipe_is_not_open_in_the_kernel(forked):
    facts = _facts(forked)
    assert forked["pipe"] not in facts["fds"].values(), facts["fds"]


@pytest.mark.slow
def test_the_kernel_draws_its_own_random_numbers(forked):
    facts = _facts(forked)
    assert facts["rand"] != forked["parent_next_rand"]


@pytest.mark.slow
def test_a_provisioner_that_keeps_descriptors_is_caught(tmp_path):
    mutant = _run(tmp_path, "keeps-descriptors", PROBE)
    assert mutant["pipe"] in _facts(mutant)["fds"].values()


@pytest.mark.slow
def test_a_provisioner_that_keeps_the_random_state_is_caught(tmp_path):
    mutant = _run(tmp_path, "keeps-random-state", PROBE)
    assert _facts(mutant)["rand"] == mutant["parent_next_rand"]


@pytest.mark.slow
def test_switched_off_the_kernel_is_launched_and_says_why(tmp_path):
    launched = _run(tmp_path, "switched-off", PROBE)
    facts = _facts(launched)
    assert not facts["torch_preloaded"]
    assert launched["pipe"] not in facts["fds"].values()
    assert f"{kernel_fork.FALLBACK_MARK}switched off" in launched["stderr"]
    assert kernel_fork.fallback_flags(launched["stderr"]) == [
        f"grading kernel not forked: switched off ({kernel_fork.SWITCH}=0)"
    ]


@pytest.mark.slow
def test_a_failed_fork_launches_the_kernel_and_says_why(tmp_path):
    launched = _run(tmp_path, "fork-fails", PROBE)
    assert not _facts(launched)["torch_preloaded"]
    assert kernel_fork.fallback_flags(launched["stderr"]) == [
        "grading kernel not forked: fork failed: [Errno 12] Cannot allocate memory"
    ]


@pytest.mark.slow
def test_a_cell_timeout_interrupts_the_forked_kernel_and_the_next_cell_runs(tmp_path):
    result = _run(
        tmp_path, "fork", "import time\ntime.sleep(1000)", "print('alive')", cell_timeout=3
    )
    assert "error" not in result, result
    first, second = result["outputs"]
    assert any(o.get("ename") in ("KeyboardInterrupt", "CellTimeoutError") for o in first), first
    assert second == [{"output_type": "stream", "name": "stdout", "text": "alive\n"}]
    assert result["seconds"] < 60


@pytest.mark.slow
def test_os_exit_in_a_cell_is_a_dead_kernel(tmp_path):
    result = _run(tmp_path, "fork", "import os\nos._exit(3)", "print('never')")
    assert result.get("error", "").startswith("DeadKernelError"), result
    assert result["seconds"] < 60


# ----------------------------------------------------------------------------------------------
# When to fork, the flags, the wiring into nbgrader.


def test_fork_only_this_interpreters_ipykernel(monkeypatch):
    monkeypatch.delenv(kernel_fork.SWITCH, raising=False)
    cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", "k.json"]
    seed = {} if sys.flags.hash_randomization else {"PYTHONHASHSEED": "0"}
    assert kernel_fork.fork_unavailable(cmd, seed) is None
    assert "not this interpreter's" in kernel_fork.fork_unavailable(["/usr/bin/R", *cmd[1:]], seed)
    other = [sys.executable, "-m", "other_kernel", "-f", "k.json"]
    assert "not this interpreter's" in kernel_fork.fork_unavailable(other, seed)
    wrong_seed = {"PYTHONHASHSEED": "0"} if sys.flags.hash_randomization else {}
    assert "PYTHONHASHSEED" in kernel_fork.fork_unavailable(cmd, wrong_seed)
    monkeypatch.setenv(kernel_fork.SWITCH, "0")
    assert "switched off" in kernel_fork.fork_unavailable(cmd, seed)


def test_fallback_flags_come_from_the_log_once_each():
    log = (
        "[Autograde] ok\n"
        f"{kernel_fork.FALLBACK_MARK}forking a kernel needs Linux (this is darwin)\n"
        f"{kernel_fork.FALLBACK_MARK}forking a kernel needs Linux (this is darwin)\n"
    )
    assert kernel_fork.fallback_flags(log) == [
        "grading kernel not forked: forking a kernel needs Linux (this is darwin)"
    ]
    assert kernel_fork.fallback_flags("[Autograde] ok\n") == []


def test_only_nbgraders_execute_is_replaced():
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import Execute

    default = Autograde.class_traits()["autograde_preprocessors"].default()
    replaced = kernel_fork.autograde_preprocessors()
    assert Execute in default and Execute not in replaced
    assert [p for p in replaced if p is not kernel_fork.ForkingExecute] == [
        p for p in default if p is not Execute
    ]
    assert kernel_fork.ForkingExecute().kernel_manager_class is kernel_fork.ForkingKernelManager
    assert Execute().kernel_manager_class is not kernel_fork.ForkingKernelManager


# ----------------------------------------------------------------------------------------------
# Through the whole pipeline.

MARK = "KFORK "


def _probed_solution() -> nbformat.NotebookNode:
    """The lesson-02 solution whose first cell notes whether torch was already imported and
    whose attention function prints that once (the test cell's output reaches the record)."""
    nb = nbformat.read(REPO / "solutions" / LESSON / NAME, as_version=4)
    probe = nbformat.v4.new_code_cell(
        "import sys\n_KFORK = {'forked': 'torch' in sys.modules, 'shown': False}"
    )
    probe["id"] = "student-probe"
    nb.cells.insert(0, probe)
    cell = next(c for c in nb.cells if c.get("id") == "sdpa-solution")
    head, sep, body = cell.source.partition('    """')
    assert sep, "the solution's docstring moved"
    show = (
        "    if not _KFORK['shown']:\n"
        "        _KFORK['shown'] = True\n"
        f"        print({MARK!r} + str(_KFORK['forked']))\n"
    )
    doc_end = body.index('"""') + 3
    cell.source = head + sep + body[:doc_end] + "\n" + show + body[doc_end:]
    return nb


def _grade_one(tmp: Path, env_extra: dict[str, str], monkeypatch, config: str = "") -> dict:
    course = nbgrader_app.course_copy(REPO, tmp / "course", [LESSON])
    if config:  # the course's own nbgrader settings, after ours
        path = course / "autograder" / "nbgrader_config.py"
        path.write_text(path.read_text() + config)
    subs = tmp / "subs"
    (subs / "probe" / LESSON).mkdir(parents=True)
    nbformat.write(_probed_solution(), subs / "probe" / LESSON / NAME)
    real_env = grade._env
    monkeypatch.setattr(grade, "_env", lambda c, h: {**real_env(c, h), **env_extra})
    records = grade.grade(course, LESSON, subs, out=tmp / "grades.csv", quiet=True)
    return records[0]


@pytest.mark.slow
def test_grading_runs_the_notebook_in_a_forked_kernel(tmp_path, monkeypatch):
    record = _grade_one(tmp_path, {}, monkeypatch)
    assert (record["status"], record["score"]) == ("graded", 8.0), record
    assert f"{MARK}True" in record["cells"]["sdpa-test"]["output"], record["cells"]
    assert not [f for f in record["flags"] if "not forked" in f], record["flags"]


@pytest.mark.slow
def test_grading_with_the_fork_switched_off_scores_the_same_and_flags_it(tmp_path, monkeypatch):
    record = _grade_one(tmp_path, {kernel_fork.SWITCH: "0"}, monkeypatch)
    assert (record["status"], record["score"]) == ("graded", 8.0), record
    assert f"{MARK}False" in record["cells"]["sdpa-test"]["output"], record["cells"]
    assert f"grading kernel not forked: switched off ({kernel_fork.SWITCH}=0)" in record["flags"]


# A course that sets its own autograde preprocessors: nbgrader's list plus one that marks every
# code cell's output (after Execute), Execute named by its import path.
OWN_PREPROCESSORS = f"""
import nbformat as _nbformat
from nbconvert.preprocessors import Preprocessor as _Preprocessor
from nbgrader.converters import Autograde as _Autograde

class MarkOutputs(_Preprocessor):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.enabled = True

    def preprocess(self, nb, resources):
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs.append(
                    _nbformat.v4.new_output("stream", name="stdout", text="{MARK}course's own\\n")
                )
        return nb, resources

_default = _Autograde.class_traits()["autograde_preprocessors"].default()
c.Autograde.autograde_preprocessors = [
    "nbgrader.preprocessors.Execute" if p.__name__ == "Execute" else p for p in _default
] + [MarkOutputs]
"""


def test_a_courses_own_autograde_preprocessors_keep_the_forked_kernel():
    named = kernel_fork.autograde_preprocessors(["nbgrader.preprocessors.Execute", "x.Other"])
    assert named == [kernel_fork.ForkingExecute, "x.Other"]
    default = kernel_fork.autograde_preprocessors()
    assert kernel_fork.ForkingExecute in default and kernel_fork.Execute not in default


def test_the_autograde_config_keeps_the_courses_own_settings(tmp_path):
    """What the course's nbgrader_config.py sets survives the config the job gives nbgrader's
    app (which wins over the file): its preprocessors (Execute forking) and iopub_timeout."""
    ours = nbgrader_app.autograde_config(tmp_path)  # no course file: our defaults
    assert ours.Execute.iopub_timeout == 60
    assert ours.Autograde.autograde_preprocessors == kernel_fork.autograde_preprocessors()
    (tmp_path / "nbgrader_config.py").write_text(
        "c = get_config()\n"
        "c.Execute.iopub_timeout = 7\n"
        "c.Autograde.autograde_preprocessors = ['nbgrader.preprocessors.Execute', 'x.Mine']\n"
    )
    own = nbgrader_app.autograde_config(tmp_path)
    assert own.Execute.iopub_timeout == 7
    assert own.Autograde.autograde_preprocessors == [kernel_fork.ForkingExecute, "x.Mine"]


@pytest.mark.slow
def test_a_course_that_sets_its_own_autograde_preprocessors_is_graded_with_them(
    tmp_path, monkeypatch
):
    """The config `nbgrader_app` passes to nbgrader's app wins over the course's file: the
    course's list must be carried into it (the mutant, our list alone, drops the course's)."""
    record = _grade_one(tmp_path, {}, monkeypatch, config=OWN_PREPROCESSORS)
    assert (record["status"], record["score"]) == ("graded", 8.0), record
    output = record["cells"]["sdpa-test"]["output"]
    assert f"{MARK}course's own" in output, output
    assert f"{MARK}True" in output, output  # and its kernel still a fork
