"""Lesson 10: sentence permutation and document rotation (BART noising)."""

import torch


def rotation_right(tokens, generator=None):
    """Correct."""
    if tokens.numel() == 0:
        return tokens.clone()
    k = int(torch.randint(0, tokens.numel(), (1,), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def rotation_in_place(tokens, generator=None):
    """Rotates the input in place (tokens[:] = ...) and returns it: the caller's tensor changes."""
    if tokens.numel() == 0:
        return tokens
    k = int(torch.randint(0, tokens.numel(), (1,), generator=generator))
    tokens[:] = torch.cat([tokens[k:], tokens[:k]])
    return tokens


def rotation_empty_crash(tokens, generator=None):
    """No special case for an empty document (randint(0, 0) raises)."""
    k = int(torch.randint(0, tokens.numel(), (1,), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def rotation_python_random(tokens, generator=None):
    """Draws k with Python's random module (ignores generator)."""
    import random

    if tokens.numel() == 0:
        return tokens.clone()
    k = random.randrange(tokens.numel())
    return torch.cat([tokens[k:], tokens[:k]])


def rotation_float_k(tokens, generator=None):
    """k = int(rand * (L - 1)): the last rotation never comes out and the others are uneven."""
    if tokens.numel() == 0:
        return tokens.clone()
    k = int(torch.rand(1, generator=generator) * (tokens.numel() - 1))
    return torch.cat([tokens[k:], tokens[:k]])


def rotation_reversed(tokens, generator=None):
    """Reverses the wrapped-around part (tokens[:k].flip(0))."""
    if tokens.numel() == 0:
        return tokens.clone()
    k = int(torch.randint(0, tokens.numel(), (1,), generator=generator))
    return torch.cat([tokens[k:], tokens[:k].flip(0)])


def _sentences(tokens, eos_id):
    ends = (tokens == eos_id).nonzero().flatten().tolist()
    starts = [0] + [e + 1 for e in ends]
    sents = [tokens[s : e + 1] for s, e in zip(starts, ends)]
    return sents, tokens[starts[-1] :]


def permutation_right(tokens, eos_id, generator=None):
    """Correct."""
    sents, tail = _sentences(tokens, eos_id)
    if not sents:
        return tokens.clone()
    order = torch.randperm(len(sents), generator=generator).tolist()
    return torch.cat([sents[i] for i in order] + [tail])


def permutation_drops_tail(tokens, eos_id, generator=None):
    """Forgets the unfinished tail (output shorter than the input)."""
    sents, _ = _sentences(tokens, eos_id)
    if not sents:
        return tokens[:0].clone()
    order = torch.randperm(len(sents), generator=generator).tolist()
    return torch.cat([sents[i] for i in order])


def permutation_tail_first(tokens, eos_id, generator=None):
    """Puts the unfinished tail at the front."""
    sents, tail = _sentences(tokens, eos_id)
    if not sents:
        return tokens.clone()
    order = torch.randperm(len(sents), generator=generator).tolist()
    return torch.cat([tail] + [sents[i] for i in order])


def permutation_derangement(tokens, eos_id, generator=None):
    """Redraws until the order changes (the identity never comes out)."""
    sents, tail = _sentences(tokens, eos_id)
    if len(sents) < 2:
        return tokens.clone()
    while True:
        order = torch.randperm(len(sents), generator=generator).tolist()
        if order != sorted(order):
            return torch.cat([sents[i] for i in order] + [tail])


def permutation_eos_at_start(tokens, eos_id, generator=None):
    """Splits so that each eos_id starts the next sentence instead of ending its own."""
    cuts = (tokens == eos_id).nonzero().flatten().tolist()
    starts = [0] + cuts
    pieces = [tokens[s:e] for s, e in zip(starts, cuts + [tokens.numel()])]
    pieces = [p for p in pieces if p.numel()]
    order = torch.randperm(len(pieces), generator=generator).tolist()
    return torch.cat([pieces[i] for i in order]) if pieces else tokens.clone()


def permutation_tolist_dtype(tokens, eos_id, generator=None):
    """Rebuilds the output with torch.tensor(list) (default int64 dtype, whatever the input's)."""
    out = permutation_right(tokens, eos_id, generator)
    return torch.tensor(out.tolist(), dtype=torch.long)


WRONG = {
    "document_rotation": [
        rotation_in_place,
        rotation_empty_crash,
        rotation_python_random,
        rotation_float_k,
        rotation_reversed,
    ],
    "sentence_permutation": [
        permutation_drops_tail,
        permutation_tail_first,
        permutation_derangement,
        permutation_eos_at_start,
        permutation_tolist_dtype,
    ],
}
RIGHT = {"document_rotation": rotation_right, "sentence_permutation": permutation_right}
