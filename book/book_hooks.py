"""What the book changes on its way from the repository's files to pages (nothing is written back):

- the Colab badge image (a remote SVG) becomes the book's own copy, so a page requests nothing
  from another machine; the badge's link to Colab stays;
- the Colab setup cell (id ``colab-setup``) is executed but not shown (tag ``remove-cell``);
- after each cell that calls ``interact(``, a note links to the notebook in Colab, where the
  widget moves (the page shows its initial state: book/kernel_startup.py);
- the README, the landing page, gets the book's table of contents (hidden: the sidebar shows it);
- a relative link to a repository file that is not a page of the book (CONTRIBUTING.md,
  autograder/nbgrader_config.py, ...) opens that file on GitHub instead;
- a figure without alt text from its cell (``mystnb.image.alt``) gets the one its PNG carries
  (made from the figure's titles by book/kernel_startup.py).
"""

from __future__ import annotations

import json
import posixpath
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from docutils import nodes
from PIL import Image

from transformer_lab.notebook_setup import BADGE_IMAGE, SETUP_ID, colab_url

BOOK = Path(__file__).resolve().parent
LOCAL_BADGE = "/book/_static/colab-badge.svg"  # "/…": relative to the source folder (the root)
INTERACT_NOTE = (
    "*This cell is interactive in a notebook: the page shows it at its initial settings. "
    "[Open the notebook in Colab]({url}) to move its controls.*"
)
TOC = """

```{{toctree}}
:hidden:
:caption: {caption}
:glob:

{pattern}
```
"""
# a markdown link or image target that is a relative path: [text](target#anchor)
_RELATIVE = re.compile(r"\]\((?![a-z][a-z0-9+.-]*:|[#/])(?P<path>[^)\s#]+)(?P<anchor>#[^)\s]*)?\)")
CONTENTS = [
    ("Lectures", "lectures/*"),
    ("Exercises", "exercises/*/*"),
    ("Instructors", "INSTRUCTORS"),
]


def outside_links(
    text: str, info: dict, rel: str, in_book: Callable[[str], bool], root: Path = BOOK.parent
) -> str:
    """Markdown whose relative links to repository files that are not book pages open on GitHub;
    `rel` is the document's path from the root; `in_book(path)` says whether a path is a page."""
    base = posixpath.dirname(rel)

    def replace(match: re.Match) -> str:
        path = posixpath.normpath(posixpath.join(base, match["path"]))
        if path.startswith("../") or in_book(path) or not (root / path).exists():
            return match[0]
        kind = "tree" if (root / path).is_dir() else "blob"
        url = f"{info['repository']}/{kind}/{info['branch']}/{path}{match['anchor'] or ''}"
        return f"]({url})"

    return _RELATIVE.sub(replace, text)


def notebook_for_book(
    text: str, info: dict, rel: str, in_book: Callable[[str], bool] = lambda path: True
) -> str:
    """A notebook's JSON text as the book shows it (see the module docstring)."""
    nb = json.loads(text)
    cells = []
    for cell in nb["cells"]:
        cells.append(cell)
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            source = outside_links(source, info, rel, in_book)
            cell["source"] = source.replace(BADGE_IMAGE, LOCAL_BADGE)
        elif cell.get("id") == SETUP_ID:
            tags = cell.setdefault("metadata", {}).setdefault("tags", [])
            tags.append("remove-cell")
        elif "interact(" in source:
            note = INTERACT_NOTE.format(url=colab_url(info, rel))
            note_id = f"{cell.get('id', len(cells))}-colab-note"
            cells.append({"cell_type": "markdown", "id": note_id, "metadata": {}, "source": note})
    nb["cells"] = cells
    return json.dumps(nb)


def markdown_for_book(
    text: str, info: dict, rel: str, in_book: Callable[[str], bool], root_doc: bool
) -> str:
    """A markdown page as the book shows it; the landing page gets the table of contents."""
    text = outside_links(text, info, rel, in_book).replace(BADGE_IMAGE, LOCAL_BADGE)
    return text + "".join(TOC.format(caption=c, pattern=p) for c, p in CONTENTS) * root_doc


def png_description(path: Path) -> str:
    """The PNG's ``Description`` text chunk ('' when it has none or is not a PNG)."""
    try:
        with Image.open(path) as image:
            return str(getattr(image, "text", {}).get("Description", ""))
    except (OSError, ValueError):
        return ""


def setup_hooks(app, info: dict, build: Path) -> None:
    def in_book(path: str) -> bool:
        doc = app.env.path2doc(str(Path(app.srcdir) / path))
        return doc is not None and doc in app.env.found_docs

    def source_read(app, docname, source):
        rel = Path(app.env.doc2path(docname, False)).as_posix()
        if rel.endswith(".ipynb"):
            source[0] = notebook_for_book(source[0], info, rel, in_book)
        else:
            root = docname == app.config.root_doc
            source[0] = markdown_for_book(source[0], info, rel, in_book, root)

    def figure_alt(app, doctree):
        for image in doctree.findall(nodes.image):
            if image.get("alt") or image["uri"].startswith(("http:", "https:")):
                continue
            # after Sphinx's image collector: candidates["*"] is relative to the source folder
            path = Path(app.srcdir) / image.get("candidates", {}).get("*", image["uri"])
            alt = png_description(path)
            if alt:
                image["alt"] = alt

    startup = build / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(BOOK / "kernel_startup.py", startup / "00-book.py")
    app.connect("source-read", source_read)
    app.connect("doctree-read", figure_alt, priority=900)
