"""Lesson 07 (cross-attention): held-out wrong and right implementations, from the exercise text."""

import torch
from torch import nn

from transformer_lab.add_norm import FeedForward, LayerNorm
from transformer_lab.masking import causal_mask
from transformer_lab.multihead import MultiHeadAttention

# ---------------------------------------------------------------- DecoderBlock


class _Given(nn.Module):
    """The constructor the exercise gives."""

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


class DecoderRight(_Given):
    """Right: one branch per norm placement, sublayer by sublayer."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout(self.self_attn(h, mask=self_mask))
            h = self.norm2(x)
            x = x + self.dropout(self.cross_attn(h, context=memory, mask=memory_mask))
            x = x + self.dropout(self.ffn(self.norm3(x)))
            return x
        x = self.norm1(x + self.dropout(self.self_attn(x, mask=self_mask)))
        x = self.norm2(x + self.dropout(self.cross_attn(x, context=memory, mask=memory_mask)))
        return self.norm3(x + self.dropout(self.ffn(x)))


class DecoderRight2(_Given):
    """Right: a loop over (norm, sublayer) pairs with a helper for the residual."""

    def _sub(self, x, norm, fn):
        if self.norm_first:
            return x + self.dropout(fn(norm(x)))
        return norm(x + self.dropout(fn(x)))

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        steps = [
            (self.norm1, lambda h: self.self_attn(h, h, mask=self_mask)),
            (self.norm2, lambda h: self.cross_attn(h, context=memory, mask=memory_mask)),
            (self.norm3, self.ffn),
        ]
        for norm, fn in steps:
            x = self._sub(x, norm, fn)
        return x


class DecoderPreNormMemory(_Given):
    """Pre-norm: the memory is also passed through norm2 before the cross-attention."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=self_mask)
            x = x + self.cross_attn(self.norm2(x), context=self.norm2(memory), mask=memory_mask)
            return x + self.ffn(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, mask=self_mask))
        x = self.norm2(x + self.cross_attn(x, context=memory, mask=memory_mask))
        return self.norm3(x + self.ffn(x))


class DecoderResidualFromInput(_Given):
    """Post-norm: every residual adds the block's original input x, not the running value."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        x0 = x
        if self.norm_first:
            h = x0 + self.self_attn(self.norm1(x0), mask=self_mask)
            h = x0 + self.cross_attn(self.norm2(h), context=memory, mask=memory_mask)
            return x0 + self.ffn(self.norm3(h))
        h = self.norm1(x0 + self.self_attn(x0, mask=self_mask))
        h = self.norm2(x0 + self.cross_attn(h, context=memory, mask=memory_mask))
        return self.norm3(x0 + self.ffn(h))


class DecoderMasksSwapped(_Given):
    """The memory mask goes to self-attention and the self mask to cross-attention."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=memory_mask)
            x = x + self.cross_attn(self.norm2(x), context=memory, mask=self_mask)
            return x + self.ffn(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, mask=memory_mask))
        x = self.norm2(x + self.cross_attn(x, context=memory, mask=self_mask))
        return self.norm3(x + self.ffn(x))


class DecoderOwnCausal(_Given):
    """Builds its own causal mask and ignores self_mask (so a padding part of it is lost)."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        causal = causal_mask(x.shape[1], device=x.device)
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=causal)
            x = x + self.cross_attn(self.norm2(x), context=memory, mask=memory_mask)
            return x + self.ffn(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, mask=causal))
        x = self.norm2(x + self.cross_attn(x, context=memory, mask=memory_mask))
        return self.norm3(x + self.ffn(x))


class DecoderPreNormNoFinalResidual(_Given):
    """Pre-norm: the FFN output replaces x instead of being added to it."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=self_mask)
            x = x + self.cross_attn(self.norm2(x), context=memory, mask=memory_mask)
            return self.ffn(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, mask=self_mask))
        x = self.norm2(x + self.cross_attn(x, context=memory, mask=memory_mask))
        return self.norm3(x + self.ffn(x))


class DecoderNormsOrder(_Given):
    """Uses norm3 for the cross-attention and norm2 for the FFN (norms in the wrong order)."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=self_mask)
            x = x + self.cross_attn(self.norm3(x), context=memory, mask=memory_mask)
            return x + self.ffn(self.norm2(x))
        x = self.norm1(x + self.self_attn(x, mask=self_mask))
        x = self.norm3(x + self.cross_attn(x, context=memory, mask=memory_mask))
        return self.norm2(x + self.ffn(x))


# ---------------------------------------------------------------- greedy_decode


@torch.no_grad()
def greedy_right(model, src, bos_id, eos_id, max_len):
    """Right: a done flag per sequence, torch.where for the padding."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
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
def greedy_right2(model, src, bos_id, eos_id, max_len):
    """Right: a Python list of token lists, per-sequence bookkeeping."""
    memory, src_mask = model.encode(src)
    B = src.shape[0]
    rows = [[bos_id] for _ in range(B)]
    finished = [False] * B
    for _ in range(max_len):
        ys = torch.tensor(rows, dtype=torch.long, device=src.device)
        last = model.decode(ys, memory, src_mask)[:, -1, :]
        best = torch.argmax(last, dim=1).tolist()
        for b in range(B):
            if finished[b]:
                rows[b].append(model.pad_id)
            else:
                rows[b].append(best[b])
                finished[b] = best[b] == eos_id
        if all(finished):
            break
    return torch.tensor(rows, dtype=torch.long, device=src.device)


@torch.no_grad()
def greedy_no_pad_eos_repeat(model, src, bos_id, eos_id, max_len):
    """After EOS the sequence keeps getting eos_id (not pad_id) appended."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, eos_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done = done | (nxt == eos_id)
        if bool(done.all()):
            break
    return ys


@torch.no_grad()
def greedy_drops_bos(model, src, bos_id, eos_id, max_len):
    """Returns only the generated tokens, without the leading BOS column."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done = done | (nxt == eos_id)
        if bool(done.all()):
            break
    return ys[:, 1:]


@torch.no_grad()
def greedy_max_len_minus_one(model, src, bos_id, eos_id, max_len):
    """Counts BOS as one of the max_len tokens: stops after max_len - 1 steps."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    while ys.shape[1] < max_len:
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done = done | (nxt == eos_id)
        if bool(done.all()):
            break
    return ys


@torch.no_grad()
def greedy_pads_the_eos(model, src, bos_id, eos_id, max_len):
    """Marks a sequence done before appending, so its EOS itself is replaced by PAD."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        done = done | (nxt == eos_id)
        nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        if bool(done.all()):
            break
    return ys


@torch.no_grad()
def greedy_no_src_mask(model, src, bos_id, eos_id, max_len):
    """Passes no source mask to model.decode, so padded source positions are attended."""
    memory, _ = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, None)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done = done | (nxt == eos_id)
        if bool(done.all()):
            break
    return ys


# ---------------------------------------------------------------- label_smoothed_loss


def ls_right(logits, targets, eps=0.1, ignore_index=0):
    """Right: the two-term formula with log_softmax, gather and a boolean keep mask."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets != ignore_index
    safe = torch.where(keep, targets, torch.zeros_like(targets))
    nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    uniform = -logp.mean(dim=-1)
    loss = (1 - eps) * nll + eps * uniform
    return loss[keep].sum() / keep.sum()


def ls_right2(logits, targets, eps=0.1, ignore_index=0):
    """Right: the smoothed target distribution q built explicitly, flattened positions."""
    V = logits.shape[-1]
    flat_logits = logits.reshape(-1, V)
    flat_t = targets.reshape(-1)
    keep = flat_t != ignore_index
    flat_logits, flat_t = flat_logits[keep], flat_t[keep]
    q = torch.full_like(flat_logits, eps / V)
    q[torch.arange(len(flat_t)), flat_t] += 1 - eps
    return -(q * torch.log_softmax(flat_logits, -1)).sum(-1).mean()


def ls_clamped_before_keep(logits, targets, eps=0.1, ignore_index=0):
    """Clamps the targets first and masks on the clamped ones: ignore_index -100 is scored as 0."""
    V = logits.shape[-1]
    t = targets.clamp(min=0)
    q = torch.zeros_like(logits).scatter(-1, t.unsqueeze(-1), 1.0)
    q = (1 - eps) * q + eps / V
    loss = -(q * torch.log_softmax(logits, -1)).sum(-1)
    keep = t != ignore_index
    return loss[keep].mean()


def ls_eps_over_v_minus_1_no_true(logits, targets, eps=0.1, ignore_index=0):
    """Target q: 1 - eps on the true class and eps / V on the others (mass does not sum to 1)."""
    V = logits.shape[-1]
    logp = torch.log_softmax(logits, -1)
    keep = targets != ignore_index
    safe = targets.masked_fill(~keep, 0)
    true = logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    others = logp.sum(-1) - true
    loss = -((1 - eps) * true + eps / V * others)
    return loss[keep].mean()


def ls_mean_over_batch_then_positions(logits, targets, eps=0.1, ignore_index=0):
    """Averages per sequence first, then over the sequences (not over counted positions)."""
    logp = torch.log_softmax(logits, -1)
    keep = (targets != ignore_index).float()
    safe = targets.masked_fill(targets == ignore_index, 0)
    nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    loss = ((1 - eps) * nll - eps * logp.mean(-1)) * keep
    if loss.dim() == 1:
        return loss.sum() / keep.sum()
    per_seq = loss.sum(-1) / keep.sum(-1).clamp(min=1)
    return per_seq.mean()


def ls_uniform_over_kept_logits_only(logits, targets, eps=0.1, ignore_index=0):
    """Leaves the ignore_index column out of the uniform part when it is a class id."""
    V = logits.shape[-1]
    logp = torch.log_softmax(logits, -1)
    keep = targets != ignore_index
    safe = targets.masked_fill(~keep, 0)
    nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    if 0 <= ignore_index < V:
        col = torch.ones(V, dtype=torch.bool, device=logits.device)
        col[ignore_index] = False
        smooth = -logp[..., col].sum(-1) / (V - 1)
    else:
        smooth = -logp.mean(-1)
    loss = (1 - eps) * nll + eps * smooth
    return loss[keep].mean()


def ls_log_of_softmax(logits, targets, eps=0.1, ignore_index=0):
    """Takes torch.log(torch.softmax(...)), which is -inf where the probability underflows."""
    logp = torch.log(torch.softmax(logits, -1))
    keep = targets != ignore_index
    safe = targets.masked_fill(~keep, 0)
    nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    loss = (1 - eps) * nll - eps * logp.mean(-1)
    return loss[keep].mean()


def ls_eps_times_mean_of_probs(logits, targets, eps=0.1, ignore_index=0):
    """The smoothing term uses the log of the mean probability, not the mean of the log-probs."""
    logp = torch.log_softmax(logits, -1)
    keep = targets != ignore_index
    safe = targets.masked_fill(~keep, 0)
    nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    smooth = -torch.logsumexp(logp, -1) + torch.log(torch.tensor(float(logits.shape[-1])))
    loss = (1 - eps) * nll + eps * smooth
    return loss[keep].mean()


# ---------------------------------------------------------------- length_normalised_score


def lp_right(log_probs, lengths, alpha):
    """Right: division by a power of the converted lengths."""
    return log_probs / lengths.to(log_probs.dtype) ** alpha


def lp_right2(log_probs, lengths, alpha):
    """Right: in log space, exp(-alpha * log|Y|) times the log-probability."""
    n = torch.as_tensor(lengths).to(log_probs.dtype)
    return log_probs * torch.exp(-alpha * torch.log(n))


def lp_integer_power(log_probs, lengths, alpha):
    """Raises the integer lengths to alpha before converting (int ** float, then cast)."""
    return log_probs / (lengths**alpha).to(log_probs.dtype)


def lp_int_alpha(log_probs, lengths, alpha):
    """Rounds alpha to an int to keep the lengths an integer tensor."""
    return log_probs / lengths.to(log_probs.dtype) ** int(alpha)


def lp_gnmt_default(log_probs, lengths, alpha):
    """Uses Wu et al.'s ((5 + |Y|) / 6) ** alpha, the form the paper used."""
    return log_probs / ((5 + lengths.to(log_probs.dtype)) / 6) ** alpha


def lp_minus_bos(log_probs, lengths, alpha):
    """Counts BOS in the length: divides by (|Y| + 1) ** alpha."""
    return log_probs / (lengths.to(log_probs.dtype) + 1) ** alpha


def lp_float32(log_probs, lengths, alpha):
    """Computes the score in float32 and casts back (float64 inputs lose their precision)."""
    n = lengths.float() ** alpha
    return (log_probs.float() / n).to(log_probs.dtype)


def lp_in_place(log_probs, lengths, alpha):
    """Divides log_probs in place (changes the caller's tensor)."""
    with torch.no_grad():
        log_probs.div_(lengths.to(log_probs.dtype) ** alpha)
    return log_probs


WRONG = {
    "DecoderBlock": [
        DecoderPreNormMemory,
        DecoderResidualFromInput,
        DecoderMasksSwapped,
        DecoderOwnCausal,
        DecoderPreNormNoFinalResidual,
        DecoderNormsOrder,
    ],
    "greedy_decode": [
        greedy_no_pad_eos_repeat,
        greedy_drops_bos,
        greedy_max_len_minus_one,
        greedy_pads_the_eos,
        greedy_no_src_mask,
    ],
    "label_smoothed_loss": [
        ls_clamped_before_keep,
        ls_eps_over_v_minus_1_no_true,
        ls_mean_over_batch_then_positions,
        ls_uniform_over_kept_logits_only,
        ls_log_of_softmax,
        ls_eps_times_mean_of_probs,
    ],
    "length_normalised_score": [
        lp_integer_power,
        lp_int_alpha,
        lp_gnmt_default,
        lp_minus_bos,
        lp_float32,
        lp_in_place,
    ],
}

RIGHT = {
    "DecoderBlock": DecoderRight,
    "greedy_decode": greedy_right,
    "label_smoothed_loss": ls_right,
    "length_normalised_score": lp_right,
}

RIGHT2 = {
    "DecoderBlock": DecoderRight2,
    "greedy_decode": greedy_right2,
    "label_smoothed_loss": ls_right2,
    "length_normalised_score": lp_right2,
}
