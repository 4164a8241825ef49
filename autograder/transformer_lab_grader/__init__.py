"""The instructor's side: release, collect, grade (nbgrader, judged outside the student's box), report.

The package's map, in the order a submission meets it. Imports go one way, down these layers
(tests/structure.py's LAYERS checks it): CLI -> commands -> pipeline steps -> sandbox and judge
-> formats.

- CLI: `cli` (argparse only) -> `commands` (one function per command).
- Pipeline steps. `release` hands a lesson out; `collect` lays submissions out as nbgrader does
  (a zip, unpacked by `safe_zip`; an LMS download; `exchange`: the exchange's inbound folder, which every student may
  write in), `identities` keeps who each student is, `submission` takes a notebook in and
  repairs it. `grade` grades a class: here (`grading.Grader`, with `run_setup`:
  the worker, the base gradebook and the time limits a run shares; `regrade`: whether a record
  is redone) or on Dask (`cluster`, `cluster_worker`). Each student is one job (`job`, forked by
  `worker`/`worker_process`) that runs nbgrader's autograde (`nbgrader_app`), its scores then in
  the gradebook (`gradebook`, `gradebook_merge`; `manual`: grades given by hand). Afterwards:
  `term` (due dates, late policy, roster), `export`, `feedback`/`lms_feedback`, and the class
  report (`report_summary` counts, `report` writes).
- Sandbox and judge. `judged_execute` is nbgrader's Execute replaced by `judge`: one execution,
  the student's cells in a boxed process of their own (`verify_session` starts it in its box:
  `sandbox` runs, `bubblewrap` builds the box; inside, `verify_child` runs the cells with
  `verify_cells` and answers the judge, `verify_guard` and `verify_earlier` guard it), every test
  here against stand-ins for the student's objects (`verify_remote`, over `verify_wire`).
  `verify` and `verify_flags`: the same judge for one notebook. `judge_cells`: the notebook's
  cells as the judge sees them.
- How a cell's time is limited: `cell_limits` derives each cell's limit and the notebook's
  timeout budget from the reference solution's times; `judge_limits` applies them in one run
  (the student's process stops a cell at its limit, `verify_cells`).
- Formats: `records` (record and CSV), `failures` (a failed check as data), `notebook_format`
  (graded cells, hidden tests, `repair`), `course`, `timing`, `maths_html`; a student's text
  and files made safe: `untrusted` (file names shown escaped, files copied without following
  links and within limits), `plain_text` (text written to files, the terminal, CSV),
  `safe_html` (feedback).

Importing nbformat imports jsonschema, whose optional "iri" format check builds a grammar at
import (about 2 CPU s in every process that reads a notebook: the grader, each grading job);
`notebook_cells.skip_slow_format_checks` leaves it out before anything here imports nbformat.

The grader's frames count as the course package's in a student's traceback
(`registry.add_machinery`), as they did when the grader was its subpackage `instructor/`.
"""

from pathlib import Path

from transformer_lab import registry
from transformer_lab.notebook_cells import skip_slow_format_checks

skip_slow_format_checks()  # before any grader module imports nbformat

registry.add_machinery(Path(__file__).resolve().parent)
