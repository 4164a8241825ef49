"""Plots for the lectures, matplotlib only.

plot_attention(weights (Lq, Lk))         one attention map, queries down, keys across
plot_heads(weights (h, Lq, Lk))          one map per head, side by side
plot_positional_encoding(pe (n, d))      the encoding table as an image
plot_losses(losses)                      a training curve (raw and smoothed)
plot_images(images (N, C, H, W))         a grid of images with optional titles
plot_patches(image (C, H, W), p)         an image cut into its ViT patches
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def _plt():
    import matplotlib.pyplot as plt

    return plt


def _as_numpy(x):
    """A float64 NumPy array of x; a tensor on any device (CUDA, MPS) is brought to the CPU first
    (.numpy() refuses a tensor that is not on the CPU)."""
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64).numpy()
    import numpy as np

    return np.asarray(x, dtype=float)


def _check_2d(name: str, a, layout: str):
    if a.ndim != 2:
        raise ValueError(f"{name} must have shape {layout}, got {tuple(a.shape)}")


def plot_attention(
    weights, x_labels=None, y_labels=None, ax=None, title=None, cmap="viridis", colorbar=True
):
    """Heat map of one attention matrix (Lq, Lk): row i is where query i looks. Returns the Axes."""
    plt = _plt()
    w = _as_numpy(weights)
    _check_2d("weights", w, "(Lq, Lk)")
    if ax is None:
        Lq, Lk = w.shape
        _, ax = plt.subplots(figsize=(min(1 + 0.4 * Lk, 12), min(1 + 0.4 * Lq, 12)))
    image = ax.imshow(w, cmap=cmap, vmin=0.0, aspect="auto")
    for labels, set_ticks, set_labels, n, rotation in (
        (x_labels, ax.set_xticks, ax.set_xticklabels, w.shape[1], 90),
        (y_labels, ax.set_yticks, ax.set_yticklabels, w.shape[0], 0),
    ):
        if labels is not None:
            if len(labels) != n:
                raise ValueError(f"got {len(labels)} labels for an axis of length {n}")
            set_ticks(range(n))
            set_labels([str(t) for t in labels], rotation=rotation)
    ax.set_xlabel("key position (attended to)")
    ax.set_ylabel("query position")
    if title:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax


def plot_heads(
    weights, x_labels=None, y_labels=None, titles: Sequence[str] | None = None, ncols=4, size=3.0
):
    """One attention map per head from (h, Lq, Lk) weights. Returns the Figure."""
    plt = _plt()
    w = _as_numpy(weights)
    if w.ndim != 3:
        raise ValueError(f"weights must have shape (h, Lq, Lk), got {tuple(w.shape)}")
    h = w.shape[0]
    ncols = min(ncols, h)
    nrows = math.ceil(h / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(size * ncols, size * nrows), squeeze=False)
    for i, ax in enumerate(axes.flat):
        if i >= h:
            ax.axis("off")
            continue
        title = titles[i] if titles is not None else f"head {i}"
        plot_attention(w[i], x_labels, y_labels, ax=ax, title=title, colorbar=False)
        if i % ncols:
            ax.set_ylabel("")
        if i < h - ncols:
            ax.set_xlabel("")
    fig.tight_layout()
    return fig


def plot_positional_encoding(pe, ax=None, title="positional encoding", cmap="RdBu"):
    """The (n_positions, d_model) table as an image: one row per position. Returns the Axes."""
    plt = _plt()
    a = _as_numpy(pe)
    _check_2d("pe", a, "(n_positions, d_model)")
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4))
    bound = max(abs(a).max(), 1e-12)
    image = ax.imshow(a, cmap=cmap, vmin=-bound, vmax=bound, aspect="auto", interpolation="nearest")
    ax.set_xlabel("feature (dimension)")
    ax.set_ylabel("position")
    if title:
        ax.set_title(title)
    ax.figure.colorbar(image, ax=ax)
    return ax


def smooth(values: Sequence[float], window: int) -> list[float]:
    """Trailing moving average (the first points average over what exists so far)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot_losses(
    losses,
    ax=None,
    smooth_window: int | None = None,
    label="train",
    title="loss",
    log=False,
    **curves,
):
    """A loss curve (light) with its moving average (dark); extra curves as name=[(step, value), ...]
    or name=[values]. Returns the Axes."""
    plt = _plt()
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    losses = [float(v) for v in losses]
    window = smooth_window or max(1, len(losses) // 50)
    if window > 1:
        ax.plot(losses, alpha=0.3, color="C0")
        ax.plot(smooth(losses, window), color="C0", label=f"{label} (avg of {window})")
    else:
        ax.plot(losses, color="C0", label=label)
    for i, (name, values) in enumerate(curves.items(), start=1):
        values = list(values)  # floats or 0-d tensors on any device: float() brings them over
        if values and isinstance(values[0], (tuple, list)):
            steps, ys = zip(*values)
            ax.plot(
                [float(s) for s in steps], [float(y) for y in ys], "o-", color=f"C{i}", label=name
            )
        else:
            ax.plot([float(y) for y in values], color=f"C{i}", label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    if log:
        ax.set_yscale("log")
    if title:
        ax.set_title(title)
    ax.legend()
    return ax


def plot_images(images, titles: Sequence[str] | None = None, ncols=8, size=1.2, cmap="gray"):
    """A grid of (N, C, H, W) or (N, H, W) images (C = 1 or 3). Returns the Figure."""
    plt = _plt()
    a = _as_numpy(images)
    if a.ndim == 4:
        a = a[:, 0] if a.shape[1] == 1 else a.transpose(0, 2, 3, 1)
    elif a.ndim != 3:
        raise ValueError(f"images must have shape (N, C, H, W) or (N, H, W), got {tuple(a.shape)}")
    n = a.shape[0]
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(size * ncols, size * nrows * 1.15), squeeze=False
    )
    for i, ax in enumerate(axes.flat):
        ax.axis("off")
        if i < n:
            ax.imshow(a[i].clip(0, 1) if a.ndim == 4 else a[i], cmap=cmap)
            if titles is not None:
                ax.set_title(str(titles[i]), fontsize=8)
    fig.tight_layout()
    return fig


def plot_patches(image, patch_size: int, cmap="gray", gap: float = 0.08):
    """Show a (C, H, W) or (H, W) image cut into its p x p patches, numbered in row-major order
    (the order `vit.patchify` uses). Returns the Figure."""
    plt = _plt()
    a = _as_numpy(image)
    if a.ndim == 3:
        a = a[0] if a.shape[0] == 1 else a.transpose(1, 2, 0)
    H, W = a.shape[:2]
    if H % patch_size or W % patch_size:
        raise ValueError(f"image {H}x{W} is not divisible into {patch_size}x{patch_size} patches")
    rows, cols = H // patch_size, W // patch_size
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 0.9, rows * 0.9), squeeze=False)
    for r in range(rows):
        for c in range(cols):
            ax = axes[r, c]
            patch = a[r * patch_size : (r + 1) * patch_size, c * patch_size : (c + 1) * patch_size]
            ax.imshow(patch, cmap=cmap, vmin=a.min(), vmax=a.max())
            ax.set_title(str(r * cols + c), fontsize=7)
            ax.axis("off")
    fig.subplots_adjust(wspace=gap, hspace=gap + 0.25)
    return fig
