"""Grade every solution and every untouched exercise notebook through the real pipeline, and
save what the grader writes, so that two versions of the grading code can be diffed.

    .venv/bin/python benchmarks/grade_snapshot.py OUT_DIR [--lessons 02_qkv_attention ...]
    diff -r /work/notes/grading_before OUT_DIR

A trial course (solutions/, exercises/, autograder/*.py of this repository, generated afresh) is
made in a temporary folder; per lesson, two students are graded with `transformer-lab grade
--jobs 1`: `solution` (the solutions/ notebook) and `exercise` (the released notebook, as a
student who changed nothing hands it in). Then `export`, `feedback` and `report` run on it. Only
the command-line interface is used, so the script runs unchanged on any version of the code.

OUT_DIR receives, per lesson: the grade command's CSV and stdout, the result records (JSON),
the feedback pages, and the class report (report.md, summary.json); and the course-wide
export CSV. Values that change run to run (times, dates, temporary paths) are replaced by
placeholders; everything else is kept byte for byte.
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
        [sys.executable, "-m", "transformer_lab.cli", "--course-dir", str(course), *args],
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="folder for the snapshot")
    parser.add_argument("--lessons", nargs="*", help="default: every lesson in solutions/")
    args = parser.parse_args()
    lessons = args.lessons or sorted(
        p.name for p in (REPO / "solutions").iterdir() if (p / f"{p.name}.ipynb").is_file()
    )
    snapshot(args.out.resolve(), lessons)


if __name__ == "__main__":
    main()
