"""The instructor's side: release, collect, grade (sandbox, nbgrader, clean re-check), report.

Importing nbformat imports jsonschema, whose optional check of the "iri" string format imports
`rfc3987_syntax`, which builds a parser at import: about 1.7 CPU s in every process that reads a
notebook (the grader, each grading job). Notebook schemas never use that format, so it is left
out here (jsonschema skips a format whose module is missing); nothing else changes.
"""

import sys

sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[assignment]
