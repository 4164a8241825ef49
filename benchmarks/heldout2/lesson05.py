"""Lesson 05 (Add & Norm): held-out wrong and right implementations, written from the exercise text."""

import torch
from torch import nn

from transformer_lab import MultiHeadAttention

# ---------------------------------------------------------------- LayerNorm


class LayerNormMeanVar(nn.Module):
    """Right: mean and var(unbiased=False) with keepdim, eps inside torch.sqrt."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, unbiased=False, keepdim=True)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class LayerNormCentredRsqrt(nn.Module):
    """Right: centre first, the variance as the mean of squares of the centred x, rsqrt."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        var = (centred * centred).mean(-1, keepdim=True)
        return centred * torch.rsqrt(var + self.eps) * self.weight + self.bias


class LayerNormPlainTensors(nn.Module):
    """Wrong: gamma and beta created as plain tensors, not nn.Parameter (not learned, not in state_dict)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = torch.ones(d_model)
        self.bias = torch.zeros(d_model)

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, unbiased=False, keepdim=True)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class LayerNormNoKeepdim(nn.Module):
    """Wrong: mean and var without keepdim=True, so they do not broadcast back over the features."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(dim=-1)
        var = x.var(dim=-1, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class LayerNormLastTwoAxes(nn.Module):
    """Wrong: the statistics over the last two axes (positions and features), 'the whole layer'."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        dims = (-2, -1) if x.dim() > 1 else (-1,)
        mean = x.mean(dim=dims, keepdim=True)
        var = x.var(dim=dims, unbiased=False, keepdim=True)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class LayerNormInitSwapped(nn.Module):
    """Wrong: gamma initialised to zeros and beta to ones (the two initialisations swapped)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.zeros(d_model))
        self.bias = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, unbiased=False, keepdim=True)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class LayerNormNaiveVariance(nn.Module):
    """Wrong (numerically naive): the variance as E[x^2] - E[x]^2, which cancels badly for large means."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = (x**2).mean(-1, keepdim=True) - mean**2
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class LayerNormStdPlusEps(nn.Module):
    """Wrong: divides by x.std(unbiased=False) + eps, eps outside the square root."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, unbiased=False, keepdim=True)
        return self.weight * (x - mean) / (std + self.eps) + self.bias


# ---------------------------------------------------------------- FeedForward


class FeedForwardModules(nn.Module):
    """Right: two nn.Linear and torch.relu."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))


class FeedForwardFunctional(nn.Module):
    """Right: F.linear on the weights and clamp(min=0) as the ReLU."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.d_model, self.d_ff = d_model, d_ff
        self.w_1 = nn.Linear(d_model, d_ff, bias=True)
        self.w_2 = nn.Linear(d_ff, d_model, bias=True)

    def forward(self, x):
        hidden = nn.functional.linear(x, self.w_1.weight, self.w_1.bias).clamp(min=0)
        return nn.functional.linear(hidden, self.w_2.weight, self.w_2.bias)


class FeedForwardNoBias(nn.Module):
    """Wrong: the linear layers created with bias=False (the formula's b_1, b_2 forgotten)."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff, bias=False)
        self.w_2 = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))


class FeedForwardGelu(nn.Module):
    """Wrong: GELU (as in BERT and GPT) where the exercise asks for ReLU."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(nn.functional.gelu(self.w_1(x)))


class FeedForwardWithResidual(nn.Module):
    """Wrong: the residual added inside the FFN, x + w_2(relu(w_1(x)))."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return x + self.w_2(torch.relu(self.w_1(x)))


class FeedForwardDropout(nn.Module):
    """Wrong: an nn.Dropout(0.1) after the ReLU (from the paper), active in training mode."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        return self.w_2(self.dropout(torch.relu(self.w_1(x))))


class FeedForwardW2Shape(nn.Module):
    """Wrong: w_2 created as nn.Linear(d_model, d_ff), the same shape as w_1."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_model, d_ff)

    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))


class FeedForwardReluFirst(nn.Module):
    """Wrong: the ReLU applied to the input, w_2(w_1(relu(x))), a misplaced parenthesis."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(self.w_1(torch.relu(x)))


# ---------------------------------------------------------------- EncoderBlock


class _BlockBase(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.dropout = nn.Dropout(dropout)
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForwardModules(d_model, d_ff)
        self.norm1 = LayerNormMeanVar(d_model)
        self.norm2 = LayerNormMeanVar(d_model)


class EncoderBlockBranches(_BlockBase):
    """Right: an if on norm_first with the two arrangements written out, dropout on each sub-layer."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.dropout(self.self_attn(self.norm1(x), mask=mask))
            x = x + self.dropout(self.ffn(self.norm2(x)))
        else:
            x = self.norm1(x + self.dropout(self.self_attn(x, mask=mask)))
            x = self.norm2(x + self.dropout(self.ffn(x)))
        return x


class EncoderBlockSublayerHelper(nn.Module):
    """Right: one helper that wraps any sub-layer in residual + norm, used for both sub-layers."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.dropout = nn.Dropout(dropout)
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForwardFunctional(d_model, d_ff)
        self.norm1 = LayerNormCentredRsqrt(d_model)
        self.norm2 = LayerNormCentredRsqrt(d_model)

    def _sublayer(self, x, norm, fn):
        if self.norm_first:
            return x + self.dropout(fn(norm(x)))
        return norm(x + self.dropout(fn(x)))

    def forward(self, x, mask=None):
        x = self._sublayer(x, self.norm1, lambda h: self.self_attn(h, mask=mask))
        return self._sublayer(x, self.norm2, self.ffn)


class EncoderBlockHybrid(_BlockBase):
    """Wrong: for norm_first, pre-norm around attention but post-norm around the FFN."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            x = self.norm2(x + self.ffn(x))
        else:
            x = self.norm1(x + self.self_attn(x, mask=mask))
            x = self.norm2(x + self.ffn(x))
        return x


class EncoderBlockMaskAsContext(_BlockBase):
    """Wrong: self.self_attn(h, mask) passes the mask positionally, into the context argument."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask)
            x = x + self.ffn(self.norm2(x))
        else:
            x = self.norm1(x + self.self_attn(x, mask))
            x = self.norm2(x + self.ffn(x))
        return x


class EncoderBlockTorchMHA(nn.Module):
    """Wrong: PyTorch's nn.MultiheadAttention as self_attn instead of the course's MultiHeadAttention."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.dropout = nn.Dropout(dropout)
        self.self_attn = nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.ffn = FeedForwardModules(d_model, d_ff)
        self.norm1 = LayerNormMeanVar(d_model)
        self.norm2 = LayerNormMeanVar(d_model)

    def _attn(self, h, mask):
        attn_mask = None if mask is None else ~mask
        return self.self_attn(h, h, h, attn_mask=attn_mask, need_weights=False)[0]

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self._attn(self.norm1(x), mask)
            x = x + self.ffn(self.norm2(x))
        else:
            x = self.norm1(x + self._attn(x, mask))
            x = self.norm2(x + self.ffn(x))
        return x


class EncoderBlockOneNorm(_BlockBase):
    """Wrong: copy-paste slip, norm1 used around both sub-layers (norm2 never used)."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            x = x + self.ffn(self.norm1(x))
        else:
            x = self.norm1(x + self.self_attn(x, mask=mask))
            x = self.norm1(x + self.ffn(x))
        return x


class EncoderBlockFixedDff(_BlockBase):
    """Wrong: the FFN built with a hard-coded 4 * d_model instead of the d_ff argument."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.ffn = FeedForwardModules(d_model, 4 * d_model)

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            x = x + self.ffn(self.norm2(x))
        else:
            x = self.norm1(x + self.self_attn(x, mask=mask))
            x = self.norm2(x + self.ffn(x))
        return x


class EncoderBlockNormOnSublayer(_BlockBase):
    """Wrong: post-norm read as x + norm(sublayer(x)): the norm on the sub-layer's output only."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            x = x + self.ffn(self.norm2(x))
        else:
            x = x + self.norm1(self.self_attn(x, mask=mask))
            x = x + self.norm2(self.ffn(x))
        return x


WRONG = {
    "LayerNorm": [
        LayerNormPlainTensors,
        LayerNormNoKeepdim,
        LayerNormLastTwoAxes,
        LayerNormInitSwapped,
        LayerNormNaiveVariance,
        LayerNormStdPlusEps,
    ],
    "FeedForward": [
        FeedForwardNoBias,
        FeedForwardGelu,
        FeedForwardWithResidual,
        FeedForwardDropout,
        FeedForwardW2Shape,
        FeedForwardReluFirst,
    ],
    "EncoderBlock": [
        EncoderBlockHybrid,
        EncoderBlockMaskAsContext,
        EncoderBlockTorchMHA,
        EncoderBlockOneNorm,
        EncoderBlockFixedDff,
        EncoderBlockNormOnSublayer,
    ],
}
RIGHT = {
    "LayerNorm": LayerNormMeanVar,
    "FeedForward": FeedForwardModules,
    "EncoderBlock": EncoderBlockBranches,
}
RIGHT2 = {
    "LayerNorm": LayerNormCentredRsqrt,
    "FeedForward": FeedForwardFunctional,
    "EncoderBlock": EncoderBlockSublayerHelper,
}
