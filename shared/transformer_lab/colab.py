"""Colab: what the setup cell does once pip has put the course in place.

Every notebook's first code cell (written by `transformer_lab.notebook_setup`) does, in Colab only,

    !{sys.executable} -m pip install -q --no-deps --force-reinstall "$COURSE"  # the course alone
    transformer_lab.colab.setup(COURSE, use_drive=USE_DRIVE)                  # the rest: here

and `setup`

- adds the course's requirements that the runtime lacks, with every package it already has pinned
  at its installed version: torch, Colab's ipywidgets 7.7.1 and the rest stay as they are, and a
  torch the course cannot use is an error, never a reinstall;
- with `use_drive`, mounts Google Drive and keeps the student's own package there
  (``$TRANSFORMER_LAB_STUDENT_DIR``), where later notebooks, on fresh runtimes, find it;
- prints one line saying what it did.

Nothing needs a restart: pip only adds files, and the import caches are refreshed. The cell calls
this only when ``google.colab`` is loaded, so outside Colab nothing here runs (and nothing is
downloaded). ``$TRANSFORMER_LAB_DRIVE`` moves the Drive's mount point (tests).

``import transformer_lab.colab`` runs before `setup` and loads only the package's light part
(`registry`, `student`, this module; the models load lazily, after `setup`), so what those import
at the top must be what Colab has; the simulated Colab of ``tests/notebooks/test_colab.py`` has
only Colab's packages and fails otherwise.
"""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
import os
import site
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

DISTRIBUTION = "transformer-lab"
KEPT = "torch"  # never installed, upgraded or downgraded here
DRIVE = "/content/drive"  # where Colab mounts Google Drive
DRIVE_FOLDER = "transformer_lab"  # the student's folder in MyDrive


def installed_version(name: str) -> str | None:
    """The installed version of distribution `name`, or None."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def missing_requirements(
    requirements: Iterable[str], version_of: Callable[[str], str | None] | None = None
) -> list[Requirement]:
    """Of `requirements` (PEP 508 lines, as in the course's metadata), those this runtime lacks:
    not installed, or at a version the specifier excludes. Requirements behind a marker that does
    not hold here (the extras, another Python) are not needed. A torch that does not fit is an
    error: the course never replaces the runtime's torch. `version_of(name)`: the installed
    version or None (default: `installed_version`)."""
    version_of = version_of or installed_version
    missing = []
    for line in requirements:
        req = Requirement(line)
        if req.marker and not req.marker.evaluate({"extra": ""}):
            continue
        have = version_of(req.name)
        if have is not None and req.specifier.contains(have, prereleases=True):
            continue
        if canonicalize_name(req.name) == KEPT:
            raise RuntimeError(f"the course needs {req}, this runtime has {KEPT} {have}")
        missing.append(req)
    return missing


def pins(distributions: Iterable[metadata.Distribution], adding: Iterable[str]) -> list[str]:
    """``name==version`` for every installed distribution but those in `adding`, for pip's
    constraints: pip may then add packages but change none it has. The first of two installs of
    one name is the one imported, and is kept; a version pip cannot parse cannot be pinned."""
    leave_out = {canonicalize_name(name) for name in adding}
    found: dict[str, str] = {}
    for dist in distributions:
        name = canonicalize_name(dist.metadata["Name"] or "")
        try:
            Version(dist.version)
        except (InvalidVersion, TypeError):
            continue
        if name and name not in leave_out:
            found.setdefault(name, f"{name}=={dist.version}")
    return list(found.values())


def pip_install(*args: str) -> None:
    """``pip install -q ARGS`` into this interpreter; pip's own message when it fails."""
    command = [sys.executable, "-m", "pip", "install", "-q", *args]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"pip install {' '.join(args)} failed:\n{result.stderr}")


def refresh_imports() -> None:
    """Make what pip just installed importable in this process, without a restart."""
    importlib.invalidate_caches()
    for folder in [*site.getsitepackages(), site.getusersitepackages()]:
        if os.path.isdir(folder) and folder not in sys.path:
            site.addsitedir(folder)  # a user site pip has just created


def add_requirements(needed: list[Requirement]) -> None:
    """Install `needed`, every other installed package pinned where it is."""
    if not needed:
        return
    with tempfile.TemporaryDirectory() as folder:
        constraints = Path(folder) / "constraints.txt"
        pinned = pins(metadata.distributions(), [req.name for req in needed])
        constraints.write_text("\n".join(pinned) + "\n", encoding="utf-8")
        pip_install("-c", str(constraints), *map(str, needed))
    refresh_imports()


def keep_on_drive(mountpoint: str | None = None) -> Path:
    """Mount Google Drive and keep the student's package in MyDrive/transformer_lab."""
    try:
        from google.colab import drive
    except ImportError:
        raise RuntimeError(
            "use_drive needs Google Colab (google.colab is not importable here); "
            "call setup(..., use_drive=False)"
        ) from None
    mountpoint = mountpoint or os.environ.get("TRANSFORMER_LAB_DRIVE", DRIVE)
    drive.mount(mountpoint)
    folder = Path(mountpoint) / "MyDrive" / DRIVE_FOLDER
    os.environ["TRANSFORMER_LAB_STUDENT_DIR"] = str(folder)
    return folder


def setup(source: str, use_drive: bool = True) -> None:
    """Everything after ``pip install --no-deps SOURCE``: the missing requirements, Drive, and
    one printed line. `source` is what the cell installed, for that line."""
    needed = missing_requirements(metadata.requires(DISTRIBUTION) or [])
    add_requirements(needed)
    done = [f"installed {source}" + (f" and {', '.join(map(str, needed))}" if needed else "")]
    done.append(f"{KEPT} {installed_version(KEPT)} kept")
    if use_drive:
        done.append(f"your passing code is kept on Google Drive in {keep_on_drive()}")
    else:
        done.append("Drive off: your passing code is kept only while this runtime lasts")
    print("Colab setup: " + "; ".join(done) + "; no restart needed")
