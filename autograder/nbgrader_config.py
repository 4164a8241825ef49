"""nbgrader configuration for Transformer Lab.

nbgrader reads this file from the current directory (or a folder on JUPYTER_CONFIG_PATH); run
nbgrader from `autograder/`, or use `transformer-lab` (`python -m transformer_lab_grader.cli`), which does that for you.

Layout: the course root is the repository (or $TRANSFORMER_LAB_COURSE_ROOT, used by the tests to
grade in a temporary copy); `solutions/` is nbgrader's source, `exercises/` its release, and
every other step (submitted, autograded, feedback) plus the SQLite gradebook lives under
`autograder/work/`, which git ignores.

The nbgrader exchange (where lessons are handed out, students submit, and `nbgrader
release_feedback` returns feedback) is `exchange_root.py`'s: $TRANSFORMER_LAB_EXCHANGE, by
default `autograder/work/exchange/`.
"""

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = Path(os.environ.get("TRANSFORMER_LAB_COURSE_ROOT", HERE.parent)).resolve()
WORK = ROOT / "autograder" / "work"
WORK.mkdir(parents=True, exist_ok=True)

sys.path.insert(0, str(HERE))
from exchange_root import exchange_root  # noqa: E402
from feedback_filter import HideHiddenTests  # noqa: E402
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor  # noqa: E402
from nbgrader.preprocessors import GetGrades  # noqa: E402

# Kernels started by nbgrader inherit these: grading mode (reference code for earlier lessons,
# nothing saved to the student's package), quick mode (small experiments), no plot windows.
os.environ["TRANSFORMER_LAB_GRADING"] = "1"
os.environ.setdefault("TRANSFORMER_LAB_QUICK", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("OMP_NUM_THREADS", "1")  # small models; no oversubscribed cores
os.environ.setdefault("TQDM_DISABLE", "1")  # progress bars write to stderr
os.environ.setdefault("TRANSFORMER_LAB_NO_PROGRESS", "1")

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)

c.CourseDirectory.root = str(ROOT)
c.CourseDirectory.course_id = "transformer-lab"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"
c.CourseDirectory.submitted_directory = "autograder/work/submitted"
c.CourseDirectory.autograded_directory = "autograder/work/autograded"
c.CourseDirectory.feedback_directory = "autograder/work/feedback"
c.CourseDirectory.solution_directory = "autograder/work/release_solutions"
c.CourseDirectory.db_url = f"sqlite:///{WORK / 'gradebook.db'}"
c.Exchange.root = str(exchange_root(ROOT))
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback"]

c.GenerateAssignment.create_assignment = True
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# Per-cell limit. Solution notebooks run in <= 3 min in full mode and grading runs in quick mode,
# so no honest cell comes close; an endless loop is stopped instead of hanging the grader.
c.Execute.timeout = 240
c.Execute.interrupt_on_timeout = True

# Any stderr in a test cell costs all its points in nbgrader; warnings must not.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"(?i)warn"

# A deleted (or metadata-stripped, after `transformer-lab autograde` repairs it) test cell
# is put back from the gradebook instead of silently scoring 0.
c.OverwriteCells.add_missing_cells = True

c.LimitOutput.max_lines = 200
c.LimitOutput.max_traceback = 20

# Feedback never shows hidden tests: their source is cleared, tracebacks cut to the message.
c.GenerateFeedback.preprocessors = [GetGrades, HideHiddenTests, CSSHTMLHeaderPreprocessor]
# A student's markdown cells and outputs may hold raw HTML (<script>, <img onerror=...>): the
# feedback page, which the instructor opens and the LMS shows, keeps only harmless HTML (and the
# lesson's formatting and maths: transformer_lab_grader/safe_html.py).
c.HTMLExporter.sanitize_html = True
c.HTMLExporter.filters = {"clean_html": "transformer_lab_grader.safe_html.clean_html"}
