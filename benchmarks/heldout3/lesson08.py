"""Lesson 08 (GPT): held-out wrong and right implementations, from the exercise text."""

import torch
import torch.nn.functional as F


def _answer(value, name, doc):
    """A practice answer (a str) that carries a name and a one-line docstring."""
    cls = type(name, (str,), {"__doc__": doc})
    obj = cls(value)
    obj.__name__ = name
    return obj


# ---------------------------------------------------------------- shift_targets


def shift_right(idx, pad_id=None):
    """Right: full_like, slice assignment, then the padding."""
    targets = torch.full_like(idx, -100)
    targets[:, :-1] = idx[:, 1:]
    if pad_id is not None:
        targets[targets == pad_id] = -100
    return targets


def shift_right2(idx, pad_id=None):
    """Right: torch.cat of the shifted ids and a -100 column, torch.where for padding."""
    last = torch.full((idx.shape[0], 1), -100, dtype=idx.dtype, device=idx.device)
    targets = torch.cat([idx[:, 1:], last], dim=1)
    if pad_id is not None:
        targets = torch.where(targets == pad_id, torch.full_like(targets, -100), targets)
    return targets


def shift_pad_checked_on_idx(idx, pad_id=None):
    """Looks for padding in idx (the inputs) rather than in the shifted targets."""
    targets = torch.full_like(idx, -100)
    targets[:, :-1] = idx[:, 1:]
    if pad_id is not None:
        targets[idx == pad_id] = -100
    return targets


def shift_if_pad_id(idx, pad_id=None):
    """Tests `if pad_id:`, so pad_id = 0 is treated as no padding."""
    targets = torch.full_like(idx, -100)
    targets[:, :-1] = idx[:, 1:]
    if pad_id:
        targets[targets == pad_id] = -100
    return targets


def shift_in_place(idx, pad_id=None):
    """Shifts idx itself in place and returns it."""
    idx[:, :-1] = idx[:, 1:].clone()
    idx[:, -1] = -100
    if pad_id is not None:
        idx[idx == pad_id] = -100
    return idx


def shift_default_dtype(idx, pad_id=None):
    """Builds the targets with torch.full (int64 always), not in idx's dtype."""
    targets = torch.full(idx.shape, -100, device=idx.device)
    targets[:, :-1] = idx[:, 1:]
    if pad_id is not None:
        targets[targets == pad_id] = -100
    return targets


def shift_last_is_pad(idx, pad_id=None):
    """Fills the last position with pad_id (or 0) instead of -100."""
    targets = torch.empty_like(idx)
    targets[:, :-1] = idx[:, 1:]
    targets[:, -1] = pad_id if pad_id is not None else 0
    if pad_id is not None:
        targets[targets == pad_id] = -100
    return targets


# ---------------------------------------------------------------- lm_loss


def lm_right(logits, targets):
    """Right: clamp, gather, mask, sum / count."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets != -100
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() / keep.sum()


def lm_right2(logits, targets):
    """Right: select the counted positions first, then index with arange."""
    V = logits.shape[-1]
    flat_t = targets.reshape(-1)
    keep = flat_t != -100
    rows = torch.log_softmax(logits.reshape(-1, V)[keep], dim=-1)
    return -rows[torch.arange(rows.shape[0]), flat_t[keep]].mean()


def lm_mask_after_clamp(logits, targets):
    """Clamps the targets, then builds the mask from the clamped ones (every position counts)."""
    t = targets.clamp(min=0)
    logp = torch.log_softmax(logits, dim=-1)
    keep = t != -100
    picked = logp.gather(-1, t.unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() / keep.sum()


def lm_log_of_softmax(logits, targets):
    """torch.log(torch.softmax(...)) instead of log_softmax."""
    logp = torch.log(torch.softmax(logits, dim=-1))
    keep = targets != -100
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() / keep.sum()


def lm_positive_ids_only(logits, targets):
    """Counts the positions with targets > 0, which also drops every target of id 0."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets > 0
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() / keep.sum()


def lm_softmax_wrong_axis(logits, targets):
    """log_softmax over dim=1, the sequence axis, instead of the vocabulary."""
    logp = torch.log_softmax(logits, dim=1)
    keep = targets != -100
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() / keep.sum()


def lm_in_place_targets(logits, targets):
    """Replaces -100 by 0 in the caller's targets tensor (in place) before gathering."""
    keep = targets != -100
    targets[~keep] = 0
    logp = torch.log_softmax(logits, dim=-1)
    picked = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() / keep.sum()


# ---------------------------------------------------------------- next_token_probs


def ntp_right(logits, temperature=1.0, top_k=None, top_p=None):
    """Right: vectorised, thresholds by value for top-k and top-p."""
    V = logits.shape[-1]
    if temperature == 0:
        return F.one_hot(logits.argmax(-1), V).to(logits.dtype)
    z = logits / temperature
    if top_k is not None and top_k < V:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        probs = torch.softmax(z, dim=-1)
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        keep = (torch.cumsum(sorted_p, dim=-1) - sorted_p) < top_p
        sorted_z = z.gather(-1, order)
        smallest = sorted_z.masked_fill(~keep, float("inf")).min(-1, keepdim=True).values
        z = z.masked_fill(z < smallest, float("-inf"))
    return torch.softmax(z, dim=-1)


def ntp_right2(logits, temperature=1.0, top_k=None, top_p=None):
    """Right: a loop over the rows, counting how many sorted tokens are kept."""
    out = torch.empty_like(logits)
    for b in range(logits.shape[0]):
        row = logits[b]
        if temperature == 0:
            out[b] = torch.zeros_like(row)
            out[b, row.argmax()] = 1.0
            continue
        z = row / temperature
        if top_k is not None and top_k < z.numel():
            values, _ = torch.sort(z, descending=True)
            z = torch.where(z >= values[top_k - 1], z, torch.full_like(z, float("-inf")))
        if top_p is not None and top_p < 1:
            values, _ = torch.sort(z, descending=True)
            p = torch.softmax(values, dim=0)
            before = torch.cumsum(p, 0) - p
            n_keep = int((before < top_p).sum())
            z = torch.where(z >= values[n_keep - 1], z, torch.full_like(z, float("-inf")))
        out[b] = torch.softmax(z, dim=0)
    return out


def ntp_cum_at_most_p(logits, temperature=1.0, top_k=None, top_p=None):
    """Keeps the sorted tokens whose running sum is <= p (always at least the top one)."""
    V = logits.shape[-1]
    if temperature == 0:
        return F.one_hot(logits.argmax(-1), V).to(logits.dtype)
    z = logits / temperature
    if top_k is not None and top_k < V:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        sorted_p, order = torch.sort(torch.softmax(z, -1), dim=-1, descending=True)
        keep_sorted = torch.cumsum(sorted_p, -1) <= top_p
        keep_sorted[..., 0] = True
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        z = z.masked_fill(~keep, float("-inf"))
    return torch.softmax(z, dim=-1)


def ntp_tiny_temperature(logits, temperature=1.0, top_k=None, top_p=None):
    """Handles T = 0 by dividing by max(T, 1e-10) instead of returning a one-hot row."""
    V = logits.shape[-1]
    z = logits / max(temperature, 1e-10)
    if top_k is not None and top_k < V:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        probs = torch.softmax(z, dim=-1)
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        keep = (torch.cumsum(sorted_p, dim=-1) - sorted_p) < top_p
        smallest = z.gather(-1, order).masked_fill(~keep, float("inf")).min(-1, True).values
        z = z.masked_fill(z < smallest, float("-inf"))
    return torch.softmax(z, dim=-1)


def ntp_topk_no_guard(logits, temperature=1.0, top_k=None, top_p=None):
    """Calls torch.topk(z, top_k) whenever top_k is given, even when top_k > V."""
    V = logits.shape[-1]
    if temperature == 0:
        return F.one_hot(logits.argmax(-1), V).to(logits.dtype)
    z = logits / temperature
    if top_k is not None:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        probs = torch.softmax(z, dim=-1)
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        keep = (torch.cumsum(sorted_p, dim=-1) - sorted_p) < top_p
        smallest = z.gather(-1, order).masked_fill(~keep, float("inf")).min(-1, True).values
        z = z.masked_fill(z < smallest, float("-inf"))
    return torch.softmax(z, dim=-1)


def ntp_greedy_float32(logits, temperature=1.0, top_k=None, top_p=None):
    """At T = 0 returns F.one_hot(...).float(), float32 whatever the logits' dtype."""
    V = logits.shape[-1]
    if temperature == 0:
        return F.one_hot(logits.argmax(-1), V).float()
    z = logits / temperature
    if top_k is not None and top_k < V:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        probs = torch.softmax(z, dim=-1)
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        keep = (torch.cumsum(sorted_p, dim=-1) - sorted_p) < top_p
        smallest = z.gather(-1, order).masked_fill(~keep, float("inf")).min(-1, True).values
        z = z.masked_fill(z < smallest, float("-inf"))
    return torch.softmax(z, dim=-1)


def ntp_in_place_divide(logits, temperature=1.0, top_k=None, top_p=None):
    """Divides the caller's logits in place (logits /= T) and masks them in place."""
    V = logits.shape[-1]
    if temperature == 0:
        return F.one_hot(logits.argmax(-1), V).to(logits.dtype)
    z = logits
    with torch.no_grad():
        z /= temperature
        if top_k is not None and top_k < V:
            kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
            z[z < kth] = float("-inf")
    if top_p is not None and top_p < 1:
        probs = torch.softmax(z, dim=-1)
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        keep = (torch.cumsum(sorted_p, dim=-1) - sorted_p) < top_p
        smallest = z.gather(-1, order).masked_fill(~keep, float("inf")).min(-1, True).values
        z = z.masked_fill(z < smallest, float("-inf"))
    return torch.softmax(z, dim=-1)


def ntp_nucleus_before_topk_probs(logits, temperature=1.0, top_k=None, top_p=None):
    """Takes the nucleus from softmax(logits / T) before top-k, then intersects the two masks."""
    V = logits.shape[-1]
    if temperature == 0:
        return F.one_hot(logits.argmax(-1), V).to(logits.dtype)
    z = logits / temperature
    keep = torch.ones_like(z, dtype=torch.bool)
    if top_k is not None and top_k < V:
        keep &= z >= torch.topk(z, top_k, dim=-1).values[..., -1:]
    if top_p is not None and top_p < 1:
        probs = torch.softmax(z, dim=-1)
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        ks = (torch.cumsum(sorted_p, dim=-1) - sorted_p) < top_p
        smallest = z.gather(-1, order).masked_fill(~ks, float("inf")).min(-1, True).values
        keep &= z >= smallest
    return torch.softmax(z.masked_fill(~keep, float("-inf")), dim=-1)


# ---------------------------------------------------------------- sample_next


def sample_right(logits, temperature=1.0, top_k=None, generator=None):
    """Right: torch.multinomial with the generator, then [:, 0]."""
    probs = ntp_right(logits, temperature, top_k)
    return torch.multinomial(probs, num_samples=1, generator=generator)[:, 0]


def sample_right2(logits, temperature=1.0, top_k=None, generator=None):
    """Right: inverse-CDF sampling with torch.rand(generator=...) and searchsorted."""
    probs = ntp_right(logits, temperature, top_k)
    cdf = torch.cumsum(probs, dim=-1)
    cdf = cdf / cdf[:, -1:]
    u = torch.rand(probs.shape[0], 1, generator=generator, dtype=probs.dtype)
    u = u.clamp(min=torch.finfo(probs.dtype).tiny)
    return torch.searchsorted(cdf, u).reshape(-1).clamp(max=probs.shape[-1] - 1).long()


def sample_squeeze_all(logits, temperature=1.0, top_k=None, generator=None):
    """.squeeze() with no axis: a batch of one comes back 0-dimensional."""
    probs = ntp_right(logits, temperature, top_k)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze()


def sample_categorical(logits, temperature=1.0, top_k=None, generator=None):
    """torch.distributions.Categorical(probs).sample(), which takes no generator."""
    probs = ntp_right(logits, temperature, top_k)
    return torch.distributions.Categorical(probs=probs).sample()


def sample_reseed_global(logits, temperature=1.0, top_k=None, generator=None):
    """Reseeds the global RNG from generator.initial_seed() and samples without the generator."""
    if generator is not None:
        torch.manual_seed(generator.initial_seed())
    probs = ntp_right(logits, temperature, top_k)
    return torch.multinomial(probs, num_samples=1)[:, 0]


def sample_keeps_column(logits, temperature=1.0, top_k=None, generator=None):
    """Returns multinomial's (B, 1) as it is."""
    probs = ntp_right(logits, temperature, top_k)
    return torch.multinomial(probs, num_samples=1, generator=generator)


def sample_int32(logits, temperature=1.0, top_k=None, generator=None):
    """Casts the ids to int32 (.int()) to save memory."""
    probs = ntp_right(logits, temperature, top_k)
    return torch.multinomial(probs, num_samples=1, generator=generator)[:, 0].int()


# ---------------------------------------------------------------- KVCache


class KVRight:
    """Right: None until the first append, torch.cat along -2."""

    def __init__(self):
        self.k = None
        self.v = None

    def __len__(self):
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k, v):
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([self.k, k], dim=-2)
            self.v = torch.cat([self.v, v], dim=-2)
        return self.k, self.v


class KVRight2:
    """Right: lists of chunks, joined on every append; a position counter."""

    def __init__(self):
        self.keys, self.values, self.n = [], [], 0

    def __len__(self):
        return self.n

    def append(self, k, v):
        self.keys.append(k)
        self.values.append(v)
        self.n += k.shape[2]
        return torch.cat(self.keys, dim=2), torch.cat(self.values, dim=2)


class KVSharedClassList:
    """Class-level lists: every cache instance shares the same stored keys and values."""

    keys = []
    values = []

    def __init__(self):
        pass

    def __len__(self):
        return sum(k.shape[-2] for k in self.keys)

    def append(self, k, v):
        self.keys.append(k)
        self.values.append(v)
        return torch.cat(self.keys, dim=-2), torch.cat(self.values, dim=-2)


class KVCountsAppends:
    """len(cache) counts the calls to append, not the positions."""

    def __init__(self):
        self.k = self.v = None
        self.calls = 0

    def __len__(self):
        return self.calls

    def append(self, k, v):
        self.calls += 1
        self.k = k if self.k is None else torch.cat([self.k, k], dim=-2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=-2)
        return self.k, self.v


class KVCopyPaste:
    """Copy-paste slip: the values are joined with the new keys."""

    def __init__(self):
        self.k = self.v = None

    def __len__(self):
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k, v):
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([self.k, k], dim=-2)
            self.v = torch.cat([self.v, k], dim=-2)
        return self.k, self.v


class KVTensorTruthiness:
    """Tests `if self.k` on a tensor (ambiguous truth value) and starts from empty lists."""

    def __init__(self):
        self.k = []
        self.v = []

    def __len__(self):
        return self.k.shape[-2] if len(self.k) else 0

    def append(self, k, v):
        if self.k:
            self.k = torch.cat([self.k, k], dim=-2)
            self.v = torch.cat([self.v, v], dim=-2)
        else:
            self.k, self.v = k, v
        return self.k, self.v


class KVBatchLength:
    """len(cache) is len(self.k), the batch size."""

    def __init__(self):
        self.k = self.v = None

    def __len__(self):
        return 0 if self.k is None else len(self.k)

    def append(self, k, v):
        self.k = k if self.k is None else torch.cat([self.k, k], dim=-2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=-2)
        return self.k, self.v


# ---------------------------------------------------------------- training_flops


def flops_right(model, batch_size, block_size, n_steps):
    """Right: named_parameters, skipping the wte and wpe tables."""
    n = sum(
        p.numel() for name, p in model.named_parameters() if not name.startswith(("wte.", "wpe."))
    )
    return 6 * n * batch_size * block_size * n_steps


def flops_right2(model, batch_size, block_size, n_steps):
    """Right: all parameters minus the two embedding tables."""
    total = sum(p.numel() for p in model.parameters())
    n = total - model.wte.weight.numel() - model.wpe.weight.numel()
    tokens = n_steps * batch_size * block_size
    return 6.0 * n * tokens


def flops_state_dict(model, batch_size, block_size, n_steps):
    """Counts state_dict() entries not named wte/wpe, so the tied lm_head.weight is counted."""
    n = sum(
        t.numel() for name, t in model.state_dict().items() if not name.startswith(("wte", "wpe"))
    )
    return 6 * n * batch_size * block_size * n_steps


def flops_matrices_only(model, batch_size, block_size, n_steps):
    """Counts only the weight matrices (p.dim() > 1): biases and LayerNorm gains left out."""
    n = sum(
        p.numel()
        for name, p in model.named_parameters()
        if p.dim() > 1 and not name.startswith(("wte", "wpe"))
    )
    return 6 * n * batch_size * block_size * n_steps


def flops_l_minus_one(model, batch_size, block_size, n_steps):
    """D counts the L - 1 predictions per window (the last position has no target)."""
    n = sum(
        p.numel() for name, p in model.named_parameters() if not name.startswith(("wte", "wpe"))
    )
    return 6 * n * batch_size * (block_size - 1) * n_steps


def flops_tensor_count(model, batch_size, block_size, n_steps):
    """N is the number of parameter tensors, not of numbers."""
    n = len([p for name, p in model.named_parameters() if not name.startswith(("wte", "wpe"))])
    return 6 * n * batch_size * block_size * n_steps


def flops_emb_in_name(model, batch_size, block_size, n_steps):
    """Skips the parameters whose name contains 'emb' (none here), so wte and wpe stay in N."""
    n = sum(p.numel() for name, p in model.named_parameters() if "emb" not in name)
    return 6 * n * batch_size * block_size * n_steps


# ---------------------------------------------------------------- practice_transformers

practice_right = _answer("C", "practice_right", "Right: (C), the learned position table.")
practice_right2 = _answer("c", "practice_right2", "Right: (C), written in lower case.")
practice_a = _answer("A", "practice_a", "Thinks attention costs more than the FFN at L = 128.")
practice_b = _answer("B", "practice_b", "Thinks more heads cost more computation.")
practice_d = _answer("D", "practice_d", "Believes Transformers scale easily to long sequences.")


WRONG = {
    "shift_targets": [
        shift_pad_checked_on_idx,
        shift_if_pad_id,
        shift_in_place,
        shift_default_dtype,
        shift_last_is_pad,
    ],
    "lm_loss": [
        lm_mask_after_clamp,
        lm_log_of_softmax,
        lm_positive_ids_only,
        lm_softmax_wrong_axis,
        lm_in_place_targets,
    ],
    "next_token_probs": [
        ntp_cum_at_most_p,
        ntp_tiny_temperature,
        ntp_topk_no_guard,
        ntp_greedy_float32,
        ntp_in_place_divide,
        ntp_nucleus_before_topk_probs,
    ],
    "sample_next": [
        sample_squeeze_all,
        sample_categorical,
        sample_reseed_global,
        sample_keeps_column,
        sample_int32,
    ],
    "KVCache": [
        KVSharedClassList,
        KVCountsAppends,
        KVCopyPaste,
        KVTensorTruthiness,
        KVBatchLength,
    ],
    "training_flops": [
        flops_state_dict,
        flops_matrices_only,
        flops_l_minus_one,
        flops_tensor_count,
        flops_emb_in_name,
    ],
    "practice_transformers": [practice_a, practice_b, practice_d],
}

RIGHT = {
    "shift_targets": shift_right,
    "lm_loss": lm_right,
    "next_token_probs": ntp_right,
    "sample_next": sample_right,
    "KVCache": KVRight,
    "training_flops": flops_right,
    "practice_transformers": practice_right,
}

RIGHT2 = {
    "shift_targets": shift_right2,
    "lm_loss": lm_right2,
    "next_token_probs": ntp_right2,
    "sample_next": sample_right2,
    "KVCache": KVRight2,
    "training_flops": flops_right2,
    "practice_transformers": practice_right2,
}
