"""tests/structure.py on the two packages (no import cycle, no private name used across packages,
the course's package never importing the grader, the grader's imports going down its layers),
and on throwaway packages that have each problem (the checker must report it) or look like one
but are allowed (it must not)."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
import structure

# Cycles the packages have today, each to be removed, not added to.
KNOWN_CYCLES: list[list[str]] = []


PACKAGES = [("shared", "transformer_lab"), ("autograder", "transformer_lab_grader")]


@pytest.mark.parametrize("src, package", PACKAGES)
def test_the_package_has_no_new_cycle_and_no_private_reach(src, package):
    report = structure.check(structure.ROOT / src, package)
    assert report.private == report.backward == [], "\n".join(report.lines())
    new = [cycle for cycle in report.cycles if cycle not in KNOWN_CYCLES]
    assert new == [], "\n".join(report.lines())
    known = [cycle for cycle in KNOWN_CYCLES if cycle[0].split(".")[0] == package]
    gone = [cycle for cycle in known if cycle not in report.cycles]
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
    "the course's package imports the grader, in every way an import is written": (
        {
            "pkg/a.py": "import grader.commands\n",
            "pkg/b.py": "def f():\n    from grader import commands\n",
            "pkg/c.py": "import importlib\nimportlib.import_module('grader.cli')\n",
        },
        [
            "one way: pkg.a imports grader.commands",
            "one way: pkg.b imports grader",
            "one way: pkg.c imports grader.cli",
        ],
    ),
}


def _check(src: Path, package: str = "pkg") -> structure.Report:
    return structure.check(src, package, forbid=("grader",))


@pytest.mark.parametrize("case", list(PROBLEMS))
def test_each_problem_is_reported(tmp_path, case):
    files, expected = PROBLEMS[case]
    report = _check(make_package(tmp_path, files))
    assert report.lines()[:-1] == expected
    assert not report.ok
    argv = [str(tmp_path / "src"), "--package", "pkg", "--forbid", "grader"]
    assert structure.main(argv) == 1


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
    "a package whose name starts like the forbidden one": {
        "pkg/a.py": "import graders\nfrom grader_tools import x\n",
    },
}


@pytest.mark.parametrize("case", list(ALLOWED))
def test_what_is_allowed_is_not_reported(tmp_path, case):
    report = _check(make_package(tmp_path, ALLOWED[case]))
    assert report.ok, report.lines()
    argv = [str(tmp_path / "src"), "--package", "pkg", "--forbid", "grader"]
    assert structure.main(argv) == 0


def test_mutant_course_package_importing_the_grader_is_caught(tmp_path, capsys):
    """The real package, its CLI handing instructor commands to the grader as it once did."""
    shutil.copytree(
        structure.ROOT / "shared" / "transformer_lab",
        tmp_path / "transformer_lab",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    cli = tmp_path / "transformer_lab" / "cli.py"
    cli.write_text(
        cli.read_text() + "\n\ndef grade():\n    from transformer_lab_grader import commands\n"
    )
    assert structure.main([str(tmp_path)]) == 1  # ONE_WAY's rule, by default
    lines = capsys.readouterr().out.splitlines()
    assert lines[:-1] == ["one way: transformer_lab.cli imports transformer_lab_grader"]


def test_the_grader_shares_private_names_across_its_modules_as_one_unit(tmp_path):
    """`ONE_UNIT`: the grader's modules share private helpers (as the subpackage `instructor/` did);
    the same import in another package is a private reach."""
    expected = {"transformer_lab_grader": [], "pkg": ["pkg.b imports pkg.a._x"]}
    for package, private in expected.items():
        files = {f"{package}/a.py": "_x = 1\n", f"{package}/b.py": "from .a import _x\n"}
        report = structure.check(make_package(tmp_path / package, files), package)
        assert report.private == private


def test_a_folder_without_the_package_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no package 'pkg'"):
        structure.check(tmp_path, "pkg")


LAYERS = [("top", {"a"}), ("middle", {"b", "c"}), ("bottom", {"d"})]


def test_imports_against_the_layers_are_reported(tmp_path):
    """Downward and sideways imports pass; an upward one (lazy too) and a module in no layer do not."""
    files = {
        "pkg/a.py": "from pkg import b, d\n",
        "pkg/b.py": "from . import c\n",
        "pkg/c.py": "import pkg.d\n",
        "pkg/d.py": "def f():\n    from pkg import b\n",
        "pkg/e.py": "",
    }
    report = structure.check(make_package(tmp_path, files), "pkg", layers=LAYERS)
    assert report.layers == ["pkg.e is in no layer", "pkg.d (bottom) imports pkg.b (middle)"]
    assert not report.ok


def test_mutant_grader_whose_sandbox_imports_a_command_is_caught(tmp_path, capsys):
    """The real grader, its sandbox reaching up to the commands (lazily; a cycle too), and a new
    module left out of the layers: both must fail the real LAYERS."""
    grader = tmp_path / "transformer_lab_grader"
    shutil.copytree(
        structure.ROOT / "autograder" / "transformer_lab_grader",
        grader,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    sandbox = grader / "sandbox.py"
    sandbox.write_text(sandbox.read_text() + "\n\ndef f():\n    from . import commands\n")
    (grader / "helpers.py").write_text("")
    argv = [str(tmp_path), "--package", "transformer_lab_grader"]
    assert structure.main(argv) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if line.startswith("layer: ")] == [
        "layer: transformer_lab_grader.helpers is in no layer",
        "layer: transformer_lab_grader.sandbox (sandbox and judge) imports "
        "transformer_lab_grader.commands (commands)",
    ]
