"""Lesson 07 (cross-attention): held-out wrong and right implementations, from the exercise text."""

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lab.add_norm import FeedForward, LayerNorm
from transformer_lab.multihead import MultiHeadAttention


class _Block(nn.Module):
    """The given constructor of the exercise (not an implementation)."""

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


# ---------------------------------------------------------------- DecoderBlock


class DecoderBlockRight(_Block):
    """Right: the three sublayers written out, one if/else per norm placement."""

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


class DecoderBlockRight2(_Block):
    """Right: a loop over (norm, sublayer) pairs with a generic residual helper."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        steps = [
            (self.norm1, lambda h: self.self_attn(h, h, self_mask)),
            (self.norm2, lambda h: self.cross_attn(h, memory, memory_mask)),
            (self.norm3, self.ffn),
        ]
        for norm, sublayer in steps:
            if self.norm_first:
                x = x + self.dropout(sublayer(norm(x)))
            else:
                x = norm(x + self.dropout(sublayer(x)))
        return x


class DecoderBlockNoCrossResidual(_Block):
    """Wrong: the cross-attention sublayer has no residual (x = norm(cross_attn(x)))."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=self_mask)
            x = self.cross_attn(self.norm2(x), context=memory, mask=memory_mask)
            x = x + self.ffn(self.norm3(x))
        else:
            x = self.norm1(x + self.self_attn(x, mask=self_mask))
            x = self.norm2(self.cross_attn(x, context=memory, mask=memory_mask))
            x = self.norm3(x + self.ffn(x))
        return x


class DecoderBlockResidualFromNormed(_Block):
    """Wrong: pre-norm adds the residual to the normalised x (x = norm(x); x = x + f(x))."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = self.norm1(x)
            x = x + self.self_attn(x, mask=self_mask)
            x = self.norm2(x)
            x = x + self.cross_attn(x, context=memory, mask=memory_mask)
            x = self.norm3(x)
            x = x + self.ffn(x)
        else:
            x = self.norm1(x + self.self_attn(x, mask=self_mask))
            x = self.norm2(x + self.cross_attn(x, context=memory, mask=memory_mask))
            x = self.norm3(x + self.ffn(x))
        return x


class DecoderBlockQueriesFromInput(_Block):
    """Wrong: cross-attention queries come from the block's input, not the self-attention output."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            h = x + self.self_attn(self.norm1(x), mask=self_mask)
            h = h + self.cross_attn(self.norm2(x), context=memory, mask=memory_mask)
            return h + self.ffn(self.norm3(h))
        h = self.norm1(x + self.self_attn(x, mask=self_mask))
        h = self.norm2(h + self.cross_attn(x, context=memory, mask=memory_mask))
        return self.norm3(h + self.ffn(h))


class DecoderBlockNormsReversed(_Block):
    """Wrong: the norms are used in reverse order (norm3 for self-attention, norm1 for the FFN)."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm3(x), mask=self_mask)
            x = x + self.cross_attn(self.norm2(x), context=memory, mask=memory_mask)
            return x + self.ffn(self.norm1(x))
        x = self.norm3(x + self.self_attn(x, mask=self_mask))
        x = self.norm2(x + self.cross_attn(x, context=memory, mask=memory_mask))
        return self.norm1(x + self.ffn(x))


class DecoderBlockMasksSwapped(_Block):
    """Wrong: memory_mask goes to self-attention and self_mask to cross-attention."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=memory_mask)
            x = x + self.cross_attn(self.norm2(x), context=memory, mask=self_mask)
            return x + self.ffn(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, mask=memory_mask))
        x = self.norm2(x + self.cross_attn(x, context=memory, mask=self_mask))
        return self.norm3(x + self.ffn(x))


class DecoderBlockPreNormFinalNorm(_Block):
    """Wrong: pre-norm also normalises the block's output with norm3 (ffn on the raw x)."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=self_mask)
            x = x + self.cross_attn(self.norm2(x), context=memory, mask=memory_mask)
            return self.norm3(x + self.ffn(x))
        x = self.norm1(x + self.self_attn(x, mask=self_mask))
        x = self.norm2(x + self.cross_attn(x, context=memory, mask=memory_mask))
        return self.norm3(x + self.ffn(x))


# ---------------------------------------------------------------- greedy_decode


@torch.no_grad()
def greedy_right(model, src, bos_id, eos_id, max_len):
    """Right: a done mask, torch.where for PAD, stop when all are done."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
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
def greedy_right2(model, src, bos_id, eos_id, max_len):
    """Right: a Python list of columns and a per-row loop for the PAD bookkeeping."""
    memory, src_mask = model.encode(src)
    B = src.shape[0]
    cols = [torch.full((B,), bos_id, dtype=torch.long, device=src.device)]
    finished = [False] * B
    step = 0
    while step < max_len and not all(finished):
        ys = torch.stack(cols, dim=1)
        last = model.decode(ys, memory, src_mask)[:, ys.shape[1] - 1, :]
        nxt = last.argmax(dim=-1).clone()
        for b in range(B):
            if finished[b]:
                nxt[b] = model.pad_id
            elif nxt[b].item() == eos_id:
                finished[b] = True
        cols.append(nxt)
        step += 1
    return torch.stack(cols, dim=1)


@torch.no_grad()
def greedy_no_early_stop(model, src, bos_id, eos_id, max_len):
    """Wrong: always runs max_len steps (PAD after EOS is right, but it never stops early)."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done = done | (nxt == eos_id)
    return ys


@torch.no_grad()
def greedy_eos_replaced_by_pad(model, src, bos_id, eos_id, max_len):
    """Wrong: done is updated before the PAD substitution, so the EOS itself becomes PAD."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        done = done | (nxt == eos_id)
        nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        if done.all():
            break
    return ys


@torch.no_grad()
def greedy_drops_bos(model, src, bos_id, eos_id, max_len):
    """Wrong: returns only the generated tokens, without the BOS column."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done = done | (nxt == eos_id)
        if done.all():
            break
    return ys[:, 1:]


@torch.no_grad()
def greedy_one_step_short(model, src, bos_id, eos_id, max_len):
    """Wrong: off by one, the loop runs range(max_len - 1)."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len - 1):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done = done | (nxt == eos_id)
        if done.all():
            break
    return ys


@torch.no_grad()
def greedy_stop_on_any(model, src, bos_id, eos_id, max_len):
    """Wrong: stops as soon as any sequence emits EOS (the batch-of-one habit)."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        if (nxt == eos_id).any():
            break
    return ys


# ---------------------------------------------------------------- label_smoothed_loss


def ls_right(logits, targets, eps=0.1, ignore_index=0):
    """Right: gather the true log-prob, mean over the vocabulary for the uniform part."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets != ignore_index
    safe = torch.where(keep, targets, torch.zeros_like(targets))
    nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    uniform = -logp.mean(dim=-1)
    loss = (1 - eps) * nll + eps * uniform
    return (loss * keep).sum() / keep.sum()


def ls_right2(logits, targets, eps=0.1, ignore_index=0):
    """Right: build the smoothed target distribution q explicitly, select the rows first."""
    V = logits.shape[-1]
    flat_logits = logits.reshape(-1, V)
    flat_t = targets.reshape(-1)
    rows = flat_t != ignore_index
    z, t = flat_logits[rows], flat_t[rows]
    q = torch.full_like(z, eps / V)
    q[torch.arange(len(t)), t] += 1 - eps
    return -(q * F.log_softmax(z, dim=-1)).sum(-1).mean()


def ls_gather_unclamped(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: gathers at the raw targets, so ignore_index=-100 is used as an index."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets != ignore_index
    nll = -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    loss = (1 - eps) * nll - eps * logp.mean(-1)
    return loss[keep].mean()


def ls_mean_over_classes(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: -(q * log p).mean(-1) instead of the sum over classes."""
    V = logits.shape[-1]
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets != ignore_index
    q = torch.full_like(logp, eps / V)
    q.scatter_add_(-1, targets.clamp(min=0).unsqueeze(-1), torch.full_like(logp[..., :1], 1 - eps))
    loss = -(q * logp).mean(-1)
    return loss[keep].mean()


def ls_smoothing_on_probs(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: smooths the predicted probabilities instead of the target: -log((1-eps) p_y + eps/V)."""
    V = logits.shape[-1]
    p = torch.softmax(logits, dim=-1)
    keep = targets != ignore_index
    p_y = p.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    loss = -torch.log((1 - eps) * p_y + eps / V)
    return loss[keep].mean()


def ls_ignore_by_zero_only(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: masks padding with targets != 0 (hard-coded PAD = 0), whatever ignore_index is."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets > 0
    nll = -logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    loss = (1 - eps) * nll - eps * logp.mean(-1)
    return loss[keep].mean()


def ls_wrong_classes_only(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: eps spread over the V - 1 wrong classes (the Annotated Transformer's habit)."""
    V = logits.shape[-1]
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets != ignore_index
    q = torch.full_like(logp, eps / (V - 1))
    q.scatter_(-1, targets.clamp(min=0).unsqueeze(-1), 1 - eps)
    return -(q * logp).sum(-1)[keep].mean()


# ---------------------------------------------------------------- length_normalised_score


def lns_right(log_probs, lengths, alpha):
    """Right: the direct formula with lengths converted to log_probs' dtype."""
    return log_probs / lengths.to(log_probs.dtype) ** alpha


def lns_right2(log_probs, lengths, alpha):
    """Right: in log space, log_probs * exp(-alpha * log |Y|)."""
    n = torch.as_tensor(lengths, device=log_probs.device).to(log_probs.dtype)
    return log_probs * torch.exp(-alpha * torch.log(n))


def lns_plus_bos(log_probs, lengths, alpha):
    """Wrong: counts BOS as well, dividing by (|Y| + 1) ** alpha."""
    return log_probs / (lengths.to(log_probs.dtype) + 1) ** alpha


def lns_precedence(log_probs, lengths, alpha):
    """Wrong: operator precedence, log_probs / |Y| * alpha."""
    return log_probs / lengths.to(log_probs.dtype) * alpha


def lns_new_tensor(log_probs, lengths, alpha):
    """Wrong: rebuilds the scores with torch.tensor from Python floats (no gradient, float32)."""
    flat_lp = log_probs.reshape(-1).tolist()
    flat_n = torch.broadcast_to(lengths, log_probs.shape).reshape(-1).tolist()
    out = [lp / (n**alpha) for lp, n in zip(flat_lp, flat_n)]
    return torch.tensor(out).reshape(log_probs.shape)


def lns_integer_power(log_probs, lengths, alpha):
    """Wrong: the power is taken on the integer lengths with int(alpha), truncating 0.6 to 0."""
    return log_probs / lengths ** int(alpha)


def lns_gnmt(log_probs, lengths, alpha):
    """Wrong: GNMT's ((5 + |Y|) / 6) ** alpha, the form the paper used."""
    return log_probs / ((5 + lengths.to(log_probs.dtype)) / 6) ** alpha


WRONG = {
    "DecoderBlock": [
        DecoderBlockNoCrossResidual,
        DecoderBlockResidualFromNormed,
        DecoderBlockQueriesFromInput,
        DecoderBlockNormsReversed,
        DecoderBlockMasksSwapped,
        DecoderBlockPreNormFinalNorm,
    ],
    "greedy_decode": [
        greedy_no_early_stop,
        greedy_eos_replaced_by_pad,
        greedy_drops_bos,
        greedy_one_step_short,
        greedy_stop_on_any,
    ],
    "label_smoothed_loss": [
        ls_gather_unclamped,
        ls_mean_over_classes,
        ls_smoothing_on_probs,
        ls_ignore_by_zero_only,
        ls_wrong_classes_only,
    ],
    "length_normalised_score": [
        lns_plus_bos,
        lns_precedence,
        lns_new_tensor,
        lns_integer_power,
        lns_gnmt,
    ],
}
RIGHT = {
    "DecoderBlock": DecoderBlockRight,
    "greedy_decode": greedy_right,
    "label_smoothed_loss": ls_right,
    "length_normalised_score": lns_right,
}
RIGHT2 = {
    "DecoderBlock": DecoderBlockRight2,
    "greedy_decode": greedy_right2,
    "label_smoothed_loss": ls_right2,
    "length_normalised_score": lns_right2,
}
