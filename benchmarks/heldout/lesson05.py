"""Lesson 05: LayerNorm, FeedForward, EncoderBlock."""

import torch
from torch import nn

from transformer_lab import MultiHeadAttention


class _LNBase(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))


class LayerNormRight(_LNBase):
    """Correct."""

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return self.weight * (x - mu) / torch.sqrt(var + self.eps) + self.bias


class LayerNormNoKeepdim(_LNBase):
    """Forgets keepdim and broadcasts the statistics against the wrong axis via unsqueeze(0)."""

    def forward(self, x):
        mu = x.mean(-1).unsqueeze(0)
        var = x.var(-1, unbiased=False).unsqueeze(0)
        return (
            self.weight * (x - mu.transpose(0, -1)) / torch.sqrt(var.transpose(0, -1) + self.eps)
            + self.bias
        )


class LayerNormEpsOnStd(_LNBase):
    """Divides by std + eps, the eps outside the root (a common 'safe division')."""

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        return (
            self.weight * (x - mu) / (x.std(-1, keepdim=True, unbiased=False) + self.eps)
            + self.bias
        )


class LayerNormNotCentred(_LNBase):
    """Forgets to subtract the mean in the numerator (RMS-style with a variance denominator)."""

    def forward(self, x):
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * x / torch.sqrt(var + self.eps) + self.bias


class LayerNormGammaInside(_LNBase):
    """Applies gamma and beta before normalising."""

    def forward(self, x):
        y = self.weight * x + self.bias
        mu = y.mean(-1, keepdim=True)
        var = y.var(-1, keepdim=True, unbiased=False)
        return (y - mu) / torch.sqrt(var + self.eps)


class LayerNormAllAxes(_LNBase):
    """Normalises over the last two axes (positions and features)."""

    def forward(self, x):
        dims = (-2, -1) if x.dim() > 1 else (-1,)
        mu = x.mean(dims, keepdim=True)
        var = x.var(dims, keepdim=True, unbiased=False)
        return self.weight * (x - mu) / torch.sqrt(var + self.eps) + self.bias


class LayerNormRandomInit(nn.Module):
    """Initialises gamma and beta randomly (randn) instead of ones / zeros."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.randn(d_model))
        self.bias = nn.Parameter(torch.randn(d_model))

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mu) / torch.sqrt(var + self.eps) + self.bias


class _FFNBase(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)


class FFNRight(_FFNBase):
    """Correct."""

    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))


class FFNGelu(_FFNBase):
    """Uses GELU (GPT-2's) instead of the ReLU the text asks for."""

    def forward(self, x):
        return self.w_2(nn.functional.gelu(self.w_1(x)))


class FFNResidual(_FFNBase):
    """Adds the residual inside the FFN."""

    def forward(self, x):
        return x + self.w_2(torch.relu(self.w_1(x)))


class FFNNoBias(nn.Module):
    """Builds w_1 and w_2 without bias."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff, bias=False)
        self.w_2 = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))


class FFNTanh(_FFNBase):
    """Uses tanh as the activation."""

    def forward(self, x):
        return self.w_2(torch.tanh(self.w_1(x)))


class FFNSharedDff(nn.Module):
    """Ignores d_ff: hidden width 4 * d_model regardless."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, 4 * d_model)
        self.w_2 = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))


class _EncBase(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.dropout = nn.Dropout(dropout)
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FFNRight(d_model, d_ff)
        self.norm1 = LayerNormRight(d_model)
        self.norm2 = LayerNormRight(d_model)


class EncoderBlockRight(_EncBase):
    """Correct."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.dropout(self.self_attn(self.norm1(x), mask=mask))
            return x + self.dropout(self.ffn(self.norm2(x)))
        x = self.norm1(x + self.dropout(self.self_attn(x, mask=mask)))
        return self.norm2(x + self.dropout(self.ffn(x)))


class EncoderNormsSwapped(_EncBase):
    """Uses norm2 around attention and norm1 around the FFN."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm2(x), mask=mask)
            return x + self.ffn(self.norm1(x))
        x = self.norm2(x + self.self_attn(x, mask=mask))
        return self.norm1(x + self.ffn(x))


class EncoderOneNorm(_EncBase):
    """Uses norm1 for both sub-layers."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            return x + self.ffn(self.norm1(x))
        x = self.norm1(x + self.self_attn(x, mask=mask))
        return self.norm1(x + self.ffn(x))


class EncoderFFNOnInput(_EncBase):
    """Feeds the FFN the block's input, not the attention sub-layer's output (parallel branches)."""

    def forward(self, x, mask=None):
        if self.norm_first:
            a = x + self.self_attn(self.norm1(x), mask=mask)
            return a + self.ffn(self.norm2(x))
        a = self.norm1(x + self.self_attn(x, mask=mask))
        return self.norm2(a + self.ffn(x))


class EncoderPreNormFinalNorm(_EncBase):
    """Pre-norm with an extra norm2 on the output."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            return self.norm2(x + self.ffn(self.norm2(x)))
        x = self.norm1(x + self.self_attn(x, mask=mask))
        return self.norm2(x + self.ffn(x))


class EncoderPostNormResidualAfter(_EncBase):
    """Post-norm written as norm(attn(x)) + x (the residual added after the norm)."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            return x + self.ffn(self.norm2(x))
        x = x + self.norm1(self.self_attn(x, mask=mask))
        return x + self.norm2(self.ffn(x))


WRONG = {
    "LayerNorm": [
        LayerNormNoKeepdim,
        LayerNormEpsOnStd,
        LayerNormNotCentred,
        LayerNormGammaInside,
        LayerNormAllAxes,
        LayerNormRandomInit,
    ],
    "FeedForward": [FFNGelu, FFNResidual, FFNNoBias, FFNTanh, FFNSharedDff],
    "EncoderBlock": [
        EncoderNormsSwapped,
        EncoderOneNorm,
        EncoderFFNOnInput,
        EncoderPreNormFinalNorm,
        EncoderPostNormResidualAfter,
    ],
}
RIGHT = {"LayerNorm": LayerNormRight, "FeedForward": FFNRight, "EncoderBlock": EncoderBlockRight}
