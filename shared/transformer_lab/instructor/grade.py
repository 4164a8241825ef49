"""Grade a class: repair each submission, autograde it in its own sandbox, keep one record each.

    grade(course, "02_qkv_attention", Path("submissions"), out=Path("grades.csv"), jobs=2)

For every student folder `<submissions>/<student>/<assignment>/` (nbgrader's layout; a zip or an
LMS download is collected into that layout first, see `collect`):

1. `prepare_submission` (in the parent, which never runs student code): pick the notebook
   (rename a single misnamed one, ignore extra files), parse it (empty, invalid or truncated
   JSON -> ungradable with the reason), upgrade old nbformat, restore nbgrader metadata an editor
   stripped, note edited or deleted test cells (nbgrader puts them back from the gradebook).
2. One job per student in a private course copy under a temporary folder (autograder/*.py,
   exercises/<assignment>, a copy of a gradebook prepared once per run, the student's folder;
   never solutions/ or another student's files), boxed by `sandbox.run`: `nbgrader autograde`
   with the per-cell timeout, then `verify.verify` (the clean re-check), then the scores are read
   from the private gradebook; the job hands back one JSON record through a pipe.
3. The parent validates the record (schema, known grade ids, 0 <= score <= points from the
   released notebook) and writes it atomically to
   `<course>/autograder/work/results/<assignment>/<student>.json`; then the CSV.

A job that crashes, times out or returns garbage gives status "ungradable" with the reason:
never a missing row, never a silent 0. Re-running skips students whose record exists for the
same submission bytes (`submission_sha256`) unless `force`; a run killed half-way resumes.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import nbformat

from . import sandbox

RESULTS = Path("autograder") / "work" / "results"
STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$")
MAX_NOTEBOOK_BYTES = 50 * sandbox.MiB
OUTPUT_CHARS = 4000
CHECK_CALL = re.compile(r"\bcheck\.([A-Za-z_][A-Za-z0-9_]*)\s*\(")
HIDDEN = ("solutions", "autograder/work", "student_package", ".git")


# ----------------------------------------------------------------------------- the release


def released_notebooks(course: Path, assignment: str) -> dict[str, nbformat.NotebookNode]:
    """{notebook file name: released notebook} from exercises/<assignment>/."""
    folder = course / "exercises" / assignment
    paths = sorted(folder.glob("*.ipynb"))
    if not paths:
        lessons = sorted(p.name for p in (course / "exercises").glob("*") if p.is_dir())
        raise SystemExit(
            f"no released notebook in exercises/{assignment}/ (lessons: {', '.join(lessons)}); "
            "run `transformer-lab release` first"
        )
    return {p.name: nbformat.read(p, as_version=4) for p in paths}


def graded_cells(released: dict[str, nbformat.NotebookNode]) -> dict[str, dict]:
    """{grade_id: {"points", "notebook", "source", "exercises"}} for every graded cell."""
    cells = {}
    for name, nb in released.items():
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("grade") and "grade_id" in meta:
                cells[meta["grade_id"]] = {
                    "points": float(meta.get("points", 0)),
                    "notebook": name,
                    "source": cell.source,
                    "exercises": sorted(set(CHECK_CALL.findall(cell.source))),
                }
    return cells


# ----------------------------------------------------------------------------- repair


class Ungradable(Exception):
    """A submission that cannot be graded; the message is the reason the instructor sees."""


def submission_sha256(folder: Path) -> str:
    """Digest of every file in the student's folder (names and bytes), in a stable order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def read_notebook(path: Path) -> tuple[nbformat.NotebookNode, list[str]]:
    """Parse a submitted notebook; upgrade old formats. Raises Ungradable with the reason."""
    notes = []
    size = path.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        raise Ungradable(f"{path.name} is too large ({size / sandbox.MiB:.0f} MiB)")
    text = path.read_bytes().decode("utf-8", errors="replace")
    if not text.strip():
        raise Ungradable(f"{path.name} is an empty file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        cut = error.pos >= len(text.rstrip()) or error.msg.startswith("Unterminated string")
        end = " (the file is truncated)" if cut else ""
        raise Ungradable(f"{path.name} is not valid JSON{end}: {error}") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise Ungradable(f"{path.name} is JSON but not a notebook (no list of cells)")
    version = (data.get("nbformat"), data.get("nbformat_minor"))
    try:
        nb = nbformat.reads(text, as_version=4)
    except Exception as error:  # nbformat raises many kinds on malformed notebooks
        raise Ungradable(f"{path.name} is not a readable notebook: {error}") from None
    if version != (4, 5) or any("id" not in c for c in nb.cells):
        notes.append(f"upgraded from nbformat {version[0]}.{version[1]}")
        nb.nbformat, nb.nbformat_minor = 4, 5
        used = {c.get("id") for c in nb.cells}
        for i, cell in enumerate(nb.cells):
            if not cell.get("id"):
                new = f"cell-{i}"
                while new in used:
                    new += "x"
                cell["id"] = new
                used.add(new)
    for cell in nb.cells:
        if not isinstance(cell.get("source"), str):
            raise Ungradable(f"{path.name}: a cell's source is not text")
    return nb, notes


def repair(
    nb: nbformat.NotebookNode, released: nbformat.NotebookNode
) -> tuple[list[str], list[str]]:
    """Restore stripped nbgrader metadata from the release (cells matched by id, then by source);
    drop metadata naming grade ids the release does not have or that appear twice.
    Returns (notes, flags)."""
    notes, flags = [], []
    ref = {
        c.metadata["nbgrader"].get("grade_id"): c
        for c in released.cells
        if "nbgrader" in c.metadata
    }
    by_id = {c.get("id"): c for c in ref.values()}
    by_source = {c.source: c for c in ref.values()}
    seen, restored = set(), 0
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader")
        if isinstance(meta, dict) and meta.get("grade_id") in ref and meta["grade_id"] not in seen:
            seen.add(meta["grade_id"])
            continue
        if meta is not None:
            del cell.metadata["nbgrader"]
            flags.append(
                f"nbgrader metadata of cell {cell.get('id')!r} dropped (unknown or repeated grade id)"
            )
    for cell in nb.cells:
        if "nbgrader" in cell.metadata:
            continue
        match = by_id.get(cell.get("id")) or by_source.get(cell.source)
        if match is not None and match.metadata["nbgrader"]["grade_id"] not in seen:
            cell.metadata["nbgrader"] = json.loads(json.dumps(match.metadata["nbgrader"]))
            seen.add(match.metadata["nbgrader"]["grade_id"])
            restored += 1
    if restored:
        notes.append(f"repaired: {restored} cells' nbgrader metadata restored from the release")
    for grade_id, cell in ref.items():
        meta = cell.metadata["nbgrader"]
        if not (meta.get("grade") and meta.get("locked")):
            continue
        mine = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
        if not mine:
            notes.append(f"test cell {grade_id} was missing (restored from the release)")
        elif _without_hidden(mine[0].source) != _without_hidden(cell.source):
            flags.append(f"locked test cell {grade_id} was edited (graded with the released one)")
    return notes, flags


def _without_hidden(source: str) -> str:
    """A test cell's source without its hidden block (a solution notebook has one)."""
    return re.sub(
        r"[ \t]*### BEGIN HIDDEN TESTS\n.*?### END HIDDEN TESTS[^\n]*\n?", "", source, flags=re.S
    ).strip()


def prepare_submission(
    folder: Path, released: dict[str, nbformat.NotebookNode], dest: Path
) -> list[str] | tuple:
    """Write the repaired notebooks of `folder` into `dest`. Returns (notes, flags);
    raises Ungradable."""
    notes, flags = [], []
    files = sorted(
        p
        for p in folder.rglob("*")
        if p.is_file() and ".ipynb_checkpoints" not in p.parts and not p.name.startswith(".")
    )
    links = [p for p in files if p.is_symlink()]
    files = [p for p in files if not p.is_symlink()]
    notebooks = [p for p in files if p.suffix == ".ipynb" and p.parent == folder]
    chosen: dict[str, Path] = {}
    for name in released:
        if (folder / name) in notebooks:
            chosen[name] = folder / name
    missing = [name for name in released if name not in chosen]
    others = [p for p in notebooks if p.name not in released]
    if missing:
        if len(missing) == 1 and len(others) == 1:
            chosen[missing[0]] = others[0]
            notes.append(f"renamed {others[0].name} to {missing[0]}")
            others = []
        elif not notebooks:
            listing = ", ".join(p.name for p in files[:10]) or "no files"
            raise Ungradable(f"no notebook in the submission ({listing})")
        else:
            raise Ungradable(
                f"expected {', '.join(missing)}; found several other notebooks "
                f"({', '.join(p.name for p in others)}): cannot tell which one to grade"
            )
    extra = [p for p in files if p not in chosen.values()] + links
    if extra:
        shown = ", ".join(str(p.relative_to(folder)) for p in extra[:10])
        notes.append(f"ignored extra files: {shown}" + (" …" if len(extra) > 10 else ""))
    dest.mkdir(parents=True, exist_ok=True)
    for name, path in chosen.items():
        nb, read_notes = read_notebook(path)
        fixed_notes, fixed_flags = repair(nb, released[name])
        notes += read_notes + fixed_notes
        flags += fixed_flags
        nbformat.write(nb, dest / name)
    return notes, flags


# ----------------------------------------------------------------------------- the run


def results_dir(course: Path, assignment: str) -> Path:
    return course / RESULTS / assignment


def record_path(course: Path, assignment: str, student: str) -> Path:
    return results_dir(course, assignment) / f"{student}.json"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def ungradable(
    student: str,
    assignment: str,
    cells: dict,
    reason: str,
    *,
    sha: str = "",
    flags: list[str] | None = None,
    seconds: float = 0.0,
) -> dict:
    """The record of a submission that could not be graded: score 0, every cell failed."""
    return {
        "student": student,
        "assignment": assignment,
        "status": "ungradable",
        "reason": reason,
        "score": 0.0,
        "max_score": sum(c["points"] for c in cells.values()),
        "cells": {
            gid: {
                "score": 0.0,
                "max_score": c["points"],
                "passed": False,
                "exercises": c["exercises"],
                "output": "",
            }
            for gid, c in cells.items()
        },
        "flags": list(flags or []),
        "submission_sha256": sha,
        "seconds": round(seconds, 2),
        "graded_at": _now(),
    }


def validate_record(raw: object, student: str, assignment: str, cells: dict) -> dict:
    """Check a record against the release; raises ValueError. Totals are recomputed here."""
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    if raw.get("student") != student or raw.get("assignment") != assignment:
        raise ValueError("student or assignment does not match the job")
    if raw.get("status") not in ("graded", "ungradable"):
        raise ValueError(f"unknown status {raw.get('status')!r}")
    got = raw.get("cells")
    if not isinstance(got, dict) or set(got) != set(cells):
        raise ValueError("graded cells differ from the release's")
    clean = {}
    for gid, cell in got.items():
        points = cells[gid]["points"]
        score = cell.get("score") if isinstance(cell, dict) else None
        if not isinstance(score, (int, float)) or not 0 <= score <= points:
            raise ValueError(f"cell {gid}: score {score!r} outside [0, {points:g}]")
        output = cell.get("output", "")
        clean[gid] = {
            "score": float(score),
            "max_score": points,
            "passed": bool(cell.get("passed")) and score == points,
            "exercises": cells[gid]["exercises"],
            "output": output[:OUTPUT_CHARS] if isinstance(output, str) else "",
        }
    flags = raw.get("flags", [])
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise ValueError("flags is not a list of strings")
    reason = raw.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise ValueError("reason is not text")
    record = dict(raw)
    record.update(
        cells=clean,
        flags=[f[:500] for f in flags[:50]],
        reason=reason[:2000] if reason else None,
        score=0.0 if raw["status"] == "ungradable" else sum(c["score"] for c in clean.values()),
        max_score=sum(c["points"] for c in cells.values()),
    )
    return record


def _load_valid(path: Path, student: str, assignment: str, cells: dict) -> dict | None:
    try:
        return validate_record(
            json.loads(path.read_text(encoding="utf-8")), student, assignment, cells
        )
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def find_students(submissions: Path, assignment: str) -> tuple[dict[str, Path], list[str]]:
    """{student: folder} in nbgrader layout, and the folders that could not be used (why)."""
    found, problems = {}, []
    for folder in sorted(
        p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith(".")
    ):
        if not STUDENT_ID.match(folder.name):
            problems.append(f"{folder.name!r}: not a usable student id (letters, digits, . _ @ -)")
        elif (folder / assignment).is_dir():
            found[folder.name] = folder / assignment
        else:
            found[folder.name] = folder  # graded as "no <assignment> folder" below
    for path in sorted(
        p for p in submissions.iterdir() if p.is_file() and not p.name.startswith(".")
    ):
        problems.append(f"{path.name}: a file at the top level (expected <student>/{assignment}/…)")
    return found, problems


def _package_repo() -> Path:
    return Path(__file__).resolve().parents[3]


def _prepare_base(course: Path, assignment: str, run_dir: Path) -> Path:
    """A gradebook with the assignment registered (nbgrader generate_assignment on a copy)."""
    base = run_dir / "base"
    (base / "autograder").mkdir(parents=True)
    for path in (course / "autograder").glob("*.py"):
        shutil.copy(path, base / "autograder" / path.name)
    source = course / "solutions" / assignment
    if not source.is_dir():
        raise SystemExit(f"no solutions/{assignment}/: grading needs the source notebook")
    shutil.copytree(source, base / "solutions" / assignment)
    (base / "exercises").mkdir()
    env = _env(base, run_dir / "base-home")
    result = subprocess.run(
        [sys.executable, "-m", "nbgrader", "generate_assignment", assignment, "--force"],
        cwd=base / "autograder",
        env=env,
        capture_output=True,
        text=True,
    )
    db = base / "autograder" / "work" / "gradebook.db"
    if result.returncode != 0 or not db.is_file():
        raise RuntimeError(f"could not prepare the gradebook:\n{result.stdout}\n{result.stderr}")
    return db


def _env(course: Path, home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    keep = ("PATH", "LANG", "LC_ALL", "TERM", "TZ", "VIRTUAL_ENV", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env["PATH"] = os.pathsep.join(
        [str(Path(sys.executable).parent), env.get("PATH", "/usr/bin:/bin")]
    )
    env.update(
        HOME=str(home),
        TRANSFORMER_LAB_COURSE_ROOT=str(course),
        TRANSFORMER_LAB_STUDENT_DIR=str(home / "student_package"),
        TRANSFORMER_LAB_QUICK=os.environ.get("TRANSFORMER_LAB_QUICK", "1"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        JUPYTER_CONFIG_DIR=str(home / "jupyter"),
        IPYTHONDIR=str(home / "ipython"),
        MPLCONFIGDIR=str(home / "mpl"),
        PYTHONDONTWRITEBYTECODE="1",
    )
    env.update(sandbox.GRADING_ENV)
    return env


class Grader:
    """One grading run of one assignment; `run()` returns every record of the assignment."""

    def __init__(
        self,
        course: Path,
        assignment: str,
        submissions: Path,
        *,
        out: Path | None = None,
        jobs: int = 1,
        force: bool = False,
        students: list[str] | None = None,
        limits: sandbox.Limits | None = None,
        isolate: bool = True,
        quiet: bool = False,
        verify: bool = True,
    ):
        self.course = Path(course).resolve()
        self.assignment = assignment
        self.submissions = Path(submissions).resolve()
        self.out = out
        self.jobs = max(1, int(jobs))
        self.force = force
        self.only = set(students) if students else None
        self.limits = limits or sandbox.Limits()
        self.isolate = isolate
        self.quiet = quiet
        self.verify = verify  # False only for courses whose tests are not transformer_lab checks
        self.released = released_notebooks(self.course, assignment)
        self.cells = graded_cells(self.released)
        self.lock = threading.Lock()
        self._base: Path | None = None
        self._count = 0
        self.run_dir: Path | None = None

    def say(self, message: str) -> None:
        if not self.quiet:
            print(message, flush=True)

    def run(self) -> list[dict]:
        from . import export

        if not self.submissions.exists():
            raise SystemExit(f"no such file or folder: {self.submissions}")
        if self.submissions.is_file() or not any(self.submissions.glob(f"*/{self.assignment}")):
            from .collect import collect

            target = self.course / "autograder" / "work" / "collected" / self.assignment
            collected = collect(self.submissions, self.assignment, target)
            self.say(collected.summary())
            self.submissions = target
        found, problems = find_students(self.submissions, self.assignment)
        for problem in problems:
            self.say(f"not graded: {problem}")
        if self.only is not None:
            unknown = sorted(self.only - set(found))
            for student in unknown:
                self.say(f"not graded: no submission from {student}")
            found = {s: f for s, f in found.items() if s in self.only}
        todo = []
        for student, folder in found.items():
            sha = submission_sha256(folder)
            old = _load_valid(
                record_path(self.course, self.assignment, student),
                student,
                self.assignment,
                self.cells,
            )
            if old is not None and old.get("submission_sha256") == sha and not self.force:
                self.say(
                    f"{student}: already graded ({old['score']:g}/{old['max_score']:g}), skipped"
                )
                continue
            todo.append((student, folder, sha))
        if todo:
            self.run_dir = Path(tempfile.mkdtemp(prefix="transformer-lab-grade-"))
            try:
                with concurrent.futures.ThreadPoolExecutor(self.jobs) as pool:
                    futures = [pool.submit(self._one, *job) for job in todo]
                    for future in concurrent.futures.as_completed(futures):
                        future.result()
            finally:
                if not os.environ.get("TRANSFORMER_LAB_KEEP_GRADING_DIR"):
                    shutil.rmtree(self.run_dir, ignore_errors=True)
        records = export.load_records(self.course, self.assignment)
        if self.out is not None:
            export.write_csv(records, Path(self.out), {self.assignment: self.cells})
        try:
            export.merge_into_gradebook(self.course, records)
        except Exception as error:  # the records and the CSV are what counts
            self.say(f"warning: could not merge into the course gradebook: {error}")
        return records

    def base_gradebook(self) -> Path:
        with self.lock:
            if self._base is None:
                self._base = _prepare_base(self.course, self.assignment, self.run_dir)
            return self._base

    def _one(self, student: str, folder: Path, sha: str) -> dict:
        start = time.monotonic()
        try:
            record = self._grade(student, folder, sha)
        except Exception as error:  # a bug of ours must not lose the student either
            record = ungradable(
                student, self.assignment, self.cells, f"internal grader error: {error!r}", sha=sha
            )
            traceback.print_exc()
        record["seconds"] = round(time.monotonic() - start, 2)
        record["submission_sha256"] = sha
        record["graded_at"] = _now()
        if record["status"] != "graded":  # no stale autograded notebook for feedback
            stale = self.course / "autograder" / "work" / "autograded" / student / self.assignment
            shutil.rmtree(stale, ignore_errors=True)
        with self.lock:
            _write_atomic(
                record_path(self.course, self.assignment, student),
                json.dumps(record, indent=1, sort_keys=True),
            )
            if self.out is not None:
                from . import export

                export.write_csv(
                    export.load_records(self.course, self.assignment),
                    Path(self.out),
                    {self.assignment: self.cells},
                )
        reason = f" ({record['reason']})" if record.get("reason") else ""
        self.say(
            f"{student}: {record['status']} {record['score']:g}/{record['max_score']:g}{reason}"
        )
        return record

    def _grade(self, student: str, folder: Path, sha: str) -> dict:
        if folder.name != self.assignment:
            return ungradable(
                student,
                self.assignment,
                self.cells,
                f"no {self.assignment}/ folder in the submission",
                sha=sha,
            )
        with self.lock:  # short job folder names: Unix socket paths are limited to 107 bytes
            self._count += 1
            job = self.run_dir / "jobs" / str(self._count)
        course = job / "course"
        submitted = course / "autograder" / "work" / "submitted" / student / self.assignment
        try:
            notes, flags = prepare_submission(folder, self.released, submitted)
        except Ungradable as why:
            return ungradable(student, self.assignment, self.cells, str(why), sha=sha)
        (course / "autograder").mkdir(parents=True, exist_ok=True)
        for path in (self.course / "autograder").glob("*.py"):
            shutil.copy(path, course / "autograder" / path.name)
        shutil.copytree(
            self.course / "exercises" / self.assignment, course / "exercises" / self.assignment
        )
        shutil.copy(self.base_gradebook(), course / "autograder" / "work" / "gradebook.db")
        # The clean re-check (verify) needs the hidden tests: the test cells only, no solution.
        tests_only = course / "solutions" / self.assignment
        tests_only.mkdir(parents=True)
        for name, nb in self.test_cells_only().items():
            nbformat.write(nb, tests_only / name)
        spec = {
            "student": student,
            "assignment": self.assignment,
            "course": str(course),
            "cells": self.cells,
            "notebooks": sorted(self.released),
            "cell_timeout": self.limits.cell_timeout,
            "wall_seconds": self.limits.wall_seconds,
            "memory_bytes": self.limits.memory_bytes,
            "verify": self.verify,
        }
        (job / "spec.json").write_text(json.dumps(spec))
        env = _env(course, job / "home")
        hide = [Path(tempfile.gettempdir())] if self._tmp_hideable() else []
        hide += [root / sub for root in {self.course, _package_repo()} for sub in HIDDEN]
        hide += [self.run_dir]
        if not _is_ancestor(self.submissions, [self.course, _package_repo(), Path(sys.prefix)]):
            hide.append(self.submissions)
        result = sandbox.run(
            [sys.executable, "-m", __name__, "--job", str(job / "spec.json")],
            cwd=course / "autograder",
            env=env,
            limits=self.limits,
            hide=hide,
            readonly=sorted({self.course, _package_repo()}),
            keep=job,
            isolate=self.isolate,
        )
        if result.warning:
            flags.append(result.warning)
        if result.timed_out:
            return ungradable(
                student,
                self.assignment,
                self.cells,
                f"timeout: grading took longer than {self.limits.wall_seconds:g} s "
                "(wall-clock cap per notebook)",
                sha=sha,
                flags=flags,
            )
        try:
            record = validate_record(
                json.loads(result.record.decode("utf-8")), student, self.assignment, self.cells
            )
        except (ValueError, UnicodeDecodeError) as error:
            tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
            why = _crash_reason(result.returncode, "\n".join(tail), self.limits)
            return ungradable(
                student,
                self.assignment,
                self.cells,
                f"{why} (no valid result: {error})",
                sha=sha,
                flags=flags,
            )
        record["flags"] = flags + record["flags"]
        self._keep_autograded(course, student)
        reasons = [r for r in [*notes, record.get("reason")] if r]
        record["reason"] = "; ".join(reasons) if reasons else None
        return record

    def test_cells_only(self) -> dict[str, nbformat.NotebookNode]:
        """The source notebooks reduced to their graded test cells (hidden tests included)."""
        result = {}
        for path in sorted((self.course / "solutions" / self.assignment).glob("*.ipynb")):
            nb = nbformat.read(path, as_version=4)
            nb.cells = [
                c
                for c in nb.cells
                if c.metadata.get("nbgrader", {}).get("grade")
                and not c.metadata["nbgrader"].get("solution")
            ]
            result[path.name] = nb
        return result

    def _keep_autograded(self, job_course: Path, student: str) -> None:
        """Copy the job's autograded notebooks into the course (for feedback), only if they
        parse as notebooks of sane size."""
        src = job_course / "autograder" / "work" / "autograded" / student / self.assignment
        dest = self.course / "autograder" / "work" / "autograded" / student / self.assignment
        keep = {}
        for name in self.released:
            path = src / name
            if (
                path.is_file()
                and not path.is_symlink()
                and path.stat().st_size < MAX_NOTEBOOK_BYTES
            ):
                try:
                    keep[name] = nbformat.reads(path.read_text(encoding="utf-8"), as_version=4)
                except Exception:
                    continue
        if keep:
            shutil.rmtree(dest, ignore_errors=True)
            dest.mkdir(parents=True)
            for name, nb in keep.items():
                nbformat.write(nb, dest / name)

    def _tmp_hideable(self) -> bool:
        tmp = Path(tempfile.gettempdir()).resolve()
        return not _is_ancestor(
            tmp, [_package_repo(), Path(sys.prefix).resolve(), Path(sys.executable).resolve()]
        )


def _is_ancestor(folder: Path, paths: list[Path]) -> bool:
    return any(p == folder or folder in p.parents for p in paths)


def _crash_reason(returncode: int | None, tail: str, limits: sandbox.Limits) -> str:
    if returncode is not None and returncode < 0:
        name = (
            signal.Signals(-returncode).name
            if -returncode in signal.Signals._value2member_map_
            else returncode
        )
        if -returncode == signal.SIGXCPU:
            return "CPU time limit reached"
        return f"the grading job was killed by {name}"
    if "MemoryError" in tail:
        return f"memory limit reached ({limits.memory_bytes / sandbox.GiB:g} GiB)"
    return f"the grading job failed (exit {returncode}): {tail[-300:]}"


def grade(
    course: Path, assignment: str, submissions: Path, out: Path | None = None, **options
) -> list[dict]:
    """Grade every submission of `assignment` (see the module docstring); returns the records."""
    return Grader(course, assignment, submissions, out=out, **options).run()


# ----------------------------------------------------------------------------- inside the job


def _cell_output(cell) -> str:
    parts = []
    for output in cell.get("outputs", []):
        kind = output.get("output_type")
        if kind == "stream":
            parts.append(output.get("text", ""))
        elif kind == "error":
            parts.append(f"{output.get('ename', '')}: {output.get('evalue', '')}")
        elif kind in ("execute_result", "display_data"):
            parts.append(str(output.get("data", {}).get("text/plain", "")))
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", "".join(parts))
    return text[:OUTPUT_CHARS]


DIED = ("DeadKernelError", "Kernel died", "kernel died", "KernelDied")


TIMEOUT_MARKS = ("CellTimeoutError", "TimeoutError", "KeyboardInterrupt")
MEMORY_MARKS = ("MemoryError", "DefaultCPUAllocator: can't allocate", "std::bad_alloc")


def _read_results(course: Path, spec: dict) -> tuple[dict, dict, list[str]]:
    """Per-cell scores from the private gradebook, outputs and notes from the autograded
    notebook (a cell stopped by the per-cell timeout, a cell out of memory)."""
    from nbgrader.api import Gradebook

    student, assignment, cells = spec["student"], spec["assignment"], spec["cells"]
    scores, outputs, notes = {}, {}, []
    with Gradebook(f"sqlite:///{course / 'autograder' / 'work' / 'gradebook.db'}") as gb:
        for gid, cell in cells.items():
            row = gb.find_grade(gid, Path(cell["notebook"]).stem, assignment, student)
            scores[gid] = float(row.score or 0.0)
    for name in spec["notebooks"]:
        path = course / "autograder" / "work" / "autograded" / student / assignment / name
        nb = nbformat.read(path, as_version=4)
        for i, c in enumerate(nb.cells):
            if c.cell_type != "code":
                continue
            gid = c.metadata.get("nbgrader", {}).get("grade_id")
            output = _cell_output(c)
            errors = [
                o.get("ename", "") for o in c.get("outputs", []) if o.get("output_type") == "error"
            ]
            label = gid or f"{i + 1} (id {c.get('id', '?')})"
            if any(e in TIMEOUT_MARKS for e in errors):
                notes.append(f"cell {label} hit the per-cell timeout")
            if any(m in output for m in MEMORY_MARKS):
                notes.append(
                    f"cell {label} ran out of memory (cap {spec['memory_bytes'] / sandbox.GiB:g} GiB)"
                )
            if gid in cells:
                outputs[gid] = output
    return scores, outputs, notes


class _VerifyTimeout(Exception):
    pass


@contextlib.contextmanager
def _alarm(seconds: float):
    """Raise _VerifyTimeout in this (main) thread after `seconds`."""

    def ring(signum, frame):
        raise _VerifyTimeout()

    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _kill_the_rest() -> None:
    """In our own PID namespace (we are PID 1), SIGKILL every other process in it."""
    if os.getpid() == 1:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _job(spec_path: str) -> None:
    """Runs inside the sandbox: autograde, verify, read the private gradebook, report on fd."""
    spec = json.loads(Path(spec_path).read_text())
    fd = int(os.environ.pop("TRANSFORMER_LAB_RESULT_FD"))
    os.set_inheritable(fd, False)  # nbgrader and the student's kernel never get the pipe
    student, assignment, cells = spec["student"], spec["assignment"], spec["cells"]
    course = Path(spec["course"])
    start = time.monotonic()
    args = [
        "autograde",
        assignment,
        "--student",
        student,
        "--create",
        "--force",
        # Unix sockets in the job's own folder: no TCP ports, so no clashes between jobs.
        "--KernelManager.transport=ipc",
        f"--KernelManager.ip={course.parent / 'k'}",
    ]
    if spec.get("cell_timeout"):
        args.append(f"--Execute.timeout={int(spec['cell_timeout'])}")
    budget = spec["wall_seconds"] - 15  # the parent kills the job at wall_seconds
    log = course.parent / "autograde.log"
    with open(log, "w+") as out:
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "nbgrader", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=max(budget * 0.7, 10),
            )
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
        out.seek(0)
        text = out.read()[-100_000:]
    _kill_the_rest()  # a student's background process must not touch the gradebook we read
    flags: list[str] = []
    record = None
    reason = None
    scores, outputs, notes = {}, {}, []
    if code == "timeout":
        reason = (
            f"timeout: nbgrader autograde ran past the wall-clock cap ({spec['wall_seconds']:g} s)"
        )
    else:
        try:
            scores, outputs, notes = _read_results(course, spec)
        except Exception as error:  # nothing usable: say why, as precisely as the log allows
            if any(word in text for word in DIED):
                reason = "the kernel died (the notebook crashed Python: os._exit, a segfault, ...)"
            else:
                lines = [ln for ln in text.splitlines() if "rror" in ln][-3:]
                reason = (
                    f"nbgrader could not grade the notebook (exit {code}): {error}; "
                    + " | ".join(lines)[-600:]
                )
    if reason is None:
        verdicts, withheld = None, None
        remaining = budget - (time.monotonic() - start) - 5
        try:
            if not spec.get("verify", True):
                raise RuntimeError("switched off for this run")
            from .verify import verify

            (course.parent / "verify").mkdir(exist_ok=True)
            submitted = course / "autograder" / "work" / "submitted" / student / assignment
            with _alarm(remaining):
                checked = verify(
                    assignment,
                    submitted / spec["notebooks"][0],
                    course.parent / "verify",
                    course=course,
                    timeout=max(remaining - 10, 1.0),
                    memory=spec["memory_bytes"],
                    cell_timeout=spec.get("cell_timeout") or 240.0,
                )
            verdicts = checked.get("cells", {})
            flags += [str(f) for f in checked.get("flags", []) if str(f) not in flags]
        except _VerifyTimeout:
            # Student code can make the re-check hang (an endless loop only outside nbgrader):
            # nbgrader's points are then not trusted.
            withheld = (
                f"the clean re-check timed out ({max(remaining, 0):.0f} s left of the "
                f"{spec['wall_seconds']:g} s cap): nbgrader's points withheld"
            )
            notes.append(withheld)
            flags.append(withheld)
        except Exception as error:
            flags.append(f"verification unavailable: {type(error).__name__}: {error}"[:300])
        record = {
            "student": student,
            "assignment": assignment,
            "status": "graded",
            "reason": "; ".join(notes) or None,
            "cells": {},
            "flags": flags,
        }
        for gid, cell in cells.items():
            score = min(max(scores.get(gid, 0.0), 0.0), cell["points"])
            output = outputs.get(gid, "")
            if withheld:
                score, output = 0.0, f"{withheld}\n{output}"
            elif verdicts is not None:
                verdict = verdicts.get(gid, {"passed": False, "message": "not re-checked"})
                if score > 0 and not verdict.get("passed"):
                    score = 0.0
                    flags.append(  # E2: the wording of verify.tampering_flags
                        f"suspected tampering: {gid} passed in the notebook but not on a "
                        "clean re-check"
                    )
                    output = f"clean re-check failed: {verdict.get('message', '')}\n{output}"
            record["cells"][gid] = {
                "score": score,
                "passed": score == cell["points"],
                "output": output[:OUTPUT_CHARS],
            }
    if record is None:
        record = {
            "student": student,
            "assignment": assignment,
            "status": "ungradable",
            "reason": reason,
            "cells": {gid: {"score": 0.0, "passed": False, "output": ""} for gid in cells},
            "flags": flags,
        }
    _kill_the_rest()
    os.write(fd, json.dumps(record).encode())
    os.close(fd)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--job":
        _job(sys.argv[2])
    else:
        raise SystemExit("usage: python -m transformer_lab.instructor.grade --job SPEC.json")
