"""Collect submissions into nbgrader's layout `<out>/<student>/<assignment>/<files>`.

`collect(source, assignment, out)` accepts:

- the nbgrader exchange (JupyterHub): `source` is the exchange root holding
  `<course_id>/inbound/<student>+<assignment>+<timestamp>[+<random>]/`, or that `inbound/`
  folder itself. The latest submission of each student (by the timestamp in the folder name)
  is taken. Every student may write there: links, and folders another account of this machine
  wrote in a student's name, are refused, and an impossible timestamp is not taken
  (`exchange`); only regular files inside the folder are copied, opened without following
  links (`untrusted.copy_regular`).
- a folder already in nbgrader's layout (`<student>/<assignment>/*.ipynb`): copied as is.
- an LMS download, as a zip or the folder it unpacks to. A file is attributed to a student by
  the first of these patterns that matches its path inside the download:
    1. `--pattern REGEX` (yours; a named group `student` is required, `file` optional), e.g.
       `r"(?P<student>s\\d{7})-(?P<file>.+)"`;
    2. Canvas: `<name>[_LATE]_<user id>_<attachment id>_<file>` (Canvas's own convention: it
       reads the first two all-digit parts back as user and attachment id when feedback files
       are uploaded), e.g. `smithjohn_111_901_02_qkv_attention.ipynb` -> student `111` (the
       Canvas user id: stable, and the key of Canvas's gradebook), name `smithjohn`;
    3. Moodle: a folder `<Full Name>_<participant id>_assignsubmission_file_/<file>`
       -> student `full_name` (lower case, spaces as `_`), participant id kept beside it (it is
       Moodle's id per assignment, not per person: namesakes become `full_name_<id>`);
    4. a folder per student: `<student>/<file>` or `<student>/<assignment>/<file>`;
    5. a notebook named by the student at the top: `<student>.ipynb` (ids without `_`).
  Student ids must be letters, digits, `.`, `_`, `@`, `-`. A file no pattern attributes is
  reported (`Collected.unattributed`, with the reason), never silently dropped. Two students
  never merge: files that different identities (a Canvas id, a Moodle participant, a plain
  folder) would put under one student id are placed nowhere and listed in
  `Collected.ambiguous`, naming the files. Each student's identity (display name, LMS, LMS id,
  the LMS's file name, the exchange's submitted-at time) is kept in `Collected.identities` and in
  `<out>/.collect_report.json` (`read_report`), where grading finds it. OS junk
  (`__MACOSX/`, `.DS_Store`, `Thumbs.db`) is listed as ignored. A notebook renamed by the LMS
  (`02_qkv_attention-1.ipynb`) is fine: grading renames a single misnamed notebook.

Zip files are unpacked safely (`safe_zip`): an archive-wide limit (`MAX_MEMBERS` members,
`MAX_TOTAL_BYTES` unpacked) refuses the whole zip; one student's bad upload (an unsafe path, a
link, a file over `MAX_FILE_BYTES`, a name the disk refuses) is skipped, and listed in
`Collected.not_placed` with the student it came from, and everyone else is collected. A file the
disk refuses when it is placed (a file and a folder of one name once the lesson folder is
dropped) is listed there too.
From the exchange or a folder, a file past `MAX_FILE_BYTES`, or past `MAX_TOTAL_BYTES` of one
student's files, is not copied and is listed. Names are the students': `Collected.summary`
escapes their control characters (`plain_text.shown`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

from . import exchange
from .plain_text import shown
from .records import STUDENT_ID
from .safe_zip import (  # noqa: F401 (re-exported: collect's limits)
    MAX_FILE_BYTES,
    MAX_MEMBERS,
    MAX_TOTAL_BYTES,
    UnsafeZip,
    safe_extract,
)
from .timing import EXCHANGE_STAMP, iso
from .untrusted import Refused, copy_regular, size_text

JUNK = {"__MACOSX", ".DS_Store", "Thumbs.db", "desktop.ini", ".ipynb_checkpoints"}

CANVAS = re.compile(
    r"^(?P<name>[A-Za-z0-9.@-]+?)(?P<late>_LATE|_late)?_(?P<uid>\d+)_(?P<attachment>\d+)_(?P<file>.+)$"
)
MOODLE = re.compile(
    r"^(?P<student>[^/]+?)_(?P<uid>\d+)_assignsubmission_[a-z]+_?/(?:.*/)?(?P<file>[^/]+)$"
)
FOLDER = re.compile(r"^(?P<student>[^/]+)/(?P<file>.+)$")
NAMED = re.compile(r"^(?P<student>[A-Za-z0-9.@-]+)\.ipynb$")


REPORT = ".collect_report.json"


def identity(name: str, lms: str | None = None, lms_id: str | None = None, **more) -> dict:
    """Who a student is: the display name, the LMS that named them and its id there (None for a
    plain folder), plus what the source adds (`lms_file`: the LMS's file name; `late`;
    `submitted_at`: the exchange's time)."""
    return {"name": name, "lms": lms, "lms_id": lms_id, **more}


@dataclasses.dataclass
class Collected:
    out: Path
    kind: str  # "exchange", "nbgrader", "lms"
    students: dict[str, list[str]]  # student -> files placed
    unattributed: list[tuple[str, str]]  # (file, why)
    ignored: list[str]
    identities: dict[str, dict] = dataclasses.field(default_factory=dict)  # student -> identity
    ambiguous: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (file, why)
    not_placed: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (file, why)
    notes: list[str] = dataclasses.field(default_factory=list)  # what collect did not trust

    @property
    def problems(self) -> list[tuple[str, str]]:
        """Files placed nowhere that the instructor must place by hand (non-zero exit)."""
        return self.unattributed + self.ambiguous + self.not_placed

    def summary(self) -> str:
        lines = [f"collected {len(self.students)} students ({self.kind}) into {self.out}"]
        lines += [f"  NOT ATTRIBUTED: {name}: {why}" for name, why in self.unattributed]
        lines += [f"  AMBIGUOUS: {name}: {why}" for name, why in self.ambiguous]
        lines += [f"  NOT PLACED: {name}: {why}" for name, why in self.not_placed]
        lines += [f"  note: {note}" for note in self.notes]
        if self.ignored:
            lines.append(f"  ignored: {', '.join(self.ignored[:20])}")
        return "\n".join(shown(line) for line in lines)  # the names are the students'


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9.@-]+", "_", name.strip().lower()).strip("_")


def attribute(
    relative: str,
    assignment: str,
    pattern: re.Pattern | None = None,
    namesakes: frozenset[str] = frozenset(),
) -> tuple[str, str, dict] | str:
    """(student, file path inside the assignment folder, identity) for a path in a download, or
    why not.

    namesakes: Moodle names shared by several participant ids; those students get the id
    appended (`ada_lovelace_123`, `ada_lovelace_456`), so their work never merges.
    """
    base = relative.rsplit("/", 1)[-1]
    if pattern is not None:
        match = pattern.search(relative)
        if match:
            return (
                match["student"],
                (match.groupdict().get("file") or base),
                identity(match["student"]),
            )
    if "/" not in relative and (match := CANVAS.match(base)):
        who = identity(
            match["name"], "canvas", match["uid"], lms_file=base, late=bool(match["late"])
        )
        return match["uid"], match["file"], who
    if match := MOODLE.match(relative):
        slug = _slug(match["student"])
        student = f"{slug}_{match['uid']}" if slug in namesakes else slug
        folder = relative.split("/", 1)[0]
        return (
            student,
            match["file"],
            identity(match["student"], "moodle", match["uid"], lms_file=folder),
        )
    if match := FOLDER.match(relative):
        rest = match["file"]
        if rest.startswith(assignment + "/"):
            rest = rest[len(assignment) + 1 :]
        return match["student"], rest, identity(match["student"])
    if match := NAMED.match(relative):
        return match["student"], base, identity(match["student"])
    return "no student id in the name (patterns: Canvas, Moodle, <student>/<file>, <student>.ipynb; or pass --pattern)"


def collect(
    source: Path,
    assignment: str,
    out: Path,
    *,
    pattern: str | None = None,
    course_id: str = "transformer-lab",
) -> Collected:
    """Collect `source` (exchange, nbgrader layout, LMS zip or folder) into `out` (see module)."""
    source, out = Path(source).resolve(), Path(out).resolve()
    if not source.exists():
        raise SystemExit(f"no such file or folder: {source}")
    compiled = re.compile(pattern) if pattern else None
    if compiled is not None and "student" not in compiled.groupindex:
        raise SystemExit("--pattern needs a named group (?P<student>…)")
    if source.is_file():
        if not zipfile.is_zipfile(source):
            raise SystemExit(f"{source.name} is neither a folder nor a zip file")
        with tempfile.TemporaryDirectory(prefix="transformer-lab-collect-") as tmp:
            try:
                _, skipped = safe_extract(source, Path(tmp))
            except (UnsafeZip, zipfile.BadZipFile) as error:
                raise SystemExit(f"refusing the zip: {error}") from None
            return _collect_folder(Path(tmp), assignment, out, compiled, course_id, skipped)
    return _collect_folder(source, assignment, out, compiled, course_id)


def _collect_folder(
    source: Path, assignment: str, out: Path, pattern, course_id: str, skipped=()
) -> Collected:
    """A folder (an unpacked zip: `skipped` lists the members not unpacked, with why)."""
    inbound = next(
        (p for p in (source / course_id / "inbound", source / "inbound") if p.is_dir()), None
    )
    if inbound is None and source.name == "inbound":
        inbound = source
    if inbound is not None:
        return _collect_exchange(inbound, assignment, out)
    if pattern is None and any(source.glob(f"*/{assignment}/*.ipynb")):
        kind = "nbgrader"
    else:
        kind = "lms"
    placed: dict[str, dict[str, Path]] = {}
    claims: dict[str, dict[tuple, list[str]]] = {}  # student -> (lms, lms id) -> files
    identities: dict[str, dict] = {}
    unattributed, ignored, totals = [], [], {}
    paths = sorted(p for p in source.rglob("*") if p.is_file() or p.is_symlink())
    moodle_ids: dict[str, set[str]] = {}
    for path in paths:
        if match := MOODLE.match(path.relative_to(source).as_posix()):
            moodle_ids.setdefault(_slug(match["student"]), set()).add(match["uid"])
    namesakes = frozenset(name for name, ids in moodle_ids.items() if len(ids) > 1)
    for path in paths:
        relative = path.relative_to(source).as_posix()
        if JUNK & set(path.relative_to(source).parts):
            ignored.append(relative)
            continue
        if path.is_symlink():
            unattributed.append((relative, "a link (not followed)"))
            continue
        found = attribute(relative, assignment, pattern, namesakes)
        if isinstance(found, str):
            unattributed.append((relative, found))
            continue
        student, name, who = found
        if not STUDENT_ID.match(student):
            unattributed.append((relative, f"{student!r} is not a usable student id"))
            continue
        size = path.stat().st_size
        if too_much := _too_much(size, totals.get(student, 0)):
            unattributed.append((relative, f"{too_much}: not copied"))
            continue
        totals[student] = totals.get(student, 0) + size
        claims.setdefault(student, {}).setdefault((who["lms"], who["lms_id"]), []).append(relative)
        identities.setdefault(student, who)
        files = placed.setdefault(student, {})
        name = name.lstrip("/")
        if name in files and files[name].read_bytes() != path.read_bytes():
            stem, dot, ext = name.rpartition(".")
            name = f"{stem}-{hashlib.sha256(path.read_bytes()).hexdigest()[:8]}{dot}{ext}"
        files[name] = path
    ambiguous = []
    for student, owners in claims.items():
        if len(owners) > 1:  # one id, several people: place none of their files
            files = sorted(f for names in owners.values() for f in names)
            for name in files:
                others = ", ".join(f for f in files if f != name)
                ambiguous.append(
                    (name, f"student id {student!r} is also claimed by {others}: place by hand")
                )
            del placed[student], identities[student]
    not_placed = [
        (name, f"{_owner(name, assignment, pattern, namesakes)}: {why}") for name, why in skipped
    ]
    students = {}
    for student, files in placed.items():
        failed: list[tuple[Path, str]] = []
        students[student] = _place(out / student / assignment, files, failed)
        not_placed += [
            (path.relative_to(source).as_posix(), f"student {student}'s file: {why}")
            for path, why in failed
        ]
    result = Collected(
        out, kind, students, unattributed, ignored, identities, ambiguous, not_placed
    )
    _write_report(result)
    return result


def _owner(name: str, assignment: str, pattern, namesakes) -> str:
    """Whose file a zip member not unpacked was, in words."""
    found = attribute(name, assignment, pattern, namesakes)
    if isinstance(found, tuple) and STUDENT_ID.match(found[0]):
        return f"student {found[0]}'s file"
    return "a file of no known student"


def _place(dest: Path, files: dict[str, Path], failed: list | None = None) -> list[str]:
    """Replace `dest` with exactly these files (a re-collect leaves no stale ones). With
    `failed`, a file the disk refuses (a file and a folder of one name, a path too long) is
    left out and listed there as (its path, why); without it, the error is raised."""
    shutil.rmtree(dest, ignore_errors=True)
    try:
        dest.mkdir(parents=True)
    except OSError as error:  # the student's folder itself: none of the files
        if failed is None:
            raise
        failed += [(path, _refused(error)) for path in files.values()]
        return []
    placed = []
    for name, path in files.items():
        try:
            target = dest.joinpath(*PurePosixPath(name).parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)  # with its time (`timing.submitted_at`)
        except OSError as error:
            if failed is None:
                raise
            failed.append((path, _refused(error)))
        else:
            placed.append(name)
    return sorted(placed)


def _refused(error: OSError) -> str:
    if isinstance(error, (FileExistsError, NotADirectoryError, IsADirectoryError)):
        return (
            "could not be placed: one of the student's files has the name of one of their folders"
        )
    return f"could not be placed ({error.strerror or error})"


def _collect_exchange(inbound: Path, assignment: str, out: Path) -> Collected:
    """Each student's latest submission in the exchange (`exchange.scan`: links and folders
    another account wrote in a student's name refused, impossible times not taken), its
    regular files copied within the zip's limits (`_copy_exchange`)."""
    found = exchange.scan(inbound, assignment)
    students, identities = {}, {}
    for student, submission in sorted(found.latest.items()):
        identities[student] = identity(
            student, "exchange", student, submitted_at=iso(submission.when)
        )
        dest = out / student / assignment
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        students[student] = _copy_exchange(submission.folder, dest, found.refused)
        if note := exchange.distrust_stamp_file(dest, submission):
            students[student].remove(EXCHANGE_STAMP)
            found.notes.append(note)
    result = Collected(
        out, "exchange", students, found.refused, found.ignored, identities, notes=found.notes
    )
    _write_report(result)
    return result


def _copy_exchange(folder: Path, dest: Path, refused: list) -> list[str]:
    """Copy a submission's regular files into `dest` (made empty), within `MAX_FILE_BYTES` each
    and `MAX_TOTAL_BYTES` in all; list the others in `refused` (file, why). The files placed."""
    placed, total = [], 0
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if JUNK & set(relative.parts) or (path.is_dir() and not path.is_symlink()):
            continue
        named = f"{folder.name}/{relative.as_posix()}"
        target = dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            if too_much := _too_much(path.lstat().st_size, total):
                raise Refused(too_much)
            total += copy_regular(path, target, folder, MAX_FILE_BYTES)
        except (Refused, OSError) as why:
            refused.append((named, f"{why}: not copied"))
            continue
        placed.append(relative.as_posix())
    return placed


def _too_much(size: int, total: int) -> str | None:
    """Why a file of `size` bytes, after `total` bytes of its student's, is not copied: the zip's
    limits hold for every source (None: it is copied)."""
    if size > MAX_FILE_BYTES:
        return f"larger than {size_text(MAX_FILE_BYTES)} ({size_text(size)})"
    if total + size > MAX_TOTAL_BYTES:
        return f"the student's files pass {size_text(MAX_TOTAL_BYTES)} in all"
    return None


def _write_report(result: Collected) -> None:
    result.out.mkdir(parents=True, exist_ok=True)
    (result.out / REPORT).write_text(
        json.dumps(
            {
                "kind": result.kind,
                "students": result.students,
                "identities": result.identities,
                "unattributed": result.unattributed,
                "ambiguous": result.ambiguous,
                "not_placed": result.not_placed,
                "ignored": result.ignored,
                "notes": result.notes,
            },
            indent=1,
        )
    )


def read_report(folder: Path) -> dict:
    """What `collect` wrote into `folder` (empty lists and maps when it did not collect there)."""
    try:
        report = json.loads((Path(folder) / REPORT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        report = {}
    report = report if isinstance(report, dict) else {}
    for key in ("identities", "students"):
        report[key] = report.get(key) if isinstance(report.get(key), dict) else {}
    for key in ("unattributed", "ambiguous", "not_placed", "ignored", "notes"):
        report[key] = report.get(key) if isinstance(report.get(key), list) else []
    return report
