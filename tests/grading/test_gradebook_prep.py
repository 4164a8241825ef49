"""What a run pays before its first job (benchmarks/history/journal.md §29): the base gradebook's
`generate_assignment` stamps the gradebook with nbgrader's migration head read in-process
(`nbgrader_app.alembic_head`), not by nbgrader's `alembic heads` subprocess; loading the course's
nbgrader configuration (every nbgrader command does) does not import the course package (torch,
matplotlib); generating several lessons is one nbgrader process (`nbgrader_app.generate`), which
still stops, saying why, on a broken source notebook. Each check is shown to catch its mutant.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from transformer_lab_grader import nbgrader_app
from transformer_lab_grader.course import PACKAGE_REPO

AUTOGRADER = PACKAGE_REPO / "autograder"


@pytest.fixture(scope="module")
def nbgraders_own_head() -> str:
    """What nbgrader itself stamps a new gradebook with (its `alembic heads` subprocess)."""
    from nbgrader.api import get_alembic_version

    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    old = os.environ.get("PATH")
    os.environ["PATH"] = path
    try:
        return get_alembic_version()
    finally:
        os.environ["PATH"] = old or ""


def test_the_gradebooks_migration_head_is_nbgraders_own(nbgraders_own_head):
    assert nbgrader_app.alembic_head() == nbgraders_own_head


def test_a_wrong_head_is_caught(nbgraders_own_head):
    assert nbgrader_app.migrations().get_base() != nbgraders_own_head  # the first migration


def _imports_the_course_package(module: str, folder: Path) -> bool:
    """Whether importing `module` from `folder` (a fresh interpreter) imports `transformer_lab`."""
    code = (
        f"import sys; sys.path.insert(0, {str(folder)!r}); import {module}; "
        "print('transformer_lab' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ
    )
    return out.stdout.strip() == "True"


def test_the_feedback_filter_imports_the_course_package_only_when_it_runs():
    assert not _imports_the_course_package("feedback_filter", AUTOGRADER)


def test_a_filter_importing_the_course_package_at_import_is_caught(tmp_path):
    """The mutant imports at import what the filter uses (a stub of the course package here,
    found first on the path: the check must not pay for torch either)."""
    stub = tmp_path / "transformer_lab" / "check"
    stub.mkdir(parents=True)
    (tmp_path / "transformer_lab" / "__init__.py").write_text("")
    (stub / "__init__.py").write_text("")
    (stub / "feedback.py").write_text("def is_rendered(t): ...\ndef strip_ansi(t): ...\n")
    source = (AUTOGRADER / "feedback_filter.py").read_text()
    eager = "from transformer_lab.check.feedback import is_rendered, strip_ansi\n" + source
    (tmp_path / "eager_filter.py").write_text(eager)
    assert _imports_the_course_package("eager_filter", tmp_path)


LESSONS = ["01_rnn_limits", "02_qkv_attention"]


def _course(tmp_path: Path) -> Path:
    for lesson in LESSONS:
        shutil.copytree(PACKAGE_REPO / "solutions" / lesson, tmp_path / "solutions" / lesson)
    (tmp_path / "autograder").mkdir()
    for path in AUTOGRADER.glob("*.py"):
        shutil.copy(path, tmp_path / "autograder" / path.name)
    return tmp_path


def test_several_lessons_generate_in_one_process_as_released(tmp_path, monkeypatch):
    """Both lessons come out byte for byte as released, from one nbgrader process; the mutant is
    the per-lesson loop of nbgrader commands (one process, and one import of nbgrader, each)."""
    calls = []
    real = nbgrader_app._run
    monkeypatch.setattr(nbgrader_app, "_run", lambda *a: calls.append(a[1]) or real(*a))
    course = _course(tmp_path)
    written = nbgrader_app.generate(course, LESSONS, quiet=True)
    assert len(calls) == 1 and calls[0][:1] == ["-c"]
    for path in written:
        lesson = path.parent.name
        assert path.read_bytes() == (PACKAGE_REPO / "exercises" / lesson / path.name).read_bytes()
    assert sorted(nbgrader_app.gradebook_assignments(course)) == LESSONS


def test_a_broken_source_notebook_stops_generation_with_nbgraders_reason(tmp_path):
    """Two cells with one grade id: nbgrader refuses, and the error carries its words (a
    generation that swallowed nbgrader's exit would return as if all were well)."""
    course = _course(tmp_path)
    path = course / "solutions" / LESSONS[1] / f"{LESSONS[1]}.ipynb"
    nb = json.loads(path.read_text())
    graded = [c for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id")]
    graded[1]["metadata"]["nbgrader"]["grade_id"] = graded[0]["metadata"]["nbgrader"]["grade_id"]
    path.write_text(json.dumps(nb))
    with pytest.raises(RuntimeError, match="(?i)grade.?id|duplicate"):
        nbgrader_app.generate(course, LESSONS, quiet=True)
