"""A small, readable training toolkit: device choice, seeding, progress bars, a fit loop.

quick_mode()       True when TRANSFORMER_LAB_QUICK=1 (CI shrinks every training run)
get_device()       TRANSFORMER_LAB_DEVICE, else cuda, else mps, else cpu
low_precision_dtype(device)   bfloat16 where the device has it, else float16 (saying so)
seed_everything()  Python, NumPy and torch seeds in one call
progress()         a tqdm bar that renders as a widget in Jupyter and as text elsewhere
fit()              the loop: batch -> loss -> backward -> (clip) -> step; returns the losses
noam_lr(), noam_schedule()    the paper's warm-up then inverse-square-root learning rate
evaluate(), accuracy()
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import torch
from torch import nn

QUICK_ENV = "TRANSFORMER_LAB_QUICK"
DEVICE_ENV = "TRANSFORMER_LAB_DEVICE"


def quick_mode() -> bool:
    """True when the environment variable TRANSFORMER_LAB_QUICK is set to 1 (or true/yes/on)."""
    return os.environ.get(QUICK_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def get_device() -> torch.device:
    """The device to train on: $TRANSFORMER_LAB_DEVICE if set, else cuda, else mps, else cpu."""
    name = os.environ.get(DEVICE_ENV, "").strip()
    if name:
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def low_precision_dtype(
    device: torch.device | str | None = None, verbose: bool = True
) -> torch.dtype:
    """The 16-bit type for autocast and half-precision benchmarks on `device` (default: get_device()).

    bfloat16 where the hardware has it: CPUs, and NVIDIA GPUs from Ampere on (compute capability
    8.0: A100, RTX 30xx, L4, H100). Older GPUs (Colab's T4 is 7.5, a V100 7.0) only emulate
    bfloat16, many times slower, so they get float16, and a line saying so (float16's range is
    narrower: train with torch.amp.GradScaler). MPS: float16.
    """
    device = torch.device(device) if device is not None else get_device()
    if device.type == "cuda":
        try:
            native = torch.cuda.is_bf16_supported(including_emulation=False)
        except TypeError:  # torch before 2.3 has no including_emulation
            native = torch.cuda.is_bf16_supported()
        if native:
            return torch.bfloat16
        if verbose:
            index = device.index if device.index is not None else torch.cuda.current_device()
            major, minor = torch.cuda.get_device_capability(index)
            print(
                f"{torch.cuda.get_device_name(index)} (compute capability {major}.{minor}) has no "
                "native bfloat16 (it needs 8.0, Ampere or later): using float16 instead; "
                "train with torch.amp.GradScaler"
            )
        return torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.bfloat16


def seed_everything(seed: int) -> None:
    """Seed Python's `random`, NumPy and torch (all devices) for a reproducible run."""
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 (seeding the legacy global state is the point)
    torch.manual_seed(seed)  # also seeds every CUDA device


def progress(iterable: Iterable | None = None, **kwargs):
    """tqdm.auto: a widget in Jupyter, text in a terminal. Keyword arguments go to tqdm.

    Set TRANSFORMER_LAB_NO_PROGRESS=1 to hide the bars (e.g. when grading, where stderr output
    may count against a cell).
    """
    from tqdm.auto import tqdm
    from tqdm.notebook import tqdm_notebook

    kwargs.setdefault("disable", os.environ.get("TRANSFORMER_LAB_NO_PROGRESS", "") == "1")
    kwargs.setdefault("leave", False)
    if issubclass(tqdm, tqdm_notebook):  # in Jupyter: a widget, replaced by text when it ends
        return _notebook_bar(tqdm)(iterable, **kwargs)
    return tqdm(iterable, **kwargs)


def _notebook_bar(base: type) -> type:
    """tqdm's notebook bar that leaves one line of plain text in its place when it closes.

    A closed widget's output stays in the saved notebook, and after a reload JupyterLab shows
    "Error displaying widget: model not found" there. This bar is displayed with a display id,
    and closing it updates that output to the text bar (``training: 100%|██| 150/150 [...]``).
    """

    class TextWhenDone(base):
        def __init__(self, *args, **kwargs):
            from IPython.display import display

            super().__init__(*args, display=False, **kwargs)
            self._handle = None
            if not self.disable:
                self._handle = display(self.container, display_id=True)
                self.displayed = True

        def close(self):
            handle, self._handle = getattr(self, "_handle", None), None
            super().close()
            if handle is not None:
                handle.update({"text/plain": str(self)}, raw=True)

    return TextWhenDone


def _to_device(batch, device):
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, (tuple, list)):
        return type(batch)(_to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    return batch


def _batch_stream(batches) -> Iterator:
    """A callable is called once per step (e.g. lambda: get_lm_batch(...)); a list is cycled;
    an iterator (e.g. train.minibatches(...), which never ends) is consumed as it is."""
    if callable(batches):
        while True:
            yield batches()
    elif iter(batches) is batches:  # a generator or iterator: consume it (cycle would copy it)
        yield from batches
        raise ValueError("the batch iterator ran out before n_steps: pass a list or a function")
    else:  # a list or other re-iterable collection: go round again
        if not batches:
            raise ValueError("batches is empty")
        while True:
            yield from batches


def fit(
    model: nn.Module,
    batches,
    loss_fn: Callable,
    optimizer: torch.optim.Optimizer,
    n_steps: int,
    *,
    clip_grad_norm: float | None = None,
    scheduler=None,
    device: torch.device | str | None = None,
    show_progress: bool = True,
    log_every: int = 10,
    callback: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Train `model` for `n_steps` optimiser steps and return the loss of every step.

    batches: an iterable of batches (cycled if shorter than n_steps) or a function returning
        one batch per call. A batch is anything `loss_fn` accepts.
    loss_fn(model, batch) -> scalar loss tensor.
    clip_grad_norm: if set, rescale the gradients to at most this global L2 norm before stepping.
    device: batches are moved there (the model is not moved; put it there yourself).
    callback(step, loss) is called after each step (e.g. for a periodic validation).
    """
    model.train()
    losses: list[float] = []
    stream = _batch_stream(batches)
    hide = {} if show_progress else {"disable": True}
    bar = progress(range(n_steps), desc="training", **hide)
    for step in bar:
        batch = next(stream)
        if device is not None:
            batch = _to_device(batch, device)
        loss = loss_fn(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if clip_grad_norm is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        losses.append(loss.item())
        if step % log_every == 0 or step == n_steps - 1:
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
        if callback is not None:
            callback(step, losses[-1])
    return losses


def noam_lr(step: int, d_model: int, warmup: int) -> float:
    """The learning rate of Vaswani et al. (2017), eq. (3), at optimiser step `step` (from 1):

        lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)

    It rises linearly for `warmup` steps, peaks at (d_model * warmup)^-0.5, then decays as
    1/sqrt(step). The paper used warmup = 4000 with Adam (beta1 0.9, beta2 0.98, eps 1e-9).
    """
    for name, value in (("step", step), ("d_model", d_model), ("warmup", warmup)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def noam_schedule(
    optimizer: torch.optim.Optimizer, d_model: int, warmup: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR giving step k (from 0, as `fit` counts) the rate noam_lr(k + 1, ...) times the
    optimiser's own lr: create the optimiser with lr=1.0 for the paper's rate, or with lr=f to
    scale it by f (the "factor" of the Annotated Transformer)."""
    noam_lr(1, d_model, warmup)  # validates the arguments now rather than at the first step
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: noam_lr(k + 1, d_model, warmup))


def minibatches(
    *tensors: torch.Tensor, batch_size: int, shuffle: bool = True, seed: int = 0
) -> Iterator[tuple[torch.Tensor, ...]]:
    """Endless (x, y, ...) minibatches over tensors sharing their first axis; a new order each epoch."""
    n = tensors[0].shape[0]
    if any(t.shape[0] != n for t in tensors):
        raise ValueError(
            f"tensors disagree on their first axis: {[tuple(t.shape) for t in tensors]}"
        )
    g = torch.Generator()
    g.manual_seed(seed)
    while True:
        order = torch.randperm(n, generator=g) if shuffle else torch.arange(n)
        for i in range(0, n - batch_size + 1 if shuffle else n, batch_size):
            idx = order[i : i + batch_size]
            yield tuple(t[idx] for t in tensors)


@torch.no_grad()
def evaluate(model: nn.Module, batches: Iterable, loss_fn: Callable, device=None) -> float:
    """Mean of loss_fn(model, batch) over a finite iterable of batches, in eval mode."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for batch in batches:
        if device is not None:
            batch = _to_device(batch, device)
        total += float(loss_fn(model, batch))
        count += 1
    model.train(was_training)
    if count == 0:
        raise ValueError("evaluate got no batches")
    return total / count


@torch.no_grad()
def predict(model: nn.Module, x: torch.Tensor, batch_size: int = 512, device=None) -> torch.Tensor:
    """model(x) in eval mode, batch by batch, concatenated (on the CPU)."""
    was_training = model.training
    model.eval()
    device = device or next(model.parameters()).device
    outs = [model(x[i : i + batch_size].to(device)).cpu() for i in range(0, len(x), batch_size)]
    model.train(was_training)
    return torch.cat(outs)


def accuracy(logits_or_model, x_or_y: torch.Tensor, y: torch.Tensor | None = None, **kw) -> float:
    """Fraction of correct arg-max predictions.

    accuracy(logits (N, C), y (N,)) or accuracy(model, x, y) (runs `predict` first).
    """
    if isinstance(logits_or_model, nn.Module):
        if y is None:
            raise TypeError("accuracy(model, x, y) needs the labels y")
        logits = predict(logits_or_model, x_or_y, **kw)
    else:
        logits, y = logits_or_model, x_or_y
    if logits.shape[:-1] != y.shape:
        raise ValueError(f"logits {tuple(logits.shape)} do not match labels {tuple(y.shape)}")
    return (logits.argmax(-1) == y.to(logits.device)).float().mean().item()
