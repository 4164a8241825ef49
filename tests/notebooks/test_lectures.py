"""The lecture notebooks: they run top to bottom in quick mode, link only to files that exist,
and are committed without outputs.

Executing a notebook starts a kernel (seconds), so those tests are marked slow.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import nbformat
import pytest

from transformer_lab_grader.course import assignments

ROOT = Path(__file__).resolve().parents[2]
LECTURES = ROOT / "lectures"
NOTEBOOKS = sorted(LECTURES.glob("[0-9][0-9]_*.ipynb"))
START_HERE = LECTURES / "00_start_here.ipynb"
# Every lesson in solutions/ (folders NN_topic holding NN_topic.ipynb), in course order.
LESSONS = assignments(ROOT)

# [text](target) in markdown, and href="target" / src="target" in inline HTML
_LINK = re.compile(
    r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|(?:href|src)=\"([^\"]+)\""
)


def relative_links(nb) -> list[str]:
    """Every link target in the markdown cells that points into the file system (no URL, no anchor)."""
    targets = []
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for match in _LINK.finditer(cell.source):
            target = (match.group(1) or match.group(2)).split("#")[0]
            if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
                continue  # pure anchor, or http:, https:, mailto:, ...
            targets.append(target)
    return targets


def dead_links(nb, folder: Path) -> list[str]:
    return [t for t in relative_links(nb) if not (folder / t).resolve().exists()]


def cells_with_outputs(nb) -> list[int]:
    """Indices of code cells that carry outputs or an execution count."""
    return [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        and (cell.get("outputs") or cell.get("execution_count") is not None)
    ]


def execute(path: Path, timeout: int = 300) -> float:
    """Run a notebook with its folder as working directory; return the seconds it took."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.perf_counter()
    client.execute()
    return time.perf_counter() - start


@pytest.fixture
def quick_env(monkeypatch, tmp_path):
    """What CI runs under: quick mode, no display, no progress bars, a private student package."""
    monkeypatch.setenv("TRANSFORMER_LAB_QUICK", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("TRANSFORMER_LAB_NO_PROGRESS", "1")
    monkeypatch.setenv("TRANSFORMER_LAB_STUDENT_DIR", str(tmp_path / "student"))
    monkeypatch.setenv("TRANSFORMER_LAB_DEVICE", "cpu")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # two kernels share two cores under -n 2
    # a student, not the grader, whatever an earlier test in this worker left in the environment
    monkeypatch.delenv("TRANSFORMER_LAB_GRADING", raising=False)
    return tmp_path


def _notebook(*cells: tuple[str, str]):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    make = {"md": nbformat.v4.new_markdown_cell, "code": nbformat.v4.new_code_cell}
    nb.cells = [make[kind](source) for kind, source in cells]
    return nb


# ------------------------------------------------------------------------------------------------
# Static checks (fast)


def test_the_lectures_exist():
    names = {p.stem for p in NOTEBOOKS}
    assert {"00_start_here", "01_rnn_limits_lecture", "02_qkv_attention_lecture"} <= names


def lecture_name_problems(lectures: list[str], lessons: list[str]) -> list[str]:
    """Lectures whose file name is not NN_topic_lecture for a lesson NN_topic (JupyterLab shows a
    tab's file name only: a lecture named like its exercise gives two identical tabs)."""
    allowed = {"00_start_here"} | {f"{name}_lecture" for name in lessons}
    return sorted(set(lectures) - allowed)


def test_every_lecture_is_named_apart_from_its_exercise():
    assert lecture_name_problems([p.stem for p in NOTEBOOKS], LESSONS) == []


def test_mutant_lecture_named_like_its_exercise_is_caught():
    assert lecture_name_problems(["00_start_here", LESSONS[0]], LESSONS) == [LESSONS[0]]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    assert cells_with_outputs(nb) == [], f"{path.name}: clear the outputs before committing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_relative_links_point_to_files(path):
    nb = nbformat.read(path, as_version=4)
    dead = dead_links(nb, path.parent)
    assert not dead, f"{path.name} links to files that do not exist: {dead}"


def test_start_here_maps_every_lesson_in_order():
    nb = nbformat.read(START_HERE, as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    rows = [line for line in text.splitlines() if re.match(r"^\|\s*\d\d\s*\|", line)]
    assert [row.split("|")[1].strip() for row in rows] == [name[:2] for name in LESSONS]
    links = relative_links(nb)
    for row, name in zip(rows, LESSONS):
        for target in (f"{name}_lecture.ipynb", f"../exercises/{name}/{name}.ipynb"):
            if name in ("01_rnn_limits", "02_qkv_attention") or (LECTURES / target).exists():
                # written lessons are linked (whether the file is there: test_relative_links...)
                assert f"]({target})" in row, f"link {target} from the course map"
            else:
                assert "coming" in row and target not in links, f"{target} does not exist yet"


def readme_map_problems(readme: str, lessons: list[str]) -> list[str]:
    """What the README's course map lacks: a row per lesson, in order, linking its lecture and its
    exercise (empty when it is complete)."""
    rows = [line for line in readme.splitlines() if re.match(r"^\|\s*\d\d\s*\|", line)]
    problems = []
    if [row.split("|")[1].strip() for row in rows] != [name[:2] for name in lessons]:
        problems.append(f"rows {[row.split('|')[1].strip() for row in rows]}, lessons {lessons}")
    for row, name in zip(rows, lessons):
        for target in (f"lectures/{name}_lecture.ipynb", f"exercises/{name}/{name}.ipynb"):
            if f"]({target})" not in row:
                problems.append(f"the row of {name} does not link {target}")
    return problems


def test_readme_maps_every_lesson_in_order():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme_map_problems(readme, LESSONS) == []


def test_mutant_readme_row_missing_or_unlinked_is_caught():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    last = LESSONS[-1]
    without = "\n".join(
        line for line in readme.splitlines() if not line.startswith(f"| {last[:2]} |")
    )
    assert readme_map_problems(without, LESSONS)
    unlinked = readme.replace(f"](exercises/{last}/{last}.ipynb)", "](exercises/)")
    assert readme_map_problems(unlinked, LESSONS) == [
        f"the row of {last} does not link exercises/{last}/{last}.ipynb"
    ]


def test_start_here_explains_the_student_package():
    nb = nbformat.read(START_HERE, as_version=4)
    source = "\n".join(c.source for c in nb.cells)
    assert "student.progress()" in source
    assert "TRANSFORMER_LAB_QUICK" in source


# Mutants: the static checks catch what they are meant to catch.


def test_mutant_dead_link_is_found(tmp_path):
    (tmp_path / "there.ipynb").write_text("{}")
    nb = _notebook(
        (
            "md",
            "[ok](there.ipynb) [web](https://example.org) [anchor](#top) [gone](../nowhere/x.ipynb)",
        ),
        ("md", '<a href="missing.ipynb">html</a> ![img](there.ipynb#frag)'),
    )
    assert sorted(dead_links(nb, tmp_path)) == ["../nowhere/x.ipynb", "missing.ipynb"]


def test_mutant_outputs_are_found():
    nb = _notebook(("code", "1 + 1"), ("code", "print(2)"), ("md", "text"))
    assert cells_with_outputs(nb) == []
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="2\n")]
    nb.cells[0].execution_count = 3
    assert cells_with_outputs(nb) == [0, 1]


def test_mutant_course_map_row_missing_is_caught(monkeypatch):
    original = nbformat.read(START_HERE, as_version=4)
    broken = _notebook(
        *[
            ("md", c.source.replace("| 05 |", "| 5 |"))
            if c.cell_type == "markdown"
            else ("code", "")
            for c in original.cells
        ]
    )
    monkeypatch.setattr(nbformat, "read", lambda *a, **k: broken)
    with pytest.raises(AssertionError):
        test_start_here_maps_every_lesson_in_order()


# ------------------------------------------------------------------------------------------------
# Execution (slow): each lecture runs top to bottom in quick mode. Run times are measured by
# benchmarks/notebook_times.py (budgets are checked there, not in timed unit tests).


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_lecture_runs_in_quick_mode(path, quick_env):
    seconds = execute(path)
    print(f"{path.name}: {seconds:.1f} s")


@pytest.mark.slow
def test_mutant_failing_cell_is_reported(quick_env):
    from nbclient.exceptions import CellExecutionError

    path = quick_env / "broken.ipynb"
    nbformat.write(
        _notebook(
            ("code", "import os\nassert os.environ['TRANSFORMER_LAB_QUICK'] == '1'"),
            ("code", "1 / 0"),
        ),
        path,
    )
    with pytest.raises(CellExecutionError, match="ZeroDivisionError"):
        execute(path)


# ------------------------------------------------------------------------------------------------
# The payoff lectures run on a student's own package: the solutions of lessons 02–07, run as a
# student runs them, save their passing parts; lectures 07–11 then build their models from them.

BUILT_FROM_PARTS = {
    "07_cross_attention": "Transformer: built from YOUR",
    "08_gpt": "GPT: built from YOUR",
    "09_bert": "BERT: built from YOUR",
    "10_bart": "BART: built from YOUR",
    "11_vit": "ViT: built from YOUR",
    "13_clip": "CLIP: built from YOUR",
}


@pytest.fixture(scope="module")
def student_package(tmp_path_factory):
    from nbclient import NotebookClient

    folder = tmp_path_factory.mktemp("student")
    env = {
        "TRANSFORMER_LAB_QUICK": "1",
        "MPLBACKEND": "Agg",
        "TRANSFORMER_LAB_NO_PROGRESS": "1",
        "TRANSFORMER_LAB_STUDENT_DIR": str(folder / "pkg"),
        "TRANSFORMER_LAB_DEVICE": "cpu",
        "OMP_NUM_THREADS": "1",
    }
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        mp.delenv("TRANSFORMER_LAB_GRADING", raising=False)
        for lesson in LESSONS[1:7]:
            nb = nbformat.read(ROOT / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
            NotebookClient(
                nb,
                timeout=300,
                kernel_name="python3",
                resources={"metadata": {"path": str(folder)}},
            ).execute()
    return env


@pytest.mark.slow
@pytest.mark.parametrize("lesson", sorted(BUILT_FROM_PARTS))
def test_payoff_lectures_run_on_the_students_own_parts(lesson, student_package, monkeypatch):
    for key, value in student_package.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("TRANSFORMER_LAB_GRADING", raising=False)
    from nbclient import NotebookClient

    path = LECTURES / f"{lesson}_lecture.ipynb"
    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(LECTURES)}}
    ).execute()
    text = "\n".join(
        out.get("text", "") for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs
    )
    line = next((ln for ln in text.splitlines() if BUILT_FROM_PARTS[lesson] in ln), None)
    assert line is not None, (
        f"{lesson} did not build its model from the student's parts:\n{text[:2000]}"
    )
    assert "MultiHeadAttention" in line and "LayerNorm" in line, line


# ------------------------------------------------------------------------------------------------
# Lecture 13 runs on the student's zero_shot_classify, and its "your own prompt" widget takes the
# template its text offers (issue 29: `a pretty {word}` failed on the '{').

WIDGET_PROMPTS = ["a pretty {word}", "a handwritten four", "a {colour} {word}", "a pretty {word"]


@pytest.mark.slow
def test_lecture_13_uses_the_students_zero_shot_classify_and_takes_templates(quick_env):
    from nbclient import NotebookClient

    from transformer_lab import check, student

    def zero_shot_classify(image_features, class_features, logit_scale):
        prompts = class_features / class_features.norm(dim=-1, keepdim=True)
        classes = prompts.mean(dim=1)
        classes = classes / classes.norm(dim=-1, keepdim=True)
        image = image_features / image_features.norm(dim=-1, keepdim=True)
        return (logit_scale.exp() * image @ classes.T).softmax(dim=-1)

    check.zero_shot_classify(zero_shot_classify)  # saves it into quick_env's student package
    assert student._manifest()["zero_shot_classify"]
    nb = nbformat.read(LECTURES / "13_clip_lecture.ipynb", as_version=4)
    probe = "\n".join(f"search({p!r}); print('---')" for p in WIDGET_PROMPTS)
    nb.cells.append(nbformat.v4.new_code_cell(probe))
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(LECTURES)}}
    ).execute()
    text = "\n".join(
        out.get("text", "") for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs
    )
    assert "zero_shot_classify: using YOUR implementation" in text
    outputs = nb.cells[-1].outputs
    printed = "".join(out.get("text", "") for out in outputs).split("---")
    assert "zero-shot accuracy with 'a pretty {word}':" in printed[0]
    assert "the only placeholders are {word} and {digit}" in printed[2]  # a clear message
    assert "not in the caption alphabet" in printed[3]  # no closing brace: a search, refused
    assert "cannot use" not in printed[1] and "alphabet" not in printed[1]  # a plain search


def setup_cell_intro_problems(nb) -> list[str]:
    """Words just before the Colab setup cell that send the reader to "the next cell" as if it were
    another one (issue 29: the start page's "Run the next cell. It should print the versions…"
    stood over the setup cell, which prints nothing outside Colab)."""
    from transformer_lab.notebook_setup import SETUP_ID

    at = next((i for i, c in enumerate(nb.cells) if c.get("id") == SETUP_ID), None)
    if not at or nb.cells[at - 1].cell_type != "markdown":
        return []
    before = nb.cells[at - 1].source.strip().split("\n\n")[-1]  # its last paragraph
    if re.search(r"\bthe next (code )?cell\b|\bthe cell below\b", before, re.I):
        if "Colab setup" not in before:
            return [before]
    return []


@pytest.mark.parametrize(
    "path", [*NOTEBOOKS, *sorted(ROOT.glob("exercises/*/*.ipynb"))], ids=lambda p: p.stem
)
def test_the_words_before_the_setup_cell_fit_what_it_does(path):
    assert setup_cell_intro_problems(nbformat.read(path, as_version=4)) == []


def test_mutant_run_the_next_cell_over_the_setup_cell_is_caught():
    from transformer_lab.notebook_setup import SETUP_ID

    nb = _notebook(("md", "Run the next cell. It should print the versions."), ("code", "pass"))
    nb.cells[1]["id"] = SETUP_ID
    assert setup_cell_intro_problems(nb) != []
