"""A submission's intake, in the grader's parent (which never runs student code): find the
students' folders, digest each one, pick and parse its notebooks, repair them.

- `find_students`: {student: folder} in nbgrader's layout, and the folders that cannot be used;
- `submission_sha256`: the digest that decides whether a student is graded again (files read in
  chunks, within `collect`'s limits: a file past them counts by its size);
- `prepare_submission`: pick the notebook (rename a single misnamed one, ignore extra files),
  parse it (`read_notebook`: empty, invalid or truncated JSON -> `Ungradable` with the reason),
  upgrade old nbformat, restore nbgrader metadata an editor stripped
  (`notebook_format.repair`), note edited or deleted test cells.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import nbformat

from . import collect, sandbox
from .identities import EXCHANGE_FILES
from .notebook_format import repair
from .plain_text import shown
from .records import STUDENT_ID
from .untrusted import file_sha256, size_text

MAX_NOTEBOOK_BYTES = 50 * sandbox.MiB


class Ungradable(Exception):
    """A submission that cannot be graded; the message is the reason the instructor sees."""


def submission_sha256(folder: Path) -> str:
    """Digest of every file in the student's folder (names and bytes), in a stable order, but
    the exchange's own `timestamp.txt` and `submission_secret.txt`: they differ for every
    student and every submission, so two students handing in the same files would never have
    the same digest (`report_summary.identical_submissions`), nor the untouched release its own.
    A file past `collect`'s limits (one file's, or the folder's in all) is not read: its size
    stands for its bytes (`oversize`)."""
    digest = hashlib.sha256()
    bookkeeping = exchange_bookkeeping(folder)
    too_large = set(oversize(folder))
    for path in sorted(
        p for p in folder.rglob("*") if p.is_file() and not p.is_symlink() and p not in bookkeeping
    ):
        digest.update(os.fsencode(path.relative_to(folder)) + b"\0")
        if path in too_large:
            digest.update(b"oversize %d" % path.stat().st_size)
        else:
            digest.update(file_sha256(path))
    return digest.hexdigest()


def oversize(folder: Path) -> dict[Path, int]:
    """{file: size} of the files under `folder` past `collect`'s limits, in name order: larger
    than one file may be, or after the folder's first `MAX_TOTAL_BYTES`."""
    found, total = {}, 0
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file() and not p.is_symlink()):
        size = path.stat().st_size
        if size > collect.MAX_FILE_BYTES or total + size > collect.MAX_TOTAL_BYTES:
            found[path] = size
        else:
            total += size
    return found


def exchange_bookkeeping(folder: Path) -> set[Path]:
    """The files nbgrader's exchange adds to every submission (`identities` reads them): not the
    student's work, so neither digested nor reported as extra files."""
    return {Path(folder) / name for name in EXCHANGE_FILES.values()}


def read_notebook(path: Path) -> tuple[nbformat.NotebookNode, list[str]]:
    """Parse a submitted notebook; upgrade old formats. Raises Ungradable with the reason."""
    notes = []
    size = path.stat().st_size
    name = shown(path.name)  # the student's: no control characters in the records or terminal
    if size > MAX_NOTEBOOK_BYTES:
        raise Ungradable(f"{name} is too large ({size / sandbox.MiB:.0f} MiB)")
    text = path.read_bytes().decode("utf-8", errors="replace")
    if not text.strip():
        raise Ungradable(f"{name} is an empty file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        cut = error.pos >= len(text.rstrip()) or error.msg.startswith("Unterminated string")
        end = " (the file is truncated)" if cut else ""
        raise Ungradable(f"{name} is not valid JSON{end}: {error}") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise Ungradable(f"{name} is JSON but not a notebook (no list of cells)")
    version = (data.get("nbformat"), data.get("nbformat_minor"))
    try:
        nb = nbformat.reads(text, as_version=4)
    except Exception as error:  # nbformat raises many kinds on malformed notebooks
        raise Ungradable(f"{name} is not a readable notebook: {error}") from None
    if version != (4, 5) or any("id" not in c for c in nb.cells):
        notes.append(f"upgraded from nbformat {version[0]}.{version[1]}")
        nb.nbformat, nb.nbformat_minor = 4, 5
        used = {c.get("id") for c in nb.cells}
        for i, cell in enumerate(nb.cells):
            if not cell.get("id"):
                new = f"cell-{i}"
                while new in used:
                    new += "x"
                cell["id"] = new
                used.add(new)
    for cell in nb.cells:
        if not isinstance(cell.get("source"), str):
            raise Ungradable(f"{name}: a cell's source is not text")
    return nb, notes


def prepare_submission(
    folder: Path, released: dict[str, nbformat.NotebookNode], dest: Path
) -> list[str] | tuple:
    """Write the repaired notebooks of `folder` into `dest`. Returns (notes, flags);
    raises Ungradable."""
    notes, flags = [], []
    files = sorted(
        p
        for p in folder.rglob("*")
        if p.is_file() and ".ipynb_checkpoints" not in p.parts and not p.name.startswith(".")
    )
    links = [p for p in files if p.is_symlink()]
    files = [p for p in files if not p.is_symlink()]
    notebooks = [p for p in files if p.suffix == ".ipynb" and p.parent == folder]
    chosen: dict[str, Path] = {}
    for name in released:
        if (folder / name) in notebooks:
            chosen[name] = folder / name
    missing = [name for name in released if name not in chosen]
    others = [p for p in notebooks if p.name not in released]
    if missing:
        if len(missing) == 1 and len(others) == 1:
            chosen[missing[0]] = others[0]
            notes.append(f"renamed {shown(others[0].name)} to {missing[0]}")
            others = []
        elif not notebooks:
            listing = ", ".join(shown(p.name) for p in files[:10]) or "no files"
            raise Ungradable(f"no notebook in the submission ({listing})")
        else:
            raise Ungradable(
                f"expected {', '.join(missing)}; found several other notebooks "
                f"({', '.join(shown(p.name) for p in others)}): cannot tell which one to grade"
            )
    bookkeeping = exchange_bookkeeping(folder)
    extra = [p for p in files if p not in chosen.values() and p not in bookkeeping] + links
    if extra:
        large = oversize(folder)
        listing = ", ".join(
            shown(p.relative_to(folder))
            + (f" ({size_text(large[p])}, not read)" if p in large else "")
            for p in extra[:10]
        )
        notes.append(f"ignored extra files: {listing}" + (" …" if len(extra) > 10 else ""))
    dest.mkdir(parents=True, exist_ok=True)
    for name, path in chosen.items():
        nb, read_notes = read_notebook(path)
        fixed = repair(nb, released[name])
        notes += read_notes + fixed.notes
        flags += fixed.flags
        nbformat.write(nb, dest / name)
    return notes, flags


def find_students(submissions: Path, assignment: str) -> tuple[dict[str, Path], list[str]]:
    """{student: folder} in nbgrader layout, and the folders that could not be used (why)."""
    found, problems = {}, []
    for folder in sorted(
        p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith(".")
    ):
        if not STUDENT_ID.match(folder.name):
            problems.append(f"{folder.name!r}: not a usable student id (letters, digits, . _ @ -)")
        elif (folder / assignment).is_dir():
            found[folder.name] = folder / assignment
        else:
            found[folder.name] = folder  # graded as "no <assignment> folder" below
    for path in sorted(
        p for p in submissions.iterdir() if p.is_file() and not p.name.startswith(".")
    ):
        problems.append(
            f"{shown(path.name)}: a file at the top level (expected <student>/{assignment}/…)"
        )
    return found, problems
