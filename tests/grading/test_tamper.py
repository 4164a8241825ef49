"""Tamper resistance: the judge runs every test cell where student code cannot reach (`judge`,
through `instructor.verify`).

Each hostile submission is run twice: in a Jupyter kernel the way plain nbgrader runs it (the
released test cells, hidden tests included, in the same kernel as the student's code: the
weakened judge, which several attacks fool), and judged. The tests assert the exact per-cell
result of both and the exact flags: a hostile submission gains no points from the judge, and its
code is flagged.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from transformer_lab_grader import verify as V
from transformer_lab_grader.notebook_format import (
    cell_source,
    check_calls,
    is_test_cell,
    nbgrader_meta,
)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
L02, L06 = "02_qkv_attention", "06_masking"
SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


def grading_env(monkeypatch, tmp_path) -> None:
    """The settings a re-check (`run_verify`) runs under: quick, grading mode, one thread, offline,
    the student's package in `tmp_path`. Other test modules that call `run_verify` use it too."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("TRANSFORMER_LAB_QUICK", "1")
    monkeypatch.setenv("TRANSFORMER_LAB_GRADING", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMER_LAB_STUDENT_DIR", str(tmp_path / "student_pkg"))


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path):
    grading_env(monkeypatch, tmp_path)


# ---------------------------------------------------------------------------------------------
# Building submissions: the released notebook with the student's answers (and extra cells).


def _solutions(lesson: str) -> dict[str, str]:
    nb = nbformat.read(ROOT / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    out = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            lines = [ln for ln in cell.source.splitlines() if ln.strip() not in SOLUTION_MARKERS]
            out[meta["grade_id"]] = "\n".join(lines)
    return out


def submission(
    tmp_path: Path,
    lesson: str,
    answers: dict[str, str] | None = None,
    after: dict[str, str] | None = None,
    solved: bool = True,
) -> Path:
    """The released notebook; solution cells from solutions/ (when `solved`), `answers`
    replacing some by grade_id, and a new code cell after each grade_id in `after`."""
    nb = nbformat.read(ROOT / "exercises" / lesson / f"{lesson}.ipynb", as_version=4)
    sources = _solutions(lesson) if solved else {}
    sources.update(answers or {})
    cells = []
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in sources:
            cell.source = sources[gid]
        cells.append(cell)
        if gid in (after or {}):
            cells.append(nbformat.v4.new_code_cell(after[gid]))
    nb.cells = cells
    path = tmp_path / "submitted" / f"{lesson}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def cell_number(path: Path, text: str) -> int:
    """1-based index of the first cell containing `text` (as the flags count cells)."""
    nb = json.loads(path.read_text())
    for i, cell in enumerate(nb["cells"]):
        if text in "".join(cell["source"]):
            return i + 1
    raise AssertionError(text)


def in_kernel(path: Path, lesson: str) -> dict[str, bool]:
    """What nbgrader sees: the released test cells (hidden tests included) run in the same
    kernel as the student's code; a cell passes when it raises nothing."""
    from nbclient import NotebookClient

    tests = V.released_test_cells(ROOT, lesson)
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in tests:
            cell.source = tests[gid]
    NotebookClient(
        nb,
        timeout=120,
        allow_errors=True,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    result = {}
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in tests:
            result[gid] = not any(o.get("output_type") == "error" for o in cell.get("outputs", []))
    return result


def run_verify(path: Path, lesson: str, tmp_path: Path) -> dict:
    return V.verify(lesson, path, tmp_path / "work", course=ROOT, timeout=240)


def passed(result: dict) -> dict[str, bool]:
    return {gid: cell["passed"] for gid, cell in result["cells"].items()}


# A wrong scaled_dot_product_attention (no division by √d_k). SelfAttention calls it, and is
# judged with the course's attention in its place (`Exercise.uses`, tests/grading/
# test_own_exercise.py): in every hostile submission below the attention exercise is wrong and
# SelfAttention, right itself, passes; the hostile code gains nothing on either.
WRONG_SDPA = """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights
"""
NONE_PASS = {"sdpa-test": False, "self-attention-test": False}
SDPA_WRONG = {"sdpa-test": False, "self-attention-test": True}  # judged: only its own exercise
ALL_PASS = {"sdpa-test": True, "self-attention-test": True}


def hostile(tmp_path, code: str, answer: str = WRONG_SDPA) -> Path:
    return submission(tmp_path, L02, {"sdpa-solution": answer}, after={"sdpa-solution": code})


# ---------------------------------------------------------------------------------------------
# Honest notebooks.


def test_solution_passes_everything(tmp_path):
    result = run_verify(submission(tmp_path, L02), L02, tmp_path)
    assert passed(result) == ALL_PASS
    assert result["flags"] == []
    assert "24 thorough checks passed" in result["cells"]["sdpa-test"]["message"]


def test_the_recheck_reads_attributes_the_students_forward_sets(tmp_path):
    """The judge's stand-in for a student's module mirrors its weights; `last_weights`, set by
    the child's forward, is read from the child: kept, it passes; stale, it fails as in the
    notebook (a stand-in without the attribute would fail the solution itself)."""
    stale = _solutions(L02)["self-attention-solution"].replace(
        "out, self.last_weights = scaled_dot_product_attention(q, k, v, mask)",
        "out, weights = scaled_dot_product_attention(q, k, v, mask)\n"
        "        if self.last_weights is None:\n"
        "            self.last_weights = weights",
    )
    assert stale != _solutions(L02)["self-attention-solution"]
    result = run_verify(
        submission(tmp_path, L02, {"self-attention-solution": stale}), L02, tmp_path
    )
    assert result["cells"]["sdpa-test"]["passed"]
    assert not result["cells"]["self-attention-test"]["passed"]
    assert "last_weights" in result["cells"]["self-attention-test"]["message"]


def test_untouched_exercise_fails_everything(tmp_path):
    path = submission(tmp_path, L02, solved=False)
    result = run_verify(path, L02, tmp_path)
    assert passed(result) == NONE_PASS
    assert result["flags"] == []
    assert result["cells"]["sdpa-test"]["message"].startswith("NotImplementedError")


def test_wrong_answer_names_the_mistake(tmp_path):
    result = run_verify(hostile(tmp_path, "pass"), L02, tmp_path)
    assert passed(result) == SDPA_WRONG
    assert (
        "Likely mistake: your scores are not divided by √d_k."
        in (result["cells"]["sdpa-test"]["message"])
    )
    assert result["flags"] == []


def test_correct_but_noisy_solution_still_passes(tmp_path):
    noisy = _solutions(L02)["sdpa-solution"].replace(
        "    d_k = q.shape[-1]", '    print("x" * 1000)\n    d_k = q.shape[-1]'
    )
    assert noisy != _solutions(L02)["sdpa-solution"]
    path = submission(
        tmp_path,
        L02,
        {"sdpa-solution": noisy},
        after={
            "sdpa-solution": 'for i in range(20000):\n    print("odd but harmless", i)\n'
            'open("scratch.txt", "w").write("notes")'
        },
    )
    result = run_verify(path, L02, tmp_path)
    assert passed(result) == ALL_PASS
    assert result["flags"] == []


def test_lesson06_solution_and_exercise(tmp_path):
    result = run_verify(submission(tmp_path, L06), L06, tmp_path)
    assert passed(result) == {
        "causal-mask-test": True,
        "alpha-22-test": True,
        "padding-mask-test": True,
    }
    assert result["flags"] == []
    result = run_verify(submission(tmp_path, L06, solved=False), L06, tmp_path / "x")
    assert passed(result) == {
        "causal-mask-test": False,
        "alpha-22-test": False,
        "padding-mask-test": False,
    }


# ---------------------------------------------------------------------------------------------
# Hostile notebooks: each fools (or tries to fool) the in-kernel check; none gains on verify.


def test_monkeypatched_allclose(tmp_path):
    path = hostile(tmp_path, "torch.allclose = lambda *args, **kwargs: True")
    kernel = in_kernel(path, L02)
    assert kernel == ALL_PASS  # the in-kernel check is fooled
    result = run_verify(path, L02, tmp_path)
    assert passed(result) == SDPA_WRONG
    n = cell_number(path, "torch.allclose =")
    assert result["flags"] == [
        f"suspicious code in cell {n}: assigns torch.allclose",
    ]
    assert "not divided by √d_k" in result["cells"]["sdpa-test"]["message"]


def test_monkeypatched_assert_close(tmp_path):
    path = hostile(tmp_path, "torch.testing.assert_close = lambda *args, **kwargs: None")
    kernel = in_kernel(path, L02)
    assert kernel == NONE_PASS  # the checks never used assert_close: not fooled
    result = run_verify(path, L02, tmp_path)
    assert passed(result) == SDPA_WRONG
    n = cell_number(path, "assert_close =")
    assert result["flags"] == [f"suspicious code in cell {n}: assigns torch.testing.assert_close"]


def test_redefined_check_function(tmp_path):
    path = hostile(tmp_path, "check.scaled_dot_product_attention = lambda *a, **k: None")
    kernel = in_kernel(path, L02)
    assert kernel == {"sdpa-test": True, "self-attention-test": False}
    result = run_verify(path, L02, tmp_path)
    assert passed(result) == SDPA_WRONG
    n = cell_number(path, "check.scaled_dot_product_attention =")
    assert result["flags"] == [
        f"suspicious code in cell {n}: assigns check.scaled_dot_product_attention "
        "(transformer_lab.check.scaled_dot_product_attention)",
    ]


def test_patched_comparison_internals(tmp_path):
    code = (
        "from transformer_lab.check import compare\n"
        "compare.compare_outputs = lambda *a, **k: None\n"
        "compare.compare_tensor = lambda *a, **k: None\n"
    )
    path = hostile(tmp_path, code)
    kernel = in_kernel(path, L02)
    # The patch fools the kernel's output comparisons: the wrong attention passes there. The
    # SelfAttention check's last_weights step compares the weights itself, so that cell still
    # fails in the kernel (the layer uses the wrong attention).
    assert kernel == {"sdpa-test": True, "self-attention-test": False}
    result = run_verify(path, L02, tmp_path)
    assert passed(result) == SDPA_WRONG
    n = cell_number(path, "compare.compare_outputs =")
    assert result["flags"] == [
        f"suspicious code in cell {n}: assigns compare.compare_outputs "
        "(transformer_lab.check.compare.compare_outputs)",
        f"suspicious code in cell {n}: assigns compare.compare_tensor "
        "(transformer_lab.check.compare.compare_tensor)",
    ]


def test_patched_reference(tmp_path):
    code = (
        "import transformer_lab.attention as A\n"
        "from transformer_lab.check import exercise\n"
        "A.scaled_dot_product_attention = scaled_dot_product_attention\n"
        'exercise.EXERCISES["scaled_dot_product_attention"].reference = '
        "lambda *a, **k: scaled_dot_product_attention(*a, **k)\n"
    )
    path = hostile(tmp_path, code)
    kernel = in_kernel(path, L02)
    assert kernel == {"sdpa-test": True, "self-attention-test": False}
    result = run_verify(path, L02, tmp_path)
    assert passed(result) == SDPA_WRONG
    n = cell_number(path, "A.scaled_dot_product_attention =")
    assert result["flags"] == [
        f"suspicious code in cell {n}: assigns A.scaled_dot_product_attention "
        "(transformer_lab.attention.scaled_dot_product_attention)",
        f"suspicious code in cell {n}: assigns "
        "exercise.EXERCISES['scaled_dot_product_attention'].reference",
    ]


def test_patched_builtins(tmp_path):
    # isinstance(got, torch.Tensor) is the engine's first test; a wrong *type* then slips by.
    code = (
        "import builtins\n"
        "_isinstance = builtins.isinstance\n"
        "builtins.isinstance = lambda obj, cls: True if cls is torch.Tensor else _isinstance(obj, cls)\n"
    )
    path = hostile(tmp_path, code)
    result = run_verify(path, L02, tmp_path)
    # The patch breaks the student's own process (it dies under the first test), so SelfAttention
    # fails too, whatever attention it runs on.
    assert passed(result) == NONE_PASS
    assert result["cells"]["self-attention-test"]["message"].startswith(
        "DeadKernelError: the student's process died before this test"
    )
    n = cell_number(path, "import builtins")
    assert result["flags"] == [
        f"suspicious code in cell {n}: imports builtins",
        f"suspicious code in cell {n}: assigns builtins.isinstance",
    ]


def test_calling_the_fused_builtin_is_refused(tmp_path):
    answer = """
import torch.nn.functional as F

def scaled_dot_product_attention(q, k, v, mask=None):
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return out, torch.softmax(scores, -1).nan_to_num(0.0)
"""
    path = submission(tmp_path, L02, {"sdpa-solution": answer})
    result = run_verify(path, L02, tmp_path)
    assert passed(result) == SDPA_WRONG
    message = result["cells"]["sdpa-test"]["message"]
    assert message.startswith("ImplementThisYourself: implement this yourself")
    assert "F.scaled_dot_product_attention" in message
    assert result["flags"] == [
        "called forbidden F.scaled_dot_product_attention in scaled_dot_product_attention",
    ]


def test_hidden_alias_of_the_fused_builtin_is_refused(tmp_path):
    # Kept in a list, the alias escapes the in-kernel check's namespace rewrite; the re-check's
    # call monitor sees the call wherever the function object came from.
    answer = """
import torch.nn.functional as F
_impl = [F.scaled_dot_product_attention]

def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, -1).nan_to_num(0.0)
    out = _impl[0](q, k, v, attn_mask=mask).nan_to_num(0.0)
    return out, weights
"""
    path = submission(tmp_path, L02, {"sdpa-solution": answer})
    result = run_verify(path, L02, tmp_path)
    assert passed(result) == SDPA_WRONG
    assert "F.scaled_dot_product_attention" in result["cells"]["sdpa-test"]["message"]
    assert result["flags"] == [
        "called forbidden F.scaled_dot_product_attention in scaled_dot_product_attention",
    ]


def test_calling_the_reference_is_refused(tmp_path):
    answer = """
from transformer_lab.attention import scaled_dot_product_attention as _ref

def scaled_dot_product_attention(q, k, v, mask=None):
    return _ref(q, k, v, mask)
"""
    path = submission(tmp_path, L02, {"sdpa-solution": answer})
    kernel = in_kernel(path, L02)
    # SelfAttention calls it too, and the reference is forbidden there as well: in the kernel both
    # are refused; judged, SelfAttention runs on the course's attention (not the student's).
    assert kernel == NONE_PASS
    result = run_verify(path, L02, tmp_path)
    assert passed(result) == SDPA_WRONG
    assert (
        "transformer_lab.attention.scaled_dot_product_attention"
        in (result["cells"]["sdpa-test"]["message"])
    )
    assert result["flags"] == [
        "called forbidden transformer_lab.attention.scaled_dot_product_attention in "
        "scaled_dot_product_attention",
    ]


def test_exec_of_the_reference_source_is_refused_and_flagged(tmp_path):
    answer = """
import transformer_lab.attention as A
_ns = {"__name__": "transformer_lab.copied", "__package__": "transformer_lab"}
exec(compile(open(A.__file__).read(), "mine.py", "exec"), _ns)
scaled_dot_product_attention = _ns["scaled_dot_product_attention"]
"""
    path = submission(tmp_path, L02, {"sdpa-solution": answer})
    kernel = in_kernel(path, L02)
    assert kernel == ALL_PASS  # the copy is a different function object: the kernel is fooled
    result = run_verify(path, L02, tmp_path)
    assert passed(result) == SDPA_WRONG
    n = cell_number(path, "_ns = {")
    assert result["flags"] == [
        f"suspicious code in cell {n}: calls exec",
        f"suspicious code in cell {n}: calls compile",
        f"suspicious code in cell {n}: reads a module's source file: open(A.__file__)",
        f"suspicious code in cell {n}: looks up the course package's files "
        "(transformer_lab.attention.__file__)",
        "ran a copy of transformer_lab.attention.scaled_dot_product_attention in "
        "scaled_dot_product_attention",
    ]


def test_lesson06_redefined_value_check(tmp_path):
    path = submission(
        tmp_path,
        L06,
        {"alpha-22-solution": "alpha_22 = 0.0"},
        after={"alpha-22-solution": "check.alpha_22 = lambda *a, **k: True"},
    )
    kernel = in_kernel(path, L06)
    assert kernel == {"causal-mask-test": True, "alpha-22-test": True, "padding-mask-test": True}
    result = run_verify(path, L06, tmp_path)
    assert passed(result) == {
        "causal-mask-test": True,
        "alpha-22-test": False,
        "padding-mask-test": True,
    }
    assert (
        "Likely mistake: α_22 is the weight of position 2 on itself"
        in (result["cells"]["alpha-22-test"]["message"])
    )
    n = cell_number(path, "check.alpha_22 =")
    assert result["flags"] == [
        f"suspicious code in cell {n}: assigns check.alpha_22 (transformer_lab.check.alpha_22)",
    ]


# ---------------------------------------------------------------------------------------------
# The child's limits and bad input.


LIMIT = 20  # seconds a cell or test: an honest one's checks take a few on a loaded machine


def test_infinite_loop_in_a_cell_is_cut_and_grading_goes_on(tmp_path):
    path = submission(tmp_path, L02, after={"sdpa-solution": "while True:\n    pass"})
    result = V.verify(L02, path, tmp_path / "work", course=ROOT, timeout=240, cell_timeout=LIMIT)
    assert passed(result) == ALL_PASS


def test_endless_loop_in_a_graded_function_gets_a_per_test_limit(tmp_path):
    """The loop is in `scaled_dot_product_attention`: its test runs out of its own time and the
    next test gets a fresh child, long before the overall limit. SelfAttention, which calls it in
    the notebook, is judged on the course's attention: it passes, the loop costs only its own
    exercise."""
    import time

    looping = WRONG_SDPA.replace("    scores =", "    while True:\n        pass\n    scores =", 1)
    path = submission(tmp_path, L02, {"sdpa-solution": looping})
    start = time.monotonic()
    result = V.verify(L02, path, tmp_path / "work", course=ROOT, timeout=300, cell_timeout=LIMIT)
    assert time.monotonic() - start < 200
    assert passed(result) == SDPA_WRONG
    assert "ran past the per-cell time limit" in result["cells"]["sdpa-test"]["message"], result


def test_child_death_fails_every_cell_with_the_reason(tmp_path):
    path = submission(tmp_path, L02, after={"sdpa-solution": "import os\nos._exit(3)"})
    result = run_verify(path, L02, tmp_path)
    assert passed(result) == NONE_PASS
    assert result["cells"]["sdpa-test"]["message"] == (
        "DeadKernelError: the student's process died before this test: "
        "the student's process ended with exit code 3"
    )


def test_unreadable_submission(tmp_path):
    path = tmp_path / "broken.ipynb"
    path.write_text('{"cells": [')
    result = run_verify(path, L02, tmp_path)
    assert passed(result) == NONE_PASS
    assert result["cells"]["sdpa-test"]["message"].startswith("cannot read notebook")


def test_unknown_lesson_is_a_clear_error(tmp_path):
    with pytest.raises(V.VerifyError, match="no released lesson '99'"):
        V.verify("99", tmp_path / "x.ipynb", tmp_path, course=ROOT)


def student_code_cells(nb: dict, test_ids, course_code: str | None = None) -> list[tuple[int, str]]:
    """(index, source) of the submission's code cells that are not graded test cells, nor the
    course's own setup cell left exactly as released (`course_code`); an edited setup cell is the
    student's code like any other."""
    out = []
    for i, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        if nbgrader_meta(cell).get("grade_id") in test_ids or is_test_cell(cell):
            continue
        if course_code is not None and cell_source(cell) == course_code:
            continue
        out.append((i, cell_source(cell)))
    return out


def test_source_flags_are_quiet_on_the_course_solutions():
    """The course's own code raises no flag: the solutions, and the Colab setup cell (which runs
    pip in Colab) as long as it is exactly the released one."""
    for folder in sorted((ROOT / "solutions").iterdir()):
        nb = json.loads((folder / f"{folder.name}.ipynb").read_text())
        setup = V.released_setup_source(ROOT, folder.name)
        assert setup and "-m pip install" in setup, folder.name
        cells = student_code_cells(nb, set(), setup)
        assert len(cells) < sum(c["cell_type"] == "code" for c in nb["cells"]), folder.name
        assert V.source_flags(cells) == [], folder.name


def test_an_edited_setup_cell_is_the_students_code():
    """A student who hides code in the setup cell gets it read like any other cell of theirs."""
    nb = json.loads((ROOT / "solutions" / L02 / f"{L02}.ipynb").read_text())
    setup = V.released_setup_source(ROOT, L02)
    cell = next(c for c in nb["cells"] if c.get("id") == "colab-setup")
    cell["source"] = setup + "\nimport subprocess\nsubprocess.run(['true'])\n"
    flags = V.source_flags(student_code_cells(nb, set(), setup))
    assert any("starts a process (subprocess)" in f for f in flags), flags


def test_check_calls_reads_check_calls():
    src = "check.a(a)\n### x\ncheck.b(b, thorough=True)\ncheck.a(a, thorough=True)"
    assert check_calls(src) == ["a", "b"]
    assert check_calls("check.(") == []


def test_source_flags_name_each_red_flag():
    cells = [
        (0, "import torch\nimport torch.nn.functional as F\nfrom transformer_lab import check"),
        (1, "torch.allclose = lambda *a, **k: True\nF.softmax = None"),
        (2, "setattr(check, 'causal_mask', print)\nvars(torch)['equal'] = print"),
        (3, "import builtins\nbuiltins.print = None\n__builtins__"),
        (4, "import os, sys\nos.write(int(sys.argv[3]), b'x')\nsys.setprofile(None)"),
        (5, "text = open('/work/main/solutions/02/02.ipynb').read()"),
        (6, "%matplotlib inline\nx = 1  # an IPython magic is not a red flag"),
        (
            7,
            "import torch as T\nT.testing.assert_close = print\nfrom torch import testing\n"
            "testing.assert_close = print",
        ),
    ]
    assert V.source_flags(cells) == [
        "suspicious code in cell 2: assigns torch.allclose",
        "suspicious code in cell 2: assigns F.softmax (torch.nn.functional.softmax)",
        "suspicious code in cell 3: assigns vars(torch)['equal']",
        "suspicious code in cell 3: setattr on transformer_lab.check",
        "suspicious code in cell 3: reaches into vars(torch)",
        "suspicious code in cell 4: imports builtins",
        "suspicious code in cell 4: assigns builtins.print",
        "suspicious code in cell 4: uses __builtins__",
        "suspicious code in cell 5: writes a raw file descriptor (os.write)",
        "suspicious code in cell 5: replaces the profiler (sys.setprofile)",
        "suspicious code in cell 6: opens a path outside its working folder: "
        "'/work/main/solutions/02/02.ipynb'",
        "suspicious code in cell 6: names the course's private files: "
        "'/work/main/solutions/02/02.ipynb'",
        "suspicious code in cell 8: assigns T.testing.assert_close (torch.testing.assert_close)",
        "suspicious code in cell 8: assigns testing.assert_close (torch.testing.assert_close)",
    ]


def test_lesson08_solution_passes_every_kind_of_check(tmp_path):
    # Statistical sampling (generator state travels both ways), a KVCache whose gradients reach
    # the chunks of earlier calls, and a reference GPT calling the student's caches.
    lesson = "08_gpt"
    if not (ROOT / "exercises" / lesson).is_dir():
        pytest.skip("lesson 08 is not released")
    result = run_verify(submission(tmp_path, lesson), lesson, tmp_path)
    assert result["flags"] == []
    assert all(passed(result).values()) and len(result["cells"]) >= 5, result
    result = run_verify(submission(tmp_path, lesson, solved=False), lesson, tmp_path / "x")
    assert not any(passed(result).values())


# ---------------------------------------------------------------------------------------------
# End to end: `grade` (nbgrader in the sandbox, then verify) on hostile and honest students.

DEMOS = ("lookup", "variance", "saturate", "widget", "heatmap", "layer-demo", "progress")


def test_grade_run_gives_hostile_students_nothing_and_flags_them(tmp_path):

    from transformer_lab_grader import grade, nbgrader_app, sandbox

    course = nbgrader_app.course_copy(ROOT, tmp_path / "course", [L02])

    forbidden = """
import torch.nn.functional as F

def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), torch.softmax(scores, -1)
"""
    students = {
        "honest": ({}, {}),
        "allclose": (
            {"sdpa-solution": WRONG_SDPA},
            {"sdpa-solution": "torch.allclose = lambda *a, **k: True"},
        ),
        "redefined": (
            {"sdpa-solution": WRONG_SDPA},
            {"sdpa-solution": "check.scaled_dot_product_attention = lambda *a, **k: None"},
        ),
        "forbidden": ({"sdpa-solution": forbidden}, {}),
    }
    submissions = tmp_path / "submissions"
    for student, (answers, after) in students.items():
        path = submission(tmp_path / student, L02, answers, after)
        nb = nbformat.read(path, as_version=4)
        nb.cells = [c for c in nb.cells if c.get("id") not in DEMOS]
        (submissions / student / L02).mkdir(parents=True)
        nbformat.write(nb, submissions / student / L02 / f"{L02}.ipynb")
    records = grade.grade(
        course,
        L02,
        submissions,
        out=tmp_path / "grades.csv",
        jobs=2,
        limits=sandbox.Limits(wall_seconds=500, cell_timeout=60),
        quiet=True,
    )
    by = {r["student"]: r for r in records}
    scores = {s: (r["status"], r["score"]) for s, r in by.items()}
    assert scores == {  # SelfAttention, right itself, keeps its 3 points (Exercise.uses)
        "honest": ("graded", 8.0),
        "allclose": ("graded", 3.0),
        "redefined": ("graded", 3.0),
        "forbidden": ("graded", 3.0),
    }, by
    flags = {s: [f for f in r["flags"] if "without a sandbox" not in f] for s, r in by.items()}
    assert flags["honest"] == []
    assert any("assigns torch.allclose" in f for f in flags["allclose"])
    assert any("assigns check.scaled_dot_product_attention" in f for f in flags["redefined"])
    assert (
        "called forbidden F.scaled_dot_product_attention in scaled_dot_product_attention"
        in (flags["forbidden"])
    )
