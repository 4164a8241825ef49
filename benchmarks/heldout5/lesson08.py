"""Lesson 08 (GPT): held-out wrong and right implementations, from the exercise text only."""

import torch
import torch.nn.functional as F

NEG_INF = float("-inf")

# ---------------------------------------------------------------- shift_targets


def shift_targets_right(idx, pad_id=None):
    """Right: full_like(-100), copy idx[:, 1:] into the first L - 1 columns, then blank padding."""
    targets = torch.full_like(idx, -100)
    targets[:, :-1] = idx[:, 1:]
    if pad_id is not None:
        targets[targets == pad_id] = -100
    return targets


def shift_targets_cat(idx, pad_id=None):
    """Right: cat a column of -100 after idx[:, 1:], torch.where for the padding."""
    last = torch.full((idx.shape[0], 1), -100, dtype=idx.dtype, device=idx.device)
    targets = torch.cat([idx[:, 1:], last], dim=1)
    if pad_id is not None:
        targets = torch.where(targets == pad_id, torch.full_like(targets, -100), targets)
    return targets


def shift_targets_roll(idx, pad_id=None):
    """Wrong: torch.roll(-1) and no fix of the last column, which wraps round to idx[:, 0]."""
    targets = torch.roll(idx, shifts=-1, dims=1)
    if pad_id is not None:
        targets = targets.masked_fill(targets == pad_id, -100)
    return targets


def shift_targets_backward(idx, pad_id=None):
    """Wrong: shifted the wrong way (targets[:, t] = idx[:, t - 1]), -100 in the first column."""
    targets = torch.full_like(idx, -100)
    targets[:, 1:] = idx[:, :-1]
    if pad_id is not None:
        targets[targets == pad_id] = -100
    return targets


def shift_targets_truthy_pad(idx, pad_id=None):
    """Wrong: `if pad_id:` so pad_id=0 (a common pad id) is treated as no padding."""
    targets = torch.full_like(idx, -100)
    targets[:, :-1] = idx[:, 1:]
    if pad_id:
        targets[targets == pad_id] = -100
    return targets


def shift_targets_mask_input_pad(idx, pad_id=None):
    """Wrong: blanks the positions whose INPUT is padding, not those whose target is padding."""
    targets = torch.full_like(idx, -100)
    targets[:, :-1] = idx[:, 1:]
    if pad_id is not None:
        targets[idx == pad_id] = -100
    return targets


def shift_targets_inplace(idx, pad_id=None):
    """Wrong: shifts idx in place and returns it, so the caller's idx is overwritten."""
    idx[:, :-1] = idx[:, 1:].clone()
    idx[:, -1] = -100
    if pad_id is not None:
        idx[idx == pad_id] = -100
    return idx


def shift_targets_long_dtype(idx, pad_id=None):
    """Wrong: torch.full(idx.shape, -100) is always int64, whatever idx's dtype."""
    targets = torch.full(idx.shape, -100, device=idx.device)
    targets[:, :-1] = idx[:, 1:]
    if pad_id is not None:
        targets[targets == pad_id] = -100
    return targets


def shift_targets_zero_last(idx, pad_id=None):
    """Wrong: zeros_like, so the last column holds 0 (a real token id) instead of -100."""
    targets = torch.zeros_like(idx)
    targets[:, :-1] = idx[:, 1:]
    if pad_id is not None:
        targets[targets == pad_id] = -100
    return targets


def shift_targets_batch_axis(idx, pad_id=None):
    """Wrong: shifted along the batch axis (rows) instead of the position axis."""
    targets = torch.full_like(idx, -100)
    targets[:-1] = idx[1:]
    if pad_id is not None:
        targets[targets == pad_id] = -100
    return targets


def shift_targets_drop_last(idx, pad_id=None):
    """Wrong: returns idx[:, 1:] (B, L - 1), dropping the last column instead of -100 there."""
    targets = idx[:, 1:].clone()
    if pad_id is not None:
        targets[targets == pad_id] = -100
    return targets


# ---------------------------------------------------------------- lm_loss


def lm_loss_right(logits, targets):
    """Right: log_softmax, gather at clamped targets, masked sum over the count of kept targets."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets != -100
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() / keep.sum()


def lm_loss_select(logits, targets):
    """Right: select the counted positions first, then logsumexp minus the target logit."""
    keep = targets != -100
    z = logits[keep]  # (N, V)
    y = targets[keep]
    nll = torch.logsumexp(z, dim=-1) - z[torch.arange(len(y), device=z.device), y]
    return nll.mean()


def _picked(logits, targets):
    logp = torch.log_softmax(logits, dim=-1)
    return logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)


def lm_loss_mean_all(logits, targets):
    """Wrong: divides by every position (targets.numel()), not by the counted ones."""
    keep = targets != -100
    return -(_picked(logits, targets) * keep).sum() / targets.numel()


def lm_loss_sum(logits, targets):
    """Wrong: the sum of -log P over counted positions, never divided."""
    keep = targets != -100
    return -(_picked(logits, targets) * keep).sum()


def lm_loss_per_sequence(logits, targets):
    """Wrong: averages each sequence over its counted positions, then averages the sequences."""
    keep = (targets != -100).to(logits.dtype)
    per_seq = -(_picked(logits, targets) * keep).sum(1) / keep.sum(1)
    return per_seq.mean()


def lm_loss_sign(logits, targets):
    """Wrong: returns the mean log-probability (sign flipped, negative)."""
    keep = targets != -100
    return (_picked(logits, targets) * keep).sum() / keep.sum()


def lm_loss_log_softmax_by_hand(logits, targets):
    """Wrong: torch.log(torch.softmax(...)), which gives inf once the logits are large."""
    logp = torch.log(torch.softmax(logits, dim=-1))
    keep = targets != -100
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() / keep.sum()


def lm_loss_shift_again(logits, targets):
    """Wrong: shifts again (logits[:, :-1] against targets[:, 1:]), as if targets were the inputs."""
    logits, targets = logits[:, :-1], targets[:, 1:]
    keep = targets != -100
    return -(_picked(logits, targets) * keep).sum() / keep.sum()


def lm_loss_clamp_counts_ignored(logits, targets):
    """Wrong: clamps -100 to token 0 and averages every position, as if they were real targets."""
    return -_picked(logits, targets).mean()


def lm_loss_ignored_in_sum(logits, targets):
    """Wrong: sums -log P at every position (ignored ones as token 0), divides by the kept count."""
    keep = targets != -100
    return -_picked(logits, targets).sum() / keep.sum()


def lm_loss_wrong_dim(logits, targets):
    """Wrong: log_softmax over the position axis (dim=1) instead of the vocabulary."""
    logp = torch.log_softmax(logits, dim=1)
    keep = targets != -100
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() / keep.sum()


# ---------------------------------------------------------------- next_token_probs


def _greedy(logits):
    return F.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)


def next_token_probs_right(logits, temperature=1.0, top_k=None, top_p=None):
    """Right: /T, top-k by the k-th largest (>=), nucleus threshold in sorted order, softmax."""
    if temperature == 0:
        return _greedy(logits)
    z = logits / temperature
    V = z.shape[-1]
    if top_k is not None and top_k < V:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, NEG_INF)
    if top_p is not None and top_p < 1:
        probs = torch.softmax(z, dim=-1)
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        keep_sorted = (torch.cumsum(sorted_p, dim=-1) - sorted_p) < top_p
        sorted_z = z.gather(-1, order)
        smallest = sorted_z.masked_fill(~keep_sorted, float("inf")).min(-1, keepdim=True).values
        z = z.masked_fill(z < smallest, NEG_INF)
    return torch.softmax(z, dim=-1)


def next_token_probs_loop(logits, temperature=1.0, top_k=None, top_p=None):
    """Right: row by row with torch.sort: k-th value as threshold, walk the sorted probs for top-p."""
    rows = []
    for row in logits:
        if temperature == 0:
            out = torch.zeros_like(row)
            out[int(torch.argmax(row))] = 1
            rows.append(out)
            continue
        z = row / temperature
        if top_k is not None and top_k < z.numel():
            values, _ = torch.sort(z, descending=True)
            z = torch.where(z >= values[top_k - 1], z, torch.full_like(z, NEG_INF))
        if top_p is not None and top_p < 1:
            p = torch.softmax(z, dim=0)
            values, order = torch.sort(p, descending=True)
            total, threshold = 0.0, None
            for prob, j in zip(values.tolist(), order.tolist()):
                if total >= top_p:
                    break
                threshold = z[j]
                total += prob
            z = torch.where(z >= threshold, z, torch.full_like(z, NEG_INF))
        rows.append(torch.softmax(z, dim=0))
    return torch.stack(rows)


def _top_p_filter(z, top_p, strict_cumsum=False):
    probs = torch.softmax(z, dim=-1)
    sorted_p, order = torch.sort(probs, dim=-1, descending=True)
    csum = torch.cumsum(sorted_p, dim=-1)
    keep_sorted = csum < top_p if strict_cumsum else (csum - sorted_p) < top_p
    sorted_z = z.gather(-1, order)
    smallest = sorted_z.masked_fill(~keep_sorted, float("inf")).min(-1, keepdim=True).values
    return z.masked_fill(z < smallest, NEG_INF)


def _top_k_filter(z, top_k):
    if top_k is None or top_k >= z.shape[-1]:
        return z
    kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
    return z.masked_fill(z < kth, NEG_INF)


def next_token_probs_times_t(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: multiplies the logits by the temperature instead of dividing."""
    if temperature == 0:
        return _greedy(logits)
    z = _top_k_filter(logits * temperature, top_k)
    if top_p is not None and top_p < 1:
        z = _top_p_filter(z, top_p)
    return torch.softmax(z, dim=-1)


def next_token_probs_exact_k(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: keeps exactly the k indices torch.topk returns, dropping tokens tied with the k-th."""
    if temperature == 0:
        return _greedy(logits)
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        idx = torch.topk(z, top_k, dim=-1).indices
        keep = torch.zeros_like(z, dtype=torch.bool).scatter(-1, idx, True)
        z = z.masked_fill(~keep, NEG_INF)
    if top_p is not None and top_p < 1:
        z = _top_p_filter(z, top_p)
    return torch.softmax(z, dim=-1)


def next_token_probs_strict_kth(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: keeps logits strictly greater than the k-th largest (k - 1 tokens)."""
    if temperature == 0:
        return _greedy(logits)
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z <= kth, NEG_INF)
    if top_p is not None and top_p < 1:
        z = _top_p_filter(z, top_p)
    return torch.softmax(z, dim=-1)


def next_token_probs_zero_no_renorm(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: softmax first, then zeroes the probabilities outside the top k, never renormalised."""
    if temperature == 0:
        return _greedy(logits)
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_k is not None and top_k < probs.shape[-1]:
        kth = torch.topk(probs, top_k, dim=-1).values[..., -1:]
        probs = probs.masked_fill(probs < kth, 0.0)
    if top_p is not None and top_p < 1:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        keep_sorted = (torch.cumsum(sorted_p, dim=-1) - sorted_p) < top_p
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        probs = probs * keep
    return probs


def next_token_probs_fill_zero(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: the removed logits are set to 0 instead of -inf, so they keep some probability."""
    if temperature == 0:
        return _greedy(logits)
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, 0.0)
    if top_p is not None and top_p < 1:
        z = _top_p_filter(z, top_p)
    return torch.softmax(z, dim=-1)


def next_token_probs_tiny_t(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: T = 0 is replaced by T = 1e-6 instead of a one-hot (ties at the max share it)."""
    z = logits / max(temperature, 1e-6)
    z = _top_k_filter(z, top_k)
    if top_p is not None and top_p < 1:
        z = _top_p_filter(z, top_p)
    return torch.softmax(z, dim=-1)


def next_token_probs_drop_crossing(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: top-p keeps tokens with cumsum < p, dropping the one whose probability crosses p."""
    if temperature == 0:
        return _greedy(logits)
    z = _top_k_filter(logits / temperature, top_k)
    if top_p is not None and top_p < 1:
        z = _top_p_filter(z, top_p, strict_cumsum=True)
    return torch.softmax(z, dim=-1)


def next_token_probs_nucleus_at_t1(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: the nucleus is chosen from the raw logits (T = 1), then applied to the tempered ones."""
    if temperature == 0:
        return _greedy(logits)
    z = _top_k_filter(logits / temperature, top_k)
    if top_p is not None and top_p < 1:
        raw = _top_k_filter(logits, top_k)
        kept = _top_p_filter(raw, top_p) > NEG_INF
        z = z.masked_fill(~kept, NEG_INF)
    return torch.softmax(z, dim=-1)


def next_token_probs_top_p_first(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: the top-p filter runs before the top-k filter."""
    if temperature == 0:
        return _greedy(logits)
    z = logits / temperature
    if top_p is not None and top_p < 1:
        z = _top_p_filter(z, top_p)
    z = _top_k_filter(z, top_k)
    return torch.softmax(z, dim=-1)


def next_token_probs_unsorted_mask(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: the keep mask computed in sorted order is applied to the unsorted logits."""
    if temperature == 0:
        return _greedy(logits)
    z = _top_k_filter(logits / temperature, top_k)
    if top_p is not None and top_p < 1:
        sorted_p, _ = torch.sort(torch.softmax(z, dim=-1), dim=-1, descending=True)
        keep_sorted = (torch.cumsum(sorted_p, dim=-1) - sorted_p) < top_p
        z = z.masked_fill(~keep_sorted, NEG_INF)
    return torch.softmax(z, dim=-1)


def next_token_probs_hf_ties(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: top-p keeps exactly the sorted nucleus (scatter back), dropping tokens tied with its last."""
    if temperature == 0:
        return _greedy(logits)
    z = _top_k_filter(logits / temperature, top_k)
    if top_p is not None and top_p < 1:
        sorted_p, order = torch.sort(torch.softmax(z, dim=-1), dim=-1, descending=True)
        keep_sorted = (torch.cumsum(sorted_p, dim=-1) - sorted_p) < top_p
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        z = z.masked_fill(~keep, NEG_INF)
    return torch.softmax(z, dim=-1)


def next_token_probs_ascending(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: sorts ascending for top-p, so the nucleus is built from the least likely tokens."""
    if temperature == 0:
        return _greedy(logits)
    z = _top_k_filter(logits / temperature, top_k)
    if top_p is not None and top_p < 1:
        sorted_p, order = torch.sort(torch.softmax(z, dim=-1), dim=-1)
        keep_sorted = (torch.cumsum(sorted_p, dim=-1) - sorted_p) < top_p
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        z = z.masked_fill(~keep, NEG_INF)
    return torch.softmax(z, dim=-1)


def next_token_probs_ignore_top_p(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: temperature and top-k only; the top_p argument is ignored."""
    if temperature == 0:
        return _greedy(logits)
    return torch.softmax(_top_k_filter(logits / temperature, top_k), dim=-1)


# ---------------------------------------------------------------- sample_next


def sample_next_right(logits, temperature=1.0, top_k=None, generator=None):
    """Right: torch.multinomial on next_token_probs with the generator, squeeze to (B,)."""
    probs = next_token_probs_right(logits, temperature, top_k)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)


def sample_next_gumbel(logits, temperature=1.0, top_k=None, generator=None):
    """Right: the Gumbel-max trick, argmax(log p - log(-log u)) with u from the generator."""
    probs = next_token_probs_right(logits, temperature, top_k)
    u = torch.rand(probs.shape, generator=generator, device=probs.device, dtype=torch.float64)
    gumbel = -torch.log(-torch.log(u.clamp(min=1e-300)))
    return (probs.double().log() + gumbel).argmax(dim=-1)


def sample_next_argmax(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: always takes the argmax of the probabilities instead of drawing."""
    return next_token_probs_right(logits, temperature, top_k).argmax(-1)


def sample_next_no_generator(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: torch.multinomial without generator=, so seeding the generator changes nothing."""
    probs = next_token_probs_right(logits, temperature, top_k)
    return torch.multinomial(probs, num_samples=1).squeeze(-1)


def sample_next_no_temperature(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: passes top_k by keyword but forgets the temperature (always T = 1)."""
    probs = next_token_probs_right(logits, top_k=top_k)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)


def sample_next_no_top_k(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: passes only the temperature on; top_k is ignored."""
    probs = next_token_probs_right(logits, temperature)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)


def sample_next_keepdim(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: returns multinomial's (B, 1) without squeezing to (B,)."""
    probs = next_token_probs_right(logits, temperature, top_k)
    return torch.multinomial(probs, num_samples=1, generator=generator)


def sample_next_reseed(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: calls torch.manual_seed(0) every call for 'reproducibility' and ignores generator."""
    torch.manual_seed(0)
    probs = next_token_probs_right(logits, temperature, top_k)
    return torch.multinomial(probs, num_samples=1).squeeze(-1)


def sample_next_int32(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: casts the ids to int32 (.int()) instead of keeping torch.long."""
    probs = next_token_probs_right(logits, temperature, top_k)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1).int()


def sample_next_one_uniform(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: inverse-CDF sampling with ONE uniform number shared by every row of the batch."""
    probs = next_token_probs_right(logits, temperature, top_k)
    u = torch.rand(1, generator=generator, device=probs.device, dtype=probs.dtype)
    cdf = probs.cumsum(-1)
    ids = (cdf < u).sum(-1)
    return ids.clamp(max=probs.shape[-1] - 1)


# ---------------------------------------------------------------- KVCache


class KVCacheRight:
    """Right: None when empty, torch.cat along dim=-2 on each append, len = keys.shape[-2]."""

    def __init__(self):
        self.keys = None
        self.values = None

    def __len__(self):
        return 0 if self.keys is None else self.keys.shape[-2]

    def append(self, k, v):
        if self.keys is None:
            self.keys, self.values = k, v
        else:
            self.keys = torch.cat([self.keys, k], dim=-2)
            self.values = torch.cat([self.values, v], dim=-2)
        return self.keys, self.values


class KVCacheChunks:
    """Right: a list of chunks per tensor and a running count; append cats the chunks (dim=2)."""

    def __init__(self):
        self._k, self._v, self._n = [], [], 0

    def __len__(self):
        return self._n

    def append(self, k, v):
        self._k.append(k)
        self._v.append(v)
        self._n += k.size(2)
        return torch.cat(self._k, dim=2), torch.cat(self._v, dim=2)


class KVCacheLastAxis:
    """Wrong: joined along the last axis (the features) instead of the position axis."""

    def __init__(self):
        self.keys = None
        self.values = None

    def __len__(self):
        return 0 if self.keys is None else self.keys.shape[-2]

    def append(self, k, v):
        if self.keys is None:
            self.keys, self.values = k, v
        else:
            self.keys = torch.cat([self.keys, k], dim=-1)
            self.values = torch.cat([self.values, v], dim=-1)
        return self.keys, self.values


class KVCacheHeadAxis:
    """Wrong: joined along dim=1 (the heads) instead of dim=-2, len counting dim 1 too."""

    def __init__(self):
        self.keys = None
        self.values = None

    def __len__(self):
        return 0 if self.keys is None else self.keys.shape[1]

    def append(self, k, v):
        if self.keys is None:
            self.keys, self.values = k, v
        else:
            self.keys = torch.cat([self.keys, k], dim=1)
            self.values = torch.cat([self.values, v], dim=1)
        return self.keys, self.values


class KVCacheForgets:
    """Wrong: each append overwrites the stored keys and values with the new ones."""

    def __init__(self):
        self.keys = None
        self.values = None

    def __len__(self):
        return 0 if self.keys is None else self.keys.shape[-2]

    def append(self, k, v):
        self.keys, self.values = k, v
        return self.keys, self.values


class KVCacheReturnsNew:
    """Wrong: stores everything but append returns only the new k and v."""

    def __init__(self):
        self.keys = None
        self.values = None

    def __len__(self):
        return 0 if self.keys is None else self.keys.shape[-2]

    def append(self, k, v):
        if self.keys is None:
            self.keys, self.values = k, v
        else:
            self.keys = torch.cat([self.keys, k], dim=-2)
            self.values = torch.cat([self.values, v], dim=-2)
        return k, v


class KVCachePrepend:
    """Wrong: the new keys and values go in front of the stored ones."""

    def __init__(self):
        self.keys = None
        self.values = None

    def __len__(self):
        return 0 if self.keys is None else self.keys.shape[-2]

    def append(self, k, v):
        if self.keys is None:
            self.keys, self.values = k, v
        else:
            self.keys = torch.cat([k, self.keys], dim=-2)
            self.values = torch.cat([v, self.values], dim=-2)
        return self.keys, self.values


class KVCacheLenBatch:
    """Wrong: len(cache) is the batch size (shape[0]) instead of the number of positions."""

    def __init__(self):
        self.keys = None
        self.values = None

    def __len__(self):
        return 0 if self.keys is None else self.keys.shape[0]

    def append(self, k, v):
        if self.keys is None:
            self.keys, self.values = k, v
        else:
            self.keys = torch.cat([self.keys, k], dim=-2)
            self.values = torch.cat([self.values, v], dim=-2)
        return self.keys, self.values


class KVCacheLenAppends:
    """Wrong: len(cache) counts the append calls, not the positions (wrong for chunks of n > 1)."""

    def __init__(self):
        self.ks, self.vs = [], []

    def __len__(self):
        return len(self.ks)

    def append(self, k, v):
        self.ks.append(k)
        self.vs.append(v)
        return torch.cat(self.ks, dim=-2), torch.cat(self.vs, dim=-2)


class KVCacheSharedList:
    """Wrong: lists as class attributes, so every cache (one per layer) shares the same storage."""

    ks = []
    vs = []

    def __init__(self):
        pass

    def __len__(self):
        return sum(k.shape[-2] for k in self.ks)

    def append(self, k, v):
        self.ks.append(k)
        self.vs.append(v)
        return torch.cat(self.ks, dim=-2), torch.cat(self.vs, dim=-2)


class KVCacheSwapped:
    """Wrong: append returns (values, keys), the pair in the wrong order."""

    def __init__(self):
        self.keys = None
        self.values = None

    def __len__(self):
        return 0 if self.keys is None else self.keys.shape[-2]

    def append(self, k, v):
        if self.keys is None:
            self.keys, self.values = k, v
        else:
            self.keys = torch.cat([self.keys, k], dim=-2)
            self.values = torch.cat([self.values, v], dim=-2)
        return self.values, self.keys


# ---------------------------------------------------------------- training_flops


def _n_non_embedding(model):
    return sum(
        p.numel()
        for name, p in model.named_parameters()
        if name.split(".")[0] not in ("wte", "wpe")
    )


def training_flops_right(model, batch_size, block_size, n_steps):
    """Right: N from named_parameters without wte.* and wpe.*, D = batch · block · steps, 6·N·D."""
    N = _n_non_embedding(model)
    D = batch_size * block_size * n_steps
    return 6 * N * D


def training_flops_identity(model, batch_size, block_size, n_steps):
    """Right: N = all parameters minus those of model.wte and model.wpe (by identity)."""
    skip = {id(p) for p in model.wte.parameters()} | {id(p) for p in model.wpe.parameters()}
    N = sum(p.numel() for p in model.parameters() if id(p) not in skip)
    return float(6 * N * (n_steps * batch_size * block_size))


def training_flops_forward_only(model, batch_size, block_size, n_steps):
    """Wrong: 2·N·D, the forward pass only."""
    return 2 * _n_non_embedding(model) * batch_size * block_size * n_steps


def training_flops_four(model, batch_size, block_size, n_steps):
    """Wrong: 4·N·D, counting the backward pass as one more forward."""
    return 4 * _n_non_embedding(model) * batch_size * block_size * n_steps


def training_flops_macs(model, batch_size, block_size, n_steps):
    """Wrong: 3·N·D, multiply-adds counted instead of FLOPs."""
    return 3 * _n_non_embedding(model) * batch_size * block_size * n_steps


def training_flops_one_step(model, batch_size, block_size, n_steps):
    """Wrong: D is the tokens of one step (batch_size · block_size)."""
    return 6 * _n_non_embedding(model) * batch_size * block_size


def training_flops_windows(model, batch_size, block_size, n_steps):
    """Wrong: D counts windows (batch_size · n_steps), not tokens."""
    return 6 * _n_non_embedding(model) * batch_size * n_steps


def training_flops_n_positions(model, batch_size, block_size, n_steps):
    """Wrong: D uses the model's n_positions instead of block_size."""
    return 6 * _n_non_embedding(model) * batch_size * model.n_positions * n_steps


def training_flops_all_params(model, batch_size, block_size, n_steps):
    """Wrong: N is every parameter, the embeddings included."""
    N = sum(p.numel() for p in model.parameters())
    return 6 * N * batch_size * block_size * n_steps


def training_flops_keeps_wpe(model, batch_size, block_size, n_steps):
    """Wrong: only wte is left out of N; the position table wpe is counted."""
    N = sum(p.numel() for name, p in model.named_parameters() if not name.startswith("wte"))
    return 6 * N * batch_size * block_size * n_steps


def training_flops_state_dict(model, batch_size, block_size, n_steps):
    """Wrong: N from state_dict() without wte/wpe, so the tied lm_head.weight (and buffers) count."""
    N = sum(
        t.numel()
        for name, t in model.state_dict().items()
        if name not in ("wte.weight", "wpe.weight")
    )
    return 6 * N * batch_size * block_size * n_steps


def training_flops_blocks_only(model, batch_size, block_size, n_steps):
    """Wrong: N counts only model.blocks, leaving out the final LayerNorm."""
    N = sum(p.numel() for p in model.blocks.parameters())
    return 6 * N * batch_size * block_size * n_steps


# ---------------------------------------------------------------- practice_transformers


class Answer(str):
    """A practice answer: a plain str that also carries a name and a one-line docstring."""


def _answer(letter, name, doc):
    answer = Answer(letter)
    answer.__name__ = name
    answer.__doc__ = doc
    return answer


PRACTICE_RIGHT = _answer(
    "C", "practice_C", "Right: a learned table W_p has no row past n_positions."
)
PRACTICE_RIGHT2 = _answer(
    "ABCD"[2], "practice_C_indexed", "Right: the same letter C, built by indexing."
)
PRACTICE_WRONG = [
    _answer(
        "A",
        "practice_A",
        "Wrong: A, attention dearer than the FFN at d=512, L=128 (4d²+2Ld < 8d²).",
    ),
    _answer(
        "B", "practice_B", "Wrong: B, multi-head dearer than single-head (same cost: h·2L·d/h)."
    ),
    _answer(
        "D",
        "practice_D",
        "Wrong: D, Transformers scale easily to long sequences (cost grows with L).",
    ),
    _answer("CD", "practice_CD", "Wrong: two letters, C and D, where the question asks for one."),
]


WRONG = {
    "shift_targets": [
        shift_targets_roll,
        shift_targets_backward,
        shift_targets_truthy_pad,
        shift_targets_mask_input_pad,
        shift_targets_inplace,
        shift_targets_long_dtype,
        shift_targets_zero_last,
        shift_targets_batch_axis,
        shift_targets_drop_last,
    ],
    "lm_loss": [
        lm_loss_mean_all,
        lm_loss_sum,
        lm_loss_per_sequence,
        lm_loss_sign,
        lm_loss_log_softmax_by_hand,
        lm_loss_shift_again,
        lm_loss_clamp_counts_ignored,
        lm_loss_ignored_in_sum,
        lm_loss_wrong_dim,
    ],
    "next_token_probs": [
        next_token_probs_times_t,
        next_token_probs_exact_k,
        next_token_probs_strict_kth,
        next_token_probs_zero_no_renorm,
        next_token_probs_fill_zero,
        next_token_probs_tiny_t,
        next_token_probs_drop_crossing,
        next_token_probs_nucleus_at_t1,
        next_token_probs_top_p_first,
        next_token_probs_unsorted_mask,
        next_token_probs_hf_ties,
        next_token_probs_ascending,
        next_token_probs_ignore_top_p,
    ],
    "sample_next": [
        sample_next_argmax,
        sample_next_no_generator,
        sample_next_no_temperature,
        sample_next_no_top_k,
        sample_next_keepdim,
        sample_next_reseed,
        sample_next_int32,
        sample_next_one_uniform,
    ],
    "KVCache": [
        KVCacheLastAxis,
        KVCacheHeadAxis,
        KVCacheForgets,
        KVCacheReturnsNew,
        KVCachePrepend,
        KVCacheLenBatch,
        KVCacheLenAppends,
        KVCacheSharedList,
        KVCacheSwapped,
    ],
    "training_flops": [
        training_flops_forward_only,
        training_flops_four,
        training_flops_macs,
        training_flops_one_step,
        training_flops_windows,
        training_flops_n_positions,
        training_flops_all_params,
        training_flops_keeps_wpe,
        training_flops_state_dict,
        training_flops_blocks_only,
    ],
    # the practice question's "implementation" is the answer string
    "practice_transformers": PRACTICE_WRONG,
}

RIGHT = {
    "shift_targets": shift_targets_right,
    "lm_loss": lm_loss_right,
    "next_token_probs": next_token_probs_right,
    "sample_next": sample_next_right,
    "KVCache": KVCacheRight,
    "training_flops": training_flops_right,
    "practice_transformers": PRACTICE_RIGHT,
}

RIGHT2 = {
    "shift_targets": shift_targets_cat,
    "lm_loss": lm_loss_select,
    "next_token_probs": next_token_probs_loop,
    "sample_next": sample_next_gumbel,
    "KVCache": KVCacheChunks,
    "training_flops": training_flops_identity,
    "practice_transformers": PRACTICE_RIGHT2,
}
