"""A failed test as data: what the judge caught, kept from the check to the class report.

The judge (`judge.run_test_cell`) runs every test cell itself, so it catches the check's own
exception (`transformer_lab.check.CheckFailed`, whose fields say what went wrong) and keeps
those fields instead of its text. The failure travels in the grading job's report, the result
record's cell (``"failure"``), and from there to the feedback page and the class report,
which read fields and never parse an output::

    {"error": "CheckFailed",            # the exception that failed the test cell
     "exercise": "split_heads",         # the check's exercise (None: a plain assert)
     "mistake": "no-transpose",         # the catalogued mistake's key, when one matched
     "sentence": "you reshaped ...",    # and its sentence
     "problem": "the output has ...",   # what differed
     "case": "x (2, 3, 8), ...",        # the inputs that showed it
     "crash": {"type", "message", "line"} | None,  # the student's own exception
     "kind": "CheckFailed: wrong shape",  # how the class report groups an unnamed failure
                                        # ("CheckFailed: your code raised RuntimeError": a crash)
     "message": "..."}                  # the error's message (capped)

A passed test has no failure (None).
"""

from __future__ import annotations

TEXT = 1000  # characters kept of a message, a problem or a crash
NOT_ATTEMPTED = "NotImplementedError (not attempted)"
NOT_RECORDED = "failed (no detail recorded: graded before failures were kept)"
# What differs, as the checks word it (`transformer_lab.check.compare`), and how it is counted.
CAUSES = (
    ("should be a tensor", "not a tensor"),
    ("has shape", "wrong shape"),
    ("has dtype", "wrong dtype"),
    ("is on device", "wrong device"),
    ("contains nan", "NaN in the output"),
    ("contains inf", "inf in the output"),
    ("gradient", "wrong gradient"),
)
FIELDS = ("error", "exercise", "mistake", "sentence", "problem", "case", "kind", "message")
CRASH_FIELDS = ("type", "message", "line")


def kind_of(error: str, problem: str, crash: dict | None = None) -> str:
    """How the report groups a failure that names no mistake: the exception type, a failed check
    or assert split by what differed, or by the exception the student's code raised."""
    if crash is not None:
        return f"{error}: your code raised {crash['type']}"
    if error == "NotImplementedError":
        return NOT_ATTEMPTED
    if error in ("CheckFailed", "AssertionError"):
        text = " ".join(problem.split()).lower()
        cause = next((c for needle, c in CAUSES if needle in text), "wrong values")
        return f"{error}: {cause}"
    return error


def _text(value) -> str | None:
    return None if value is None else str(value)[:TEXT]


def failure_of(err: BaseException) -> dict:
    """The failure a test cell's exception stands for (see module)."""
    error = type(err).__name__
    problem = getattr(err, "problem", None)
    cause = getattr(err, "cause", None)
    crash = None
    if isinstance(cause, BaseException):
        crash = {
            "type": type(cause).__name__,
            "message": _text(cause),
            "line": _text(getattr(cause, "student_line", None)),
        }
    return {
        "error": error,
        "exercise": _text(getattr(err, "exercise", None)),
        "mistake": _text(getattr(err, "mistake_key", None)),
        "sentence": _text(getattr(err, "mistake", None)),
        "problem": _text(problem),
        "case": _text(getattr(err, "case", None)),
        "crash": crash,
        "kind": kind_of(error, str(err) if problem is None else str(problem), crash),
        "message": _text(err),
    }


def failure_named(error: str, message: str) -> dict:
    """The failure of a test the judge failed itself (the student's process died, the test ran
    past its time limit): an exception type and a message, nothing more."""
    return {
        **dict.fromkeys(FIELDS),
        "error": error,
        "crash": None,
        "kind": kind_of(error, message),
        "message": _text(message),
    }


def clean_failure(raw) -> dict | None:
    """A failure as a record keeps it: known fields only, text or None, capped; None for
    anything that is not a failure (a passed cell, a record from before failures were kept)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("error"), str):
        return None
    clean = {key: _text(raw.get(key)) for key in FIELDS}
    crash = raw.get("crash")
    clean["crash"] = (
        {key: _text(crash.get(key)) for key in CRASH_FIELDS}
        if isinstance(crash, dict) and isinstance(crash.get("type"), str)
        else None
    )
    clean["kind"] = clean["kind"] or kind_of(clean["error"], clean["problem"] or "", clean["crash"])
    return clean


def kind(failure: dict | None) -> str:
    """The report's group of a failed cell's failure (NOT_RECORDED when the record has none)."""
    return failure["kind"] if failure else NOT_RECORDED
