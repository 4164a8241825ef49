"""Lesson 05 (Add & Norm): fifth held-out set of wrong and right implementations, from the exercise text only."""

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lab import MultiHeadAttention

# ====================================================================== LayerNorm (right)


class LayerNormRight(nn.Module):
    """Right: mean and biased var over the last axis with keepdim, eps inside the sqrt."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class LayerNormRight2(nn.Module):
    """Right: centred squares averaged by hand, torch.rsqrt, parameters via addcmul."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.full((d_model,), 1.0))
        self.bias = nn.Parameter(torch.full((d_model,), 0.0))

    def forward(self, x):
        centred = x - x.sum(-1, keepdim=True) / x.shape[-1]
        var = (centred * centred).sum(-1, keepdim=True) / x.shape[-1]
        return torch.addcmul(self.bias, self.weight, centred * torch.rsqrt(var + self.eps))


# ====================================================================== LayerNorm (wrong)


class LayerNormBiasBeforeGamma(LayerNormRight):
    """Wrong: beta is added before multiplying by gamma, weight * (x_hat + bias)."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * ((x - mean) / torch.sqrt(var + self.eps) + self.bias)


class LayerNormStdPlusEps(LayerNormRight):
    """Wrong: eps added to the standard deviation (outside the square root)."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / (std + self.eps) + self.bias


class LayerNormLastTwoAxes(LayerNormRight):
    """Wrong: statistics over the last two axes (positions and features together)."""

    def forward(self, x):
        mean = x.mean(dim=(-2, -1), keepdim=True)
        var = ((x - mean) ** 2).mean(dim=(-2, -1), keepdim=True)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class LayerNormPlainTensors(nn.Module):
    """Wrong: gamma and beta are plain tensors, not nn.Parameter (not learned, not in state_dict)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = torch.ones(d_model)
        self.bias = torch.zeros(d_model)

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class LayerNormInPlace(LayerNormRight):
    """Wrong: centres the input in place (x -= mean), changing the caller's tensor."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        x -= mean
        return self.weight * x / torch.sqrt(var + self.eps) + self.bias


class LayerNormFixedEps(LayerNormRight):
    """Wrong: ignores the eps argument and always uses 1e-6."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + 1e-6) + self.bias


class LayerNormRmsOnly(LayerNormRight):
    """Wrong: divides by the root mean square of x (not centred) and still subtracts the mean."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        ms = (x**2).mean(-1, keepdim=True)
        return self.weight * (x - mean) / torch.sqrt(ms + self.eps) + self.bias


class LayerNormUnbiased(LayerNormRight):
    """Wrong: torch.var's default (unbiased, divides by d - 1)."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = torch.var(x, -1, keepdim=True)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


# ====================================================================== FeedForward


class FeedForwardRight(nn.Module):
    """Right: w_2(relu(w_1(x)))."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))


class FeedForwardRight2(nn.Module):
    """Right: F.linear with the layers' weights, clamp(min=0) as the ReLU."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff, bias=True)
        self.w_2 = nn.Linear(d_ff, d_model, bias=True)

    def forward(self, x):
        h = F.linear(x, self.w_1.weight, self.w_1.bias).clamp(min=0)
        return F.linear(h, self.w_2.weight, self.w_2.bias)


class FeedForwardGelu(FeedForwardRight):
    """Wrong: GELU (as in BERT/GPT) instead of the ReLU the formula states."""

    def forward(self, x):
        return self.w_2(F.gelu(self.w_1(x)))


class FeedForwardNoBias(nn.Module):
    """Wrong: nn.Linear(..., bias=False), dropping b_1 and b_2."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff, bias=False)
        self.w_2 = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))


class FeedForwardResidual(FeedForwardRight):
    """Wrong: adds the residual x inside the FFN."""

    def forward(self, x):
        return x + self.w_2(torch.relu(self.w_1(x)))


class FeedForwardHardcoded4d(nn.Module):
    """Wrong: ignores d_ff and uses a hidden size of 4 * d_model."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, 4 * d_model)
        self.w_2 = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))


class FeedForwardReluOnInput(FeedForwardRight):
    """Wrong: ReLU applied to the input before w_1, none between the layers."""

    def forward(self, x):
        return self.w_2(self.w_1(torch.relu(x)))


class FeedForwardDropout(nn.Module):
    """Wrong: a hard-coded nn.Dropout(0.1) after the ReLU."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        return self.w_2(self.drop(torch.relu(self.w_1(x))))


class FeedForwardReluOut(FeedForwardRight):
    """Wrong: a ReLU after w_2 as well, so the output is never negative."""

    def forward(self, x):
        return torch.relu(self.w_2(torch.relu(self.w_1(x))))


# ====================================================================== EncoderBlock


class _BlockBase(nn.Module):
    """The constructor the text asks for (student's own LayerNorm and FeedForward)."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.dropout = nn.Dropout(dropout)
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForwardRight(d_model, d_ff)
        self.norm1 = LayerNormRight(d_model)
        self.norm2 = LayerNormRight(d_model)


class EncoderBlockRight(_BlockBase):
    """Right: both arrangements written out, mask passed to the attention."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.dropout(self.self_attn(self.norm1(x), mask=mask))
            x = x + self.dropout(self.ffn(self.norm2(x)))
        else:
            x = self.norm1(x + self.dropout(self.self_attn(x, mask=mask)))
            x = self.norm2(x + self.dropout(self.ffn(x)))
        return x


class EncoderBlockRight2(nn.Module):
    """Right: a generic sublayer helper, RIGHT2's own norm and FFN classes."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.dropout = nn.Dropout(dropout)
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForwardRight2(d_model, d_ff)
        self.norm1 = LayerNormRight2(d_model)
        self.norm2 = LayerNormRight2(d_model)

    def _sub(self, x, fn, norm):
        if self.norm_first:
            return x + self.dropout(fn(norm(x)))
        return norm(x + self.dropout(fn(x)))

    def forward(self, x, mask=None):
        x = self._sub(x, lambda h: self.self_attn(h, mask=mask), self.norm1)
        return self._sub(x, self.ffn, self.norm2)


class EncoderBlockAlwaysPost(_BlockBase):
    """Wrong: norm_first is stored but never read; always post-norm."""

    def forward(self, x, mask=None):
        x = self.norm1(x + self.self_attn(x, mask=mask))
        return self.norm2(x + self.ffn(x))


class EncoderBlockSwapped(_BlockBase):
    """Wrong: the two arrangements swapped (norm_first=True gives post-norm)."""

    def forward(self, x, mask=None):
        if not self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            return x + self.ffn(self.norm2(x))
        x = self.norm1(x + self.self_attn(x, mask=mask))
        return self.norm2(x + self.ffn(x))


class EncoderBlockPreNormResidualOfNorm(_BlockBase):
    """Wrong: pre-norm overwrites x with norm(x), so the residual adds the normalised x."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = self.norm1(x)
            x = x + self.self_attn(x, mask=mask)
            x = self.norm2(x)
            return x + self.ffn(x)
        x = self.norm1(x + self.self_attn(x, mask=mask))
        return self.norm2(x + self.ffn(x))


class EncoderBlockNormOnSublayer(_BlockBase):
    """Wrong: post-norm normalises the sublayer output only, x + norm(f(x))."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            return x + self.ffn(self.norm2(x))
        x = x + self.norm1(self.self_attn(x, mask=mask))
        return x + self.norm2(self.ffn(x))


class EncoderBlockMaskDropped(_BlockBase):
    """Wrong: forward accepts mask but calls the attention without it."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x))
            return x + self.ffn(self.norm2(x))
        x = self.norm1(x + self.self_attn(x))
        return self.norm2(x + self.ffn(x))


class EncoderBlockNorm1Twice(_BlockBase):
    """Wrong: norm1 reused for the FFN sublayer (norm2 created but unused)."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            return x + self.ffn(self.norm1(x))
        x = self.norm1(x + self.self_attn(x, mask=mask))
        return self.norm1(x + self.ffn(x))


class EncoderBlockFfnOnAttnInput(_BlockBase):
    """Wrong: post-norm FFN residual uses the block's input x instead of the attention output."""

    def forward(self, x, mask=None):
        if self.norm_first:
            h = x + self.self_attn(self.norm1(x), mask=mask)
            return h + self.ffn(self.norm2(h))
        h = self.norm1(x + self.self_attn(x, mask=mask))
        return self.norm2(x + self.ffn(h))


WRONG = {
    "LayerNorm": [
        LayerNormBiasBeforeGamma,
        LayerNormStdPlusEps,
        LayerNormLastTwoAxes,
        LayerNormPlainTensors,
        LayerNormInPlace,
        LayerNormFixedEps,
        LayerNormRmsOnly,
        LayerNormUnbiased,
    ],
    "FeedForward": [
        FeedForwardGelu,
        FeedForwardNoBias,
        FeedForwardResidual,
        FeedForwardHardcoded4d,
        FeedForwardReluOnInput,
        FeedForwardDropout,
        FeedForwardReluOut,
    ],
    "EncoderBlock": [
        EncoderBlockAlwaysPost,
        EncoderBlockSwapped,
        EncoderBlockPreNormResidualOfNorm,
        EncoderBlockNormOnSublayer,
        EncoderBlockMaskDropped,
        EncoderBlockNorm1Twice,
        EncoderBlockFfnOnAttnInput,
    ],
}
RIGHT = {
    "LayerNorm": LayerNormRight,
    "FeedForward": FeedForwardRight,
    "EncoderBlock": EncoderBlockRight,
}
RIGHT2 = {
    "LayerNorm": LayerNormRight2,
    "FeedForward": FeedForwardRight2,
    "EncoderBlock": EncoderBlockRight2,
}
