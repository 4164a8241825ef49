"""Lesson 08 (GPT): held-out wrong and right implementations, from the exercise text only."""

import torch
import torch.nn.functional as F


class Answer(str):
    """A practice answer (a string) that carries a name and a one-line docstring."""

    def __new__(cls, value, name, doc):
        obj = super().__new__(cls, value)
        obj.__name__ = name
        obj.__doc__ = doc
        return obj


# ---------------------------------------------------------------- shift_targets


def shift_targets_full_like(idx, pad_id=None):
    """Right: full_like(-100), copy idx[:, 1:] into the first L - 1 columns, blank the padding."""
    targets = torch.full_like(idx, -100)
    targets[:, :-1] = idx[:, 1:]
    if pad_id is not None:
        targets[targets == pad_id] = -100
    return targets


def shift_targets_cat_where(idx, pad_id=None):
    """Right: torch.cat of idx[:, 1:] and a -100 column, then torch.where on the padding."""
    last = torch.full((idx.shape[0], 1), -100, dtype=idx.dtype, device=idx.device)
    targets = torch.cat([idx[:, 1:], last], dim=1)
    if pad_id is not None:
        targets = torch.where(targets == pad_id, torch.full_like(targets, -100), targets)
    return targets


def shift_targets_pad_of_input(idx, pad_id=None):
    """Wrong: blanks the positions whose *input* idx is padding, not those whose target is."""
    targets = torch.full_like(idx, -100)
    targets[:, :-1] = idx[:, 1:]
    if pad_id is not None:
        targets[idx == pad_id] = -100
    return targets


def shift_targets_alias(idx, pad_id=None):
    """Wrong: targets = idx is an alias, so the shift overwrites the caller's idx."""
    targets = idx
    targets[:, :-1] = idx[:, 1:].clone()
    targets[:, -1] = -100
    if pad_id is not None:
        targets[targets == pad_id] = -100
    return targets


def shift_targets_truthy_pad(idx, pad_id=None):
    """Wrong: `if pad_id:` skips the padding rule when pad_id is 0."""
    targets = torch.full_like(idx, -100)
    targets[:, :-1] = idx[:, 1:]
    if pad_id:
        targets[targets == pad_id] = -100
    return targets


def shift_targets_minus_one(idx, pad_id=None):
    """Wrong: marks the skipped positions with -1 instead of -100."""
    targets = torch.full_like(idx, -1)
    targets[:, :-1] = idx[:, 1:]
    if pad_id is not None:
        targets[targets == pad_id] = -1
    return targets


def shift_targets_default_dtype(idx, pad_id=None):
    """Wrong: torch.full(idx.shape, -100) has the default int64 dtype, not idx's."""
    targets = torch.full(idx.shape, -100)
    targets[:, :-1] = idx[:, 1:]
    if pad_id is not None:
        targets[targets == pad_id] = -100
    return targets


def shift_targets_batch_axis(idx, pad_id=None):
    """Wrong: shifts along the batch axis, targets[:-1] = idx[1:]."""
    targets = torch.full_like(idx, -100)
    targets[:-1] = idx[1:]
    if pad_id is not None:
        targets[targets == pad_id] = -100
    return targets


def shift_targets_drop_last(idx, pad_id=None):
    """Wrong: returns idx[:, 1:] (B, L - 1) with no -100 column for the last position."""
    targets = idx[:, 1:].clone()
    if pad_id is not None:
        targets[targets == pad_id] = -100
    return targets


# ---------------------------------------------------------------- lm_loss


def lm_loss_gather(logits, targets):
    """Right: log_softmax, gather at the clamped targets, masked sum over the count."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets != -100
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() / keep.sum()


def lm_loss_select_first(logits, targets):
    """Right: select the counted positions first, then index with arange."""
    keep = targets != -100
    z = logits[keep]
    y = targets[keep]
    logp = z - torch.logsumexp(z, dim=-1, keepdim=True)
    return -logp[torch.arange(len(y)), y].mean()


def lm_loss_dim1(logits, targets):
    """Wrong: log_softmax over dim=1, the sequence axis of (B, L, V)."""
    logp = torch.log_softmax(logits, dim=1)
    keep = targets != -100
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() / keep.sum()


def lm_loss_positive_targets(logits, targets):
    """Wrong: counts only targets > 0, so token id 0 is never scored."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets > 0
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() / keep.sum()


def lm_loss_naive_logsumexp(logits, targets):
    """Wrong: log-softmax by hand as z - log(sum(exp(z))), without subtracting the max."""
    logp = logits - logits.exp().sum(-1, keepdim=True).log()
    keep = targets != -100
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() / keep.sum()


def lm_loss_python_float(logits, targets):
    """Wrong: returns .item(), a Python float, not a 0-dim tensor."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets != -100
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (-(picked * keep).sum() / keep.sum()).item()


def lm_loss_gather_dim1(logits, targets):
    """Wrong: gathers along dim 1 (the positions) instead of the vocabulary axis."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets != -100
    picked = logp.gather(1, targets.clamp(min=0).unsqueeze(1)).squeeze(1)
    return -(picked * keep).sum() / keep.sum()


def lm_loss_clamped_not_masked(logits, targets):
    """Wrong: clamps -100 to class 0 and sums every position, dividing by the counted ones."""
    logp = torch.log_softmax(logits, dim=-1)
    keep = targets != -100
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -picked.sum() / keep.sum()


# ---------------------------------------------------------------- next_token_probs


def next_token_probs_masks(logits, temperature=1.0, top_k=None, top_p=None):
    """Right: divide by T, top-k threshold, sorted nucleus threshold, softmax."""
    if temperature == 0:
        return F.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    z = logits / temperature
    V = z.shape[-1]
    if top_k is not None and top_k < V:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        probs = torch.softmax(z, dim=-1)
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        keep_sorted = (torch.cumsum(sorted_p, dim=-1) - sorted_p) < top_p
        sorted_z = z.gather(-1, order)
        smallest = sorted_z.masked_fill(~keep_sorted, float("inf")).min(-1, keepdim=True).values
        z = z.masked_fill(z < smallest, float("-inf"))
    return torch.softmax(z, dim=-1)


def next_token_probs_rows(logits, temperature=1.0, top_k=None, top_p=None):
    """Right: row by row in Python, thresholds read off a descending sort."""
    out = torch.empty_like(logits)
    for b in range(logits.shape[0]):
        row = logits[b]
        if temperature == 0:
            p = torch.zeros_like(row)
            p[row.argmax()] = 1
            out[b] = p
            continue
        z = row / temperature
        keep = torch.ones_like(z, dtype=torch.bool)
        if top_k is not None and top_k < z.numel():
            kth = torch.sort(z, descending=True).values[top_k - 1]
            keep = keep & (z >= kth)
        z = torch.where(keep, z, torch.full_like(z, float("-inf")))
        if top_p is not None and top_p < 1:
            p = torch.softmax(z, dim=0)
            sp, order = torch.sort(p, descending=True)
            before = 0.0
            last = None
            for i, prob in enumerate(sp.detach().tolist()):
                if before < top_p:
                    last = order[i]
                    before += prob
                else:
                    break
            keep = keep & (z >= z[last])
            z = torch.where(keep, z, torch.full_like(z, float("-inf")))
        out[b] = torch.softmax(z, dim=0)
    return out


def next_token_probs_global_topk(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: top-k threshold taken over the whole batch (flattened), not per row."""
    if temperature == 0:
        return F.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = torch.topk(z.flatten(), top_k).values[-1]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        probs = torch.softmax(z, dim=-1)
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        keep_sorted = (sorted_p.cumsum(-1) - sorted_p) < top_p
        sorted_z = z.gather(-1, order)
        smallest = sorted_z.masked_fill(~keep_sorted, float("inf")).min(-1, keepdim=True).values
        z = z.masked_fill(z < smallest, float("-inf"))
    return torch.softmax(z, dim=-1)


def next_token_probs_falsy_temperature(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: `if temperature:` skips the division at T = 0, so greedy becomes a plain softmax."""
    z = logits
    if temperature:
        z = z / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        probs = torch.softmax(z, dim=-1)
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        keep_sorted = (sorted_p.cumsum(-1) - sorted_p) < top_p
        sorted_z = z.gather(-1, order)
        smallest = sorted_z.masked_fill(~keep_sorted, float("inf")).min(-1, keepdim=True).values
        z = z.masked_fill(z < smallest, float("-inf"))
    return torch.softmax(z, dim=-1)


def next_token_probs_topk_unbounded(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: calls topk(top_k) without the k >= V case, which raises for k > V."""
    if temperature == 0:
        return F.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    z = logits / temperature
    if top_k is not None:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        probs = torch.softmax(z, dim=-1)
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        keep_sorted = (sorted_p.cumsum(-1) - sorted_p) < top_p
        sorted_z = z.gather(-1, order)
        smallest = sorted_z.masked_fill(~keep_sorted, float("inf")).min(-1, keepdim=True).values
        z = z.masked_fill(z < smallest, float("-inf"))
    return torch.softmax(z, dim=-1)


def next_token_probs_greedy_int(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: the T = 0 one-hot row is F.one_hot's int64, not logits' dtype."""
    if temperature == 0:
        return F.one_hot(logits.argmax(-1), logits.shape[-1])
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        probs = torch.softmax(z, dim=-1)
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        keep_sorted = (sorted_p.cumsum(-1) - sorted_p) < top_p
        sorted_z = z.gather(-1, order)
        smallest = sorted_z.masked_fill(~keep_sorted, float("inf")).min(-1, keepdim=True).values
        z = z.masked_fill(z < smallest, float("-inf"))
    return torch.softmax(z, dim=-1)


def next_token_probs_inplace(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: divides and masks the caller's logits in place."""
    if temperature == 0:
        return F.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    z = logits
    z /= temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z[z < kth] = float("-inf")
    if top_p is not None and top_p < 1:
        probs = torch.softmax(z, dim=-1)
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        keep_sorted = (sorted_p.cumsum(-1) - sorted_p) < top_p
        sorted_z = z.gather(-1, order)
        smallest = sorted_z.masked_fill(~keep_sorted, float("inf")).min(-1, keepdim=True).values
        z[z < smallest] = float("-inf")
    return torch.softmax(z, dim=-1)


def next_token_probs_first_row_nucleus(logits, temperature=1.0, top_k=None, top_p=None):
    """Wrong: the nucleus size is counted on row 0 and used as a fixed k for every row."""
    if temperature == 0:
        return F.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        probs = torch.softmax(z, dim=-1)
        sorted_p, _ = torch.sort(probs, dim=-1, descending=True)
        n_keep = int(((sorted_p.cumsum(-1) - sorted_p) < top_p)[0].sum())
        kth = torch.topk(z, n_keep, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    return torch.softmax(z, dim=-1)


# ---------------------------------------------------------------- sample_next


def sample_next_multinomial(logits, temperature=1.0, top_k=None, generator=None):
    """Right: torch.multinomial on next_token_probs, squeezed to (B,)."""
    probs = next_token_probs_masks(logits, temperature, top_k)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)


def sample_next_inverse_cdf(logits, temperature=1.0, top_k=None, generator=None):
    """Right: inverse-CDF sampling, searchsorted of a uniform draw in the cumulative sum."""
    probs = next_token_probs_masks(logits, temperature, top_k).to(torch.float64)
    cdf = probs.cumsum(-1)
    u = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device, dtype=torch.float64)
    ids = torch.searchsorted(cdf, u * cdf[:, -1:], right=True)
    return ids.squeeze(-1).clamp(max=probs.shape[-1] - 1).long()


def sample_next_args_swapped(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: passes (top_k, temperature) to next_token_probs in the wrong order."""
    probs = next_token_probs_masks(logits, top_k, temperature)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def sample_next_squeeze_all(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: .squeeze() with no axis gives a 0-dim tensor when B = 1."""
    probs = next_token_probs_masks(logits, temperature, top_k)
    return torch.multinomial(probs, 1, generator=generator).squeeze()


def sample_next_int32(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: converts the ids to int32 with .int()."""
    probs = next_token_probs_masks(logits, temperature, top_k)
    return torch.multinomial(probs, 1, generator=generator).view(-1).int()


def sample_next_fresh_generator(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: builds a new generator from generator.initial_seed(), so every call repeats its draws."""
    probs = next_token_probs_masks(logits, temperature, top_k)
    if generator is not None:
        generator = torch.Generator(device=logits.device).manual_seed(generator.initial_seed())
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


def sample_next_double_temperature(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: divides by the temperature, then next_token_probs divides again."""
    scaled = logits / temperature if temperature > 0 else logits
    probs = next_token_probs_masks(scaled, temperature, top_k)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


def sample_next_no_top_k(logits, temperature=1.0, top_k=None, generator=None):
    """Wrong: top_k is not passed on to next_token_probs."""
    probs = next_token_probs_masks(logits, temperature)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


# ---------------------------------------------------------------- KVCache


class KVCacheCat:
    """Right: two tensors (None when empty) grown with torch.cat on axis -2."""

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


class KVCacheChunks:
    """Right: a list of chunks, concatenated on demand; len sums the chunk lengths."""

    def __init__(self):
        self.chunks = []

    def __len__(self):
        return sum(k.size(2) for k, _ in self.chunks)

    def append(self, k, v):
        self.chunks.append((k, v))
        keys = torch.cat([c[0] for c in self.chunks], dim=2)
        values = torch.cat([c[1] for c in self.chunks], dim=2)
        return keys, values


class KVCacheBatchAxis:
    """Wrong: concatenates along axis 0 (the batch) instead of the positions."""

    def __init__(self):
        self.k = None
        self.v = None

    def __len__(self):
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k, v):
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([self.k, k], dim=0)
            self.v = torch.cat([self.v, v], dim=0)
        return self.k, self.v


class KVCacheCountsAppends:
    """Wrong: len(cache) counts the append calls, not the cached positions."""

    def __init__(self):
        self.k = None
        self.v = None
        self.n_appends = 0

    def __len__(self):
        return self.n_appends

    def append(self, k, v):
        self.n_appends += 1
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([self.k, k], dim=-2)
            self.v = torch.cat([self.v, v], dim=-2)
        return self.k, self.v


class KVCacheValuesTypo:
    """Wrong: a copy-paste slip appends the new keys to the values."""

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
            self.v = torch.cat([self.v, k], dim=-2)
        return self.k, self.v


class KVCacheSharedClassLists:
    """Wrong: the chunk lists are class attributes, shared by every cache instance."""

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


class KVCacheLenWhenEmpty:
    """Wrong: __len__ reads self.k.shape[-2] even when nothing is cached (None)."""

    def __init__(self):
        self.k = None
        self.v = None

    def __len__(self):
        return self.k.shape[-2]

    def append(self, k, v):
        self.k = k if self.k is None else torch.cat([self.k, k], dim=-2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=-2)
        return self.k, self.v


class KVCacheKeepsLastChunk:
    """Wrong: stores only the newest chunk, so only the previous step survives."""

    def __init__(self):
        self.k = None
        self.v = None
        self.n = 0

    def __len__(self):
        return self.n

    def append(self, k, v):
        self.n += k.shape[-2]
        if self.k is None:
            keys, values = k, v
        else:
            keys = torch.cat([self.k, k], dim=-2)
            values = torch.cat([self.v, v], dim=-2)
        self.k, self.v = k, v
        return keys, values


# ---------------------------------------------------------------- training_flops


def training_flops_by_name(model, batch_size, block_size, n_steps):
    """Right: named_parameters, skipping the names under wte and wpe."""
    n = sum(
        p.numel()
        for name, p in model.named_parameters()
        if not (name.startswith("wte.") or name.startswith("wpe."))
    )
    return 6 * n * batch_size * block_size * n_steps


def training_flops_by_identity(model, batch_size, block_size, n_steps):
    """Right: all parameters minus the two embedding tables, compared by identity."""
    tables = {id(model.wte.weight), id(model.wpe.weight)}
    n = 0
    for p in model.parameters():
        if id(p) not in tables:
            n += p.numel()
    tokens = n_steps * batch_size * block_size
    return 6 * n * tokens


def training_flops_state_dict(model, batch_size, block_size, n_steps):
    """Wrong: counts from state_dict(), so the tied lm_head.weight is counted as a parameter."""
    n = sum(
        t.numel() for name, t in model.state_dict().items() if not name.startswith(("wte.", "wpe."))
    )
    return 6 * n * batch_size * block_size * n_steps


def training_flops_matrices_only(model, batch_size, block_size, n_steps):
    """Wrong: counts only the weight matrices (p.dim() >= 2), leaving out biases and LayerNorms."""
    n = sum(
        p.numel()
        for name, p in model.named_parameters()
        if p.dim() >= 2 and not name.startswith(("wte", "wpe"))
    )
    return 6 * n * batch_size * block_size * n_steps


def training_flops_tensor_count(model, batch_size, block_size, n_steps):
    """Wrong: N is the number of parameter tensors, not of parameters."""
    n = len([p for name, p in model.named_parameters() if not name.startswith(("wte", "wpe"))])
    return 6 * n * batch_size * block_size * n_steps


def training_flops_predicted_tokens(model, batch_size, block_size, n_steps):
    """Wrong: D counts only the block_size - 1 predicted positions of each window."""
    n = sum(
        p.numel() for name, p in model.named_parameters() if not name.startswith(("wte", "wpe"))
    )
    return 6 * n * batch_size * (block_size - 1) * n_steps


def training_flops_embed_substring(model, batch_size, block_size, n_steps):
    """Wrong: skips names containing 'emb', which matches neither wte nor wpe."""
    n = sum(p.numel() for name, p in model.named_parameters() if "emb" not in name)
    return 6 * n * batch_size * block_size * n_steps


def training_flops_skips_head_not_wte(model, batch_size, block_size, n_steps):
    """Wrong: leaves out wpe and lm_head, but keeps wte in N."""
    n = sum(
        p.numel() for name, p in model.named_parameters() if not name.startswith(("wpe", "lm_head"))
    )
    return 6 * n * batch_size * block_size * n_steps


# ---------------------------------------------------------------- practice_transformers

practice_right = Answer(
    "C", "practice_c", "Right: a learned position table has no row past n_positions."
)
practice_right2 = Answer(
    "ABCD"[2], "practice_c_indexed", "Right: the third statement, C, picked by index."
)
practice_wrong = [
    Answer("A", "practice_a", "Wrong: thinks attention costs more than the FFN at L = 128."),
    Answer("B", "practice_b", "Wrong: thinks more heads cost more computation."),
    Answer("D", "practice_d", "Wrong: thinks Transformers scale easily to long sequences."),
    Answer("C, D", "practice_c_and_d", "Wrong: gives two letters where one was asked for."),
]

WRONG = {
    "shift_targets": [
        shift_targets_pad_of_input,
        shift_targets_alias,
        shift_targets_truthy_pad,
        shift_targets_minus_one,
        shift_targets_default_dtype,
        shift_targets_batch_axis,
        shift_targets_drop_last,
    ],
    "lm_loss": [
        lm_loss_dim1,
        lm_loss_positive_targets,
        lm_loss_naive_logsumexp,
        lm_loss_python_float,
        lm_loss_gather_dim1,
        lm_loss_clamped_not_masked,
    ],
    "next_token_probs": [
        next_token_probs_global_topk,
        next_token_probs_falsy_temperature,
        next_token_probs_topk_unbounded,
        next_token_probs_greedy_int,
        next_token_probs_inplace,
        next_token_probs_first_row_nucleus,
    ],
    "sample_next": [
        sample_next_args_swapped,
        sample_next_squeeze_all,
        sample_next_int32,
        sample_next_fresh_generator,
        sample_next_double_temperature,
        sample_next_no_top_k,
    ],
    "KVCache": [
        KVCacheBatchAxis,
        KVCacheCountsAppends,
        KVCacheValuesTypo,
        KVCacheSharedClassLists,
        KVCacheLenWhenEmpty,
        KVCacheKeepsLastChunk,
    ],
    "training_flops": [
        training_flops_state_dict,
        training_flops_matrices_only,
        training_flops_tensor_count,
        training_flops_predicted_tokens,
        training_flops_embed_substring,
        training_flops_skips_head_not_wte,
    ],
    "practice_transformers": practice_wrong,
}

RIGHT = {
    "shift_targets": shift_targets_full_like,
    "lm_loss": lm_loss_gather,
    "next_token_probs": next_token_probs_masks,
    "sample_next": sample_next_multinomial,
    "KVCache": KVCacheCat,
    "training_flops": training_flops_by_name,
    "practice_transformers": practice_right,
}

RIGHT2 = {
    "shift_targets": shift_targets_cat_where,
    "lm_loss": lm_loss_select_first,
    "next_token_probs": next_token_probs_rows,
    "sample_next": sample_next_inverse_cdf,
    "KVCache": KVCacheChunks,
    "training_flops": training_flops_by_identity,
    "practice_transformers": practice_right2,
}
