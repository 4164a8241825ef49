"""Lesson 07 (cross-attention and the decoder): a sixth held-out set of wrong and right implementations, from the exercise text only."""

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lab.add_norm import FeedForward, LayerNorm
from transformer_lab.multihead import MultiHeadAttention

# ---------------------------------------------------------------- DecoderBlock


class DecoderBlockRight(nn.Module):
    """Right: three sublayers in order, post-norm x = norm(x + f(x)), pre-norm x = x + f(norm(x))."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, "relu", dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=self_mask)
            x = x + self.cross_attn(self.norm2(x), context=memory, mask=memory_mask)
            x = x + self.ffn(self.norm3(x))
        else:
            x = self.norm1(x + self.self_attn(x, mask=self_mask))
            x = self.norm2(x + self.cross_attn(x, context=memory, mask=memory_mask))
            x = self.norm3(x + self.ffn(x))
        return x


class DecoderBlockSublayerList(nn.Module):
    """Right: a list of (norm, sublayer) steps with dropout on each output; cross-attention called positionally (x, context, mask)."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, "relu", dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def _residual(self, x, norm, sublayer):
        if self.norm_first:
            return x + self.dropout(sublayer(norm(x)))
        return norm(x + self.dropout(sublayer(x)))

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        steps = [
            (self.norm1, lambda h: self.self_attn(h, mask=self_mask)),
            (self.norm2, lambda h: self.cross_attn(h, memory, memory_mask)),
            (self.norm3, self.ffn),
        ]
        for norm, sublayer in steps:
            x = self._residual(x, norm, sublayer)
        return x


class _DecoderBlockBase(nn.Module):
    """The given constructor (shared by the wrong blocks below)."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, "relu", dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)


class DecoderBlockMasksSwapped(_DecoderBlockBase):
    """Wrong: memory_mask goes to the self-attention and self_mask to the cross-attention."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=memory_mask)
            x = x + self.cross_attn(self.norm2(x), context=memory, mask=self_mask)
            x = x + self.ffn(self.norm3(x))
        else:
            x = self.norm1(x + self.self_attn(x, mask=memory_mask))
            x = self.norm2(x + self.cross_attn(x, context=memory, mask=self_mask))
            x = self.norm3(x + self.ffn(x))
        return x


class DecoderBlockNormsMemory(_DecoderBlockBase):
    """Wrong: pre-norm also normalises the memory, context=norm2(memory)."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=self_mask)
            x = x + self.cross_attn(self.norm2(x), context=self.norm2(memory), mask=memory_mask)
            x = x + self.ffn(self.norm3(x))
        else:
            x = self.norm1(x + self.self_attn(x, mask=self_mask))
            x = self.norm2(x + self.cross_attn(x, context=memory, mask=memory_mask))
            x = self.norm3(x + self.ffn(x))
        return x


class DecoderBlockStaleQueries(_DecoderBlockBase):
    """Wrong: post-norm cross-attention takes its queries from the block's input x, not the self-attention output."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            h = x + self.self_attn(self.norm1(x), mask=self_mask)
            h = h + self.cross_attn(self.norm2(h), context=memory, mask=memory_mask)
            return h + self.ffn(self.norm3(h))
        h = self.norm1(x + self.self_attn(x, mask=self_mask))
        h = self.norm2(h + self.cross_attn(x, context=memory, mask=memory_mask))
        return self.norm3(h + self.ffn(h))


class DecoderBlockNorm1Everywhere(_DecoderBlockBase):
    """Wrong: pre-norm uses norm1 before all three sublayers."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=self_mask)
            x = x + self.cross_attn(self.norm1(x), context=memory, mask=memory_mask)
            x = x + self.ffn(self.norm1(x))
        else:
            x = self.norm1(x + self.self_attn(x, mask=self_mask))
            x = self.norm2(x + self.cross_attn(x, context=memory, mask=memory_mask))
            x = self.norm3(x + self.ffn(x))
        return x


class DecoderBlockSelfMaskPositional(_DecoderBlockBase):
    """Wrong: self_attn(h, self_mask) passes the mask positionally, where the second argument is context."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), self_mask)
            x = x + self.cross_attn(self.norm2(x), memory, memory_mask)
            x = x + self.ffn(self.norm3(x))
        else:
            x = self.norm1(x + self.self_attn(x, self_mask))
            x = self.norm2(x + self.cross_attn(x, memory, memory_mask))
            x = self.norm3(x + self.ffn(x))
        return x


class DecoderBlockCrossFirst(_DecoderBlockBase):
    """Wrong: cross-attention runs before the masked self-attention (sublayers out of order)."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.cross_attn(self.norm1(x), context=memory, mask=memory_mask)
            x = x + self.self_attn(self.norm2(x), mask=self_mask)
            x = x + self.ffn(self.norm3(x))
        else:
            x = self.norm1(x + self.cross_attn(x, context=memory, mask=memory_mask))
            x = self.norm2(x + self.self_attn(x, mask=self_mask))
            x = self.norm3(x + self.ffn(x))
        return x


class DecoderBlockPreNormNoCrossResidual(_DecoderBlockBase):
    """Wrong: pre-norm drops the residual around cross-attention, x = cross_attn(norm2(x), memory)."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=self_mask)
            x = self.cross_attn(self.norm2(x), context=memory, mask=memory_mask)
            x = x + self.ffn(self.norm3(x))
        else:
            x = self.norm1(x + self.self_attn(x, mask=self_mask))
            x = self.norm2(x + self.cross_attn(x, context=memory, mask=memory_mask))
            x = self.norm3(x + self.ffn(x))
        return x


# ---------------------------------------------------------------- greedy_decode


@torch.no_grad()
def greedy_decode_right(model, src, bos_id, eos_id, max_len):
    """Right: a done flag per sequence, PAD after EOS, stop when every sequence is done."""
    memory, src_mask = model.encode(src)
    batch = src.size(0)
    ys = torch.full((batch, 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(batch, dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        logits = model.decode(ys, memory, src_mask)
        next_token = logits[:, -1].argmax(dim=-1)
        next_token = torch.where(done, torch.full_like(next_token, model.pad_id), next_token)
        ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)
        done = done | (next_token == eos_id)
        if bool(done.all()):
            break
    return ys


@torch.no_grad()
def greedy_decode_buffer(model, src, bos_id, eos_id, max_len):
    """Right: a preallocated PAD buffer filled column by column; finished read back from the buffer; trimmed at the end."""
    memory, src_mask = model.encode(src)
    batch = src.shape[0]
    out = src.new_full((batch, max_len + 1), model.pad_id, dtype=torch.long)
    out[:, 0] = bos_id
    steps = 0
    for t in range(1, max_len + 1):
        finished = (out[:, 1:t] == eos_id).any(dim=1)
        if t > 1 and bool(finished.all()):
            break
        logits = model.decode(out[:, :t], memory, src_mask)
        best = logits[:, t - 1, :].max(dim=-1).indices
        out[:, t] = best.masked_fill(finished, model.pad_id)
        steps = t
    return out[:, : steps + 1].clone()


@torch.no_grad()
def greedy_decode_int32(model, src, bos_id, eos_id, max_len):
    """Wrong: ys is made as torch.int32, so the returned tokens are int32, not torch.long."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.int32, device=src.device)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        next_token = model.decode(ys, memory, src_mask)[:, -1].argmax(-1).to(torch.int32)
        next_token[done] = model.pad_id
        ys = torch.cat([ys, next_token[:, None]], 1)
        done |= next_token == eos_id
        if done.all():
            break
    return ys


@torch.no_grad()
def greedy_decode_counts_bos(model, src, bos_id, eos_id, max_len):
    """Wrong: loops while ys.size(1) < max_len, counting BOS, so one step too few."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    while ys.size(1) < max_len:
        next_token = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        next_token[done] = model.pad_id
        ys = torch.cat([ys, next_token[:, None]], 1)
        done |= next_token == eos_id
        if done.all():
            break
    return ys


@torch.no_grad()
def greedy_decode_pads_the_eos(model, src, bos_id, eos_id, max_len):
    """Wrong: updates the done flag before padding, so the EOS token itself is replaced by PAD."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        next_token = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        done = done | (next_token == eos_id)
        next_token[done] = model.pad_id
        ys = torch.cat([ys, next_token[:, None]], 1)
        if done.all():
            break
    return ys


@torch.no_grad()
def greedy_decode_stop_same_step(model, src, bos_id, eos_id, max_len):
    """Wrong: stops only when every sequence emits EOS at the same step ((next == eos).all()), so it runs on padding."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        next_token = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        next_token[done] = model.pad_id
        ys = torch.cat([ys, next_token[:, None]], 1)
        done |= next_token == eos_id
        if (next_token == eos_id).all():
            break
    return ys


@torch.no_grad()
def greedy_decode_eos_after_eos(model, src, bos_id, eos_id, max_len):
    """Wrong: after EOS it appends eos_id again instead of model.pad_id."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        next_token = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        next_token[done] = eos_id
        ys = torch.cat([ys, next_token[:, None]], 1)
        done |= next_token == eos_id
        if done.all():
            break
    return ys


@torch.no_grad()
def greedy_decode_max_values(model, src, bos_id, eos_id, max_len):
    """Wrong: takes .max(-1)[0] (the values) instead of the indices as the next token."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        next_token = model.decode(ys, memory, src_mask)[:, -1].max(-1)[0].long()
        next_token[done] = model.pad_id
        ys = torch.cat([ys, next_token[:, None]], 1)
        done |= next_token == eos_id
        if done.all():
            break
    return ys


@torch.no_grad()
def greedy_decode_last_token_only(model, src, bos_id, eos_id, max_len):
    """Wrong: 'finished' is read from the last token only (ys[:, -1] == eos), so after one PAD decoding resumes."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
    for _ in range(max_len):
        finished = ys[:, -1] == eos_id
        next_token = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        next_token[finished] = model.pad_id
        ys = torch.cat([ys, next_token[:, None]], 1)
        if ((ys == eos_id).any(1)).all():
            break
    return ys


# ---------------------------------------------------------------- label_smoothed_loss


def label_smoothed_loss_right(logits, targets, eps=0.1, ignore_index=0):
    """Right: log_softmax, gather on safe targets, mean of (1 - eps) nll + eps * mean_k(-log p) over kept positions."""
    log_p = torch.log_softmax(logits, dim=-1)
    keep = targets != ignore_index
    safe = targets.masked_fill(~keep, 0)
    nll = -log_p.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    uniform = -log_p.mean(dim=-1)
    loss = (1 - eps) * nll + eps * uniform
    return loss[keep].mean()


def label_smoothed_loss_explicit_q(logits, targets, eps=0.1, ignore_index=0):
    """Right: rows selected first, the smoothed target q built explicitly with scatter, einsum of q and -log p."""
    vocab = logits.shape[-1]
    flat_logits = logits.reshape(-1, vocab)
    flat_targets = targets.reshape(-1)
    rows = torch.nonzero(flat_targets != ignore_index).squeeze(1)
    kept_logits = flat_logits.index_select(0, rows)
    kept_targets = flat_targets.index_select(0, rows)
    log_p = kept_logits - torch.logsumexp(kept_logits, dim=1, keepdim=True)
    q = torch.full_like(log_p, eps / vocab)
    q.scatter_add_(1, kept_targets[:, None], torch.full_like(log_p[:, :1], 1 - eps))
    per_row = -torch.einsum("nv,nv->n", q, log_p)
    return per_row.sum() / rows.numel()


def label_smoothed_loss_gather_first(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: gathers at every target before masking, so an ignore_index outside 0..V-1 (e.g. -100) breaks it."""
    log_p = F.log_softmax(logits, dim=-1)
    nll = -log_p.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    loss = (1 - eps) * nll + eps * (-log_p.mean(-1))
    keep = targets != ignore_index
    return (loss * keep).sum() / keep.sum()


def label_smoothed_loss_naive_logsumexp(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: log p = logits - log(sum(exp(logits))) without subtracting the max, overflows for large logits."""
    log_p = logits - logits.exp().sum(-1, keepdim=True).log()
    keep = targets != ignore_index
    safe = torch.where(keep, targets, torch.zeros_like(targets))
    nll = -log_p.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    loss = (1 - eps) * nll + eps * (-log_p.mean(-1))
    return loss[keep].mean()


def label_smoothed_loss_softmax_dim1(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: log_softmax(logits, dim=1), over the positions of a (B, L, V) input instead of the classes."""
    log_p = torch.log_softmax(logits, dim=1)
    keep = targets != ignore_index
    safe = targets.masked_fill(~keep, 0)
    nll = -log_p.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    loss = (1 - eps) * nll + eps * (-log_p.mean(-1))
    return loss[keep].mean()


def label_smoothed_loss_eps_hard_coded(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: the smoothing is hard-coded to 0.1, the eps argument ignored."""
    log_p = torch.log_softmax(logits, dim=-1)
    keep = targets != ignore_index
    safe = targets.masked_fill(~keep, 0)
    nll = -log_p.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    loss = 0.9 * nll + 0.1 * (-log_p.mean(-1))
    return loss[keep].mean()


def label_smoothed_loss_mean_of_means(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: averages each sequence over its kept positions, then averages the sequences (mean of means)."""
    log_p = torch.log_softmax(logits, dim=-1)
    keep = (targets != ignore_index).to(log_p.dtype)
    safe = targets.masked_fill(targets == ignore_index, 0)
    nll = -log_p.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    loss = (1 - eps) * nll + eps * (-log_p.mean(-1))
    if loss.dim() < 2:
        return (loss * keep).sum() / keep.sum()
    per_seq = (loss * keep).sum(-1) / keep.sum(-1).clamp(min=1)
    return per_seq.mean()


def label_smoothed_loss_uniform_all_positions(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: the uniform term is -log_p.mean() with no dim, a mean over every position and class, padding included."""
    log_p = torch.log_softmax(logits, dim=-1)
    keep = targets != ignore_index
    safe = targets.masked_fill(~keep, 0)
    nll = -log_p.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    return (1 - eps) * nll[keep].mean() + eps * (-log_p.mean())


def label_smoothed_loss_pad_zero(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: the ignored positions are hard-coded as targets == 0, the ignore_index argument unused."""
    log_p = torch.log_softmax(logits, dim=-1)
    keep = targets != 0
    nll = -log_p.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    loss = (1 - eps) * nll + eps * (-log_p.mean(-1))
    return loss[keep].mean()


def label_smoothed_loss_targets_in_place(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: overwrites the ignored targets with 0 in the caller's tensor (targets[...] = 0)."""
    log_p = torch.log_softmax(logits, dim=-1)
    keep = targets != ignore_index
    targets[~keep] = 0
    nll = -log_p.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    loss = (1 - eps) * nll + eps * (-log_p.mean(-1))
    return loss[keep].mean()


# ---------------------------------------------------------------- length_normalised_score


def length_normalised_score_right(log_probs, lengths, alpha):
    """Right: log_probs / lengths.to(log_probs.dtype) ** alpha."""
    return log_probs / lengths.to(log_probs.dtype) ** alpha


def length_normalised_score_exp_log(log_probs, lengths, alpha):
    """Right: multiplies by exp(-alpha * log|Y|), lengths moved to log_probs' dtype and device."""
    length = lengths.to(dtype=log_probs.dtype, device=log_probs.device)
    return torch.mul(log_probs, torch.exp(torch.log(length) * -float(alpha)))


def length_normalised_score_float32_lengths(log_probs, lengths, alpha):
    """Wrong: lengths.float() instead of log_probs' dtype (float32 lengths drag a 0-d or half log_probs along)."""
    return log_probs / lengths.float() ** alpha


def length_normalised_score_in_place(log_probs, lengths, alpha):
    """Wrong: divides log_probs in place (/=), changing the caller's tensor."""
    log_probs /= lengths.to(log_probs.dtype) ** alpha
    return log_probs


def length_normalised_score_counts_bos(log_probs, lengths, alpha):
    """Wrong: adds 1 for BOS, |Y| + 1 (BOS is given, not generated)."""
    return log_probs / (lengths.to(log_probs.dtype) + 1) ** alpha


def length_normalised_score_python_loop(log_probs, lengths, alpha):
    """Wrong: a Python loop over tolist(): a new float32 1-D tensor, no gradient, shape lost."""
    scores = [
        lp / length**alpha
        for lp, length in zip(log_probs.reshape(-1).tolist(), lengths.reshape(-1).tolist())
    ]
    return torch.tensor(scores)


def length_normalised_score_power_outside(log_probs, lengths, alpha):
    """Wrong: parentheses slip, (log_probs / |Y|) ** alpha."""
    return (log_probs / lengths.to(log_probs.dtype)) ** alpha


def length_normalised_score_view_as(log_probs, lengths, alpha):
    """Wrong: lengths.view_as(log_probs), which fails when lengths only broadcasts to log_probs' shape."""
    return log_probs / lengths.to(log_probs.dtype).view_as(log_probs) ** alpha


def length_normalised_score_floor_division(log_probs, lengths, alpha):
    """Wrong: floor division //, rounding the scores down to whole numbers."""
    return log_probs // lengths.to(log_probs.dtype) ** alpha


WRONG = {
    "DecoderBlock": [
        DecoderBlockMasksSwapped,
        DecoderBlockNormsMemory,
        DecoderBlockStaleQueries,
        DecoderBlockNorm1Everywhere,
        DecoderBlockSelfMaskPositional,
        DecoderBlockCrossFirst,
        DecoderBlockPreNormNoCrossResidual,
    ],
    "greedy_decode": [
        greedy_decode_int32,
        greedy_decode_counts_bos,
        greedy_decode_pads_the_eos,
        greedy_decode_stop_same_step,
        greedy_decode_eos_after_eos,
        greedy_decode_max_values,
        greedy_decode_last_token_only,
    ],
    "label_smoothed_loss": [
        label_smoothed_loss_gather_first,
        label_smoothed_loss_naive_logsumexp,
        label_smoothed_loss_softmax_dim1,
        label_smoothed_loss_eps_hard_coded,
        label_smoothed_loss_mean_of_means,
        label_smoothed_loss_uniform_all_positions,
        label_smoothed_loss_pad_zero,
        label_smoothed_loss_targets_in_place,
    ],
    "length_normalised_score": [
        length_normalised_score_float32_lengths,
        length_normalised_score_in_place,
        length_normalised_score_counts_bos,
        length_normalised_score_python_loop,
        length_normalised_score_power_outside,
        length_normalised_score_view_as,
        length_normalised_score_floor_division,
    ],
}

RIGHT = {
    "DecoderBlock": DecoderBlockRight,
    "greedy_decode": greedy_decode_right,
    "label_smoothed_loss": label_smoothed_loss_right,
    "length_normalised_score": length_normalised_score_right,
}

RIGHT2 = {
    "DecoderBlock": DecoderBlockSublayerList,
    "greedy_decode": greedy_decode_buffer,
    "label_smoothed_loss": label_smoothed_loss_explicit_q,
    "length_normalised_score": length_normalised_score_exp_log,
}
