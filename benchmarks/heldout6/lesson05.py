"""Lesson 05 (Add & Norm): a sixth held-out set of wrong and right implementations, from the exercise text only."""

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lab import MultiHeadAttention

# ---------------------------------------------------------------- LayerNorm


class LayerNormRight(nn.Module):
    """Right: mean and var(unbiased=False) with keepdim, eps inside torch.sqrt."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class LayerNormVarMeanRsqrt(nn.Module):
    """Right: torch.var_mean(correction=0) on a flattened (N, d) view, rsqrt, addcmul, reshaped back."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.full((d_model,), 1.0))
        self.bias = nn.Parameter(torch.zeros_like(self.weight))

    def forward(self, x):
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        var, mean = torch.var_mean(flat, dim=1, correction=0, keepdim=True)
        normed = (flat - mean) * torch.rsqrt(var + self.eps)
        out = torch.addcmul(self.bias, normed, self.weight)
        return out.reshape(shape)


class LayerNormHardCodedEps(nn.Module):
    """Wrong: the eps argument is stored but 1e-5 is hard-coded in forward."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + 1e-5) + self.bias


class LayerNormPlainTensors(nn.Module):
    """Wrong: gamma and beta are plain tensors, not nn.Parameter (not learned, not in the state_dict)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = torch.ones(d_model)
        self.bias = torch.zeros(d_model)

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class LayerNormBiasOnes(nn.Module):
    """Wrong: beta initialised to ones like gamma (the text says zeros)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class LayerNormInPlaceCentre(nn.Module):
    """Wrong: centres x in place (x -= mean), changing the caller's tensor."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        with torch.no_grad():
            x -= x.mean(-1, keepdim=True)
        var = (x**2).mean(-1, keepdim=True)
        return self.weight * x / torch.sqrt(var + self.eps) + self.bias


class LayerNormBiasBeforeScale(nn.Module):
    """Wrong: beta is added before gamma multiplies, gamma * (xhat + beta)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return ((x - mean) / torch.sqrt(var + self.eps) + self.bias) * self.weight


class LayerNormFloat32(nn.Module):
    """Wrong: casts the input to float32 (x.float()), so a float64 input comes back as float32."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        x = x.float()
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight.float() * (x - mean) / torch.sqrt(var + self.eps) + self.bias.float()


class LayerNormLastTwoAxes(nn.Module):
    """Wrong: statistics over the last two axes (positions and features) of a (B, L, d) input."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        dims = (-2, -1) if x.dim() >= 3 else (-1,)
        mean = x.mean(dims, keepdim=True)
        var = x.var(dims, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class LayerNormStdSquaredEps(nn.Module):
    """Wrong: divides by std + eps**0.5 (eps moved outside the root as its square root)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / (std + self.eps**0.5) + self.bias


# ---------------------------------------------------------------- FeedForward


class FeedForwardRight(nn.Module):
    """Right: w_2(relu(w_1(x)))."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))


class FeedForwardFunctionalClamp(nn.Module):
    """Right: F.linear on the layers' weights, clamp(min=0) as the ReLU, an nn.ReLU-free forward."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.d_model, self.d_ff = d_model, d_ff
        self.w_1 = nn.Linear(d_model, d_ff, bias=True)
        self.w_2 = nn.Linear(d_ff, d_model, bias=True)

    def forward(self, x):
        hidden = F.linear(x, self.w_1.weight, self.w_1.bias).clamp(min=0)
        return torch.matmul(hidden, self.w_2.weight.t()) + self.w_2.bias


class FeedForwardNoBias(nn.Module):
    """Wrong: both Linear layers without bias (the text says with bias)."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff, bias=False)
        self.w_2 = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))


class FeedForwardGelu(nn.Module):
    """Wrong: GELU instead of the ReLU of the formula."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(F.gelu(self.w_1(x)))


class FeedForwardWithResidual(nn.Module):
    """Wrong: adds the residual x inside the FFN (the block adds it)."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return x + self.w_2(torch.relu(self.w_1(x)))


class FeedForwardIgnoresDff(nn.Module):
    """Wrong: ignores d_ff and hard-codes the hidden size to 4 * d_model."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, 4 * d_model)
        self.w_2 = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))


class FeedForwardFunctionalDropout(nn.Module):
    """Wrong: F.dropout(h, 0.1) with its default training=True, so it drops even in eval mode."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(F.dropout(torch.relu(self.w_1(x)), 0.1))


class FeedForwardReluLast(nn.Module):
    """Wrong: the ReLU is moved to the end, relu(w_2(w_1(x)))."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return torch.relu(self.w_2(self.w_1(x)))


class FeedForwardOtherNames(nn.Module):
    """Wrong: the layers are called linear1 / linear2 instead of w_1 / w_2."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.linear2(torch.relu(self.linear1(x)))


# ---------------------------------------------------------------- EncoderBlock


class EncoderBlockRight(nn.Module):
    """Right: post-norm x = norm(x + sub(x)), pre-norm x = x + sub(norm(x))."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.dropout = nn.Dropout(dropout)
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForwardRight(d_model, d_ff)
        self.norm1 = LayerNormRight(d_model)
        self.norm2 = LayerNormRight(d_model)

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            x = x + self.ffn(self.norm2(x))
        else:
            x = self.norm1(x + self.self_attn(x, mask=mask))
            x = self.norm2(x + self.ffn(x))
        return x


class EncoderBlockSublayerLoop(nn.Module):
    """Right: a loop over (norm, sublayer) pairs, dropout on each sublayer output, other parts' classes."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.dropout = nn.Dropout(dropout)
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForwardFunctionalClamp(d_model, d_ff)
        self.norm1 = LayerNormVarMeanRsqrt(d_model)
        self.norm2 = LayerNormVarMeanRsqrt(d_model)

    def forward(self, x, mask=None):
        steps = (
            (self.norm1, lambda h: self.self_attn(h, None, mask)),
            (self.norm2, self.ffn),
        )
        for norm, sublayer in steps:
            if self.norm_first:
                x = torch.add(x, self.dropout(sublayer(norm(x))))
            else:
                x = norm(torch.add(x, self.dropout(sublayer(x))))
        return x


class EncoderBlockStaleResidual(nn.Module):
    """Wrong: post-norm's FFN residual adds the block's input x instead of the attention output."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.dropout = nn.Dropout(dropout)
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForwardRight(d_model, d_ff)
        self.norm1 = LayerNormRight(d_model)
        self.norm2 = LayerNormRight(d_model)

    def forward(self, x, mask=None):
        if self.norm_first:
            h = x + self.self_attn(self.norm1(x), mask=mask)
            return h + self.ffn(self.norm2(h))
        h = self.norm1(x + self.self_attn(x, mask=mask))
        return self.norm2(x + self.ffn(h))


class EncoderBlockNorm1Twice(nn.Module):
    """Wrong: pre-norm uses norm1 before both sublayers (norm2 is never used there)."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.dropout = nn.Dropout(dropout)
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForwardRight(d_model, d_ff)
        self.norm1 = LayerNormRight(d_model)
        self.norm2 = LayerNormRight(d_model)

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            x = x + self.ffn(self.norm1(x))
        else:
            x = self.norm1(x + self.self_attn(x, mask=mask))
            x = self.norm2(x + self.ffn(x))
        return x


class EncoderBlockMaskPositional(nn.Module):
    """Wrong: passes the mask positionally, self_attn(h, mask), where the second argument is context."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.dropout = nn.Dropout(dropout)
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForwardRight(d_model, d_ff)
        self.norm1 = LayerNormRight(d_model)
        self.norm2 = LayerNormRight(d_model)

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask)
            x = x + self.ffn(self.norm2(x))
        else:
            x = self.norm1(x + self.self_attn(x, mask))
            x = self.norm2(x + self.ffn(x))
        return x


class EncoderBlockMaskInverted(nn.Module):
    """Wrong: inverts the mask before the attention (reads it as True = hidden, nn.MultiheadAttention style)."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.dropout = nn.Dropout(dropout)
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForwardRight(d_model, d_ff)
        self.norm1 = LayerNormRight(d_model)
        self.norm2 = LayerNormRight(d_model)

    def forward(self, x, mask=None):
        if mask is not None:
            mask = ~mask
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            x = x + self.ffn(self.norm2(x))
        else:
            x = self.norm1(x + self.self_attn(x, mask=mask))
            x = self.norm2(x + self.ffn(x))
        return x


class EncoderBlockNormsSwapped(nn.Module):
    """Wrong: post-norm applies norm2 after attention and norm1 after the FFN."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.dropout = nn.Dropout(dropout)
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForwardRight(d_model, d_ff)
        self.norm1 = LayerNormRight(d_model)
        self.norm2 = LayerNormRight(d_model)

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            x = x + self.ffn(self.norm2(x))
        else:
            x = self.norm2(x + self.self_attn(x, mask=mask))
            x = self.norm1(x + self.ffn(x))
        return x


class EncoderBlockNoAttnResidual(nn.Module):
    """Wrong: post-norm forgets the residual around attention, x = norm1(attn(x))."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.dropout = nn.Dropout(dropout)
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForwardRight(d_model, d_ff)
        self.norm1 = LayerNormRight(d_model)
        self.norm2 = LayerNormRight(d_model)

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            x = x + self.ffn(self.norm2(x))
        else:
            x = self.norm1(self.self_attn(x, mask=mask))
            x = self.norm2(x + self.ffn(x))
        return x


class EncoderBlockPreNormContextUnnormed(nn.Module):
    """Wrong: pre-norm queries come from norm1(x) but keys/values from the un-normed x (context=x)."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.dropout = nn.Dropout(dropout)
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForwardRight(d_model, d_ff)
        self.norm1 = LayerNormRight(d_model)
        self.norm2 = LayerNormRight(d_model)

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), context=x, mask=mask)
            x = x + self.ffn(self.norm2(x))
        else:
            x = self.norm1(x + self.self_attn(x, mask=mask))
            x = self.norm2(x + self.ffn(x))
        return x


WRONG = {
    "LayerNorm": [
        LayerNormHardCodedEps,
        LayerNormPlainTensors,
        LayerNormBiasOnes,
        LayerNormInPlaceCentre,
        LayerNormBiasBeforeScale,
        LayerNormFloat32,
        LayerNormLastTwoAxes,
        LayerNormStdSquaredEps,
    ],
    "FeedForward": [
        FeedForwardNoBias,
        FeedForwardGelu,
        FeedForwardWithResidual,
        FeedForwardIgnoresDff,
        FeedForwardFunctionalDropout,
        FeedForwardReluLast,
        FeedForwardOtherNames,
    ],
    "EncoderBlock": [
        EncoderBlockStaleResidual,
        EncoderBlockNorm1Twice,
        EncoderBlockMaskPositional,
        EncoderBlockMaskInverted,
        EncoderBlockNormsSwapped,
        EncoderBlockNoAttnResidual,
        EncoderBlockPreNormContextUnnormed,
    ],
}

RIGHT = {
    "LayerNorm": LayerNormRight,
    "FeedForward": FeedForwardRight,
    "EncoderBlock": EncoderBlockRight,
}

RIGHT2 = {
    "LayerNorm": LayerNormVarMeanRsqrt,
    "FeedForward": FeedForwardFunctionalClamp,
    "EncoderBlock": EncoderBlockSublayerLoop,
}
