"""Lesson 10 (BART): held-out wrong and right implementations, from the exercise text."""

import random

import torch

# ---------------------------------------------------------------- text_infilling


def _span_lengths(n_mask, lam, generator, keep_zero=True, cut=True):
    spans, total = [], 0
    rate = torch.tensor([float(lam)])
    while total < n_mask:
        k = int(torch.poisson(rate, generator=generator).item())
        if k == 0 and not keep_zero:
            continue
        if cut:
            k = min(k, n_mask - total)
        spans.append(k)
        total += k
    return spans


def _fit_gaps(spans, n_gaps):
    if len(spans) > n_gaps:
        extra = sum(spans[n_gaps:])
        spans = spans[:n_gaps]
        spans[-1] += extra
    return spans


def _write(tokens, mask_id, span_at_gap):
    """span_at_gap: {gap index: span length}."""
    out, pos = [], 0
    n_kept = len(tokens) - sum(span_at_gap.values())
    for g in range(n_kept + 1):
        if g in span_at_gap:
            out.append(mask_id)
            pos += span_at_gap[g]
        if g < n_kept:
            out.append(int(tokens[pos]))
            pos += 1
    return torch.tensor(out, dtype=tokens.dtype, device=tokens.device)


def infill_right(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Right: Poisson spans cut to n_mask, randperm over the gaps, a walk through the gaps."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    n_gaps = L - n_mask + 1
    spans = _fit_gaps(_span_lengths(n_mask, lam, generator), n_gaps)
    gaps = torch.randperm(n_gaps, generator=generator)[: len(spans)].tolist()
    return _write(tokens, mask_id, dict(zip(gaps, spans)))


def infill_right2(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Right: draws Poisson in batches, sorts the chosen gaps, builds the output with torch.cat."""
    L = len(tokens)
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    spans = []
    while sum(spans) < n_mask:
        draws = torch.poisson(torch.full((1,), lam), generator=generator)
        k = int(draws[0])
        spans.append(min(k, n_mask - sum(spans)))
    n_kept = L - n_mask
    if len(spans) > n_kept + 1:
        spans[0] += sum(spans[n_kept + 1 :])
        spans = spans[: n_kept + 1]
    gaps = torch.randperm(n_kept + 1, generator=generator)[: len(spans)]
    order = torch.argsort(gaps)
    gaps, spans = gaps[order].tolist(), [spans[i] for i in order.tolist()]
    pieces, pos, prev_gap = [], 0, 0
    mask = tokens.new_tensor([mask_id])
    for g, s in zip(gaps, spans):
        n_copy = g - prev_gap
        pieces.append(tokens[pos : pos + n_copy])
        pos += n_copy
        pieces.append(mask)
        pos += s
        prev_gap = g
    pieces.append(tokens[pos:])
    return torch.cat(pieces)


def infill_floor(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: n_mask = int(p * L), the floor, not round."""
    L = tokens.shape[0]
    n_mask = int(p * L)
    if n_mask == 0:
        return tokens.clone()
    n_gaps = L - n_mask + 1
    spans = _fit_gaps(_span_lengths(n_mask, lam, generator), n_gaps)
    gaps = torch.randperm(n_gaps, generator=generator)[: len(spans)].tolist()
    return _write(tokens, mask_id, dict(zip(gaps, spans)))


def infill_random_starts(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: each span at a random start in the original text; overlapping runs merge into one mask."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    removed = torch.zeros(L, dtype=torch.bool)
    for k in _span_lengths(n_mask, lam, generator):
        if k == 0:
            continue
        start = int(torch.randint(0, L - k + 1, (1,), generator=generator))
        removed[start : start + k] = True
    out = []
    for i in range(L):
        if removed[i]:
            if i == 0 or not removed[i - 1]:
                out.append(mask_id)
        else:
            out.append(int(tokens[i]))
    return torch.tensor(out, dtype=tokens.dtype, device=tokens.device)


def infill_not_last_gap(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: off by one, the gaps are drawn from L - n_mask (never after the last kept token)."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    n_gaps = L - n_mask
    spans = _fit_gaps(_span_lengths(n_mask, lam, generator), n_gaps)
    gaps = torch.randperm(n_gaps, generator=generator)[: len(spans)].tolist()
    return _write(tokens, mask_id, dict(zip(gaps, spans)))


def infill_last_not_cut(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: the last span is not cut short, so more than n_mask tokens may go."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    spans = _span_lengths(n_mask, lam, generator, cut=False)
    total = sum(spans)
    if total > L:
        spans[-1] -= total - L
        total = L
    n_gaps = L - total + 1
    spans = _fit_gaps(spans, n_gaps)
    gaps = torch.randperm(n_gaps, generator=generator)[: len(spans)].tolist()
    return _write(tokens, mask_id, dict(zip(gaps, spans)))


def infill_zero_spans_skipped(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: a Poisson draw of 0 is kept in the count but no mask is written for it."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    n_gaps = L - n_mask + 1
    spans = _fit_gaps(_span_lengths(n_mask, lam, generator), n_gaps)
    gaps = torch.randperm(n_gaps, generator=generator)[: len(spans)].tolist()
    at = {g: s for g, s in zip(gaps, spans) if s > 0}
    return _write(tokens, mask_id, at)


# ---------------------------------------------------------------- sentence_permutation


def _split(tokens, eos_id):
    ends = (tokens == eos_id).nonzero().flatten().tolist()
    sents, start = [], 0
    for e in ends:
        sents.append(tokens[start : e + 1])
        start = e + 1
    return sents, tokens[start:]


def perm_right(tokens, eos_id, generator=None):
    """Right: split at each eos (included), randperm, concatenate, tail last."""
    sents, tail = _split(tokens, eos_id)
    if not sents:
        return tokens.clone()
    order = torch.randperm(len(sents), generator=generator).tolist()
    return torch.cat([sents[i] for i in order] + [tail])


def perm_right2(tokens, eos_id, generator=None):
    """Right: Python lists, and the sentences gathered by an index tensor."""
    ids = tokens.tolist()
    sentences, current = [], []
    for t in ids:
        current.append(t)
        if t == eos_id:
            sentences.append(current)
            current = []
    perm = torch.randperm(len(sentences), generator=generator)
    out = [t for i in perm.tolist() for t in sentences[i]] + current
    return torch.tensor(out, dtype=tokens.dtype, device=tokens.device)


def perm_biased_shuffle(tokens, eos_id, generator=None):
    """Wrong: the textbook biased shuffle, swapping i with any j in 0..n-1."""
    sents, tail = _split(tokens, eos_id)
    n = len(sents)
    for i in range(n):
        j = int(torch.randint(0, n, (1,), generator=generator))
        sents[i], sents[j] = sents[j], sents[i]
    return torch.cat(sents + [tail]) if n else tokens.clone()


def perm_python_random(tokens, eos_id, generator=None):
    """Wrong: random.shuffle from Python's own generator; the generator argument is unused."""
    sents, tail = _split(tokens, eos_id)
    random.shuffle(sents)
    return torch.cat(sents + [tail]) if sents else tokens.clone()


def perm_drops_tail(tokens, eos_id, generator=None):
    """Wrong: the tokens after the last eos_id are dropped."""
    sents, _ = _split(tokens, eos_id)
    if not sents:
        return tokens[:0].clone()
    order = torch.randperm(len(sents), generator=generator).tolist()
    return torch.cat([sents[i] for i in order])


def perm_int64(tokens, eos_id, generator=None):
    """Wrong: rebuilt with torch.tensor(list) without dtype, so int32 input comes back int64."""
    sents, tail = _split(tokens, eos_id)
    order = torch.randperm(len(sents), generator=generator).tolist()
    out = [t for i in order for t in sents[i].tolist()] + tail.tolist()
    return torch.tensor(out)


def perm_rotation(tokens, eos_id, generator=None):
    """Wrong: rotates the list of sentences by a random offset instead of permuting it."""
    sents, tail = _split(tokens, eos_id)
    n = len(sents)
    if n == 0:
        return tokens.clone()
    k = int(torch.randint(0, n, (1,), generator=generator))
    return torch.cat(sents[k:] + sents[:k] + [tail])


# ---------------------------------------------------------------- document_rotation


def rot_right(tokens, generator=None):
    """Right: randint over 0..L-1 and torch.cat of the two slices."""
    L = tokens.shape[0]
    if L == 0:
        return tokens.clone()
    k = int(torch.randint(0, L, (1,), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def rot_right2(tokens, generator=None):
    """Right: a uniform float scaled to L and floored, then torch.roll by -k."""
    L = len(tokens)
    if L == 0:
        return tokens.clone()
    k = min(int(torch.rand(1, generator=generator).item() * L), L - 1)
    return torch.roll(tokens, shifts=-k)


def rot_empty_crash(tokens, generator=None):
    """Wrong: no empty-document case: randint(0, 0) raises on an empty tensor."""
    k = int(torch.randint(0, len(tokens), (1,), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def rot_plus(tokens, generator=None):
    """Wrong: tokens[k:] + tokens[:k], the list habit, is an elementwise tensor sum."""
    L = len(tokens)
    if L == 0:
        return tokens.clone()
    k = int(torch.randint(0, L, (1,), generator=generator))
    return tokens[k:] + tokens[:k]


def rot_scaled_l_minus_1(tokens, generator=None):
    """Wrong: k = int(u * (L - 1)), which never reaches L - 1."""
    L = len(tokens)
    if L == 0:
        return tokens.clone()
    k = int(torch.rand(1, generator=generator).item() * (L - 1))
    return torch.cat([tokens[k:], tokens[:k]])


def rot_from_one(tokens, generator=None):
    """Wrong: k drawn from 1 .. L-1 (a rotation 'must change something')."""
    L = len(tokens)
    if L <= 1:
        return tokens.clone()
    k = int(torch.randint(1, L, (1,), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def rot_python_random(tokens, generator=None):
    """Wrong: k from Python's random.randrange; the generator is ignored."""
    L = len(tokens)
    if L == 0:
        return tokens.clone()
    k = random.randrange(L)
    return torch.cat([tokens[k:], tokens[:k]])


WRONG = {
    "text_infilling": [
        infill_floor,
        infill_random_starts,
        infill_not_last_gap,
        infill_last_not_cut,
        infill_zero_spans_skipped,
    ],
    "sentence_permutation": [
        perm_biased_shuffle,
        perm_python_random,
        perm_drops_tail,
        perm_int64,
        perm_rotation,
    ],
    "document_rotation": [
        rot_empty_crash,
        rot_plus,
        rot_scaled_l_minus_1,
        rot_from_one,
        rot_python_random,
    ],
}
RIGHT = {
    "text_infilling": infill_right,
    "sentence_permutation": perm_right,
    "document_rotation": rot_right,
}
RIGHT2 = {
    "text_infilling": infill_right2,
    "sentence_permutation": perm_right2,
    "document_rotation": rot_right2,
}
