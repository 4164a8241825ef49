"""Sphinx configuration of the course book (`make book`; book/README.md says how it is built).

The source folder is the repository root, so that the README's and the lectures' relative links
resolve as they do on GitHub; only the files named in `include_patterns` are read. Lectures are
executed once per change by MyST-NB's jupyter-cache; exercises are shown as they are released
(no outputs); solutions/ is never read.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
from pathlib import Path

BOOK = Path(__file__).resolve().parent
ROOT = BOOK.parent
sys.path[:0] = [str(BOOK), str(ROOT / "shared")]

from book_hooks import setup_hooks  # noqa: E402

from transformer_lab.notebook_setup import project as read_project  # noqa: E402

INFO = read_project(ROOT)
QUICK = os.environ.get("TRANSFORMER_LAB_QUICK", "") not in ("", "0")
# quick and full builds execute differently: each keeps its own cache and output
BUILD = BOOK / "_build" / ("quick" if QUICK else "full")

# The kernels that execute the lectures inherit this environment (book_hooks.kernel_environment).
os.environ.update(
    {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMER_LAB_DEVICE": os.environ.get("TRANSFORMER_LAB_DEVICE", "cpu"),
        "TRANSFORMER_LAB_STUDENT_DIR": str(BUILD / "student"),
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
        "IPYTHONDIR": str(BUILD / "ipython"),
    }
)

project = "Transformer Lab"
author = "Transformer Lab contributors"
copyright = "Transformer Lab contributors"
release = importlib.metadata.version("transformer-lab")

extensions = ["myst_nb", "sphinx_copybutton"]
# MathJax 3, bundled in the sphinx-mathjax-offline wheel and copied into _static/mathjax: no CDN at
# build or read time. Set up from setup() below: the extension does not declare itself safe for
# parallel reading (it only copies files when the build ends), so listed here it would make Sphinx
# execute the lectures one at a time.
MATHJAX_OFFLINE = importlib.import_module("sphinx-mathjax-offline")

root_doc = "README"
include_patterns = [
    "README.md",
    "INSTRUCTORS.md",
    "lectures/*.ipynb",
    "exercises/*/*.ipynb",
]
exclude_patterns = ["solutions/**", "**/.ipynb_checkpoints", "book/_build/**"]

# MyST: $…$ maths in markdown cells, an anchor on every heading down to ####
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 4
suppress_warnings = ["myst.header", "misc.highlighting_failure"]

# Execution: the lectures, once per change of a notebook's code, cached per mode
nb_execution_mode = "cache"
nb_execution_cache_path = str(BUILD / "jupyter_cache")
nb_execution_excludepatterns = ["exercises/*/*.ipynb", "README.md", "INSTRUCTORS.md"]
nb_execution_timeout = 900  # seconds per cell: full-mode training cells take minutes
nb_execution_raise_on_error = True
nb_execution_show_tb = True
# No widget JavaScript (it would come from a CDN): a widget's text form is shown instead, and
# interact() draws its initial state statically (book/kernel_startup.py).
nb_ipywidgets_js = {}
nb_mime_priority_overrides = [
    ("html", "application/vnd.jupyter.widget-view+json", None),
    ("html", "application/vnd.jupyter.widget-state+json", None),
]
nb_merge_streams = True

html_theme = "sphinx_book_theme"
html_title = "Transformer Lab"
html_static_path = [str(BOOK / "_static")]
html_css_files = ["book.css"]
templates_path = [str(BOOK / "_templates")]
html_additional_pages = {"index": "redirect.html"}  # index.html opens the README
html_copy_source = True  # the "Download .ipynb" button serves _sources/
html_last_updated_fmt = None
html_context = {"default_mode": "auto"}
html_theme_options = {
    "repository_url": INFO["repository"],
    "repository_branch": INFO["branch"],
    "path_to_docs": "",
    "use_download_button": True,
    "use_repository_button": True,
    "use_fullscreen_button": False,
    "launch_buttons": {"colab_url": "https://colab.research.google.com"},
    "show_navbar_depth": 1,
    "show_toc_level": 2,
    "navigation_with_keys": False,
}


def setup(app):
    MATHJAX_OFFLINE.setup(app)
    setup_hooks(app, INFO, BUILD)
    return {"parallel_read_safe": True}
