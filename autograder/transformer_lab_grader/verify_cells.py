"""Running the student's cells in the student's process (`verify_child`) as nbgrader's kernel
would: in one namespace, in order, each under its time limit, stdout and stderr captured and
capped, an error kept as nbgrader's kernel shows it (only the student's own frames).
"""

from __future__ import annotations

import builtins
import contextlib
import io
import signal
import time
import traceback

from .cell_limits import TimeoutBudget
from .verify_wire import (
    MAX_TEXT,
)


class _IPython:
    def __getattr__(self, name):
        return lambda *a, **k: None


def _display(*objects, **_):
    """IPython's `display`, as plain text (the grader keeps text outputs only)."""
    for obj in objects:
        print(repr(obj))


CELL_TIMED_OUT = "TimeoutError: the cell ran longer than "  # a cell's error at its limit
OUTPUT_CAP = 20_000  # characters of a cell's stdout (and of its stderr) that are kept


class _Capped(io.TextIOBase):
    """A cell's stdout or stderr: the first OUTPUT_CAP characters, then a note."""

    def __init__(self):
        self.parts: list[str] = []
        self.size = 0
        self.cut = False

    def writable(self) -> bool:
        return True

    def write(self, text) -> int:
        text = str(text)
        room = OUTPUT_CAP - self.size
        if room > 0:
            self.parts.append(text[:room])
            self.size += min(len(text), room)
        self.cut = self.cut or len(text) > room
        return len(text)

    def text(self) -> str:
        return "".join(self.parts) + ("\n[output cut]\n" if self.cut else "")


class Cells:
    """The student's namespace, and the cells run in it like nbgrader's kernel would (a cell's
    error is recorded and the next runs), each under its time limit: a cell is [index, source],
    [index, source, limit] or [index, source, limit, short limit], and the notebook's timeout
    budget (`cell_limits.TimeoutBudget`, kept across runs) decides between the two."""

    def __init__(self, spec: dict):
        self.ns = {
            "__name__": "__main__",
            "__builtins__": builtins,
            "get_ipython": lambda: _IPython(),
            "display": _display,
        }
        self.budget = TimeoutBudget.from_json(spec.get("budget"))
        self.cell_timeout = spec.get("cell_timeout")
        self.limit = self.cell_timeout
        self.sources: dict[str, str] = {}  # "<cell 4>" -> its source, for `student_line`

    def _alarm(self, signum, frame):
        raise TimeoutError(f"the cell ran longer than {self.limit:g} s")

    def run(self, cells: list, capture: bool = False) -> tuple[dict, dict]:
        """Run `cells`; returns ({index: error}, {index: {"stdout", "stderr", "error",
        "traceback", "seconds"}} when `capture`, else {})."""
        errors, outputs = {}, {}
        signal.signal(signal.SIGALRM, self._alarm)
        for index, src, *own in cells:
            full = own[0] if own and own[0] else self.cell_timeout
            short = own[1] if len(own) > 1 and own[1] else full
            self.limit = self.budget.limit(full, short) if full else full
            out, err, failure = _Capped(), _Capped(), None
            started = time.monotonic()
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    if self.limit:
                        signal.setitimer(signal.ITIMER_REAL, float(self.limit))
                    try:
                        self.sources[f"<cell {index + 1}>"] = src
                        exec(compile(src, f"<cell {index + 1}>", "exec"), self.ns)  # noqa: S102
                    finally:
                        signal.setitimer(signal.ITIMER_REAL, 0)
            except BaseException as error:  # noqa: BLE001
                failure = error
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            seconds = time.monotonic() - started
            if failure is not None:
                errors[str(index)] = _describe(failure)
            if errors.get(str(index), "").startswith(CELL_TIMED_OUT):
                self.budget.charge(str(index), self.limit)
            if capture:
                outputs[str(index)] = {
                    "stdout": out.text(),
                    "stderr": err.text(),
                    "error": _error_output(failure) if failure is not None else None,
                    "seconds": round(seconds, 4),
                }
        with contextlib.suppress(Exception):
            import matplotlib.pyplot as plt

            plt.close("all")
        return errors, outputs

    def student_line(self, error: BaseException) -> str | None:
        """Where in the student's cells `error` was raised: 'cell 4, line 2: <that line>'."""
        try:
            tb = traceback.extract_tb(error.__traceback__)
            frame = [f for f in tb if f.filename in self.sources][-1]
            lines = self.sources[frame.filename].splitlines()
            text = lines[frame.lineno - 1].strip() if 0 < (frame.lineno or 0) <= len(lines) else ""
            return f"{frame.filename[1:-1]}, line {frame.lineno}: {text}"[:MAX_TEXT]
        except BaseException:  # noqa: BLE001 - no frame of theirs, or a strange exception
            return None


def _describe(error: BaseException) -> str:
    try:
        return f"{type(error).__name__}: {error}"[:MAX_TEXT]
    except BaseException:  # noqa: BLE001
        return "an error"


def _error_output(error: BaseException) -> dict:
    """A cell's error as nbformat's error output wants it: name, value, the traceback's lines
    from the student's own cells only."""
    try:
        frames = [
            f for f in traceback.extract_tb(error.__traceback__) if f.filename.startswith("<cell ")
        ]
        lines = traceback.format_list(frames) + traceback.format_exception_only(error)
        return {
            "ename": type(error).__name__[:200],
            "evalue": str(error)[:MAX_TEXT],
            "traceback": ["Traceback (most recent call last):", *lines][-40:],
        }
    except BaseException:  # noqa: BLE001
        return {"ename": "Error", "evalue": "an error", "traceback": []}
