"""Grade every solution and every untouched exercise notebook through the real pipeline, and
save what the grader writes, so that two versions of the grading code can be diffed.

    .venv/bin/python benchmarks/grade_snapshot.py OUT_DIR [--lessons 02_qkv_attention ...]
    .venv/bin/python benchmarks/grade_snapshot.py OUT_DIR --compare /work/notes/grading_before

A trial course (solutions/, exercises/, autograder/*.py of this repository, generated afresh) is
made in a temporary folder; per lesson, two students are graded with `transformer-lab grade
--jobs 1`: `solution` (the solutions/ notebook) and `exercise` (the released notebook, as a
student who changed nothing hands it in). Then `export`, `feedback` and `report` run on it. Only
the command-line interface is used, so the script runs unchanged on any version of the code.

OUT_DIR receives, per lesson: the grade command's CSV and stdout, the result records (JSON),
the feedback pages, and the class report (report.md, summary.json); and the course-wide
export CSV. Values that change run to run (dates, the course's and the submissions' temporary
paths) are replaced by placeholders when saving; `--compare` also replaces measured times, widget
ids and the environment's paths (`VARIES`) before it diffs; everything else must be identical.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VOLATILE_KEYS = ("graded_at", "seconds")
# ISO dates and times, nbgrader's feedback timestamp, durations in seconds printed by commands.
TIMESTAMP = re.compile(
    r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[+-]\d{2}:?\d{2}|Z| ?UTC)?"
)


def _cli(course: Path, *args: str, check: bool = True) -> str:
    env = dict(os.environ, HF_HUB_OFFLINE="1", MPLBACKEND="Agg", OMP_NUM_THREADS="1")
    result = subprocess.run(
        [sys.executable, "-m", "transformer_lab_grader.cli", "--course-dir", str(course), *args],
        capture_output=True,
        text=True,
        env=env,
    )
    if check and result.returncode != 0:
        raise SystemExit(
            f"transformer-lab {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
        )
    # The first line names the course (a version that prints it): the same temporary copy.
    lines = result.stdout.splitlines(keepends=True)
    return "".join(lines[1:] if lines and lines[0].startswith("course: ") else lines)


def _scrub(text: str, course: Path, tmp: Path) -> str:
    text = text.replace(str(course), "<COURSE>").replace(str(tmp), "<TMP>")
    text = text.replace(str(REPO), "<REPO>")
    return TIMESTAMP.sub("<TIME>", text)


def _record(path: Path, course: Path, tmp: Path) -> str:
    record = json.loads(path.read_text(encoding="utf-8"))
    for key in VOLATILE_KEYS:
        record.pop(key, None)
    return _scrub(json.dumps(record, indent=1, sort_keys=True), course, tmp) + "\n"


def make_course(tmp: Path, lessons: list[str]) -> Path:
    course = tmp / "course"
    for lesson in lessons:
        for part in ("solutions", "exercises"):
            shutil.copytree(REPO / part / lesson, course / part / lesson)
    (course / "autograder").mkdir(parents=True)
    for path in (REPO / "autograder").glob("*.py"):
        shutil.copy(path, course / "autograder" / path.name)
    _cli(course, "generate", *lessons)
    return course


def snapshot(out: Path, lessons: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="grade-snapshot-") as tmp:
        tmp = Path(tmp)
        course = make_course(tmp, lessons)
        for lesson in lessons:
            subs = tmp / "subs" / lesson
            for student, part in (("solution", "solutions"), ("exercise", "exercises")):
                folder = subs / student / lesson
                folder.mkdir(parents=True)
                shutil.copy(course / part / lesson / f"{lesson}.ipynb", folder)
            dest = out / lesson
            dest.mkdir(exist_ok=True)
            csv = tmp / f"{lesson}.csv"
            said = _cli(course, "grade", lesson, str(subs), "--out", str(csv), "--jobs", "1")
            (dest / "grade_stdout.txt").write_text(_scrub(said, course, tmp))
            (dest / "grades.csv").write_text(_scrub(csv.read_text(), course, tmp))
            results = course / "autograder" / "work" / "results" / lesson
            for path in sorted(results.glob("*.json")):
                (dest / f"record_{path.name}").write_text(_record(path, course, tmp))
            pages = _cli(course, "feedback", lesson).split()
            for page in pages:
                page = Path(page)
                name = f"feedback_{page.parent.parent.name}_{page.name}"
                (dest / name).write_text(_scrub(page.read_text(encoding="utf-8"), course, tmp))
            report_dir = tmp / "reports" / lesson
            _cli(course, "report", lesson, "--out-dir", str(report_dir))
            for name in ("report.md", "summary.json", "report.html"):
                text = (report_dir / name).read_text(encoding="utf-8")
                (dest / f"report_{name}").write_text(_scrub(text, course, tmp))
            png = (report_dir / "score_distribution.png").read_bytes()
            (dest / "report_png.sha256").write_text(hashlib.sha256(png).hexdigest() + "\n")
            print(f"{lesson}: {said.strip()}", flush=True)
        export = tmp / "export.csv"
        _cli(course, "export", "--out", str(export))
        (out / "export.csv").write_text(_scrub(export.read_text(), course, tmp))


# What differs between two runs of the same code, and is replaced before comparing: measured
# times (the checks' "(...; 0.09 s)", the notebooks' own timings, a record's phases), the Python
# environment's and the grader's temporary folders, widget ids, and how nbclient happened to split
# one cell's printed output into stream messages (one <pre> block or two in the feedback page).
VARIES = [
    (re.compile(r" *\d+(?:\.\d+)? (ms|s)\b"), r" <T> \1"),  # padded to a width
    (re.compile(re.escape(sys.prefix) + r"|/\S+?/(?:\.venv|[a-z]+-venv)(?=/lib/)"), "<VENV>"),
    (re.compile(r"transformer-lab-grade-\w+"), "transformer-lab-grade-<X>"),
    # a record's measured phases (`timings`, `cpu_timings`: seconds, as numbers)
    (re.compile(r'"(autograde|imports|results|student)": \d+(?:\.\d+)?'), r'"\1": <T>'),
    (
        re.compile(
            r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\b[0-9a-f]{32}\b"
        ),
        "<ID>",
    ),
    (
        re.compile(
            r"</pre>\n</div>\n</div>\n<div class=\"output_area\">\n<div class=\"prompt\"></div>\n"
            r"<div class=\"output_subarea output_stream output_stdout output_text\">\n<pre>"
        ),
        "",
    ),
]


# In the feedback pages only (renders of the notebook, with its own printed measurements): object
# addresses, and the numbers of timing tables (two decimals, no unit: "forward (ms)" columns).
VARIES_IN_PAGES = [
    (re.compile(r" at 0x[0-9a-f]+"), " at 0x<ADDR>"),
    (re.compile(r"\b\d+\.\d\d\b"), "<N>"),
    (re.compile(r"speed-up x\d+\.\d\b"), "speed-up x<R>"),
]


def normalise(text: str, page: bool = False) -> str:
    for pattern, replacement in VARIES + (VARIES_IN_PAGES if page else []):
        text = pattern.sub(replacement, text)
    return text


def compare(before: Path, after: Path) -> int:
    """Diff two snapshots file by file after `normalise`; returns the number of files that
    differ (a file only in one snapshot counts)."""
    import difflib

    names = sorted(
        {str(p.relative_to(before)) for p in before.rglob("*") if p.is_file()}
        | {str(p.relative_to(after)) for p in after.rglob("*") if p.is_file()}
    )
    differ = 0
    for name in names:
        a, b = before / name, after / name
        if not (a.is_file() and b.is_file()):
            print(f"only in {'before' if a.is_file() else 'after'}: {name}")
            differ += 1
            continue
        page = name.endswith(".html") and "feedback_" in name
        old, new = normalise(a.read_text(), page), normalise(b.read_text(), page)
        if old != new:
            differ += 1
            diff = difflib.unified_diff(
                old.splitlines(), new.splitlines(), f"before/{name}", f"after/{name}", lineterm=""
            )
            print("\n".join(list(diff)[:40]))
    print(f"{len(names)} files, {len(names) - differ} identical after normalising, {differ} differ")
    return differ


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="folder for the snapshot (with --compare: AFTER)")
    parser.add_argument("--lessons", nargs="*", help="default: every lesson in solutions/")
    parser.add_argument("--compare", type=Path, metavar="BEFORE", help="diff BEFORE against out")
    args = parser.parse_args()
    if args.compare:
        raise SystemExit(1 if compare(args.compare, args.out) else 0)
    lessons = args.lessons or sorted(
        p.name for p in (REPO / "solutions").iterdir() if (p / f"{p.name}.ipynb").is_file()
    )
    snapshot(args.out.resolve(), lessons)


if __name__ == "__main__":
    main()
