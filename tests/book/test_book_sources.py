"""What the book changes on the way from the notebooks to its pages (book/book_hooks.py) and in
the kernels that execute them (book/kernel_startup.py). Needs no built book: runs in `make test`.
"""

from __future__ import annotations

import base64
import io
import json
import sys
from pathlib import Path

import matplotlib
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "book"))

import book_hooks  # noqa: E402
import kernel_startup  # noqa: E402
from PIL import Image  # noqa: E402

from transformer_lab.notebook_setup import BADGE_IMAGE, SETUP_ID, colab_url, project  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

INFO = project(ROOT)


def _notebook() -> str:
    nb = nbformat.v4.new_notebook()
    title = nbformat.v4.new_markdown_cell(f"# T\n\n[![Open In Colab]({BADGE_IMAGE})](https://x)")
    setup = nbformat.v4.new_code_cell("print('setup')")
    setup["id"] = SETUP_ID
    widget = nbformat.v4.new_code_cell("widgets.interact(f, x=widgets.IntSlider(1));")
    plain = nbformat.v4.new_code_cell("x = 1")
    nb.cells = [title, setup, widget, plain]
    return nbformat.writes(nb)


def test_the_book_hides_the_setup_cell_localises_the_badge_and_links_widgets_to_colab():
    rel = "lectures/07_cross_attention_lecture.ipynb"
    nb = nbformat.reads(book_hooks.notebook_for_book(_notebook(), INFO, rel), as_version=4)
    nbformat.validate(nb)
    title, setup, widget, note, plain = nb.cells
    assert BADGE_IMAGE not in title.source and book_hooks.LOCAL_BADGE in title.source
    assert "remove-cell" in setup.metadata["tags"]
    assert note.cell_type == "markdown" and colab_url(INFO, rel) in note.source
    assert "tags" not in widget.metadata and "tags" not in plain.metadata


def _in_book(path: str) -> bool:
    return path.startswith(("lectures/", "exercises/")) or path in ("README.md", "INSTRUCTORS.md")


def test_the_landing_page_gets_the_contents_in_lesson_order():
    text = book_hooks.markdown_for_book(
        f"# Course\n\n![b]({BADGE_IMAGE})\n", INFO, "README.md", _in_book, root_doc=True
    )
    assert BADGE_IMAGE not in text
    order = [text.index(p) for p in ("lectures/*", "exercises/*/*", "INSTRUCTORS")]
    assert order == sorted(order) and ":hidden:" in text
    other = book_hooks.markdown_for_book("# I\n", INFO, "INSTRUCTORS.md", _in_book, root_doc=False)
    assert "toctree" not in other


def test_links_to_files_outside_the_book_open_on_github():
    text = (
        "[c](CONTRIBUTING.md#x) [l](lectures/02_qkv_attention_lecture.ipynb) [w](https://e.org/a.md) "
        "[a](#here) [d](autograder/) [gone](nowhere.md) ![b](/book/_static/colab-badge.svg)"
    )
    out = book_hooks.outside_links(text, INFO, "README.md", _in_book)
    repo, branch = INFO["repository"], INFO["branch"]
    assert f"[c]({repo}/blob/{branch}/CONTRIBUTING.md#x)" in out
    assert f"[d]({repo}/tree/{branch}/autograder)" in out
    for kept in (
        "lectures/02_qkv_attention_lecture.ipynb)",
        "(https://e.org/a.md)",
        "(#here)",
        "(nowhere.md)",
    ):
        assert kept in out
    assert "(/book/_static/colab-badge.svg)" in out
    # relative to the page's own folder
    lecture = book_hooks.outside_links(
        "[r](../README.md) [b](../benchmarks/RESULTS.md)", INFO, "lectures/x.ipynb", _in_book
    )
    assert lecture == f"[r](../README.md) [b]({repo}/blob/{branch}/benchmarks/RESULTS.md)"


def _png(fig, **kwargs) -> Image.Image:
    data = kernel_startup.print_figure(fig, fmt="png", base64=True, **kwargs)
    plt.close(fig)
    return Image.open(io.BytesIO(base64.b64decode(data)))


def test_a_figure_carries_its_titles_as_alt_text():
    fig, (a, b) = plt.subplots(1, 2)
    fig.suptitle("Attention weights")
    a.set_title("head 0")
    b.set_xlabel("key position")
    b.set_ylabel("query position")
    image = _png(fig)
    assert image.text["Description"] == (
        "Figure: Attention weights; head 0; query position against key position"
    )


def test_a_grid_of_captioned_images_is_said_as_a_grid():
    fig, axes = plt.subplots(2, 4)
    fig.suptitle("digits")
    for i, ax in enumerate(axes.flat):
        ax.set_title(str(i))
    alt = kernel_startup.figure_alt_text(fig)
    plt.close(fig)
    assert alt == "Figure: digits; 8 panels titled 0, 1, 2, 3, …"


def test_a_figure_without_titles_or_labels_has_no_alt_text():
    """The browser and site tests then fail on it: give it a title or mystnb.image.alt."""
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    assert kernel_startup.figure_alt_text(fig) == ""
    assert book_hooks.png_description(Path("/nonexistent.png")) == ""
    assert "Description" not in _png(fig).text


def test_interact_shows_the_initial_state_once(capsys):
    import ipywidgets

    calls = []
    result = kernel_startup.static_interact(
        lambda x, name: calls.append((x, name)),
        x=ipywidgets.IntSlider(3, 0, 9),
        name=ipywidgets.Dropdown(options=["a", "b"], value="b"),
    )
    assert calls == [(3, "b")] and callable(result)
    assert "x = 3, name = 'b'" in capsys.readouterr().out

    @kernel_startup.static_interact(prompt=ipywidgets.Text("four"))
    def search(prompt):
        calls.append(prompt)

    assert calls[-1] == "four"


@pytest.mark.parametrize("path", sorted((ROOT / "lectures").glob("*.ipynb")), ids=lambda p: p.stem)
def test_every_lecture_survives_the_book_rewrite(path):
    rel = path.relative_to(ROOT).as_posix()
    text = book_hooks.notebook_for_book(path.read_text(encoding="utf-8"), INFO, rel)
    nb = nbformat.reads(text, as_version=4)
    nbformat.validate(nb)
    setup = [c for c in nb.cells if c.get("id") == SETUP_ID]
    assert len(setup) == 1 and "remove-cell" in setup[0].metadata["tags"]
    assert BADGE_IMAGE not in json.dumps([c.source for c in nb.cells])


def test_the_readme_links_the_book_at_the_address_from_pyproject():
    from transformer_lab.notebook_setup import book_url, expected_readme

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"[the course as a book]({book_url(INFO)})" in readme
    # mutant: another repository address moves the link with it
    other = dict(INFO, repository="https://github.com/Someone-Else/tl")
    assert "[the course as a book](https://someone-else.github.io/tl/)" in expected_readme(
        ROOT, other
    )
