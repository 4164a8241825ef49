"""Lesson 02 (QKV attention): held-out set six, wrong and right implementations from the exercise text only."""

import math

import torch
from torch import nn

# ---------------------------------------------------------------- scaled_dot_product_attention


def sdpa_right(q, k, v, mask=None):
    """Right: scores / sqrt(d_k), masked_fill(~mask, -inf) before softmax(-1), nan_to_num(0)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_right2(q, k, v, mask=None):
    """Right: einsum, q pre-scaled, a stable hand-written softmax with exp and where, zero rows when all masked."""
    d_k = q.size(-1)
    scores = torch.einsum("...qd,...kd->...qk", q * d_k**-0.5, k)
    if mask is not None:
        mask = torch.broadcast_to(mask, scores.shape)
        scores = torch.where(mask, scores, torch.full_like(scores, -math.inf))
    top = scores.amax(dim=-1, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    e = torch.exp(scores - top)
    total = e.sum(dim=-1, keepdim=True)
    weights = torch.where(
        total > 0, e / total.clamp_min(torch.finfo(e.dtype).tiny), torch.zeros_like(e)
    )
    out = torch.einsum("...qk,...kd->...qd", weights, v)
    return out, weights


def sdpa_no_nan_fix(q, k, v, mask=None):
    """Wrong: leaves NaN rows when every key of a query is masked (no nan_to_num)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def sdpa_large_negative(q, k, v, mask=None):
    """Wrong: masked scores set to -1e9 (all-masked rows become uniform, not zero)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def sdpa_scale_by_dv(q, k, v, mask=None):
    """Wrong: divides by sqrt of v's last dimension instead of d_k."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(v.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_dotT(q, k, v, mask=None):
    """Wrong: transposes k with transpose(1, 2), right only for 3-D inputs (heads or no batch break it)."""
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_mask_int_multiply(q, k, v, mask=None):
    """Wrong: multiplies the scores by the mask (masked scores become 0, not -inf)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores * mask
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def sdpa_renormalise_after(q, k, v, mask=None):
    """Wrong: softmax first, then zeroes masked weights without renormalising the rows."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ v, weights


def sdpa_inplace_scores(q, k, v, mask=None):
    """Wrong: scales q in place (q /= sqrt(d_k)), editing the caller's tensor."""
    with torch.no_grad():
        q.div_(math.sqrt(q.shape[-1]))
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_returns_scores(q, k, v, mask=None):
    """Wrong: returns the pre-softmax scores as the weights."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, scores


def sdpa_float32_cast(q, k, v, mask=None):
    """Wrong: builds the scale as a float32 tensor and casts scores to float32 (loses float64)."""
    scale = torch.tensor(q.shape[-1], dtype=torch.float32).sqrt()
    scores = (q @ k.transpose(-2, -1)).float() / scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v.float(), weights


# ---------------------------------------------------------------- SelfAttention


class _SA(nn.Module):
    def __init__(self, d_model, d_k=None, d_v=None):
        super().__init__()
        d_k = d_k or d_model
        d_v = d_v or d_model
        self.d_model, self.d_k, self.d_v = d_model, d_k, d_v
        self.w_q = nn.Linear(d_model, d_k, bias=False)
        self.w_k = nn.Linear(d_model, d_k, bias=False)
        self.w_v = nn.Linear(d_model, d_v, bias=False)
        self.last_weights = None


class SelfAttentionRight(_SA):
    """Right: project, call sdpa, keep the weights."""

    def forward(self, x, mask=None):
        out, self.last_weights = sdpa_right(self.w_q(x), self.w_k(x), self.w_v(x), mask)
        return out


class SelfAttentionRight2(_SA):
    """Right: one concatenated projection matrix split with torch.split, the second sdpa, weights detached copy."""

    def forward(self, x, mask=None):
        w = torch.cat([self.w_q.weight, self.w_k.weight, self.w_v.weight], dim=0)
        q, k, v = torch.split(x @ w.T, [self.d_k, self.d_k, self.d_v], dim=-1)
        out, weights = sdpa_right2(q, k, v, mask=mask)
        self.last_weights = weights.detach()
        return out


class SelfAttentionKeepsFirstWeights(_SA):
    """Wrong: stores the weights only on the first call (if self.last_weights is None)."""

    def forward(self, x, mask=None):
        out, w = sdpa_right(self.w_q(x), self.w_k(x), self.w_v(x), mask)
        if self.last_weights is None:
            self.last_weights = w
        return out


class SelfAttentionIgnoresMask(_SA):
    """Wrong: never passes the mask on."""

    def forward(self, x, mask=None):
        out, self.last_weights = sdpa_right(self.w_q(x), self.w_k(x), self.w_v(x))
        return out


class SelfAttentionRawValues(_SA):
    """Wrong: averages the raw inputs x as values, never applying w_v."""

    def forward(self, x, mask=None):
        out, self.last_weights = sdpa_right(self.w_q(x), self.w_k(x), x, mask)
        return out


class SelfAttentionQKSwapped(_SA):
    """Wrong: passes (k, q, v): keys used as queries, so the weights come out transposed."""

    def forward(self, x, mask=None):
        out, self.last_weights = sdpa_right(self.w_k(x), self.w_q(x), self.w_v(x), mask)
        return out


class SelfAttentionScaleByDModel(_SA):
    """Wrong: scores divided by sqrt(d_model) (pre-scales q by sqrt(d_k / d_model))."""

    def forward(self, x, mask=None):
        q = self.w_q(x) * math.sqrt(self.d_k / self.d_model)
        out, self.last_weights = sdpa_right(q, self.w_k(x), self.w_v(x), mask)
        return out


class SelfAttentionReturnsTuple(_SA):
    """Wrong: returns (output, weights) like the function instead of the output alone."""

    def forward(self, x, mask=None):
        out, self.last_weights = sdpa_right(self.w_q(x), self.w_k(x), self.w_v(x), mask)
        return out, self.last_weights


class SelfAttentionManualWeightT(_SA):
    """Wrong: multiplies by the weight matrices untransposed (x @ W.weight), not X W^T."""

    def forward(self, x, mask=None):
        q, k, v = x @ self.w_q.weight, x @ self.w_k.weight, x @ self.w_v.weight
        out, self.last_weights = sdpa_right(q, k, v, mask)
        return out


WRONG = {
    "scaled_dot_product_attention": [
        sdpa_no_nan_fix,
        sdpa_large_negative,
        sdpa_scale_by_dv,
        sdpa_dotT,
        sdpa_mask_int_multiply,
        sdpa_renormalise_after,
        sdpa_inplace_scores,
        sdpa_returns_scores,
        sdpa_float32_cast,
    ],
    "SelfAttention": [
        SelfAttentionKeepsFirstWeights,
        SelfAttentionIgnoresMask,
        SelfAttentionRawValues,
        SelfAttentionQKSwapped,
        SelfAttentionScaleByDModel,
        SelfAttentionReturnsTuple,
        SelfAttentionManualWeightT,
    ],
}
RIGHT = {"scaled_dot_product_attention": sdpa_right, "SelfAttention": SelfAttentionRight}
RIGHT2 = {"scaled_dot_product_attention": sdpa_right2, "SelfAttention": SelfAttentionRight2}
