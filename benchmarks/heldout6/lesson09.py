"""Lesson 09 (BERT): held-out wrong and right implementations, from the exercise text only (sixth set)."""

from collections import Counter

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------- bert_mask_tokens


def _special_mask(tokens, special_ids):
    if special_ids is None:
        return torch.zeros_like(tokens, dtype=torch.bool)
    ids = torch.as_tensor(list(special_ids), dtype=tokens.dtype, device=tokens.device)
    return torch.isin(tokens, ids)


def bert_mask_tokens_right(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Right: rand < p minus specials, a second uniform for 80/10/10, torch.where, labels -100."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen &= ~_special_mask(tokens, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    random_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = tokens.clone()
    inputs = torch.where(chosen & (u < 0.8), torch.full_like(tokens, mask_id), inputs)
    inputs = torch.where(chosen & (u >= 0.8) & (u < 0.9), random_ids, inputs)
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    return inputs, labels


def bert_mask_tokens_right2(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Right: ONE uniform r per position (r < p chosen; r/p splits 80/10/10), random ids drawn
    only for the positions that need one, written through flat boolean indexing."""
    flat = tokens.reshape(-1)
    r = torch.rand(flat.shape, generator=generator, device=tokens.device, dtype=torch.float64)
    if special_ids is not None:
        for s in special_ids:
            r = torch.where(flat == s, torch.ones_like(r), r)
    chosen = r < p
    to_mask = chosen & (r < 0.8 * p)
    to_random = chosen & (r >= 0.8 * p) & (r < 0.9 * p)
    inputs = flat.clone()
    inputs[to_mask] = mask_id
    n_random = int(to_random.sum())
    inputs[to_random] = torch.randint(
        vocab_size, (n_random,), generator=generator, device=tokens.device
    ).to(tokens.dtype)
    labels = torch.full_like(flat, -100)
    labels[chosen] = flat[chosen]
    return inputs.reshape(tokens.shape), labels.reshape(tokens.shape)


def bert_mask_tokens_inplace(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Wrong: inputs = tokens (no copy), so the corruption is written into the caller's tokens."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen &= ~_special_mask(tokens, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    random_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    inputs = tokens
    inputs[chosen & (u < 0.8)] = mask_id
    sel = chosen & (u >= 0.8) & (u < 0.9)
    inputs[sel] = random_ids[sel]
    return inputs, labels


def bert_mask_tokens_int64_labels(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Wrong: labels start from torch.full(shape, -100), int64 whatever tokens' dtype."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen &= ~_special_mask(tokens, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    random_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = tokens.clone()
    inputs[chosen & (u < 0.8)] = mask_id
    sel = chosen & (u >= 0.8) & (u < 0.9)
    inputs[sel] = random_ids[sel]
    labels = torch.full(tokens.shape, -100, device=dev)
    labels[chosen] = tokens[chosen].long()
    return inputs, labels


def bert_mask_tokens_fixed_p(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Wrong: chooses with a hard-coded 0.15, ignoring the p argument."""
    return bert_mask_tokens_right(tokens, mask_id, vocab_size, 0.15, generator, special_ids)


def bert_mask_tokens_randint_exclusive(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Wrong: randint(0, vocab_size - 1) as if the high end were inclusive: the last id never drawn."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen &= ~_special_mask(tokens, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    random_ids = torch.randint(
        0, vocab_size - 1, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = tokens.clone()
    inputs = torch.where(chosen & (u < 0.8), torch.full_like(tokens, mask_id), inputs)
    inputs = torch.where(chosen & (u >= 0.8) & (u < 0.9), random_ids, inputs)
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    return inputs, labels


def bert_mask_tokens_random_not_special(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Wrong: the random tokens are drawn from [len(special_ids), vocab_size), never a special."""
    low = len(special_ids) if special_ids is not None else 0
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen &= ~_special_mask(tokens, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    random_ids = torch.randint(
        low, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = tokens.clone()
    inputs = torch.where(chosen & (u < 0.8), torch.full_like(tokens, mask_id), inputs)
    inputs = torch.where(chosen & (u >= 0.8) & (u < 0.9), random_ids, inputs)
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    return inputs, labels


def bert_mask_tokens_one_u(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Wrong: one u for the whole call (torch.rand(1)), so all chosen positions share a fate."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen &= ~_special_mask(tokens, special_ids)
    u = torch.rand(1, generator=generator, device=dev)
    random_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = tokens.clone()
    inputs = torch.where(chosen & (u < 0.8), torch.full_like(tokens, mask_id), inputs)
    inputs = torch.where(chosen & (u >= 0.8) & (u < 0.9), random_ids, inputs)
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    return inputs, labels


def bert_mask_tokens_none_specials(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Wrong: torch.tensor(special_ids) unconditionally, which fails when special_ids is None."""
    dev = tokens.device
    special = torch.isin(tokens, torch.tensor(special_ids, device=dev))
    chosen = (torch.rand(tokens.shape, generator=generator, device=dev) < p) & ~special
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    random_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = tokens.clone()
    inputs = torch.where(chosen & (u < 0.8), torch.full_like(tokens, mask_id), inputs)
    inputs = torch.where(chosen & (u >= 0.8) & (u < 0.9), random_ids, inputs)
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    return inputs, labels


def bert_mask_tokens_split_on_p(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Wrong: reuses the choosing draw r for the split (r < 0.8 etc.): every chosen r < p is [MASK]."""
    dev = tokens.device
    r = torch.rand(tokens.shape, generator=generator, device=dev)
    chosen = (r < p) & ~_special_mask(tokens, special_ids)
    random_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = tokens.clone()
    inputs = torch.where(chosen & (r < 0.8), torch.full_like(tokens, mask_id), inputs)
    inputs = torch.where(chosen & (r >= 0.8) & (r < 0.9), random_ids, inputs)
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    return inputs, labels


def bert_mask_tokens_labels_unchosen(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Wrong: labels keep the token where it was NOT chosen (the -100 mask is inverted)."""
    inputs, labels = bert_mask_tokens_right(tokens, mask_id, vocab_size, p, generator, special_ids)
    chosen = labels != -100
    return inputs, torch.where(chosen, torch.full_like(tokens, -100), tokens)


# ---------------------------------------------------------------- wordpiece_tokenize


def wordpiece_tokenize_right(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Right: the classic greedy longest-match-first loop, end from len(word) down."""
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


def wordpiece_tokenize_right2(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Right: recursive; grows the end upward and remembers the last (so longest) hit."""
    if len(word) > max_chars_per_word:
        return [unk_token]

    def cut(start):
        if start == len(word):
            return []
        best = None
        for end in range(start + 1, len(word) + 1):
            key = ("##" if start else "") + word[start:end]
            if key in vocab:
                best = (key, end)
        if best is None:
            return None
        rest = cut(best[1])
        return None if rest is None else [best[0]] + rest

    out = cut(0)
    return [unk_token] if out is None else out


def wordpiece_tokenize_ge_limit(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: `len(word) >= max_chars_per_word` - a word of exactly the limit becomes [UNK]."""
    if len(word) >= max_chars_per_word:
        return [unk_token]
    return wordpiece_tokenize_right(word, vocab, unk_token, 10**9)


def wordpiece_tokenize_hardcoded_unk(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: returns the literal "[UNK]", ignoring the unk_token argument."""
    out = wordpiece_tokenize_right(word, vocab, "[UNK]", max_chars_per_word)
    return out


def wordpiece_tokenize_ignores_limit(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: ignores max_chars_per_word (a long word is cut into pieces anyway)."""
    return wordpiece_tokenize_right(word, vocab, unk_token, float("inf"))


def wordpiece_tokenize_str_unk(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: returns unk_token itself (a str) instead of the list [unk_token]."""
    out = wordpiece_tokenize_right(word, vocab, unk_token, max_chars_per_word)
    return unk_token if out == [unk_token] and word != unk_token else out


def wordpiece_tokenize_end_off_by_one(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: tries ends range(len(word) - 1, start, -1): the rest of the word is never one piece."""
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        found = None
        for end in range(len(word) - 1, start, -1):
            piece = ("##" if start > 0 else "") + word[start:end]
            if piece in vocab:
                found = piece
                break
        if found is None:
            return [unk_token]
        pieces.append(found)
        start = end
    return pieces


def wordpiece_tokenize_partial_unk(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: when no piece fits, keeps the pieces found so far and appends [UNK]."""
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        end, found = len(word), None
        while start < end:
            piece = ("##" if start > 0 else "") + word[start:end]
            if piece in vocab:
                found = piece
                break
            end -= 1
        if found is None:
            return pieces + [unk_token]
        pieces.append(found)
        start = end
    return pieces


def wordpiece_tokenize_strip_hashes(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: looks continuation pieces up with "##" but appends them without it."""
    out = wordpiece_tokenize_right(word, vocab, unk_token, max_chars_per_word)
    return [p[2:] if p.startswith("##") and p != unk_token else p for p in out]


def wordpiece_tokenize_shortest(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: takes the first (shortest) match, growing the end from start + 1."""
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        found = None
        for end in range(start + 1, len(word) + 1):
            piece = ("##" if start > 0 else "") + word[start:end]
            if piece in vocab:
                found = piece
                break
        if found is None:
            return [unk_token]
        pieces.append(found)
        start = end
    return pieces


# ---------------------------------------------------------------- learn_bpe


def _merge_word(symbols, pair):
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and symbols[i] == pair[0] and symbols[i + 1] == pair[1]:
            out.append(pair[0] + pair[1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return tuple(out)


def learn_bpe_right(word_counts, n_merges):
    """Right: weighted pair counts, min(-count, pair), merge left to right, recount each time."""
    words = {tuple(w): c for w, c in word_counts.items()}
    merges = []
    for _ in range(n_merges):
        counts = Counter()
        for sym, c in words.items():
            for a, b in zip(sym, sym[1:]):
                counts[(a, b)] += c
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        new = {}
        for sym, c in words.items():
            key = _merge_word(sym, best)
            new[key] = new.get(key, 0) + c
        words = new
    return merges


def learn_bpe_right2(word_counts, n_merges):
    """Right: lists of symbols kept per word, ties by sorting (count desc, pair asc), in-place merge."""
    entries = [[list(w), c] for w, c in word_counts.items()]
    merges = []
    while len(merges) < n_merges:
        counts = {}
        for sym, c in entries:
            for i in range(len(sym) - 1):
                counts[(sym[i], sym[i + 1])] = counts.get((sym[i], sym[i + 1]), 0) + c
        if not counts:
            break
        best = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
        merges.append(best)
        for entry in entries:
            sym = entry[0]
            i = 0
            while i < len(sym) - 1:
                if (sym[i], sym[i + 1]) == best:
                    sym[i : i + 2] = [sym[i] + sym[i + 1]]
                i += 1
    return merges


def _pair_counts(words):
    counts = Counter()
    for sym, c in words.items():
        for a, b in zip(sym, sym[1:]):
            counts[(a, b)] += c
    return counts


def _learn(word_counts, n_merges, choose, merge=_merge_word):
    words = {tuple(w): c for w, c in word_counts.items()}
    merges = []
    for _ in range(n_merges):
        counts = _pair_counts(words)
        if not counts:
            break
        best = choose(counts)
        merges.append(best)
        new = {}
        for sym, c in words.items():
            key = merge(sym, best)
            new[key] = new.get(key, 0) + c
        words = new
    return merges


def learn_bpe_max_tie(word_counts, n_merges):
    """Wrong: max(counts, key=counts.get): a tie goes to the first pair counted, not the smallest."""
    return _learn(word_counts, n_merges, lambda counts: max(counts, key=counts.get))


def learn_bpe_largest_tie(word_counts, n_merges):
    """Wrong: max(counts, key=lambda p: (counts[p], p)): a tie goes to the LARGEST pair."""
    return _learn(word_counts, n_merges, lambda counts: max(counts, key=lambda p: (counts[p], p)))


def learn_bpe_string_replace(word_counts, n_merges):
    """Wrong: merges by " ".join(symbols).replace("a b", "ab"), which also hits inside symbols."""

    def merge(sym, pair):
        text = " ".join(sym).replace(pair[0] + " " + pair[1], pair[0] + pair[1])
        return tuple(text.split(" "))

    return _learn(word_counts, n_merges, lambda c: min(c, key=lambda p: (-c[p], p)), merge)


def learn_bpe_right_to_left(word_counts, n_merges):
    """Wrong: merges occurrences scanning from the right (`a a a` -> `a aa`)."""
    return _learn(word_counts, n_merges, lambda c: min(c, key=lambda p: (-c[p], p)), _rev_merge)


def _rev_merge(sym, pair):
    out, i = [], len(sym) - 1
    while i >= 0:
        if i - 1 >= 0 and sym[i - 1] == pair[0] and sym[i] == pair[1]:
            out.append(pair[0] + pair[1])
            i -= 2
        else:
            out.append(sym[i])
            i -= 1
    return tuple(reversed(out))


def learn_bpe_no_stop(word_counts, n_merges):
    """Wrong: never stops early: min() of an empty count raises once every word is one symbol."""
    words = {tuple(w): c for w, c in word_counts.items()}
    merges = []
    for _ in range(n_merges):
        counts = _pair_counts(words)
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        words = {_merge_word(s, best): c for s, c in words.items()}
    return merges


def learn_bpe_joined(word_counts, n_merges):
    """Wrong: returns each merge as the joined string "es" instead of the pair ("e", "s")."""
    return ["".join(pair) for pair in learn_bpe_right(word_counts, n_merges)]


def learn_bpe_one_short(word_counts, n_merges):
    """Wrong: `for _ in range(1, n_merges)` learns one merge fewer than asked."""
    return learn_bpe_right(word_counts, n_merges - 1) if n_merges > 0 else []


def learn_bpe_count_once(word_counts, n_merges):
    """Wrong: counts the pairs once and takes the n_merges most frequent, never recounting."""
    counts = _pair_counts({tuple(w): c for w, c in word_counts.items()})
    ordered = sorted(counts, key=lambda p: (-counts[p], p))
    return ordered[:n_merges]


def learn_bpe_unweighted(word_counts, n_merges):
    """Wrong: each word adds 1 per pair, whatever its count."""
    return _learn({w: 1 for w in word_counts}, n_merges, lambda c: min(c, key=lambda p: (-c[p], p)))


# ---------------------------------------------------------------- bpe_encode


def bpe_encode_right(word, ranks):
    """Right: the lowest-rank adjacent pair, every occurrence left to right, until none is ranked."""
    symbols = list(word)
    while len(symbols) > 1:
        pairs = [(symbols[i], symbols[i + 1]) for i in range(len(symbols) - 1)]
        ranked = [p for p in pairs if p in ranks]
        if not ranked:
            break
        best = min(ranked, key=lambda p: ranks[p])
        symbols = list(_merge_word(symbols, best))
    return symbols


def bpe_encode_right2(word, ranks):
    """Right: rank per position, argmin position, then merges that pair everywhere by a while
    loop over indices; an empty word returns before anything."""
    if not word:
        return []
    sym = [c for c in word]
    inf = float("inf")
    while True:
        rs = [ranks.get((sym[i], sym[i + 1]), inf) for i in range(len(sym) - 1)]
        if not rs or min(rs) == inf:
            return sym
        i_best = rs.index(min(rs))
        a, b = sym[i_best], sym[i_best + 1]
        i = 0
        while i < len(sym) - 1:
            if sym[i] == a and sym[i + 1] == b:
                sym[i : i + 2] = [a + b]
            i += 1


def bpe_encode_replay(word, ranks):
    """Wrong: replays every merge once in rank order, so a pair of lower rank made later is missed."""
    symbols = tuple(word)
    for pair in sorted(ranks, key=ranks.get):
        symbols = _merge_word(symbols, pair)
    return list(symbols)


def bpe_encode_first_occurrence(word, ranks):
    """Wrong: merges only the first occurrence of the lowest-rank pair per round."""
    symbols = list(word)
    while len(symbols) > 1:
        ranked = [
            (ranks[(symbols[i], symbols[i + 1])], i)
            for i in range(len(symbols) - 1)
            if (symbols[i], symbols[i + 1]) in ranks
        ]
        if not ranked:
            break
        _, i = min(ranked)
        symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]
    return symbols


def bpe_encode_no_rank_stop(word, ranks):
    """Wrong: min over all pairs with ranks.get(p, inf) but no stop, so unranked pairs merge too."""
    symbols = list(word)
    while len(symbols) > 1:
        pairs = [(symbols[i], symbols[i + 1]) for i in range(len(symbols) - 1)]
        best = min(pairs, key=lambda p: ranks.get(p, float("inf")))
        symbols = list(_merge_word(symbols, best))
    return symbols


def bpe_encode_empty_word(word, ranks):
    """Wrong: `if len(word) < 2: return [word]`, so "" gives [""] instead of []."""
    if len(word) < 2:
        return [word]
    return bpe_encode_right(word, ranks)


def bpe_encode_right_to_left(word, ranks):
    """Wrong: merges the occurrences of the best pair scanning from the right."""
    symbols = tuple(word)
    while len(symbols) > 1:
        pairs = [(symbols[i], symbols[i + 1]) for i in range(len(symbols) - 1)]
        ranked = [p for p in pairs if p in ranks]
        if not ranked:
            break
        symbols = _rev_merge(symbols, min(ranked, key=ranks.get))
    return list(symbols)


def bpe_encode_most_frequent(word, ranks):
    """Wrong: merges the ranked pair that occurs most often in the word (ties by rank)."""
    symbols = list(word)
    while len(symbols) > 1:
        pairs = Counter((symbols[i], symbols[i + 1]) for i in range(len(symbols) - 1))
        ranked = [p for p in pairs if p in ranks]
        if not ranked:
            break
        best = min(ranked, key=lambda p: (-pairs[p], ranks[p]))
        symbols = list(_merge_word(symbols, best))
    return symbols


def bpe_encode_string(word, ranks):
    """Wrong: returns the pieces joined by spaces (a str) instead of a list."""
    return " ".join(bpe_encode_right(word, ranks))


def bpe_encode_leftmost(word, ranks):
    """Wrong: merges the leftmost pair that has a rank, whatever its rank."""
    symbols = list(word)
    while len(symbols) > 1:
        for i in range(len(symbols) - 1):
            if (symbols[i], symbols[i + 1]) in ranks:
                symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]
                break
        else:
            break
    return symbols


# ---------------------------------------------------------------- mean_pool


def mean_pool_right(hidden, attention_mask, normalize=True):
    """Right: mask cast to hidden's dtype, masked sum over L / count, F.normalize on dim -1."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    pooled = (hidden * m).sum(dim=1) / m.sum(dim=1)
    if normalize:
        pooled = F.normalize(pooled, p=2, dim=-1)
    return pooled


def mean_pool_right2(hidden, attention_mask, normalize=True):
    """Right: a loop over the batch with boolean row selection, mean(0), divided by vector_norm."""
    rows = []
    for b in range(hidden.shape[0]):
        keep = attention_mask[b] != 0
        v = hidden[b][keep].mean(dim=0)
        if normalize:
            v = v / torch.linalg.vector_norm(v)
        rows.append(v)
    return torch.stack(rows)


def mean_pool_total_count(hidden, attention_mask, normalize=True):
    """Wrong: attention_mask.sum() without dim=: every row divided by the whole batch's count."""
    m = attention_mask.to(hidden.dtype)
    pooled = (hidden * m.unsqueeze(-1)).sum(dim=1) / m.sum()
    if normalize:
        pooled = F.normalize(pooled, dim=-1)
    return pooled


def mean_pool_norm_no_dim(hidden, attention_mask, normalize=True):
    """Wrong: pooled / pooled.norm() - the norm of the whole batch, not of each row."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    pooled = (hidden * m).sum(dim=1) / m.sum(dim=1)
    if normalize:
        pooled = pooled / pooled.norm()
    return pooled


def mean_pool_bitwise_not(hidden, attention_mask, normalize=True):
    """Wrong: zeroes the padding with masked_fill(~attention_mask ...), right only for bool masks."""
    pad = (~attention_mask).bool().unsqueeze(-1)
    summed = hidden.masked_fill(pad, 0.0).sum(dim=1)
    count = attention_mask.to(hidden.dtype).sum(dim=1, keepdim=True)
    pooled = summed / count
    if normalize:
        pooled = F.normalize(pooled, dim=-1)
    return pooled


def mean_pool_detached(hidden, attention_mask, normalize=True):
    """Wrong: works on hidden.detach(), so no gradient reaches hidden."""
    return mean_pool_right(hidden.detach(), attention_mask, normalize)


def mean_pool_inplace(hidden, attention_mask, normalize=True):
    """Wrong: zeroes the caller's padded rows in place (hidden[mask == 0] = 0)."""
    with torch.no_grad():
        hidden[attention_mask == 0] = 0
    count = attention_mask.to(hidden.dtype).sum(dim=1, keepdim=True)
    pooled = hidden.sum(dim=1) / count
    if normalize:
        pooled = F.normalize(pooled, dim=-1)
    return pooled


def mean_pool_always_normalize(hidden, attention_mask, normalize=True):
    """Wrong: ignores normalize=False and always returns unit vectors."""
    return mean_pool_right(hidden, attention_mask, True)


def mean_pool_divide_by_L(hidden, attention_mask, normalize=True):
    """Wrong: masked sum divided by L (hidden.shape[1]) instead of the real-token count."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    pooled = (hidden * m).sum(dim=1) / hidden.shape[1]
    if normalize:
        pooled = F.normalize(pooled, dim=-1)
    return pooled


def mean_pool_normalize_tokens(hidden, attention_mask, normalize=True):
    """Wrong: normalises each token vector, then averages (when normalize)."""
    if normalize:
        hidden = F.normalize(hidden, dim=-1)
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * m).sum(dim=1) / m.sum(dim=1)


def mean_pool_dim2_norm(hidden, attention_mask, normalize=True):
    """Wrong: F.normalize(pooled, dim=0) - normalises each feature across the batch."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    pooled = (hidden * m).sum(dim=1) / m.sum(dim=1)
    if normalize:
        pooled = F.normalize(pooled, dim=0)
    return pooled


WRONG = {
    "bert_mask_tokens": [
        bert_mask_tokens_inplace,
        bert_mask_tokens_int64_labels,
        bert_mask_tokens_fixed_p,
        bert_mask_tokens_randint_exclusive,
        bert_mask_tokens_random_not_special,
        bert_mask_tokens_one_u,
        bert_mask_tokens_none_specials,
        bert_mask_tokens_split_on_p,
        bert_mask_tokens_labels_unchosen,
    ],
    "wordpiece_tokenize": [
        wordpiece_tokenize_ge_limit,
        wordpiece_tokenize_hardcoded_unk,
        wordpiece_tokenize_ignores_limit,
        wordpiece_tokenize_str_unk,
        wordpiece_tokenize_end_off_by_one,
        wordpiece_tokenize_partial_unk,
        wordpiece_tokenize_strip_hashes,
        wordpiece_tokenize_shortest,
    ],
    "learn_bpe": [
        learn_bpe_max_tie,
        learn_bpe_largest_tie,
        learn_bpe_string_replace,
        learn_bpe_right_to_left,
        learn_bpe_no_stop,
        learn_bpe_joined,
        learn_bpe_one_short,
        learn_bpe_count_once,
        learn_bpe_unweighted,
    ],
    "bpe_encode": [
        bpe_encode_replay,
        bpe_encode_first_occurrence,
        bpe_encode_no_rank_stop,
        bpe_encode_empty_word,
        bpe_encode_right_to_left,
        bpe_encode_most_frequent,
        bpe_encode_string,
        bpe_encode_leftmost,
    ],
    "mean_pool": [
        mean_pool_total_count,
        mean_pool_norm_no_dim,
        mean_pool_bitwise_not,
        mean_pool_detached,
        mean_pool_inplace,
        mean_pool_always_normalize,
        mean_pool_divide_by_L,
        mean_pool_normalize_tokens,
        mean_pool_dim2_norm,
    ],
}

RIGHT = {
    "bert_mask_tokens": bert_mask_tokens_right,
    "wordpiece_tokenize": wordpiece_tokenize_right,
    "learn_bpe": learn_bpe_right,
    "bpe_encode": bpe_encode_right,
    "mean_pool": mean_pool_right,
}

RIGHT2 = {
    "bert_mask_tokens": bert_mask_tokens_right2,
    "wordpiece_tokenize": wordpiece_tokenize_right2,
    "learn_bpe": learn_bpe_right2,
    "bpe_encode": bpe_encode_right2,
    "mean_pool": mean_pool_right2,
}
