"""Colab support written into the notebooks: badges, links and the setup cell (a build tool).

    python -m transformer_lab.notebook_setup [--check] [ROOT]

rewrites every lecture (``lectures/*.ipynb``), every solution notebook (``solutions/*/*.ipynb``)
and the README's course map from the one repository address in pyproject.toml
(``[project.urls] Repository``, branch ``[tool.transformer-lab] branch``):

- an "Open in Colab" link under the title of the first markdown cell (a solution notebook's
  badge opens its exercise, which is what students open);
- after every relative link to a notebook, a link that opens the same notebook in Colab
  (relative links do not resolve there);
- the first code cell: the Colab setup cell (id ``colab-setup``, identical in every notebook, a
  plain cell that nbgrader copies unchanged into exercises/). In Colab it pip installs the course
  and calls `transformer_lab.colab.setup` for the rest; outside Colab it does nothing;
- the notebook's ``kernelspec`` and ``language_info``: exactly what JupyterLab writes when the
  course's kernel connects (`transformer_lab.lab_kernel`), so that opening a notebook does not
  mark it modified (closing it untouched asks no "Save changes?").

Run ``make exercises`` afterwards (it runs this first). Nothing here is needed at run time.
With ``--check`` nothing is written; the exit status says whether everything is up to date.
"""

from __future__ import annotations

import argparse
import posixpath
import re
import sys
from pathlib import Path

from transformer_lab.notebook_cells import skip_slow_format_checks

skip_slow_format_checks()  # before nbformat: jsonschema's 2-second "iri" grammar left out

import nbformat  # noqa: E402 (after skip_slow_format_checks)

from transformer_lab.lab_kernel import KERNELSPEC, LANGUAGE_INFO  # noqa: E402

SETUP_ID = "colab-setup"
COLAB = "https://colab.research.google.com/github"
BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
# the badge line under a notebook's title, and the Colab link after a relative notebook link
# (the badge image, older, or the text link: a notebook opened offline shows text, not a broken image)
_BADGE_LINE = re.compile(r"^(?:\[!\[Open In Colab\]\([^)]*\)\]|\[Open in Colab\])\([^)]*\)\n", re.M)
_NB_LINK = re.compile(
    r"(?P<link>\[(?P<text>[^\]]*)\]\((?P<target>(?![a-z][a-z0-9+.-]*:)[^)\s#]+\.ipynb)(?:#[^)\s]*)?\))"
    r"(?P<colab> \(\[Colab\]\([^)]*\)\)| \[!\[Open In Colab\]\([^)]*\)\]\([^)]*\))?"
)
_BOOK_LINK = re.compile(r"(\[the course as a book\])\([^)]*\)")

SETUP_TEMPLATE = """\
# @title Colab setup: run this cell first { display-mode: "form" }
# In Google Colab this installs the course (torch and Colab's other packages stay as they are)
# and keeps your passing code on Google Drive, where later notebooks find it (USE_DRIVE = False:
# only while this runtime lasts). Anywhere else (`make lab`, your own Jupyter) it does nothing.
import os
import sys

USE_DRIVE = True  # @param {type:"boolean"}
COURSE = "transformer-lab @ @ARCHIVE@"
if "google.colab" in sys.modules:  # Colab only: install the course, then set it up
    COURSE = os.environ.get("TRANSFORMER_LAB_INSTALL_SOURCE", COURSE)
    !{sys.executable} -m pip install -q --no-deps --force-reinstall "$COURSE"
    import transformer_lab.colab

    transformer_lab.colab.setup(COURSE, use_drive=USE_DRIVE)
"""


# ------------------------------------------------------------------------------------------------
# The one address


def project(root: Path) -> dict:
    """pyproject.toml's [project] and [tool.transformer-lab] tables, merged as needed here."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    data = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    urls = data["project"].get("urls", {})
    if "Repository" not in urls:
        raise SystemExit("pyproject.toml: [project.urls] has no Repository address")
    repo = urls["Repository"].rstrip("/")
    if not re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", repo):
        raise SystemExit(
            f"pyproject.toml: Repository {repo!r} is not https://github.com/OWNER/NAME"
        )
    branch = data.get("tool", {}).get("transformer-lab", {}).get("branch", "main")
    return {"repository": repo, "branch": branch}


def colab_url(info: dict, path: str) -> str:
    """The Colab address of the notebook at `path` (relative to the repository root)."""
    github = info["repository"].removeprefix("https://github.com/")
    return f"{COLAB}/{github}/blob/{info['branch']}/{path}"


def book_url(info: dict) -> str:
    """Where the book is published: the repository's GitHub Pages address (book/README.md)."""
    owner, name = info["repository"].removeprefix("https://github.com/").split("/")
    return f"https://{owner.lower()}.github.io/{name}/"


def badge(info: dict, path: str) -> str:
    """The notebook's "Open in Colab" line: a text link, which also reads offline (JupyterLab
    without internet showed the badge image as a broken one). The README keeps the image."""
    return f"[Open in Colab]({colab_url(info, path)})"


def setup_source(info: dict) -> str:
    """The text of the setup cell: in Colab, installs the course from the repository."""
    # the branch the Colab badges open, so the code always matches the notebook it serves
    archive = f"{info['repository']}/archive/refs/heads/{info['branch']}.zip"
    return SETUP_TEMPLATE.replace("@ARCHIVE@", archive).rstrip("\n")


# ------------------------------------------------------------------------------------------------
# Rewriting


def published_path(root: Path, path: Path) -> str:
    """Where students open a notebook: a solution's exercise, otherwise the notebook itself."""
    rel = path.resolve().relative_to(root.resolve()).as_posix()
    if rel.startswith("solutions/"):
        rel = "exercises/" + rel.removeprefix("solutions/")
    return rel


def add_colab_links(text: str, info: dict, base: str, badges: bool = False) -> str:
    """After each relative link to a notebook, a link to it in Colab (replacing an old one);
    `base` is the folder (relative to the root) the links are relative to."""

    def replace(match: re.Match) -> str:
        target = posixpath.normpath(posixpath.join(base, match["target"]))
        if target.startswith("solutions/"):  # students open the exercise
            target = "exercises/" + target.removeprefix("solutions/")
        if target.startswith("../"):
            return match["link"]
        url = colab_url(info, target)
        colab = f" [![Open In Colab]({BADGE_IMAGE})]({url})" if badges else f" ([Colab]({url}))"
        return match["link"] + colab

    return _NB_LINK.sub(replace, text)


def rewrite_notebook(nb, info: dict, rel: str):
    """The notebook with its badge, Colab links and setup cell brought up to date (in place)."""
    base = posixpath.dirname(rel)
    markdown = [c for c in nb.cells if c.cell_type == "markdown"]
    if not markdown or nb.cells[0].cell_type != "markdown":
        raise ValueError(f"{rel}: the first cell must be markdown (the title)")
    for cell in markdown:
        cell.source = add_colab_links(_BADGE_LINE.sub("", cell.source), info, base)
    first = nb.cells[0]
    title, _, rest = first.source.partition("\n")
    first.source = "\n\n".join(filter(None, [title, badge(info, rel), rest.strip("\n")]))
    nb.cells = [c for c in nb.cells if c.get("id") != SETUP_ID]
    cell = nbformat.v4.new_code_cell(setup_source(info))
    cell["id"] = SETUP_ID
    cell.metadata["cellView"] = "form"  # Colab shows the title and the Drive checkbox, not the code
    position = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells.insert(position, cell)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = dict(LANGUAGE_INFO)
    return nb


def notebooks(root: Path) -> list[Path]:
    return sorted(root.glob("lectures/*.ipynb")) + sorted(root.glob("solutions/*/*.ipynb"))


def expected_text(root: Path, path: Path, info: dict | None = None) -> str:
    info = info or project(root)
    nb = nbformat.read(path, as_version=4)
    rewrite_notebook(nb, info, published_path(root, path))
    return nbformat.writes(nb) + "\n"


def expected_readme(root: Path, info: dict | None = None) -> str:
    info = info or project(root)
    text = (root / "README.md").read_text(encoding="utf-8")
    text = _BOOK_LINK.sub(rf"\g<1>({book_url(info)})", text)
    return add_colab_links(text, info, "", badges=True)


def run(root: Path, check: bool = False) -> list[str]:
    """Rewrite (or with `check`, only compare) every notebook and the README; the stale ones."""
    info = project(root)
    stale = []
    targets = [(p, lambda p=p: expected_text(root, p, info)) for p in notebooks(root)]
    targets.append((root / "README.md", lambda: expected_readme(root, info)))
    for path, expected in targets:
        text = expected()
        if path.read_text(encoding="utf-8") != text:
            stale.append(path.relative_to(root).as_posix())
            if not check:
                path.write_text(text, encoding="utf-8")
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", type=Path, default=Path.cwd())
    parser.add_argument("--check", action="store_true", help="only report stale files")
    args = parser.parse_args(argv)
    stale = run(args.root, check=args.check)
    for rel in stale:
        print(("stale: " if args.check else "updated: ") + rel)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
