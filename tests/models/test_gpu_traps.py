"""The traps a first GPU run falls into, each tested on the CPU (benchmarks/gpu_check.py runs the
CUDA twins): TF32 during checks, fused attention on fully masked rows, generators made on the CPU
used with tensors elsewhere, .numpy() on tensors off the CPU in plots, and GPUs without bfloat16."""

from __future__ import annotations

import matplotlib
import pytest
import torch
import torch.nn.functional as F

from transformer_lab import check, train, viz
from transformer_lab.attention import fused_attention, scaled_dot_product_attention
from transformer_lab.check.devices import CHECK_DEVICES_ENV, available_devices, exact_float32
from transformer_lab.gpt import sample_next

matplotlib.use("Agg")

# ----------------------------------------------------------------------------------------------
# TF32: switched off while a check runs, restored exactly afterwards.

MATMUL, CUDNN = torch.backends.cuda.matmul, torch.backends.cudnn
NEW_API = [o for o in (MATMUL, getattr(CUDNN, "conv", None), getattr(CUDNN, "rnn", None)) if o]
NEW_API = [o for o in NEW_API if hasattr(o, "fp32_precision")]


def _state() -> tuple:
    """Every TF32 setting, read both ways (a legacy read that PyTorch refuses reads "mixed")."""

    def legacy(read):
        try:
            return read()
        except RuntimeError:
            return "mixed"

    return (
        tuple(o.fp32_precision for o in NEW_API),
        legacy(torch.get_float32_matmul_precision),
        legacy(lambda: MATMUL.allow_tf32),
        legacy(lambda: CUDNN.allow_tf32),
    )


def _tf32_everywhere(how: str) -> None:
    if how == "legacy":  # what most tutorials write
        torch.set_float32_matmul_precision("high")
        CUDNN.allow_tf32 = True
    else:  # PyTorch 2.9's per-backend strings
        for o in NEW_API:
            o.fp32_precision = "tf32"


@pytest.fixture
def tf32_state():
    """Put every setting back after the test, whatever it did."""
    saved = [(o, o.fp32_precision) for o in NEW_API]
    precision, cudnn = torch.get_float32_matmul_precision(), CUDNN.allow_tf32
    yield
    torch.set_float32_matmul_precision(precision)
    CUDNN.allow_tf32 = cudnn
    for o, value in saved:
        o.fp32_precision = value


def _is_exact() -> bool:
    new, precision, matmul, cudnn = _state()
    return (precision, matmul, cudnn) == ("highest", False, False) and all(v == "ieee" for v in new)


@pytest.mark.parametrize("how", ["legacy", "new"] if NEW_API else ["legacy"])
def test_exact_float32_switches_tf32_off_and_restores_it(tf32_state, how):
    _tf32_everywhere(how)
    before = _state()
    assert not _is_exact()
    with exact_float32():
        assert _is_exact()
        with exact_float32():  # nested (lesson 11's convolution inside a check)
            assert _is_exact()
        assert _is_exact()
    assert _state() == before
    with pytest.raises(ZeroDivisionError), exact_float32():
        1 / 0  # noqa: B018
    assert _state() == before


def _recording_sdpa(seen: list):
    def sdpa(q, k, v, mask=None):
        seen.append(_is_exact())
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        return weights @ v, weights

    return sdpa


def test_a_check_runs_the_students_code_without_tf32(tf32_state, student_dir):
    _tf32_everywhere("legacy")
    before, seen = _state(), []
    check.scaled_dot_product_attention(_recording_sdpa(seen))
    assert seen and all(seen), "the student's code ran with TF32 allowed"
    assert _state() == before, "the check did not restore the program's TF32 settings"


# ----------------------------------------------------------------------------------------------
# Fused attention: a query with every key masked gives zeros on every device.


def _kernel_with_nan_rows(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """F.scaled_dot_product_attention as some CUDA kernels behave on a fully masked row: the
    softmax of a row of -inf is NaN, forward, and in the backward NaN reaches every key."""
    assert dropout_p == 0.0 and not is_causal and scale is None
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


@pytest.mark.parametrize("mask_shape", [(3, 5), (2, 1, 3, 5), (2, 2, 3, 5)])
def test_fused_attention_zeroes_fully_masked_rows_whatever_the_kernel(monkeypatch, mask_shape):
    monkeypatch.setattr(F, "scaled_dot_product_attention", _kernel_with_nan_rows)
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(2, 2, n, 4, generator=g, dtype=torch.float64, requires_grad=True)
        for n in (3, 5, 5)
    )
    mask = torch.rand(mask_shape, generator=g) > 0.3
    mask[..., 1, :] = False  # query 1 may attend to nothing
    mask[..., 0, 0] = True
    with pytest.raises(AssertionError):  # the stand-in kernel really gives NaN on that row
        assert torch.isfinite(_kernel_with_nan_rows(q, k, v, mask)).all()
    out = fused_attention(q, k, v, mask)
    expected, _ = scaled_dot_product_attention(q, k, v, mask)
    assert torch.isfinite(out).all()
    assert (out[..., 1, :] == 0).all()
    torch.testing.assert_close(out, expected)
    cot = torch.randn(out.shape, generator=g, dtype=torch.float64)
    grads = torch.autograd.grad(out, (q, k, v), cot)
    grads_expected = torch.autograd.grad(expected, (q, k, v), cot)
    for got, want in zip(grads, grads_expected):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want)


# ----------------------------------------------------------------------------------------------
# Generators: a CPU generator with tensors on another device.


def test_sample_next_with_a_cpu_generator_draws_the_same_tokens_on_every_device(device):
    logits = torch.randn(64, 11, generator=torch.Generator().manual_seed(3)).to(device)
    draws = sample_next(
        logits, temperature=1.3, top_k=6, generator=torch.Generator().manual_seed(5)
    )
    assert draws.device == logits.device
    on_cpu = sample_next(
        logits.cpu(), temperature=1.3, top_k=6, generator=torch.Generator().manual_seed(5)
    )
    assert torch.equal(draws.cpu(), on_cpu)
    # and a different seed gives different draws (the generator is really used)
    other = sample_next(
        logits, temperature=1.3, top_k=6, generator=torch.Generator().manual_seed(6)
    )
    assert not torch.equal(other.cpu(), on_cpu)


def test_check_devices_can_be_narrowed(monkeypatch):
    monkeypatch.setenv(CHECK_DEVICES_ENV, "cpu")
    assert available_devices() == [torch.device("cpu")]
    monkeypatch.setenv(CHECK_DEVICES_ENV, "cpu,tpu")
    with pytest.raises(ValueError, match="tpu"):
        available_devices()
    if not torch.cuda.is_available():
        monkeypatch.setenv(CHECK_DEVICES_ENV, "cuda")
        with pytest.raises(RuntimeError, match="names no device present"):
            available_devices()
    monkeypatch.delenv(CHECK_DEVICES_ENV)
    assert available_devices()[0] == torch.device("cpu")


# ----------------------------------------------------------------------------------------------
# Plots: a tensor on a GPU refuses .numpy(); every plot moves it to the CPU first.


class OnGPU(torch.Tensor):
    """A CPU tensor that behaves like a CUDA one where it matters here: .numpy() (and NumPy's
    conversion) raise as they do for a CUDA tensor until it is moved with .cpu() or .to("cpu")."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.Tensor.numpy, torch.Tensor.__array__, torch.Tensor.tolist):
            raise TypeError(
                "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the "
                "tensor to host memory first."
            )
        moved = func is torch.Tensor.cpu or (
            func is torch.Tensor.to
            and any(
                a == "cpu" or a == torch.device("cpu") for a in (*args[1:], kwargs.get("device"))
            )
        )
        out = super().__torch_function__(func, types, args, kwargs)
        if moved and isinstance(out, torch.Tensor):
            return out.as_subclass(torch.Tensor)
        return out


def _gpu(t: torch.Tensor) -> OnGPU:
    return t.as_subclass(OnGPU)


def test_the_pretend_gpu_tensor_refuses_numpy():
    t = _gpu(torch.ones(2, 3))
    with pytest.raises(TypeError, match="cuda"):
        t.numpy()
    with pytest.raises(TypeError, match="cuda"):
        t.detach().numpy()
    assert t.cpu().numpy().shape == (2, 3)
    assert t.detach().to("cpu", torch.float64).numpy().dtype.name == "float64"


def test_every_plot_takes_tensors_off_the_cpu():
    import matplotlib.pyplot as plt

    g = torch.Generator().manual_seed(0)
    weights = torch.softmax(torch.randn(2, 4, 5, generator=g), -1)
    try:
        viz.plot_attention(_gpu(weights[0]))
        viz.plot_heads(_gpu(weights))
        viz.plot_positional_encoding(_gpu(torch.randn(6, 8, generator=g)))
        viz.plot_images(_gpu(torch.rand(3, 1, 8, 8, generator=g)), ncols=3)
        viz.plot_patches(_gpu(torch.rand(1, 8, 8, generator=g)), patch_size=4)
        losses = [_gpu(torch.tensor(1.0 / (i + 1))) for i in range(20)]
        ax = viz.plot_losses(
            losses,
            val=[(5, _gpu(torch.tensor(0.5))), (10, _gpu(torch.tensor(0.3)))],
            other=[_gpu(torch.tensor(0.2))] * 3,
        )
        assert ax.lines[-1].get_ydata().tolist() == pytest.approx([0.2] * 3)
    finally:
        plt.close("all")


# ----------------------------------------------------------------------------------------------
# bfloat16: GPUs before Ampere only emulate it.


def _fake_gpu(monkeypatch, native: bool, name: str, capability: tuple[int, int]):
    def is_bf16_supported(including_emulation: bool = True):
        return native or including_emulation  # what PyTorch says on a T4: True, unless asked

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: name)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


def test_a_gpu_without_bfloat16_gets_float16_and_says_so(monkeypatch, capsys):
    _fake_gpu(monkeypatch, native=False, name="Tesla T4", capability=(7, 5))
    assert train.low_precision_dtype(torch.device("cuda")) == torch.float16
    said = capsys.readouterr().out
    assert "Tesla T4" in said and "7.5" in said and "float16" in said
    assert train.low_precision_dtype("cuda", verbose=False) == torch.float16
    assert capsys.readouterr().out == ""


def test_a_gpu_with_bfloat16_gets_it_silently(monkeypatch, capsys):
    _fake_gpu(monkeypatch, native=True, name="NVIDIA H100 80GB HBM3", capability=(9, 0))
    assert train.low_precision_dtype("cuda:0") == torch.bfloat16
    assert capsys.readouterr().out == ""


def test_low_precision_dtype_off_the_gpu(monkeypatch):
    assert train.low_precision_dtype("cpu") == torch.bfloat16
    assert train.low_precision_dtype("mps") == torch.float16
    monkeypatch.setenv(train.DEVICE_ENV, "cpu")
    assert train.low_precision_dtype() == torch.bfloat16
