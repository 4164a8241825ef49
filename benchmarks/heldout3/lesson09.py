"""Lesson 09 (BERT): held-out wrong and right implementations, from the exercise text."""

from collections import Counter

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------- bert_mask_tokens


def _specials(tokens, special_ids):
    if special_ids is None:
        return torch.zeros_like(tokens, dtype=torch.bool)
    ids = torch.as_tensor(list(special_ids), dtype=tokens.dtype, device=tokens.device)
    return torch.isin(tokens, ids)


def mask_right(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Right: two uniform draws and torch.where."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen &= ~_specials(tokens, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    random_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = torch.where(chosen & (u < 0.8), torch.full_like(tokens, mask_id), tokens)
    inputs = torch.where(chosen & (u >= 0.8) & (u < 0.9), random_ids, inputs)
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    return inputs, labels


def mask_right2(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Right: bernoulli for the choice, boolean-index assignment, a loop over the specials."""
    dev = tokens.device
    chosen = torch.bernoulli(torch.full(tokens.shape, p, device=dev), generator=generator).bool()
    for s in special_ids or []:
        chosen &= tokens != s
    r = torch.rand(tokens.shape, generator=generator, device=dev)
    inputs = tokens.clone()
    labels = torch.full_like(tokens, -100)
    labels[chosen] = tokens[chosen]
    to_mask = chosen & (r < 0.8)
    to_random = chosen & (r >= 0.8) & (r < 0.9)
    inputs[to_mask] = mask_id
    n = int(to_random.sum())
    inputs[to_random] = torch.randint(
        0, vocab_size, (n,), generator=generator, device=dev, dtype=tokens.dtype
    )
    return inputs, labels


def mask_fixed_count(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Chooses exactly round(p * N) positions with randperm, not each one independently."""
    dev = tokens.device
    flat = tokens.reshape(-1)
    allowed = (~_specials(flat, special_ids)).nonzero().reshape(-1)
    n = round(p * allowed.numel())
    pick = allowed[torch.randperm(allowed.numel(), generator=generator, device=dev)[:n]]
    chosen = torch.zeros_like(flat, dtype=torch.bool)
    chosen[pick] = True
    chosen = chosen.reshape(tokens.shape)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    random_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = torch.where(chosen & (u < 0.8), torch.full_like(tokens, mask_id), tokens)
    inputs = torch.where(chosen & (u >= 0.8) & (u < 0.9), random_ids, inputs)
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    return inputs, labels


def mask_random_off_by_one(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Draws the random token from [0, vocab_size - 1): the last id is never drawn."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen &= ~_specials(tokens, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    random_ids = torch.randint(
        0, vocab_size - 1, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = torch.where(chosen & (u < 0.8), torch.full_like(tokens, mask_id), tokens)
    inputs = torch.where(chosen & (u >= 0.8) & (u < 0.9), random_ids, inputs)
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    return inputs, labels


def mask_nested_ten_percent(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """After the 80 % [MASK], takes 10 % of the remaining 20 % as random (2 % of the chosen)."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen &= ~_specials(tokens, special_ids)
    to_mask = chosen & (torch.rand(tokens.shape, generator=generator, device=dev) < 0.8)
    rest = chosen & ~to_mask
    to_random = rest & (torch.rand(tokens.shape, generator=generator, device=dev) < 0.1)
    random_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = torch.where(to_mask, torch.full_like(tokens, mask_id), tokens)
    inputs = torch.where(to_random, random_ids, inputs)
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    return inputs, labels


def mask_in_place(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Writes the corruption into `tokens` itself (inputs = tokens, no copy)."""
    dev = tokens.device
    labels = torch.full_like(tokens, -100)
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen &= ~_specials(tokens, special_ids)
    labels[chosen] = tokens[chosen]
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    inputs = tokens
    to_random = chosen & (u >= 0.8) & (u < 0.9)
    inputs[chosen & (u < 0.8)] = mask_id
    inputs[to_random] = torch.randint(
        0, vocab_size, (int(to_random.sum()),), generator=generator, device=dev, dtype=tokens.dtype
    )
    return inputs, labels


def mask_randint_global(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Passes the generator to torch.rand but forgets it in torch.randint."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen &= ~_specials(tokens, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    random_ids = torch.randint(0, vocab_size, tokens.shape, device=dev, dtype=tokens.dtype)
    inputs = torch.where(chosen & (u < 0.8), torch.full_like(tokens, mask_id), tokens)
    inputs = torch.where(chosen & (u >= 0.8) & (u < 0.9), random_ids, inputs)
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    return inputs, labels


def mask_specials_labelled(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Protects the special tokens from replacement but still gives them a label when drawn."""
    dev = tokens.device
    drawn = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen = drawn & ~_specials(tokens, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    random_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = torch.where(chosen & (u < 0.8), torch.full_like(tokens, mask_id), tokens)
    inputs = torch.where(chosen & (u >= 0.8) & (u < 0.9), random_ids, inputs)
    labels = torch.where(drawn, tokens, torch.full_like(tokens, -100))
    return inputs, labels


# ---------------------------------------------------------------- wordpiece_tokenize


def wp_right(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Right: the textbook while loop, longest end first."""
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        end, found = len(word), None
        while end > start:
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
    """Right: recursion; scans the ends upward and keeps the longest piece found."""
    if len(word) > max_chars_per_word:
        return [unk_token]

    def cut(start):
        if start == len(word):
            return []
        prefix = "##" if start else ""
        best = None
        for end in range(start + 1, len(word) + 1):
            if prefix + word[start:end] in vocab:
                best = end
        if best is None:
            return None
        rest = cut(best)
        return None if rest is None else [prefix + word[start:best]] + rest

    pieces = cut(0)
    return [unk_token] if pieces is None else pieces


def wp_limit_inclusive(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Rejects a word of exactly max_chars_per_word characters (>= instead of >)."""
    if len(word) >= max_chars_per_word:
        return [unk_token]
    return wp_right(word, vocab, unk_token, max_chars_per_word)


def wp_unk_per_piece(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """When no piece starts at a position, appends [UNK] for one character and goes on."""
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        end = len(word)
        while end > start:
            piece = ("##" if start else "") + word[start:end]
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


def wp_range_misses_full(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """range(len(word), start + 1, -1): a one-character piece is never tried."""
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        found = None
        for end in range(len(word), start + 1, -1):
            piece = ("##" if start else "") + word[start:end]
            if piece in vocab:
                found = (piece, end)
                break
        if found is None:
            return [unk_token]
        pieces.append(found[0])
        start = found[1]
    return pieces


def wp_vocab_get(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Looks pieces up with `if vocab.get(piece):`, false for id 0 and broken for a set."""
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        end = len(word)
        while end > start:
            piece = ("##" if start else "") + word[start:end]
            if vocab.get(piece):
                break
            end -= 1
        if end == start:
            return [unk_token]
        pieces.append(piece)
        start = end
    return pieces


def wp_unk_string(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Returns the bare string unk_token, not the list [unk_token], for an unknown word."""
    pieces = wp_right(word, vocab, unk_token, max_chars_per_word)
    return unk_token if pieces == [unk_token] else pieces


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
    return tuple(out)


def learn_right(word_counts, n_merges):
    """Right: a dict of symbol tuples, a Counter of pairs, min with the tie rule."""
    words = {tuple(w): c for w, c in word_counts.items()}
    merges = []
    for _ in range(n_merges):
        counts = Counter()
        for symbols, c in words.items():
            for pair in zip(symbols, symbols[1:]):
                counts[pair] += c
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        new = {}
        for symbols, c in words.items():
            key = _merge(symbols, best)
            new[key] = new.get(key, 0) + c
        words = new
    return merges


def learn_right2(word_counts, n_merges):
    """Right: lists of symbol lists edited in place, sorting the pairs to break ties."""
    corpus = [[list(w), c] for w, c in word_counts.items()]
    merges = []
    while len(merges) < n_merges:
        counts = {}
        for symbols, c in corpus:
            for i in range(len(symbols) - 1):
                pair = (symbols[i], symbols[i + 1])
                counts[pair] = counts.get(pair, 0) + c
        if not counts:
            break
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        a, b = ranked[0][0]
        merges.append((a, b))
        for entry in corpus:
            symbols, i = entry[0], 0
            while i < len(symbols) - 1:
                if symbols[i] == a and symbols[i + 1] == b:
                    symbols[i : i + 2] = [a + b]
                i += 1
    return merges


def learn_most_common(word_counts, n_merges):
    """Takes Counter.most_common(1): ties go to the pair counted first, not the smallest."""
    words = {tuple(w): c for w, c in word_counts.items()}
    merges = []
    for _ in range(n_merges):
        counts = Counter()
        for symbols, c in words.items():
            for pair in zip(symbols, symbols[1:]):
                counts[pair] += c
        if not counts:
            break
        best = counts.most_common(1)[0][0]
        merges.append(best)
        words = {_merge(s, best): c for s, c in words.items()}
    return merges


def learn_string_replace(word_counts, n_merges):
    """Sennrich's space-joined words with str.replace('a b', 'ab'): matches across symbol edges."""
    words = {" ".join(w): c for w, c in word_counts.items()}
    merges = []
    for _ in range(n_merges):
        counts = Counter()
        for w, c in words.items():
            s = w.split()
            for pair in zip(s, s[1:]):
                counts[pair] += c
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        words = {w.replace(" ".join(best), "".join(best)): c for w, c in words.items()}
    return merges


def learn_no_early_stop(word_counts, n_merges):
    """Never stops early: min() of an empty Counter raises once every word is one symbol."""
    words = {tuple(w): c for w, c in word_counts.items()}
    merges = []
    for _ in range(n_merges):
        counts = Counter()
        for symbols, c in words.items():
            for pair in zip(symbols, symbols[1:]):
                counts[pair] += c
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        words = {_merge(s, best): c for s, c in words.items()}
    return merges


def learn_joined_strings(word_counts, n_merges):
    """Records each merge as the new symbol a + b, not as the pair (a, b)."""
    return ["".join(pair) for pair in learn_right(word_counts, n_merges)]


# ---------------------------------------------------------------- bpe_encode


def encode_right(word, ranks):
    """Right: repeat, take the ranked pair with the lowest rank, merge all occurrences."""
    symbols = list(word)
    while True:
        ranked = [p for p in zip(symbols, symbols[1:]) if p in ranks]
        if not ranked:
            return symbols
        best = min(ranked, key=ranks.__getitem__)
        symbols = list(_merge(symbols, best))


def encode_right2(word, ranks):
    """Right: GPT-2's loop, with a set of pairs and an infinite default rank."""
    word = tuple(word)
    if len(word) < 2:
        return list(word)
    while True:
        pairs = set(zip(word, word[1:]))
        bigram = min(pairs, key=lambda p: ranks.get(p, float("inf")))
        if bigram not in ranks:
            break
        first, second = bigram
        new, i = [], 0
        while i < len(word):
            if i < len(word) - 1 and word[i] == first and word[i + 1] == second:
                new.append(first + second)
                i += 2
            else:
                new.append(word[i])
                i += 1
        word = tuple(new)
        if len(word) == 1:
            break
    return list(word)


def encode_short_word_as_is(word, ranks):
    """Returns [word] for a word shorter than 2 characters, so '' gives ['']."""
    if len(word) < 2:
        return [word]
    return encode_right(word, ranks)


def encode_default_rank_zero(word, ranks):
    """min() with ranks.get(pair, 0): an unranked pair wins and the loop stops too early."""
    symbols = list(word)
    while len(symbols) > 1:
        best = min(zip(symbols, symbols[1:]), key=lambda p: ranks.get(p, 0))
        if best not in ranks:
            break
        symbols = list(_merge(symbols, best))
    return symbols


def encode_step_one(word, ranks):
    """After a merge the index moves on by one, not two: the pair's second symbol is kept too."""
    symbols = list(word)
    for _ in range(100):
        ranked = [p for p in zip(symbols, symbols[1:]) if p in ranks]
        if not ranked:
            break
        a, b = min(ranked, key=ranks.__getitem__)
        new, i = [], 0
        while i < len(symbols):
            if i + 1 < len(symbols) and symbols[i] == a and symbols[i + 1] == b:
                new.append(a + b)
            else:
                new.append(symbols[i])
            i += 1
        symbols = new
    return symbols


def encode_replay_in_order(word, ranks):
    """Replays every merge once in rank order instead of picking the lowest present pair."""
    symbols = list(word)
    for pair in sorted(ranks, key=ranks.__getitem__):
        symbols = list(_merge(symbols, pair))
    return symbols


def encode_split_on_spaces(word, ranks):
    """Starts from word.split() (whole words) instead of the characters."""
    symbols = word.split()
    while True:
        ranked = [p for p in zip(symbols, symbols[1:]) if p in ranks]
        if not ranked:
            return symbols
        symbols = list(_merge(symbols, min(ranked, key=ranks.__getitem__)))


# ---------------------------------------------------------------- mean_pool


def pool_right(hidden, attention_mask, normalize=True):
    """Right: float mask, sum over L, divide by the count, F.normalize."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    mean = (hidden * m).sum(1) / m.sum(1)
    return F.normalize(mean, dim=-1) if normalize else mean


def pool_right2(hidden, attention_mask, normalize=True):
    """Right: einsum for the masked sum, divide by the vector norm by hand."""
    m = attention_mask.to(hidden.dtype)
    mean = torch.einsum("bld,bl->bd", hidden, m) / m.sum(-1, keepdim=True)
    if normalize:
        mean = mean / torch.linalg.vector_norm(mean, dim=-1, keepdim=True)
    return mean


def pool_normalize_batch_axis(hidden, attention_mask, normalize=True):
    """F.normalize(mean, dim=0): unit length over the batch, not per sentence."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    mean = (hidden * m).sum(1) / m.sum(1)
    return F.normalize(mean, dim=0) if normalize else mean


def pool_no_keepdim(hidden, attention_mask, normalize=True):
    """Divides (B, d) by the count (B,) without keepdim."""
    m = attention_mask.to(hidden.dtype)
    mean = (hidden * m.unsqueeze(-1)).sum(1) / m.sum(1)
    return F.normalize(mean, dim=-1) if normalize else mean


def pool_boolean_index(hidden, attention_mask, normalize=True):
    """hidden[mask.bool()] flattens the batch: one mean of every real token, repeated per row."""
    real = hidden[attention_mask.bool()]
    mean = real.mean(0, keepdim=True).expand(hidden.shape[0], -1)
    return F.normalize(mean, dim=-1) if normalize else mean


def pool_in_place(hidden, attention_mask, normalize=True):
    """Zeroes the padding in `hidden` itself (hidden *= mask) before summing."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    with torch.no_grad():
        hidden *= m
    mean = hidden.sum(1) / m.sum(1)
    return F.normalize(mean, dim=-1) if normalize else mean


def pool_always_normalised(hidden, attention_mask, normalize=True):
    """Ignores the normalize flag and always returns unit vectors."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    return F.normalize((hidden * m).sum(1) / m.sum(1), dim=-1)


WRONG = {
    "bert_mask_tokens": [
        mask_fixed_count,
        mask_random_off_by_one,
        mask_nested_ten_percent,
        mask_in_place,
        mask_randint_global,
        mask_specials_labelled,
    ],
    "wordpiece_tokenize": [
        wp_limit_inclusive,
        wp_unk_per_piece,
        wp_range_misses_full,
        wp_vocab_get,
        wp_unk_string,
    ],
    "learn_bpe": [
        learn_most_common,
        learn_string_replace,
        learn_no_early_stop,
        learn_joined_strings,
    ],
    "bpe_encode": [
        encode_short_word_as_is,
        encode_default_rank_zero,
        encode_step_one,
        encode_replay_in_order,
        encode_split_on_spaces,
    ],
    "mean_pool": [
        pool_normalize_batch_axis,
        pool_no_keepdim,
        pool_boolean_index,
        pool_in_place,
        pool_always_normalised,
    ],
}

RIGHT = {
    "bert_mask_tokens": mask_right,
    "wordpiece_tokenize": wp_right,
    "learn_bpe": learn_right,
    "bpe_encode": encode_right,
    "mean_pool": pool_right,
}

RIGHT2 = {
    "bert_mask_tokens": mask_right2,
    "wordpiece_tokenize": wp_right2,
    "learn_bpe": learn_right2,
    "bpe_encode": encode_right2,
    "mean_pool": pool_right2,
}
