"""Lesson 07 (cross-attention, decoding, label smoothing, length penalty): fifth held-out set
of wrong and right implementations, from the exercise text only."""

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lab.add_norm import FeedForward, LayerNorm
from transformer_lab.masking import causal_mask
from transformer_lab.multihead import MultiHeadAttention

# ====================================================================== DecoderBlock


class _DecoderBase(nn.Module):
    """The constructor given in the notebook."""

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


class DecoderBlockRight(_DecoderBase):
    """Right: the three sublayers written out for both arrangements."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout(self.self_attn(h, mask=self_mask))
            h = self.norm2(x)
            x = x + self.dropout(self.cross_attn(h, context=memory, mask=memory_mask))
            x = x + self.dropout(self.ffn(self.norm3(x)))
        else:
            x = self.norm1(x + self.dropout(self.self_attn(x, mask=self_mask)))
            x = self.norm2(x + self.dropout(self.cross_attn(x, context=memory, mask=memory_mask)))
            x = self.norm3(x + self.dropout(self.ffn(x)))
        return x


class DecoderBlockRight2(_DecoderBase):
    """Right: a loop over (sublayer, norm) pairs."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        sublayers = (
            (lambda h: self.self_attn(h, None, self_mask), self.norm1),
            (lambda h: self.cross_attn(h, memory, memory_mask), self.norm2),
            (self.ffn, self.norm3),
        )
        for fn, norm in sublayers:
            if self.norm_first:
                x = x + self.dropout(fn(norm(x)))
            else:
                x = norm(x + self.dropout(fn(x)))
        return x


class DecoderBlockCrossSelf(_DecoderBase):
    """Wrong: the cross-attention is called without context, so it attends over x again."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=self_mask)
            x = x + self.cross_attn(self.norm2(x))
            return x + self.ffn(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, mask=self_mask))
        x = self.norm2(x + self.cross_attn(x))
        return self.norm3(x + self.ffn(x))


class DecoderBlockMemoryQueries(_DecoderBase):
    """Wrong: queries from the memory, keys/values from the decoder; output cut to L_t rows."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        L_t = x.shape[1]
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=self_mask)
            c = self.cross_attn(memory, context=self.norm2(x))
            x = x + c[:, :L_t]
            return x + self.ffn(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, mask=self_mask))
        x = self.norm2(x + self.cross_attn(memory, context=x)[:, :L_t])
        return self.norm3(x + self.ffn(x))


class DecoderBlockNoSelfMask(_DecoderBase):
    """Wrong: self_mask is never passed to the self-attention."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x))
            x = x + self.cross_attn(self.norm2(x), context=memory, mask=memory_mask)
            return x + self.ffn(self.norm3(x))
        x = self.norm1(x + self.self_attn(x))
        x = self.norm2(x + self.cross_attn(x, context=memory, mask=memory_mask))
        return self.norm3(x + self.ffn(x))


class DecoderBlockOwnCausal(_DecoderBase):
    """Wrong: builds causal_mask(L_t) itself, dropping the padding part of the given self_mask."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        m = causal_mask(x.shape[1]).to(x.device)
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=m)
            x = x + self.cross_attn(self.norm2(x), context=memory, mask=memory_mask)
            return x + self.ffn(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, mask=m))
        x = self.norm2(x + self.cross_attn(x, context=memory, mask=memory_mask))
        return self.norm3(x + self.ffn(x))


class DecoderBlockNoMemoryMask(_DecoderBase):
    """Wrong: memory_mask is ignored; padded source positions are attended."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=self_mask)
            x = x + self.cross_attn(self.norm2(x), context=memory)
            return x + self.ffn(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, mask=self_mask))
        x = self.norm2(x + self.cross_attn(x, context=memory))
        return self.norm3(x + self.ffn(x))


class DecoderBlockSwapped(_DecoderBase):
    """Wrong: norm_first=True runs post-norm and False runs pre-norm."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if not self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=self_mask)
            x = x + self.cross_attn(self.norm2(x), context=memory, mask=memory_mask)
            return x + self.ffn(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, mask=self_mask))
        x = self.norm2(x + self.cross_attn(x, context=memory, mask=memory_mask))
        return self.norm3(x + self.ffn(x))


class DecoderBlockNormMemory(_DecoderBase):
    """Wrong: pre-norm also passes the memory through norm2 before the cross-attention."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=self_mask)
            x = x + self.cross_attn(self.norm2(x), context=self.norm2(memory), mask=memory_mask)
            return x + self.ffn(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, mask=self_mask))
        x = self.norm2(x + self.cross_attn(x, context=memory, mask=memory_mask))
        return self.norm3(x + self.ffn(x))


class DecoderBlockNormsOutOfOrder(_DecoderBase):
    """Wrong: norm3 used for the cross-attention and norm2 for the FFN."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=self_mask)
            x = x + self.cross_attn(self.norm3(x), context=memory, mask=memory_mask)
            return x + self.ffn(self.norm2(x))
        x = self.norm1(x + self.self_attn(x, mask=self_mask))
        x = self.norm3(x + self.cross_attn(x, context=memory, mask=memory_mask))
        return self.norm2(x + self.ffn(x))


class DecoderBlockCrossNoResidual(_DecoderBase):
    """Wrong: the cross-attention sublayer has no residual (x = norm2(cross(x)))."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=self_mask)
            x = self.cross_attn(self.norm2(x), context=memory, mask=memory_mask)
            return x + self.ffn(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, mask=self_mask))
        x = self.norm2(self.cross_attn(x, context=memory, mask=memory_mask))
        return self.norm3(x + self.ffn(x))


# ====================================================================== greedy_decode


@torch.no_grad()
def greedy_decode_right(model, src, bos_id, eos_id, max_len):
    """Right: grow ys with torch.cat, PAD after EOS, stop when every row is done."""
    memory, src_mask = model.encode(src)
    B = src.shape[0]
    ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        logits = model.decode(ys, memory, src_mask)
        nxt = logits[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done = done | (nxt == eos_id)
        if done.all():
            break
    return ys


@torch.no_grad()
def greedy_decode_right2(model, src, bos_id, eos_id, max_len):
    """Right: preallocated buffer filled column by column, per-row Python bookkeeping."""
    memory, src_mask = model.encode(src)
    B = src.size(0)
    out = torch.full((B, max_len + 1), model.pad_id, dtype=torch.long, device=src.device)
    out[:, 0] = bos_id
    finished = [False] * B
    steps = 0
    for t in range(1, max_len + 1):
        logits = model.decode(out[:, :t], memory, src_mask)
        best = logits[:, t - 1, :].max(dim=-1).indices
        for b in range(B):
            if not finished[b]:
                out[b, t] = best[b]
                finished[b] = int(best[b]) == eos_id
        steps = t
        if all(finished):
            break
    return out[:, : steps + 1]


@torch.no_grad()
def greedy_decode_first_position(model, src, bos_id, eos_id, max_len):
    """Wrong: takes the argmax of the first position's logits at every step."""
    memory, src_mask = model.encode(src)
    B = src.shape[0]
    ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, 0].argmax(-1)
        nxt = nxt.masked_fill(done, model.pad_id)
        ys = torch.cat([ys, nxt[:, None]], 1)
        done |= nxt == eos_id
        if done.all():
            break
    return ys


@torch.no_grad()
def greedy_decode_ignores_eos(model, src, bos_id, eos_id, max_len):
    """Wrong: always runs max_len steps and never pads after EOS."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        ys = torch.cat([ys, nxt.unsqueeze(1)], 1)
    return ys


@torch.no_grad()
def greedy_decode_stop_any(model, src, bos_id, eos_id, max_len):
    """Wrong: stops the whole batch as soon as any sequence emits EOS."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        nxt = nxt.masked_fill(done, model.pad_id)
        ys = torch.cat([ys, nxt.unsqueeze(1)], 1)
        done |= nxt == eos_id
        if done.any():
            break
    return ys


@torch.no_grad()
def greedy_decode_no_bos(model, src, bos_id, eos_id, max_len):
    """Wrong: returns only the generated tokens, BOS dropped."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        nxt = nxt.masked_fill(done, model.pad_id)
        ys = torch.cat([ys, nxt.unsqueeze(1)], 1)
        done |= nxt == eos_id
        if done.all():
            break
    return ys[:, 1:]


@torch.no_grad()
def greedy_decode_no_src_mask(model, src, bos_id, eos_id, max_len):
    """Wrong: decodes with src_mask=None, so padded source positions are attended."""
    memory, _ = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, None)[:, -1].argmax(-1)
        nxt = nxt.masked_fill(done, model.pad_id)
        ys = torch.cat([ys, nxt.unsqueeze(1)], 1)
        done |= nxt == eos_id
        if done.all():
            break
    return ys


@torch.no_grad()
def greedy_decode_keeps_going(model, src, bos_id, eos_id, max_len):
    """Wrong: stops when all are done but keeps appending the argmax (not PAD) after a row's EOS."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        ys = torch.cat([ys, nxt.unsqueeze(1)], 1)
        done |= nxt == eos_id
        if done.all():
            break
    return ys


@torch.no_grad()
def greedy_decode_one_short(model, src, bos_id, eos_id, max_len):
    """Wrong: off by one, at most max_len - 1 decoding steps."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len - 1):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        nxt = nxt.masked_fill(done, model.pad_id)
        ys = torch.cat([ys, nxt.unsqueeze(1)], 1)
        done |= nxt == eos_id
        if done.all():
            break
    return ys


@torch.no_grad()
def greedy_decode_pad_is_eos_step(model, src, bos_id, eos_id, max_len):
    """Wrong: the done flag is updated before masking, so the EOS token itself becomes PAD."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        done |= nxt == eos_id
        nxt = nxt.masked_fill(done, model.pad_id)
        ys = torch.cat([ys, nxt.unsqueeze(1)], 1)
        if done.all():
            break
    return ys


# ====================================================================== label_smoothed_loss


def label_smoothed_loss_right(logits, targets, eps=0.1, ignore_index=0):
    """Right: log_softmax, gather for the true class, mean over the kept positions."""
    logp = F.log_softmax(logits, dim=-1)
    keep = targets != ignore_index
    safe = targets.masked_fill(~keep, 0)
    nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    uniform = -logp.mean(dim=-1)
    loss = (1 - eps) * nll + eps * uniform
    return loss[keep].mean()


def label_smoothed_loss_right2(logits, targets, eps=0.1, ignore_index=0):
    """Right: explicit target distribution q over flattened positions, weighted sum."""
    V = logits.shape[-1]
    flat_logits = logits.reshape(-1, V)
    flat_t = targets.reshape(-1)
    keep = (flat_t != ignore_index).to(flat_logits.dtype)
    q = torch.full_like(flat_logits, eps / V)
    idx = torch.where(flat_t == ignore_index, torch.zeros_like(flat_t), flat_t)
    q = q + (1 - eps) * F.one_hot(idx, V).to(flat_logits.dtype)
    per_pos = -(q * torch.log_softmax(flat_logits, -1)).sum(-1)
    return (per_pos * keep).sum() / keep.sum()


def _parts(logits, targets, ignore_index):
    logp = F.log_softmax(logits, dim=-1)
    keep = targets != ignore_index
    nll = -logp.gather(-1, targets.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)
    return logp, keep, nll


def label_smoothed_loss_v_minus_1(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: eps spread over the V - 1 wrong classes only."""
    logp, keep, nll = _parts(logits, targets, ignore_index)
    V = logits.shape[-1]
    wrong_sum = -logp.sum(-1) - nll
    loss = (1 - eps) * nll + eps / (V - 1) * wrong_sum
    return loss[keep].mean()


def label_smoothed_loss_sum(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: returns the sum over kept positions instead of the mean."""
    logp, keep, nll = _parts(logits, targets, ignore_index)
    loss = (1 - eps) * nll - eps * logp.mean(-1)
    return loss[keep].sum()


def label_smoothed_loss_divide_all(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: padding losses zeroed but the mean divides by every position."""
    logp, keep, nll = _parts(logits, targets, ignore_index)
    loss = (1 - eps) * nll - eps * logp.mean(-1)
    return (loss * keep).mean()


def label_smoothed_loss_log_softmax_prob(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: log(softmax(logits)), which underflows to -inf for logits 1000 apart."""
    logp = torch.log(torch.softmax(logits, dim=-1))
    keep = targets != ignore_index
    nll = -logp.gather(-1, targets.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)
    loss = (1 - eps) * nll - eps * logp.mean(-1)
    return loss[keep].mean()


def label_smoothed_loss_eps_times_sum(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: the uniform part is eps * sum_k(-log p_k), the 1/V forgotten."""
    logp, keep, nll = _parts(logits, targets, ignore_index)
    loss = (1 - eps) * nll - eps * logp.sum(-1)
    return loss[keep].mean()


def label_smoothed_loss_true_weight_one(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: the true class keeps weight 1 (no (1 - eps) factor) plus the uniform part."""
    logp, keep, nll = _parts(logits, targets, ignore_index)
    loss = nll - eps * logp.mean(-1)
    return loss[keep].mean()


def label_smoothed_loss_negative_ignore(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: gathers at the raw targets, which fails when ignore_index (-100) is no class."""
    logp = F.log_softmax(logits, dim=-1)
    nll = -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    loss = (1 - eps) * nll - eps * logp.mean(-1)
    return loss[targets != ignore_index].mean()


def label_smoothed_loss_per_row_mean(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: averages each sequence over its kept positions, then averages the sequences."""
    logp, keep, nll = _parts(logits, targets, ignore_index)
    loss = ((1 - eps) * nll - eps * logp.mean(-1)) * keep
    if loss.dim() == 1:
        return loss.sum() / keep.sum()
    flat = loss.reshape(loss.shape[0], -1)
    k = keep.reshape(keep.shape[0], -1).sum(-1).clamp(min=1)
    return (flat.sum(-1) / k).mean()


def label_smoothed_loss_pad_no_mass(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: the padding class gets no smoothing mass (eps over the other V - 1 classes)."""
    logp, keep, nll = _parts(logits, targets, ignore_index)
    V = logits.shape[-1]
    total = -logp.sum(-1)
    if 0 <= ignore_index < V:
        total = total + logp[..., ignore_index]
        uniform = total / (V - 1)
    else:
        uniform = total / V
    loss = (1 - eps) * nll + eps * uniform
    return loss[keep].mean()


# ====================================================================== length_normalised_score


def length_normalised_score_right(log_probs, lengths, alpha):
    """Right: log_probs / lengths ** alpha, lengths in log_probs' dtype."""
    return log_probs / lengths.to(log_probs.dtype) ** alpha


def length_normalised_score_right2(log_probs, lengths, alpha):
    """Right: multiply by exp(-alpha * log |Y|)."""
    n = lengths.to(log_probs.dtype)
    return log_probs * torch.exp(-alpha * torch.log(n))


def length_normalised_score_ignore_alpha(log_probs, lengths, alpha):
    """Wrong: always divides by |Y| (alpha unused)."""
    return log_probs / lengths.to(log_probs.dtype)


def length_normalised_score_multiply(log_probs, lengths, alpha):
    """Wrong: multiplies by |Y|^alpha instead of dividing."""
    return log_probs * lengths.to(log_probs.dtype) ** alpha


def length_normalised_score_gnmt(log_probs, lengths, alpha):
    """Wrong: GNMT's ((5 + |Y|) / 6)^alpha penalty."""
    return log_probs / ((5 + lengths.to(log_probs.dtype)) / 6) ** alpha


def length_normalised_score_minus_eos(log_probs, lengths, alpha):
    """Wrong: subtracts the EOS from |Y| (lengths - 1)."""
    return log_probs / (lengths.to(log_probs.dtype) - 1).clamp(min=1) ** alpha


def length_normalised_score_alpha_times(log_probs, lengths, alpha):
    """Wrong: divides by alpha * |Y| (guarding alpha = 0)."""
    if alpha == 0:
        return log_probs.clone()
    return log_probs / (alpha * lengths.to(log_probs.dtype))


def length_normalised_score_float32(log_probs, lengths, alpha):
    """Wrong: computes with lengths.float() and returns float32 whatever log_probs' dtype."""
    return (log_probs / lengths.float() ** alpha).float()


def length_normalised_score_inplace(log_probs, lengths, alpha):
    """Wrong: divides log_probs in place (div_), changing the caller's tensor."""
    with torch.no_grad():
        log_probs.div_(lengths.to(log_probs.dtype) ** alpha)
    return log_probs


def length_normalised_score_prob(log_probs, lengths, alpha):
    """Wrong: normalises the probability exp(log p) instead of the log-probability."""
    return torch.exp(log_probs) / lengths.to(log_probs.dtype) ** alpha


WRONG = {
    "DecoderBlock": [
        DecoderBlockCrossSelf,
        DecoderBlockMemoryQueries,
        DecoderBlockNoSelfMask,
        DecoderBlockOwnCausal,
        DecoderBlockNoMemoryMask,
        DecoderBlockSwapped,
        DecoderBlockNormMemory,
        DecoderBlockNormsOutOfOrder,
        DecoderBlockCrossNoResidual,
    ],
    "greedy_decode": [
        greedy_decode_first_position,
        greedy_decode_ignores_eos,
        greedy_decode_stop_any,
        greedy_decode_no_bos,
        greedy_decode_no_src_mask,
        greedy_decode_keeps_going,
        greedy_decode_one_short,
        greedy_decode_pad_is_eos_step,
    ],
    "label_smoothed_loss": [
        label_smoothed_loss_v_minus_1,
        label_smoothed_loss_sum,
        label_smoothed_loss_divide_all,
        label_smoothed_loss_log_softmax_prob,
        label_smoothed_loss_eps_times_sum,
        label_smoothed_loss_true_weight_one,
        label_smoothed_loss_negative_ignore,
        label_smoothed_loss_per_row_mean,
        label_smoothed_loss_pad_no_mass,
    ],
    "length_normalised_score": [
        length_normalised_score_ignore_alpha,
        length_normalised_score_multiply,
        length_normalised_score_gnmt,
        length_normalised_score_minus_eos,
        length_normalised_score_alpha_times,
        length_normalised_score_float32,
        length_normalised_score_inplace,
        length_normalised_score_prob,
    ],
}
RIGHT = {
    "DecoderBlock": DecoderBlockRight,
    "greedy_decode": greedy_decode_right,
    "label_smoothed_loss": label_smoothed_loss_right,
    "length_normalised_score": length_normalised_score_right,
}
RIGHT2 = {
    "DecoderBlock": DecoderBlockRight2,
    "greedy_decode": greedy_decode_right2,
    "label_smoothed_loss": label_smoothed_loss_right2,
    "length_normalised_score": length_normalised_score_right2,
}
