"""Feedback sanitising: hidden tests never reach a student's feedback.

nbgrader's feedback HTML is made from the autograded notebook, whose test cells still hold the
hidden tests and whose tracebacks quote their source lines. `HideHiddenTests` (registered in
`nbgrader_config.py`) replaces each hidden block with a one-line note and shortens every
traceback in a test cell to its final line: the error type and the check's own message, which
says what differs without showing the hidden code. A failed check's short rendering (what the
student saw in the notebook: the named mistake, what differs, the case and their own failing
line, see `transformer_lab.check.feedback`) is kept as it is: it never quotes a test cell.

`transformer_lab` is imported when feedback is made, not at import: every nbgrader command
loads this module through `nbgrader_config.py`, and importing the course package imports torch
and matplotlib (about 3 CPU s of each `generate_assignment`, benchmarks/history/journal.md §29).
"""

from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Unicode

RENDERED = {"CheckFailed", "ImplementThisYourself"}  # the errors a check renders short


def _rendered(output) -> bool:
    """True for a failed check's short rendering (no frames, no test-cell source)."""
    from transformer_lab.check.feedback import is_rendered

    return output.get("ename") in RENDERED and is_rendered(output.get("traceback") or [])


def _plain(text: str) -> str:
    from transformer_lab.check.feedback import strip_ansi

    return strip_ansi(text)


class HideHiddenTests(NbGraderPreprocessor):
    begin = Unicode("### BEGIN HIDDEN TESTS").tag(config=True)
    end = Unicode("### END HIDDEN TESTS").tag(config=True)
    note = Unicode("# (hidden tests run here when grading; they are not shown)").tag(config=True)

    def _clear(self, source: str) -> str:
        lines, out, hiding = source.splitlines(), [], False
        for line in lines:
            if self.begin in line:
                hiding = True
                out.append(line[: len(line) - len(line.lstrip())] + self.note)
                continue
            if self.end in line:
                hiding = False
                continue
            if not hiding:
                out.append(line)
        return "\n".join(out)

    def preprocess(self, nb, resources):
        from transformer_lab.notebook_setup import SETUP_ID

        nb.cells = [cell for cell in nb.cells if cell.get("id") != SETUP_ID]
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, cell_index):
        if cell.cell_type == "markdown":  # imported here: grading itself never needs it
            from transformer_lab_grader.maths_html import markdown_with_mathml

            cell.source = markdown_with_mathml(cell.source)
        if cell.cell_type != "code":
            return cell, resources
        is_test = cell.metadata.get("nbgrader", {}).get("grade", False) and not cell.metadata.get(
            "nbgrader", {}
        ).get("solution", False)
        if self.begin in cell.source or is_test:
            cell.source = self._clear(cell.source)
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error" and not _rendered(output):
                    message = f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"
                    output["traceback"] = [_plain(message)]
        return cell, resources
