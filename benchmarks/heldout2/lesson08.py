"""Lesson 08 (GPT): held-out wrong and right implementations, from the exercise text."""

import math

import torch
import torch.nn.functional as F


class _Answer(str):
    """A practice answer: a plain string that carries a name and a docstring for the benchmark."""


def _answer(letter, name, doc):
    a = _Answer(letter)
    a.__name__ = name
    a.__doc__ = doc
    return a


# ---------------------------------------------------------------- shift_targets


def shift_right(idx, pad_id=None):
    """Right: full_like(-100), slice assignment, then padding."""
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


def shift_in_place(idx, pad_id=None):
    """Wrong: targets = idx (no copy), so the shift overwrites the caller's idx."""
    targets = idx
    targets[:, :-1] = idx[:, 1:].clone()
    targets[:, -1] = -100
    if pad_id is not None:
        targets[targets == pad_id] = -100
    return targets


def shift_pad_falsy(idx, pad_id=None):
    """Wrong: `if pad_id:` skips the padding rule when pad_id is 0."""
    targets = torch.full_like(idx, -100)
    targets[:, :-1] = idx[:, 1:]
    if pad_id:
        targets[targets == pad_id] = -100
    return targets


def shift_pad_of_input(idx, pad_id=None):
    """Wrong: -100 where the INPUT idx is padding, not where the target is."""
    targets = torch.full_like(idx, -100)
    targets[:, :-1] = idx[:, 1:]
    if pad_id is not None:
        targets[idx == pad_id] = -100
    return targets


def shift_last_is_pad(idx, pad_id=None):
    """Wrong: the last column is filled with pad_id (or 0), not -100."""
    fill = 0 if pad_id is None else pad_id
    targets = torch.full_like(idx, fill)
    targets[:, :-1] = idx[:, 1:]
    if pad_id is not None:
        targets[targets == pad_id] = -100
    return targets


def shift_roll(idx, pad_id=None):
    """Wrong: torch.roll(idx, -1, dims=1): the first token wraps to the last target."""
    targets = torch.roll(idx, -1, dims=1)
    if pad_id is not None:
        targets = targets.masked_fill(targets == pad_id, -100)
    return targets


# ---------------------------------------------------------------- lm_loss


def lm_right(logits, targets):
    """Right: clamp, gather, mask, divide by the count."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets != -100
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() / keep.sum()


def lm_right2(logits, targets):
    """Right: select the counted positions with a boolean index, then advanced indexing."""
    V = logits.shape[-1]
    z = logits.reshape(-1, V)
    y = targets.reshape(-1)
    sel = y != -100
    z, y = z[sel], y[sel]
    logp = z - torch.logsumexp(z, dim=-1, keepdim=True)
    return -logp[torch.arange(y.numel(), device=y.device), y].mean()


def lm_unmasked_gather(logits, targets):
    """Wrong: clamps -100 to 0 but never masks: skipped positions score token 0."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets != -100
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -picked.sum() / keep.sum()


def lm_wrong_axis(logits, targets):
    """Wrong: log_softmax over dim=1 (the positions), not the vocabulary."""
    logp = torch.log_softmax(logits, dim=1)
    keep = targets != -100
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() / keep.sum()


def lm_per_sequence(logits, targets):
    """Wrong: the mean of each sequence's mean (short sequences weigh more)."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = (targets != -100).to(logp.dtype)
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    per_seq = -(picked * keep).sum(1) / keep.sum(1)
    return per_seq.mean()


def lm_log_of_softmax(logits, targets):
    """Wrong: torch.log(torch.softmax(...)), which underflows for large logits."""
    logp = torch.log(torch.softmax(logits, dim=-1))
    keep = targets != -100
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() / keep.sum()


def lm_mean_over_all(logits, targets):
    """Wrong: masks the skipped positions but divides by B * L."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets != -100
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).mean()


# ---------------------------------------------------------------- next_token_probs


def ntp_right(logits, temperature=1.0, top_k=None, top_p=None):
    """Right: sort-based top-p with a threshold on the sorted logits (ties kept)."""
    if temperature == 0:
        out = torch.zeros_like(logits)
        return out.scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    z = logits / temperature
    V = z.shape[-1]
    if top_k is not None and top_k < V:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        probs = torch.softmax(z, dim=-1)
        sp, order = torch.sort(probs, dim=-1, descending=True)
        keep_sorted = (torch.cumsum(sp, -1) - sp) < top_p
        sorted_z = torch.gather(z, -1, order)
        smallest = torch.where(keep_sorted, sorted_z, torch.full_like(sorted_z, float("inf")))
        threshold = smallest.min(dim=-1, keepdim=True).values
        z = z.masked_fill(z < threshold, float("-inf"))
    return torch.softmax(z, dim=-1)


def ntp_right2(logits, temperature=1.0, top_k=None, top_p=None):
    """Right: a row-by-row loop with Python-level counting of the nucleus."""
    B, V = logits.shape
    rows = []
    for b in range(B):
        z = logits[b]
        if temperature == 0:
            row = torch.zeros_like(z)
            row[z.argmax()] = 1
            rows.append(row)
            continue
        z = z / temperature
        if top_k is not None and top_k < V:
            vals, _ = torch.sort(z, descending=True)
            z = torch.where(z >= vals[top_k - 1], z, torch.full_like(z, -math.inf))
        if top_p is not None and top_p < 1:
            p = torch.softmax(z, dim=0)
            sp, _ = torch.sort(p, descending=True)
            total = 0.0
            n_keep = 0
            for value in sp.tolist():
                if total < top_p:
                    n_keep += 1
                    total += value
                else:
                    break
            zs, _ = torch.sort(z, descending=True)
            z = torch.where(z >= zs[n_keep - 1], z, torch.full_like(z, -math.inf))
        rows.append(torch.softmax(z, dim=0))
    return torch.stack(rows)


def ntp_topk_too_big(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: torch.topk(z, top_k) without guarding k >= V (crashes there), top-p right."""
    if temperature == 0:
        return torch.zeros_like(logits).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    z = logits / temperature
    if top_k is not None:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        probs = torch.softmax(z, dim=-1)
        sp, order = torch.sort(probs, dim=-1, descending=True)
        keep_sorted = (torch.cumsum(sp, -1) - sp) < top_p
        sorted_z = torch.gather(z, -1, order)
        smallest = torch.where(keep_sorted, sorted_z, torch.full_like(sorted_z, float("inf")))
        z = z.masked_fill(z < smallest.min(-1, keepdim=True).values, float("-inf"))
    return torch.softmax(z, dim=-1)


def ntp_greedy_one_hot_long(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: temperature 0 returns F.one_hot(...) (dtype long, not the logits' dtype)."""
    if temperature == 0:
        return F.one_hot(logits.argmax(-1), logits.shape[-1])
    return ntp_right(logits, temperature, top_k, top_p)


def ntp_hf_scatter_ties(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: the top-p mask is scattered back from the sorted order, so ties at the cut are dropped."""
    if temperature == 0:
        return torch.zeros_like(logits).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    z = logits / temperature
    V = z.shape[-1]
    if top_k is not None and top_k < V:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        sorted_z, order = torch.sort(z, dim=-1, descending=True)
        sp = torch.softmax(sorted_z, dim=-1)
        remove_sorted = (torch.cumsum(sp, -1) - sp) >= top_p
        remove = remove_sorted.scatter(-1, order, remove_sorted)
        z = z.masked_fill(remove, float("-inf"))
    return torch.softmax(z, dim=-1)


def ntp_cumsum_le(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: keeps the tokens with cumsum <= p, dropping the one that crosses p."""
    if temperature == 0:
        return torch.zeros_like(logits).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    z = logits / temperature
    V = z.shape[-1]
    if top_k is not None and top_k < V:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        sorted_z, order = torch.sort(z, dim=-1, descending=True)
        sp = torch.softmax(sorted_z, dim=-1)
        keep_sorted = torch.cumsum(sp, -1) <= top_p
        keep_sorted[..., 0] = True
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        z = z.masked_fill(~keep, float("-inf"))
    return torch.softmax(z, dim=-1)


def ntp_temperature_last(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: filters at T = 1 and divides by T only before the final softmax."""
    if temperature == 0:
        return torch.zeros_like(logits).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    z = ntp_right(logits, 1.0, top_k, top_p)
    z = torch.where(z > 0, logits, torch.full_like(logits, float("-inf")))
    return torch.softmax(z / temperature, dim=-1)


def ntp_topk_indices_exact_k(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: top-k keeps exactly the k indices of torch.topk (ties at the k-th lost), on probs."""
    if temperature == 0:
        return torch.zeros_like(logits).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    z = logits / temperature
    V = z.shape[-1]
    p = torch.softmax(z, dim=-1)
    if top_k is not None and top_k < V:
        idx = torch.topk(p, top_k, dim=-1).indices
        p = torch.zeros_like(p).scatter(-1, idx, p.gather(-1, idx))
        p = p / p.sum(-1, keepdim=True)
    if top_p is not None and top_p < 1:
        sp, order = torch.sort(p, dim=-1, descending=True)
        keep_sorted = (torch.cumsum(sp, -1) - sp) < top_p
        thr = torch.where(keep_sorted, sp, torch.full_like(sp, 2.0)).min(-1, keepdim=True).values
        p = torch.where(p >= thr, p, torch.zeros_like(p))
        p = p / p.sum(-1, keepdim=True)
    return p


# ---------------------------------------------------------------- sample_next


def sample_right(logits, temperature=1.0, top_k=None, generator=None):
    """Right: multinomial on the probabilities, squeeze the sample axis."""
    probs = ntp_right(logits, temperature, top_k)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)


def sample_right2(logits, temperature=1.0, top_k=None, generator=None):
    """Right: keyword arguments, index [:, 0] instead of squeeze."""
    probs = ntp_right2(logits, temperature=temperature, top_k=top_k)
    draws = torch.multinomial(probs, 1, replacement=True, generator=generator)
    return draws[:, 0].long()


def sample_args_swapped(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: next_token_probs(logits, top_k, temperature): the two knobs swapped positionally."""
    probs = ntp_right(logits, top_k, temperature)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def sample_inverse_cdf_off_by_one(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: a hand-written inverse-CDF sampler whose searchsorted index is one too high."""
    probs = ntp_right(logits, temperature, top_k)
    cdf = torch.cumsum(probs, dim=-1)
    u = torch.rand(probs.shape[0], 1, generator=generator, dtype=probs.dtype)
    idx = torch.searchsorted(cdf, u).squeeze(-1) + 1
    return idx.clamp(max=probs.shape[-1] - 1).long()


def sample_no_squeeze(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: returns multinomial's (B, 1) as it is."""
    probs = ntp_right(logits, temperature, top_k)
    return torch.multinomial(probs, num_samples=1, generator=generator)


def sample_global_rng(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: forgets to pass generator= to torch.multinomial."""
    probs = ntp_right(logits, temperature, top_k)
    return torch.multinomial(probs, num_samples=1).squeeze(-1)


def sample_softmax_logits(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: samples from softmax(logits) directly, skipping next_token_probs' knobs."""
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


# ---------------------------------------------------------------- KVCache


class KVCacheRight:
    """Right: two tensors, None while empty, torch.cat on dim -2."""

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


class KVCacheRight2:
    """Right: lists of chunks, concatenated on every append, a running position counter."""

    def __init__(self):
        self.keys, self.values, self.n = [], [], 0

    def __len__(self):
        return self.n

    def append(self, k, v):
        self.keys.append(k)
        self.values.append(v)
        self.n += k.size(2)
        return torch.cat(self.keys, dim=2), torch.cat(self.values, dim=2)


class KVCacheSharedClassList:
    """Wrong: the chunk lists are class attributes, so every layer's cache shares them."""

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


class KVCacheLenCountsAppends:
    """Wrong: len() is the number of append calls, not of positions."""

    def __init__(self):
        self.keys, self.values = [], []

    def __len__(self):
        return len(self.keys)

    def append(self, k, v):
        self.keys.append(k)
        self.values.append(v)
        return torch.cat(self.keys, dim=-2), torch.cat(self.values, dim=-2)


class KVCacheCatDim1:
    """Wrong: concatenates along dim 1 (the heads), reading the shape as (B, L, h, d)."""

    def __init__(self):
        self.k = None
        self.v = None

    def __len__(self):
        return 0 if self.k is None else self.k.shape[1]

    def append(self, k, v):
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([self.k, k], dim=1)
            self.v = torch.cat([self.v, v], dim=1)
        return self.k, self.v


class KVCacheReturnsNew:
    """Wrong: stores everything but returns only the new k, v."""

    def __init__(self):
        self.k = None
        self.v = None

    def __len__(self):
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k, v):
        self.k = k if self.k is None else torch.cat([self.k, k], dim=-2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=-2)
        return k, v


class KVCacheValuesFromKeys:
    """Wrong: copy-paste slip, the values are cached as the keys."""

    def __init__(self):
        self.k = None
        self.v = None

    def __len__(self):
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k, v):
        self.k = k if self.k is None else torch.cat([self.k, k], dim=-2)
        self.v = v if self.v is None else torch.cat([self.v, k], dim=-2)
        return self.k, self.v


# ---------------------------------------------------------------- training_flops


def flops_right(model, batch_size, block_size, n_steps):
    """Right: named_parameters, skipping the two embedding tables by name."""
    N = sum(
        p.numel()
        for name, p in model.named_parameters()
        if not (name.startswith("wte.") or name.startswith("wpe."))
    )
    return 6 * N * batch_size * block_size * n_steps


def flops_right2(model, batch_size, block_size, n_steps):
    """Right: all parameters minus the embedding modules' weights."""
    total = sum(p.numel() for p in model.parameters())
    emb = model.wte.weight.numel() + model.wpe.weight.numel()
    D = batch_size * block_size * n_steps
    return 6.0 * (total - emb) * D


def flops_len_not_numel(model, batch_size, block_size, n_steps):
    """Wrong: len(p) (the first dimension) instead of p.numel()."""
    N = sum(
        len(p) for name, p in model.named_parameters() if "wte" not in name and "wpe" not in name
    )
    return 6 * N * batch_size * block_size * n_steps


def flops_state_dict(model, batch_size, block_size, n_steps):
    """Wrong: counts state_dict() entries, so the tied lm_head.weight is counted once more."""
    N = sum(
        t.numel()
        for name, t in model.state_dict().items()
        if "wte" not in name and "wpe" not in name
    )
    return 6 * N * batch_size * block_size * n_steps


def flops_matrices_only(model, batch_size, block_size, n_steps):
    """Wrong: N counts only the 2-D weight matrices (biases and LayerNorms left out)."""
    N = sum(
        p.numel()
        for name, p in model.named_parameters()
        if p.dim() == 2 and "wte" not in name and "wpe" not in name
    )
    return 6 * N * batch_size * block_size * n_steps


def flops_no_steps(model, batch_size, block_size, n_steps):
    """Wrong: D is the tokens of one step (n_steps forgotten)."""
    N = sum(
        p.numel() for name, p in model.named_parameters() if "wte" not in name and "wpe" not in name
    )
    return 6 * N * batch_size * block_size


def flops_only_wte(model, batch_size, block_size, n_steps):
    """Wrong: leaves out only the token table (the text's 'embeddings' read as wte alone)."""
    N = sum(p.numel() for name, p in model.named_parameters() if "wte" not in name)
    return 6 * N * batch_size * block_size * n_steps


# ---------------------------------------------------------------- practice_transformers

PRACTICE_RIGHT = _answer("C", "practice_c", "Right: (C), as a plain upper-case string.")
PRACTICE_RIGHT2 = _answer("C".strip().upper(), "practice_c2", "Right: (C), built by normalising.")
PRACTICE_WRONG = [
    _answer("A", "practice_a", "Wrong: (A), attention dearer than the FFN at d=512, L=128."),
    _answer("B", "practice_b", "Wrong: (B), more heads cost more computation."),
    _answer("D", "practice_d", "Wrong: (D), Transformers scale easily to long sequences."),
]


WRONG = {
    "shift_targets": [
        shift_in_place,
        shift_pad_falsy,
        shift_pad_of_input,
        shift_last_is_pad,
        shift_roll,
    ],
    "lm_loss": [
        lm_unmasked_gather,
        lm_wrong_axis,
        lm_per_sequence,
        lm_log_of_softmax,
        lm_mean_over_all,
    ],
    "next_token_probs": [
        ntp_topk_too_big,
        ntp_greedy_one_hot_long,
        ntp_hf_scatter_ties,
        ntp_cumsum_le,
        ntp_temperature_last,
        ntp_topk_indices_exact_k,
    ],
    "sample_next": [
        sample_args_swapped,
        sample_inverse_cdf_off_by_one,
        sample_no_squeeze,
        sample_global_rng,
        sample_softmax_logits,
    ],
    "KVCache": [
        KVCacheSharedClassList,
        KVCacheLenCountsAppends,
        KVCacheCatDim1,
        KVCacheReturnsNew,
        KVCacheValuesFromKeys,
    ],
    "training_flops": [
        flops_len_not_numel,
        flops_state_dict,
        flops_matrices_only,
        flops_no_steps,
        flops_only_wte,
    ],
    "practice_transformers": PRACTICE_WRONG,
}
RIGHT = {
    "shift_targets": shift_right,
    "lm_loss": lm_right,
    "next_token_probs": ntp_right,
    "sample_next": sample_right,
    "KVCache": KVCacheRight,
    "training_flops": flops_right,
    "practice_transformers": PRACTICE_RIGHT,
}
RIGHT2 = {
    "shift_targets": shift_right2,
    "lm_loss": lm_right2,
    "next_token_probs": ntp_right2,
    "sample_next": sample_right2,
    "KVCache": KVCacheRight2,
    "training_flops": flops_right2,
    "practice_transformers": PRACTICE_RIGHT2,
}
