"""Lesson 10 (BART noising): held-out wrong and right implementations, from the exercise text only."""

import random

import torch

# ---------------------------------------------------------------- helpers (not implementations)


def _poisson(lam, generator):
    return int(torch.poisson(torch.tensor([float(lam)]), generator=generator).item())


def _lengths(n_mask, lam, generator, keep_zero=True, cut=True):
    lengths, total = [], 0
    while total < n_mask:
        k = _poisson(lam, generator)
        if k == 0 and not keep_zero:
            continue
        if cut:
            k = min(k, n_mask - total)
        lengths.append(k)
        total += k
    return lengths


def _fit_gaps(lengths, n_gaps):
    if len(lengths) > n_gaps:
        extra = sum(lengths[n_gaps:])
        lengths = lengths[:n_gaps]
        lengths[-1] += extra
    return lengths


def _assemble(tokens, span_at_gap, mask_id, n_gaps):
    # span_at_gap: {gap index: span length}
    values = tokens.tolist()
    out, i = [], 0
    for gap in range(n_gaps):
        if gap in span_at_gap:
            out.append(mask_id)
            i += span_at_gap[gap]
        if i < len(values) and gap < n_gaps - 1:
            out.append(values[i])
            i += 1
    return out


# ---------------------------------------------------------------- text_infilling


def infilling_loop(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Right: Poisson draws one by one, last cut short, randperm over the gaps, a walk."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    n_gaps = L - n_mask + 1
    lengths = _fit_gaps(_lengths(n_mask, lam, generator), n_gaps)
    gaps = torch.randperm(n_gaps, generator=generator)[: len(lengths)].tolist()
    out = _assemble(tokens, dict(zip(gaps, lengths)), mask_id, n_gaps)
    return torch.tensor(out, dtype=tokens.dtype, device=tokens.device)


def infilling_vectorised(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Right: Poisson draws in batches, cumsum, chosen gaps sorted, output built with torch.cat."""
    L = len(tokens)
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    draws = torch.empty(0)
    while draws.sum() < n_mask:
        draws = torch.cat(
            [draws, torch.poisson(torch.full((n_mask + 1,), float(lam)), generator=generator)]
        )
    csum = draws.cumsum(0)
    n_spans = int((csum < n_mask).sum()) + 1
    lengths = draws[:n_spans].long()
    lengths[-1] = n_mask - int(lengths[:-1].sum())
    n_kept = L - n_mask
    n_gaps = n_kept + 1
    if n_spans > n_gaps:
        lengths = torch.cat([lengths[: n_gaps - 1], lengths[n_gaps - 1 :].sum().view(1)])
        n_spans = n_gaps
    gaps = torch.randperm(n_gaps, generator=generator)[:n_spans]
    span_len = torch.zeros(n_gaps, dtype=torch.long)
    span_len[gaps] = lengths
    chosen = torch.zeros(n_gaps, dtype=torch.bool)
    chosen[gaps] = True
    pieces, i = [], 0
    mask = torch.tensor([mask_id], dtype=tokens.dtype, device=tokens.device)
    for g in range(n_gaps):
        if chosen[g]:
            pieces.append(mask)
            i += int(span_len[g])
        if g < n_kept:
            pieces.append(tokens[i : i + 1])
            i += 1
    return torch.cat(pieces)


def infilling_floor(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: n_mask = int(p * L) (floor) instead of round(p * L)."""
    L = tokens.shape[0]
    n_mask = int(p * L)
    if n_mask == 0:
        return tokens.clone()
    n_gaps = L - n_mask + 1
    lengths = _fit_gaps(_lengths(n_mask, lam, generator), n_gaps)
    gaps = torch.randperm(n_gaps, generator=generator)[: len(lengths)].tolist()
    out = _assemble(tokens, dict(zip(gaps, lengths)), mask_id, n_gaps)
    return torch.tensor(out, dtype=tokens.dtype, device=tokens.device)


def infilling_no_cut(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: the last span is not cut short, so more than n_mask tokens are removed."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    lengths = _lengths(n_mask, lam, generator, cut=False)
    removed = min(sum(lengths), L)
    n_gaps = L - removed + 1
    lengths = _fit_gaps(lengths, n_gaps)
    gaps = torch.randperm(n_gaps, generator=generator)[: len(lengths)].tolist()
    out = _assemble(tokens, dict(zip(gaps, lengths)), mask_id, n_gaps)
    return torch.tensor(out, dtype=tokens.dtype, device=tokens.device)


def infilling_gaps_with_replacement(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: each span's gap drawn with torch.randint, so two spans can share a gap (adjacent masks)."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    n_gaps = L - n_mask + 1
    lengths = _lengths(n_mask, lam, generator)
    gaps = torch.randint(0, n_gaps, (len(lengths),), generator=generator).tolist()
    values = tokens.tolist()
    per_gap = {}
    for g, k in zip(gaps, lengths):
        per_gap.setdefault(g, []).append(k)
    out, i = [], 0
    for g in range(n_gaps):
        for k in per_gap.get(g, []):
            out.append(mask_id)
            i += k
        if g < n_gaps - 1:
            out.append(values[i])
            i += 1
    return torch.tensor(out, dtype=tokens.dtype, device=tokens.device)


def infilling_no_last_gap(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: gaps drawn from randperm(L - n_mask): the gap after the last kept token is never used."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    n_gaps = L - n_mask + 1
    lengths = _fit_gaps(_lengths(n_mask, lam, generator), n_gaps - 1)
    gaps = torch.randperm(n_gaps - 1, generator=generator)[: len(lengths)].tolist()
    out = _assemble(tokens, dict(zip(gaps, lengths)), mask_id, n_gaps)
    return torch.tensor(out, dtype=tokens.dtype, device=tokens.device)


def infilling_overlapping_starts(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: span starts drawn in the original sequence; overlapping spans merge, fewer tokens go."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    lengths = _lengths(n_mask, lam, generator)
    starts = torch.randint(0, L, (len(lengths),), generator=generator).tolist()
    removed = [False] * L
    empty_at = [False] * L
    for s, k in zip(starts, lengths):
        if k == 0:
            empty_at[s] = True
        for j in range(s, min(s + k, L)):
            removed[j] = True
    out, values = [], tokens.tolist()
    for i in range(L):
        if removed[i] and (i == 0 or not removed[i - 1]):
            out.append(mask_id)
        elif empty_at[i] and not removed[i]:
            out.append(mask_id)
        if not removed[i]:
            out.append(values[i])
    return torch.tensor(out, dtype=tokens.dtype, device=tokens.device)


def infilling_int64(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: the output is built with torch.tensor(list): always int64, not the input's dtype."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    n_gaps = L - n_mask + 1
    lengths = _fit_gaps(_lengths(n_mask, lam, generator), n_gaps)
    gaps = torch.randperm(n_gaps, generator=generator)[: len(lengths)].tolist()
    return torch.tensor(_assemble(tokens, dict(zip(gaps, lengths)), mask_id, n_gaps))


def infilling_global_poisson(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: torch.poisson is called without the generator (only randperm uses it)."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    n_gaps = L - n_mask + 1
    lengths = _fit_gaps(_lengths(n_mask, lam, None), n_gaps)
    gaps = torch.randperm(n_gaps, generator=generator)[: len(lengths)].tolist()
    out = _assemble(tokens, dict(zip(gaps, lengths)), mask_id, n_gaps)
    return torch.tensor(out, dtype=tokens.dtype, device=tokens.device)


def infilling_lam_one_shot(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: the number of spans is round(n_mask / lam), the lengths split evenly: nothing Poisson."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    n_spans = max(1, round(n_mask / lam))
    lengths = [n_mask // n_spans + (1 if i < n_mask % n_spans else 0) for i in range(n_spans)]
    n_gaps = L - n_mask + 1
    lengths = _fit_gaps(lengths, n_gaps)
    gaps = torch.randperm(n_gaps, generator=generator)[: len(lengths)].tolist()
    out = _assemble(tokens, dict(zip(gaps, lengths)), mask_id, n_gaps)
    return torch.tensor(out, dtype=tokens.dtype, device=tokens.device)


# ---------------------------------------------------------------- sentence_permutation


def _sentences(tokens, eos_id):
    ends = (tokens == eos_id).nonzero().flatten().tolist()
    sentences, start = [], 0
    for e in ends:
        sentences.append(tokens[start : e + 1])
        start = e + 1
    return sentences, tokens[start:]


def permutation_split(tokens, eos_id, generator=None):
    """Right: cut after each eos_id, randperm over the sentences, the tail appended."""
    sentences, tail = _sentences(tokens, eos_id)
    if not sentences:
        return tokens.clone()
    order = torch.randperm(len(sentences), generator=generator).tolist()
    return torch.cat([sentences[i] for i in order] + [tail])


def permutation_index(tokens, eos_id, generator=None):
    """Right: sentence ids by cumsum, a permuted index array gathered in one go."""
    is_eos = tokens == eos_id
    n = int(is_eos.sum())
    if n == 0:
        return tokens.clone()
    sentence_id = torch.cumsum(is_eos.long(), 0) - is_eos.long()  # eos belongs to its sentence
    perm = torch.randperm(n, generator=generator)
    positions = torch.arange(len(tokens), device=tokens.device)
    index = [positions[sentence_id == s] for s in perm.tolist()]
    index.append(positions[sentence_id == n])
    return tokens[torch.cat(index)]


def permutation_tokens(tokens, eos_id, generator=None):
    """Wrong: shuffles the tokens before the tail, not whole sentences."""
    sentences, tail = _sentences(tokens, eos_id)
    if not sentences:
        return tokens.clone()
    body = torch.cat(sentences)
    body = body[torch.randperm(len(body), generator=generator)]
    return torch.cat([body, tail])


def permutation_tail_included(tokens, eos_id, generator=None):
    """Wrong: the unfinished last sentence is shuffled in with the others."""
    sentences, tail = _sentences(tokens, eos_id)
    if len(tail):
        sentences.append(tail)
    if not sentences:
        return tokens.clone()
    order = torch.randperm(len(sentences), generator=generator).tolist()
    return torch.cat([sentences[i] for i in order])


def permutation_split_drops_empty(tokens, eos_id, generator=None):
    """Wrong: split on eos_id, empty pieces filtered, rejoined with eos_id: a lone eos_id vanishes."""
    values = tokens.tolist()
    pieces, current = [], []
    for t in values:
        if t == eos_id:
            pieces.append(current)
            current = []
        else:
            current.append(t)
    sentences = [s + [eos_id] for s in pieces if s]
    if not sentences:
        return tokens.clone()
    order = torch.randperm(len(sentences), generator=generator).tolist()
    out = [t for i in order for t in sentences[i]] + current
    return torch.tensor(out, dtype=tokens.dtype, device=tokens.device)


def permutation_python_shuffle(tokens, eos_id, generator=None):
    """Wrong: random.shuffle of the sentence list: the generator is ignored."""
    sentences, tail = _sentences(tokens, eos_id)
    if not sentences:
        return tokens.clone()
    random.shuffle(sentences)
    return torch.cat(sentences + [tail])


def permutation_cyclic(tokens, eos_id, generator=None):
    """Wrong: the sentence list is rotated by a random shift: only n of the n! orders come out."""
    sentences, tail = _sentences(tokens, eos_id)
    if not sentences:
        return tokens.clone()
    shift = int(torch.randint(0, len(sentences), (1,), generator=generator))
    sentences = sentences[shift:] + sentences[:shift]
    return torch.cat(sentences + [tail])


def permutation_last_fixed(tokens, eos_id, generator=None):
    """Wrong: randperm(n_sentences - 1): the last complete sentence always stays last."""
    sentences, tail = _sentences(tokens, eos_id)
    if len(sentences) < 2:
        return tokens.clone()
    order = torch.randperm(len(sentences) - 1, generator=generator).tolist()
    return torch.cat([sentences[i] for i in order] + [sentences[-1], tail])


def permutation_eos_leads(tokens, eos_id, generator=None):
    """Wrong: the document is cut before each eos_id, so each boundary opens the next sentence."""
    starts = [0] + (tokens == eos_id).nonzero().flatten().tolist()
    starts = sorted(set(starts))
    pieces = [tokens[a:b] for a, b in zip(starts, starts[1:] + [len(tokens)])]
    if len(pieces) < 2:
        return tokens.clone()
    order = torch.randperm(len(pieces), generator=generator).tolist()
    return torch.cat([pieces[i] for i in order])


# ---------------------------------------------------------------- document_rotation


def rotation_slices(tokens, generator=None):
    """Right: k = randint(0, L), tokens[k:] then tokens[:k]."""
    L = len(tokens)
    if L == 0:
        return tokens.clone()
    k = int(torch.randint(0, L, (1,), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def rotation_index(tokens, generator=None):
    """Right: an index (arange + k) mod L, k from randperm's first entry."""
    L = tokens.numel()
    if L == 0:
        return tokens[:0].clone()
    k = torch.randperm(L, generator=generator)[0]
    return tokens[(torch.arange(L) + k) % L]


def rotation_never_zero(tokens, generator=None):
    """Wrong: k = randint(1, L): the document never keeps its own start."""
    L = len(tokens)
    if L <= 1:
        return tokens.clone()
    k = int(torch.randint(1, L, (1,), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def rotation_inclusive(tokens, generator=None):
    """Wrong: k = randint(0, L + 1): k = L repeats k = 0, so no rotation is twice as likely."""
    L = len(tokens)
    if L == 0:
        return tokens.clone()
    k = int(torch.randint(0, L + 1, (1,), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def rotation_float_floor(tokens, generator=None):
    """Wrong: k = int(rand * (L - 1)): the last start L - 1 is never drawn."""
    L = len(tokens)
    if L == 0:
        return tokens.clone()
    k = int(torch.rand(1, generator=generator).item() * (L - 1))
    return torch.cat([tokens[k:], tokens[:k]])


def rotation_new_generator(tokens, generator=None):
    """Wrong: with generator=None a fresh torch.Generator() is made each call (always seed default)."""
    if generator is None:
        generator = torch.Generator()
    L = len(tokens)
    if L == 0:
        return tokens.clone()
    k = int(torch.randint(0, L, (1,), generator=generator))
    return torch.roll(tokens, -k)


def rotation_duplicate_seam(tokens, generator=None):
    """Wrong: tokens[k:] then tokens[:k + 1]: the token at k appears twice."""
    L = len(tokens)
    if L == 0:
        return tokens.clone()
    k = int(torch.randint(0, L, (1,), generator=generator))
    return torch.cat([tokens[k:], tokens[: k + 1]])


def rotation_empty_crashes(tokens, generator=None):
    """Wrong: no case for the empty document: randint(0, 0) raises."""
    k = int(torch.randint(0, len(tokens), (1,), generator=generator))
    return torch.roll(tokens, -k)


def rotation_inplace(tokens, generator=None):
    """Wrong: the rotation is written back into the input tensor (tokens[:] = ...), returned."""
    L = len(tokens)
    if L == 0:
        return tokens
    k = int(torch.randint(0, L, (1,), generator=generator))
    tokens[:] = torch.cat([tokens[k:], tokens[:k]])
    return tokens


WRONG = {
    "text_infilling": [
        infilling_floor,
        infilling_no_cut,
        infilling_gaps_with_replacement,
        infilling_no_last_gap,
        infilling_overlapping_starts,
        infilling_int64,
        infilling_global_poisson,
        infilling_lam_one_shot,
    ],
    "sentence_permutation": [
        permutation_tokens,
        permutation_tail_included,
        permutation_split_drops_empty,
        permutation_python_shuffle,
        permutation_cyclic,
        permutation_last_fixed,
        permutation_eos_leads,
    ],
    "document_rotation": [
        rotation_never_zero,
        rotation_inclusive,
        rotation_float_floor,
        rotation_new_generator,
        rotation_duplicate_seam,
        rotation_empty_crashes,
        rotation_inplace,
    ],
}

RIGHT = {
    "text_infilling": infilling_loop,
    "sentence_permutation": permutation_split,
    "document_rotation": rotation_slices,
}

RIGHT2 = {
    "text_infilling": infilling_vectorised,
    "sentence_permutation": permutation_index,
    "document_rotation": rotation_index,
}
