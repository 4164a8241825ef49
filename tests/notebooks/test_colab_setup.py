"""transformer_lab.colab: what the Colab setup cell does after pip installed the course (fast).

Nothing here installs anything: pip and Google Drive are stand-ins. The simulated Colab in
test_colab.py runs the same code with the real pip in a Colab-like venv."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from transformer_lab import colab

# the course's requirements, as metadata.requires gives them, and what a runtime has
REQUIRES = [
    "torch>=2.1",
    "numpy>=1.24",
    "ipywidgets>=7.6",
    "scikit-learn>=1.2",
    "termcolor>=1",
    'jupyterlab<5,>=4; extra == "lab"',
    'tomli>=2; python_version < "3.0"',
]
RUNTIME = {"torch": "2.13.0", "numpy": "1.23.5", "ipywidgets": "7.7.1", "scikit-learn": "1.6.1"}


def _version_of(installed: dict) -> callable:
    return lambda name: installed.get(name)


def requirement_problems(missing_requirements) -> list[str]:
    """What `missing_requirements` gets wrong about RUNTIME: it must ask for numpy (too old) and
    termcolor (absent) and nothing else (not the extras, not what is there), and refuse to touch
    a torch that does not fit."""
    problems = []
    try:
        got = [str(r) for r in missing_requirements(REQUIRES, _version_of(RUNTIME))]
    except Exception as err:  # noqa: BLE001 - a mutant may fail in any way
        return [f"raised {err!r} on a runtime that only lacks numpy and termcolor"]
    if got != ["numpy>=1.24", "termcolor>=1"]:
        problems.append(f"asks for {got}, not numpy>=1.24 and termcolor>=1")
    old_torch = dict(RUNTIME, torch="2.0.1")
    try:
        asked = missing_requirements(REQUIRES, _version_of(old_torch))
    except RuntimeError as err:
        if str(err) != "the course needs torch>=2.1, this runtime has torch 2.0.1":
            problems.append(f"torch refused with {err}")
    else:
        problems.append(f"with torch 2.0.1 it asks for {[str(r) for r in asked]} (a new torch)")
    return problems


def test_missing_requirements_are_what_the_runtime_lacks_and_never_torch():
    assert requirement_problems(colab.missing_requirements) == []


def _ignores_markers(requirements, version_of):
    return [
        Requirement(line) for line in requirements if version_of(Requirement(line).name) is None
    ]


def _ignores_versions(requirements, version_of):
    found = []
    for line in requirements:
        req = Requirement(line)
        if not (req.marker and not req.marker.evaluate({"extra": ""})):
            if version_of(req.name) is None:
                found.append(req)
    return found


def _replaces_torch(requirements, version_of):
    return colab.missing_requirements(
        [line for line in requirements if not line.startswith("torch")], version_of
    ) + [Requirement(line) for line in requirements if line.startswith("torch")]


@pytest.mark.parametrize("mutant", [_ignores_markers, _ignores_versions, _replaces_torch])
def test_mutant_requirement_checks_are_caught(mutant):
    assert requirement_problems(mutant)


class _Dist:
    def __init__(self, name, version):
        self.metadata = {"Name": name}
        self.version = version


DISTRIBUTIONS = [
    _Dist("torch", "2.13.0"),
    _Dist("Scikit_Learn", "1.6.1"),
    _Dist("numpy", "1.23.5"),
    _Dist("numpy", "2.0.0"),  # a second install, later on sys.path: not the one imported
    _Dist("TermColor", "0.1"),
    _Dist("odd-one", "not a version"),
]


def pin_problems(pins) -> list[str]:
    """Every installed package pinned at the version imported, but those being added (whatever
    their spelling) and those pip could not read."""
    got = pins(DISTRIBUTIONS, ["termcolor", "torch"])
    expected = ["scikit-learn==1.6.1", "numpy==1.23.5"]
    return [] if got == expected else [f"pins {got}, not {expected}"]


def test_pins_keep_every_installed_package_but_those_added():
    assert pin_problems(colab.pins) == []
    assert colab.pins(DISTRIBUTIONS, []) == [
        "torch==2.13.0",
        "scikit-learn==1.6.1",
        "numpy==1.23.5",
        "termcolor==0.1",
    ]
    assert colab.pins(DISTRIBUTIONS, ["Scikit.Learn", "NUMPY"]) == [
        "torch==2.13.0",
        "termcolor==0.1",
    ]


def _pins_without_canonical_names(distributions, adding):
    leave_out = set(adding)
    found = {}
    for dist in distributions:
        name = dist.metadata["Name"]
        if name not in leave_out and dist.version[0].isdigit():
            found.setdefault(name, f"{name}=={dist.version}")
    return list(found.values())


def _pins_the_last_install(distributions, adding):
    return colab.pins(list(reversed(distributions)), adding)[::-1]


@pytest.mark.parametrize("mutant", [_pins_without_canonical_names, _pins_the_last_install])
def test_mutant_pins_are_caught(mutant):
    assert pin_problems(mutant)


# ------------------------------------------------------------------------------------------------
# setup(), with stand-ins for pip and Google Drive


@pytest.fixture
def runtime(monkeypatch, tmp_path):
    """RUNTIME's packages, a pip that records what it was asked (and the constraints it got), and
    a google.colab whose drive.mount makes the folder."""
    calls = {"pip": [], "constraints": [], "mounts": []}
    installed = dict(RUNTIME, numpy="1.26.4")  # lacks only termcolor

    def pip_install(*args):
        calls["pip"].append(args)
        if "-c" in args:
            path = Path(args[args.index("-c") + 1])
            calls["constraints"].append(path.read_text(encoding="utf-8").split())

    def mount(mountpoint):
        calls["mounts"].append(mountpoint)
        os.makedirs(os.path.join(mountpoint, "MyDrive"), exist_ok=True)

    google = types.ModuleType("google")
    google_colab = types.ModuleType("google.colab")
    google_colab.drive = types.SimpleNamespace(mount=mount)
    google.colab = google_colab
    monkeypatch.setitem(sys.modules, "google", google)
    monkeypatch.setitem(sys.modules, "google.colab", google_colab)
    monkeypatch.setattr(colab.metadata, "requires", lambda name: REQUIRES)
    monkeypatch.setattr(colab.metadata, "distributions", lambda: DISTRIBUTIONS)
    monkeypatch.setattr(colab, "installed_version", _version_of(installed))
    monkeypatch.setattr(colab, "pip_install", pip_install)
    monkeypatch.setenv("TRANSFORMER_LAB_DRIVE", str(tmp_path / "drive"))
    monkeypatch.delenv("TRANSFORMER_LAB_STUDENT_DIR", raising=False)
    return calls


def test_setup_adds_what_is_missing_pinned_keeps_the_code_on_drive_and_says_so(
    runtime, tmp_path, capsys
):
    colab.setup("course.whl")
    assert runtime["pip"] == [("-c", runtime["pip"][0][1], "termcolor>=1")]
    assert runtime["constraints"] == [["torch==2.13.0", "scikit-learn==1.6.1", "numpy==1.23.5"]]
    assert not Path(runtime["pip"][0][1]).exists()  # the constraints file is gone
    folder = tmp_path / "drive" / "MyDrive" / "transformer_lab"
    assert runtime["mounts"] == [str(tmp_path / "drive")]
    assert os.environ["TRANSFORMER_LAB_STUDENT_DIR"] == str(folder)
    assert capsys.readouterr().out.splitlines() == [
        "Colab setup: installed course.whl and termcolor>=1; torch 2.13.0 kept; your passing code"
        f" is kept on Google Drive in {folder}; no restart needed"
    ]


def test_setup_without_drive_mounts_nothing(runtime, monkeypatch, capsys):
    monkeypatch.setattr(colab.metadata, "requires", lambda name: REQUIRES[:4])  # nothing missing
    colab.setup("course.whl", use_drive=False)
    assert runtime["pip"] == [] and runtime["mounts"] == []
    assert "TRANSFORMER_LAB_STUDENT_DIR" not in os.environ
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("Colab setup: installed course.whl; torch 2.13.0 kept; Drive off")


def test_setup_stops_before_pip_when_torch_does_not_fit(runtime, monkeypatch):
    monkeypatch.setattr(colab, "installed_version", _version_of(dict(RUNTIME, torch="2.0.1")))
    with pytest.raises(RuntimeError, match="needs torch>=2.1, this runtime has torch 2.0.1"):
        colab.setup("course.whl")
    assert runtime["pip"] == [] and runtime["mounts"] == []


def test_drive_outside_colab_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "google.colab", None)  # not importable
    with pytest.raises(RuntimeError, match=r"use_drive needs Google Colab.*use_drive=False"):
        colab.keep_on_drive()


def test_a_failing_pip_says_why():
    with pytest.raises(RuntimeError, match=r"(?s)pip install --no-such-option failed:.*no such"):
        colab.pip_install("--no-such-option")  # pip stops at its options: nothing is fetched


def test_what_pip_adds_to_a_new_site_folder_is_importable_at_once(monkeypatch, tmp_path):
    site_folder = tmp_path / "site-packages"
    monkeypatch.setattr(colab.site, "getsitepackages", lambda: [str(site_folder)])
    monkeypatch.setattr(colab.site, "getusersitepackages", lambda: str(tmp_path / "none"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    site_folder.mkdir()
    (site_folder / "freshly_installed_xyz.py").write_text("ANSWER = 42\n", encoding="utf-8")
    colab.refresh_imports()
    monkeypatch.delitem(sys.modules, "freshly_installed_xyz", raising=False)
    import freshly_installed_xyz

    assert freshly_installed_xyz.ANSWER == 42
    assert str(site_folder) in sys.path
