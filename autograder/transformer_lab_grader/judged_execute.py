"""nbgrader's Execute preprocessor, replaced: the notebook runs once, judged (`judge`).

`JudgedExecute` takes Execute's place in nbgrader's autograde (`nbgrader_app.autograde_config`).
After nbgrader has restored the released test cells from its gradebook (hidden tests included),
the student's cells run once in their boxed process and every test cell runs in the judge; each
cell then gets the outputs and errors a kernel would have given it, so nbgrader's grades,
feedback and formgrader work unchanged. The judge's notes, flags and verdicts go to a report file
the grading job reads (`job`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Unicode

from . import judge, judge_cells, judge_limits, sandbox
from .cell_limits import CellLimits, fixed
from .notebook_format import python_source
from .verify_flags import source_flags


class JudgedExecute(NbGraderPreprocessor):
    """nbgrader's Execute, replaced: the student's cells run once in their box, every test cell
    in the judge (`judge.Judge`)."""

    job = Unicode("", help="the grading job's judge settings (JSON)").tag(config=True)

    def preprocess(self, nb, resources):
        return judge_notebook(nb, Path(self.job)), resources


def judge_notebook(nb, settings_path: Path):
    """Run `nb` (nbgrader's autograde copy: test cells restored from the gradebook, hidden tests
    included) once, judged (`judge.Judge`), and give its cells their outputs. The judge's
    notes, flags and verdicts go to the settings' report file. A student process that died
    ends the notebook as a dead kernel ends nbgrader's run."""
    settings = json.loads(Path(settings_path).read_text())
    limits = CellLimits.from_json(settings.get("cell_limits"))
    if limits is None and settings.get("cell_timeout"):
        limits = fixed(settings["cell_timeout"])
    setup = settings.get("setup")  # the released setup cell, as the judge would run it
    setup = python_source(setup) if setup is not None else None
    cells = [c for c in judge_cells.cells_of(nb) if c.source != setup]
    deadline = time.monotonic() + max(settings["deadline"] - time.time(), 1.0)
    outcome = judge.Judge(
        Path(settings["workdir"]),
        deadline=deadline,
        limits=judge_limits.Limits(limits),
        memory=settings.get("memory_bytes"),
        box=sandbox.Box.from_json(settings.get("box")),
    ).run(cells)
    count = 0
    for cell in cells:
        if cell.index in outcome.outputs:
            count += 1
            nb.cells[cell.index].outputs = [
                nbformat.from_dict(o) for o in outcome.outputs[cell.index]
            ]
            nb.cells[cell.index].execution_count = count
    flags = source_flags([(c.index, c.source) for c in cells if c.test is None])
    report = {
        "notes": outcome.notes,
        "flags": flags + [f for f in outcome.flags if f not in flags],
        "verdicts": outcome.verdicts,
        "seconds": outcome.seconds,
        "died": outcome.died,
        "cpu": round(outcome.cpu, 3),
    }
    Path(settings["report"]).write_text(json.dumps(report))
    if outcome.died:
        from nbclient.exceptions import DeadKernelError

        raise DeadKernelError(f"Kernel died: {outcome.died}")
    return nb
