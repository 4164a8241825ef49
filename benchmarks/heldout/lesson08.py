"""Lesson 08: targets, loss, sampling, KV cache."""

import torch


def shift_right(idx, pad_id=None):
    """Correct."""
    t = torch.full_like(idx, -100)
    t[:, :-1] = idx[:, 1:]
    if pad_id is not None:
        t[t == pad_id] = -100
    return t


def shift_mutates_input(idx, pad_id=None):
    """Masks the padding in idx itself (idx[idx == pad_id] = -100) before shifting."""
    if pad_id is not None:
        idx[idx == pad_id] = -100
    t = torch.full_like(idx, -100)
    t[:, :-1] = idx[:, 1:]
    return t


def shift_pad_on_inputs(idx, pad_id=None):
    """Masks targets where the INPUT is padding, not where the target is."""
    t = torch.full_like(idx, -100)
    t[:, :-1] = idx[:, 1:]
    if pad_id is not None:
        t[idx == pad_id] = -100
    return t


def shift_pad_falsy(idx, pad_id=None):
    """Tests `if pad_id:`, so pad_id = 0 is ignored."""
    t = torch.full_like(idx, -100)
    t[:, :-1] = idx[:, 1:]
    if pad_id:
        t[t == pad_id] = -100
    return t


def shift_along_batch(idx, pad_id=None):
    """Shifts along the batch axis (idx[1:] instead of idx[:, 1:])."""
    t = torch.full_like(idx, -100)
    t[:-1] = idx[1:]
    if pad_id is not None:
        t[t == pad_id] = -100
    return t


def shift_drops_last(idx, pad_id=None):
    """Returns idx[:, 1:] (shape (B, L - 1)) with no -100 column."""
    t = idx[:, 1:].clone()
    if pad_id is not None:
        t[t == pad_id] = -100
    return t


def lm_loss_right(logits, targets):
    """Correct."""
    lp = torch.log_softmax(logits, dim=-1)
    keep = targets != -100
    picked = lp.gather(-1, targets.clamp(min=0)[..., None])[..., 0]
    return -(picked * keep).sum() / keep.sum()


def lm_loss_clamp_counts_all(logits, targets):
    """Clamps -100 to 0 and averages over every position (skipped positions count as token 0)."""
    lp = torch.log_softmax(logits, dim=-1)
    return -lp.gather(-1, targets.clamp(min=0)[..., None]).mean()


def lm_loss_log_softmax_wrong_axis(logits, targets):
    """log_softmax over the positions axis (dim=1)."""
    lp = torch.log_softmax(logits, dim=1)
    keep = targets != -100
    picked = lp.gather(-1, targets.clamp(min=0)[..., None])[..., 0]
    return -(picked * keep).sum() / keep.sum()


def lm_loss_naive_log(logits, targets):
    """torch.log(torch.softmax(...)): -inf for very unlikely targets."""
    lp = torch.log(torch.softmax(logits, dim=-1))
    keep = targets != -100
    picked = lp.gather(-1, targets.clamp(min=0)[..., None])[..., 0]
    return -(picked[keep]).sum() / keep.sum()


def lm_loss_divide_by_batch(logits, targets):
    """Sums over the counted positions, divides by B (the number of sequences)."""
    lp = torch.log_softmax(logits, dim=-1)
    keep = targets != -100
    picked = lp.gather(-1, targets.clamp(min=0)[..., None])[..., 0]
    return -(picked * keep).sum() / targets.shape[0]


def lm_loss_python_float(logits, targets):
    """Returns a Python float (.item()), not a tensor."""
    return lm_loss_right(logits, targets).item()


def lm_loss_mean_probability(logits, targets):
    """Averages the probabilities, then takes -log of the mean."""
    p = torch.softmax(logits, dim=-1)
    keep = targets != -100
    picked = p.gather(-1, targets.clamp(min=0)[..., None])[..., 0]
    return -torch.log((picked * keep).sum() / keep.sum())


def probs_right(logits, temperature=1.0, top_k=None, top_p=None):
    """Correct (top_p added by the lead when the exercise gained nucleus sampling: the smallest
    set of most likely tokens whose mass reaches p, ties with the last kept token kept)."""
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        p = torch.softmax(z, dim=-1)
        sorted_p = p.sort(dim=-1, descending=True).values
        kept = (sorted_p.cumsum(-1) - sorted_p) < top_p
        smallest = sorted_p.masked_fill(~kept, float("inf")).min(-1, keepdim=True).values
        z = z.masked_fill(p < smallest, float("-inf"))
    return torch.softmax(z, dim=-1)


def probs_no_renormalise(logits, temperature=1.0, top_k=None):
    """Softmax over all logits, then zeroes the tail without renormalising."""
    if temperature == 0:
        return probs_right(logits, 0)
    p = torch.softmax(logits / temperature, dim=-1)
    if top_k is not None and top_k < p.shape[-1]:
        kth = torch.topk(p, top_k, dim=-1).values[..., -1:]
        p = p * (p >= kth)
    return p


def probs_topk_before_temperature_fill(logits, temperature=1.0, top_k=None):
    """Fills the tail with -1e4 (finite), so far-away logits still get tiny mass at high T."""
    if temperature == 0:
        return probs_right(logits, 0)
    z = logits.clone()
    if top_k is not None and top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, -1e4)
    return torch.softmax(z / temperature, dim=-1)


def probs_topk_global(logits, temperature=1.0, top_k=None):
    """Takes the k-th largest over the whole batch (topk of flattened logits)."""
    if temperature == 0:
        return probs_right(logits, 0)
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = torch.topk(z.flatten(), top_k).values[-1]
        z = z.masked_fill(z < kth, float("-inf"))
    return torch.softmax(z, dim=-1)


def probs_temperature_zero_uniform(logits, temperature=1.0, top_k=None):
    """Treats temperature 0 as 'no temperature' (T = 1)."""
    return probs_right(logits, temperature or 1.0, top_k)


def probs_topk_scatter_kth(logits, temperature=1.0, top_k=None):
    """Keeps exactly the topk indices via scatter (ties at the k-th dropped) and breaks top_k >= V."""
    if temperature == 0:
        return probs_right(logits, 0)
    z = logits / temperature
    if top_k is not None:
        idx = torch.topk(z, min(top_k, z.shape[-1]), dim=-1).indices
        keep = torch.zeros_like(z, dtype=torch.bool).scatter(-1, idx, True)
        z = z.masked_fill(~keep, float("-inf"))
    return torch.softmax(z, dim=-1)


def sample_right(logits, temperature=1.0, top_k=None, generator=None):
    """Correct."""
    p = probs_right(logits, temperature, top_k)
    return torch.multinomial(p, 1, generator=generator)[:, 0]


def sample_argmax_of_probs_noise(logits, temperature=1.0, top_k=None, generator=None):
    """Adds uniform noise to the probabilities and takes the argmax (not a real sample)."""
    p = probs_right(logits, temperature, top_k)
    u = torch.rand(p.shape, generator=generator, dtype=p.dtype)
    return (p + 0.5 * u * (p > 0)).argmax(-1)


def sample_squeeze(logits, temperature=1.0, top_k=None, generator=None):
    """squeeze() the (B, 1) draws: a batch of one gives a 0-d tensor."""
    p = probs_right(logits, temperature, top_k)
    return torch.multinomial(p, 1, generator=generator).squeeze()


def sample_logits_as_weights(logits, temperature=1.0, top_k=None, generator=None):
    """With T = 1 and no top-k, draws from exp(logits) unnormalised: overflows to inf for large logits."""
    if temperature == 1.0 and top_k is None:
        return torch.multinomial(logits.exp(), 1, generator=generator)[:, 0]
    return sample_right(logits, temperature, top_k, generator)


def sample_int32(logits, temperature=1.0, top_k=None, generator=None):
    """Returns int32 ids."""
    return sample_right(logits, temperature, top_k, generator).int()


def sample_gumbel_no_generator(logits, temperature=1.0, top_k=None, generator=None):
    """Gumbel-max trick with torch's global RNG (generator ignored)."""
    p = probs_right(logits, temperature, top_k)
    g = -torch.log(-torch.log(torch.rand_like(p)))
    return (torch.log(p) + g).argmax(-1)


class KVCacheRight:
    """Correct."""

    def __init__(self):
        self.k = self.v = None

    def __len__(self):
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k, v):
        self.k = k if self.k is None else torch.cat([self.k, k], dim=-2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=-2)
        return self.k, self.v


class KVCacheListLen(KVCacheRight):
    """Keeps a list of chunks; len() is the number of append calls."""

    def __init__(self):
        self.ks, self.vs = [], []

    def __len__(self):
        return len(self.ks)

    def append(self, k, v):
        self.ks.append(k)
        self.vs.append(v)
        return torch.cat(self.ks, dim=-2), torch.cat(self.vs, dim=-2)


class KVCacheDetached(KVCacheRight):
    """Stores detached copies."""

    def append(self, k, v):
        return super().append(k.detach(), v.detach())


class KVCacheSharedClassState:
    """Stores the keys in class attributes: every cache (one per layer) shares them."""

    k = None
    v = None

    def __len__(self):
        return 0 if KVCacheSharedClassState.k is None else KVCacheSharedClassState.k.shape[-2]

    def append(self, k, v):
        c = KVCacheSharedClassState
        c.k = k if c.k is None else torch.cat([c.k, k], dim=-2)
        c.v = v if c.v is None else torch.cat([c.v, v], dim=-2)
        return c.k, c.v


WRONG = {
    "shift_targets": [
        shift_mutates_input,
        shift_pad_on_inputs,
        shift_pad_falsy,
        shift_along_batch,
        shift_drops_last,
    ],
    "lm_loss": [
        lm_loss_clamp_counts_all,
        lm_loss_log_softmax_wrong_axis,
        lm_loss_naive_log,
        lm_loss_divide_by_batch,
        lm_loss_python_float,
        lm_loss_mean_probability,
    ],
    "next_token_probs": [
        probs_no_renormalise,
        probs_topk_before_temperature_fill,
        probs_topk_global,
        probs_temperature_zero_uniform,
        probs_topk_scatter_kth,
    ],
    "sample_next": [
        sample_argmax_of_probs_noise,
        sample_squeeze,
        sample_logits_as_weights,
        sample_int32,
        sample_gumbel_no_generator,
    ],
    "KVCache": [KVCacheListLen, KVCacheDetached, KVCacheSharedClassState],
}
RIGHT = {
    "shift_targets": shift_right,
    "lm_loss": lm_loss_right,
    "next_token_probs": probs_right,
    "sample_next": sample_right,
    "KVCache": KVCacheRight,
}
