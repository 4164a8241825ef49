"""Feedback pages back through an LMS: one zip that Canvas's bulk upload matches to students.

Canvas (Gradebook, the assignment's menu, *Re-Upload Submissions*) reads the first two all-digit
parts of each file name, split at ``_``, as the student's user id and the id of a file of their
submission, exactly as in the names of its *Download Submissions* zip
(``smithjohn_111_901_02_qkv_attention.ipynb``: user 111, file 901), and attaches the file to that
submission as a comment; a name it cannot match is skipped. So each page is named after the
file the student submitted: ``smithjohn_111_901_02_qkv_attention_feedback.html``, the `lms_file`
kept by `collect` (`identities`). Students with no Canvas identity (the exchange, a folder laid
out by hand) are left out of the zip and named, with the reason.
"""

from __future__ import annotations

import dataclasses
import re
import zipfile
from pathlib import Path

from . import identities
from .feedback import feedback_dir

CANVAS_PREFIX = re.compile(r"^(?P<prefix>.*?_\d+_\d+)_")


@dataclasses.dataclass
class FeedbackZip:
    path: Path
    members: dict[str, str]  # zip member -> student
    left_out: list[tuple[str, str]]  # (student, why)


def canvas_name(who: dict, page: Path) -> str | None:
    """The zip member name Canvas matches to the student `who`, or None without a Canvas file."""
    match = CANVAS_PREFIX.match(who.get("lms_file") or "")
    if who.get("lms") != "canvas" or match is None:
        return None
    return f"{match['prefix']}_{page.stem}_feedback.html"


def canvas_zip(
    course: Path, assignment: str, out: Path, students: list[str] | None = None
) -> FeedbackZip:
    """Write every feedback page of `assignment` (made by `feedback`) into the zip `out`."""
    register = identities.load(course, assignment)
    root = Path(course) / "autograder" / "work" / "feedback"
    found = sorted(p.parent.name for p in root.glob(f"*/{assignment}") if p.is_dir())
    members, left_out = {}, []
    for student in [s for s in found if students is None or s in students]:
        pages = sorted(feedback_dir(course, student, assignment).glob("*.html"))
        who = identities.of(register, student)
        names = {page: canvas_name(who, page) for page in pages}
        if not pages:
            left_out.append((student, "no feedback page (run feedback first)"))
        elif None in names.values():
            left_out.append((student, f"no Canvas file name on record (source: {who['lms']})"))
        else:
            members.update({name: page for page, name in names.items()})
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, page in sorted(members.items()):
            zf.write(page, name)
    tmp.replace(out)
    return FeedbackZip(
        out, {name: page.parent.parent.name for name, page in members.items()}, left_out
    )
