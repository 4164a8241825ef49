"""Lesson 08 (GPT): held-out wrong and right implementations, from the exercise text only (sixth set)."""

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------- shift_targets


def shift_targets_right(idx, pad_id=None):
    """Right: full_like(-100), copy idx[:, 1:], then -100 where the target is pad_id."""
    targets = torch.full_like(idx, -100)
    targets[:, :-1] = idx[:, 1:]
    if pad_id is not None:
        targets[targets == pad_id] = -100
    return targets


def shift_targets_right2(idx, pad_id=None):
    """Right: pad padding on a clone first, then torch.cat of the shifted part and a -100 column."""
    src = idx.clone()
    if pad_id is not None:
        src = src.masked_fill(src == pad_id, -100)
    last = src.new_full((src.shape[0], 1), -100)
    return torch.cat([src.narrow(1, 1, src.shape[1] - 1), last], dim=1)


def shift_targets_roll(idx, pad_id=None):
    """Wrong: torch.roll(-1) and the pad rule, but the last column keeps the wrapped first token."""
    targets = torch.roll(idx, -1, dims=1)
    if pad_id is not None:
        targets = targets.masked_fill(targets == pad_id, -100)
    return targets


def shift_targets_truthy_pad(idx, pad_id=None):
    """Wrong: `if pad_id:` skips the padding rule when pad_id is 0."""
    targets = torch.full_like(idx, -100)
    targets[:, :-1] = idx[:, 1:]
    if pad_id:
        targets[targets == pad_id] = -100
    return targets


def shift_targets_inplace(idx, pad_id=None):
    """Wrong: writes -100 into idx itself at the padding before shifting (idx is changed)."""
    if pad_id is not None:
        idx[idx == pad_id] = -100
    targets = torch.full_like(idx, -100)
    targets[:, :-1] = idx[:, 1:]
    return targets


def shift_targets_input_pad(idx, pad_id=None):
    """Wrong: masks the positions whose INPUT is padding, not those whose target is."""
    targets = torch.full_like(idx, -100)
    targets[:, :-1] = idx[:, 1:]
    if pad_id is not None:
        targets[idx == pad_id] = -100
    return targets


def shift_targets_long(idx, pad_id=None):
    """Wrong: torch.full(idx.shape, -100) is int64 whatever idx's dtype."""
    targets = torch.full(idx.shape, -100)
    targets[:, :-1] = idx[:, 1:]
    if pad_id is not None:
        targets[targets == pad_id] = -100
    return targets


def shift_targets_batch_axis(idx, pad_id=None):
    """Wrong: shifts along the batch axis (idx[1:]) instead of the positions."""
    targets = torch.full_like(idx, -100)
    targets[:-1] = idx[1:]
    if pad_id is not None:
        targets[targets == pad_id] = -100
    return targets


def shift_targets_drop_last(idx, pad_id=None):
    """Wrong: returns idx[:, 1:], shape (B, L - 1), instead of a -100 last column."""
    targets = idx[:, 1:].clone()
    if pad_id is not None:
        targets[targets == pad_id] = -100
    return targets


def shift_targets_pad_before_only(idx, pad_id=None):
    """Wrong: pads only the first padding target of each row (argmax of the pad mask)."""
    targets = torch.full_like(idx, -100)
    targets[:, :-1] = idx[:, 1:]
    if pad_id is not None:
        is_pad = targets == pad_id
        first = is_pad.int().argmax(dim=1)
        rows = torch.arange(idx.shape[0])
        targets[rows[is_pad.any(1)], first[is_pad.any(1)]] = -100
    return targets


# ---------------------------------------------------------------- lm_loss


def lm_loss_right(logits, targets):
    """Right: log_softmax, gather at clamped targets, mean over the counted positions."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets != -100
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() / keep.sum()


def lm_loss_right2(logits, targets):
    """Right: select the counted positions first, logsumexp by hand, advanced indexing."""
    V = logits.shape[-1]
    flat_z = logits.reshape(-1, V)
    flat_t = targets.reshape(-1)
    sel = (flat_t != -100).nonzero(as_tuple=True)[0]
    z = flat_z.index_select(0, sel)
    t = flat_t.index_select(0, sel)
    logp = z[torch.arange(len(t)), t] - torch.logsumexp(z, dim=-1)
    return -logp.mean()


def lm_loss_all_positions(logits, targets):
    """Wrong: gathers at clamped targets and takes .mean() over every position, skipped ones too."""
    logp = torch.log_softmax(logits, dim=-1)
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    keep = targets != -100
    return -(picked * keep).mean()


def lm_loss_per_sequence(logits, targets):
    """Wrong: averages each sequence's counted positions, then the sequences."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = (targets != -100).to(logits.dtype)
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (-(picked * keep).sum(1) / keep.sum(1)).mean()


def lm_loss_log_softmax_dim1(logits, targets):
    """Wrong: log_softmax over dim=1 (the positions) instead of the vocabulary."""
    logp = torch.log_softmax(logits, dim=1)
    keep = targets != -100
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() / keep.sum()


def lm_loss_shift_again(logits, targets):
    """Wrong: shifts once more, logits[:, :-1] against targets[:, 1:]."""
    logits, targets = logits[:, :-1], targets[:, 1:]
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets != -100
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() / keep.sum()


def lm_loss_positive_ids(logits, targets):
    """Wrong: counts positions with `targets > 0`, so token id 0 is skipped as well."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets > 0
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() / keep.sum()


def lm_loss_log_of_softmax(logits, targets):
    """Wrong: torch.log(torch.softmax(...)), which gives inf once the logits are large."""
    logp = torch.log(torch.softmax(logits, dim=-1))
    keep = targets != -100
    picked = logp[keep].gather(-1, targets[keep].unsqueeze(-1)).squeeze(-1)
    return -picked.mean()


def lm_loss_keepdim(logits, targets):
    """Wrong: the sum keeps its dimensions, so the loss has shape (1, 1), not 0-dim."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets != -100
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum(dim=(0, 1), keepdim=True) / keep.sum()


def lm_loss_floor_div(logits, targets):
    """Wrong: divides with // (floor division) by the count."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets != -100
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() // keep.sum()


# ---------------------------------------------------------------- next_token_probs


def next_token_probs_right(logits, temperature=1.0, top_k=None, top_p=None):
    """Right: /T, top-k by the k-th largest (>=), top-p by the smallest kept logit (>=), softmax."""
    V = logits.shape[-1]
    if temperature == 0:
        return F.one_hot(logits.argmax(dim=-1), V).to(logits.dtype)
    z = logits / temperature
    if top_k is not None and top_k < V:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        probs = torch.softmax(z, dim=-1)
        sp, order = torch.sort(probs, dim=-1, descending=True)
        keep_sorted = (torch.cumsum(sp, dim=-1) - sp) < top_p
        sorted_z = torch.gather(z, -1, order)
        smallest = sorted_z.masked_fill(~keep_sorted, float("inf")).min(dim=-1, keepdim=True).values
        z = z.masked_fill(z < smallest, float("-inf"))
    return torch.softmax(z, dim=-1)


def next_token_probs_right2(logits, temperature=1.0, top_k=None, top_p=None):
    """Right: row by row in float64, a sort-based k-th value, a loop for the nucleus, cast back."""
    out = torch.empty_like(logits)
    V = logits.shape[-1]
    for b in range(logits.shape[0]):
        row = logits[b].double()
        if temperature == 0:
            best = row.max()
            first = int((row == best).nonzero()[0])
            p = torch.zeros_like(row)
            p[first] = 1.0
            out[b] = p.to(logits.dtype)
            continue
        z = row / temperature
        keep = torch.ones(V, dtype=torch.bool, device=row.device)
        if top_k is not None and top_k < V:
            kth = torch.sort(z, descending=True).values[top_k - 1]
            keep &= z >= kth
        if top_p is not None and top_p < 1:
            w = torch.where(keep, torch.exp(z - z[keep].max()), torch.zeros_like(z))
            w = w / w.sum()
            zd, wd = z.detach(), w.detach()
            vals = sorted(((float(zd[i]), float(wd[i])) for i in range(V) if keep[i]), reverse=True)
            total, smallest = 0.0, None
            for zi, wi in vals:
                if total < top_p:
                    smallest = zi
                    total += wi
                else:
                    break
            keep &= z >= smallest
        z = torch.where(keep, z, torch.full_like(z, float("-inf")))
        e = torch.exp(z - z.max())
        out[b] = (e / e.sum()).to(logits.dtype)
    return out


def next_token_probs_exact_k(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: top-k by scattering the topk indices, so exactly k survive when the k-th ties."""
    V = logits.shape[-1]
    if temperature == 0:
        return F.one_hot(logits.argmax(dim=-1), V).to(logits.dtype)
    z = logits / temperature
    if top_k is not None and top_k < V:
        idx = torch.topk(z, top_k, dim=-1).indices
        keep = torch.zeros_like(z, dtype=torch.bool).scatter(-1, idx, True)
        z = z.masked_fill(~keep, float("-inf"))
    if top_p is not None and top_p < 1:
        probs = torch.softmax(z, dim=-1)
        sp, order = torch.sort(probs, dim=-1, descending=True)
        keep_sorted = (torch.cumsum(sp, dim=-1) - sp) < top_p
        sorted_z = torch.gather(z, -1, order)
        smallest = sorted_z.masked_fill(~keep_sorted, float("inf")).min(dim=-1, keepdim=True).values
        z = z.masked_fill(z < smallest, float("-inf"))
    return torch.softmax(z, dim=-1)


def next_token_probs_k_ge_v_crash(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: calls torch.topk(z, top_k) even when top_k >= V (the text says it keeps everything)."""
    if temperature == 0:
        return F.one_hot(logits.argmax(dim=-1), logits.shape[-1]).to(logits.dtype)
    z = logits / temperature
    if top_k is not None:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        probs = torch.softmax(z, dim=-1)
        sp, order = torch.sort(probs, dim=-1, descending=True)
        keep_sorted = (torch.cumsum(sp, dim=-1) - sp) < top_p
        sorted_z = torch.gather(z, -1, order)
        smallest = sorted_z.masked_fill(~keep_sorted, float("inf")).min(dim=-1, keepdim=True).values
        z = z.masked_fill(z < smallest, float("-inf"))
    return torch.softmax(z, dim=-1)


def next_token_probs_kth_index(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: the threshold is sort(descending)[..., top_k] (index k, not k - 1): k + 1 survive."""
    V = logits.shape[-1]
    if temperature == 0:
        return F.one_hot(logits.argmax(dim=-1), V).to(logits.dtype)
    z = logits / temperature
    if top_k is not None and top_k < V:
        kth = torch.sort(z, dim=-1, descending=True).values[..., top_k : top_k + 1]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        probs = torch.softmax(z, dim=-1)
        sp, order = torch.sort(probs, dim=-1, descending=True)
        keep_sorted = (torch.cumsum(sp, dim=-1) - sp) < top_p
        sorted_z = torch.gather(z, -1, order)
        smallest = sorted_z.masked_fill(~keep_sorted, float("inf")).min(dim=-1, keepdim=True).values
        z = z.masked_fill(z < smallest, float("-inf"))
    return torch.softmax(z, dim=-1)


def next_token_probs_inplace(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: divides and masks the caller's logits in place (logits /= T; logits[...] = -inf)."""
    V = logits.shape[-1]
    if temperature == 0:
        return F.one_hot(logits.argmax(dim=-1), V).to(logits.dtype)
    logits /= temperature
    z = logits
    if top_k is not None and top_k < V:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z[z < kth] = float("-inf")
    if top_p is not None and top_p < 1:
        probs = torch.softmax(z, dim=-1)
        sp, order = torch.sort(probs, dim=-1, descending=True)
        keep_sorted = (torch.cumsum(sp, dim=-1) - sp) < top_p
        sorted_z = torch.gather(z, -1, order)
        smallest = sorted_z.masked_fill(~keep_sorted, float("inf")).min(dim=-1, keepdim=True).values
        z[z < smallest] = float("-inf")
    return torch.softmax(z, dim=-1)


def next_token_probs_float64(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: works in float64 for stability and returns float64 whatever the logits' dtype."""
    return next_token_probs_right(logits.double(), temperature, top_k, top_p)


def next_token_probs_p_one(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: no shortcut for top_p = 1, so float rounding in the cumsum drops the far tail."""
    V = logits.shape[-1]
    if temperature == 0:
        return F.one_hot(logits.argmax(dim=-1), V).to(logits.dtype)
    z = logits / temperature
    if top_k is not None and top_k < V:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None:
        probs = torch.softmax(z, dim=-1)
        sp, order = torch.sort(probs, dim=-1, descending=True)
        keep_sorted = (torch.cumsum(sp, dim=-1) - sp) < top_p
        sorted_z = torch.gather(z, -1, order)
        smallest = sorted_z.masked_fill(~keep_sorted, float("inf")).min(dim=-1, keepdim=True).values
        z = z.masked_fill(z < smallest, float("-inf"))
    return torch.softmax(z, dim=-1)


def next_token_probs_nucleus_at_t1(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: the nucleus is chosen from softmax(logits), i.e. at T = 1, not on the tempered z."""
    V = logits.shape[-1]
    if temperature == 0:
        return F.one_hot(logits.argmax(dim=-1), V).to(logits.dtype)
    z = logits / temperature
    if top_k is not None and top_k < V:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        raw = logits.masked_fill(torch.isinf(z), float("-inf"))
        probs = torch.softmax(raw, dim=-1)
        sp, order = torch.sort(probs, dim=-1, descending=True)
        keep_sorted = (torch.cumsum(sp, dim=-1) - sp) < top_p
        sorted_z = torch.gather(z, -1, order)
        smallest = sorted_z.masked_fill(~keep_sorted, float("inf")).min(dim=-1, keepdim=True).values
        z = z.masked_fill(z < smallest, float("-inf"))
    return torch.softmax(z, dim=-1)


def next_token_probs_softmax_dim0(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: the final softmax runs over dim=0 (the batch), not over the vocabulary."""
    V = logits.shape[-1]
    if temperature == 0:
        return F.one_hot(logits.argmax(dim=-1), V).to(logits.dtype)
    z = logits / temperature
    if top_k is not None and top_k < V:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        probs = torch.softmax(z, dim=-1)
        sp, order = torch.sort(probs, dim=-1, descending=True)
        keep_sorted = (torch.cumsum(sp, dim=-1) - sp) < top_p
        sorted_z = torch.gather(z, -1, order)
        smallest = sorted_z.masked_fill(~keep_sorted, float("inf")).min(dim=-1, keepdim=True).values
        z = z.masked_fill(z < smallest, float("-inf"))
    return torch.softmax(z, dim=0)


def next_token_probs_top_p_only_if_no_k(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: `elif top_p` - applies top-p only when no top-k is given."""
    V = logits.shape[-1]
    if temperature == 0:
        return F.one_hot(logits.argmax(dim=-1), V).to(logits.dtype)
    z = logits / temperature
    if top_k is not None and top_k < V:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    elif top_p is not None and top_p < 1:
        probs = torch.softmax(z, dim=-1)
        sp, order = torch.sort(probs, dim=-1, descending=True)
        keep_sorted = (torch.cumsum(sp, dim=-1) - sp) < top_p
        sorted_z = torch.gather(z, -1, order)
        smallest = sorted_z.masked_fill(~keep_sorted, float("inf")).min(dim=-1, keepdim=True).values
        z = z.masked_fill(z < smallest, float("-inf"))
    return torch.softmax(z, dim=-1)


# ---------------------------------------------------------------- sample_next


def sample_next_right(logits, temperature=1.0, top_k=None, generator=None):
    """Right: torch.multinomial on next_token_probs, generator passed on, squeeze(-1)."""
    probs = next_token_probs_right(logits, temperature, top_k)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)


def sample_next_right2(logits, temperature=1.0, top_k=None, generator=None):
    """Right: inverse-CDF sampling, one torch.rand per row with the generator, searchsorted."""
    probs = next_token_probs_right(logits, temperature, top_k).double()
    cdf = probs.cumsum(dim=-1)
    u = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device, dtype=torch.float64)
    u = u * cdf[:, -1:]
    ids = torch.searchsorted(cdf, u, right=True).squeeze(-1)
    last_positive = probs.shape[-1] - 1 - (probs.flip(-1) > 0).long().argmax(-1)
    return torch.minimum(ids, last_positive).long()


def sample_next_argmax(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: takes the argmax of the probabilities instead of drawing."""
    return next_token_probs_right(logits, temperature, top_k).argmax(dim=-1)


def sample_next_no_generator(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: torch.multinomial without generator=, so a seed does not reproduce."""
    probs = next_token_probs_right(logits, temperature, top_k)
    return torch.multinomial(probs, 1).squeeze(-1)


def sample_next_squeeze_all(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: .squeeze() drops the batch axis too when B = 1 (shape () not (1,))."""
    probs = next_token_probs_right(logits, temperature, top_k)
    return torch.multinomial(probs, 1, generator=generator).squeeze()


def sample_next_b1(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: returns multinomial's (B, 1) as is."""
    probs = next_token_probs_right(logits, temperature, top_k)
    return torch.multinomial(probs, num_samples=1, generator=generator)


def sample_next_double_temperature(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: divides by T itself and then passes T on, so the temperature applies twice."""
    z = logits / temperature if temperature != 0 else logits
    probs = next_token_probs_right(z, temperature, top_k)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def sample_next_ignores_top_k(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: forgets to pass top_k on to next_token_probs."""
    probs = next_token_probs_right(logits, temperature)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def sample_next_default_seed(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: without a generator makes torch.Generator().manual_seed(0): every call draws alike."""
    if generator is None:
        generator = torch.Generator(device=logits.device).manual_seed(0)
    probs = next_token_probs_right(logits, temperature, top_k)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def sample_next_global_seed(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: seeds torch's global generator from the given one's seed and draws globally."""
    if generator is not None:
        torch.manual_seed(generator.initial_seed())
    probs = next_token_probs_right(logits, temperature, top_k)
    return torch.multinomial(probs, 1).squeeze(-1)


def sample_next_int32(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: casts the ids to int32 (.int()), not torch.long."""
    probs = next_token_probs_right(logits, temperature, top_k)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1).int()


# ---------------------------------------------------------------- KVCache


class KVCacheRight:
    """Right: None when empty, torch.cat along dim=-2, len from keys.shape[-2]."""

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
    """Right: stores keys transposed (B, h, d_k, L) joined on the last axis; a count of positions."""

    def __init__(self):
        self._kt = None
        self._vt = None
        self._n = 0

    def __len__(self):
        return self._n

    def append(self, k, v):
        kt, vt = k.transpose(-1, -2), v.transpose(-1, -2)
        if self._n == 0:
            self._kt, self._vt = kt, vt
        else:
            self._kt = torch.cat((self._kt, kt), -1)
            self._vt = torch.cat((self._vt, vt), -1)
        self._n += k.shape[-2]
        return self._kt.transpose(-1, -2), self._vt.transpose(-1, -2)


class KVCacheLenTensor:
    """Wrong: __len__ is len(self.k), which is the batch size B (len of a tensor is its dim 0)."""

    def __init__(self):
        self.k = None
        self.v = None

    def __len__(self):
        return 0 if self.k is None else len(self.k)

    def append(self, k, v):
        self.k = k if self.k is None else torch.cat([self.k, k], dim=-2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=-2)
        return self.k, self.v


class KVCacheCountAppends:
    """Wrong: __len__ counts append calls, not positions (wrong when a chunk has n > 1)."""

    def __init__(self):
        self.k = None
        self.v = None
        self.calls = 0

    def __len__(self):
        return self.calls

    def append(self, k, v):
        self.calls += 1
        self.k = k if self.k is None else torch.cat([self.k, k], dim=-2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=-2)
        return self.k, self.v


class KVCacheSharedClassList:
    """Wrong: the lists live on the class, so every cache (one per layer) shares them."""

    keys = []
    values = []

    def __len__(self):
        return sum(k.shape[-2] for k in self.keys)

    def append(self, k, v):
        self.keys.append(k)
        self.values.append(v)
        return torch.cat(self.keys, dim=-2), torch.cat(self.values, dim=-2)


class KVCacheValuesFromKeys:
    """Wrong: copy-paste slip, the values are joined with the keys' old tensor (self.k)."""

    def __init__(self):
        self.k = None
        self.v = None

    def __len__(self):
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k, v):
        if self.k is None:
            self.k, self.v = k, v
        else:
            old_k = self.k
            self.k = torch.cat([old_k, k], dim=-2)
            self.v = torch.cat([old_k[..., : v.shape[-1]], v], dim=-2)
        return self.k, self.v


class KVCacheHeadsAxis:
    """Wrong: joins along dim=1 (the heads) instead of the positions."""

    def __init__(self):
        self.k = None
        self.v = None

    def __len__(self):
        return 0 if self.k is None else self.k.shape[1]

    def append(self, k, v):
        self.k = k if self.k is None else torch.cat([self.k, k], dim=1)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=1)
        return self.k, self.v


class KVCacheEmptyFloat32:
    """Wrong: starts from torch.empty(0) (float32, CPU), so half keys come back float32."""

    def __init__(self):
        self.k = torch.empty(0)
        self.v = torch.empty(0)

    def __len__(self):
        return 0 if self.k.dim() == 1 else self.k.shape[-2]

    def append(self, k, v):
        self.k = torch.cat([self.k, k], dim=-2)
        self.v = torch.cat([self.v, v], dim=-2)
        return self.k, self.v


class KVCacheLenRaisesWhenEmpty:
    """Wrong: __len__ reads self.k.shape[-2] even before any append (AttributeError on None)."""

    def __init__(self):
        self.k = None
        self.v = None

    def __len__(self):
        return self.k.shape[-2]

    def append(self, k, v):
        self.k = k if self.k is None else torch.cat([self.k, k], dim=-2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=-2)
        return self.k, self.v


class KVCacheReturnsNew:
    """Wrong: stores everything but append returns only the new k and v."""

    def __init__(self):
        self.k = None
        self.v = None

    def __len__(self):
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k, v):
        self.k = k if self.k is None else torch.cat([self.k, k], dim=-2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=-2)
        return k, v


# ---------------------------------------------------------------- training_flops


def _is_embedding(name):
    return name.split(".")[0] in ("wte", "wpe")


def training_flops_right(model, batch_size, block_size, n_steps):
    """Right: named_parameters without wte and wpe, times 6 and the tokens of every step."""
    N = sum(p.numel() for name, p in model.named_parameters() if not _is_embedding(name))
    return 6 * N * batch_size * block_size * n_steps


def training_flops_right2(model, batch_size, block_size, n_steps):
    """Right: every distinct parameter, less the two embedding tables found by identity."""
    skip = {id(model.wte.weight), id(model.wpe.weight)}
    seen, N = set(), 0
    for p in model.parameters():
        if id(p) in skip or id(p) in seen:
            continue
        seen.add(id(p))
        N += p.numel()
    D = n_steps * block_size * batch_size
    return float(6 * N) * D


def training_flops_state_dict(model, batch_size, block_size, n_steps):
    """Wrong: counts state_dict() less wte/wpe, so the tied lm_head.weight (and buffers) count."""
    N = sum(t.numel() for k, t in model.state_dict().items() if not _is_embedding(k))
    return 6 * N * batch_size * block_size * n_steps


def training_flops_tensor_count(model, batch_size, block_size, n_steps):
    """Wrong: N = the number of parameter TENSORS, not of parameters (len of the list)."""
    N = len([p for name, p in model.named_parameters() if not _is_embedding(name)])
    return 6 * N * batch_size * block_size * n_steps


def training_flops_only_wte(model, batch_size, block_size, n_steps):
    """Wrong: leaves out the token table but still counts the position table wpe."""
    N = sum(p.numel() for name, p in model.named_parameters() if not name.startswith("wte"))
    return 6 * N * batch_size * block_size * n_steps


def training_flops_blocks(model, batch_size, block_size, n_steps):
    """Wrong: counts model.blocks only, so the final LayerNorm ln_f is left out."""
    N = sum(p.numel() for p in model.blocks.parameters())
    return 6 * N * batch_size * block_size * n_steps


def training_flops_n_positions(model, batch_size, block_size, n_steps):
    """Wrong: the tokens per window taken from model.n_positions instead of block_size."""
    N = sum(p.numel() for name, p in model.named_parameters() if not _is_embedding(name))
    return 6 * N * batch_size * model.n_positions * n_steps


def training_flops_2nd(model, batch_size, block_size, n_steps):
    """Wrong: 2 FLOPs per parameter and token (forward only)."""
    N = sum(p.numel() for name, p in model.named_parameters() if not _is_embedding(name))
    return 2 * N * batch_size * block_size * n_steps


def training_flops_one_step(model, batch_size, block_size, n_steps):
    """Wrong: D is one step's tokens, n_steps is ignored."""
    N = sum(p.numel() for name, p in model.named_parameters() if not _is_embedding(name))
    return 6 * N * batch_size * block_size


def training_flops_windows(model, batch_size, block_size, n_steps):
    """Wrong: D counts windows (batch_size * n_steps), not their tokens."""
    N = sum(p.numel() for name, p in model.named_parameters() if not _is_embedding(name))
    return 6 * N * batch_size * n_steps


# ---------------------------------------------------------------- practice_transformers


class _Answer(str):
    """A string answer that carries a name and a one-line docstring for the benchmark."""

    def __new__(cls, value, name, doc):
        obj = super().__new__(cls, value)
        obj.__name__ = name
        obj.__doc__ = doc
        return obj


PRACTICE_RIGHT = _Answer(
    "C", "practice_C", "Right: a learned position table has no row past n_positions."
)
PRACTICE_RIGHT2 = _Answer("C", "practice_C_again", "Right: the same letter, C.")
PRACTICE_A = _Answer("A", "practice_A", "Wrong: A, attention dearer than the FFN at d=512, L=128.")
PRACTICE_B = _Answer("B", "practice_B", "Wrong: B, multi-head costs more than single-head.")
PRACTICE_D = _Answer("D", "practice_D", "Wrong: D, Transformers scale easily to long sequences.")


WRONG = {
    "shift_targets": [
        shift_targets_roll,
        shift_targets_truthy_pad,
        shift_targets_inplace,
        shift_targets_input_pad,
        shift_targets_long,
        shift_targets_batch_axis,
        shift_targets_drop_last,
        shift_targets_pad_before_only,
    ],
    "lm_loss": [
        lm_loss_all_positions,
        lm_loss_per_sequence,
        lm_loss_log_softmax_dim1,
        lm_loss_shift_again,
        lm_loss_positive_ids,
        lm_loss_log_of_softmax,
        lm_loss_keepdim,
        lm_loss_floor_div,
    ],
    "next_token_probs": [
        next_token_probs_exact_k,
        next_token_probs_k_ge_v_crash,
        next_token_probs_kth_index,
        next_token_probs_inplace,
        next_token_probs_float64,
        next_token_probs_p_one,
        next_token_probs_nucleus_at_t1,
        next_token_probs_softmax_dim0,
        next_token_probs_top_p_only_if_no_k,
    ],
    "sample_next": [
        sample_next_argmax,
        sample_next_no_generator,
        sample_next_squeeze_all,
        sample_next_b1,
        sample_next_double_temperature,
        sample_next_ignores_top_k,
        sample_next_default_seed,
        sample_next_global_seed,
        sample_next_int32,
    ],
    "KVCache": [
        KVCacheLenTensor,
        KVCacheCountAppends,
        KVCacheSharedClassList,
        KVCacheValuesFromKeys,
        KVCacheHeadsAxis,
        KVCacheEmptyFloat32,
        KVCacheLenRaisesWhenEmpty,
        KVCacheReturnsNew,
    ],
    "training_flops": [
        training_flops_state_dict,
        training_flops_tensor_count,
        training_flops_only_wte,
        training_flops_blocks,
        training_flops_n_positions,
        training_flops_2nd,
        training_flops_one_step,
        training_flops_windows,
    ],
    "practice_transformers": [PRACTICE_A, PRACTICE_B, PRACTICE_D],
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
    "shift_targets": shift_targets_right2,
    "lm_loss": lm_loss_right2,
    "next_token_probs": next_token_probs_right2,
    "sample_next": sample_next_right2,
    "KVCache": KVCacheRight2,
    "training_flops": training_flops_right2,
    "practice_transformers": PRACTICE_RIGHT2,
}
