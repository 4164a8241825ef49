"""Lesson 05 (Add & Norm): held-out wrong and right implementations, from the exercise text only."""

import torch
from torch import nn

from transformer_lab import MultiHeadAttention

# ---------------------------------------------------------------- LayerNorm


class LayerNormVar(nn.Module):
    """Right: mean and var(unbiased=False) with keepdim, eps inside torch.sqrt."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class LayerNormRsqrtManual(nn.Module):
    """Right: the centred squares averaged by hand, torch.rsqrt, gamma and beta via addcmul."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        centred = x - x.sum(dim=-1, keepdim=True) / self.d_model
        var = (centred * centred).sum(dim=-1, keepdim=True) / self.d_model
        return torch.addcmul(self.bias, centred * torch.rsqrt(var + self.eps), self.weight)


class LayerNormStdPlusEps(nn.Module):
    """The 'annotated' version: (x - mean) / (x.std(-1) + eps), unbiased std, eps outside."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.weight * (x - mean) / (std + self.eps) + self.bias


class LayerNormPlainTensors(nn.Module):
    """gamma and beta as plain tensors, not nn.Parameter: not learned, not in the state_dict."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = torch.ones(d_model)
        self.bias = torch.zeros(d_model)

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class LayerNormNoKeepdim(nn.Module):
    """Forgets keepdim=True, so the statistics do not broadcast over the features."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(-1)
        var = x.var(-1, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class LayerNormPrecedence(nn.Module):
    """Missing parentheses: x - mean / sqrt(var + eps)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean / torch.sqrt(var + self.eps)) + self.bias


class LayerNormZeroGamma(nn.Module):
    """Initialises both gamma and beta with zeros (copy-paste), so the output starts at 0."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.zeros(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class LayerNormHardcodedEps(nn.Module):
    """Ignores the eps argument and uses a hard-coded 1e-6."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + 1e-6) + self.bias


# ---------------------------------------------------------------- FeedForward


class FeedForwardModules(nn.Module):
    """Right: w_1, nn.ReLU module, w_2."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.w_2(self.relu(self.w_1(x)))


class FeedForwardClamp(nn.Module):
    """Right: the ReLU as clamp(min=0), intermediate variable."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff, bias=True)
        self.w_2 = nn.Linear(d_ff, d_model, bias=True)

    def forward(self, x):
        hidden = self.w_1(x).clamp(min=0)
        return self.w_2(hidden)


class FeedForwardGelu(nn.Module):
    """Uses GELU (as in GPT/BERT) instead of ReLU."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(torch.nn.functional.gelu(self.w_1(x)))


class FeedForwardNoBias(nn.Module):
    """Creates w_1 and w_2 with bias=False."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff, bias=False)
        self.w_2 = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))


class FeedForwardResidual(nn.Module):
    """Adds the residual inside the FFN: x + w_2(relu(w_1(x)))."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return x + self.w_2(torch.relu(self.w_1(x)))


class FeedForwardReluFirst(nn.Module):
    """Applies the ReLU to the input, before w_1: w_2(w_1(relu(x)))."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(self.w_1(torch.relu(x)))


class FeedForwardDropout(nn.Module):
    """Adds a hard-coded nn.Dropout(0.1) after the ReLU (as in the paper)."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        return self.w_2(self.dropout(torch.relu(self.w_1(x))))


class FeedForwardLeaky(nn.Module):
    """Uses leaky_relu (to avoid dead units) instead of ReLU."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(torch.nn.functional.leaky_relu(self.w_1(x)))


# ---------------------------------------------------------------- EncoderBlock


class _BlockBase(nn.Module):
    """The given __init__ with my passing LayerNorm and FeedForward."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.dropout = nn.Dropout(dropout)
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForwardModules(d_model, d_ff)
        self.norm1 = LayerNormVar(d_model)
        self.norm2 = LayerNormVar(d_model)


class BlockIfElse(_BlockBase):
    """Right: an if/else on norm_first, dropout on each sub-layer's output."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.dropout(self.self_attn(self.norm1(x), mask=mask))
            x = x + self.dropout(self.ffn(self.norm2(x)))
        else:
            x = self.norm1(x + self.dropout(self.self_attn(x, mask=mask)))
            x = self.norm2(x + self.dropout(self.ffn(x)))
        return x


class BlockSublayerHelper(_BlockBase):
    """Right: one helper that wraps any sub-layer in residual + norm, for both arrangements."""

    def _sublayer(self, x, norm, fn):
        if self.norm_first:
            return x + self.dropout(fn(norm(x)))
        return norm(x + self.dropout(fn(x)))

    def forward(self, x, mask=None):
        x = self._sublayer(x, self.norm1, lambda h: self.self_attn(h, mask=mask))
        return self._sublayer(x, self.norm2, self.ffn)


class BlockPostNormSwapped(_BlockBase):
    """Post-norm with norm2 after attention and norm1 after the FFN."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            return x + self.ffn(self.norm2(x))
        x = self.norm2(x + self.self_attn(x, mask=mask))
        return self.norm1(x + self.ffn(x))


class BlockPreNormOneNorm(_BlockBase):
    """Pre-norm reuses norm1 before the FFN too (copy-paste), norm2 never used."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            return x + self.ffn(self.norm1(x))
        x = self.norm1(x + self.self_attn(x, mask=mask))
        return self.norm2(x + self.ffn(x))


class BlockMaskPositional(_BlockBase):
    """Passes the mask positionally, self_attn(h, mask), so it lands in `context`."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask)
            return x + self.ffn(self.norm2(x))
        x = self.norm1(x + self.self_attn(x, mask))
        return self.norm2(x + self.ffn(x))


class BlockTorchLayerNorm(BlockIfElse):
    """Uses nn.LayerNorm for norm1 and norm2 instead of my own LayerNorm."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)


class BlockNormsTheSublayer(_BlockBase):
    """Post-norm read as x + norm(sublayer(x)): the norm on the sub-layer output only."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            return x + self.ffn(self.norm2(x))
        x = x + self.norm1(self.self_attn(x, mask=mask))
        return x + self.norm2(self.ffn(x))


class BlockShadowedResidual(_BlockBase):
    """Overwrites x with the attention output, so post-norm adds it to itself: norm1(a + a)."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            return x + self.ffn(self.norm2(x))
        x = self.self_attn(x, mask=mask)
        x = self.norm1(x + x)
        h = self.ffn(x)
        return self.norm2(x + h)


WRONG = {
    "LayerNorm": [
        LayerNormStdPlusEps,
        LayerNormPlainTensors,
        LayerNormNoKeepdim,
        LayerNormPrecedence,
        LayerNormZeroGamma,
        LayerNormHardcodedEps,
    ],
    "FeedForward": [
        FeedForwardGelu,
        FeedForwardNoBias,
        FeedForwardResidual,
        FeedForwardReluFirst,
        FeedForwardDropout,
        FeedForwardLeaky,
    ],
    "EncoderBlock": [
        BlockPostNormSwapped,
        BlockPreNormOneNorm,
        BlockMaskPositional,
        BlockTorchLayerNorm,
        BlockNormsTheSublayer,
        BlockShadowedResidual,
    ],
}
RIGHT = {"LayerNorm": LayerNormVar, "FeedForward": FeedForwardModules, "EncoderBlock": BlockIfElse}
RIGHT2 = {
    "LayerNorm": LayerNormRsqrtManual,
    "FeedForward": FeedForwardClamp,
    "EncoderBlock": BlockSublayerHelper,
}
