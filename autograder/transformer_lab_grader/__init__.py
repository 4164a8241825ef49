"""The instructor's side: release, collect, grade (nbgrader, judged outside the student's box), report.

Importing nbformat imports jsonschema, whose optional checks of the "iri" and "uri" string
formats import `rfc3987_syntax` and `rfc3986_validator`, which build parsers at import: about
2 CPU s in every process that reads a notebook (the grader, each grading job). Notebook schemas
never use those formats, so they are left out here (jsonschema skips a format whose module is
missing); nothing else changes.

The grader's frames count as the course package's in a student's traceback
(`registry.add_machinery`), as they did when the grader was its subpackage `instructor/`.
"""

import sys
from pathlib import Path

for _name in ("rfc3987_syntax", "rfc3986_validator"):
    sys.modules.setdefault(_name, None)  # type: ignore[assignment]

from transformer_lab import registry  # noqa: E402 (the lines above come first)

registry.add_machinery(Path(__file__).resolve().parent)
