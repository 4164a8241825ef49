"""IPython startup file of the kernels that execute the lectures for the book (and only those:
book/conf.py points IPYTHONDIR at a folder in the build that holds a copy of this file).

- Figures are opaque (white), so they read on the book's light and dark themes alike.
- Every PNG figure carries its alt text in a PNG ``Description`` chunk, made from the figure's
  own titles (suptitle, then each axes' title, else its axis labels); book_hooks puts it on the
  <img> unless the cell's ``mystnb.image.alt`` metadata says otherwise.
- ``ipywidgets.interact(f, **controls)`` runs ``f`` once at the controls' initial values, so the
  page shows the widget's initial state as plain outputs (no widget JavaScript in the book).
"""

from __future__ import annotations

import ipywidgets
import matplotlib
from IPython.core import pylabtools

_print_figure = pylabtools.print_figure
ALT_LIMIT = 400
GRID = 4  # more titled panels than this: a grid, said as one


def _axes_words(ax) -> str:
    title = " ".join(t for t in (ax.get_title(loc) for loc in ("left", "center", "right")) if t)
    if title.strip():
        return title
    if ax.get_xlabel() or ax.get_ylabel():
        return f"{ax.get_ylabel() or 'values'} against {ax.get_xlabel() or 'index'}"
    return ""


def figure_alt_text(fig) -> str:
    """What the figure shows, in its own words: its titles, else its axes' labels. A grid of
    many panels (images with short captions) is said as such."""
    suptitle = getattr(fig, "_suptitle", None)
    parts = [suptitle.get_text()] if suptitle is not None else []
    panels = list(dict.fromkeys(w for w in map(_axes_words, fig.axes) if w.strip()))
    if len(panels) > GRID:
        shown = ", ".join(panels[:GRID]) + (", …" if len(panels) > GRID else "")
        panels = [f"{len(fig.axes)} panels titled {shown}"]
    parts += panels
    text = "; ".join(" ".join(p.split()) for p in parts if p.strip())
    return f"Figure: {text}"[:ALT_LIMIT] if text else ""


def print_figure(fig, fmt="png", bbox_inches="tight", base64=False, **kwargs):
    if fmt == "png":
        alt = figure_alt_text(fig)
        if alt:
            kwargs["metadata"] = {**kwargs.get("metadata", {}), "Description": alt}
    return _print_figure(fig, fmt=fmt, bbox_inches=bbox_inches, base64=base64, **kwargs)


def static_interact(function=None, **controls):
    """interact() for a static page: the function's output at the controls' initial values."""
    if function is None:  # used as @interact(...)
        return lambda f: static_interact(f, **controls)
    # manual: builds the controls without running the function in a widget's output area
    widget = ipywidgets.interactive(function, {"manual": True}, **controls)
    values = {c._kwarg: c.get_interact_value() for c in widget.kwargs_widgets}
    shown = ", ".join(f"{name} = {value!r}" for name, value in values.items())
    print(f"[interactive: shown at its initial settings, {shown}]")
    function(**values)
    return function


def install() -> None:
    matplotlib.rcParams.update({"figure.facecolor": "white", "savefig.facecolor": "white"})
    # the inline backend registers pylabtools.print_figure when pyplot is first imported: later
    pylabtools.print_figure = print_figure
    ipywidgets.interact = static_interact


if __name__ == "__main__":  # IPython runs startup files as __main__; tests import this module
    install()
