"""The course's notebook cells as nbgrader marks them: pure helpers that the student's tools
(``presubmit``) and the grader share.

- nbgrader's cell metadata: ``nbgrader_meta``, ``is_test_cell``;
- the hidden-test blocks of a source notebook's test cells (between ``HIDDEN_TESTS_BEGIN`` and
  ``HIDDEN_TESTS_END``), which a released exercise never holds.

Cells may be ``nbformat`` nodes or plain dicts (a notebook read as JSON).
"""

from __future__ import annotations

import re

HIDDEN_TESTS_BEGIN = "### BEGIN HIDDEN TESTS"
HIDDEN_TESTS_END = "### END HIDDEN TESTS"
# One hidden block: its indentation, the markers and the rest of the END line; group 1 = the tests.
HIDDEN_TESTS_BLOCK = re.compile(
    rf"[ \t]*{HIDDEN_TESTS_BEGIN}\n(.*?){HIDDEN_TESTS_END}[^\n]*\n?", re.S
)


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
