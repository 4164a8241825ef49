"""What a run pays before its first job (benchmarks/history/journal.md §29): the base gradebook's
`generate_assignment` stamps the gradebook with nbgrader's migration head read in-process
(`nbgrader_app.alembic_head`), not by nbgrader's `alembic heads` subprocess; loading the course's
nbgrader configuration (every nbgrader command does) does not import the course package (torch,
matplotlib). Each check is shown to catch its mutant.
"""

from __future__ import annotations

import os
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
