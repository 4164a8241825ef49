"""Lesson 10 (BART): held-out wrong and right implementations, from the exercise text."""

import torch

# ---------------------------------------------------------------- text_infilling


def _poisson(lam, generator):
    return int(torch.poisson(torch.tensor([float(lam)]), generator=generator).item())


def _span_lengths(n_mask, lam, generator, cut=True, keep_zero=True):
    lengths, total = [], 0
    while total < n_mask:
        k = _poisson(lam, generator)
        if k == 0 and not keep_zero:
            continue
        lengths.append(k)
        total += k
    if cut:
        lengths[-1] -= total - n_mask
    return lengths


def _assemble(tokens, lengths, gaps, mask_id, dtype=None):
    """Walk through the gaps: a mask and a skipped span at a chosen gap, then one kept token."""
    span_at = {}
    for g, k in zip(gaps, lengths):
        span_at[g] = span_at.get(g, 0) + k
    n_kept = len(tokens) - sum(lengths)
    out, i = [], 0
    for g in range(n_kept + 1):
        if g in span_at:
            out.append(mask_id)
            i += span_at[g]
        if g < n_kept:
            out.append(int(tokens[i]))
            i += 1
    return torch.tensor(out, dtype=dtype or tokens.dtype, device=tokens.device)


def infill_right(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Right: a Python walk through the gaps, gaps drawn with randperm."""
    L = len(tokens)
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    lengths = _span_lengths(n_mask, lam, generator)
    n_gaps = L - n_mask + 1
    if len(lengths) > n_gaps:
        lengths = lengths[: n_gaps - 1] + [sum(lengths[n_gaps - 1 :])]
    gaps = torch.randperm(n_gaps, generator=generator)[: len(lengths)].tolist()
    return _assemble(tokens, lengths, gaps, mask_id)


def infill_right2(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Right: Poisson draws in batches, sorted gaps, output built from slices with torch.cat."""
    L = tokens.shape[0]
    n_mask = int(round(p * L))
    if n_mask == 0:
        return tokens.clone()
    draws = torch.empty(0, dtype=torch.long)
    while int(draws.sum()) < n_mask:
        more = torch.poisson(torch.full((n_mask + 1,), float(lam)), generator=generator)
        draws = torch.cat([draws, more.long()])
    cum = torch.cumsum(draws, 0)
    n_spans = int((cum < n_mask).sum()) + 1
    lengths = draws[:n_spans].clone()
    lengths[-1] = n_mask - (cum[n_spans - 2] if n_spans > 1 else 0)
    n_gaps = L - n_mask + 1
    if n_spans > n_gaps:
        lengths[0] += lengths[n_gaps:].sum()
        lengths = lengths[:n_gaps]
    order = torch.randperm(n_gaps, generator=generator)[: len(lengths)]
    gaps, perm = torch.sort(order)
    lengths = lengths[perm]
    mask = torch.tensor([mask_id], dtype=tokens.dtype, device=tokens.device)
    parts, src, kept_done = [], 0, 0
    for g, k in zip(gaps.tolist(), lengths.tolist()):
        take = g - kept_done
        parts += [tokens[src : src + take], mask]
        src += take + k
        kept_done = g
    parts.append(tokens[src:])
    return torch.cat(parts)


def infill_floor(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """n_mask = int(p * L): rounds down instead of to the nearest."""
    L = len(tokens)
    n_mask = int(p * L)
    if n_mask == 0:
        return tokens.clone()
    lengths = _span_lengths(n_mask, lam, generator)
    n_gaps = L - n_mask + 1
    if len(lengths) > n_gaps:
        lengths = lengths[: n_gaps - 1] + [sum(lengths[n_gaps - 1 :])]
    gaps = torch.randperm(n_gaps, generator=generator)[: len(lengths)].tolist()
    return _assemble(tokens, lengths, gaps, mask_id)


def infill_gaps_with_replacement(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Draws each span's gap with torch.randint: two spans can land in the same gap."""
    L = len(tokens)
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    lengths = _span_lengths(n_mask, lam, generator)
    n_gaps = L - n_mask + 1
    gaps = torch.randint(0, n_gaps, (len(lengths),), generator=generator).tolist()
    return _assemble(tokens, lengths, gaps, mask_id)


def infill_no_cut(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Keeps the last span whole, so more than n_mask tokens are removed."""
    L = len(tokens)
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    lengths = _span_lengths(n_mask, lam, generator, cut=False)
    while sum(lengths) > L:
        lengths[-1] -= 1
    n_gaps = L - sum(lengths) + 1
    if len(lengths) > n_gaps:
        lengths = lengths[: n_gaps - 1] + [sum(lengths[n_gaps - 1 :])]
    gaps = torch.randperm(n_gaps, generator=generator)[: len(lengths)].tolist()
    return _assemble(tokens, lengths, gaps, mask_id)


def infill_distributions_poisson(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Draws the span lengths with torch.distributions.Poisson(lam).sample(), not the generator."""
    L = len(tokens)
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    dist = torch.distributions.Poisson(torch.tensor(float(lam)))
    lengths, total = [], 0
    while total < n_mask:
        k = int(dist.sample())
        lengths.append(k)
        total += k
    lengths[-1] -= total - n_mask
    n_gaps = L - n_mask + 1
    if len(lengths) > n_gaps:
        lengths = lengths[: n_gaps - 1] + [sum(lengths[n_gaps - 1 :])]
    gaps = torch.randperm(n_gaps, generator=generator)[: len(lengths)].tolist()
    return _assemble(tokens, lengths, gaps, mask_id)


def infill_int64(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Builds the output with torch.tensor(list), int64 whatever the input's dtype."""
    L = len(tokens)
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    lengths = _span_lengths(n_mask, lam, generator)
    n_gaps = L - n_mask + 1
    if len(lengths) > n_gaps:
        lengths = lengths[: n_gaps - 1] + [sum(lengths[n_gaps - 1 :])]
    gaps = torch.randperm(n_gaps, generator=generator)[: len(lengths)].tolist()
    return _assemble(tokens, lengths, gaps, mask_id, dtype=torch.long)


def infill_returns_input(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """With nothing to remove, returns the input tensor itself rather than a copy."""
    L = len(tokens)
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens
    return infill_right(tokens, mask_id, p, lam, generator)


# ---------------------------------------------------------------- sentence_permutation


def _split(tokens, eos_id):
    ends = (tokens == eos_id).nonzero().reshape(-1).tolist()
    sentences, start = [], 0
    for e in ends:
        sentences.append(tokens[start : e + 1])
        start = e + 1
    return sentences, tokens[start:]


def perm_right(tokens, eos_id, generator=None):
    """Right: split after each eos_id, randperm, cat with the unfinished tail."""
    sentences, tail = _split(tokens, eos_id)
    if not sentences:
        return tokens.clone()
    order = torch.randperm(len(sentences), generator=generator).tolist()
    return torch.cat([sentences[i] for i in order] + [tail])


def perm_right2(tokens, eos_id, generator=None):
    """Right: sentence ids per token, random sort keys from torch.rand, one gather."""
    is_eos = tokens == eos_id
    n = int(is_eos.sum())
    if n == 0:
        return tokens.clone()
    sentence_of = torch.cumsum(is_eos.long(), 0) - is_eos.long()  # eos belongs to its sentence
    keys = torch.rand(n, generator=generator).argsort().argsort()  # a uniform random rank
    rank = torch.where(sentence_of < n, keys[sentence_of.clamp(max=n - 1)], n)
    position = torch.arange(len(tokens))
    order = torch.argsort(rank * (len(tokens) + 1) + position)
    return tokens[order]


def perm_drops_tail(tokens, eos_id, generator=None):
    """Shuffles the finished sentences and forgets the unfinished tail."""
    sentences, _ = _split(tokens, eos_id)
    if not sentences:
        return tokens.clone()
    order = torch.randperm(len(sentences), generator=generator).tolist()
    return torch.cat([sentences[i] for i in order])


def perm_split_rejoin(tokens, eos_id, generator=None):
    """Splits on eos_id like str.split, shuffles every part (the tail too), rejoins with eos_id."""
    parts, current = [], []
    for t in tokens.tolist():
        if t == eos_id:
            parts.append(current)
            current = []
        else:
            current.append(t)
    parts.append(current)
    order = torch.randperm(len(parts), generator=generator).tolist()
    out = []
    for n, i in enumerate(order):
        out += parts[i] + ([eos_id] if n < len(order) - 1 else [])
    return torch.tensor(out, dtype=tokens.dtype, device=tokens.device)


def perm_sattolo(tokens, eos_id, generator=None):
    """Fisher–Yates with j drawn from 0..i-1 (Sattolo): the identity order never comes out."""
    sentences, tail = _split(tokens, eos_id)
    order = list(range(len(sentences)))
    for i in range(len(order) - 1, 0, -1):
        j = int(torch.randint(0, i, (1,), generator=generator))
        order[i], order[j] = order[j], order[i]
    return torch.cat([sentences[i] for i in order] + [tail])


def perm_biased_swap(tokens, eos_id, generator=None):
    """Swaps each sentence with one drawn from all n (the textbook biased shuffle)."""
    sentences, tail = _split(tokens, eos_id)
    n = len(sentences)
    order = list(range(n))
    for i in range(n):
        j = int(torch.randint(0, n, (1,), generator=generator))
        order[i], order[j] = order[j], order[i]
    return torch.cat([sentences[i] for i in order] + [tail])


def perm_int64(tokens, eos_id, generator=None):
    """Rebuilds the output from Python lists with torch.tensor: int64 whatever the input."""
    sentences, tail = _split(tokens, eos_id)
    order = torch.randperm(len(sentences), generator=generator).tolist()
    out = [t for i in order for t in sentences[i].tolist()] + tail.tolist()
    return torch.tensor(out)


def perm_lone_eos_dropped(tokens, eos_id, generator=None):
    """Splits on eos_id, drops the empty parts (a lone eos_id vanishes), re-adds one eos each."""
    parts, current = [], []
    for t in tokens.tolist():
        if t == eos_id:
            if current:
                parts.append(current + [eos_id])
            current = []
        else:
            current.append(t)
    order = torch.randperm(len(parts), generator=generator).tolist()
    out = [t for i in order for t in parts[i]] + current
    return torch.tensor(out, dtype=tokens.dtype, device=tokens.device)


# ---------------------------------------------------------------- document_rotation


def rotate_right(tokens, generator=None):
    """Right: torch.randint for k, then two slices."""
    L = len(tokens)
    if L == 0:
        return tokens.clone()
    k = int(torch.randint(0, L, (1,), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def rotate_right2(tokens, generator=None):
    """Right: k from a uniform float, torch.roll by -k."""
    L = tokens.numel()
    if L == 0:
        return tokens.clone()
    k = min(int(torch.rand(1, generator=generator).item() * L), L - 1)
    return torch.roll(tokens, shifts=-k)


def rotate_empty_crash(tokens, generator=None):
    """No guard for the empty document: torch.randint(0, 0) raises."""
    k = int(torch.randint(0, len(tokens), (1,), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def rotate_rounded(tokens, generator=None):
    """k = round(u * (L - 1)): the first and last starts come out half as often."""
    L = len(tokens)
    if L == 0:
        return tokens.clone()
    k = round(torch.rand(1, generator=generator).item() * (L - 1))
    return torch.cat([tokens[k:], tokens[:k]])


def rotate_cat_order(tokens, generator=None):
    """Joins tokens[:k] then tokens[k:], which is the document unchanged."""
    L = len(tokens)
    if L == 0:
        return tokens.clone()
    k = int(torch.randint(0, L, (1,), generator=generator))
    return torch.cat([tokens[:k], tokens[k:]])


def rotate_int64(tokens, generator=None):
    """Rotates a Python list and converts back with torch.tensor (int64 always)."""
    L = len(tokens)
    if L == 0:
        return tokens.clone()
    k = int(torch.randint(0, L, (1,), generator=generator))
    ids = tokens.tolist()
    return torch.tensor(ids[k:] + ids[:k])


def rotate_randint_l_minus_one(tokens, generator=None):
    """torch.randint(0, L - 1): reads the high end as inclusive, so k = L - 1 never comes out."""
    L = len(tokens)
    if L == 0:
        return tokens.clone()
    k = int(torch.randint(0, max(L - 1, 1), (1,), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def rotate_fresh_generator(tokens, generator=None):
    """Replaces a missing generator with torch.Generator(), whose fixed default seed repeats."""
    if generator is None:
        generator = torch.Generator()
    L = len(tokens)
    if L == 0:
        return tokens.clone()
    k = int(torch.randint(0, L, (1,), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


WRONG = {
    "text_infilling": [
        infill_floor,
        infill_gaps_with_replacement,
        infill_no_cut,
        infill_distributions_poisson,
        infill_int64,
        infill_returns_input,
    ],
    "sentence_permutation": [
        perm_drops_tail,
        perm_split_rejoin,
        perm_sattolo,
        perm_biased_swap,
        perm_int64,
        perm_lone_eos_dropped,
    ],
    "document_rotation": [
        rotate_empty_crash,
        rotate_rounded,
        rotate_cat_order,
        rotate_int64,
        rotate_randint_l_minus_one,
        rotate_fresh_generator,
    ],
}

RIGHT = {
    "text_infilling": infill_right,
    "sentence_permutation": perm_right,
    "document_rotation": rotate_right,
}

RIGHT2 = {
    "text_infilling": infill_right2,
    "sentence_permutation": perm_right2,
    "document_rotation": rotate_right2,
}
