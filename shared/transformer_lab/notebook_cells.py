"""The course's notebook cells as nbgrader marks them: pure helpers that the student's tools
(``presubmit``) and the grader share.

- nbgrader's cell metadata: ``nbgrader_meta``, ``is_test_cell``;
- the hidden-test blocks of a source notebook's test cells (between ``HIDDEN_TESTS_BEGIN`` and
  ``HIDDEN_TESTS_END``), which a released exercise never holds.

Cells may be ``nbformat`` nodes or plain dicts (a notebook read as JSON).

And ``skip_slow_format_checks``, called before nbformat is imported: nbformat imports jsonschema,
whose optional checks of the "iri" and "uri" string formats import ``rfc3987_syntax`` and
``rfc3986_validator`` where they are installed (JupyterLab's ``jsonschema[format-nongpl]`` installs
them). The first builds a grammar at import: about 2 CPU s in every process that reads or runs a
notebook (the grader and each grading job; presubmit in the student's kernel; generation).
Notebook schemas never use those formats, so they are left out (jsonschema skips a format whose
module is missing); nothing else changes.
"""

from __future__ import annotations

import re
import sys

# jsonschema's optional format checkers that notebooks never need (see the module docstring).
SLOW_FORMAT_CHECK_MODULES = ("rfc3987_syntax", "rfc3986_validator")

HIDDEN_TESTS_BEGIN = "### BEGIN HIDDEN TESTS"
HIDDEN_TESTS_END = "### END HIDDEN TESTS"
# One hidden block: its indentation, the markers and the rest of the END line; group 1 = the tests.
HIDDEN_TESTS_BLOCK = re.compile(
    rf"[ \t]*{HIDDEN_TESTS_BEGIN}\n(.*?){HIDDEN_TESTS_END}[^\n]*\n?", re.S
)


def skip_slow_format_checks() -> None:
    """Before nbformat (or nbclient, nbgrader) is first imported in this process: jsonschema then
    leaves out the "iri" and "uri" format checks (no import of their 2-second grammar). A module
    already imported is left as it is."""
    for name in SLOW_FORMAT_CHECK_MODULES:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]  # None: "not installed"


def cell_source(cell: dict) -> str:
    """A cell's source as one string (a JSON notebook may hold a list of lines, or junk)."""
    src = cell.get("source", "")
    if isinstance(src, list):
        src = "".join(s for s in src if isinstance(s, str))
    return src if isinstance(src, str) else ""


def nbgrader_meta(cell: dict) -> dict:
    """A cell's nbgrader metadata ({} when it has none or it is not a dict)."""
    meta = cell.get("metadata")
    meta = meta.get("nbgrader") if isinstance(meta, dict) else None
    return meta if isinstance(meta, dict) else {}


def is_test_cell(cell: dict) -> bool:
    """A graded code cell that is not the student's: the tests nbgrader runs."""
    meta = nbgrader_meta(cell)
    return (
        cell.get("cell_type") == "code"
        and bool(meta.get("grade"))
        and not meta.get("solution")
        and bool(meta.get("grade_id"))
    )


def hidden_tests(source: str) -> list[str]:
    """The text of each hidden-test block of a cell."""
    return HIDDEN_TESTS_BLOCK.findall(source)


def without_hidden_tests(source: str) -> str:
    """A cell's source with its hidden blocks cut out (what a released test cell holds)."""
    return HIDDEN_TESTS_BLOCK.sub("", source)
