"""Lesson 09 (BERT): held-out wrong and right implementations, from the exercise text only."""

from collections import Counter

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------- bert_mask_tokens


def _specials(tokens, special_ids):
    if special_ids is None:
        return torch.zeros_like(tokens, dtype=torch.bool)
    ids = torch.as_tensor(list(special_ids), dtype=tokens.dtype, device=tokens.device)
    return torch.isin(tokens, ids)


def bert_mask_tokens_right(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Right: rand < p minus specials, a second uniform u for 80/10/10, labels via masked_fill."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen &= ~_specials(tokens, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    random_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = tokens.clone()
    inputs[chosen & (u < 0.8)] = mask_id
    swap = chosen & (u >= 0.8) & (u < 0.9)
    inputs[swap] = random_ids[swap]
    labels = tokens.masked_fill(~chosen, -100)
    return inputs, labels


def bert_mask_tokens_one_uniform(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Right: ONE uniform r per position: r < 0.8p mask, < 0.9p random, < p unchanged; torch.where."""
    dev = tokens.device
    r = torch.rand(tokens.shape, generator=generator, device=dev, dtype=torch.float64)
    ok = ~_specials(tokens, special_ids)
    chosen = ok & (r < p)
    to_mask = ok & (r < 0.8 * p)
    to_random = ok & (r >= 0.8 * p) & (r < 0.9 * p)
    random_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = torch.where(to_mask, torch.full_like(tokens, mask_id), tokens)
    inputs = torch.where(to_random, random_ids, inputs)
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    return inputs, labels


def bert_mask_tokens_all_mask(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Wrong: every chosen position becomes [MASK] (no 10% random, no 10% unchanged)."""
    chosen = torch.rand(tokens.shape, generator=generator, device=tokens.device) < p
    chosen &= ~_specials(tokens, special_ids)
    inputs = tokens.masked_fill(chosen, mask_id)
    return inputs, tokens.masked_fill(~chosen, -100)


def bert_mask_tokens_labels_everywhere(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Wrong: labels are the original tokens at every position, not -100 where not chosen."""
    inputs, _ = bert_mask_tokens_right(tokens, mask_id, vocab_size, p, generator, special_ids)
    return inputs, tokens.clone()


def bert_mask_tokens_labels_corrupted(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Wrong: the labels hold the corrupted inputs at the chosen positions, not the originals."""
    inputs, labels = bert_mask_tokens_right(tokens, mask_id, vocab_size, p, generator, special_ids)
    return inputs, torch.where(labels != -100, inputs, labels)


def bert_mask_tokens_split_reversed(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Wrong: 80% of the chosen stay unchanged, 10% [MASK], 10% random (the split reversed)."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen &= ~_specials(tokens, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    random_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = tokens.clone()
    inputs[chosen & (u >= 0.8) & (u < 0.9)] = mask_id
    swap = chosen & (u >= 0.9)
    inputs[swap] = random_ids[swap]
    return inputs, tokens.masked_fill(~chosen, -100)


def bert_mask_tokens_independent_draws(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Wrong: separate draws rand < 0.8 for [MASK], then rand < 0.1 for random: 80 / 2 / 18."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen &= ~_specials(tokens, special_ids)
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
    return inputs, tokens.masked_fill(~chosen, -100)


def bert_mask_tokens_p_on_mask(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Wrong: the 80/10/10 thresholds are scaled by p (u < 0.8 * p -> [MASK]): most chosen stay unchanged."""
    dev = tokens.device
    ok = ~_specials(tokens, special_ids)
    chosen = ok & (torch.rand(tokens.shape, generator=generator, device=dev) < p)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    random_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = tokens.clone()
    inputs[chosen & (u < 0.8 * p)] = mask_id
    swap = chosen & (u >= 0.8 * p) & (u < 0.9 * p)
    inputs[swap] = random_ids[swap]
    return inputs, tokens.masked_fill(~chosen, -100)


def bert_mask_tokens_specials_chosen(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Wrong: special_ids is ignored, so [CLS], [SEP] and [PAD] can be chosen."""
    return bert_mask_tokens_right(tokens, mask_id, vocab_size, p, generator, None)


def bert_mask_tokens_no_generator(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Wrong: the random numbers are drawn without generator=, so a seed reproduces nothing."""
    return bert_mask_tokens_right(tokens, mask_id, vocab_size, p, None, special_ids)


def bert_mask_tokens_inplace(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Wrong: corrupts tokens in place (inputs = tokens, no copy), returning the caller's tensor."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen &= ~_specials(tokens, special_ids)
    labels = tokens.masked_fill(~chosen, -100)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    random_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = tokens
    inputs[chosen & (u < 0.8)] = mask_id
    swap = chosen & (u >= 0.8) & (u < 0.9)
    inputs[swap] = random_ids[swap]
    return inputs, labels


def bert_mask_tokens_chosen_inverted(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Wrong: chooses the positions with rand > p (85% of them) instead of rand < p."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) > p
    chosen &= ~_specials(tokens, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    random_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = tokens.clone()
    inputs[chosen & (u < 0.8)] = mask_id
    swap = chosen & (u >= 0.8) & (u < 0.9)
    inputs[swap] = random_ids[swap]
    return inputs, tokens.masked_fill(~chosen, -100)


def bert_mask_tokens_labels_int64(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Wrong: labels built with torch.full(shape, -100), always int64 whatever tokens' dtype."""
    inputs, labels = bert_mask_tokens_right(tokens, mask_id, vocab_size, p, generator, special_ids)
    out = torch.full(tokens.shape, -100, device=tokens.device)
    chosen = labels != -100
    out[chosen] = tokens[chosen].long()
    return inputs, out


def bert_mask_tokens_random_excludes_last(
    tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None
):
    """Wrong: the random ids come from randint(0, vocab_size - 1), so the last id is never drawn."""
    dev = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=dev) < p
    chosen &= ~_specials(tokens, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    random_ids = torch.randint(
        0, vocab_size - 1, tokens.shape, generator=generator, device=dev, dtype=tokens.dtype
    )
    inputs = tokens.clone()
    inputs[chosen & (u < 0.8)] = mask_id
    swap = chosen & (u >= 0.8) & (u < 0.9)
    inputs[swap] = random_ids[swap]
    return inputs, tokens.masked_fill(~chosen, -100)


# ---------------------------------------------------------------- wordpiece_tokenize


def wordpiece_tokenize_right(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Right: while loop, end shrinking from len(word), '##' when start > 0, whole word [UNK]."""
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


def wordpiece_tokenize_recursive(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Right: recursive, for/else over end in range(len, start, -1)."""
    if len(word) > max_chars_per_word:
        return [unk_token]

    def cut(start):
        if start == len(word):
            return []
        prefix = "##" if start else ""
        for end in range(len(word), start, -1):
            if prefix + word[start:end] in vocab:
                rest = cut(end)
                return None if rest is None else [prefix + word[start:end]] + rest
        return None

    pieces = cut(0)
    return [unk_token] if pieces is None else pieces


def wordpiece_tokenize_shortest(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: grows end from start + 1, so it takes the SHORTEST piece in vocab."""
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


def wordpiece_tokenize_no_hashes(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: pieces after the first are looked up and returned without the '##' prefix."""
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        end = len(word)
        while start < end and word[start:end] not in vocab:
            end -= 1
        if start == end:
            return [unk_token]
        pieces.append(word[start:end])
        start = end
    return pieces


def wordpiece_tokenize_hash_first(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: every piece, the first one included, is looked up as '##' + piece."""
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        end = len(word)
        while start < end and "##" + word[start:end] not in vocab:
            end -= 1
        if start == end:
            return [unk_token]
        pieces.append("##" + word[start:end])
        start = end
    return pieces


def wordpiece_tokenize_unk_piece(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: a position with no piece gives one [UNK] for that character; the rest is still cut."""
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
            pieces.append(unk_token)
            start += 1
        else:
            pieces.append(found)
            start = end
    return pieces


def wordpiece_tokenize_max_off_by_one(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: len(word) >= max_chars_per_word is [UNK], so a word of exactly the limit is lost."""
    if len(word) >= max_chars_per_word:
        return [unk_token]
    return wordpiece_tokenize_right(word, vocab, unk_token, max_chars_per_word=10**9)


def wordpiece_tokenize_no_max(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: max_chars_per_word is ignored; long words are still cut into pieces."""
    return wordpiece_tokenize_right(word, vocab, unk_token, max_chars_per_word=10**9)


def wordpiece_tokenize_unk_string(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: an unknown word returns the string unk_token instead of the list [unk_token]."""
    pieces = wordpiece_tokenize_right(word, vocab, unk_token, max_chars_per_word)
    return unk_token if pieces == [unk_token] else pieces


def wordpiece_tokenize_hardcoded_unk(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: returns the literal '[UNK]' whatever unk_token is passed."""
    pieces = wordpiece_tokenize_right(word, vocab, "[UNK]", max_chars_per_word)
    return pieces


def wordpiece_tokenize_lookup_hash_append_bare(
    word, vocab, unk_token="[UNK]", max_chars_per_word=100
):
    """Wrong: looks continuations up as '##' + piece but appends the bare piece without '##'."""
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        end, found = len(word), None
        while start < end:
            lookup = ("##" if start > 0 else "") + word[start:end]
            if lookup in vocab:
                found = word[start:end]
                break
            end -= 1
        if found is None:
            return [unk_token]
        pieces.append(found)
        start = end
    return pieces


def wordpiece_tokenize_never_whole(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Wrong: end starts at len(word) - 1, so the whole remaining substring is never tried."""
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
            # fall back to the single remaining character
            end = start + 1
            piece = ("##" if start > 0 else "") + word[start:end]
            if piece not in vocab:
                return [unk_token]
            found = piece
        pieces.append(found)
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
    return tuple(out)


def _pair_counts(words, weighted=True):
    counts = Counter()
    for symbols, n in words.items():
        for pair in zip(symbols, symbols[1:]):
            counts[pair] += n if weighted else 1
    return counts


def learn_bpe_right(word_counts, n_merges):
    """Right: Counter of weighted pairs each round, min by (-count, pair), merge left to right."""
    words = {tuple(w): n for w, n in word_counts.items()}
    merges = []
    for _ in range(n_merges):
        counts = _pair_counts(words)
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        words = {_merge(symbols, best): n for symbols, n in words.items()}
    return merges


def learn_bpe_sorted_lists(word_counts, n_merges):
    """Right: words as lists merged in place with a while loop; best from sorted(items)."""
    corpus = [[list(w), n] for w, n in word_counts.items()]
    merges = []
    while len(merges) < n_merges:
        counts = {}
        for symbols, n in corpus:
            for i in range(len(symbols) - 1):
                key = (symbols[i], symbols[i + 1])
                counts[key] = counts.get(key, 0) + n
        if not counts:
            break
        (a, b), _ = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merges.append((a, b))
        for entry in corpus:
            symbols = entry[0]
            i = 0
            while i < len(symbols) - 1:
                if symbols[i] == a and symbols[i + 1] == b:
                    symbols[i : i + 2] = [a + b]
                i += 1
    return merges


def learn_bpe_count_one(word_counts, n_merges):
    """Wrong: each pair adds 1 per word type, not the word's count."""
    words = {tuple(w): n for w, n in word_counts.items()}
    merges = []
    for _ in range(n_merges):
        counts = _pair_counts(words, weighted=False)
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        words = {_merge(s, best): n for s, n in words.items()}
    return merges


def learn_bpe_across_words(word_counts, n_merges):
    """Wrong: the words are joined into one sequence (each repeated count times), so pairs span words."""
    seq = tuple(c for w, n in word_counts.items() for _ in range(n) for c in w)
    merges = []
    for _ in range(n_merges):
        counts = Counter(zip(seq, seq[1:]))
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        seq = _merge(seq, best)
    return merges


def learn_bpe_first_occurrence(word_counts, n_merges):
    """Wrong: merges only the first occurrence of the pair in each word."""
    words = {tuple(w): n for w, n in word_counts.items()}
    merges = []
    for _ in range(n_merges):
        counts = _pair_counts(words)
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        new = {}
        for s, n in words.items():
            for i in range(len(s) - 1):
                if (s[i], s[i + 1]) == best:
                    s = s[:i] + (s[i] + s[i + 1],) + s[i + 2 :]
                    break
            new[s] = n
        words = new
    return merges


def learn_bpe_most_common(word_counts, n_merges):
    """Wrong: Counter.most_common(1), so ties go to the pair seen first, not the smallest."""
    words = {tuple(w): n for w, n in word_counts.items()}
    merges = []
    for _ in range(n_merges):
        counts = _pair_counts(words)
        if not counts:
            break
        best = counts.most_common(1)[0][0]
        merges.append(best)
        words = {_merge(s, best): n for s, n in words.items()}
    return merges


def learn_bpe_largest_tie(word_counts, n_merges):
    """Wrong: max by (count, pair), so ties go to the LARGEST pair."""
    words = {tuple(w): n for w, n in word_counts.items()}
    merges = []
    for _ in range(n_merges):
        counts = _pair_counts(words)
        if not counts:
            break
        best = max(counts, key=lambda pair: (counts[pair], pair))
        merges.append(best)
        words = {_merge(s, best): n for s, n in words.items()}
    return merges


def learn_bpe_count_once(word_counts, n_merges):
    """Wrong: counts the pairs once and takes the n_merges most frequent, never recounting."""
    words = {tuple(w): n for w, n in word_counts.items()}
    counts = _pair_counts(words)
    ranked = sorted(counts, key=lambda pair: (-counts[pair], pair))
    return ranked[:n_merges]


def learn_bpe_right_to_left(word_counts, n_merges):
    """Wrong: merges scanning from the right, so 'a a a' with ('a', 'a') becomes 'a aa'."""

    def merge_rtl(symbols, pair):
        out = list(symbols)
        i = len(out) - 2
        while i >= 0:
            if (out[i], out[i + 1]) == pair:
                out[i : i + 2] = [out[i] + out[i + 1]]
                i -= 2
            else:
                i -= 1
        return tuple(out)

    words = {tuple(w): n for w, n in word_counts.items()}
    merges = []
    for _ in range(n_merges):
        counts = _pair_counts(words)
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        words = {merge_rtl(s, best): n for s, n in words.items()}
    return merges


def learn_bpe_no_early_stop(word_counts, n_merges):
    """Wrong: no early stop; min() of an empty Counter raises once every word is one symbol."""
    words = {tuple(w): n for w, n in word_counts.items()}
    merges = []
    for _ in range(n_merges):
        counts = _pair_counts(words)
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        words = {_merge(s, best): n for s, n in words.items()}
    return merges


def learn_bpe_joined_strings(word_counts, n_merges):
    """Wrong: returns the merged symbols as strings ('es') instead of pairs ('e', 's')."""
    return ["".join(pair) for pair in learn_bpe_right(word_counts, n_merges)]


def learn_bpe_string_tiebreak(word_counts, n_merges):
    """Wrong: breaks ties by the joined string a + b, not by the tuple (a, b)."""
    words = {tuple(w): n for w, n in word_counts.items()}
    merges = []
    for _ in range(n_merges):
        counts = _pair_counts(words)
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair[0] + pair[1]))
        merges.append(best)
        words = {_merge(s, best): n for s, n in words.items()}
    return merges


# ---------------------------------------------------------------- bpe_encode


def bpe_encode_right(word, ranks):
    """Right: list of characters; while a ranked pair exists, merge the lowest-rank pair everywhere."""
    symbols = list(word)
    while len(symbols) > 1:
        ranked = [(ranks[p], p) for p in zip(symbols, symbols[1:]) if p in ranks]
        if not ranked:
            break
        _, best = min(ranked)
        symbols = list(_merge(symbols, best))
    return symbols


def bpe_encode_gpt2_style(word, ranks):
    """Right: GPT-2's loop: min over the set of pairs keyed by ranks.get(pair, inf), index-based merge."""
    if not word:
        return []
    symbols = tuple(word)
    while True:
        pairs = {(symbols[i], symbols[i + 1]) for i in range(len(symbols) - 1)}
        if not pairs:
            break
        best = min(pairs, key=lambda p: ranks.get(p, float("inf")))
        if best not in ranks:
            break
        first, second = best
        new, i = [], 0
        while i < len(symbols):
            try:
                j = symbols.index(first, i)
            except ValueError:
                new.extend(symbols[i:])
                break
            new.extend(symbols[i:j])
            if j < len(symbols) - 1 and symbols[j + 1] == second:
                new.append(first + second)
                i = j + 2
            else:
                new.append(symbols[j])
                i = j + 1
        symbols = tuple(new)
    return list(symbols)


def bpe_encode_highest_rank(word, ranks):
    """Wrong: merges the ranked pair with the HIGHEST rank first."""
    symbols = list(word)
    while len(symbols) > 1:
        ranked = [(ranks[p], p) for p in zip(symbols, symbols[1:]) if p in ranks]
        if not ranked:
            break
        _, best = max(ranked)
        symbols = list(_merge(symbols, best))
    return symbols


def bpe_encode_leftmost(word, ranks):
    """Wrong: merges the leftmost adjacent pair that has a rank, whatever its rank."""
    symbols = list(word)
    merged = True
    while merged:
        merged = False
        for i in range(len(symbols) - 1):
            if (symbols[i], symbols[i + 1]) in ranks:
                symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]
                merged = True
                break
    return symbols


def bpe_encode_once(word, ranks):
    """Wrong: merges the lowest-rank pair once and stops, without repeating."""
    symbols = list(word)
    ranked = [(ranks[p], p) for p in zip(symbols, symbols[1:]) if p in ranks]
    if ranked:
        symbols = list(_merge(symbols, min(ranked)[1]))
    return symbols


def bpe_encode_rank_order_once(word, ranks):
    """Wrong: one pass over the merges in rank order, each applied once (no search for new pairs)."""
    symbols = list(word)
    for pair in sorted(ranks, key=ranks.get):
        if len(symbols) < 2:
            break
        symbols = list(_merge(symbols, pair))
    return symbols


def bpe_encode_space_joined(word, ranks):
    """Wrong: returns the pieces joined by spaces (a str), as GPT-2's own bpe() does, not a list."""
    return " ".join(bpe_encode_right(word, ranks))


def bpe_encode_most_frequent(word, ranks):
    """Wrong: merges the ranked pair that occurs most often in the word (ties: lowest rank)."""
    symbols = list(word)
    while len(symbols) > 1:
        counts = Counter(p for p in zip(symbols, symbols[1:]) if p in ranks)
        if not counts:
            break
        best = min(counts, key=lambda p: (-counts[p], ranks[p]))
        symbols = list(_merge(symbols, best))
    return symbols


def bpe_encode_default_zero(word, ranks):
    """Wrong: ranks.get(pair, 0), so pairs without a rank look like the best and get merged."""
    symbols = list(word)
    while len(symbols) > 1:
        pairs = list(zip(symbols, symbols[1:]))
        best = min(pairs, key=lambda p: ranks.get(p, 0))
        if best not in ranks and all(p not in ranks for p in pairs):
            break
        symbols = list(_merge(symbols, best))
    return symbols


def bpe_encode_right_to_left(word, ranks):
    """Wrong: merges the occurrences of the best pair scanning from the right ('aaa' -> a aa)."""
    symbols = list(word)
    while len(symbols) > 1:
        ranked = [(ranks[p], p) for p in zip(symbols, symbols[1:]) if p in ranks]
        if not ranked:
            break
        _, best = min(ranked)
        i = len(symbols) - 2
        while i >= 0:
            if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]
                i -= 2
            else:
                i -= 1
    return symbols


# ---------------------------------------------------------------- mean_pool


def mean_pool_right(hidden, attention_mask, normalize=True):
    """Right: mask cast to hidden's dtype, masked sum over L divided by the mask's sum, L2 norm."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    pooled = (hidden * m).sum(dim=1) / m.sum(dim=1)
    if normalize:
        pooled = pooled / pooled.norm(dim=-1, keepdim=True)
    return pooled


def mean_pool_einsum(hidden, attention_mask, normalize=True):
    """Right: einsum 'bl,bld->bd' over the float mask, divided by its count; F.normalize."""
    m = attention_mask.to(hidden.dtype)
    pooled = torch.einsum("bl,bld->bd", m, hidden) / m.sum(dim=1, keepdim=True)
    return F.normalize(pooled, p=2, dim=-1) if normalize else pooled


def mean_pool_no_mask(hidden, attention_mask, normalize=True):
    """Wrong: hidden.mean(1), so the padding is averaged in."""
    pooled = hidden.mean(dim=1)
    return F.normalize(pooled, dim=-1) if normalize else pooled


def mean_pool_divide_by_l(hidden, attention_mask, normalize=True):
    """Wrong: the masked sum is divided by L, not by the number of real tokens."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    pooled = (hidden * m).sum(dim=1) / hidden.shape[1]
    return F.normalize(pooled, dim=-1) if normalize else pooled


def mean_pool_never_normalised(hidden, attention_mask, normalize=True):
    """Wrong: the normalize argument is ignored; the mean is never scaled to unit length."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * m).sum(dim=1) / m.sum(dim=1)


def mean_pool_always_normalised(hidden, attention_mask, normalize=True):
    """Wrong: normalises even when normalize=False."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    return F.normalize((hidden * m).sum(dim=1) / m.sum(dim=1), dim=-1)


def mean_pool_tokens_normalised(hidden, attention_mask, normalize=True):
    """Wrong: normalises each token vector before averaging, not the mean after."""
    if normalize:
        hidden = F.normalize(hidden, dim=-1)
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * m).sum(dim=1) / m.sum(dim=1)


def mean_pool_cls(hidden, attention_mask, normalize=True):
    """Wrong: takes the [CLS] vector hidden[:, 0] instead of the mean."""
    pooled = hidden[:, 0]
    return F.normalize(pooled, dim=-1) if normalize else pooled


def mean_pool_norm_batch_axis(hidden, attention_mask, normalize=True):
    """Wrong: the L2 norm is taken over the batch axis (dim=0) instead of the features."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    pooled = (hidden * m).sum(dim=1) / m.sum(dim=1)
    if normalize:
        pooled = pooled / pooled.norm(dim=0, keepdim=True)
    return pooled


def mean_pool_inplace_zero(hidden, attention_mask, normalize=True):
    """Wrong: zeroes the padded rows of hidden in place before summing (modifies the input)."""
    with torch.no_grad():
        hidden[attention_mask == 0] = 0
    pooled = hidden.sum(dim=1) / attention_mask.sum(dim=1, keepdim=True).to(hidden.dtype)
    return F.normalize(pooled, dim=-1) if normalize else pooled


def mean_pool_l1(hidden, attention_mask, normalize=True):
    """Wrong: 'normalise' divides by the sum of absolute values (L1), not the L2 length."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    pooled = (hidden * m).sum(dim=1) / m.sum(dim=1)
    if normalize:
        pooled = pooled / pooled.abs().sum(dim=-1, keepdim=True)
    return pooled


def mean_pool_float32(hidden, attention_mask, normalize=True):
    """Wrong: the mask is cast with .float(), then the result with it, so float64 input comes back float32."""
    m = attention_mask.float().unsqueeze(-1)
    pooled = ((hidden * m).sum(dim=1) / m.sum(dim=1)).float()
    return F.normalize(pooled, dim=-1) if normalize else pooled


def mean_pool_detached(hidden, attention_mask, normalize=True):
    """Wrong: pools hidden.detach(), so no gradient flows back to hidden."""
    return mean_pool_right(hidden.detach(), attention_mask, normalize)


WRONG = {
    "bert_mask_tokens": [
        bert_mask_tokens_all_mask,
        bert_mask_tokens_labels_everywhere,
        bert_mask_tokens_labels_corrupted,
        bert_mask_tokens_split_reversed,
        bert_mask_tokens_independent_draws,
        bert_mask_tokens_p_on_mask,
        bert_mask_tokens_specials_chosen,
        bert_mask_tokens_no_generator,
        bert_mask_tokens_inplace,
        bert_mask_tokens_chosen_inverted,
        bert_mask_tokens_labels_int64,
        bert_mask_tokens_random_excludes_last,
    ],
    "wordpiece_tokenize": [
        wordpiece_tokenize_shortest,
        wordpiece_tokenize_no_hashes,
        wordpiece_tokenize_hash_first,
        wordpiece_tokenize_unk_piece,
        wordpiece_tokenize_max_off_by_one,
        wordpiece_tokenize_no_max,
        wordpiece_tokenize_unk_string,
        wordpiece_tokenize_hardcoded_unk,
        wordpiece_tokenize_lookup_hash_append_bare,
        wordpiece_tokenize_never_whole,
    ],
    "learn_bpe": [
        learn_bpe_count_one,
        learn_bpe_across_words,
        learn_bpe_first_occurrence,
        learn_bpe_most_common,
        learn_bpe_largest_tie,
        learn_bpe_count_once,
        learn_bpe_right_to_left,
        learn_bpe_no_early_stop,
        learn_bpe_joined_strings,
        learn_bpe_string_tiebreak,
    ],
    "bpe_encode": [
        bpe_encode_highest_rank,
        bpe_encode_leftmost,
        bpe_encode_once,
        bpe_encode_rank_order_once,
        bpe_encode_space_joined,
        bpe_encode_most_frequent,
        bpe_encode_default_zero,
        bpe_encode_right_to_left,
    ],
    "mean_pool": [
        mean_pool_no_mask,
        mean_pool_divide_by_l,
        mean_pool_never_normalised,
        mean_pool_always_normalised,
        mean_pool_tokens_normalised,
        mean_pool_cls,
        mean_pool_norm_batch_axis,
        mean_pool_inplace_zero,
        mean_pool_l1,
        mean_pool_float32,
        mean_pool_detached,
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
    "bert_mask_tokens": bert_mask_tokens_one_uniform,
    "wordpiece_tokenize": wordpiece_tokenize_recursive,
    "learn_bpe": learn_bpe_sorted_lists,
    "bpe_encode": bpe_encode_gpt2_style,
    "mean_pool": mean_pool_einsum,
}
