"""The class report: what the class got right, what it got wrong, and what to re-teach.

``build_report(course, assignment, out_dir)`` reads the result records that grading wrote
(``<course>/autograder/work/results/<assignment>/<student>.json``, one per student) and the
released notebook (``exercises/<assignment>/``, for the graded cells, their points and the checks
they call), then writes into ``out_dir``:

- ``report.html`` and ``report.md``: the same tables, for a browser and for a text editor;
- ``score_distribution.png``: a histogram of the graded students' scores, the maximum marked;
- ``summary.json``: every number of the report, for other tools.

Counting rules (all counts are *students*, never cells or lines of output):
- pass rate of a graded cell = graded students who passed it / graded students;
- pass rate of an exercise = graded students who passed every cell calling its check / graded;
- a *named mistake* is the catalogued mistake a failed check matched (the record's failure
  keeps its key, `failures`; the report shows the catalogue's sentence,
  ``transformer_lab.check.EXERCISES[name].mistake(key).sentence``); a student who makes it in
  several cells counts once;
- an *unnamed failure* is a failed cell whose failure names no catalogued mistake, grouped by its
  kind (the exception type; a failed check split into wrong shape, wrong values, wrong
  gradient, ...).
Ungradable students are counted apart (with their reasons) and left out of the scores and rates.
Students whose submissions are byte for byte the same (`identical_submissions`) are listed for
the instructor to look at, never scored differently. Records graded against another version of
the lesson (`records.stale_records`) are listed with why, to regrade with `--force`. A record file that cannot be read is listed under "Problems", never fatal.
"""

from __future__ import annotations

import html
import json
import math
import re
import statistics
from collections import Counter, defaultdict
from pathlib import Path

import nbformat

from . import failures, manual, term
from .notebook_format import check_calls, is_graded, is_test_cell, nbgrader_meta
from .records import load_class_records, load_records, stale_records
from .submission import submission_sha256

REPORT_FILES = ("report.html", "report.md", "score_distribution.png", "summary.json")
TOP_N = 5


# ----------------------------------------------------------------------------------------------
# Inputs: result records and the released notebook.


def released_cells(course: Path, assignment: str, catalogue: dict | None = None) -> dict:
    """{grade_id: {"max_score": points, "exercises": [check names], "by_hand": bool}} in
    notebook order.

    Read from the released notebook(s) in ``exercises/<assignment>/``: every cell with points,
    and the ``check.<name>(...)`` calls in its source (restricted to the catalogue when given);
    ``by_hand``: an answer graded by hand (not a test cell), which has no mistakes to count.
    """
    cells = {}
    for path in sorted((Path(course) / "exercises" / assignment).glob("*.ipynb")):
        try:
            nb = nbformat.read(path, as_version=4)
        except Exception:  # a broken release is reported by the counts, not fatal here
            continue
        for cell in nb.cells:
            if not is_graded(cell):
                continue
            meta = nbgrader_meta(cell)
            names = check_calls(cell.source)
            if catalogue is not None:
                names = [n for n in names if n in catalogue]
            cells[meta["grade_id"]] = {
                "max_score": float(meta.get("points", 0) or 0),
                "exercises": names,
                "by_hand": not is_test_cell(cell),
            }
    return cells


def mistake_catalogue(assignment: str | None = None) -> dict[str, dict[str, str]]:
    """{exercise name: {mistake key: sentence}} from transformer_lab.check (all lessons)."""
    from transformer_lab import check

    return {name: {m.key: m.sentence for m in ex.mistakes} for name, ex in check.EXERCISES.items()}


def _lesson_exercises(assignment: str) -> list[str]:
    """The check names registered for the assignment's lesson number (``02_x`` -> lesson "02")."""
    from transformer_lab import check

    number = assignment.split("_")[0]
    return [name for name, ex in check.EXERCISES.items() if ex.lesson == number]


# ----------------------------------------------------------------------------------------------
# Counting the failures the records keep (`failures`: fields, never a parsed output).


def _mistake(failure: dict, exercise: str, catalogue: dict) -> tuple[str, str] | None:
    """(exercise, sentence) of the catalogued mistake a failure names; the catalogue's sentence
    for its key (the one the report shows), else the sentence the failure kept."""
    if not failure or not failure.get("mistake"):
        return None
    sentence = catalogue.get(exercise, {}).get(failure["mistake"]) or failure.get("sentence")
    return (exercise, sentence) if sentence else None


def count_mistakes(records: dict, cells: dict, catalogue: dict, fallback: list[str]):
    """Students per named mistake and per unnamed failure kind, over the graded students.

    Returns (named, unnamed): named maps (exercise, sentence) -> set of students, unnamed maps
    (exercise or "-", kind) -> set of students. A student counts once per mistake, however many of
    their cells show it. A failure's exercise is the check that failed (a cell may call several);
    a failure that names none (a plain assert, a dead process) counts under the cell's exercise.
    """
    named: dict[tuple[str, str], set[str]] = defaultdict(set)
    unnamed: dict[tuple[str, str], set[str]] = defaultdict(set)
    for student, record in records.items():
        if record["status"] != "graded":
            continue
        for grade_id, cell in record["cells"].items():
            if cell["passed"] or cells.get(grade_id, {}).get("by_hand"):
                continue
            exercises = (
                cell["exercises"] or cells.get(grade_id, {}).get("exercises") or list(fallback)
            )
            failure = cell.get("failure")
            exercise = (failure or {}).get("exercise") or (
                exercises[0] if len(exercises) == 1 else "-"
            )
            mistake = _mistake(failure, exercise, catalogue)
            if mistake:
                named[mistake].add(student)
            else:
                unnamed[(exercise, failures.kind(failure))].add(student)
    return named, unnamed


def _reason_group(reason: str | None) -> str:
    """Ungradable reasons grouped by their first clause ("timeout: cell 3 ran 240 s" -> "timeout")."""
    text = (reason or "no reason recorded").strip()
    head = re.split(r"[:(\n]", text, maxsplit=1)[0].strip()
    return (head or text)[:80]


# ----------------------------------------------------------------------------------------------
# The summary (all numbers of the report).


def summarise(
    assignment: str,
    records: dict,
    cells: dict,
    catalogue: dict,
    problems: list[str] | None = None,
    fallback: list[str] | None = None,
    top_n: int = TOP_N,
    untouched: str = "",
) -> dict:
    """Every number of the report as plain JSON-ready data. `untouched`: the digest of the
    released notebook handed in as it is (students who submitted that are not duplicates)."""
    problems = list(problems or [])
    graded = {s: r for s, r in records.items() if r["status"] == "graded"}
    ungradable = {s: r for s, r in records.items() if r["status"] == "ungradable"}
    max_score = sum(c["max_score"] for c in cells.values()) if cells else 0.0
    if not max_score and records:
        max_score = max(r["max_score"] for r in records.values())
    for student, record in records.items():
        if cells and record["max_score"] != max_score:
            problems.append(
                f"{student}: max_score {record['max_score']:g} differs from the released "
                f"notebook's {max_score:g}"
            )
    scores = sorted(r["score"] for r in graded.values())
    n = len(graded)

    # Cells: those of the released notebook in order, then any only the records know.
    cell_ids = list(cells)
    for record in graded.values():
        cell_ids += [g for g in record["cells"] if g not in cell_ids]
    cell_rows = []
    for grade_id in cell_ids:
        passed = sum(1 for r in graded.values() if r["cells"].get(grade_id, {}).get("passed"))
        exercises = cells.get(grade_id, {}).get("exercises") or sorted(
            {e for r in graded.values() for e in r["cells"].get(grade_id, {}).get("exercises", [])}
        )
        cell_rows.append(
            {
                "grade_id": grade_id,
                "exercises": list(exercises),
                "max_score": cells.get(grade_id, {}).get("max_score"),
                "passed": passed,
                "graded": n,
                "pass_rate": passed / n if n else None,
            }
        )

    # Exercises: passed when every cell calling its check passed.
    exercise_cells: dict[str, list[str]] = defaultdict(list)
    for row in cell_rows:
        for exercise in row["exercises"]:
            exercise_cells[exercise].append(row["grade_id"])
    named, unnamed = count_mistakes(records, cells, catalogue, fallback or [])
    exercise_rows = []
    for exercise, ids in exercise_cells.items():
        passed = sum(
            1 for r in graded.values() if all(r["cells"].get(g, {}).get("passed") for g in ids)
        )
        mistakes = sorted(
            ((len(who), sentence) for (ex, sentence), who in named.items() if ex == exercise),
            key=lambda item: (-item[0], item[1]),
        )
        exercise_rows.append(
            {
                "exercise": exercise,
                "cells": ids,
                "passed": passed,
                "graded": n,
                "pass_rate": passed / n if n else None,
                "top_mistakes": [{"sentence": s, "students": c} for c, s in mistakes[:top_n]],
            }
        )

    top = sorted(
        (
            {"exercise": ex, "sentence": sentence, "students": len(who)}
            for (ex, sentence), who in named.items()
        ),
        key=lambda item: (-item["students"], item["exercise"], item["sentence"]),
    )
    unnamed_rows = sorted(
        (
            {"exercise": ex, "kind": kind, "students": len(who)}
            for (ex, kind), who in unnamed.items()
        ),
        key=lambda item: (-item["students"], item["exercise"], item["kind"]),
    )
    reasons = Counter(_reason_group(r["reason"]) for r in ungradable.values())
    return {
        "assignment": assignment,
        "max_score": max_score,
        "students": len(records),
        "graded": n,
        "ungradable": len(ungradable),
        "ungradable_reasons": dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
        "ungradable_students": {s: r["reason"] for s, r in sorted(ungradable.items())},
        "mean": statistics.fmean(scores) if scores else None,
        "median": statistics.median(scores) if scores else None,
        "full_marks": sum(1 for s in scores if max_score and s >= max_score),
        "scores": {s: r["score"] for s, r in sorted(graded.items())},
        "cells": cell_rows,
        "exercises": exercise_rows,
        "top_mistakes": top[: 2 * top_n],
        "unnamed_failures": unnamed_rows,
        "flagged": {s: r["flags"] for s, r in sorted(records.items()) if r["flags"]},
        "identical": identical_submissions(records, untouched),
        "problems": problems,
        "changes": regrades(records),
    }


def enrolled_class(summary: dict, roster: dict[str, str], records: dict) -> dict:
    """Pass rates over the enrolled class (the roster): who has no record, and per exercise how
    many of the enrolled passed."""
    missing = [student for student in roster if student not in records]
    n = len(roster)
    return {
        "enrolled": n,
        "missing": missing,
        "exercises": [
            {
                "exercise": e["exercise"],
                "passed": e["passed"],
                "pass_rate": e["passed"] / n if n else None,
            }
            for e in summary["exercises"]
        ],
    }


def regrades(records: dict) -> list[dict]:
    """Every student graded more than once: the previous score, the score now, and why."""
    changes = []
    for student, record in sorted(records.items()):
        if record.get("history"):
            before = record["history"][-1]
            changes.append(
                {
                    "student": student,
                    "before": before.get("score"),
                    "after": record["score"],
                    "why": record.get("why") or "not recorded",
                    "submitted_at": record.get("submitted_at"),
                    "gradings": len(record["history"]) + 1,
                }
            )
    return changes


def identical_submissions(records: dict, untouched: str = "") -> list[list[str]]:
    """Groups of students (sorted) whose submissions are byte for byte the same (the same
    `submission_sha256`: every file, names and bytes), the untouched release left out. Listed for
    the instructor to look at; scores are never changed for it."""
    by_digest: dict[str, list[str]] = {}
    for student, record in sorted(records.items()):
        digest = record.get("submission_sha256") or ""
        if digest and digest != untouched:
            by_digest.setdefault(digest, []).append(student)
    return sorted(group for group in by_digest.values() if len(group) > 1)


# ----------------------------------------------------------------------------------------------
# Outputs.


def plot_scores(scores: list[float], max_score: float, path: Path, title: str = "") -> Path:
    """Histogram of the scores with the maximum marked (matplotlib's Agg canvas, no display)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 3.6), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    top = max([max_score, *scores, 1.0])
    if all(float(x).is_integer() for x in [*scores, max_score]):  # whole points: whole-point bins
        width = float(max(1, math.ceil(top / 25)))
    else:
        width = top / 20 if top > 10 else 0.5
    edges = [i * width - width / 2 for i in range(int(top / width) + 2)]
    if scores:
        ax.hist(scores, bins=edges, color="#4c72b0", edgecolor="white")
    ax.axvline(max_score, color="#c44e52", linestyle="--", label=f"max score {max_score:g}")
    if scores:
        mean = sum(scores) / len(scores)
        ax.axvline(mean, color="#555555", linestyle=":", label=f"mean {mean:.1f}")
    ax.set_xlabel("score")
    ax.set_ylabel("students")
    ax.set_xlim(edges[0], max(edges[-1], top + width / 2))
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title(title or f"{len(scores)} graded students")
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path


def _pct(value) -> str:
    return "–" if value is None else f"{100 * value:.0f}%"


def _num(value) -> str:
    return "–" if value is None else f"{value:.2f}".rstrip("0").rstrip(".")


def _sections(summary: dict) -> list[tuple[str, str, list[str], list[list[str]]]]:
    """The report as (title, intro, table header, table rows) sections, shared by MD and HTML."""
    s = summary
    sections = [
        (
            "Overview",
            "",
            ["measure", "value"],
            [
                ["students with a record", str(s["students"])],
                ["graded", str(s["graded"])],
                ["ungradable", str(s["ungradable"])],
                ["max score", _num(s["max_score"])],
                ["mean score (graded)", _num(s["mean"])],
                ["median score (graded)", _num(s["median"])],
                ["full marks", str(s["full_marks"])],
                ["flagged for review", str(len(s["flagged"]))],
            ],
        ),
        (
            "Pass rate per exercise",
            "Passed = every test cell calling the exercise's check passed; rate over graded students.",
            ["exercise", "cells", "passed", "pass rate"],
            [
                [e["exercise"], ", ".join(e["cells"]), f"{e['passed']} / {e['graded']}"]
                + [_pct(e["pass_rate"])]
                for e in s["exercises"]
            ],
        ),
        (
            "Pass rate per graded cell",
            "",
            ["grade id", "points", "checks", "passed", "pass rate"],
            [
                [c["grade_id"], _num(c["max_score"]), ", ".join(c["exercises"])]
                + [f"{c['passed']} / {c['graded']}", _pct(c["pass_rate"])]
                for c in s["cells"]
            ],
        ),
        (
            "Most frequent named mistakes (what to re-teach)",
            "Students whose failed output names the catalogued mistake (each student counted once).",
            ["students", "exercise", "mistake"],
            [[str(m["students"]), m["exercise"], m["sentence"]] for m in s["top_mistakes"]],
        ),
    ]
    for e in s["exercises"]:
        if e["top_mistakes"]:
            sections.append(
                (
                    f"Top mistakes: {e['exercise']}",
                    "",
                    ["students", "mistake"],
                    [[str(m["students"]), m["sentence"]] for m in e["top_mistakes"]],
                )
            )
    sections += [
        (
            "Unnamed failures",
            "Failed cells that name no catalogued mistake, by the kind of error (students).",
            ["students", "exercise", "kind"],
            [[str(u["students"]), u["exercise"], u["kind"]] for u in s["unnamed_failures"]],
        ),
        (
            "Ungradable submissions",
            "These students appear in the export with the reason; they have no score here. "
            + "; ".join(f"{reason}: {count}" for reason, count in s["ungradable_reasons"].items()),
            ["student", "reason"],
            [[student, reason or ""] for student, reason in s["ungradable_students"].items()],
        ),
        (
            "Flagged submissions (review by hand)",
            "",
            ["student", "flags"],
            [[student, "; ".join(flags)] for student, flags in s["flagged"].items()],
        ),
        (
            "Identical submissions (review by hand)",
            "Students whose submitted files are byte for byte the same (the untouched release left "
            "out). Their scores are not changed for it; two honest students rarely hand in the "
            "same bytes, so look at each group.",
            ["students"],
            [[", ".join(group)] for group in s.get("identical", [])],
        ),
        (
            "The enrolled class (roster)",
            "Pass rates over every enrolled student; a student with no submission has passed "
            "nothing. Missing: " + (", ".join(s["roster"]["missing"]) or "nobody") + "."
            if s.get("roster")
            else "No roster: add one to autograder/work/term.toml to count the enrolled class.",
            ["exercise", "passed / enrolled", "pass rate"],
            [
                [e["exercise"], f"{e['passed']} / {s['roster']['enrolled']}", _pct(e["pass_rate"])]
                for e in (s.get("roster") or {}).get("exercises", [])
            ],
        ),
        (
            "Regraded (what changed and why)",
            "Students graded more than once: the score before, the score now, why it was graded "
            "again (a new submission, a changed lesson, --force) and when the graded submission "
            "was handed in.",
            ["student", "before", "now", "why", "submitted at", "gradings"],
            [
                [
                    c["student"],
                    _num(c["before"]),
                    _num(c["after"]),
                    c["why"],
                    c["submitted_at"] or "–",
                    str(c["gradings"]),
                ]
                for c in s.get("changes", [])
            ],
        ),
        (
            "Stale records (regrade with --force)",
            "Graded against another version of the lesson than the one released now.",
            ["student", "why"],
            [[student, why] for student, why in s.get("stale", {}).items()],
        ),
        (
            "Problems",
            "Record files that could not be used.",
            ["problem"],
            [[p] for p in s["problems"]],
        ),
    ]
    return sections


def _md_cell(text: str) -> str:
    text = " ".join(str(text).split()).replace("&", "&amp;").replace("<", "&lt;")
    return text.replace(">", "&gt;").replace("|", "\\|")


def write_markdown(summary: dict, path: Path, plot_name: str) -> Path:
    lines = [
        f"# Class report: {summary['assignment']}",
        "",
        f"![score distribution]({plot_name})",
        "",
    ]
    for title, intro, header, rows in _sections(summary):
        lines += [f"## {title}", ""]
        if intro:
            lines += [intro, ""]
        if not rows:
            lines += ["(none)", ""]
            continue
        lines.append("| " + " | ".join(_md_cell(h) for h in header) + " |")
        lines.append("|" + "---|" * len(header))
        lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def write_html(summary: dict, path: Path, plot_name: str) -> Path:
    e = html.escape
    title = f"Class report: {summary['assignment']}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;margin-bottom:1em}"
        "td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}"
        "th{background:#f3f3f3}</style></head><body>",
        f"<h1>{e(title)}</h1>",
        f'<p><img src="{e(plot_name)}" alt="score distribution"></p>',
    ]
    for section, intro, header, rows in _sections(summary):
        parts.append(f"<h2>{e(section)}</h2>")
        if intro:
            parts.append(f"<p>{e(intro)}</p>")
        if not rows:
            parts.append("<p>(none)</p>")
            continue
        parts.append("<table>")
        if any(header):
            parts.append("<tr>" + "".join(f"<th>{e(h)}</th>" for h in header) + "</tr>")
        parts += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows]
        parts.append("</table>")
    parts.append("</body></html>")
    path.write_text("\n".join(parts) + "\n", encoding="utf-8")
    return path


def build_report(course: Path, assignment: str, out_dir: Path) -> Path:
    """Write report.html, report.md, score_distribution.png and summary.json; return report.html."""
    course, out_dir = Path(course).resolve(), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    catalogue = mistake_catalogue()
    records, problems = load_class_records(course, assignment)
    manual.overlay(course, assignment, records.values())
    problems += manual.outdated(records)
    cells = released_cells(course, assignment, catalogue)
    if not cells:
        problems.append(f"no released notebook with graded cells in exercises/{assignment}/")
    released = course / "exercises" / assignment
    summary = summarise(
        assignment,
        records,
        cells,
        catalogue,
        problems,
        fallback=_lesson_exercises(assignment),
        untouched=submission_sha256(released) if released.is_dir() else "",
    )
    stale = stale_records(course, assignment, load_records(course, assignment))  # raw: digests
    summary["stale"] = dict(sorted(stale.items()))
    settings = term.load(course)
    if settings.roster is not None:
        summary["roster"] = enrolled_class(summary, settings.roster, records)
    plot = plot_scores(
        list(summary["scores"].values()),
        summary["max_score"],
        out_dir / "score_distribution.png",
        title=f"{assignment}: {summary['graded']} graded, {summary['ungradable']} ungradable",
    )
    (out_dir / "summary.json").write_text(
        json.dumps(summary, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    write_markdown(summary, out_dir / "report.md", plot.name)
    return write_html(summary, out_dir / "report.html", plot.name)
