"""Judge a notebook file outside nbgrader: the same one execution as grading (`judge`), with the
course's released test cells (hidden tests included) in place of whatever test cells the file
holds. Used to check the reference solution and, in tests, any notebook.

nbgrader's own run is judged the same way (`judged_execute.judge_notebook`): the student's cells run once in
their process (a bubblewrap box when `box` says so), every test cell runs in the judge with the
real `transformer_lab.check`, against stand-ins for the student's names that call into that
process (`verify_remote`); only plain data and tensors come back (`verify_wire`). What runs in
the student's process cannot reach the checks, the reference, the tolerances or the verdicts.

What it cannot promise: the student's process is the student's, so a determined student can
defeat the *refusal* of forbidden calls there (e.g. by code compiled under a library file name);
the judge, the reference and the comparison are out of reach whatever that process does. The
source red flags (`verify_flags`) point the instructor at such code.

    verify(lesson, notebook, workdir, course=..., timeout=300.0)
      -> {"cells": {grade_id: {"passed": bool, "message": str}}, "flags": [str],
          "seconds": {grade_id: s}, "notes": [str]}
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import time
from pathlib import Path

import torch

from transformer_lab.notebook_setup import SETUP_ID

from .judge import Judge
from .judge_cells import Cell, cells_of
from .judge_limits import Limits
from .notebook_format import cell_source, is_test_cell, nbgrader_meta, unmarked
from .verify_flags import source_flags
from .verify_wire import VerifyError

DEFAULT_MEMORY = 6 * 2**30  # address-space limit of the student's process (bytes)

__all__ = ["VerifyError", "released_test_cells", "source_flags", "verify"]


# ==============================================================================================
# Notebooks: the released test cells and the student's code cells.


def lesson_folder(course: Path, lesson: str) -> str:
    """'02' or '02_qkv_attention' -> '02_qkv_attention' (the folder under exercises/)."""
    exercises = Path(course) / "exercises"
    if (exercises / lesson).is_dir():
        return lesson
    found = sorted(p.name for p in exercises.glob(f"{lesson}_*") if p.is_dir())
    if len(found) != 1:
        raise VerifyError(f"no released lesson {lesson!r} under {exercises}")
    return found[0]


def _read_json_notebook(path: Path) -> dict:
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise VerifyError(f"cannot read notebook {path}: {err}") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise VerifyError(f"{path} is not a notebook (no list of cells)")
    return nb


def released_test_cells(course: Path, lesson: str) -> dict[str, str]:
    """{grade_id: source} of the graded test cells, in notebook order, hidden tests included.

    The list of cells is the released notebook's; each cell's text is the nbgrader source
    notebook's (solutions/, which holds the hidden tests) when the course has it, never the
    submission's.
    """
    folder = lesson_folder(course, lesson)
    released = _read_json_notebook(Path(course) / "exercises" / folder / f"{folder}.ipynb")
    cells = {
        nbgrader_meta(c)["grade_id"]: cell_source(c) for c in released["cells"] if is_test_cell(c)
    }
    source_path = Path(course) / "solutions" / folder / f"{folder}.ipynb"
    if source_path.is_file():
        source = _read_json_notebook(source_path)
        for c in source["cells"]:
            if is_test_cell(c) and nbgrader_meta(c)["grade_id"] in cells:
                cells[nbgrader_meta(c)["grade_id"]] = cell_source(c)
    return {gid: unmarked(src) for gid, src in cells.items()}


def released_setup_source(course: Path, lesson: str) -> str | None:
    """The text of the released notebook's Colab setup cell (the course's own code), if any."""
    folder = lesson_folder(course, lesson)
    released = _read_json_notebook(Path(course) / "exercises" / folder / f"{folder}.ipynb")
    for cell in released["cells"]:
        if cell.get("id") == SETUP_ID and cell.get("cell_type") == "code":
            return cell_source(cell)
    return None


def verify(
    lesson: str,
    notebook: Path,
    workdir: Path,
    *,
    course: Path,
    timeout: float = 300.0,
    memory: int | None = DEFAULT_MEMORY,
    cell_timeout: float | None = 120.0,
    cell_limits=None,
    box=None,
) -> dict:
    """Judge every graded cell of `notebook` where its code cannot touch the judge.

    lesson: the assignment ('02_qkv_attention', or '02'); notebook: the (repaired) submission;
    workdir: a private folder for the student's process; course: the course root (exercises/,
    and solutions/ for the hidden tests); timeout: for the whole run, seconds; memory: the
    student's process's address-space limit in bytes (None: none); cell_timeout: each cell's
    and each test's time limit, or `cell_limits` (a `cell_limits.CellLimits`, with the
    notebook's timeout budget); box: a `sandbox.Box` for the student's process (None: unboxed).
    The submission's own test cells are replaced by the released ones (a released test it
    deleted runs at its end); the course's setup cell, left as released, is not run.
    """
    course, workdir = Path(course), Path(workdir)
    tests = released_test_cells(course, lesson)
    try:
        nb = _read_json_notebook(Path(notebook))
    except VerifyError as err:
        cells = {gid: {"passed": False, "message": str(err)} for gid in tests}
        return {"cells": cells, "flags": [], "seconds": {}, "notes": []}
    setup = released_setup_source(course, lesson)
    cells, seen = [], set()
    for cell in cells_of(nb):
        raw = cell_source(nb["cells"][cell.index])
        if cell.test in tests:
            cells.append(dataclasses.replace(cell, source=tests[cell.test]))
            seen.add(cell.test)
        elif cell.test is None and not is_test_cell(nb["cells"][cell.index]) and raw != setup:
            cells.append(cell)
    end = len(nb["cells"])
    cells += [
        Cell(end + k, src, gid, gid)
        for k, (gid, src) in enumerate(tests.items())
        if gid not in seen
    ]
    flags = source_flags(
        [(c.index, cell_source(nb["cells"][c.index])) for c in cells if c.test is None]
    )
    importlib.import_module("transformer_lab.check")  # before any student line runs
    if memory and torch.cuda.is_available():
        memory = None  # CUDA reserves far more address space than it uses: RLIMIT_AS breaks it
    outcome = Judge(
        workdir,
        deadline=time.monotonic() + timeout,
        limits=Limits(cell_limits, cell_timeout),
        memory=memory,
        box=box,
    ).run(cells)
    verdicts = {
        gid: outcome.verdicts.get(gid, {"passed": False, "message": "not run"}) for gid in tests
    }
    return {
        "cells": verdicts,
        "flags": flags + [f for f in outcome.flags if f not in flags],
        "seconds": outcome.seconds,
        "notes": outcome.notes,
    }
