"""The built book, read as files (no browser): no solution or hidden test anywhere in it, every
internal link and anchor resolves, every figure is an opaque image with alt text, and every
notebook page has its Colab and .ipynb download links. Skips without a built book (conftest.py).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
import pytest
from bs4 import BeautifulSoup
from PIL import Image

from transformer_lab.notebook_setup import colab_url, project

ROOT = Path(__file__).resolve().parents[2]
LECTURES = sorted(p.stem for p in (ROOT / "lectures").glob("[0-9][0-9]_*.ipynb"))
EXERCISES = sorted(p.parent.name for p in (ROOT / "exercises").glob("*/*.ipynb"))
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
_REGION = re.compile(r"### BEGIN (SOLUTION|HIDDEN TESTS)\n(.*?)### END \1", re.S)
TEXT_SUFFIXES = {".html", ".js", ".txt", ".ipynb", ".md", ".json", ".py", ".css"}


def _squash(text: str) -> str:
    return " ".join(text.split())


def public_lines() -> set[str]:
    """Every line of what the book may show: the lectures and exercises (sources)."""
    lines = set()
    for path in [*(ROOT / "lectures").glob("*.ipynb"), *(ROOT / "exercises").glob("*/*.ipynb")]:
        for cell in nbformat.read(path, as_version=4).cells:
            lines.update(_squash(line) for line in cell.source.splitlines())
    return lines


def secret_lines(root: Path = ROOT) -> list[str]:
    """Distinctive lines of the solutions' solution and hidden-test regions: long enough to be
    specific, and found nowhere in the lectures or the exercises."""
    public = public_lines()
    secrets = set()
    for path in sorted((root / "solutions").glob("*/*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            for match in _REGION.finditer(cell.source):
                for line in match.group(2).splitlines():
                    line = _squash(line)
                    if len(line) >= 30 and not line.startswith("#") and line not in public:
                        secrets.add(line)
    return sorted(secrets)


@functools.cache
def _soup(path: Path) -> BeautifulSoup:
    return BeautifulSoup(path.read_text(encoding="utf-8", errors="replace"), "html.parser")


def page_text(path: Path) -> str:
    """A file's text as a reader or a search engine sees it (HTML without its tags, squashed)."""
    raw = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".html":
        raw = _soup(path).get_text(" ")
    elif path.suffix == ".ipynb":  # the cells' text, not their JSON-escaped form
        raw = "\n".join(c.source for c in nbformat.reads(raw, as_version=4).cells)
    return _squash(raw)


def leaks(site: Path, secrets: list[str]) -> list[str]:
    """'file: what' for every nbgrader marker or secret line found in the site's text files."""
    found = []
    for path in sorted(site.rglob("*")):
        if not path.is_file() or path.suffix not in TEXT_SUFFIXES:
            continue
        raw = path.read_text(encoding="utf-8", errors="replace")
        text = page_text(path)
        rel = path.relative_to(site).as_posix()
        found += [f"{rel}: {m}" for m in MARKERS if m in raw or m in text]
        found += [f"{rel}: {s}" for s in secrets if s in text]
    return found


@pytest.fixture(scope="module")
def secrets():
    lines = secret_lines()
    assert len(lines) >= 20, "too few distinctive solution lines to test for leaks"
    return lines


def test_no_solution_or_hidden_test_in_the_site(site, secrets):
    assert leaks(site, secrets) == []


@pytest.mark.parametrize("how", ["solution page", "highlighted code", "source copy"])
def test_the_leak_check_finds_a_leak(tmp_path, secrets, how):
    """Mutants: a site that shows a solution region, as a page, as highlighted code split into
    spans, or as a copied source file, is caught."""
    secret = secrets[0]
    if how == "solution page":
        (tmp_path / "page.html").write_text(f"<pre>### BEGIN SOLUTION\n{secret}</pre>")
    elif how == "highlighted code":
        spans = "".join(f'<span class="n">{w}</span> ' for w in secret.split())
        (tmp_path / "page.html").write_text(f"<div class='highlight'><pre>{spans}</pre></div>")
    else:
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(secret)])
        (tmp_path / "_sources").mkdir()
        nbformat.write(nb, tmp_path / "_sources" / "x.ipynb")
    assert leaks(tmp_path, secrets)


def broken_links(site: Path, pages: list[Path]) -> list[str]:
    """Every href/src inside the site whose file, or whose #anchor in that file, is missing."""
    ids: dict[Path, set[str]] = {}

    def anchors(path: Path) -> set[str]:
        if path not in ids:
            ids[path] = {t["id"] for t in _soup(path).find_all(id=True)}
        return ids[path]

    broken = []
    for page in pages:
        for tag in _soup(page).find_all(["a", "img", "link", "script"]):
            target = tag.get("href") or tag.get("src")
            if not target or urlsplit(target).scheme or target.startswith("//"):
                continue
            parts = urlsplit(target)
            path = (page.parent / unquote(parts.path) if parts.path else page).resolve()
            if not path.is_file() or site.resolve() not in path.parents:
                broken.append(f"{page.relative_to(site)} -> {target}")
            elif parts.fragment and path.suffix == ".html":
                if unquote(parts.fragment) not in anchors(path):
                    broken.append(f"{page.relative_to(site)} -> {target} (no such anchor)")
    return broken


def test_every_internal_link_resolves(site, site_pages):
    assert broken_links(site, site_pages) == []


def test_the_link_check_finds_a_dead_link_and_a_dead_anchor(tmp_path):
    (tmp_path / "a.html").write_text('<h2 id="s1">S</h2><a href="a.html#s1">ok</a>')
    (tmp_path / "b.html").write_text('<a href="gone.html">x</a><a href="a.html#s2">y</a>')
    pages = sorted(tmp_path.glob("*.html"))
    assert broken_links(tmp_path, pages) == [
        "b.html -> gone.html",
        "b.html -> a.html#s2 (no such anchor)",
    ]


def figures(site: Path, page: Path) -> list:
    return _soup(page).select(".cell_output img")


def test_every_lecture_is_a_page_with_its_figures(site):
    for name in LECTURES:
        assert (site / "lectures" / f"{name}.html").is_file(), name
    assert len(figures(site, site / "lectures" / "02_qkv_attention_lecture.html")) >= 3


def real_alt_text(img) -> bool:
    """Alt text that describes: not empty and not the image's file name (what docutils writes
    when a figure has none)."""
    alt = (img.get("alt") or "").strip()
    return bool(alt) and Path(alt).name != Path(img.get("src", "")).name


def test_alt_text_that_is_the_file_name_is_no_alt_text():
    soup = BeautifulSoup(
        '<img src="../_images/ab12.png" alt="../_images/ab12.png"><img src="x.png" alt="">'
        '<img src="y.png" alt="Figure: attention weights">',
        "html.parser",
    )
    assert [real_alt_text(i) for i in soup.find_all("img")] == [False, False, True]


def test_every_figure_has_alt_text_and_an_opaque_background(site, site_pages):
    missing, transparent = [], []
    for page in site_pages:
        for img in figures(site, page):
            rel = f"{page.relative_to(site)}: {img.get('src')}"
            if not real_alt_text(img):
                missing.append(rel)
            with Image.open(page.parent / unquote(img["src"])) as image:
                alpha = image.convert("RGBA").getchannel("A")
                if alpha.getextrema()[0] < 255:
                    transparent.append(rel)
    assert missing == [], "figures without alt text (set mystnb.image.alt or a figure title)"
    assert transparent == []


def test_exercises_are_pages_without_outputs(site):
    for name in EXERCISES:
        page = site / "exercises" / name / f"{name}.html"
        assert page.is_file(), name
        assert _soup(page).select(".cell_output") == [], f"{name} shows outputs"


@pytest.mark.parametrize(
    "rel",
    [f"lectures/{n}.ipynb" for n in LECTURES] + [f"exercises/{n}/{n}.ipynb" for n in EXERCISES],
)
def test_every_notebook_page_opens_in_colab_and_downloads(site, rel):
    page = site / Path(rel).with_suffix(".html")
    hrefs = {a.get("href") for a in _soup(page).find_all("a")}
    assert colab_url(project(ROOT), rel) in hrefs, "no Open in Colab link"
    downloads = [h for h in hrefs if h and h.endswith(Path(rel).name) and "_sources" in h]
    assert downloads, "no Download .ipynb link"
    assert (page.parent / downloads[0]).is_file()


def test_the_setup_cell_is_hidden_and_the_badge_is_local(site):
    page = site / "lectures" / "02_qkv_attention_lecture.html"
    text = page_text(page)
    assert "Colab setup: run this cell first" not in text
    srcs = [img.get("src", "") for img in _soup(page).find_all("img")]
    assert srcs and not [s for s in srcs if urlsplit(s).scheme], "an image from another machine"


def test_contents_are_in_lesson_order_with_prev_next(site):
    nav = _soup(site / "README.html").select("nav.bd-docs-nav a.reference.internal")
    hrefs = [a["href"] for a in nav]
    lectures = [h for h in hrefs if h.startswith("lectures/")]
    assert lectures == [f"lectures/{n}.html" for n in LECTURES]
    assert hrefs.index(lectures[-1]) < hrefs.index(f"exercises/{EXERCISES[0]}/{EXERCISES[0]}.html")
    soup = _soup(site / "lectures" / "02_qkv_attention_lecture.html")
    assert soup.select_one("a.left-prev")["href"] == "01_rnn_limits_lecture.html"
    assert soup.select_one("a.right-next")["href"] == "03_multihead_attention_lecture.html"


def test_every_section_has_an_anchor(site):
    soup = _soup(site / "lectures" / "02_qkv_attention_lecture.html")
    headings = soup.select("article h2, article h3")
    assert len(headings) >= 3
    for h in headings:
        section = h.find_parent("section")
        assert section is not None and section.get("id"), h.get_text()
        assert h.select_one("a.headerlink"), h.get_text()
