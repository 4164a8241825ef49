"""Where a check runs: the devices present, the dtypes each one is checked in, and exact float32.

The visible check runs on the CPU alone; the thorough one (the hidden tests) on every accelerator
present too, or on those named in ``$TRANSFORMER_LAB_CHECK_DEVICES``. Each device is checked in
float64 and float32 (float32 alone on MPS, which has no float64).
"""

from __future__ import annotations

import contextlib
import os

import torch

# The devices the thorough checks may use, e.g. "cuda" (GPU check: the catalogue on CUDA alone) or
# "cpu"; unset: every device present. Devices named here but absent are left out.
CHECK_DEVICES_ENV = "TRANSFORMER_LAB_CHECK_DEVICES"


def available_devices() -> list[torch.device]:
    """The CPU plus every accelerator present (CUDA, MPS); only those named in
    $TRANSFORMER_LAB_CHECK_DEVICES (comma-separated types) when it is set."""
    found = [torch.device("cpu")]
    if torch.cuda.is_available():
        found.append(torch.device("cuda"))
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append(torch.device("mps"))
    wanted = os.environ.get(CHECK_DEVICES_ENV, "").strip()
    if wanted:
        names = {name.strip() for name in wanted.split(",") if name.strip()}
        unknown = names - {"cpu", "cuda", "mps"}
        if unknown:
            raise ValueError(
                f"{CHECK_DEVICES_ENV}={wanted!r}: unknown device type(s) {sorted(unknown)}; "
                "use cpu, cuda or mps"
            )
        found = [d for d in found if d.type in names]
        if not found:
            raise RuntimeError(
                f"{CHECK_DEVICES_ENV}={wanted!r} names no device present here "
                f"(present: cpu{', cuda' if torch.cuda.is_available() else ''})"
            )
    return found


def devices(thorough: bool) -> list[torch.device]:
    """The devices a check runs on: the CPU, plus every accelerator when thorough."""
    return available_devices() if thorough else [torch.device("cpu")]


def dtypes_for(device: torch.device) -> list[torch.dtype]:
    """The dtypes a check runs in on `device`: float64 and float32 (float32 alone on MPS)."""
    return [torch.float32] if device.type == "mps" else [torch.float64, torch.float32]


def settings(thorough: bool) -> list[tuple[torch.device, torch.dtype]]:
    """(device, dtype) pairs a check runs under: float64 and float32 on each of `devices`."""
    return [(device, dtype) for device in devices(thorough) for dtype in dtypes_for(device)]


@contextlib.contextmanager
def exact_float32():
    """Full float32 precision on CUDA while a check runs (no TF32), restored exactly afterwards.

    Why switch TF32 off rather than widen the tolerances: on Ampere and later GPUs, cuDNN runs
    float32 convolutions in TF32 by default (ViT's patch Conv2d; matmuls too once a program asks
    for "high" precision). TF32 keeps 10 bits of mantissa, so its error is ~1e-3 relative and
    grows with the length of the sum: no fixed tolerance bounds it, and one wide enough would be
    ten times float32's. With TF32 off, one tolerance per dtype holds on every device and a
    student's code gets the same verdict, and the same named mistake, on the CPU and on a GPU
    (what the GPU check's catalogue step verifies). The learner's own training keeps whatever
    they chose: only the check's own computation runs in IEEE float32.

    PyTorch 2.9 added per-backend ``fp32_precision`` strings beside the legacy ``allow_tf32``
    flags and refuses to read a legacy flag that disagrees with them; so both are set
    consistently (the legacy setters first, which update both), and both are put back.
    """
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    new_api = [
        (obj, "fp32_precision")
        for obj in (matmul, getattr(cudnn, "conv", None), getattr(cudnn, "rnn", None))
        if obj is not None and hasattr(obj, "fp32_precision")
    ]
    saved_new = [(obj, attr, getattr(obj, attr)) for obj, attr in new_api]
    saved_legacy = []
    for getter, setter in (
        (lambda: torch.get_float32_matmul_precision(), torch.set_float32_matmul_precision),
        (lambda: cudnn.allow_tf32, lambda value: setattr(cudnn, "allow_tf32", value)),
    ):
        try:  # a state the program mixed from both APIs cannot be read the legacy way
            saved_legacy.append((setter, getter()))
        except RuntimeError:
            pass
    torch.set_float32_matmul_precision("highest")
    cudnn.allow_tf32 = False
    for obj, attr, _ in saved_new:
        setattr(obj, attr, "ieee")
    try:
        yield
    finally:
        for setter, value in saved_legacy:
            setter(value)
        for obj, attr, value in saved_new:
            setattr(obj, attr, value)
