"""Lesson 07 (Cross-attention): held-out wrong and right implementations, from the exercise text only."""

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lab.add_norm import FeedForward, LayerNorm
from transformer_lab.multihead import MultiHeadAttention

# ---------------------------------------------------------------- DecoderBlock


class _DecoderBase(nn.Module):
    """The constructor the exercise gives (submodule names kept)."""

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


class DecoderBlockBranches(_DecoderBase):
    """Right: two explicit branches, post-norm and pre-norm, three sublayers each."""

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


class DecoderBlockSublayerLoop(_DecoderBase):
    """Right: a loop over (sublayer, norm) pairs with one residual rule."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        sublayers = [
            (lambda h: self.self_attn(h, mask=self_mask), self.norm1),
            (lambda h: self.cross_attn(h, context=memory, mask=memory_mask), self.norm2),
            (self.ffn, self.norm3),
        ]
        for f, norm in sublayers:
            if self.norm_first:
                x = x + self.dropout(f(norm(x)))
            else:
                x = norm(x + self.dropout(f(x)))
        return x


class DecoderBlockPreNormResidualFromNormed(_DecoderBase):
    """Wrong: pre-norm adds the sublayer to the normalised x, x = LN(x) + f(LN(x))."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = h + self.self_attn(h, mask=self_mask)
            h = self.norm2(x)
            x = h + self.cross_attn(h, context=memory, mask=memory_mask)
            h = self.norm3(x)
            x = h + self.ffn(h)
        else:
            x = self.norm1(x + self.self_attn(x, mask=self_mask))
            x = self.norm2(x + self.cross_attn(x, context=memory, mask=memory_mask))
            x = self.norm3(x + self.ffn(x))
        return x


class DecoderBlockParallelCross(_DecoderBase):
    """Wrong: the cross-attention queries come from the block's input, not the self-attention output."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            a = self.self_attn(h, mask=self_mask)
            c = self.cross_attn(self.norm2(x), context=memory, mask=memory_mask)
            x = x + a + c
            x = x + self.ffn(self.norm3(x))
        else:
            a = self.norm1(x + self.self_attn(x, mask=self_mask))
            c = self.norm2(a + self.cross_attn(x, context=memory, mask=memory_mask))
            x = self.norm3(c + self.ffn(c))
        return x


class DecoderBlockNormsOutOfOrder(_DecoderBase):
    """Wrong: norm3 wraps the self-attention and norm1 the FFN (the norms' order reversed)."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm3(x), mask=self_mask)
            x = x + self.cross_attn(self.norm2(x), context=memory, mask=memory_mask)
            x = x + self.ffn(self.norm1(x))
        else:
            x = self.norm3(x + self.self_attn(x, mask=self_mask))
            x = self.norm2(x + self.cross_attn(x, context=memory, mask=memory_mask))
            x = self.norm1(x + self.ffn(x))
        return x


class DecoderBlockFFNNoResidual(_DecoderBase):
    """Wrong: the feed-forward sublayer has no residual connection."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=self_mask)
            x = x + self.cross_attn(self.norm2(x), context=memory, mask=memory_mask)
            x = self.ffn(self.norm3(x))
        else:
            x = self.norm1(x + self.self_attn(x, mask=self_mask))
            x = self.norm2(x + self.cross_attn(x, context=memory, mask=memory_mask))
            x = self.norm3(self.ffn(x))
        return x


class DecoderBlockNormsMemory(_DecoderBase):
    """Wrong: in pre-norm the memory is also passed through norm2 before the cross-attention."""

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


class DecoderBlockAlwaysPostNorm(_DecoderBase):
    """Wrong: norm_first is ignored; the block is always post-norm."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        x = self.norm1(x + self.self_attn(x, mask=self_mask))
        x = self.norm2(x + self.cross_attn(x, context=memory, mask=memory_mask))
        return self.norm3(x + self.ffn(x))


class DecoderBlockIsCausal(_DecoderBase):
    """Wrong: the self-attention uses is_causal=True and drops the self_mask it was given."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), is_causal=True)
            x = x + self.cross_attn(self.norm2(x), context=memory, mask=memory_mask)
            x = x + self.ffn(self.norm3(x))
        else:
            x = self.norm1(x + self.self_attn(x, is_causal=True))
            x = self.norm2(x + self.cross_attn(x, context=memory, mask=memory_mask))
            x = self.norm3(x + self.ffn(x))
        return x


# ---------------------------------------------------------------- greedy_decode


@torch.no_grad()
def greedy_decode_cat(model, src, bos_id, eos_id, max_len):
    """Right: grow ys with torch.cat, PAD after EOS via torch.where, stop when all are done."""
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
        if bool(done.all()):
            break
    return ys


@torch.no_grad()
def greedy_decode_buffer(model, src, bos_id, eos_id, max_len):
    """Right: a preallocated PAD buffer filled column by column, then trimmed."""
    memory, src_mask = model.encode(src)
    B = src.shape[0]
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
def greedy_decode_eos_becomes_pad(model, src, bos_id, eos_id, max_len):
    """Wrong: marks a sequence done before padding, so its EOS itself is replaced by PAD."""
    memory, src_mask = model.encode(src)
    B = src.shape[0]
    ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        done = done | (nxt == eos_id)
        nxt = nxt.masked_fill(done, model.pad_id)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        if done.all():
            break
    return ys


@torch.no_grad()
def greedy_decode_one_step_short(model, src, bos_id, eos_id, max_len):
    """Wrong: range(1, max_len) runs max_len - 1 steps at most."""
    memory, src_mask = model.encode(src)
    B = src.shape[0]
    ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    for _ in range(1, max_len):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == eos_id
        if done.all():
            break
    return ys


@torch.no_grad()
def greedy_decode_last_token_only(model, src, bos_id, eos_id, max_len):
    """Wrong: the decoder is fed only the newest token, not the whole prefix ys."""
    memory, src_mask = model.encode(src)
    B = src.shape[0]
    ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys[:, -1:], memory, src_mask)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == eos_id
        if done.all():
            break
    return ys


@torch.no_grad()
def greedy_decode_stop_same_step(model, src, bos_id, eos_id, max_len):
    """Wrong: stops only when every sequence emits EOS in the same step (checks nxt, not done)."""
    memory, src_mask = model.encode(src)
    B = src.shape[0]
    ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == eos_id
        if (nxt == eos_id).all():
            break
    return ys


@torch.no_grad()
def greedy_decode_repeat_eos(model, src, bos_id, eos_id, max_len):
    """Wrong: a finished sequence keeps repeating eos_id instead of model.pad_id."""
    memory, src_mask = model.encode(src)
    B = src.shape[0]
    ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, eos_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == eos_id
        if done.all():
            break
    return ys


@torch.no_grad()
def greedy_decode_float_start(model, src, bos_id, eos_id, max_len):
    """Wrong: ys starts as torch.ones(B, 1) * bos_id, a float tensor."""
    memory, src_mask = model.encode(src)
    B = src.shape[0]
    ys = torch.ones(B, 1) * bos_id
    done = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None].to(ys.dtype)], dim=1)
        done |= nxt == eos_id
        if done.all():
            break
    return ys


# ---------------------------------------------------------------- label_smoothed_loss


def label_smoothed_loss_two_terms(logits, targets, eps=0.1, ignore_index=0):
    """Right: (1 - eps) * NLL + eps * mean_k(-log p_k), averaged over the kept positions."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets != ignore_index
    safe = torch.where(keep, targets, torch.zeros_like(targets))
    nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    uniform = -logp.mean(dim=-1)
    loss = (1 - eps) * nll + eps * uniform
    return loss[keep].mean()


def label_smoothed_loss_explicit_q(logits, targets, eps=0.1, ignore_index=0):
    """Right: build q with one_hot, -sum q log p, masked sum divided by the count."""
    V = logits.shape[-1]
    flat_logits = logits.reshape(-1, V)
    flat_t = targets.reshape(-1)
    keep = flat_t != ignore_index
    logp = F.log_softmax(flat_logits[keep], dim=-1)
    q = (1 - eps) * F.one_hot(flat_t[keep], V).to(logp.dtype) + eps / V
    per_pos = -(q * logp).sum(dim=-1)
    return per_pos.sum() / keep.sum()


def label_smoothed_loss_fixed_eps(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: eps hard-coded to the paper's 0.1, the argument ignored."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets != ignore_index
    safe = torch.where(keep, targets, torch.zeros_like(targets))
    nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    loss = 0.9 * nll + 0.1 * (-logp.mean(dim=-1))
    return loss[keep].mean()


def label_smoothed_loss_pad_zero(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: the padding is taken to be id 0 whatever ignore_index is."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets != 0
    nll = -logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    loss = (1 - eps) * nll + eps * (-logp.mean(dim=-1))
    return loss[keep].mean()


def label_smoothed_loss_positive_targets(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: keeps the positions with targets > ignore_index, so class ids below it are dropped."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets > ignore_index
    nll = -logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    loss = (1 - eps) * nll + eps * (-logp.mean(dim=-1))
    return loss[keep].mean()


def label_smoothed_loss_global_uniform(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: the uniform term is logp.mean() over every position and class, padding included."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets != ignore_index
    safe = torch.where(keep, targets, torch.zeros_like(targets))
    nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    return (1 - eps) * nll[keep].mean() + eps * (-logp.mean())


def label_smoothed_loss_dim1(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: log_softmax over dim=1 (right for (N, V), the length axis for (B, L, V))."""
    logp = torch.log_softmax(logits, dim=1)
    keep = targets != ignore_index
    safe = torch.where(keep, targets, torch.zeros_like(targets))
    nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    loss = (1 - eps) * nll + eps * (-logp.mean(dim=-1))
    return loss[keep].mean()


def label_smoothed_loss_true_keeps_one_minus_eps(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: the true class gets exactly 1 - eps and only the others get eps / V."""
    V = logits.shape[-1]
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets != ignore_index
    safe = torch.where(keep, targets, torch.zeros_like(targets))
    onehot = F.one_hot(safe, V).to(logp.dtype)
    q = (1 - eps) * onehot + (eps / V) * (1 - onehot)
    loss = -(q * logp).sum(-1)
    return loss[keep].mean()


def label_smoothed_loss_per_sequence_mean(logits, targets, eps=0.1, ignore_index=0):
    """Wrong: averages each sequence over its kept positions, then averages the sequences."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = (targets != ignore_index).to(logp.dtype)
    safe = torch.where(targets != ignore_index, targets, torch.zeros_like(targets))
    nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    loss = ((1 - eps) * nll + eps * (-logp.mean(dim=-1))) * keep
    if loss.dim() == 1:
        return loss.sum() / keep.sum()
    per_seq = loss.sum(-1) / keep.sum(-1).clamp(min=1)
    return per_seq.mean()


# ---------------------------------------------------------------- length_normalised_score


def length_normalised_score_pow(log_probs, lengths, alpha):
    """Right: log_probs / lengths.to(dtype) ** alpha."""
    return log_probs / lengths.to(log_probs.dtype) ** alpha


def length_normalised_score_exp_log(log_probs, lengths, alpha):
    """Right: multiply by exp(-alpha * log |Y|)."""
    n = lengths.to(log_probs.dtype)
    return log_probs * torch.exp(-alpha * torch.log(n))


def length_normalised_score_counts_bos(log_probs, lengths, alpha):
    """Wrong: adds 1 to |Y| to count BOS as well."""
    return log_probs / (lengths.to(log_probs.dtype) + 1) ** alpha


def length_normalised_score_float32(log_probs, lengths, alpha):
    """Wrong: casts everything with .float(), so float64 inputs come back as float32."""
    return log_probs.float() / lengths.float() ** alpha


def length_normalised_score_item_loop(log_probs, lengths, alpha):
    """Wrong: a Python loop over .item() values builds a new tensor, cutting the gradient."""
    lengths = torch.broadcast_to(lengths, log_probs.shape)
    values = [
        lp.item() / float(n.item()) ** alpha
        for lp, n in zip(log_probs.reshape(-1), lengths.reshape(-1))
    ]
    return torch.tensor(values, dtype=log_probs.dtype).reshape(log_probs.shape)


def length_normalised_score_negated(log_probs, lengths, alpha):
    """Wrong: returns a positive cost, -log p / |Y|^alpha."""
    return -log_probs / lengths.to(log_probs.dtype) ** alpha


def length_normalised_score_inplace(log_probs, lengths, alpha):
    """Wrong: divides log_probs in place and returns it."""
    log_probs.div_(lengths.to(log_probs.dtype) ** alpha)
    return log_probs


def length_normalised_score_root(log_probs, lengths, alpha):
    """Wrong: the alpha-th root of |Y|, lengths ** (1 / alpha)."""
    return log_probs / lengths.to(log_probs.dtype) ** (1.0 / alpha)


WRONG = {
    "DecoderBlock": [
        DecoderBlockPreNormResidualFromNormed,
        DecoderBlockParallelCross,
        DecoderBlockNormsOutOfOrder,
        DecoderBlockFFNNoResidual,
        DecoderBlockNormsMemory,
        DecoderBlockAlwaysPostNorm,
        DecoderBlockIsCausal,
    ],
    "greedy_decode": [
        greedy_decode_eos_becomes_pad,
        greedy_decode_one_step_short,
        greedy_decode_last_token_only,
        greedy_decode_stop_same_step,
        greedy_decode_repeat_eos,
        greedy_decode_float_start,
    ],
    "label_smoothed_loss": [
        label_smoothed_loss_fixed_eps,
        label_smoothed_loss_pad_zero,
        label_smoothed_loss_positive_targets,
        label_smoothed_loss_global_uniform,
        label_smoothed_loss_dim1,
        label_smoothed_loss_true_keeps_one_minus_eps,
        label_smoothed_loss_per_sequence_mean,
    ],
    "length_normalised_score": [
        length_normalised_score_counts_bos,
        length_normalised_score_float32,
        length_normalised_score_item_loop,
        length_normalised_score_negated,
        length_normalised_score_inplace,
        length_normalised_score_root,
    ],
}

RIGHT = {
    "DecoderBlock": DecoderBlockBranches,
    "greedy_decode": greedy_decode_cat,
    "label_smoothed_loss": label_smoothed_loss_two_terms,
    "length_normalised_score": length_normalised_score_pow,
}

RIGHT2 = {
    "DecoderBlock": DecoderBlockSublayerLoop,
    "greedy_decode": greedy_decode_buffer,
    "label_smoothed_loss": label_smoothed_loss_explicit_q,
    "length_normalised_score": length_normalised_score_exp_log,
}
