"""The altered-input diagnosers (check/variants.py) and the no-keepdim crash diagnoser
(check/crashes.py): each names, through a real check, a wrong implementation that has its mistake,
and names nothing (of its kind) for a near miss that has another."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from transformer_lab import check
from transformer_lab.check import compare, crashes, variants

CPU = torch.device("cpu")


def key_of(check_fn, impl) -> str | None:
    with pytest.raises(check.CheckFailed) as info:
        check_fn(impl)
    return info.value.mistake_key


# ----------------------------------------------------------------------------------------------
# A wrong axis: the reference on an input with two axes swapped


def cls_map_batch_mean(weights, grid):
    rows, cols = grid
    return weights[:, :, 0, 1:].mean(dim=0).reshape(-1, rows, cols)  # the batch, not the heads


def cls_map_second_row(weights, grid):
    rows, cols = grid
    return weights[:, :, 1, 1:].mean(dim=1).reshape(-1, rows, cols)  # another query's row


def test_swapped_axes_names_a_mean_over_the_wrong_axis():
    assert key_of(check.cls_attention_map, cls_map_batch_mean) == "variant-swapped-axes"
    assert not (key_of(check.cls_attention_map, cls_map_second_row) or "").startswith("variant")


def test_swapped_axes_of_the_result_too():
    """shift_targets along the batch axis: the reference on idx.T, transposed back."""

    def shift_along_batch(idx, pad_id=None):
        t = torch.full_like(idx, -100)
        t[:-1] = idx[1:]
        if pad_id is not None:
            t[t == pad_id] = -100
        return t

    assert key_of(check.shift_targets, shift_along_batch) == "variant-swapped-axes"


# ----------------------------------------------------------------------------------------------
# A scale on one input: √d of the wrong dimension


def sdpa_dk_from_dim1(q, k, v, mask=None):
    d_k = q.shape[1]  # the query length for (B, L, d), not d_k
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, -1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_scale_off(q, k, v, mask=None):
    return sdpa_dk_from_dim1(q * 1.1, k, v, mask)  # no size of the case gives 1.1


def test_scaled_input_names_the_wrong_dimension():
    with pytest.raises(check.CheckFailed) as info:
        check.scaled_dot_product_attention(sdpa_dk_from_dim1)
    assert info.value.mistake_key == "variant-scaled-input"
    assert "where √" in info.value.mistake  # which size stood for which
    assert key_of(check.scaled_dot_product_attention, sdpa_scale_off) != "variant-scaled-input"


# ----------------------------------------------------------------------------------------------
# An integer argument: the size of a piece for the number of pieces, or one step short


def split_size_for_count(x, n_heads):
    B, L, _ = x.shape
    return x.view(B, L, -1, n_heads).transpose(1, 2)  # (B, d_k, L, h)


def split_interleaved(x, n_heads):
    B, L, d = x.shape
    return x.view(B, L, d // n_heads, n_heads).permute(0, 3, 1, 2)  # right shape, wrong values


def test_piece_size_names_a_count_for_a_size():
    assert key_of(check.split_heads, split_size_for_count) == "variant-piece-size"
    assert not (key_of(check.split_heads, split_interleaved) or "").startswith("variant")


def greedy_one_step_short(model, src, bos_id, eos_id, max_len):
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len - 1):  # one step short
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done = done | (nxt == eos_id)
        if done.all():
            break
    return ys


def padding_mask_next_id(tokens, pad_id):
    return (tokens != pad_id + 1)[:, None, None, :]  # an id one off: the shape is right


def test_off_by_one_through_a_trial():
    """A loop one step short, through a trial (the reference's result read by the probe): the
    last step is missing; an id one off keeps the shape, and no altered argument is named."""
    assert key_of(check.greedy_decode, greedy_one_step_short) == "generic-missing-slice"
    assert not (key_of(check.padding_mask, padding_mask_next_id) or "").startswith("variant")


def square_mask(n):
    return torch.ones(n, n, dtype=torch.bool).tril()


def test_off_by_one_argument():
    n = 5
    for wrong, key in (
        (square_mask(n - 1), "variant-off-by-one-argument"),
        (square_mask(n).T, None),  # the shape is right: another mistake
    ):
        found = variants.name(square_mask, lambda impl: impl(n), wrong, square_mask(n), torch.equal)
        assert (found[0] if found else None) == key


# ----------------------------------------------------------------------------------------------
# A scalar stored as a logarithm


def clip_divide_by_t(image_features, text_features, logit_scale):
    img = nn.functional.normalize(image_features, dim=-1)
    txt = nn.functional.normalize(text_features, dim=-1)
    logits = img @ txt.T / logit_scale  # a temperature, not the log of a scale
    labels = torch.arange(len(img), device=img.device)
    ce = nn.functional.cross_entropy
    return (ce(logits, labels) + ce(logits.T, labels)) / 2


def clip_scale_off(image_features, text_features, logit_scale):
    return clip_divide_by_t(image_features, text_features, logit_scale * 1.5)


def test_log_scale():
    assert key_of(check.clip_loss, clip_divide_by_t) == "variant-log-scale"
    assert key_of(check.clip_loss, clip_scale_off) != "variant-log-scale"


# ----------------------------------------------------------------------------------------------
# An inverted boolean input, and what names nothing


def keep(x, mask):
    return x.masked_fill(~mask, 0.0)


def run_on(x, mask):
    return lambda impl: impl(x=x, mask=mask)


def close(a, b):
    return compare.same_within_tolerance(a, b, torch.float64, CPU)


def test_inverted_mask_and_nothing_else():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, dtype=torch.float64, generator=g)
    mask = torch.rand(3, 4, generator=g) > 0.5
    expected = keep(x, mask)
    found = variants.name(keep, run_on(x, mask), x.masked_fill(mask, 0.0), expected, close)
    assert found[0] == "variant-inverted-mask"
    assert variants.name(keep, run_on(x, mask), expected + 0.3, expected, close) is None
    # an implementation run more than once per case (a statistical trial) names nothing
    twice = lambda impl: (impl(x=x, mask=mask), impl(x=x, mask=mask))[1]  # noqa: E731
    assert variants.name(keep, twice, x.masked_fill(mask, 0.0), expected, close) is None


# ----------------------------------------------------------------------------------------------
# A crash: a reduction without keepdim=True


class LayerNormNoKeepdim(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(dim=-1)
        var = x.var(dim=-1, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


def pool_mask_not_unsqueezed(hidden, attention_mask, normalize=True):
    m = attention_mask.to(hidden.dtype)  # (B, L): not a reduction, so not this mistake
    mean = (hidden * m).sum(1) / m.sum(1, keepdim=True)
    return nn.functional.normalize(mean, dim=-1) if normalize else mean


def pool_counts_without_keepdim(hidden, attention_mask, normalize=True):
    m = attention_mask.to(hidden.dtype)
    mean = (hidden * m[..., None]).sum(1) / m.sum(1)  # (B, d) / (B,): the count lost its axis
    return nn.functional.normalize(mean, dim=-1) if normalize else mean


def test_no_keepdim_crash():
    assert key_of(check.mean_pool, pool_counts_without_keepdim) == "crash-no-keepdim"
    with pytest.raises(check.CheckFailed) as info:
        check.LayerNorm(LayerNormNoKeepdim)
    assert info.value.mistake_key == "crash-no-keepdim"
    assert "`mean`" in info.value.mistake
    assert key_of(check.mean_pool, pool_mask_not_unsqueezed) != "crash-no-keepdim"


# ----------------------------------------------------------------------------------------------
# Crashes whose error (and the student's line) has one cause


def ls_gather_unclamped(logits, targets, eps=0.1, ignore_index=-100):
    logp = torch.log_softmax(logits, dim=-1)
    nll = -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # -100 used as an index
    loss = (1 - eps) * nll - eps * logp.mean(-1)
    return loss[targets != ignore_index].mean()


def sdpa_dot_t(q, k, v, mask=None):
    scores = q @ k.T / math.sqrt(q.shape[-1])  # .T of a 3-D tensor reverses all three axes
    weights = torch.softmax(scores, -1)
    return weights @ v, weights


def pe_positions_not_column(n_positions, d_model):
    t = torch.arange(n_positions, dtype=torch.float32)
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    angles = t * omega  # (n,) with (d/2,): no [:, None]
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe


def pe_table_too_wide(n_positions, d_model):
    t = torch.arange(n_positions, dtype=torch.float32)[:, None]
    omega = 10000.0 ** (-torch.arange(0, d_model, 1, dtype=torch.float32) / d_model)
    angles = t * omega  # (n, d): a broadcast that works, then a shape that does not
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(angles)
    return pe


@pytest.mark.filterwarnings("ignore:The use of `x.T`:UserWarning")
def test_crashes_named_through_checks():
    assert key_of(check.label_smoothed_loss, ls_gather_unclamped) == "crash-ignore-index-used"
    assert key_of(check.scaled_dot_product_attention, sdpa_dot_t) == "crash-dot-t"
    pe = check.sinusoidal_positional_encoding
    assert key_of(pe, pe_positions_not_column) == "crash-outer-product"
    assert key_of(pe, pe_table_too_wide) != "crash-outer-product"


class LearnedArangeToL(nn.Module):
    def __init__(self, n_positions, d_model):
        super().__init__()
        self.embedding = nn.Embedding(n_positions, d_model)

    def forward(self, x, offset=0):
        L = x.shape[1]
        return x + self.embedding(torch.arange(offset, L, device=x.device))  # a length, no end


def test_arange_given_a_length():
    with pytest.raises(check.CheckFailed) as info:
        check.LearnedPositionalEmbedding(LearnedArangeToL)
    assert info.value.mistake_key == "crash-arange-length"
    assert "arange(offset, offset + L)" in info.value.mistake


def raised(thunk) -> BaseException:
    try:
        thunk()
    except Exception as err:  # noqa: BLE001 - the error itself is the test's input
        return err
    raise AssertionError("expected an error")


@pytest.mark.parametrize(
    "thunk, key",
    [
        (lambda: torch.cat([torch.zeros(1, 1, 4), torch.zeros(2, 3, 4)], 1), "crash-cat-size-one"),
        (lambda: torch.cat([torch.zeros(2, 1, 4), torch.zeros(3, 3, 4)], 1), None),
        (lambda: torch.randint(0, 0, (1,)), "crash-empty-draw"),
    ],
)
def test_crashes_named_by_their_error(thunk, key):
    found = crashes.name(raised(thunk))
    assert (found[0] if found else None) == key
