"""The core reference modules agree with independent implementations (mostly PyTorch's own).

Every parity check below is a plain function that raises AssertionError on a mismatch. The
`test_*_parity` tests run it on the reference; the `test_mutant_*` tests run the same check on a
deliberately broken variant (made with monkeypatch or a subclass) and assert that it FAILS, which
shows that the check would catch that mistake.
"""

from __future__ import annotations

import functools
import math
import types

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import transformer_lab.add_norm as add_norm_mod
import transformer_lab.attention as attention_mod
import transformer_lab.multihead as multihead_mod
import transformer_lab.rnn as rnn_mod
from transformer_lab.add_norm import EncoderBlock, FeedForward, LayerNorm
from transformer_lab.attention import fused_attention, scaled_dot_product_attention
from transformer_lab.encoder_decoder import DecoderBlock
from transformer_lab.masking import causal_mask, combine_masks, padding_mask
from transformer_lab.multihead import MultiHeadAttention, merge_heads, split_heads
from transformer_lab.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    rotary_embedding,
    sinusoidal_positional_encoding,
)
from transformer_lab.rnn import RNN, max_path_length, sequential_steps

CPU64 = dict(device=torch.device("cpu"), dtype=torch.float64, tol={"atol": 1e-10, "rtol": 1e-8})


# ----------------------------------------------------------------------------- helpers


def close(actual, expected, tol, msg=""):
    torch.testing.assert_close(actual, expected, **tol, msg=lambda m: f"{msg}\n{m}")


def randn(*shape, device, dtype, gen, requires_grad=False):
    x = torch.randn(*shape, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype)
    return x.requires_grad_(requires_grad)


def random_mask(shape, gen, device) -> torch.Tensor:
    """Random bool mask (True = may attend) with at least one True in every row."""
    mask = torch.rand(shape, generator=gen) < 0.5
    mask[..., 0] |= ~mask.any(dim=-1)
    return mask.to(device)


class TorchProxy(types.SimpleNamespace):
    """Stands in for the `torch` module inside a reference module, with some functions replaced."""

    def __getattr__(self, name):
        return getattr(torch, name)


# ----------------------------------------------------------------------------- attention

# (q shape, k shape, v shape, mask shape or None): Lq != Lk, d_v != d_k, extra batch dims,
# and masks broadcast from (Lq, Lk), (1, 1, 1, Lk), (B, 1, Lq, Lk) and the full shape.
SDPA_CASES = {
    "no_mask": ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 6), None),
    "mask_full": ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 6), (2, 3, 5, 7)),
    "mask_LqLk": ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 6), (5, 7)),
    "mask_keys_only": ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 6), (1, 1, 1, 7)),
    "mask_per_batch": ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 6), (2, 1, 5, 7)),
    "extra_batch_dims": ((2, 2, 3, 4, 8), (2, 2, 3, 6, 8), (2, 2, 3, 6, 5), (4, 6)),
    "three_dims_square": ((3, 6, 4), (3, 6, 4), (3, 6, 4), (6, 6)),
}


def sdpa_inputs(case, device, dtype, seed=0, requires_grad=False):
    gen = torch.Generator().manual_seed(seed)
    q_shape, k_shape, v_shape, mask_shape = SDPA_CASES[case]
    q, k, v = (
        randn(*s, device=device, dtype=dtype, gen=gen, requires_grad=requires_grad)
        for s in (q_shape, k_shape, v_shape)
    )
    mask = None if mask_shape is None else random_mask(mask_shape, gen, device)
    return q, k, v, mask


def check_sdpa_vs_torch(attention_fn, case, device, dtype, tol):
    """attention_fn(q, k, v, mask) -> (out, weights) equals F.scaled_dot_product_attention."""
    q, k, v, mask = sdpa_inputs(case, device, dtype)
    out, weights = attention_fn(q, k, v, mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    close(out, expected, tol, f"attention output differs from PyTorch's ({case})")
    # the weights are what PyTorch's kernel multiplies v with: recover them with v = identity
    eye = torch.eye(k.shape[-2], device=device, dtype=dtype).expand(*k.shape[:-1], k.shape[-2])
    expected_weights = F.scaled_dot_product_attention(q, k, eye, attn_mask=mask)
    close(weights, expected_weights, tol, f"attention weights differ from PyTorch's ({case})")


@pytest.mark.parametrize("case", list(SDPA_CASES))
def test_sdpa_parity(case, device, dtype, tol):
    check_sdpa_vs_torch(scaled_dot_product_attention, case, device, dtype, tol)


@pytest.mark.parametrize("case", list(SDPA_CASES))
def test_sdpa_weights_are_a_distribution(case, device, dtype):
    q, k, v, mask = sdpa_inputs(case, device, dtype, seed=1)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert out.shape == (*torch.broadcast_shapes(q.shape[:-1]), v.shape[-1])
    assert weights.shape == (*q.shape[:-1], k.shape[-2])
    assert (weights >= 0).all()
    sums = weights.sum(-1)
    close(sums, torch.ones_like(sums), {"atol": 1e-6, "rtol": 0}, "weight rows must sum to 1")
    if mask is not None:
        blocked = ~mask.expand_as(weights)
        assert (weights[blocked] == 0).all(), "masked positions must get exactly zero weight"
        assert (weights[~blocked] > 0).all()


def test_sdpa_fully_masked_row_gives_zeros(device, dtype):
    q, k, v, _ = sdpa_inputs("no_mask", device, dtype)
    mask = torch.ones(5, 7, dtype=torch.bool, device=device)
    mask[2] = False
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    assert (weights[..., 2, :] == 0).all() and (out[..., 2, :] == 0).all()


@pytest.mark.parametrize("mask_shape", [None, (1, 2, 3, 5), (3, 5), (1, 1, 1, 5)])
def test_sdpa_gradcheck(mask_shape):
    gen = torch.Generator().manual_seed(11)
    q, k, v = (
        torch.randn(*s, generator=gen, dtype=torch.float64, requires_grad=True)
        for s in ((1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 3))
    )
    mask = None if mask_shape is None else random_mask(mask_shape, gen, "cpu")
    assert torch.autograd.gradcheck(
        lambda q, k, v: scaled_dot_product_attention(q, k, v, mask), (q, k, v), fast_mode=True
    )
    # the full (slow) Jacobian check on a smaller problem
    q, k, v = (t.detach()[:, :1, :2, :2].requires_grad_() for t in (q, k, v))
    if mask is not None:
        mask = mask[:, :1, :2, :2] if mask.dim() == 4 else mask[:2, :2]
    assert torch.autograd.gradcheck(
        lambda q, k, v: scaled_dot_product_attention(q, k, v, mask), (q, k, v)
    )


@pytest.mark.parametrize("case", list(SDPA_CASES))
def test_fused_attention_equals_explicit(case, device, dtype, tol):
    q, k, v, mask = sdpa_inputs(case, device, dtype, seed=2, requires_grad=True)
    explicit, _ = scaled_dot_product_attention(q, k, v, mask)
    fused = fused_attention(q, k, v, mask)
    close(fused, explicit, tol, "fused and explicit attention differ")
    g = torch.randn_like(fused)
    grads_fused = torch.autograd.grad(fused, (q, k, v), g)
    grads_explicit = torch.autograd.grad(explicit, (q, k, v), g)
    for a, b in zip(grads_fused, grads_explicit):
        close(a, b, tol, "fused and explicit attention gradients differ")


def test_sdpa_error_messages():
    q, k, v = torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 6)
    with pytest.raises(ValueError, match=r"d_k=8.*d_k=6"):
        scaled_dot_product_attention(q, torch.randn(2, 7, 6), v)
    with pytest.raises(ValueError, match=r"k has 7 positions but v has 6"):
        scaled_dot_product_attention(q, k, torch.randn(2, 6, 6))
    # A 0/1 float mask is a type error (TypeError), and the message says how to fix it.
    with pytest.raises(TypeError, match=r"mask must be a bool tensor.*mask\.bool\(\)"):
        scaled_dot_product_attention(q, k, v, torch.ones(5, 7))
    with pytest.raises(ValueError, match=r"mask of shape \(5, 6\) does not broadcast.*\(2, 5, 7\)"):
        scaled_dot_product_attention(q, k, v, torch.ones(5, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"batch dimensions"):
        scaled_dot_product_attention(torch.randn(3, 5, 8), k, v)
    with pytest.raises(ValueError, match=r"at least 2 dims"):
        scaled_dot_product_attention(torch.randn(8), k, v)


# mutants of scaled_dot_product_attention


def sdpa_mask_after_softmax(q, k, v, mask=None):
    """Broken: normalises over all keys, then zeroes the masked ones (rows no longer sum to 1)."""
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ v, weights


def test_mutant_sdpa_without_scaling_is_caught(monkeypatch):
    monkeypatch.setattr(attention_mod, "math", types.SimpleNamespace(sqrt=lambda d: 1.0))
    with pytest.raises(AssertionError):
        check_sdpa_vs_torch(attention_mod.scaled_dot_product_attention, "no_mask", **CPU64)


def test_mutant_sdpa_softmax_over_queries_is_caught(monkeypatch):
    proxy = TorchProxy(softmax=lambda x, dim: torch.softmax(x, dim=-2))
    monkeypatch.setattr(attention_mod, "torch", proxy)
    with pytest.raises(AssertionError):
        check_sdpa_vs_torch(attention_mod.scaled_dot_product_attention, "no_mask", **CPU64)


def test_mutant_sdpa_mask_after_softmax_is_caught():
    check_sdpa_vs_torch(sdpa_mask_after_softmax, "no_mask", **CPU64)  # right without a mask
    with pytest.raises(AssertionError):
        check_sdpa_vs_torch(sdpa_mask_after_softmax, "mask_full", **CPU64)


# ----------------------------------------------------------------------------- heads


def check_split_heads(split, n_heads, device="cpu"):
    """split(x, h)[:, i] is the feature slice [i*d_k, (i+1)*d_k) of x: head i's subspace."""
    B, L, d = 2, 5, 8
    x = torch.randn(B, L, d, device=device)
    heads = split(x, n_heads)
    d_k = d // n_heads
    assert heads.shape == (B, n_heads, L, d_k)
    for i in range(n_heads):
        assert torch.equal(heads[:, i], x[..., i * d_k : (i + 1) * d_k]), f"head {i} is wrong"


@pytest.mark.parametrize("n_heads", [1, 2, 4])
def test_split_merge_heads(n_heads, device):
    check_split_heads(split_heads, n_heads, device)
    B, L, d_k = 2, 5, 8 // n_heads
    x = torch.randn(B, L, 8, device=device)
    assert torch.equal(merge_heads(split_heads(x, n_heads)), x)
    y = torch.randn(B, n_heads, L, d_k, device=device)
    merged = merge_heads(y)
    assert torch.equal(merged, torch.cat([y[:, i] for i in range(n_heads)], dim=-1))
    assert torch.equal(split_heads(merged, n_heads), y)


def test_mutant_split_heads_without_transpose_is_caught():
    def split_without_transpose(x, n_heads):
        B, L, d = x.shape
        return x.view(B, n_heads, L, d // n_heads)  # right shape, wrong numbers

    with pytest.raises(AssertionError):
        check_split_heads(split_without_transpose, 2)


def test_split_heads_errors():
    with pytest.raises(ValueError, match="not divisible"):
        split_heads(torch.randn(2, 5, 8), 3)
    with pytest.raises(ValueError, match=r"\(B, L, d_model\)"):
        split_heads(torch.randn(5, 8), 2)


# ----------------------------------------------------------------------------- multi-head


def copy_attention_weights(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    """in_proj_weight stacks the q, k, v projections; out_proj is W^O."""
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
        theirs.out_proj.weight.copy_(ours.w_o.weight)
        if ours.w_q.bias is not None:
            theirs.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
            theirs.out_proj.bias.copy_(ours.w_o.bias)


def ours_grads(mha: MultiHeadAttention):
    weight = torch.cat([mha.w_q.weight.grad, mha.w_k.weight.grad, mha.w_v.weight.grad])
    grads = [weight, mha.w_o.weight.grad]
    if mha.w_q.bias is not None:
        grads += [torch.cat([mha.w_q.bias.grad, mha.w_k.bias.grad, mha.w_v.bias.grad])]
        grads += [mha.w_o.bias.grad]
    return grads


def theirs_grads(mha: nn.MultiheadAttention):
    grads = [mha.in_proj_weight.grad, mha.out_proj.weight.grad]
    if mha.in_proj_bias is not None:
        grads += [mha.in_proj_bias.grad, mha.out_proj.bias.grad]
    return grads


MHA_MASKS = ["none", "causal", "padding", "per_head"]


def mha_masks(kind, B, h, Lq, Lk, gen, device):
    """Our mask (True = may attend) and nn.MultiheadAttention's attn_mask, key_padding_mask
    (True = NOT allowed)."""
    if kind == "none":
        return None, None, None
    if kind == "causal":
        mask = causal_mask(max(Lq, Lk), device=device)[:Lq, :Lk]
        return mask, ~mask, None
    if kind == "padding":
        keep = torch.ones(B, Lk, dtype=torch.bool)
        keep[0, Lk - 2 :] = False  # right padding in the first sequence
        keep = keep.to(device)
        return keep[:, None, None, :], None, ~keep
    mask = random_mask((B, h, Lq, Lk), gen, device)
    return mask, ~mask.reshape(B * h, Lq, Lk), None


def check_mha_vs_torch(device, dtype, tol, cross, mask_kind, explicit=False, bias=True):
    gen = torch.Generator().manual_seed(3)
    B, Lq, d, h = 2, 5, 16, 4
    Lk = 7 if cross else Lq
    ours = MultiHeadAttention(d, h, bias=bias).to(device, dtype)
    ours.explicit = explicit
    theirs = nn.MultiheadAttention(d, h, bias=bias, batch_first=True).to(device, dtype)
    copy_attention_weights(ours, theirs)
    x = randn(B, Lq, d, device=device, dtype=dtype, gen=gen, requires_grad=True)
    c = randn(B, Lk, d, device=device, dtype=dtype, gen=gen, requires_grad=True) if cross else x
    mask, attn_mask, key_padding_mask = mha_masks(mask_kind, B, h, Lq, Lk, gen, device)

    out = ours(x, context=c if cross else None, mask=mask)
    expected, _ = theirs(
        x, c, c, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False
    )
    close(out, expected, tol, f"MultiHeadAttention output differs ({mask_kind=}, {cross=})")

    g = randn(*out.shape, device=device, dtype=dtype, gen=gen)
    inputs = (x, c) if cross else (x,)
    grads = torch.autograd.grad(out, inputs, g, retain_graph=True)
    expected_grads = torch.autograd.grad(expected, inputs, g, retain_graph=True)
    for a, b in zip(grads, expected_grads):
        close(a, b, tol, "input gradients differ")
    out.backward(g)
    expected.backward(g)
    for a, b in zip(ours_grads(ours), theirs_grads(theirs)):
        close(a, b, tol, "parameter gradients differ")

    out, weights = ours(x, context=c if cross else None, mask=mask, need_weights=True)
    expected, expected_weights = theirs(
        x,
        c,
        c,
        attn_mask=attn_mask,
        key_padding_mask=key_padding_mask,
        need_weights=True,
        average_attn_weights=False,
    )
    assert weights.shape == (B, h, Lq, Lk)
    close(out, expected, tol, "need_weights output differs")
    close(weights, expected_weights, tol, "per-head attention weights differ")


@pytest.mark.parametrize("mask_kind", MHA_MASKS)
@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
@pytest.mark.parametrize("explicit", [False, True], ids=["fused", "explicit"])
def test_mha_parity(explicit, cross, mask_kind, device, dtype, tol):
    check_mha_vs_torch(device, dtype, tol, cross, mask_kind, explicit)


def test_mha_parity_without_bias():
    check_mha_vs_torch(**CPU64, cross=True, mask_kind="causal", bias=False)


@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
def test_mha_explicit_equals_fused(cross, device, dtype, tol):
    gen = torch.Generator().manual_seed(4)
    mha = MultiHeadAttention(16, 4).to(device, dtype)
    x = randn(2, 5, 16, device=device, dtype=dtype, gen=gen, requires_grad=True)
    c = randn(2, 6, 16, device=device, dtype=dtype, gen=gen) if cross else None
    mask = random_mask((2, 1, 5, 6 if cross else 5), gen, device)
    results = []
    for explicit in (False, True):
        mha.explicit = explicit
        out = mha(x, context=c, mask=mask)
        results.append((out, *torch.autograd.grad(out.square().sum(), [x, *mha.parameters()])))
    for a, b in zip(*results):
        close(a, b, tol, "explicit and fused paths differ")


def test_mha_error_messages():
    mha = MultiHeadAttention(16, 4)
    with pytest.raises(ValueError, match="not divisible"):
        MultiHeadAttention(10, 4)
    with pytest.raises(ValueError, match="x has d_model=8 but this layer expects 16"):
        mha(torch.randn(2, 5, 8))
    with pytest.raises(ValueError, match="batch 2 but context has batch 3"):
        mha(torch.randn(2, 5, 16), context=torch.randn(3, 5, 16))
    with pytest.raises(ValueError, match=r"does not broadcast to \(B, h, L_q, L_k\)"):
        mha(torch.randn(2, 5, 16), mask=torch.ones(4, 5, dtype=torch.bool))


def test_mutant_heads_merged_without_transpose_is_caught(monkeypatch):
    def merge_without_transpose(x):
        B, h, L, d_k = x.shape
        return x.reshape(B, L, h * d_k)  # forgets to bring the heads next to the features

    monkeypatch.setattr(multihead_mod, "merge_heads", merge_without_transpose)
    with pytest.raises(AssertionError):
        check_mha_vs_torch(**CPU64, cross=False, mask_kind="none")


def test_mutant_mha_attention_without_scaling_is_caught(monkeypatch):
    monkeypatch.setattr(attention_mod, "math", types.SimpleNamespace(sqrt=lambda d: 1.0))
    with pytest.raises(AssertionError):
        check_mha_vs_torch(**CPU64, cross=True, mask_kind="padding", explicit=True)


# ----------------------------------------------------------------------------- LayerNorm


class LayerNormUnbiased(LayerNorm):
    """Broken: the unbiased (n - 1) variance, as torch.var's default."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=True)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class LayerNormEpsOutside(LayerNorm):
    """Broken: eps added after the square root."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / (torch.sqrt(var) + self.eps) + self.bias


def check_layernorm_vs_torch(cls, device, dtype, tol, eps, d=12):
    gen = torch.Generator().manual_seed(5)
    theirs = nn.LayerNorm(d, eps=eps).to(device, dtype)
    with torch.no_grad():
        theirs.weight.copy_(randn(d, device=device, dtype=dtype, gen=gen))
        theirs.bias.copy_(randn(d, device=device, dtype=dtype, gen=gen))
    ours = cls(d, eps=eps).to(device, dtype)
    ours.load_state_dict(theirs.state_dict())  # same keys: weight, bias
    # small spread so that eps matters, a large offset so that the mean matters
    x = 3 + 0.05 * randn(3, 4, d, device=device, dtype=dtype, gen=gen)
    x.requires_grad_()
    out, expected = ours(x), theirs(x)
    close(out, expected, tol, f"LayerNorm differs ({eps=})")
    g = randn(*out.shape, device=device, dtype=dtype, gen=gen)
    grads = torch.autograd.grad(out, (x, ours.weight, ours.bias), g)
    expected_grads = torch.autograd.grad(expected, (x, theirs.weight, theirs.bias), g)
    for a, b in zip(grads, expected_grads):
        close(a, b, {k: 10 * v for k, v in tol.items()}, "LayerNorm gradients differ")


@pytest.mark.parametrize("eps", [1e-5, 1e-3, 1e-1])
def test_layernorm_parity(eps, device, dtype, tol):
    check_layernorm_vs_torch(LayerNorm, device, dtype, tol, eps)


def test_layernorm_gradcheck():
    ln = LayerNorm(6, eps=1e-3).double()
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    x = torch.randn(2, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(ln, (x,))  # d out / d x
    params = (ln.weight, ln.bias)
    assert torch.autograd.gradcheck(
        lambda *p: torch.func.functional_call(ln, dict(zip(["weight", "bias"], p)), (x,)), params
    )
    assert list(ln.state_dict()) == ["weight", "bias"]
    with pytest.raises(ValueError, match="last dimension 5"):
        ln(torch.randn(2, 5))


@pytest.mark.parametrize("mutant", [LayerNormUnbiased, LayerNormEpsOutside])
def test_mutant_layernorm_is_caught(mutant):
    check_layernorm_vs_torch(LayerNorm, **CPU64, eps=1e-5)
    with pytest.raises(AssertionError):
        check_layernorm_vs_torch(mutant, **CPU64, eps=1e-5)


# ----------------------------------------------------------------------------- FeedForward

MANUAL_ACTIVATIONS = {
    "relu": torch.relu,
    "gelu": lambda x: 0.5 * x * (1 + torch.erf(x / math.sqrt(2))),
    "gelu_tanh": lambda x: (
        0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    ),
}


def check_feedforward(activation, device, dtype, tol):
    gen = torch.Generator().manual_seed(6)
    ffn = FeedForward(8, 20, activation).to(device, dtype)
    x = randn(2, 5, 8, device=device, dtype=dtype, gen=gen)
    hidden = MANUAL_ACTIVATIONS[activation](x @ ffn.w_1.weight.T + ffn.w_1.bias)
    expected = hidden @ ffn.w_2.weight.T + ffn.w_2.bias
    close(ffn(x), expected, tol, f"FeedForward({activation}) differs from w_2(act(w_1 x))")
    # position-wise: position 3 alone gives the same result
    close(ffn(x[:, 3:4]), expected[:, 3:4], tol, "FeedForward is not position-wise")


@pytest.mark.parametrize("activation", list(MANUAL_ACTIVATIONS))
def test_feedforward_parity(activation, device, dtype, tol):
    check_feedforward(activation, device, dtype, tol)


def test_feedforward_rejects_unknown_activation():
    with pytest.raises(ValueError, match="activation must be one of"):
        FeedForward(8, 16, "swish")


def test_mutant_feedforward_wrong_gelu_is_caught(monkeypatch):
    monkeypatch.setitem(add_norm_mod.ACTIVATIONS, "gelu_tanh", F.gelu)  # exact instead of tanh
    with pytest.raises(AssertionError):
        check_feedforward("gelu_tanh", **CPU64)


# ----------------------------------------------------------------------------- encoder block


def copy_ffn_and_norms(ours, theirs, n_norms):
    with torch.no_grad():
        theirs.linear1.weight.copy_(ours.ffn.w_1.weight)
        theirs.linear1.bias.copy_(ours.ffn.w_1.bias)
        theirs.linear2.weight.copy_(ours.ffn.w_2.weight)
        theirs.linear2.bias.copy_(ours.ffn.w_2.bias)
        for i in range(1, n_norms + 1):
            norm = getattr(ours, f"norm{i}")
            norm.weight.normal_()  # random γ, β so that the norms are not the identity
            norm.bias.normal_()
            getattr(theirs, f"norm{i}").load_state_dict(norm.state_dict())


def right_padding(B, L, device):
    keep = torch.ones(B, L, dtype=torch.bool)
    keep[0, L - 2 :] = False
    keep[-1, L - 1 :] = False
    return keep.to(device)


def check_encoder_block(block_cls, device, dtype, tol, norm_first, mask_kind, activation="relu"):
    torch.manual_seed(7)
    B, L, d, h, d_ff = 3, 6, 16, 4, 32
    ours = block_cls(d, h, d_ff, dropout=0.0, norm_first=norm_first, activation=activation)
    theirs = nn.TransformerEncoderLayer(
        d, h, d_ff, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    )
    ours, theirs = ours.to(device, dtype), theirs.to(device, dtype)
    copy_attention_weights(ours.self_attn, theirs.self_attn)
    copy_ffn_and_norms(ours, theirs, 2)
    x = torch.randn(B, L, d, dtype=dtype, device=device, requires_grad=True)
    keep = right_padding(B, L, device)
    causal = causal_mask(L, device=device)
    mask, src_mask, src_key_padding_mask = {
        "none": (None, None, None),
        "padding": (padding_mask(keep.long(), 0), None, ~keep),
        "causal": (causal, ~causal, None),
        "causal_padding": (combine_masks(causal, padding_mask(keep.long(), 0)), ~causal, ~keep),
    }[mask_kind]
    out = ours(x, mask=mask)
    expected = theirs(x, src_mask=src_mask, src_key_padding_mask=src_key_padding_mask)
    close(out, expected, tol, f"EncoderBlock differs ({norm_first=}, {mask_kind=})")
    g = torch.randn_like(out)
    (grad,) = torch.autograd.grad(out, x, g)
    (expected_grad,) = torch.autograd.grad(expected, x, g)
    close(grad, expected_grad, tol, "EncoderBlock input gradients differ")


@pytest.mark.parametrize("mask_kind", ["none", "padding", "causal", "causal_padding"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_encoder_block_parity(norm_first, mask_kind, device, dtype, tol):
    check_encoder_block(EncoderBlock, device, dtype, tol, norm_first, mask_kind)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_encoder_block_parity_gelu(norm_first):
    check_encoder_block(
        EncoderBlock, **CPU64, norm_first=norm_first, mask_kind="padding", activation="gelu"
    )


class EncoderBlockNormSwapped(EncoderBlock):
    """Broken: builds the pre-norm block when post-norm is asked for, and vice versa."""

    def __init__(self, *args, norm_first=False, **kwargs):
        super().__init__(*args, norm_first=not norm_first, **kwargs)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_mutant_encoder_block_norm_swapped_is_caught(norm_first):
    with pytest.raises(AssertionError):
        check_encoder_block(
            EncoderBlockNormSwapped, **CPU64, norm_first=norm_first, mask_kind="none"
        )


def test_mutant_encoder_block_layernorm_unbiased_is_caught():
    """The block's LayerNorm is the one passed in (`norm=`): a wrong one fails the parity."""
    block = functools.partial(EncoderBlock, norm=LayerNormUnbiased)
    with pytest.raises(AssertionError):
        check_encoder_block(block, **CPU64, norm_first=False, mask_kind="none")


# ----------------------------------------------------------------------------- decoder block


def check_decoder_block(block_cls, device, dtype, tol, norm_first):
    torch.manual_seed(8)
    B, L_t, L_s, d, h, d_ff = 3, 5, 7, 16, 4, 32
    ours = block_cls(d, h, d_ff, dropout=0.0, norm_first=norm_first).to(device, dtype)
    theirs = nn.TransformerDecoderLayer(
        d, h, d_ff, dropout=0.0, batch_first=True, norm_first=norm_first
    ).to(device, dtype)
    copy_attention_weights(ours.self_attn, theirs.self_attn)
    copy_attention_weights(ours.cross_attn, theirs.multihead_attn)
    copy_ffn_and_norms(ours, theirs, 3)
    x = torch.randn(B, L_t, d, dtype=dtype, device=device, requires_grad=True)
    memory = torch.randn(B, L_s, d, dtype=dtype, device=device, requires_grad=True)
    causal = causal_mask(L_t, device=device)
    keep = right_padding(B, L_s, device)
    out = ours(x, memory, self_mask=causal, memory_mask=padding_mask(keep.long(), 0))
    expected = theirs(x, memory, tgt_mask=~causal, memory_key_padding_mask=~keep)
    close(out, expected, tol, f"DecoderBlock differs ({norm_first=})")
    g = torch.randn_like(out)
    grads = torch.autograd.grad(out, (x, memory), g)
    expected_grads = torch.autograd.grad(expected, (x, memory), g)
    for a, b in zip(grads, expected_grads):
        close(a, b, tol, "DecoderBlock gradients differ")


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_decoder_block_parity(norm_first, device, dtype, tol):
    check_decoder_block(DecoderBlock, device, dtype, tol, norm_first)


class DecoderBlockWithoutCausalMask(DecoderBlock):
    """Broken: the decoder's self-attention sees the future."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        return super().forward(x, memory, self_mask=None, memory_mask=memory_mask)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_mutant_decoder_block_without_causal_mask_is_caught(norm_first):
    with pytest.raises(AssertionError):
        check_decoder_block(DecoderBlockWithoutCausalMask, **CPU64, norm_first=norm_first)


# ----------------------------------------------------------------------------- positions


@pytest.mark.parametrize("d_model", [1, 6, 7, 16])
def test_sinusoidal_matches_formula(d_model):
    n = 20
    pe = sinusoidal_positional_encoding(n, d_model, dtype=torch.float64)
    assert pe.shape == (n, d_model) and pe.dtype == torch.float64
    expected = torch.empty(n, d_model, dtype=torch.float64)
    for t in range(n):
        for i in range(d_model):
            omega = 10000 ** (-(i - i % 2) / d_model)  # ω_k with 2k = i rounded down to even
            expected[t, i] = math.sin(t * omega) if i % 2 == 0 else math.cos(t * omega)
    close(pe, expected, {"atol": 1e-12, "rtol": 0}, "sinusoidal encoding differs from the formula")
    assert sinusoidal_positional_encoding(n, d_model).dtype == torch.get_default_dtype()


def test_sinusoidal_bounded_and_relative():
    pe = sinusoidal_positional_encoding(200, 32, dtype=torch.float64)
    assert pe.abs().max() <= 1.0
    assert (pe[:, 1::2].square() + pe[:, 0::2].square() - 1).abs().max() < 1e-12
    for k in (0, 1, 5, 17):
        dots = (pe[: 200 - k] * pe[k:]).sum(-1)  # PE[t] · PE[t + k] for every t
        assert (dots - dots[0]).abs().max() < 1e-9, f"PE[t]·PE[t+{k}] depends on t"
    assert (pe[:-1] * pe[1:]).sum(-1)[0] != (pe[:-5] * pe[5:]).sum(-1)[0]


def test_sinusoidal_module_adds_table(device):
    module = SinusoidalPositionalEncoding(8, max_len=10).to(device)
    x = torch.zeros(2, 4, 8, device=device, dtype=torch.float64)
    out = module(x, offset=3)
    close(
        out[0],
        sinusoidal_positional_encoding(10, 8, dtype=torch.float64)[3:7].to(device),
        {"atol": 1e-7, "rtol": 0},
    )
    assert out.dtype == torch.float64
    with pytest.raises(ValueError, match="exceeds max_len=10"):
        module(x, offset=7)


def test_rotary_relative_positions(dtype):
    gen = torch.Generator().manual_seed(9)
    d, n = 16, 64
    q = torch.randn(d, generator=gen, dtype=torch.float64).to(dtype)
    k = torch.randn(d, generator=gen, dtype=torch.float64).to(dtype)
    positions = torch.arange(n)
    rq = rotary_embedding(q.expand(n, d), positions)  # q placed at every position
    rk = rotary_embedding(k.expand(n, d), positions)
    scores = rq @ rk.T  # scores[s, t] = q at s · k at t
    atol = 1e-4 if dtype == torch.float32 else 1e-10
    for offset in (-7, -1, 0, 1, 3, 20):
        diag = torch.diagonal(scores, offset=-offset)  # all pairs with s - t = offset
        assert (diag - diag[0]).abs().max() < atol, f"q·k depends on more than s - t = {offset}"
    assert (torch.diagonal(scores, 0)[0] - torch.diagonal(scores, -3)[0]).abs() > 1e-3
    x = torch.randn(2, 3, n, d, generator=gen, dtype=torch.float64).to(dtype)
    rx = rotary_embedding(x)
    close(rx.norm(dim=-1), x.norm(dim=-1), {"atol": atol, "rtol": 0}, "rotation changed the norm")
    assert torch.equal(rx[..., 0, :], x[..., 0, :]), "position 0 must be the identity"
    assert rx.dtype == dtype
    with pytest.raises(ValueError, match="even feature size"):
        rotary_embedding(torch.randn(4, 5))


def test_learned_positions_cannot_extrapolate():
    module = LearnedPositionalEmbedding(6, 4)
    x = torch.zeros(2, 6, 4)
    assert torch.equal(module(x)[1], module.embedding.weight.detach())
    with pytest.raises(ValueError, match="beyond the 6 learned positions"):
        module(torch.zeros(2, 7, 4))
    with pytest.raises(ValueError, match="cannot extrapolate"):
        module(torch.zeros(1, 2, 4), offset=5)


# ----------------------------------------------------------------------------- masking


def test_causal_mask(device):
    mask = causal_mask(4, device=device)
    assert mask.dtype == torch.bool and mask.shape == (4, 4) and mask.device.type == device.type
    expected = torch.tensor(
        [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool
    )
    assert torch.equal(mask.cpu(), expected)
    assert causal_mask(0).shape == (0, 0)
    with pytest.raises(ValueError):
        causal_mask(-1)


def test_padding_mask(device):
    tokens = torch.tensor([[5, 6, 0, 0], [7, 0, 8, 9]], device=device)
    mask = padding_mask(tokens, pad_id=0)
    assert mask.dtype == torch.bool and mask.shape == (2, 1, 1, 4)
    expected = torch.tensor([[1, 1, 0, 0], [1, 0, 1, 1]], dtype=torch.bool)
    assert torch.equal(mask[:, 0, 0].cpu(), expected)
    with pytest.raises(TypeError, match="integer ids"):
        padding_mask(tokens.float(), 0)
    with pytest.raises(ValueError, match=r"\(B, L\)"):
        padding_mask(tokens[0], 0)


def test_combine_masks():
    tokens = torch.tensor([[5, 6, 0], [7, 8, 9]])
    combined = combine_masks(causal_mask(3), None, padding_mask(tokens, 0))
    assert combined.shape == (2, 1, 3, 3) and combined.dtype == torch.bool
    expected0 = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 0]], dtype=torch.bool)
    assert torch.equal(combined[0, 0], expected0)
    assert torch.equal(combined[1, 0], causal_mask(3))
    assert combine_masks(None, None) is None
    only = causal_mask(2)
    assert combine_masks(only) is only


# ----------------------------------------------------------------------------- RNN


def check_rnn(device, dtype, tol, with_h0):
    gen = torch.Generator().manual_seed(10)
    ours = RNN(5, 7).to(device, dtype)
    theirs = nn.RNN(5, 7, batch_first=True, nonlinearity="tanh").to(device, dtype)
    with torch.no_grad():
        theirs.weight_ih_l0.copy_(ours.w_xh.weight)
        theirs.bias_ih_l0.copy_(ours.w_xh.bias)
        theirs.weight_hh_l0.copy_(ours.w_hh.weight)
        theirs.bias_hh_l0.copy_(ours.w_hh.bias)
    x = randn(3, 6, 5, device=device, dtype=dtype, gen=gen, requires_grad=True)
    h0 = randn(3, 7, device=device, dtype=dtype, gen=gen) if with_h0 else None
    outputs, h_n = ours(x, h0)
    expected, expected_h = theirs(x, None if h0 is None else h0[None])
    close(outputs, expected, tol, "RNN outputs differ from nn.RNN")
    close(h_n, expected_h[0], tol, "RNN final state differs from nn.RNN")
    (grad,) = torch.autograd.grad(outputs.sum(), x)
    (expected_grad,) = torch.autograd.grad(expected.sum(), x)
    close(grad, expected_grad, tol, "RNN gradients differ from nn.RNN")


@pytest.mark.parametrize("with_h0", [False, True])
def test_rnn_parity(with_h0, device, dtype, tol):
    check_rnn(device, dtype, tol, with_h0)


def test_mutant_rnn_relu_is_caught(monkeypatch):
    monkeypatch.setattr(rnn_mod, "torch", TorchProxy(tanh=torch.relu))
    with pytest.raises(AssertionError):
        check_rnn(**CPU64, with_h0=True)


def test_rnn_empty_sequence_and_errors():
    outputs, h = RNN(3, 4)(torch.zeros(2, 0, 3))
    assert outputs.shape == (2, 0, 4) and h.shape == (2, 4)
    with pytest.raises(ValueError, match="d_in=2 but this RNN expects 3"):
        RNN(3, 4)(torch.zeros(2, 5, 2))


@pytest.mark.parametrize("n", [1, 2, 10, 100])
def test_complexity_table(n):
    # Vaswani et al. (2017), Table 1: recurrent O(n) sequential operations and O(n) path length;
    # self-attention O(1) and O(1).
    assert sequential_steps("rnn", n) == n
    assert sequential_steps("attention", n) == 1
    assert max_path_length("attention", n) == 1
    assert max_path_length("rnn", n) == max(1, n - 1)  # from the first token to the last
    # contiguous kernels of width k: ceil((n - 1) / (k - 1)) stacked layers connect the ends, O(n/k)
    assert max_path_length("conv", n, kernel_size=3) == max(1, math.ceil((n - 1) / 2))
    assert max_path_length("conv", n, kernel_size=5) == max(1, math.ceil((n - 1) / 4))
    with pytest.raises(ValueError, match="kind must be"):
        sequential_steps("lstm", n)


def test_conv_counts_the_layers_a_stack_needs_to_connect_all_tokens():
    # One convolutional layer is O(1) sequential operations (Table 1); our `sequential_steps`
    # counts the word-window stack that lets the first and last of n tokens interact.
    assert sequential_steps("conv", 2, kernel_size=3) == 1
    assert sequential_steps("conv", 100, kernel_size=3) == 50
    assert sequential_steps("conv", 100, kernel_size=5) == 25


@pytest.mark.parametrize("eps", [1e-5, 1e-2])
def test_layernorm_fused_path_equals_explicit(dtype, eps):
    g = torch.Generator().manual_seed(3)
    ln = LayerNorm(12, eps=eps).to(dtype)
    with torch.no_grad():
        ln.weight.copy_(torch.randn(12, generator=g))
        ln.bias.copy_(torch.randn(12, generator=g))
    x = torch.randn(3, 5, 12, generator=g, dtype=dtype) * 4 + 1
    assert not ln.explicit  # the one default: the fused kernel
    fused = ln(x)
    ln.explicit = True  # the formula as written in lesson 05
    explicit = ln(x)
    torch.testing.assert_close(fused, explicit)


@pytest.mark.parametrize(
    "shapes",
    [((2, 3), (3,)), ((1,), (4, 1, 5)), ((2, 1, 4), (1, 3, 1)), ((), (2, 2)), ((0, 1), (1, 5))],
)
def test_broadcast_shapes_matches_torch(shapes):
    from transformer_lab._validate import broadcast_shapes

    assert broadcast_shapes(*shapes) == tuple(torch.broadcast_shapes(*shapes))


@pytest.mark.parametrize("shapes", [((2, 3), (4,)), ((2, 1, 4), (3, 3, 1)), ((2,), (0,))])
def test_broadcast_shapes_refuses_what_torch_refuses(shapes):
    from transformer_lab._validate import broadcast_shapes

    with pytest.raises(RuntimeError):
        torch.broadcast_shapes(*shapes)
    with pytest.raises(ValueError, match="do not broadcast"):
        broadcast_shapes(*shapes)
