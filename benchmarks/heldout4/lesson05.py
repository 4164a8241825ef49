"""Lesson 05 (Add & Norm): held-out wrong and right implementations, from the exercise text only."""

import torch
from torch import nn

from transformer_lab import MultiHeadAttention

# ---------------------------------------------------------------- LayerNorm


class _LNParams(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))


class LayerNormPlain(_LNParams):
    """Right: mean and ((x - mean) ** 2).mean with keepdim, eps inside torch.sqrt."""

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class LayerNormVarMean(nn.Module):
    """Right: torch.var_mean(correction=0), a power of -0.5, gamma and beta via addcmul."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.full((d_model,), 1.0))
        self.bias = nn.Parameter(torch.full((d_model,), 0.0))

    def forward(self, x):
        var, mean = torch.var_mean(x, dim=-1, correction=0, keepdim=True)
        x_hat = (x - mean) * (var + self.eps) ** -0.5
        return torch.addcmul(self.bias, x_hat, self.weight)


class LayerNormUnbiasedStd(_LNParams):
    """Wrong: x.std(-1) (unbiased by default) squared as the variance."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.std(-1, keepdim=True) ** 2
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class LayerNormEpsOutside(_LNParams):
    """Wrong: divides by sqrt(var) + eps."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / (torch.sqrt(var) + self.eps) + self.bias


class LayerNormSqrtOfStd(_LNParams):
    """Wrong: the standard deviation where the variance belongs: sqrt(std + eps)."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(std + self.eps) + self.bias


class LayerNormLastTwoAxes(_LNParams):
    """Wrong: statistics over the last two axes (positions and features) together."""

    def forward(self, x):
        dims = (-2, -1) if x.dim() >= 2 else (-1,)
        mean = x.mean(dims, keepdim=True)
        var = x.var(dims, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class LayerNormNoKeepdim(_LNParams):
    """Wrong: statistics without keepdim, so they broadcast against the wrong axis."""

    def forward(self, x):
        mean = x.mean(-1)
        var = x.var(-1, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class LayerNormPlainTensors(nn.Module):
    """Wrong: weight and bias are plain tensors, not nn.Parameter, so they are not learned."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = torch.ones(d_model)
        self.bias = torch.zeros(d_model)

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight.to(x) * (x - mean) / torch.sqrt(var + self.eps) + self.bias.to(x)


class LayerNormBiasOnes(nn.Module):
    """Wrong: both parameters initialised with torch.ones (beta should start at zeros)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class LayerNormEpsHardcoded(_LNParams):
    """Wrong: eps hard-coded to 1e-5, the eps argument is ignored."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + 1e-5) + self.bias


class LayerNormDetachedStats(_LNParams):
    """Wrong: mean and variance detached (treated as constants), so the gradient is wrong."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True).detach()
        var = x.var(-1, keepdim=True, unbiased=False).detach()
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class LayerNormBiasBeforeScale(_LNParams):
    """Wrong: beta added before gamma multiplies: gamma * (x_hat + beta)."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * ((x - mean) / torch.sqrt(var + self.eps) + self.bias)


# ---------------------------------------------------------------- FeedForward


class FeedForwardPlain(nn.Module):
    """Right: w_2(relu(w_1(x)))."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))


class FeedForwardFunctional(nn.Module):
    """Right: F.linear with the layers' parameters, clamp(min=0) as the ReLU."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.d_model, self.d_ff = d_model, d_ff
        self.w_1 = nn.Linear(d_model, d_ff, bias=True)
        self.w_2 = nn.Linear(d_ff, d_model, bias=True)

    def forward(self, x):
        hidden = nn.functional.linear(x, self.w_1.weight, self.w_1.bias).clamp(min=0)
        return nn.functional.linear(hidden, self.w_2.weight, self.w_2.bias)


class _FFBase(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)


class FeedForwardNoActivation(_FFBase):
    """Wrong: no ReLU between the two layers."""

    def forward(self, x):
        return self.w_2(self.w_1(x))


class FeedForwardReluTwice(_FFBase):
    """Wrong: a ReLU after w_2 as well."""

    def forward(self, x):
        return torch.relu(self.w_2(torch.relu(self.w_1(x))))


class FeedForwardGelu(_FFBase):
    """Wrong: GELU (as in BERT/GPT) where the text's formula has ReLU."""

    def forward(self, x):
        return self.w_2(nn.functional.gelu(self.w_1(x)))


class FeedForwardNoBias(nn.Module):
    """Wrong: both layers built with bias=False, the text says with bias."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff, bias=False)
        self.w_2 = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))


class FeedForwardResidual(_FFBase):
    """Wrong: adds the residual x + FFN(x) inside the FFN."""

    def forward(self, x):
        return x + self.w_2(torch.relu(self.w_1(x)))


class FeedForwardDropout(_FFBase):
    """Wrong: applies nn.Dropout(0.1) to the hidden layer."""

    def __init__(self, d_model, d_ff):
        super().__init__(d_model, d_ff)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        return self.w_2(self.dropout(torch.relu(self.w_1(x))))


class FeedForwardFixedWidth(nn.Module):
    """Wrong: the hidden width is always 4 * d_model, the d_ff argument is ignored."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, 4 * d_model)
        self.w_2 = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))


class FeedForwardReluFirst(_FFBase):
    """Wrong: the ReLU is applied to the input, before w_1: w_2(w_1(relu(x)))."""

    def forward(self, x):
        return self.w_2(self.w_1(torch.relu(x)))


# ---------------------------------------------------------------- EncoderBlock


class _EncBase(nn.Module):
    LN = LayerNormPlain
    FF = FeedForwardPlain

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.dropout = nn.Dropout(dropout)
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = self.FF(d_model, d_ff)
        self.norm1 = self.LN(d_model)
        self.norm2 = self.LN(d_model)


class EncoderBlockPlain(_EncBase):
    """Right: the two arrangements of the table, dropout on each sub-layer's output."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.dropout(self.self_attn(self.norm1(x), mask=mask))
            x = x + self.dropout(self.ffn(self.norm2(x)))
        else:
            x = self.norm1(x + self.dropout(self.self_attn(x, mask=mask)))
            x = self.norm2(x + self.dropout(self.ffn(x)))
        return x


class EncoderBlockSublayers(_EncBase):
    """Right: a generic residual helper with optional pre/post norm, the RIGHT2 LayerNorm and FFN."""

    LN = LayerNormVarMean
    FF = FeedForwardFunctional

    def _residual(self, x, norm, sublayer):
        if self.norm_first:
            return x + self.dropout(sublayer(norm(x)))
        return norm(x + self.dropout(sublayer(x)))

    def forward(self, x, mask=None):
        x = self._residual(x, self.norm1, lambda h: self.self_attn(h, context=None, mask=mask))
        return self._residual(x, self.norm2, self.ffn)


class EncoderBlockSwapped(_EncBase):
    """Wrong: norm_first=True runs post-norm and norm_first=False pre-norm."""

    def forward(self, x, mask=None):
        if not self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            x = x + self.ffn(self.norm2(x))
        else:
            x = self.norm1(x + self.self_attn(x, mask=mask))
            x = self.norm2(x + self.ffn(x))
        return x


class EncoderBlockAlwaysPost(_EncBase):
    """Wrong: norm_first is ignored, always post-norm."""

    def forward(self, x, mask=None):
        x = self.norm1(x + self.self_attn(x, mask=mask))
        return self.norm2(x + self.ffn(x))


class EncoderBlockNoFFNResidual(_EncBase):
    """Wrong: the FFN sub-layer has no residual connection."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            x = self.ffn(self.norm2(x))
        else:
            x = self.norm1(x + self.self_attn(x, mask=mask))
            x = self.norm2(self.ffn(x))
        return x


class EncoderBlockResidualOfNormed(_EncBase):
    """Wrong: pre-norm overwrites x with norm(x), so the residual adds the normalised input."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = self.norm1(x)
            x = x + self.self_attn(x, mask=mask)
            x = self.norm2(x)
            x = x + self.ffn(x)
        else:
            x = self.norm1(x + self.self_attn(x, mask=mask))
            x = self.norm2(x + self.ffn(x))
        return x


class EncoderBlockMaskAsContext(_EncBase):
    """Wrong: self.self_attn(h, mask) passes the mask positionally, where it lands in `context`."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask)
            x = x + self.ffn(self.norm2(x))
        else:
            x = self.norm1(x + self.self_attn(x, mask))
            x = self.norm2(x + self.ffn(x))
        return x


class EncoderBlockOneNorm(_EncBase):
    """Wrong: norm1 used for both sub-layers, norm2 never used."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            x = x + self.ffn(self.norm1(x))
        else:
            x = self.norm1(x + self.self_attn(x, mask=mask))
            x = self.norm1(x + self.ffn(x))
        return x


class EncoderBlockNormInsideResidual(_EncBase):
    """Wrong: post-norm written as x + norm(sublayer(x)), normalising the branch, not the sum."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            x = x + self.ffn(self.norm2(x))
        else:
            x = x + self.norm1(self.self_attn(x, mask=mask))
            x = x + self.norm2(self.ffn(x))
        return x


class EncoderBlockFinalNorm(_EncBase):
    """Wrong: pre-norm ends with an extra norm2 on the output (GPT-2's final ln_f, not part of a block)."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            x = x + self.ffn(self.norm2(x))
            return self.norm2(x)
        x = self.norm1(x + self.self_attn(x, mask=mask))
        return self.norm2(x + self.ffn(x))


class EncoderBlockParallel(_EncBase):
    """Wrong: attention and FFN both read the block's input (parallel branches) instead of one after the other."""

    def forward(self, x, mask=None):
        if self.norm_first:
            return x + self.self_attn(self.norm1(x), mask=mask) + self.ffn(self.norm2(x))
        a = self.norm1(x + self.self_attn(x, mask=mask))
        return self.norm2(a + self.ffn(x))


WRONG = {
    "LayerNorm": [
        LayerNormUnbiasedStd,
        LayerNormEpsOutside,
        LayerNormSqrtOfStd,
        LayerNormLastTwoAxes,
        LayerNormNoKeepdim,
        LayerNormPlainTensors,
        LayerNormBiasOnes,
        LayerNormEpsHardcoded,
        LayerNormDetachedStats,
        LayerNormBiasBeforeScale,
    ],
    "FeedForward": [
        FeedForwardNoActivation,
        FeedForwardReluTwice,
        FeedForwardGelu,
        FeedForwardNoBias,
        FeedForwardResidual,
        FeedForwardDropout,
        FeedForwardFixedWidth,
        FeedForwardReluFirst,
    ],
    "EncoderBlock": [
        EncoderBlockSwapped,
        EncoderBlockAlwaysPost,
        EncoderBlockNoFFNResidual,
        EncoderBlockResidualOfNormed,
        EncoderBlockMaskAsContext,
        EncoderBlockOneNorm,
        EncoderBlockNormInsideResidual,
        EncoderBlockFinalNorm,
        EncoderBlockParallel,
    ],
}

RIGHT = {
    "LayerNorm": LayerNormPlain,
    "FeedForward": FeedForwardPlain,
    "EncoderBlock": EncoderBlockPlain,
}

RIGHT2 = {
    "LayerNorm": LayerNormVarMean,
    "FeedForward": FeedForwardFunctional,
    "EncoderBlock": EncoderBlockSublayers,
}
