"""Lesson 09: BERT masking, WordPiece, mean pooling."""

import torch


def _chosen(tokens, p, generator, special_ids):
    r = torch.rand(tokens.shape, generator=generator, device=tokens.device)
    chosen = r < p
    if special_ids is not None:
        chosen &= ~torch.isin(tokens, torch.as_tensor(list(special_ids), device=tokens.device))
    return chosen


def mask_right(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Correct."""
    chosen = _chosen(tokens, p, generator, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=tokens.device)
    rand = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=tokens.device, dtype=tokens.dtype
    )
    inputs = torch.where(chosen & (u < 0.8), torch.full_like(tokens, mask_id), tokens)
    inputs = torch.where(chosen & (u >= 0.8) & (u < 0.9), rand, inputs)
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    return inputs, labels


def mask_randint_high_off_by_one(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Random replacement drawn from [0, vocab_size - 1): the last id is never drawn."""
    chosen = _chosen(tokens, p, generator, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=tokens.device)
    rand = torch.randint(
        0,
        vocab_size - 1,
        tokens.shape,
        generator=generator,
        device=tokens.device,
        dtype=tokens.dtype,
    )
    inputs = torch.where(chosen & (u < 0.8), torch.full_like(tokens, mask_id), tokens)
    inputs = torch.where(chosen & (u >= 0.8) & (u < 0.9), rand, inputs)
    return inputs, torch.where(chosen, tokens, torch.full_like(tokens, -100))


def mask_independent_draws(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Two independent Bernoullis: mask with 0.8, else random with 0.1 (so 2 % of chosen, not 10 %)."""
    chosen = _chosen(tokens, p, generator, special_ids)
    m = torch.rand(tokens.shape, generator=generator, device=tokens.device) < 0.8
    r = torch.rand(tokens.shape, generator=generator, device=tokens.device) < 0.1
    rand = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=tokens.device, dtype=tokens.dtype
    )
    inputs = torch.where(chosen & m, torch.full_like(tokens, mask_id), tokens)
    inputs = torch.where(chosen & ~m & r, rand, inputs)
    return inputs, torch.where(chosen, tokens, torch.full_like(tokens, -100))


def mask_exact_count(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Chooses exactly round(p * n) positions of the whole tensor with randperm (specials included)."""
    flat = tokens.flatten()
    n = round(p * flat.numel())
    chosen = torch.zeros_like(flat, dtype=torch.bool)
    chosen[torch.randperm(flat.numel(), generator=generator, device=tokens.device)[:n]] = True
    chosen = chosen.view(tokens.shape)
    u = torch.rand(tokens.shape, generator=generator, device=tokens.device)
    rand = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=tokens.device, dtype=tokens.dtype
    )
    inputs = torch.where(chosen & (u < 0.8), torch.full_like(tokens, mask_id), tokens)
    inputs = torch.where(chosen & (u >= 0.8) & (u < 0.9), rand, inputs)
    return inputs, torch.where(chosen, tokens, torch.full_like(tokens, -100))


def mask_labels_only_masked(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Labels only at the positions that became [MASK] (not at the random / unchanged ones)."""
    chosen = _chosen(tokens, p, generator, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=tokens.device)
    rand = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=tokens.device, dtype=tokens.dtype
    )
    masked = chosen & (u < 0.8)
    inputs = torch.where(masked, torch.full_like(tokens, mask_id), tokens)
    inputs = torch.where(chosen & (u >= 0.8) & (u < 0.9), rand, inputs)
    return inputs, torch.where(masked, tokens, torch.full_like(tokens, -100))


def mask_float_labels(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Labels built with torch.full(shape, -100) (float dtype)."""
    inputs, labels = mask_right(tokens, mask_id, vocab_size, p, generator, special_ids)
    return inputs, torch.where(labels != -100, labels.float(), torch.full(tokens.shape, -100.0))


def wordpiece_right(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Correct."""
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                pieces.append(piece)
                start = end
                break
        else:
            return [unk_token]
    return pieces


def wordpiece_unk_piece(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Replaces only the unmatched character by [UNK] and continues."""
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                pieces.append(piece)
                start = end
                break
        else:
            pieces.append(unk_token)
            start += 1
    return pieces


def wordpiece_ge_max(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """[UNK] when len(word) >= max_chars_per_word (off by one)."""
    if len(word) >= max_chars_per_word:
        return [unk_token]
    return wordpiece_right(word, vocab, unk_token, max_chars_per_word + 1)


def wordpiece_hash_stripped(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Looks pieces up with ## but appends them without the ## prefix."""
    return [
        p[2:] if p.startswith("##") else p
        for p in wordpiece_right(word, vocab, unk_token, max_chars_per_word)
    ]


def wordpiece_end_exclusive(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Tries ends from len(word) - 1 down: never the whole remaining suffix."""
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word) - 1, start, -1):
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                pieces.append(piece)
                start = end
                break
        else:
            piece = word[start:] if start == 0 else "##" + word[start:]
            if piece in vocab:
                pieces.append(piece)
                break
            return [unk_token]
    return pieces


def wordpiece_chars(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Whole word first; otherwise one character per piece (no longest match)."""
    if len(word) > max_chars_per_word:
        return [unk_token]
    if word in vocab:
        return [word]
    pieces = []
    for i, ch in enumerate(word):
        piece = ch if i == 0 else "##" + ch
        if piece not in vocab:
            return [unk_token]
        pieces.append(piece)
    return pieces


def pool_right(hidden, attention_mask, normalize=True):
    """Correct."""
    m = attention_mask.to(hidden.dtype)[..., None]
    mean = (hidden * m).sum(1) / m.sum(1)
    return torch.nn.functional.normalize(mean, dim=-1) if normalize else mean


def pool_normalize_wrong_axis(hidden, attention_mask, normalize=True):
    """Normalises over the batch axis (dim=0)."""
    m = attention_mask.to(hidden.dtype)[..., None]
    mean = (hidden * m).sum(1) / m.sum(1)
    return torch.nn.functional.normalize(mean, dim=0) if normalize else mean


def pool_bool_mask_int_division(hidden, attention_mask, normalize=True):
    """Divides (B, d) by the (B,) token counts without keepdim (broadcasts against d)."""
    m = attention_mask.to(hidden.dtype)
    mean = (hidden * m[..., None]).sum(1) / m.sum(1)
    return torch.nn.functional.normalize(mean, dim=-1) if normalize else mean


def pool_ignores_normalize_flag(hidden, attention_mask, normalize=True):
    """Always normalises."""
    return pool_right(hidden, attention_mask, True)


def pool_max(hidden, attention_mask, normalize=True):
    """Max-pooling over the real tokens."""
    masked = hidden.masked_fill(~attention_mask.bool()[..., None], float("-inf"))
    out = masked.max(1).values
    return torch.nn.functional.normalize(out, dim=-1) if normalize else out


def pool_no_grad(hidden, attention_mask, normalize=True):
    """Computes under torch.no_grad() (no gradient to hidden)."""
    with torch.no_grad():
        return pool_right(hidden, attention_mask, normalize)


def pool_l1(hidden, attention_mask, normalize=True):
    """Normalises with the L1 norm."""
    m = attention_mask.to(hidden.dtype)[..., None]
    mean = (hidden * m).sum(1) / m.sum(1)
    return mean / mean.abs().sum(-1, keepdim=True) if normalize else mean


WRONG = {
    "bert_mask_tokens": [
        mask_randint_high_off_by_one,
        mask_independent_draws,
        mask_exact_count,
        mask_labels_only_masked,
        mask_float_labels,
    ],
    "wordpiece_tokenize": [
        wordpiece_unk_piece,
        wordpiece_ge_max,
        wordpiece_hash_stripped,
        wordpiece_end_exclusive,
        wordpiece_chars,
    ],
    "mean_pool": [
        pool_normalize_wrong_axis,
        pool_bool_mask_int_division,
        pool_ignores_normalize_flag,
        pool_max,
        pool_no_grad,
        pool_l1,
    ],
}
RIGHT = {
    "bert_mask_tokens": mask_right,
    "wordpiece_tokenize": wordpiece_right,
    "mean_pool": pool_right,
}
