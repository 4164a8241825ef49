"""Lesson 10 (BART): held-out wrong and right implementations, from the exercise text only."""

import torch

# ---------------------------------------------------------------- helpers


def _span_lengths(n_mask, lam, generator, cut=True, keep_zero=True):
    """Poisson(lam) draws one at a time until they cover n_mask (last one cut short when cut)."""
    lengths, total = [], 0
    while total < n_mask:
        k = int(torch.poisson(torch.tensor([float(lam)]), generator=generator).item())
        if k == 0 and not keep_zero:
            continue
        if cut:
            k = min(k, n_mask - total)
        lengths.append(k)
        total += k
    return lengths


def _merge_extra(lengths, n_gaps):
    if len(lengths) > n_gaps:
        extra = sum(lengths[n_gaps:])
        lengths = lengths[:n_gaps]
        lengths[-1] += extra
    return lengths


def _write(tokens, mask_id, span_at, n_gaps, dtype=True):
    out, pos = [], 0
    values = tokens.tolist()
    for g in range(n_gaps):
        if g in span_at:
            out.append(mask_id)
            pos += span_at[g]
        if g < n_gaps - 1:
            out.append(values[pos])
            pos += 1
    if dtype:
        return torch.tensor(out, dtype=tokens.dtype, device=tokens.device)
    return torch.tensor(out)


# ---------------------------------------------------------------- text_infilling


def text_infilling_right(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Right: n_mask = round(p L); Poisson spans cut to n_mask; randperm picks one gap per span."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    n_gaps = L - n_mask + 1
    lengths = _merge_extra(_span_lengths(n_mask, lam, generator), n_gaps)
    gaps = torch.randperm(n_gaps, generator=generator)[: len(lengths)].tolist()
    return _write(tokens, mask_id, dict(zip(gaps, lengths)), n_gaps)


def text_infilling_right2(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Right: Poisson draws in batches, cumsum to cut; gaps from argsort of uniform noise; output by index tensors."""
    L = tokens.numel()
    n_mask = int(torch.tensor(p * L).round().item())
    if n_mask == 0:
        return tokens.detach().clone()
    draws = torch.empty(0, dtype=torch.long)
    while int(draws.sum()) < n_mask:
        batch = torch.poisson(torch.full((8,), float(lam)), generator=generator).long()
        draws = torch.cat([draws, batch])
    csum = draws.cumsum(0)
    n_spans = int((csum < n_mask).sum()) + 1
    lengths = draws[:n_spans].clone()
    lengths[-1] -= int(csum[n_spans - 1]) - n_mask  # cut the last span short
    n_gaps = L - n_mask + 1
    if n_spans > n_gaps:
        lengths[0] += lengths[n_gaps:].sum()
        lengths, n_spans = lengths[:n_gaps], n_gaps
    chosen = torch.rand(n_gaps, generator=generator).argsort()[:n_spans]
    span_len = torch.zeros(n_gaps, dtype=torch.long)
    has_span = torch.zeros(n_gaps, dtype=torch.bool)
    span_len[chosen] = lengths
    has_span[chosen] = True
    pieces, pos = [], 0
    for g in range(n_gaps):
        if has_span[g]:
            pieces.append(torch.full((1,), mask_id, dtype=tokens.dtype, device=tokens.device))
            pos += int(span_len[g])
        if g < n_gaps - 1:
            pieces.append(tokens[pos : pos + 1])
            pos += 1
    return torch.cat(pieces)


def text_infilling_int_floor(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: n_mask = int(p * L) truncates instead of rounding."""
    L = tokens.shape[0]
    n_mask = int(p * L)
    if n_mask == 0:
        return tokens.clone()
    n_gaps = L - n_mask + 1
    lengths = _merge_extra(_span_lengths(n_mask, lam, generator), n_gaps)
    gaps = torch.randperm(n_gaps, generator=generator)[: len(lengths)].tolist()
    return _write(tokens, mask_id, dict(zip(gaps, lengths)), n_gaps)


def text_infilling_skip_zero(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: redraws k = 0 (no 0-length spans), though the text keeps them."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    n_gaps = L - n_mask + 1
    lengths = _merge_extra(_span_lengths(n_mask, lam, generator, keep_zero=False), n_gaps)
    gaps = torch.randperm(n_gaps, generator=generator)[: len(lengths)].tolist()
    return _write(tokens, mask_id, dict(zip(gaps, lengths)), n_gaps)


def text_infilling_no_cut(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: the last span is not cut short, so more than n_mask tokens are removed."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    lengths = _span_lengths(n_mask, lam, generator, cut=False)
    removed = min(sum(lengths), L)
    n_gaps = L - removed + 1
    lengths = _merge_extra(lengths, n_gaps)
    if sum(lengths) > removed:
        lengths[-1] -= sum(lengths) - removed
        lengths[-1] = max(lengths[-1], 0)
    gaps = torch.randperm(n_gaps, generator=generator)[: len(lengths)].tolist()
    return _write(tokens, mask_id, dict(zip(gaps, lengths)), n_gaps)


def text_infilling_randint_gaps(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: gaps drawn with torch.randint (with replacement): two spans can share a gap and touch."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    n_gaps = L - n_mask + 1
    lengths = _span_lengths(n_mask, lam, generator)
    gaps = torch.randint(n_gaps, (len(lengths),), generator=generator).tolist()
    out, pos, values = [], 0, tokens.tolist()
    for g in range(n_gaps):
        for gap, k in zip(gaps, lengths):
            if gap == g:
                out.append(mask_id)
                pos += k
        if g < n_gaps - 1:
            out.append(values[pos])
            pos += 1
    return torch.tensor(out, dtype=tokens.dtype)


def text_infilling_randperm_global(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: the Poisson draws use the generator but torch.randperm for the gaps does not."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    n_gaps = L - n_mask + 1
    lengths = _merge_extra(_span_lengths(n_mask, lam, generator), n_gaps)
    gaps = torch.randperm(n_gaps)[: len(lengths)].tolist()
    return _write(tokens, mask_id, dict(zip(gaps, lengths)), n_gaps)


def text_infilling_returns_input(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: when n_mask is 0 it returns the input tensor itself, not a copy."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens
    n_gaps = L - n_mask + 1
    lengths = _merge_extra(_span_lengths(n_mask, lam, generator), n_gaps)
    gaps = torch.randperm(n_gaps, generator=generator)[: len(lengths)].tolist()
    return _write(tokens, mask_id, dict(zip(gaps, lengths)), n_gaps)


def text_infilling_int64(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: torch.tensor(list) without dtype/device: always int64 on the CPU, not the input's dtype."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    n_gaps = L - n_mask + 1
    lengths = _merge_extra(_span_lengths(n_mask, lam, generator), n_gaps)
    gaps = torch.randperm(n_gaps, generator=generator)[: len(lengths)].tolist()
    return _write(tokens, mask_id, dict(zip(gaps, lengths)), n_gaps, dtype=False)


# ---------------------------------------------------------------- sentence_permutation


def sentence_permutation_right(tokens, eos_id, generator=None):
    """Right: split after every eos_id, randperm the sentences, keep the unfinished tail last."""
    ends = (tokens == eos_id).nonzero().flatten().tolist()
    sentences, start = [], 0
    for e in ends:
        sentences.append(tokens[start : e + 1])
        start = e + 1
    tail = tokens[start:]
    perm = torch.randperm(len(sentences), generator=generator).tolist()
    return torch.cat([sentences[i] for i in perm] + [tail])


def sentence_permutation_right2(tokens, eos_id, generator=None):
    """Right: sentence id per token by cumsum, rank of each sentence from randperm, stable argsort of the ranks."""
    is_eos = (tokens == eos_id).long()
    n = int(is_eos.sum())
    sid = torch.cumsum(is_eos, 0) - is_eos  # sentence index of each token; the tail gets n
    perm = torch.randperm(n, generator=generator)
    rank = torch.empty(n + 1, dtype=torch.long)
    rank[perm] = torch.arange(n)  # sentence perm[i] goes to slot i
    rank[n] = n
    order = torch.sort(rank[sid.cpu()], stable=True).indices
    return tokens[order.to(tokens.device)]


def _sentences(tokens, eos_id):
    ends = (tokens == eos_id).nonzero().flatten().tolist()
    out, start = [], 0
    for e in ends:
        out.append(tokens[start : e + 1])
        start = e + 1
    return out, tokens[start:]


def sentence_permutation_tail_in(tokens, eos_id, generator=None):
    """Wrong: the unfinished last sentence is shuffled in as one more sentence."""
    sentences, tail = _sentences(tokens, eos_id)
    if len(tail):
        sentences.append(tail)
    perm = torch.randperm(len(sentences), generator=generator).tolist()
    return torch.cat([sentences[i] for i in perm]) if sentences else tokens.clone()


def sentence_permutation_cut_before(tokens, eos_id, generator=None):
    """Wrong: cuts before each eos_id, so each full stop starts the next piece."""
    starts = [0] + (tokens == eos_id).nonzero().flatten().tolist()
    starts = sorted(set(starts))
    pieces = [tokens[a:b] for a, b in zip(starts, starts[1:] + [len(tokens)])]
    perm = torch.randperm(len(pieces), generator=generator).tolist()
    return torch.cat([pieces[i] for i in perm])


def sentence_permutation_drops_empty(tokens, eos_id, generator=None):
    """Wrong: str.split-style: sentences without words are dropped, so a lone eos_id vanishes."""
    sentences, tail = _sentences(tokens, eos_id)
    sentences = [s for s in sentences if len(s) > 1]
    perm = torch.randperm(len(sentences), generator=generator).tolist()
    return torch.cat([sentences[i] for i in perm] + [tail])


def sentence_permutation_rotation(tokens, eos_id, generator=None):
    """Wrong: rotates the list of sentences by a random offset (only n of the n! orders)."""
    sentences, tail = _sentences(tokens, eos_id)
    n = len(sentences)
    if n == 0:
        return tokens.clone()
    k = int(torch.randint(n, (1,), generator=generator))
    return torch.cat(sentences[k:] + sentences[:k] + [tail])


def sentence_permutation_with_replacement(tokens, eos_id, generator=None):
    """Wrong: torch.randint for the order: sentences drawn with replacement (some repeated, some lost)."""
    sentences, tail = _sentences(tokens, eos_id)
    n = len(sentences)
    if n == 0:
        return tokens.clone()
    order = torch.randint(n, (n,), generator=generator).tolist()
    return torch.cat([sentences[i] for i in order] + [tail])


def sentence_permutation_in_place(tokens, eos_id, generator=None):
    """Wrong: writes the shuffled document back into the input tensor (tokens[:] = ...) and returns it."""
    sentences, tail = _sentences(tokens, eos_id)
    perm = torch.randperm(len(sentences), generator=generator).tolist()
    out = torch.cat([sentences[i] for i in perm] + [tail])
    tokens[:] = out
    return tokens


# ---------------------------------------------------------------- document_rotation


def document_rotation_right(tokens, generator=None):
    """Right: k = torch.randint(L), tokens[k:] then tokens[:k]; empty stays empty."""
    L = tokens.shape[0]
    if L == 0:
        return tokens.clone()
    k = int(torch.randint(L, (1,), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def document_rotation_right2(tokens, generator=None):
    """Right: k = floor(L * U) from torch.rand, then torch.roll by -k; index arithmetic via gather."""
    L = tokens.numel()
    if L == 0:
        return tokens[:0].clone()
    u = torch.rand((), generator=generator, dtype=torch.float64)
    k = min(int(u.item() * L), L - 1)
    idx = (torch.arange(L, device=tokens.device) + k) % L
    return tokens.gather(0, idx)


def document_rotation_never_zero(tokens, generator=None):
    """Wrong: k drawn from 1 .. L-1, so the document never keeps its start."""
    L = tokens.shape[0]
    if L <= 1:
        return tokens.clone()
    k = int(torch.randint(1, L, (1,), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def document_rotation_high_exclusive(tokens, generator=None):
    """Wrong: torch.randint(0, L - 1) as if high were inclusive: k = L-1 never comes out."""
    L = tokens.shape[0]
    if L <= 1:
        return tokens.clone()
    k = int(torch.randint(0, L - 1, (1,), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def document_rotation_new_generator(tokens, generator=None):
    """Wrong: generator=None replaced by a fresh torch.Generator() (same rotation every call)."""
    if generator is None:
        generator = torch.Generator()
    L = tokens.shape[0]
    if L == 0:
        return tokens.clone()
    k = int(torch.randint(L, (1,), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def document_rotation_empty_crash(tokens, generator=None):
    """Wrong: no special case for the empty document (torch.randint(0, ...) raises)."""
    k = int(torch.randint(tokens.shape[0], (1,), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def document_rotation_seam(tokens, generator=None):
    """Wrong: tokens[k+1:] then tokens[:k]: the token at the seam is lost."""
    L = tokens.shape[0]
    if L == 0:
        return tokens.clone()
    k = int(torch.randint(L, (1,), generator=generator))
    return torch.cat([tokens[k + 1 :], tokens[:k]])


def document_rotation_list(tokens, generator=None):
    """Wrong: rotates the Python list and rebuilds with torch.tensor(...) (int64 whatever the input's dtype)."""
    values = tokens.tolist()
    if not values:
        return torch.tensor(values)
    k = int(torch.randint(len(values), (1,), generator=generator))
    return torch.tensor(values[k:] + values[:k])


def document_rotation_global_rng(tokens, generator=None):
    """Wrong: torch.randint without generator=, so seeding the generator does not fix the rotation."""
    L = tokens.shape[0]
    if L == 0:
        return tokens.clone()
    k = int(torch.randint(L, (1,)))
    return torch.cat([tokens[k:], tokens[:k]])


WRONG = {
    "text_infilling": [
        text_infilling_int_floor,
        text_infilling_skip_zero,
        text_infilling_no_cut,
        text_infilling_randint_gaps,
        text_infilling_randperm_global,
        text_infilling_returns_input,
        text_infilling_int64,
    ],
    "sentence_permutation": [
        sentence_permutation_tail_in,
        sentence_permutation_cut_before,
        sentence_permutation_drops_empty,
        sentence_permutation_rotation,
        sentence_permutation_with_replacement,
        sentence_permutation_in_place,
    ],
    "document_rotation": [
        document_rotation_never_zero,
        document_rotation_high_exclusive,
        document_rotation_new_generator,
        document_rotation_empty_crash,
        document_rotation_seam,
        document_rotation_list,
        document_rotation_global_rng,
    ],
}

RIGHT = {
    "text_infilling": text_infilling_right,
    "sentence_permutation": sentence_permutation_right,
    "document_rotation": document_rotation_right,
}

RIGHT2 = {
    "text_infilling": text_infilling_right2,
    "sentence_permutation": sentence_permutation_right2,
    "document_rotation": document_rotation_right2,
}
