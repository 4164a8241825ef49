"""Lesson 09 (BERT): held-out wrong and right implementations, from the exercise text only."""

from collections import Counter, defaultdict

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------- bert_mask_tokens


def _special_mask(tokens, special_ids):
    if special_ids is None:
        return torch.zeros_like(tokens, dtype=torch.bool)
    if torch.is_tensor(special_ids):
        ids = special_ids.to(device=tokens.device, dtype=tokens.dtype)
    else:
        ids = torch.tensor([int(i) for i in special_ids], dtype=tokens.dtype, device=tokens.device)
    return torch.isin(tokens, ids)


def bert_mask_tokens_two_uniforms(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Right: one uniform to choose, a second for the 80/10/10 split, masked_fill and where."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen = chosen & ~_special_mask(tokens, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    random_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = tokens.clone()
    inputs = inputs.masked_fill(chosen & (u < 0.8), mask_id)
    use_random = chosen & (u >= 0.8) & (u < 0.9)
    inputs = torch.where(use_random, random_ids, inputs)
    labels = tokens.masked_fill(~chosen, -100)
    return inputs, labels


def bert_mask_tokens_bernoulli_tenths(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Right: torch.bernoulli to choose, a randint(0, 10) to split, boolean-index assignment on a copy."""
    dev = tokens.device
    probs = torch.full(tokens.shape, float(p), device=dev)
    chosen = torch.bernoulli(probs, generator=generator).bool()
    if special_ids is not None:
        for s in special_ids:
            chosen[tokens == int(s)] = False
    tenth = torch.randint(0, 10, tokens.shape, generator=generator, device=dev)
    replacement = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = tokens.clone()
    to_mask = chosen & (tenth < 8)
    to_random = chosen & (tenth == 8)
    inputs[to_mask] = mask_id
    inputs[to_random] = replacement[to_random]
    labels = torch.full_like(tokens, -100)
    labels[chosen] = tokens[chosen]
    return inputs, labels


def bert_mask_tokens_in_place(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Wrong: corrupts tokens itself (no copy) and returns it as the inputs."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen = chosen & ~_special_mask(tokens, special_ids)
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    random_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    tokens[chosen & (u < 0.8)] = mask_id
    rnd = chosen & (u >= 0.8) & (u < 0.9)
    tokens[rnd] = random_ids[rnd]
    return tokens, labels


def bert_mask_tokens_random_skips_pad(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Wrong: the random replacement is drawn from [1, vocab_size), never id 0."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen = chosen & ~_special_mask(tokens, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    random_ids = torch.randint(
        1, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = tokens.clone()
    inputs = inputs.masked_fill(chosen & (u < 0.8), mask_id)
    inputs = torch.where(chosen & (u >= 0.8) & (u < 0.9), random_ids, inputs)
    labels = tokens.masked_fill(~chosen, -100)
    return inputs, labels


def bert_mask_tokens_tenth_of_rest(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Wrong: of the 20% not masked, a fresh bernoulli(0.1) picks the random ones (2% overall)."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen = chosen & ~_special_mask(tokens, special_ids)
    to_mask = chosen & (torch.rand(tokens.shape, generator=generator, device=dev) < 0.8)
    to_random = (
        chosen & ~to_mask & (torch.rand(tokens.shape, generator=generator, device=dev) < 0.1)
    )
    random_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = tokens.clone()
    inputs[to_mask] = mask_id
    inputs[to_random] = random_ids[to_random]
    labels = tokens.masked_fill(~chosen, -100)
    return inputs, labels


def bert_mask_tokens_labels_zero(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Wrong: the labels of the positions not chosen are 0 instead of -100."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen = chosen & ~_special_mask(tokens, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    random_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = tokens.clone()
    inputs = inputs.masked_fill(chosen & (u < 0.8), mask_id)
    inputs = torch.where(chosen & (u >= 0.8) & (u < 0.9), random_ids, inputs)
    labels = tokens * chosen
    return inputs, labels


def bert_mask_tokens_int64_random(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Wrong: randint without dtype= gives int64 ids, and torch.where promotes int32 inputs to int64."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen = chosen & ~_special_mask(tokens, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    random_ids = torch.randint(0, vocab_size, tokens.shape, generator=generator, device=dev)
    inputs = tokens.masked_fill(chosen & (u < 0.8), mask_id)
    inputs = torch.where(chosen & (u >= 0.8) & (u < 0.9), random_ids, inputs)
    labels = torch.where(chosen, tokens, -100)
    return inputs, labels


def bert_mask_tokens_fixed_p(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Wrong: the selection probability is hard-coded to 0.15, the p argument ignored."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < 0.15
    chosen = chosen & ~_special_mask(tokens, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    random_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = tokens.clone().masked_fill(chosen & (u < 0.8), mask_id)
    inputs = torch.where(chosen & (u >= 0.8) & (u < 0.9), random_ids, inputs)
    labels = tokens.masked_fill(~chosen, -100)
    return inputs, labels


def bert_mask_tokens_bert_mask_id(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Wrong: writes BERT's [MASK] id 103 instead of the mask_id argument."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen = chosen & ~_special_mask(tokens, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    random_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = tokens.clone().masked_fill(chosen & (u < 0.8), 103)
    inputs = torch.where(chosen & (u >= 0.8) & (u < 0.9), random_ids, inputs)
    labels = tokens.masked_fill(~chosen, -100)
    return inputs, labels


# ---------------------------------------------------------------- wordpiece_tokenize


def wordpiece_tokenize_while(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Right: BERT's loop, shrinking end from len(word) until a piece is in vocab."""
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces = []
    start = 0
    while start < len(word):
        end = len(word)
        piece = None
        while start < end:
            sub = word[start:end]
            if start > 0:
                sub = "##" + sub
            if sub in vocab:
                piece = sub
                break
            end -= 1
        if piece is None:
            return [unk_token]
        pieces.append(piece)
        start = end
    return pieces


def wordpiece_tokenize_recursive(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Right: a recursive helper over the rest of the word, longest prefix first."""
    if len(word) > max_chars_per_word:
        return [unk_token]

    def cut(start):
        if start == len(word):
            return []
        prefix = "##" if start > 0 else ""
        for end in range(len(word), start, -1):
            if prefix + word[start:end] in vocab:
                rest = cut(end)
                return None if rest is None else [prefix + word[start:end]] + rest
        return None

    pieces = cut(0)
    return [unk_token] if pieces is None else pieces


def wordpiece_tokenize_limit_inclusive(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: `>=` turns a word of exactly max_chars_per_word characters into [UNK]."""
    if len(word) >= max_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            sub = ("##" if start else "") + word[start:end]
            if sub in vocab:
                pieces.append(sub)
                start = end
                break
        else:
            return [unk_token]
    return pieces


def wordpiece_tokenize_literal_unk(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: returns the literal "[UNK]" whatever unk_token was given."""
    if len(word) > max_chars_per_word:
        return ["[UNK]"]
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            sub = ("##" if start else "") + word[start:end]
            if sub in vocab:
                pieces.append(sub)
                start = end
                break
        else:
            return ["[UNK]"]
    return pieces


def wordpiece_tokenize_no_single_chars(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: the end loop stops at start + 2, so one-character pieces are never tried."""
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start + 1, -1):
            sub = ("##" if start else "") + word[start:end]
            if sub in vocab:
                pieces.append(sub)
                start = end
                break
        else:
            return [unk_token]
    return pieces


def wordpiece_tokenize_bare_unk(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: returns the unk_token string itself, not a one-element list."""
    if len(word) > max_chars_per_word:
        return unk_token
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            sub = ("##" if start else "") + word[start:end]
            if sub in vocab:
                pieces.append(sub)
                start = end
                break
        else:
            return unk_token
    return pieces


def wordpiece_tokenize_from_right(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: greedy longest match from the END of the word (longest suffix first)."""
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces, end = [], len(word)
    while end > 0:
        for start in range(0, end):
            sub = ("##" if start else "") + word[start:end]
            if sub in vocab:
                pieces.insert(0, sub)
                end = start
                break
        else:
            return [unk_token]
    return pieces


def wordpiece_tokenize_unk_one_char(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: an unmatched character becomes one unk_token and the cut goes on after it."""
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            sub = ("##" if start else "") + word[start:end]
            if sub in vocab:
                pieces.append(sub)
                start = end
                break
        else:
            pieces.append(unk_token)
            start += 1
    return pieces


# ---------------------------------------------------------------- learn_bpe


def _merge(symbols, pair):
    a, b = pair
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and symbols[i] == a and symbols[i + 1] == b:
            out.append(a + b)
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


def learn_bpe_counter(word_counts, n_merges):
    """Right: a Counter of weighted pairs each round, min by (-count, pair), merge left to right."""
    words = [(list(w), c) for w, c in word_counts.items()]
    merges = []
    for _ in range(n_merges):
        counts = Counter()
        for symbols, c in words:
            for pair in zip(symbols, symbols[1:]):
                counts[pair] += c
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        words = [(_merge(symbols, best), c) for symbols, c in words]
    return merges


def learn_bpe_sorted(word_counts, n_merges):
    """Right: tuples of symbols in a dict, pairs tallied in a defaultdict, best by sorting."""
    vocab = defaultdict(int)
    for w, c in word_counts.items():
        vocab[tuple(w)] += c
    merges = []
    while len(merges) < n_merges:
        stats = defaultdict(int)
        for symbols, c in vocab.items():
            for i in range(len(symbols) - 1):
                stats[symbols[i], symbols[i + 1]] += c
        if not stats:
            break
        (a, b), _ = sorted(stats.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merges.append((a, b))
        new_vocab = defaultdict(int)
        for symbols, c in vocab.items():
            new_vocab[tuple(_merge(list(symbols), (a, b)))] += c
        vocab = new_vocab
    return merges


def learn_bpe_string_replace(word_counts, n_merges):
    """Wrong: merges with str.replace on the space-joined symbols, which can match across symbols."""
    words = {" ".join(w): c for w, c in word_counts.items()}
    merges = []
    for _ in range(n_merges):
        counts = Counter()
        for w, c in words.items():
            s = w.split(" ")
            for pair in zip(s, s[1:]):
                counts[pair] += c
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        merged = {}
        for w, c in words.items():
            key = w.replace(f"{best[0]} {best[1]}", best[0] + best[1])
            merged[key] = merged.get(key, 0) + c
        words = merged
    return merges


def learn_bpe_joined_strings(word_counts, n_merges):
    """Wrong: returns each merge as the joined string a + b, not the pair (a, b)."""
    words = [(list(w), c) for w, c in word_counts.items()]
    merges = []
    for _ in range(n_merges):
        counts = Counter()
        for symbols, c in words:
            for pair in zip(symbols, symbols[1:]):
                counts[pair] += c
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best[0] + best[1])
        words = [(_merge(symbols, best), c) for symbols, c in words]
    return merges


def learn_bpe_stop_at_one(word_counts, n_merges):
    """Wrong: stops when the best pair occurs only once, not only when no pair is left."""
    words = [(list(w), c) for w, c in word_counts.items()]
    merges = []
    for _ in range(n_merges):
        counts = Counter()
        for symbols, c in words:
            for pair in zip(symbols, symbols[1:]):
                counts[pair] += c
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        if counts[best] < 2:
            break
        merges.append(best)
        words = [(_merge(symbols, best), c) for symbols, c in words]
    return merges


def learn_bpe_right_to_left(word_counts, n_merges):
    """Wrong: merges overlapping occurrences from the right (a a a -> a aa)."""

    def merge_from_right(symbols, pair):
        out, i = [], len(symbols) - 1
        while i >= 0:
            if i > 0 and symbols[i - 1] == pair[0] and symbols[i] == pair[1]:
                out.insert(0, pair[0] + pair[1])
                i -= 2
            else:
                out.insert(0, symbols[i])
                i -= 1
        return out

    words = [(list(w), c) for w, c in word_counts.items()]
    merges = []
    for _ in range(n_merges):
        counts = Counter()
        for symbols, c in words:
            for pair in zip(symbols, symbols[1:]):
                counts[pair] += c
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        words = [(merge_from_right(symbols, best), c) for symbols, c in words]
    return merges


def learn_bpe_one_extra(word_counts, n_merges):
    """Wrong: `while len(merges) <= n_merges` learns one merge too many."""
    words = [(list(w), c) for w, c in word_counts.items()]
    merges = []
    while len(merges) <= n_merges:
        counts = Counter()
        for symbols, c in words:
            for pair in zip(symbols, symbols[1:]):
                counts[pair] += c
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        words = [(_merge(symbols, best), c) for symbols, c in words]
    return merges


def learn_bpe_end_of_word(word_counts, n_merges):
    """Wrong: appends Sennrich's '</w>' end-of-word symbol to every word before counting."""
    words = [(list(w) + ["</w>"], c) for w, c in word_counts.items()]
    merges = []
    for _ in range(n_merges):
        counts = Counter()
        for symbols, c in words:
            for pair in zip(symbols, symbols[1:]):
                counts[pair] += c
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        words = [(_merge(symbols, best), c) for symbols, c in words]
    return merges


def learn_bpe_ties_largest(word_counts, n_merges):
    """Wrong: max(counts, key=(count, pair)) sends ties to the LARGEST pair."""
    words = [(list(w), c) for w, c in word_counts.items()]
    merges = []
    for _ in range(n_merges):
        counts = Counter()
        for symbols, c in words:
            for pair in zip(symbols, symbols[1:]):
                counts[pair] += c
        if not counts:
            break
        best = max(counts, key=lambda pair: (counts[pair], pair))
        merges.append(best)
        words = [(_merge(symbols, best), c) for symbols, c in words]
    return merges


# ---------------------------------------------------------------- bpe_encode


def bpe_encode_min_rank(word, ranks):
    """Right: find the present pair of lowest rank, merge all its occurrences, repeat."""
    symbols = list(word)
    while len(symbols) > 1:
        present = [pair for pair in zip(symbols, symbols[1:]) if pair in ranks]
        if not present:
            break
        best = min(present, key=lambda pair: ranks[pair])
        symbols = _merge(symbols, best)
    return symbols


def bpe_encode_gpt2_style(word, ranks):
    """Right: GPT-2's loop with a set of pairs and list.index to find each occurrence."""
    word = tuple(word)
    if len(word) < 2:
        return list(word)
    while True:
        pairs = {(word[i], word[i + 1]) for i in range(len(word) - 1)}
        bigram = min(pairs, key=lambda pair: ranks.get(pair, float("inf")))
        if bigram not in ranks:
            break
        first, second = bigram
        new_word, i = [], 0
        while i < len(word):
            try:
                j = word.index(first, i)
            except ValueError:
                new_word.extend(word[i:])
                break
            new_word.extend(word[i:j])
            i = j
            if i < len(word) - 1 and word[i + 1] == second:
                new_word.append(first + second)
                i += 2
            else:
                new_word.append(word[i])
                i += 1
        word = tuple(new_word)
        if len(word) == 1:
            break
    return list(word)


def bpe_encode_first_occurrence(word, ranks):
    """Wrong: merges only the first occurrence of the lowest-rank pair per round."""
    symbols = list(word)
    while True:
        present = [(ranks[p], i) for i, p in enumerate(zip(symbols, symbols[1:])) if p in ranks]
        if not present:
            return symbols
        _, i = min(present)
        symbols = symbols[:i] + [symbols[i] + symbols[i + 1]] + symbols[i + 2 :]


def bpe_encode_short_word(word, ranks):
    """Wrong: returns [word] for words shorter than two characters, so "" gives [""]."""
    if len(word) < 2:
        return [word]
    symbols = list(word)
    while True:
        present = [p for p in zip(symbols, symbols[1:]) if p in ranks]
        if not present:
            return symbols
        symbols = _merge(symbols, min(present, key=ranks.get))


def bpe_encode_string_keys(word, ranks):
    """Wrong: looks the pairs up as joined strings a + b, which are never keys of ranks."""
    symbols = list(word)
    while True:
        present = [p for p in zip(symbols, symbols[1:]) if p[0] + p[1] in ranks]
        if not present:
            return symbols
        symbols = _merge(symbols, min(present, key=lambda p: ranks[p[0] + p[1]]))


def bpe_encode_right_to_left(word, ranks):
    """Wrong: merges the occurrences of the best pair from the right (a a a -> a aa)."""
    symbols = list(word)
    while True:
        present = [p for p in zip(symbols, symbols[1:]) if p in ranks]
        if not present:
            return symbols
        a, b = min(present, key=ranks.get)
        out, i = [], len(symbols) - 1
        while i >= 0:
            if i > 0 and symbols[i - 1] == a and symbols[i] == b:
                out.insert(0, a + b)
                i -= 2
            else:
                out.insert(0, symbols[i])
                i -= 1
        symbols = out


def bpe_encode_one_pass(word, ranks):
    """Wrong: one pass over the merges in rank order; a pair formed later with a lower rank is missed."""
    symbols = list(word)
    for pair in sorted(ranks, key=ranks.get):
        if pair in set(zip(symbols, symbols[1:])):
            symbols = _merge(symbols, pair)
    return symbols


def bpe_encode_smallest_pair(word, ranks):
    """Wrong: min over the present pairs themselves (tuple order), not over their ranks."""
    symbols = list(word)
    while True:
        present = [p for p in zip(symbols, symbols[1:]) if p in ranks]
        if not present:
            return symbols
        symbols = _merge(symbols, min(present))


# ---------------------------------------------------------------- mean_pool


def mean_pool_broadcast(hidden, attention_mask, normalize=True):
    """Right: mask cast to hidden's dtype, masked sum over the count, F.normalize."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    pooled = (hidden * m).sum(dim=1) / m.sum(dim=1)
    if normalize:
        pooled = F.normalize(pooled, p=2, dim=-1)
    return pooled


def mean_pool_einsum(hidden, attention_mask, normalize=True):
    """Right: einsum for the masked sum, divide by the row counts, divide by the norm."""
    m = attention_mask.to(hidden.dtype)
    pooled = torch.einsum("bld,bl->bd", hidden, m) / m.sum(-1, keepdim=True)
    if normalize:
        pooled = pooled / pooled.norm(dim=-1, keepdim=True)
    return pooled


def mean_pool_normalize_dim0(hidden, attention_mask, normalize=True):
    """Wrong: F.normalize over dim=0, across the batch, instead of each embedding."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    pooled = (hidden * m).sum(1) / m.sum(1)
    if normalize:
        pooled = F.normalize(pooled, dim=0)
    return pooled


def mean_pool_always_normalize(hidden, attention_mask, normalize=True):
    """Wrong: normalises whatever the normalize argument says."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    pooled = (hidden * m).sum(1) / m.sum(1)
    return F.normalize(pooled, dim=-1)


def mean_pool_batch_count(hidden, attention_mask, normalize=True):
    """Wrong: divides by the number of real tokens in the whole batch, m.sum()."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    pooled = (hidden * m).sum(1) / m.sum()
    if normalize:
        pooled = F.normalize(pooled, dim=-1)
    return pooled


def mean_pool_zero_padding_in_place(hidden, attention_mask, normalize=True):
    """Wrong: zeroes the caller's padded hidden vectors in place before averaging."""
    hidden[attention_mask == 0] = 0
    pooled = hidden.sum(1) / attention_mask.to(hidden.dtype).sum(1, keepdim=True)
    if normalize:
        pooled = F.normalize(pooled, dim=-1)
    return pooled


def mean_pool_count_no_keepdim(hidden, attention_mask, normalize=True):
    """Wrong: divides (B, d) by the (B,) counts, which lines up with d, not with B."""
    m = attention_mask.to(hidden.dtype)
    pooled = (hidden * m.unsqueeze(-1)).sum(1) / m.sum(-1)
    if normalize:
        pooled = F.normalize(pooled, dim=-1)
    return pooled


def mean_pool_squared_norm(hidden, attention_mask, normalize=True):
    """Wrong: divides by the squared norm (no square root)."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    pooled = (hidden * m).sum(1) / m.sum(1)
    if normalize:
        pooled = pooled / (pooled**2).sum(-1, keepdim=True)
    return pooled


WRONG = {
    "bert_mask_tokens": [
        bert_mask_tokens_in_place,
        bert_mask_tokens_random_skips_pad,
        bert_mask_tokens_tenth_of_rest,
        bert_mask_tokens_labels_zero,
        bert_mask_tokens_int64_random,
        bert_mask_tokens_fixed_p,
        bert_mask_tokens_bert_mask_id,
    ],
    "wordpiece_tokenize": [
        wordpiece_tokenize_limit_inclusive,
        wordpiece_tokenize_literal_unk,
        wordpiece_tokenize_no_single_chars,
        wordpiece_tokenize_bare_unk,
        wordpiece_tokenize_from_right,
        wordpiece_tokenize_unk_one_char,
    ],
    "learn_bpe": [
        learn_bpe_string_replace,
        learn_bpe_joined_strings,
        learn_bpe_stop_at_one,
        learn_bpe_right_to_left,
        learn_bpe_one_extra,
        learn_bpe_end_of_word,
        learn_bpe_ties_largest,
    ],
    "bpe_encode": [
        bpe_encode_first_occurrence,
        bpe_encode_short_word,
        bpe_encode_string_keys,
        bpe_encode_right_to_left,
        bpe_encode_one_pass,
        bpe_encode_smallest_pair,
    ],
    "mean_pool": [
        mean_pool_normalize_dim0,
        mean_pool_always_normalize,
        mean_pool_batch_count,
        mean_pool_zero_padding_in_place,
        mean_pool_count_no_keepdim,
        mean_pool_squared_norm,
    ],
}

RIGHT = {
    "bert_mask_tokens": bert_mask_tokens_two_uniforms,
    "wordpiece_tokenize": wordpiece_tokenize_while,
    "learn_bpe": learn_bpe_counter,
    "bpe_encode": bpe_encode_min_rank,
    "mean_pool": mean_pool_broadcast,
}

RIGHT2 = {
    "bert_mask_tokens": bert_mask_tokens_bernoulli_tenths,
    "wordpiece_tokenize": wordpiece_tokenize_recursive,
    "learn_bpe": learn_bpe_sorted,
    "bpe_encode": bpe_encode_gpt2_style,
    "mean_pool": mean_pool_einsum,
}
