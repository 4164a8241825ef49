"""Lesson 10 (BART noising): held-out wrong and right implementations, from the exercise text only."""

import torch

# ---------------------------------------------------------------- text_infilling


def _span_lengths(n_mask, lam, generator):
    """Poisson(lam) draws, zeros kept, until they cover n_mask; the last one cut to fit."""
    lengths, total = [], 0
    rate = torch.tensor([float(lam)])
    while total < n_mask:
        k = int(torch.poisson(rate, generator=generator).item())
        k = min(k, n_mask - total)
        lengths.append(k)
        total += k
    return lengths


def _layout(tokens, mask_id, gap_span):
    """Walk the gaps: a chosen gap writes one mask_id and skips its span; then the next kept token."""
    values = tokens.tolist()
    L = len(values)
    n_kept = L - sum(gap_span.values())
    out, i = [], 0
    for g in range(n_kept + 1):
        if g in gap_span:
            out.append(mask_id)
            i += gap_span[g]
        if g < n_kept:
            out.append(values[i])
            i += 1
    return torch.tensor(out, dtype=tokens.dtype, device=tokens.device)


def text_infilling(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Right: round(p L) tokens, Poisson spans (zeros kept), distinct random gaps, one mask each."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    lengths = _span_lengths(n_mask, lam, generator)
    n_gaps = L - n_mask + 1
    if (
        len(lengths) > n_gaps
    ):  # more spans than gaps: fold the extra lengths into the last kept span
        lengths = lengths[: n_gaps - 1] + [sum(lengths[n_gaps - 1 :])]
    gaps = torch.randperm(n_gaps, generator=generator)[: len(lengths)].tolist()
    return _layout(tokens, mask_id, dict(zip(gaps, lengths)))


def text_infilling_vectorised(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Right: Poisson draws in batches, cumsum to cut; gaps by sorting uniforms; output by masks."""
    L = tokens.numel()
    n_mask = int(round(p * L))
    if n_mask == 0:
        return tokens.clone()
    draws = torch.empty(0)
    while draws.sum() < n_mask:
        more = torch.poisson(torch.full((n_mask + 1,), float(lam)), generator=generator)
        draws = torch.cat([draws, more])
    ends = draws.cumsum(0)
    n_spans = int((ends < n_mask).sum()) + 1  # spans up to and including the one reaching n_mask
    lengths = draws[:n_spans].long()
    lengths[-1] = n_mask - int(lengths[:-1].sum())
    n_gaps = L - n_mask + 1
    if n_spans > n_gaps:
        lengths = torch.cat([lengths[: n_gaps - 1], lengths[n_gaps - 1 :].sum(0, keepdim=True)])
        n_spans = n_gaps
    gaps = torch.rand(n_gaps, generator=generator).argsort()[:n_spans]
    span_at_gap = torch.zeros(n_gaps, dtype=torch.long)
    has_span = torch.zeros(n_gaps, dtype=torch.bool)
    span_at_gap[gaps] = lengths
    has_span[gaps] = True
    # output: for gap g, [mask if has_span] then kept token g (no token after the last gap)
    pieces = []
    pos = 0
    for g in range(n_gaps):
        if has_span[g]:
            pieces.append(torch.full((1,), mask_id, dtype=tokens.dtype, device=tokens.device))
            pos += int(span_at_gap[g])
        if g < n_gaps - 1:
            pieces.append(tokens[pos : pos + 1])
            pos += 1
    return torch.cat(pieces)


def infilling_mask_per_token(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: every token of a span becomes its own [MASK] (the length is kept, as in BERT)."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    lengths = _span_lengths(n_mask, lam, generator)
    n_gaps = L - n_mask + 1
    if len(lengths) > n_gaps:
        lengths = lengths[: n_gaps - 1] + [sum(lengths[n_gaps - 1 :])]
    gaps = torch.randperm(n_gaps, generator=generator)[: len(lengths)].tolist()
    span_at = dict(zip(gaps, lengths))
    values, out, i = tokens.tolist(), [], 0
    for g in range(L - n_mask + 1):
        if g in span_at:
            out += [mask_id] * span_at[g]
            i += span_at[g]
        if g < L - n_mask:
            out.append(values[i])
            i += 1
    return torch.tensor(out, dtype=tokens.dtype)


def infilling_skip_zero_spans(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: draws of k = 0 are thrown away (redrawn), so no [MASK] is ever inserted."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    lengths, total = [], 0
    while total < n_mask:
        k = int(torch.poisson(torch.tensor([lam]), generator=generator).item())
        if k == 0:
            continue
        lengths.append(min(k, n_mask - total))
        total += lengths[-1]
    n_gaps = L - n_mask + 1
    if len(lengths) > n_gaps:
        lengths = lengths[: n_gaps - 1] + [sum(lengths[n_gaps - 1 :])]
    gaps = torch.randperm(n_gaps, generator=generator)[: len(lengths)].tolist()
    return _layout(tokens, mask_id, dict(zip(gaps, lengths)))


def infilling_floor(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: n_mask = int(p * L) (floor) instead of round(p * L)."""
    L = tokens.shape[0]
    n_mask = int(p * L)
    if n_mask == 0:
        return tokens.clone()
    lengths = _span_lengths(n_mask, lam, generator)
    n_gaps = L - n_mask + 1
    if len(lengths) > n_gaps:
        lengths = lengths[: n_gaps - 1] + [sum(lengths[n_gaps - 1 :])]
    gaps = torch.randperm(n_gaps, generator=generator)[: len(lengths)].tolist()
    return _layout(tokens, mask_id, dict(zip(gaps, lengths)))


def infilling_no_cut(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: the last span is not cut short, so more than round(p L) tokens may go."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    lengths, total = [], 0
    while total < n_mask:
        k = int(torch.poisson(torch.tensor([lam]), generator=generator).item())
        lengths.append(k)
        total += k
    total = min(total, L)
    lengths[-1] -= sum(lengths) - total  # only so that it fits into the document
    n_gaps = L - total + 1
    if len(lengths) > n_gaps:
        lengths = lengths[: n_gaps - 1] + [sum(lengths[n_gaps - 1 :])]
    gaps = torch.randperm(n_gaps, generator=generator)[: len(lengths)].tolist()
    return _layout(tokens, mask_id, dict(zip(gaps, lengths)))


def infilling_inner_gaps(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: spans only go between two kept tokens, never before the first or after the last."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    lengths = _span_lengths(n_mask, lam, generator)
    n_inner = max(L - n_mask - 1, 1)
    if len(lengths) > n_inner:
        lengths = lengths[: n_inner - 1] + [sum(lengths[n_inner - 1 :])]
    gaps = (torch.randperm(n_inner, generator=generator)[: len(lengths)] + 1).tolist()
    if L - n_mask <= 1:  # no inner gap at all: one span in front
        gaps, lengths = [0], [n_mask]
    return _layout(tokens, mask_id, dict(zip(gaps, lengths)))


def infilling_gaps_with_replacement(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: gaps drawn with torch.randint (with replacement): two spans can share a gap and touch."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    lengths = _span_lengths(n_mask, lam, generator)
    n_gaps = L - n_mask + 1
    gaps = torch.randint(0, n_gaps, (len(lengths),), generator=generator).tolist()
    per_gap = {}
    for g, k in zip(gaps, lengths):
        per_gap.setdefault(g, []).append(k)
    values, out, i = tokens.tolist(), [], 0
    for g in range(n_gaps):
        for k in per_gap.get(g, []):
            out.append(mask_id)  # one mask per span, side by side when they share a gap
            i += k
        if g < n_gaps - 1:
            out.append(values[i])
            i += 1
    return torch.tensor(out, dtype=tokens.dtype)


def infilling_global_rng(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: torch.poisson and torch.randperm called without generator= (global RNG)."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    lengths, total = [], 0
    while total < n_mask:
        k = min(int(torch.poisson(torch.tensor([lam])).item()), n_mask - total)
        lengths.append(k)
        total += k
    n_gaps = L - n_mask + 1
    if len(lengths) > n_gaps:
        lengths = lengths[: n_gaps - 1] + [sum(lengths[n_gaps - 1 :])]
    gaps = torch.randperm(n_gaps)[: len(lengths)].tolist()
    return _layout(tokens, mask_id, dict(zip(gaps, lengths)))


def infilling_float_output(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Wrong: output built with torch.cat of float pieces: the ids come back as float32."""
    L = tokens.shape[0]
    n_mask = round(p * L)
    if n_mask == 0:
        return tokens.clone()
    lengths = _span_lengths(n_mask, lam, generator)
    n_gaps = L - n_mask + 1
    if len(lengths) > n_gaps:
        lengths = lengths[: n_gaps - 1] + [sum(lengths[n_gaps - 1 :])]
    gaps = torch.randperm(n_gaps, generator=generator)[: len(lengths)].tolist()
    span_at = dict(zip(gaps, lengths))
    pieces, i = [], 0
    for g in range(n_gaps):
        if g in span_at:
            pieces.append(torch.tensor([float(mask_id)]))
            i += span_at[g]
        if g < n_gaps - 1:
            pieces.append(tokens[i : i + 1].float())
            i += 1
    return torch.cat(pieces)


# ---------------------------------------------------------------- sentence_permutation


def _sentences(tokens, eos_id):
    ends = (tokens == eos_id).nonzero().flatten().tolist()
    sentences, start = [], 0
    for e in ends:
        sentences.append(tokens[start : e + 1])
        start = e + 1
    return sentences, tokens[start:]


def sentence_permutation(tokens, eos_id, generator=None):
    """Right: cut after each eos_id, randperm the sentences, the unfinished rest stays last."""
    sentences, rest = _sentences(tokens, eos_id)
    if not sentences:
        return tokens.clone()
    order = torch.randperm(len(sentences), generator=generator).tolist()
    return torch.cat([sentences[i] for i in order] + [rest])


def sentence_permutation_sortkey(tokens, eos_id, generator=None):
    """Right: a sentence id per token from a cumsum, new ranks from randperm, a stable sort."""
    is_eos = (tokens == eos_id).long()
    n = int(is_eos.sum())
    if n == 0:
        return tokens.clone()
    sentence = torch.cumsum(is_eos, 0) - is_eos  # 0..n-1 for full sentences, n for the rest
    order = torch.randperm(n, generator=generator)  # new position i holds sentence order[i]
    rank = torch.empty(n + 1, dtype=torch.long)
    rank[order] = torch.arange(n)
    rank[n] = n
    key = rank[sentence.cpu()].to(tokens.device)
    idx = torch.sort(key, stable=True).indices
    return tokens[idx]


def permutation_tokens(tokens, eos_id, generator=None):
    """Wrong: torch.randperm over the tokens: the tokens are shuffled, not the sentences."""
    return tokens[torch.randperm(tokens.shape[0], generator=generator)]


def permutation_rest_shuffled(tokens, eos_id, generator=None):
    """Wrong: the unfinished last piece is shuffled in as one more sentence."""
    sentences, rest = _sentences(tokens, eos_id)
    if len(rest):
        sentences.append(rest)
    if not sentences:
        return tokens.clone()
    order = torch.randperm(len(sentences), generator=generator).tolist()
    return torch.cat([sentences[i] for i in order])


def permutation_cut_before_eos(tokens, eos_id, generator=None):
    """Wrong: the document is cut *before* each eos_id, so each boundary starts the next piece."""
    starts = (tokens == eos_id).nonzero().flatten().tolist()
    pieces, prev = [], 0
    for s in starts:
        pieces.append(tokens[prev:s])
        prev = s
    rest = tokens[prev:]
    if not pieces:
        return tokens.clone()
    order = torch.randperm(len(pieces), generator=generator).tolist()
    return torch.cat([pieces[i] for i in order] + [rest])


def permutation_drop_empty(tokens, eos_id, generator=None):
    """Wrong: split on eos_id like str.split, empty pieces dropped, eos_id re-appended."""
    values = tokens.tolist()
    pieces, current = [], []
    for t in values:
        if t == eos_id:
            if current:
                pieces.append(current + [eos_id])
            current = []
        else:
            current.append(t)
    if not pieces:
        return tokens.clone()
    order = torch.randperm(len(pieces), generator=generator).tolist()
    out = [t for i in order for t in pieces[i]] + current
    return torch.tensor(out, dtype=tokens.dtype, device=tokens.device)


def permutation_sattolo(tokens, eos_id, generator=None):
    """Wrong: a hand-written shuffle with j drawn from 0..i-1 (Sattolo): never the same order."""
    sentences, rest = _sentences(tokens, eos_id)
    order = list(range(len(sentences)))
    for i in range(len(order) - 1, 0, -1):
        j = int(torch.randint(0, i, (1,), generator=generator))
        order[i], order[j] = order[j], order[i]
    if not sentences:
        return tokens.clone()
    return torch.cat([sentences[i] for i in order] + [rest])


def permutation_with_replacement(tokens, eos_id, generator=None):
    """Wrong: the order is n draws of torch.randint: sentences repeat and others vanish."""
    sentences, rest = _sentences(tokens, eos_id)
    if not sentences:
        return tokens.clone()
    order = torch.randint(0, len(sentences), (len(sentences),), generator=generator).tolist()
    return torch.cat([sentences[i] for i in order] + [rest])


def permutation_global_rng(tokens, eos_id, generator=None):
    """Wrong: torch.randperm without generator= (the global RNG)."""
    sentences, rest = _sentences(tokens, eos_id)
    if not sentences:
        return tokens.clone()
    order = torch.randperm(len(sentences)).tolist()
    return torch.cat([sentences[i] for i in order] + [rest])


def permutation_rest_first(tokens, eos_id, generator=None):
    """Wrong: the unfinished piece is put in front of the shuffled sentences."""
    sentences, rest = _sentences(tokens, eos_id)
    if not sentences:
        return tokens.clone()
    order = torch.randperm(len(sentences), generator=generator).tolist()
    return torch.cat([rest] + [sentences[i] for i in order])


# ---------------------------------------------------------------- document_rotation


def document_rotation(tokens, generator=None):
    """Right: k = randint(0, L), tokens[k:] then tokens[:k]; empty stays empty."""
    L = tokens.shape[0]
    if L == 0:
        return tokens.clone()
    k = int(torch.randint(0, L, (1,), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def document_rotation_roll(tokens, generator=None):
    """Right: k = floor(L * U) (clamped below L), torch.roll by -k."""
    L = tokens.numel()
    if L == 0:
        return tokens.clone()
    k = min(int(torch.rand((), generator=generator) * L), L - 1)
    return torch.roll(tokens, shifts=-k, dims=0)


def rotation_never_zero(tokens, generator=None):
    """Wrong: k from 1 .. L-1 (randint(1, L)): the document never keeps its own start."""
    L = tokens.shape[0]
    if L <= 1:
        return tokens.clone()
    k = int(torch.randint(1, L, (1,), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def rotation_inclusive(tokens, generator=None):
    """Wrong: k from 0 .. L (randint(0, L + 1)): k = L repeats k = 0, twice as likely."""
    L = tokens.shape[0]
    if L == 0:
        return tokens.clone()
    k = int(torch.randint(0, L + 1, (1,), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def rotation_seam(tokens, generator=None):
    """Wrong: tokens[k:] + tokens[:k - 1]: the token before the cut is lost."""
    L = tokens.shape[0]
    if L == 0:
        return tokens.clone()
    k = int(torch.randint(0, L, (1,), generator=generator))
    return torch.cat([tokens[k:], tokens[: max(k - 1, 0)]])


def rotation_new_generator(tokens, generator=None):
    """Wrong: generator = generator or torch.Generator(): with None every call rotates the same."""
    generator = generator or torch.Generator()
    L = tokens.shape[0]
    if L == 0:
        return tokens.clone()
    k = int(torch.randint(0, L, (1,), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def rotation_global_rng(tokens, generator=None):
    """Wrong: torch.randint without generator= (the global RNG)."""
    L = tokens.shape[0]
    if L == 0:
        return tokens.clone()
    k = int(torch.randint(0, L, (1,)))
    return torch.cat([tokens[k:], tokens[:k]])


def rotation_rounded(tokens, generator=None):
    """Wrong: k = round(U * (L - 1)): the two end rotations are half as likely as the others."""
    L = tokens.shape[0]
    if L == 0:
        return tokens.clone()
    k = round(float(torch.rand(1, generator=generator)) * (L - 1))
    return torch.cat([tokens[k:], tokens[:k]])


def rotation_empty_crash(tokens, generator=None):
    """Wrong: no empty-document case: randint(0, 0) raises on an empty document."""
    k = int(torch.randint(0, tokens.shape[0], (1,), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


WRONG = {
    "text_infilling": [
        infilling_mask_per_token,
        infilling_skip_zero_spans,
        infilling_floor,
        infilling_no_cut,
        infilling_inner_gaps,
        infilling_gaps_with_replacement,
        infilling_global_rng,
        infilling_float_output,
    ],
    "sentence_permutation": [
        permutation_tokens,
        permutation_rest_shuffled,
        permutation_cut_before_eos,
        permutation_drop_empty,
        permutation_sattolo,
        permutation_with_replacement,
        permutation_global_rng,
        permutation_rest_first,
    ],
    "document_rotation": [
        rotation_never_zero,
        rotation_inclusive,
        rotation_seam,
        rotation_new_generator,
        rotation_global_rng,
        rotation_rounded,
        rotation_empty_crash,
    ],
}
RIGHT = {
    "text_infilling": text_infilling,
    "sentence_permutation": sentence_permutation,
    "document_rotation": document_rotation,
}
RIGHT2 = {
    "text_infilling": text_infilling_vectorised,
    "sentence_permutation": sentence_permutation_sortkey,
    "document_rotation": document_rotation_roll,
}
