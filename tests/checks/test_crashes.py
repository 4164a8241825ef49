"""The crash, form and parameter diagnosers (check/crashes.py, check/parameters.py, and the
form diagnosers of check/generic.py): each names the mistake it is made for, through a real check,
with a student's implementation as the unseen held-out set wrote it (benchmarks/heldout2); and
none names an error or a difference it cannot read."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from transformer_lab import MultiHeadAttention, check
from transformer_lab.check import crashes, generic, parameters
from transformer_lab.check.compare import same_within_tolerance

CPU = torch.device("cpu")


def key_of(check_fn, impl) -> str | None:
    with pytest.raises(check.CheckFailed) as info:
        check_fn(impl)
    return info.value.mistake_key


# ----------------------------------------------------------------------------------------------
# Crashes, through real checks


def merge_heads_view(x):
    B, h, L, d_k = x.shape
    return x.transpose(1, 2).view(B, L, h * d_k)  # not contiguous after the transpose


def split_heads_float(x, n_heads):
    B, L, d = x.shape
    return x.reshape(B, L, n_heads, d / n_heads).transpose(1, 2)


def rope_unpacks_two(x, base=10000.0):
    L, d = x.shape
    return x


def sdpa_transpose_1_2(q, k, v, mask=None):
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = scores.softmax(-1)
    return w @ v, w


class RNNFloat32State(nn.Module):
    """h0 made as float32 zeros whatever the dtype of x."""

    def __init__(self, d_in, d_hidden):
        super().__init__()
        self.d_hidden = d_hidden
        self.w_xh = nn.Linear(d_in, d_hidden)
        self.w_hh = nn.Linear(d_hidden, d_hidden)

    def forward(self, x, h0=None):
        h = torch.zeros(x.shape[0], self.d_hidden) if h0 is None else h0
        outs = []
        for t in range(x.shape[1]):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outs.append(h)
        return torch.stack(outs, 1), h


class RNNInPlace(RNNFloat32State):
    """The state updated in place: autograd needs the old one."""

    def forward(self, x, h0=None):
        h = x.new_zeros(x.shape[0], self.d_hidden) if h0 is None else h0
        outs = []
        for t in range(x.shape[1]):
            h.copy_(torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h)))
            outs.append(h.clone())
        return torch.stack(outs, 1), h


@pytest.mark.parametrize(
    "name, impl, key",
    [
        ("merge_heads", merge_heads_view, "crash-view-not-contiguous"),
        ("split_heads", split_heads_float, "crash-float-size"),
        ("rotary_embedding", rope_unpacks_two, "crash-shape-unpacked"),
        ("scaled_dot_product_attention", sdpa_transpose_1_2, "crash-axis-from-front"),
        ("RNN", RNNFloat32State, "crash-mixed-dtypes"),
        ("RNN", RNNInPlace, "crash-in-place"),
    ],
)
def test_a_crash_is_named(name, impl, key):
    assert key_of(getattr(check, name), impl) == key


@pytest.mark.parametrize(
    "error, key",
    [
        (TypeError("unsupported operand type(s) for *: 'int' and 'NoneType'"), "crash-none-used"),
        (ValueError("min() arg is an empty sequence"), "crash-empty-min"),
        (RuntimeError("selected index k out of range"), "crash-topk-too-big"),
        # CUDA's wordings, as the GPU check recorded them (benchmarks/gpu)
        (
            RuntimeError(
                "Expected all tensors to be on the same device, but found at least two devices, "
                "cuda:0 and cpu!"
            ),
            "crash-mixed-devices",
        ),
        (
            RuntimeError(
                "Expected all tensors to be on the same device, but got tensors is on cpu, "
                "different from other tensors on cuda:0 (when checking argument in method "
                "wrapper_CUDA_cat)"
            ),
            "crash-mixed-devices",
        ),
        # a device-side assert (an index out of range on CUDA; the GPU check's log, 2026-11-28)
        (
            RuntimeError(
                "CUDA error: device-side assert triggered\nCUDA kernel errors might be "
                "asynchronously reported at some other API call, so the stacktrace below might "
                "be incorrect."
            ),
            "crash-device-assert",
        ),
        (
            getattr(torch, "AcceleratorError", RuntimeError)(
                "CUDA error: device-side assert triggered"
            ),
            "crash-device-assert",
        ),
        # the meta device's (a machine without a GPU can raise it)
        (
            RuntimeError("Tensor on device cpu is not on the expected device meta!"),
            "crash-mixed-devices",
        ),
    ],
)
def test_errors_with_one_cause_are_named(error, key):
    assert crashes.name(raises(error))[0] == key
    assert crashes.name(raises(type(error)("something else went wrong"))) is None


def test_the_backward_crash_is_a_check_failure_not_a_raw_error():
    # before: autograd's RuntimeError escaped the check, with no case and no "Likely mistake"
    with pytest.raises(check.CheckFailed) as info:
        check.RNN(RNNInPlace)
    assert "backward pass" in info.value.problem and info.value.case


def raises(error):
    try:
        raise error
    except Exception as err:  # noqa: BLE001 - the error as a student's code raises it
        return err


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("The size of tensor a (5) must match the size of tensor b (2) at dim 1"),
        RuntimeError("upper bound and lower bound inconsistent with step sign"),
        ValueError("too many values to unpack (expected 2)"),  # not on a line reading a shape
        ValueError("context must have shape (B, L_k, d_model)"),
        TypeError("unsupported operand type(s)"),
    ],
)
def test_an_error_with_several_causes_is_not_named(error):
    assert crashes.name(raises(error)) is None


def test_mutant_that_names_any_unpacking_fails():
    # the unpacking is named only when the student's line reads a shape: a mutant without that
    # test names "too many values to unpack" of `out, w = f(x)` as a shape mistake
    err = raises(ValueError("too many values to unpack (expected 2)"))
    assert crashes.name(err) is None
    mutant = crashes._UNPACK.search(str(err)) is not None
    assert mutant  # what a text-only diagnoser would name


# ----------------------------------------------------------------------------------------------
# The form of the result, and parameters


def close(a, b):
    return same_within_tolerance(a, b, torch.float64, CPU)


def test_a_tuple_where_one_value_belongs():
    e = torch.randn(2, 3, dtype=torch.float64)
    assert generic.name((e, e.t()), e, close)[0] == "generic-extra-values"
    assert generic.name((e + 1, e.t()), e, close) is None  # the first is wrong too


def test_results_in_the_wrong_order():
    out, w = torch.randn(2, 3, dtype=torch.float64), torch.rand(3, 3, dtype=torch.float64)
    assert generic.name((w, out), (out, w), close)[0] == "generic-swapped-results"


def test_float32_inside_a_float64_case():
    e = torch.randn(4, 8, dtype=torch.float64)
    assert generic.name(e.float().double() * 1.0000001, e, close)[0] == "generic-float32-inside"
    assert generic.name(e * 1.001, e, close)[0] != "generic-float32-inside"  # a real difference


def test_a_numpy_array_where_a_tensor_belongs():
    e = torch.ones(3, 3).tril().bool()
    assert generic.name(e.numpy(), e, close)[0] == "generic-numpy"


class LayerNormPlain(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps, self.weight, self.bias = eps, torch.ones(d_model), torch.zeros(d_model)

    def forward(self, x):
        mu, var = x.mean(-1, keepdim=True), x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mu) / torch.sqrt(var + self.eps) + self.bias


class FeedForwardNoBias(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_ff, bias=False), nn.Linear(d_ff, d_model, False)

    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))


@pytest.mark.parametrize(
    "name, impl, key",
    [
        ("LayerNorm", LayerNormPlain, "params-plain-tensors"),
        ("FeedForward", FeedForwardNoBias, "params-no-bias"),
    ],
)
def test_parameters_named(name, impl, key):
    assert key_of(getattr(check, name), impl) == key


def test_a_linear_with_its_sizes_swapped():
    found = parameters.name_parameter_shape("w_2.weight", (24, 6), (6, 24))
    assert found[0] == "params-linear-swapped" and "nn.Linear(24, 6)" in found[1]
    assert parameters.name_parameter_shape("w_1.weight", (24, 8), (16, 8)) is None  # another size


def test_a_width_hard_coded_as_four_times_d_model():
    # FeedForward(8, 16) built with 4 * d_model = 32: w_1 (32, 8), w_2 (8, 32)
    for key, mine, ref in [("w_1.weight", (32, 8), (16, 8)), ("w_2.weight", (8, 32), (8, 16))]:
        found = parameters.name_parameter_shape(key, mine, ref)
        assert found[0] == "params-hard-coded-width" and "asks for 16" in found[1]
    assert parameters.name_parameter_shape("w_1.bias", (32,), (16,)) is None  # no evidence


def test_torch_multihead_attention_is_named():
    block = nn.Module()
    block.self_attn = nn.MultiheadAttention(8, 2)
    missing = ["self_attn.w_q.weight"]
    extra = ["self_attn.in_proj_weight", "self_attn.in_proj_bias"]
    assert parameters.name_parameters(block, missing, extra)[0] == "params-torch-multihead"
    ours = nn.Module()
    ours.self_attn = MultiHeadAttention(8, 2)
    assert parameters.name_parameters(ours, ["self_attn.w_q.weight"], ["x.weight"]) is None


def test_no_bias_is_not_named_when_weights_are_missing_too():
    m = nn.Linear(2, 2)
    assert parameters.name_parameters(m, ["bias", "w.weight"], []) is None


def test_numbers_that_print_alike_get_more_digits():
    from transformer_lab.check.compare import compare_tensor

    e = torch.full((2,), 2.0955520, dtype=torch.float64)
    text = compare_tensor(e, e + 6e-7, "output", torch.float64, CPU)
    got, expected = text.split("got ")[1].split(", expected ")
    assert got != expected.split(";")[0], text  # the mutant (always 6 digits) prints them alike
