"""tests/structure.py on the package (no import cycle, no private name used across packages), and
on throwaway packages that have each problem (the checker must report it) or look like one but
are allowed (it must not)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import structure

# Cycles the package has today, each to be removed, not added to: `instructor.grade` imports
# `cluster` lazily to hand a --scheduler run to it, and `cluster` builds on `grade.Grader`.
KNOWN_CYCLES = [["transformer_lab.instructor.cluster", "transformer_lab.instructor.grade"]]


def test_the_package_has_no_new_cycle_and_no_private_reach():
    report = structure.check(structure.ROOT / "shared", "transformer_lab")
    assert report.private == [], "\n".join(report.lines())
    new = [cycle for cycle in report.cycles if cycle not in KNOWN_CYCLES]
    assert new == [], "\n".join(report.lines())
    gone = [cycle for cycle in KNOWN_CYCLES if cycle not in report.cycles]
    assert gone == [], f"cycles gone (good): remove them from KNOWN_CYCLES: {gone}"


def make_package(tmp_path: Path, files: dict[str, str]) -> Path:
    """A package `pkg` under tmp_path/src from {relative path: source}; every folder a package."""
    src = tmp_path / "src"
    for rel, text in {"pkg/__init__.py": "", **files}.items():
        path = src / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        for folder in path.relative_to(src).parents:
            if folder != Path("."):
                (src / folder / "__init__.py").touch()
        path.write_text(textwrap.dedent(text))
    return src


PROBLEMS = {
    "two modules import each other": (
        {"pkg/a.py": "from pkg import b\n", "pkg/b.py": "from . import a\n"},
        ["cycle: pkg.a -> pkg.b"],
    ),
    "a loop of three, one import lazy": (
        {
            "pkg/a.py": "import pkg.b\n",
            "pkg/b.py": "from pkg.c import run\n",
            "pkg/c.py": "def run():\n    from .a import x\n",
        },
        ["cycle: pkg.a -> pkg.b -> pkg.c"],
    ),
    "a private name imported from another subpackage": (
        {
            "pkg/one/helpers.py": "def _helper(): pass\n",
            "pkg/two/user.py": "from ..one.helpers import _helper\n",
        },
        ["private: pkg.two.user imports pkg.one.helpers._helper"],
    ),
    "a private name reached through a module's name": (
        {
            "pkg/one/helpers.py": "_TABLE = {}\n",
            "pkg/two/user.py": (
                "from pkg.one import helpers as h\n\ndef f():\n    return h._TABLE\n"
            ),
        },
        ["private: pkg.two.user uses pkg.one.helpers._TABLE"],
    ),
    "top-level modules are units of their own": (
        {"pkg/a.py": "_x = 1\n", "pkg/b.py": "from pkg.a import _x\n"},
        ["private: pkg.b imports pkg.a._x"],
    ),
}


@pytest.mark.parametrize("case", list(PROBLEMS))
def test_each_problem_is_reported(tmp_path, case):
    files, expected = PROBLEMS[case]
    report = structure.check(make_package(tmp_path, files), "pkg")
    assert report.lines()[:-1] == expected
    assert not report.ok
    assert structure.main([str(tmp_path / "src"), "--package", "pkg"]) == 1


ALLOWED = {
    "modules of one subpackage share private helpers": {
        "pkg/one/helpers.py": "def _helper(): pass\n",
        "pkg/one/user.py": "from .helpers import _helper\nfrom . import helpers\nhelpers._helper()\n",
    },
    "a package re-exports a submodule that reads a setting of the package": {
        "pkg/one/__init__.py": "SETTING = 1\nfrom .user import run\n",
        "pkg/one/user.py": "from pkg.one import SETTING\nrun = SETTING\n",
    },
    "dunder names and imports only for type checkers": {
        "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n",
        "pkg/b.py": "import pkg.a as a\nprint(a.__name__)\n",
    },
}


@pytest.mark.parametrize("case", list(ALLOWED))
def test_what_is_allowed_is_not_reported(tmp_path, case):
    report = structure.check(make_package(tmp_path, ALLOWED[case]), "pkg")
    assert report.ok, report.lines()
    assert structure.main([str(tmp_path / "src"), "--package", "pkg"]) == 0


def test_a_folder_without_the_package_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no package 'pkg'"):
        structure.check(tmp_path, "pkg")
