"""Lesson 09 (BERT): held-out wrong and right implementations, from the exercise text."""

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------- bert_mask_tokens


def _specials(tokens, special_ids):
    if not special_ids:
        return torch.zeros_like(tokens, dtype=torch.bool)
    return torch.isin(tokens, torch.as_tensor(list(special_ids), device=tokens.device))


def mask_right(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Right: two uniform draws and torch.where."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen &= ~_specials(tokens, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    rand_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = tokens.clone()
    inputs = torch.where(chosen & (u < 0.8), torch.full_like(tokens, mask_id), inputs)
    inputs = torch.where(chosen & (u >= 0.8) & (u < 0.9), rand_ids, inputs)
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    return inputs, labels


def mask_right2(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Right: boolean indexing, random ids drawn only for the positions that need them."""
    dev = tokens.device
    inputs = tokens.clone()
    labels = torch.full_like(tokens, -100)
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    if special_ids is not None:
        for s in special_ids:
            chosen = chosen & (tokens != s)
    labels[chosen] = tokens[chosen]
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    to_mask = chosen & (u < 0.8)
    to_rand = chosen & (u >= 0.8) & (u < 0.9)
    inputs[to_mask] = mask_id
    n = int(to_rand.sum())
    inputs[to_rand] = torch.randint(vocab_size, (n,), generator=generator, device=dev).to(
        tokens.dtype
    )
    return inputs, labels


def mask_in_place(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Wrong: inputs = tokens (no copy): the caller's tokens are corrupted too."""
    dev = tokens.device
    labels = torch.full_like(tokens, -100)
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen &= ~_specials(tokens, special_ids)
    labels[chosen] = tokens[chosen]
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    inputs = tokens
    inputs[chosen & (u < 0.8)] = mask_id
    sel = chosen & (u >= 0.8) & (u < 0.9)
    inputs[sel] = torch.randint(
        0, vocab_size, (int(sel.sum()),), generator=generator, device=dev, dtype=tokens.dtype
    )
    return inputs, labels


def mask_independent_random(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Wrong: 80% [MASK] and a separate 10% random draw that can overwrite masked positions."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen &= ~_specials(tokens, special_ids)
    to_mask = chosen & (torch.rand(tokens.shape, generator=generator, device=dev) < 0.8)
    to_rand = chosen & (torch.rand(tokens.shape, generator=generator, device=dev) < 0.1)
    rand_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = tokens.clone()
    inputs[to_mask] = mask_id
    inputs[to_rand] = rand_ids[to_rand]
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    return inputs, labels


def mask_int64_random(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Wrong: random ids drawn as int64 and merged with torch.where, so int32 tokens come back int64."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen &= ~_specials(tokens, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    rand_ids = torch.randint(0, vocab_size, tokens.shape, generator=generator, device=dev)
    inputs = torch.where(chosen & (u < 0.8), mask_id, tokens)
    inputs = torch.where(chosen & (u >= 0.8) & (u < 0.9), rand_ids, inputs)
    labels = torch.where(chosen, tokens, -100)
    return inputs, labels


def mask_exact_count(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Wrong: chooses exactly round(p * n) positions by randperm instead of each with probability p."""
    dev = tokens.device
    flat = tokens.reshape(-1)
    eligible = (~_specials(tokens, special_ids)).reshape(-1).nonzero().squeeze(-1)
    n_pick = round(p * eligible.numel())
    perm = torch.randperm(eligible.numel(), generator=generator, device=dev)[:n_pick]
    chosen = torch.zeros_like(flat, dtype=torch.bool)
    chosen[eligible[perm]] = True
    u = torch.rand(flat.shape, generator=generator, device=dev)
    rand_ids = torch.randint(
        0, vocab_size, flat.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = flat.clone()
    inputs[chosen & (u < 0.8)] = mask_id
    sel = chosen & (u >= 0.8) & (u < 0.9)
    inputs[sel] = rand_ids[sel]
    labels = torch.where(chosen, flat, torch.full_like(flat, -100))
    return inputs.reshape(tokens.shape), labels.reshape(tokens.shape)


def mask_labels_minus100_unchanged(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Wrong: labels only where the input actually changed (the 10% kept tokens get -100)."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen &= ~_specials(tokens, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    rand_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = tokens.clone()
    inputs[chosen & (u < 0.8)] = mask_id
    sel = chosen & (u >= 0.8) & (u < 0.9)
    inputs[sel] = rand_ids[sel]
    labels = torch.where(chosen & (u < 0.9), tokens, torch.full_like(tokens, -100))
    return inputs, labels


def mask_randint_no_generator(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Wrong: the random replacement ids come from torch.randint without generator=."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen &= ~_specials(tokens, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    rand_ids = torch.randint(0, vocab_size, tokens.shape, device=dev, dtype=tokens.dtype)
    inputs = tokens.clone()
    inputs[chosen & (u < 0.8)] = mask_id
    sel = chosen & (u >= 0.8) & (u < 0.9)
    inputs[sel] = rand_ids[sel]
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    return inputs, labels


# ---------------------------------------------------------------- wordpiece_tokenize


def wp_right(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Right: the classic while loop, longest end first."""
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        end, found = len(word), None
        while start < end:
            piece = word[start:end]
            if start > 0:
                piece = "##" + piece
            if piece in vocab:
                found = piece
                break
            end -= 1
        if found is None:
            return [unk_token]
        pieces.append(found)
        start = end
    return pieces


def wp_right2(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Right: for loops over candidate ends, with a for-else for the failure."""
    if len(word) > max_chars_per_word:
        return [unk_token]
    out = []
    i = 0
    n = len(word)
    while i < n:
        prefix = "##" if i else ""
        for j in range(n, i, -1):
            if prefix + word[i:j] in vocab:
                out.append(prefix + word[i:j])
                i = j
                break
        else:
            return [unk_token]
    return out


def wp_never_single_char(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: the inner loop stops at end > start + 1, so one-character pieces are never tried."""
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        found = None
        for end in range(len(word), start + 1, -1):
            piece = ("##" if start > 0 else "") + word[start:end]
            if piece in vocab:
                found = (piece, end)
                break
        if found is None:
            return [unk_token]
        pieces.append(found[0])
        start = found[1]
    return pieces


def wp_return_str(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: returns unk_token itself (a str), not [unk_token], for unknown or long words."""
    if len(word) > max_chars_per_word:
        return unk_token
    out = wp_right(word, vocab, unk_token, max_chars_per_word)
    return unk_token if out == [unk_token] else out


def wp_limit_off_by_one(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: a word of exactly max_chars_per_word characters is already [UNK] (>= instead of >)."""
    if len(word) >= max_chars_per_word:
        return [unk_token]
    return wp_right(word, vocab, unk_token, max_chars_per_word)


def wp_unk_piece(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: an unmatched position emits [UNK] for one character and goes on."""
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        end = len(word)
        while end > start:
            piece = ("##" if start > 0 else "") + word[start:end]
            if piece in vocab:
                break
            end -= 1
        if end == start:
            pieces.append(unk_token)
            start += 1
        else:
            pieces.append(piece)
            start = end
    return pieces


def wp_lookup_without_prefix(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: looks up the bare substring, then adds '##' to the piece it appends."""
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        end = len(word)
        while end > start and word[start:end] not in vocab:
            end -= 1
        if end == start:
            return [unk_token]
        pieces.append(("##" if start > 0 else "") + word[start:end])
        start = end
    return pieces


# ---------------------------------------------------------------- learn_bpe


def _merge(symbols, pair):
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            out.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


def bpe_learn_right(word_counts, n_merges):
    """Right: dict of symbol lists, a Counter per round, min with (-count, pair)."""
    words = {w: list(w) for w in word_counts}
    merges = []
    for _ in range(n_merges):
        counts = {}
        for w, syms in words.items():
            for a, b in zip(syms, syms[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + word_counts[w]
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        words = {w: _merge(s, best) for w, s in words.items()}
    return merges


def bpe_learn_right2(word_counts, n_merges):
    """Right: a list of (tuple of symbols, count), sorting the pair counts."""
    from collections import Counter

    corpus = [(tuple(w), c) for w, c in word_counts.items()]
    merges = []
    while len(merges) < n_merges:
        counts = Counter()
        for syms, c in corpus:
            for i in range(len(syms) - 1):
                counts[syms[i], syms[i + 1]] += c
        if not counts:
            break
        best = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
        merges.append(best)
        new_corpus = []
        for syms, c in corpus:
            out, i = [], 0
            while i < len(syms):
                if syms[i : i + 2] == best:
                    out.append(best[0] + best[1])
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            new_corpus.append((tuple(out), c))
        corpus = new_corpus
    return merges


def bpe_learn_max_first_seen(word_counts, n_merges):
    """Wrong: max(counts, key=counts.get): ties go to the pair counted first, not the smallest."""
    words = {w: list(w) for w in word_counts}
    merges = []
    for _ in range(n_merges):
        counts = {}
        for w, syms in words.items():
            for a, b in zip(syms, syms[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + word_counts[w]
        if not counts:
            break
        best = max(counts, key=counts.get)
        merges.append(best)
        words = {w: _merge(s, best) for w, s in words.items()}
    return merges


def bpe_learn_string_replace(word_counts, n_merges):
    """Wrong: merges with str.replace on space-joined symbols, which also matches inside symbols."""
    words = {w: " ".join(w) for w in word_counts}
    merges = []
    for _ in range(n_merges):
        counts = {}
        for w, s in words.items():
            syms = s.split()
            for a, b in zip(syms, syms[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + word_counts[w]
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        words = {w: s.replace(best[0] + " " + best[1], best[0] + best[1]) for w, s in words.items()}
    return merges


def bpe_learn_no_early_stop(word_counts, n_merges):
    """Wrong: no early stop: min() of an empty count raises once every word is one symbol."""
    words = {w: list(w) for w in word_counts}
    merges = []
    for _ in range(n_merges):
        counts = {}
        for w, syms in words.items():
            for a, b in zip(syms, syms[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + word_counts[w]
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        words = {w: _merge(s, best) for w, s in words.items()}
    return merges


def bpe_learn_right_to_left(word_counts, n_merges):
    """Wrong: merges scanning right to left, so 'a a a' becomes 'a aa'."""

    def merge_rtl(syms, pair):
        out, i = [], len(syms) - 1
        while i >= 0:
            if i > 0 and (syms[i - 1], syms[i]) == pair:
                out.insert(0, syms[i - 1] + syms[i])
                i -= 2
            else:
                out.insert(0, syms[i])
                i -= 1
        return out

    words = {w: list(w) for w in word_counts}
    merges = []
    for _ in range(n_merges):
        counts = {}
        for w, syms in words.items():
            for a, b in zip(syms, syms[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + word_counts[w]
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        words = {w: merge_rtl(s, best) for w, s in words.items()}
    return merges


def bpe_learn_unweighted(word_counts, n_merges):
    """Wrong: each pair adds 1 per word, ignoring the word's count."""
    words = {w: list(w) for w in word_counts}
    merges = []
    for _ in range(n_merges):
        counts = {}
        for syms in words.values():
            for a, b in zip(syms, syms[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + 1
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        words = {w: _merge(s, best) for w, s in words.items()}
    return merges


# ---------------------------------------------------------------- bpe_encode


def bpe_encode_right(word, ranks):
    """Right: min over the ranked adjacent pairs, merge all occurrences, repeat."""
    syms = list(word)
    while len(syms) > 1:
        pairs = [(a, b) for a, b in zip(syms, syms[1:]) if (a, b) in ranks]
        if not pairs:
            break
        syms = _merge(syms, min(pairs, key=lambda pr: ranks[pr]))
    return syms


def bpe_encode_right2(word, ranks):
    """Right: rank lookup with inf for unranked pairs, in-place merging of every occurrence."""
    syms = list(word)
    while True:
        best, best_r = None, float("inf")
        for i in range(len(syms) - 1):
            r = ranks.get((syms[i], syms[i + 1]), float("inf"))
            if r < best_r:
                best, best_r = (syms[i], syms[i + 1]), r
        if best is None:
            return syms
        i = 0
        while i < len(syms) - 1:
            if (syms[i], syms[i + 1]) == best:
                syms[i : i + 2] = [best[0] + best[1]]
            i += 1


def bpe_encode_one_pass(word, ranks):
    """Wrong: a single pass over the merges in rank order (each applied once, never revisited)."""
    syms = list(word)
    for pair in sorted(ranks, key=ranks.get):
        syms = _merge(syms, pair)
    return syms


def bpe_encode_string_keys(word, ranks):
    """Wrong: looks ranks up by the joined string a + b, which is never a key: no merge happens."""
    syms = list(word)
    while len(syms) > 1:
        pairs = [(a, b) for a, b in zip(syms, syms[1:]) if a + b in ranks]
        if not pairs:
            break
        syms = _merge(syms, min(pairs, key=lambda pr: ranks[pr[0] + pr[1]]))
    return syms


def bpe_encode_empty_word(word, ranks):
    """Wrong: words shorter than two characters come back as [word], so "" gives [""]."""
    if len(word) < 2:
        return [word]
    return bpe_encode_right(word, ranks)


def bpe_encode_most_frequent(word, ranks):
    """Wrong: merges the ranked pair that occurs most often in the word (ties by rank)."""
    syms = list(word)
    while len(syms) > 1:
        pairs = [(a, b) for a, b in zip(syms, syms[1:]) if (a, b) in ranks]
        if not pairs:
            break
        best = min(set(pairs), key=lambda pr: (-pairs.count(pr), ranks[pr]))
        syms = _merge(syms, best)
    return syms


def bpe_encode_returns_str(word, ranks):
    """Wrong: returns the pieces joined by spaces, a str, instead of the list."""
    return " ".join(bpe_encode_right(word, ranks))


# ---------------------------------------------------------------- mean_pool


def pool_right(hidden, attention_mask, normalize=True):
    """Right: masked sum over positions divided by the per-row count, F.normalize."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    mean = (hidden * m).sum(1) / m.sum(1)
    return F.normalize(mean, p=2, dim=-1) if normalize else mean


def pool_right2(hidden, attention_mask, normalize=True):
    """Right: einsum for the weighted sum, an explicit norm division."""
    m = (attention_mask != 0).to(hidden.dtype)
    summed = torch.einsum("bld,bl->bd", hidden, m)
    mean = summed / m.sum(dim=1, keepdim=True)
    if normalize:
        mean = mean / mean.norm(dim=1, keepdim=True)
    return mean


def pool_batch_count(hidden, attention_mask, normalize=True):
    """Wrong: divides every row by the number of real tokens of the whole batch."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    mean = (hidden * m).sum(1) / m.sum()
    return F.normalize(mean, dim=-1) if normalize else mean


def pool_in_place(hidden, attention_mask, normalize=True):
    """Wrong: zeroes the padding in hidden itself (hidden[mask == 0] = 0), then averages."""
    hidden[attention_mask == 0] = 0
    mean = hidden.sum(1) / attention_mask.sum(1, keepdim=True).to(hidden.dtype)
    return F.normalize(mean, dim=-1) if normalize else mean


def pool_normalize_batch_axis(hidden, attention_mask, normalize=True):
    """Wrong: F.normalize(..., dim=0) normalises each feature over the batch."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    mean = (hidden * m).sum(1) / m.sum(1)
    return F.normalize(mean, dim=0) if normalize else mean


def pool_always_normalised(hidden, attention_mask, normalize=True):
    """Wrong: ignores the normalize flag, always returns unit vectors."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    return F.normalize((hidden * m).sum(1) / m.sum(1), dim=-1)


def pool_plain_mean(hidden, attention_mask, normalize=True):
    """Wrong: hidden.mean(1) over all L positions, padding included."""
    mean = hidden.mean(dim=1)
    return F.normalize(mean, dim=-1) if normalize else mean


WRONG = {
    "bert_mask_tokens": [
        mask_in_place,
        mask_independent_random,
        mask_int64_random,
        mask_exact_count,
        mask_labels_minus100_unchanged,
        mask_randint_no_generator,
    ],
    "wordpiece_tokenize": [
        wp_never_single_char,
        wp_return_str,
        wp_limit_off_by_one,
        wp_unk_piece,
        wp_lookup_without_prefix,
    ],
    "learn_bpe": [
        bpe_learn_max_first_seen,
        bpe_learn_string_replace,
        bpe_learn_no_early_stop,
        bpe_learn_right_to_left,
        bpe_learn_unweighted,
    ],
    "bpe_encode": [
        bpe_encode_one_pass,
        bpe_encode_string_keys,
        bpe_encode_empty_word,
        bpe_encode_most_frequent,
        bpe_encode_returns_str,
    ],
    "mean_pool": [
        pool_batch_count,
        pool_in_place,
        pool_normalize_batch_axis,
        pool_always_normalised,
        pool_plain_mean,
    ],
}
RIGHT = {
    "bert_mask_tokens": mask_right,
    "wordpiece_tokenize": wp_right,
    "learn_bpe": bpe_learn_right,
    "bpe_encode": bpe_encode_right,
    "mean_pool": pool_right,
}
RIGHT2 = {
    "bert_mask_tokens": mask_right2,
    "wordpiece_tokenize": wp_right2,
    "learn_bpe": bpe_learn_right2,
    "bpe_encode": bpe_encode_right2,
    "mean_pool": pool_right2,
}
