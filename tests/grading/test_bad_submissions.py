"""The bad-submission matrix (crash and robustness half): one class, one `grade --jobs 2` run.

Lesson 02 (two graded cells: sdpa-test 5 points, self-attention-test 3) is graded in a
temporary copy of the course for about twenty students at once: two honest ones (the solution
notebook) and one per bad case. Each test asserts one student's exact score, status and reason,
and that the honest students of the same run got full marks. The tamper half (monkeypatching,
forbidden calls) is tests/grading/test_tamper.py.
"""

from __future__ import annotations

import copy
import csv
import json
import re
from pathlib import Path

import nbformat
import pytest

from transformer_lab_grader import grade, nbgrader_app, notebook_format, sandbox
from transformer_lab_grader import records as rec

REPO = Path(__file__).resolve().parents[2]
LESSON = "02_qkv_attention"
NAME = f"{LESSON}.ipynb"
FULL = 8.0
# Two of the students loop, burning a core until this limit: 30 s keeps an honest lesson-02 cell
# (a few seconds, three times that on a loaded 2-core machine) far inside it.
CELL_TIMEOUT = 30

pytestmark = pytest.mark.slow
needs_namespaces = pytest.mark.skipif(
    sandbox.box_unavailable() is not None,
    reason=f"no bubblewrap box here: {sandbox.box_unavailable()}",
)


# The lesson's demonstrations (plots, the BERT heatmap): a bad case drops them (as a student may)
# so that the run stays short; the honest students and the untouched release keep them.
DEMOS = ("lookup", "variance", "saturate", "widget", "heatmap", "layer-demo", "progress")


def _solution(slim: bool = True) -> nbformat.NotebookNode:
    nb = nbformat.read(REPO / "solutions" / LESSON / NAME, as_version=4)
    return _drop(nb, *DEMOS) if slim else nb


def _released(slim: bool = True) -> nbformat.NotebookNode:
    nb = nbformat.read(REPO / "exercises" / LESSON / NAME, as_version=4)
    return _drop(nb, *DEMOS) if slim else nb


def _cell(nb, cell_id):
    return next(c for c in nb.cells if c.get("id") == cell_id)


def _edit(nb, cell_id, old, new):
    cell = _cell(nb, cell_id)
    assert old in cell.source, (cell_id, old)
    cell.source = cell.source.replace(old, new)
    return nb


def _insert_after(nb, cell_id, source):
    index = nb.cells.index(_cell(nb, cell_id)) + 1
    new = nbformat.v4.new_code_cell(source)
    new["id"] = f"student-{index}"
    nb.cells.insert(index, new)
    return nb


def _drop(nb, *cell_ids):
    nb.cells = [c for c in nb.cells if c.get("id") not in cell_ids]
    return nb


FORWARD = "        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)\n"


def _probe_paths(course: Path) -> dict[str, Path]:
    """Places a hostile notebook tries to write to: none but the gradebook exists, and none may
    exist after the run; the gradebook may not contain what the notebook appends."""
    return {
        "gradebook": course / "autograder" / "work" / "gradebook.db",
        "results_new": course / "autograder" / "work" / "results" / LESSON / "zz_probe.json",
        "package_new": REPO / "shared" / "transformer_lab" / "_sandbox_probe.py",
        "grader_new": REPO / "autograder" / "transformer_lab_grader" / "_sandbox_probe.py",
        "course_package_new": course / "student_package" / "_sandbox_probe.py",
        "course_new": course / "exercises" / "_sandbox_probe.txt",
    }


def _writer_source(course: Path) -> str:
    probes = {k: str(v) for k, v in _probe_paths(course).items()}
    return (
        "import pathlib, sqlite3\n"
        f"probes = {probes!r}\n"
        "wrote = []\n"
        "for key, path in probes.items():\n"
        "    try:\n"
        "        pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)\n"
        "        with open(path, 'ab') as f:\n"
        "            f.write(b'tampered')\n"
        "        wrote.append(key)\n"
        "    except OSError as error:\n"
        "        print('refused', key, type(error).__name__)\n"
        "try:\n"
        f"    db = sqlite3.connect({probes['gradebook']!r})\n"
        "    db.execute('update grade set auto_score = 100')\n"
        "    db.commit()\n"
        "except Exception as error:\n"
        "    print('refused sqlite', type(error).__name__)\n"
        "print('WROTE', wrote)\n"
    )


def _reader_source(course: Path) -> str:
    """Look for the solution notebook outside the job's folder and exec its solution cells."""
    return (
        "import glob, json, os, pathlib\n"
        "import transformer_lab\n"
        "candidates = [\n"
        f"    {str(course / 'solutions' / LESSON / NAME)!r},\n"
        f"    {str(REPO / 'solutions' / LESSON / NAME)!r},\n"
        f"    str(pathlib.Path(transformer_lab.__file__).parents[2] / 'solutions' / {LESSON!r} / {NAME!r}),\n"
        f"    str(pathlib.Path(os.environ.get('TRANSFORMER_LAB_COURSE_ROOT', '/')) / 'solutions' / {LESSON!r} / {NAME!r}),\n"
        "]\n"
        "for up in pathlib.Path.cwd().parents:\n"
        f"    candidates.append(str(up / 'solutions' / {LESSON!r} / {NAME!r}))\n"
        f"candidates += glob.glob('/tmp/*/*/solutions/{LESSON}/{NAME}')\n"
        f"candidates += glob.glob('/tmp/*/*/*/solutions/{LESSON}/{NAME}')\n"
        "found = 0\n"
        "for path in candidates:\n"
        "    try:\n"
        "        cells = json.load(open(path))['cells']\n"
        "    except Exception:\n"
        "        continue\n"
        "    for cell in cells:\n"
        "        source = ''.join(cell['source'])\n"
        "        if 'BEGIN SOLUTION' in source:\n"
        "            exec(source, globals())\n"
        "            found += 1\n"
        "print('FOUND', found)\n"
    )


def _cases(course: Path) -> dict[str, bytes | dict[str, bytes]]:
    """{student: notebook bytes, or {file name: bytes}} for every case."""

    def nb_bytes(nb) -> bytes:
        return nbformat.writes(nb).encode()

    solution = _solution(slim=False)
    cases: dict = {"honest_a": nb_bytes(solution), "honest_b": nb_bytes(solution)}
    cases["untouched"] = nb_bytes(_released(slim=False))
    looped = _insert_after(_solution(), "setup", "while True:\n    pass")
    cases["infinite_loop"] = nb_bytes(looped)
    cases["loop_in_graded_function"] = nb_bytes(
        _edit(
            _solution(),
            "self-attention-solution",
            FORWARD,
            "        while True:\n            pass\n" + FORWARD,
        )
    )
    raised = _edit(
        _solution(),
        "self-attention-solution",
        FORWARD,
        '        raise ValueError("student bug in forward")\n' + FORWARD,
    )
    cases["exception"] = nb_bytes(raised)
    broken = _edit(
        _solution(),
        "self-attention-solution",
        "def forward(self, x, mask=None):",
        "def forward(self, x, mask=None)",
    )
    cases["syntax_error"] = nb_bytes(broken)
    hungry = _edit(
        _solution(),
        "self-attention-solution",
        FORWARD,
        "        hog = bytearray(64 * 2**30)\n" + FORWARD,
    )
    cases["memory_blowup"] = nb_bytes(hungry)
    cases["kernel_exit"] = nb_bytes(
        _insert_after(_solution(), "sdpa-test", "import os\nos._exit(3)")
    )
    cases["kernel_segfault"] = nb_bytes(
        _insert_after(_solution(), "sdpa-test", "import ctypes\nctypes.string_at(0)")
    )
    cases["enormous_output"] = nb_bytes(
        _insert_after(_solution(), "setup", "for i in range(100_000):\n    print('spam ' * 40)")
    )
    cases["deleted_test_cell"] = nb_bytes(_drop(_solution(), "sdpa-test"))
    edited = _released()
    for cell_id in ("sdpa-test", "self-attention-test"):
        _cell(edited, cell_id).source = "print('all checks passed')"
    cases["edited_test_cell"] = nb_bytes(edited)
    stripped = _solution()
    for cell in stripped.cells:
        cell.metadata.pop("nbgrader", None)
    cases["stripped_metadata"] = nb_bytes(stripped)
    cases["invalid_json"] = b'{"cells": [}, "metadata": nope'
    whole = nb_bytes(_solution())
    cases["truncated_json"] = whole[: len(whole) // 2]
    cases["empty_file"] = b""
    cases["wrong_name"] = {"my_attempt.ipynb": whole}
    cases["two_wrong_names"] = {"try1.ipynb": whole, "try2.ipynb": whole}
    cases["extra_files"] = {NAME: whole, "notes.txt": b"scratch", "data/big.csv": b"1,2,3\n" * 1000}
    old = json.loads(whole)
    old["nbformat_minor"] = 0
    for cell in old["cells"]:
        cell.pop("id", None)
    cases["nbformat_40"] = json.dumps(old).encode()
    cases["writes_outside"] = nb_bytes(_insert_after(_solution(), "setup", _writer_source(course)))
    reader = _released()
    cases["reads_solutions"] = nb_bytes(_insert_after(reader, "setup", _reader_source(course)))
    return cases


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    # the course gradebook knows the lesson
    return nbgrader_app.course_copy(REPO, tmp_path_factory.mktemp("c") / "course", [LESSON])


@pytest.fixture(scope="module")
def run(course, tmp_path_factory):
    submissions = tmp_path_factory.mktemp("submissions")
    for student, content in _cases(course).items():
        folder = submissions / student / LESSON
        folder.mkdir(parents=True)
        files = content if isinstance(content, dict) else {NAME: content}
        for name, data in files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)
    probes = _probe_paths(course)
    out = tmp_path_factory.mktemp("out") / "grades.csv"
    limits = sandbox.Limits(wall_seconds=500, cell_timeout=CELL_TIMEOUT)
    try:
        records = grade.grade(
            course, LESSON, submissions, out=out, jobs=2, limits=limits, quiet=True
        )
        created = sorted(k for k, p in probes.items() if k != "gradebook" and p.exists())
        gradebook = probes["gradebook"].read_bytes()
    finally:
        probes["package_new"].unlink(missing_ok=True)  # never leave a probe in the repository
    return {
        "records": {r["student"]: r for r in records},
        "csv": out,
        "submissions": submissions,
        "created": created,
        "gradebook": gradebook,
        "limits": limits,
    }


def _check(run, student, score, status="graded", reason=None, no_reason=False):
    records = run["records"]
    for honest in ("honest_a", "honest_b"):
        assert records[honest]["status"] == "graded", records[honest]
        assert records[honest]["score"] == FULL, records[honest]
    record = records[student]
    assert (record["status"], record["score"], record["max_score"]) == (status, score, FULL), record
    if reason is not None:
        assert reason in (record["reason"] or ""), record["reason"]
    if no_reason:
        assert record["reason"] is None, record["reason"]
    return record


def test_honest_students_full_marks_and_clean_record(run):
    for student in ("honest_a", "honest_b"):
        record = _check(run, student, FULL, no_reason=True)
        assert all(c["passed"] for c in record["cells"].values())
        assert set(record["cells"]) == {"sdpa-test", "self-attention-test"}
        assert not [f for f in record["flags"] if "unavailable" in f or "without a sandbox" in f]


def test_untouched_release_scores_zero_and_is_graded(run):
    record = _check(run, "untouched", 0.0, no_reason=True)
    assert "NotImplementedError" in record["cells"]["sdpa-test"]["output"]


def test_infinite_loop_is_stopped_by_the_cell_timeout(run):
    """A scratch cell that never ends is interrupted; the graded cells after it still run."""
    record = _check(run, "infinite_loop", FULL, reason="hit the per-cell timeout")
    assert re.fullmatch(
        rf"cell \d+ \(id student-\d+\) hit the per-cell timeout of {CELL_TIMEOUT} s",
        record["reason"],
    )


def test_endless_loop_in_a_graded_function_costs_only_its_exercise(run):
    """nbgrader's cell timeout stops the test cell; the clean re-check gives that one test its own
    time limit and a fresh child for the rest, so the other exercise keeps its points."""
    record = _check(run, "loop_in_graded_function", 5.0)
    assert record["cells"]["sdpa-test"]["passed"]
    assert not record["cells"]["self-attention-test"]["passed"]
    assert not [f for f in record["flags"] if "withheld" in f or "tampering" in f], record["flags"]


def test_exception_costs_only_its_cell(run):
    record = _check(run, "exception", 5.0)
    assert "student bug in forward" in record["cells"]["self-attention-test"]["output"]


def test_syntax_error_costs_only_its_cell(run):
    record = _check(run, "syntax_error", 5.0)
    assert "NameError" in record["cells"]["self-attention-test"]["output"]


def test_memory_blowup_hits_the_cap(run):
    _check(run, "memory_blowup", 5.0, reason="self-attention-test ran out of memory")


@pytest.mark.parametrize("student", ["kernel_exit", "kernel_segfault"])
def test_kernel_death_is_ungradable_with_the_reason(run, student):
    _check(run, student, 0.0, status="ungradable", reason="the kernel died")


def test_enormous_output_is_graded_and_truncated(run):
    record = _check(run, "enormous_output", FULL)
    assert all(len(c["output"]) <= rec.OUTPUT_CHARS for c in record["cells"].values())
    path = run["records"]  # the record file itself stays small
    assert path


def test_deleted_test_cell_is_restored(run):
    _check(run, "deleted_test_cell", FULL, reason="test cell sdpa-test was missing")


def test_edited_locked_test_cell_gains_nothing_and_is_flagged(run):
    record = _check(run, "edited_test_cell", 0.0)
    assert "locked test cell sdpa-test was edited (graded with the released one)" in record["flags"]
    assert (
        "locked test cell self-attention-test was edited (graded with the released one)"
        in record["flags"]
    )


def test_stripped_metadata_is_repaired(run):
    _check(run, "stripped_metadata", FULL, reason="repaired: 4 cells' nbgrader metadata restored")


def test_invalid_json_is_ungradable(run):
    _check(run, "invalid_json", 0.0, status="ungradable", reason=f"{NAME} is not valid JSON:")


def test_truncated_json_is_ungradable(run):
    _check(
        run,
        "truncated_json",
        0.0,
        status="ungradable",
        reason="is not valid JSON (the file is truncated)",
    )


def test_empty_file_is_ungradable(run):
    _check(run, "empty_file", 0.0, status="ungradable", reason=f"{NAME} is an empty file")


def test_single_misnamed_notebook_is_renamed(run):
    _check(run, "wrong_name", FULL, reason=f"renamed my_attempt.ipynb to {NAME}")


def test_several_misnamed_notebooks_are_ungradable(run):
    _check(
        run,
        "two_wrong_names",
        0.0,
        status="ungradable",
        reason="found several other notebooks (try1.ipynb, try2.ipynb)",
    )


def test_extra_files_are_ignored_with_a_note(run):
    _check(run, "extra_files", FULL, reason="ignored extra files: data/big.csv, notes.txt")


def test_old_nbformat_without_ids_is_upgraded(run):
    _check(run, "nbformat_40", FULL, reason="upgraded from nbformat 4.0")


@needs_namespaces
def test_writing_into_gradebook_or_package_changes_nothing(run, course):
    _check(run, "writes_outside", FULL)
    assert run["created"] == []
    assert b"tampered" not in run["gradebook"]
    # the course gradebook holds exactly the scores of the records (nothing the student wrote)
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'autograder' / 'work' / 'gradebook.db'}") as gb:
        scores = {s.student.id: s.score for s in gb.find_assignment(LESSON).submissions}
    assert scores == {s: r["score"] for s, r in run["records"].items()}


@needs_namespaces
def test_reading_outside_its_folder_finds_no_solution(run):
    record = _check(run, "reads_solutions", 0.0, no_reason=True)
    assert "NotImplementedError" in record["cells"]["sdpa-test"]["output"]


def test_every_student_is_in_the_csv_once(run):
    with open(run["csv"], newline="") as f:
        rows = list(csv.DictReader(f))
    students = [row["student"] for row in rows]
    assert sorted(students) == sorted(run["records"]) and len(set(students)) == len(students)
    row = next(r for r in rows if r["student"] == "exception")
    assert (row["score"], row["max_score"], row["status"]) == ("5", "8", "graded")
    assert (row[f"{LESSON}/sdpa-test"], row[f"{LESSON}/self-attention-test"]) == ("5", "0")
    assert next(r for r in rows if r["student"] == "empty_file")["reason"].endswith(
        "is an empty file"
    )


def test_rerun_is_idempotent(run, course):
    before = run["csv"].read_bytes()
    records_before = rec.load_records(course, LESSON)
    again = grade.grade(
        course, LESSON, run["submissions"], out=run["csv"], jobs=2, limits=run["limits"], quiet=True
    )
    assert run["csv"].read_bytes() == before
    assert again == records_before  # nothing regraded: same records, same timestamps


def test_records_are_valid_against_the_release(run, course):
    cells = notebook_format.graded_cells(notebook_format.released_notebooks(course, LESSON))
    for student, record in run["records"].items():
        assert (
            rec.validate_record(copy.deepcopy(record), student, LESSON, cells)["score"]
            == record["score"]
        )
