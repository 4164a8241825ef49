"""Release an assignment to students: regenerate it, then hand it out.

``release(course, assignment, exchange=None)``
- always regenerates ``exercises/<assignment>/`` from ``solutions/`` (``nbgrader_app.generate``; the
  result is byte-identical run to run, so releasing twice changes nothing);
- with ``exchange`` (the nbgrader exchange folder of a JupyterHub, e.g. ``/srv/nbgrader/exchange``):
  runs ``nbgrader release_assignment`` into ``<exchange>/transformer-lab/outbound/<assignment>``,
  where students fetch it from the Assignments tab. Re-releasing replaces the copy there
  (``--force``); students who already fetched keep theirs;
- without ``exchange``: prints where the student notebook is, for upload to an LMS (Canvas,
  Moodle, ...) or a shared drive.
Returns the released folder (in the exchange, or ``exercises/<assignment>``).
"""

from __future__ import annotations

from pathlib import Path

from . import nbgrader_app
from .course import require_lesson

COURSE_ID = "transformer-lab"


def release(course: Path, assignment: str, exchange: Path | None = None) -> Path:
    course = Path(course).resolve()
    require_lesson(course, assignment)
    notebooks = nbgrader_app.generate(course, [assignment], quiet=True)
    if not notebooks:
        raise SystemExit(f"generating {assignment} wrote no notebook in exercises/{assignment}/")
    released = course / "exercises" / assignment
    if exchange is None:
        print(f"released {assignment} (no exchange given): upload these to your LMS:")
        for nb_path in notebooks:
            print(f"  {nb_path}")
        return released

    exchange = Path(exchange).resolve()
    if exchange.exists() and not exchange.is_dir():
        raise SystemExit(f"the exchange {exchange} is not a folder")
    nbgrader_app.release_assignment(course, assignment, exchange, COURSE_ID)
    target = exchange / COURSE_ID / "outbound" / assignment
    missing = [nb.name for nb in notebooks if not (target / nb.name).is_file()]
    if missing:
        raise RuntimeError(f"nbgrader reported success but {target} lacks {', '.join(missing)}")
    print(f"released {assignment} to the exchange: {target}")
    print("students fetch it in JupyterLab: Assignments tab, or `nbgrader fetch_assignment`.")
    return target
