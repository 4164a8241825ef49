"""Where the course's nbgrader exchange is: the one place it is set.

$TRANSFORMER_LAB_EXCHANGE if set (on a JupyterHub: the shared folder every server mounts, e.g.
/srv/nbgrader/exchange), else `autograder/work/exchange/` inside the course (git-ignored; made
on first use, so formgrader finds it). `nbgrader_config.py` gives it to nbgrader as
`Exchange.root` (release_assignment, collect, release_feedback, formgrader), and
`transformer-lab release --exchange` and `collect exchange` read it from here.
"""

import os
from pathlib import Path

VARIABLE = "TRANSFORMER_LAB_EXCHANGE"


def exchange_root(course: Path) -> Path:
    configured = os.environ.get(VARIABLE)
    if configured:
        return Path(configured).resolve()
    local = Path(course).resolve() / "autograder" / "work" / "exchange"
    local.mkdir(parents=True, exist_ok=True)
    return local
