"""Checks for lesson 09, exercises 3 and 4 — byte-pair encoding: `learn_bpe` (the merges learned
from {word: count}, in order) and `bpe_encode` (one word cut with those merges), both compared
exactly with the reference: hand-made corpora and ranks that tell the mistakes apart, and in the
thorough run random corpora, their learned merges and words seen and unseen.

Lesson 09's checks span four modules, imported in name order: ``lesson09`` (bert_mask_tokens),
this one, ``lesson09_pooling`` (mean_pool) and ``lesson09_wordpiece`` (wordpiece_tokenize).
"""

from __future__ import annotations

from collections import Counter

import torch

from .. import bert as _bert
from .answer_drivers import Call, ExactDriver
from .exercise import Exercise, Mistake

__all__ = ["bpe_encode", "learn_bpe"]

_FORBIDDEN = (
    "transformer_lab.bert.learn_bpe",
    "transformer_lab.bert.bpe_encode",
    "transformer_lab.bert_bpe.learn_bpe",
    "transformer_lab.bert_bpe.bpe_encode",
)


def _merge(symbols, pair, first_only=False, from_right=False):
    if from_right:  # the occurrences taken from the right: a a a -> a aa
        out, i = [], len(symbols) - 1
        while i >= 0:
            if i > 0 and (symbols[i - 1], symbols[i]) == tuple(pair):
                out.insert(0, symbols[i - 1] + symbols[i])
                i -= 2
            else:
                out.insert(0, symbols[i])
                i -= 1
        return out
    out, i, merged = [], 0, False
    while i < len(symbols):
        if (
            not (first_only and merged)
            and i + 1 < len(symbols)
            and (symbols[i], symbols[i + 1]) == tuple(pair)
        ):
            out.append(symbols[i] + symbols[i + 1])
            i, merged = i + 2, True
        else:
            out.append(symbols[i])
            i += 1
    return out


# ==============================================================================================
# Exercise 3 — learn_bpe(word_counts, n_merges) -> [(a, b), ...]


def _learn(
    word_counts,
    n_merges,
    *,
    weighted=True,
    across=False,
    first_only=False,
    tie="min",
    recount=True,
    from_right=False,
    min_count=1,
    end_of_word=False,
):
    """The algorithm with switches, each switch one catalogued mistake."""
    if end_of_word:  # Sennrich's '</w>' appended to every word
        word_counts = {(*word, "</w>"): n for word, n in word_counts.items()}
    if across:  # the whole corpus as one stream of symbols: pairs span word boundaries
        stream = [c for word, n in word_counts.items() for _ in range(n) for c in word]
        words = {0: (stream, 1)}
    else:
        words = {w: (list(w), n if weighted else 1) for w, n in word_counts.items()}
    merges, fixed = [], None
    while len(merges) < n_merges:
        counts = Counter()
        for symbols, n in words.values():
            for pair in zip(symbols, symbols[1:]):
                counts[pair] += n
        if not recount:  # the pairs counted once, at the start, taken in order
            fixed = fixed if fixed is not None else sorted(counts, key=lambda p: (-counts[p], p))
            if len(merges) == len(fixed):
                break
            best = fixed[len(merges)]
        elif not counts or max(counts.values()) < min_count:
            break
        elif tie == "max":
            best = max(counts, key=lambda p: (counts[p], p))
        elif tie == "joined":  # the joined string a + b, not the tuple (a, b)
            best = min(counts, key=lambda p: (-counts[p], p[0] + p[1]))
        elif tie == "first":
            best = counts.most_common(1)[0][0]
        else:
            best = min(counts, key=lambda p: (-counts[p], p))
        merges.append(best)
        words = {k: (_merge(s, best, first_only, from_right), n) for k, (s, n) in words.items()}
    return merges


def _learn_no_counts(word_counts, n_merges):
    return _learn(word_counts, n_merges, weighted=False)


def _learn_across_words(word_counts, n_merges):
    return _learn(word_counts, n_merges, across=True)


def _learn_first_only(word_counts, n_merges):
    return _learn(word_counts, n_merges, first_only=True)


def _learn_tie_max(word_counts, n_merges):
    return _learn(word_counts, n_merges, tie="max")


def _learn_tie_first(word_counts, n_merges):
    return _learn(word_counts, n_merges, tie="first")


def _learn_tie_joined(word_counts, n_merges):
    return _learn(word_counts, n_merges, tie="joined")


def _learn_no_recount(word_counts, n_merges):
    return _learn(word_counts, n_merges, recount=False)


def _learn_from_right(word_counts, n_merges):
    return _learn(word_counts, n_merges, from_right=True)


def _learn_stop_at_one(word_counts, n_merges):
    return _learn(word_counts, n_merges, min_count=2)


def _learn_end_of_word(word_counts, n_merges):
    return _learn(word_counts, n_merges, end_of_word=True)


def _learn_one_short(word_counts, n_merges):
    """One merge fewer than asked (a loop from 1 to n_merges)."""
    return _learn(word_counts, max(n_merges - 1, 0))


def _learn_joined(word_counts, n_merges):
    """Records each merge as its new symbol a + b, not as the pair (a, b)."""
    return ["".join(pair) for pair in _learn(word_counts, n_merges)]


def _learn_string_replace(word_counts, n_merges):
    """Each word kept as its symbols joined by spaces, a merge applied with str.replace: "a bc"
    holds the text "b c" too, and a merge of ('b', 'c') glues symbols it should not."""
    words = {w: " ".join(w) for w in word_counts}
    merges = []
    while len(merges) < n_merges:
        counts = Counter()
        for w, text in words.items():
            symbols = text.split()
            for pair in zip(symbols, symbols[1:]):
                counts[pair] += word_counts[w]
        if not counts:
            break
        best = min(counts, key=lambda p: (-counts[p], p))
        merges.append(best)
        words = {w: t.replace(f"{best[0]} {best[1]}", best[0] + best[1]) for w, t in words.items()}
    return merges


# Sennrich et al.'s example corpus, without the end-of-word marker
SENNRICH = {"low": 5, "lower": 2, "newest": 6, "widest": 3}


def _random_corpus(seed: int) -> dict[str, int]:
    """Words over a small alphabet with counts 1..9: many ties, many repeated pairs."""
    g = torch.Generator().manual_seed(seed)
    corpus = {}
    for _ in range(25):
        n = int(torch.randint(1, 9, (1,), generator=g))
        word = "".join("abcde"[int(i)] for i in torch.randint(5, (n,), generator=g))
        corpus[word] = int(torch.randint(1, 10, (1,), generator=g))
    return corpus


def _short(corpus: dict[str, int]) -> str:
    text = repr(corpus)
    return text if len(text) <= 120 else f"<{len(corpus)} words>"


def _learn_cases(thorough: bool) -> list[Call]:
    cases = [
        (SENNRICH, 10),
        ({"ab": 1, "cd": 3}, 1),  # counts decide: ('c', 'd')
        ({"ba": 2, "ab": 2}, 1),  # a tie: ('a', 'b') < ('b', 'a')
        ({"abab": 1, "cd": 1}, 2),  # every occurrence: ('a', 'b') then ('ab', 'ab')
        ({"ab": 1, "ba": 1}, 2),  # no pair across words: never ('ab', 'b')
        ({"aaa": 1}, 2),  # left to right: ('a', 'a') then ('aa', 'a')
        ({"abc": 4, "x": 9}, 5),  # two merges are all there are
        # ('b', 'c') second: "ab c" holds "b c" as text but not as two symbols (str.replace)
        ({"ab": 5, "abc": 1, "bc": 3}, 3),
        # a tie of ('a', 'z') and ('ab', 'c'): the smaller tuple, though 'abc' < 'az' as strings
        ({"az": 1, "abc": 1}, 2),
        (SENNRICH, 0),
    ]
    if thorough:
        cases += [(_random_corpus(seed), 15) for seed in (9100, 9101, 9102, 9103)]
        cases += [({"hug": 10, "pug": 5, "pun": 12, "bun": 4, "hugs": 5}, 10)]  # Hugging Face's
    return [
        Call((corpus, n), label=f"learn_bpe({_short(corpus)}, n_merges={n})") for corpus, n in cases
    ]


def _as_pairs(result):
    """The result as a list of 2-tuples of str, or None when it is not such a sequence."""
    if isinstance(result, (str, bytes)) or not hasattr(result, "__iter__"):
        return None
    pairs = [tuple(p) if isinstance(p, (list, tuple)) else p for p in result]
    if all(
        isinstance(p, tuple) and len(p) == 2 and all(isinstance(s, str) for s in p) for p in pairs
    ):
        return pairs
    return None


def _same_merges(got, expected) -> bool:
    """The same pairs; results that are not pairs (a mistake's joined strings) compare as they are."""
    pairs = _as_pairs(got)
    if pairs is None or _as_pairs(expected) is None:
        return got == expected
    return pairs == [tuple(p) for p in expected]


def _describe_merges(expected, got) -> str:
    pairs = _as_pairs(got)
    if pairs is None:
        return f"the result should be a list of (str, str) pairs but is {got!r}"
    for i, (want, have) in enumerate(zip(expected, pairs)):
        if want != have:
            return f"merge {i} (counting from 0) should be {want!r} but is {have!r}; expected {expected!r}, got {pairs!r}"
    return f"expected {len(expected)} merges {expected!r}, got {len(pairs)}: {pairs!r}"


learn_bpe = Exercise(
    name="learn_bpe",
    lesson="09",
    module="bert",
    reference=_bert.learn_bpe,
    forbidden=_FORBIDDEN,
    mistakes=[
        Mistake(
            "no-counts",
            "each word's pairs count as often as the word occurs: add the word's count, not 1, "
            "for every adjacent pair in it.",
            _learn_no_counts,
        ),
        Mistake(
            "across-words",
            "pairs are counted inside words only: the last symbol of one word and the first "
            "of the next are not a pair (keep every word's symbols apart).",
            _learn_across_words,
        ),
        Mistake(
            "first-occurrence",
            "a merge replaces EVERY occurrence of the pair in every word (left to right, without "
            "overlaps), not only the first one.",
            _learn_first_only,
        ),
        Mistake(
            "tie-largest",
            "ties go to the SMALLEST pair in Python's order (min over (-count, pair)); you take "
            "the largest.",
            _learn_tie_max,
        ),
        Mistake(
            "tie-first-counted",
            "ties go to the smallest pair in Python's order (min over (-count, pair)), not to the "
            "pair counted first (Counter.most_common keeps the order pairs were first seen).",
            _learn_tie_first,
        ),
        Mistake(
            "string-replace",
            "the merge is applied to the text of the word (symbols joined by spaces, then "
            "str.replace): in 'ab c' the text 'b c' is found though 'b' is part of the symbol "
            "'ab'; merge in the list of symbols, pair by pair.",
            _learn_string_replace,
        ),
        Mistake(
            "joined-symbols",
            "a merge is recorded as the pair (a, b), not as the new symbol a + b: the pair says "
            "which two symbols to join ('e' + 'st' and 'es' + 't' both give 'est').",
            _learn_joined,
        ),
        Mistake(
            "no-recount",
            "count the pairs again after every merge, on the merged words: a merge makes new "
            "pairs (('e', 's') then ('es', 't')) and removes others, so the pairs counted once at "
            "the start are not the merges.",
            _learn_no_recount,
        ),
        Mistake(
            "from-right",
            "overlapping occurrences are merged from the right (a a a -> a aa): merge left to "
            "right without overlaps, so ('a', 'a') turns a a a into aa a.",
            _learn_from_right,
        ),
        Mistake(
            "stop-at-one",
            "learning stops when the most frequent pair occurs only once: a pair seen once is "
            "merged like any other; stop early only when no word has two symbols left.",
            _learn_stop_at_one,
        ),
        Mistake(
            "end-of-word",
            "an end-of-word symbol ('</w>') is added to every word: this exercise learns on the "
            "characters alone, each word starting as list(word).",
            _learn_end_of_word,
        ),
        Mistake(
            "tie-joined-string",
            "ties go to the smallest pair compared as a tuple, (-count, pair), not as the joined "
            "string a + b: ('a', 'z') comes before ('ab', 'c') though 'abc' < 'az'.",
            _learn_tie_joined,
        ),
        Mistake(
            "one-short",
            "one merge fewer than asked is learned: n_merges merges are n_merges rounds, "
            "for _ in range(n_merges) (not range(1, n_merges)), stopping early only when no "
            "pair is left.",
            _learn_one_short,
        ),
    ],
    driver=ExactDriver(
        _learn_cases,
        covered="every corpus, the exact merges in order",
        equal=_same_merges,
        describe=_describe_merges,
    ),
    doc="learn_bpe(word_counts, n_merges) -> the merges (a, b) learned in order, most frequent pair first, ties to the smallest pair",
)


# ==============================================================================================
# Exercise 4 — bpe_encode(word, ranks) -> [piece, ...]


def _encode(
    word, ranks, *, pick="lowest", once=False, from_right=False, joined_keys=False, stop=True
):
    """The algorithm with switches, each switch one catalogued mistake."""
    if joined_keys:  # the pairs looked up as strings a + b, which are no keys of ranks
        ranks = {"".join(pair): rank for pair, rank in ranks.items()}
    symbols = list(word)
    while len(symbols) > 1:
        pairs = list(zip(symbols, symbols[1:]))
        ranked = [p for p in pairs if p in ranks]
        if not ranked and stop:
            break
        if not ranked:  # no pair has a rank, and the first of them is merged all the same
            symbols = _merge(symbols, pairs[0], from_right=from_right)
            continue
        if pick == "frequent":  # the most frequent pair in the word, as when learning
            counts = Counter(ranked)
            best = min(counts, key=lambda p: (-counts[p], p))
        elif pick == "highest":
            best = max(ranked, key=ranks.__getitem__)
        elif pick == "leftmost":
            best = ranked[0]
        else:
            best = min(ranked, key=ranks.__getitem__)
        symbols = _merge(symbols, best, from_right=from_right)
        if once:
            break
    return symbols


def _encode_frequent(word, ranks):
    return _encode(word, ranks, pick="frequent")


def _encode_highest(word, ranks):
    return _encode(word, ranks, pick="highest")


def _encode_leftmost(word, ranks):
    return _encode(word, ranks, pick="leftmost")


def _encode_once(word, ranks):
    return _encode(word, ranks, once=True)


def _encode_from_right(word, ranks):
    return _encode(word, ranks, from_right=True)


def _encode_joined_keys(word, ranks):
    return _encode(word, ranks, joined_keys=True)


def _encode_no_stop(word, ranks):
    return _encode(word, ranks, stop=False)


def _encode_empty_word(word, ranks):
    return [word] if len(word) < 2 else _encode(word, ranks)


def _encode_unranked_wins(word, ranks):
    """min() over every adjacent pair with ranks.get(pair, 0): an unranked pair ties rank 0."""
    symbols = list(word)
    while len(symbols) > 1:
        best = min(zip(symbols, symbols[1:]), key=lambda p: ranks.get(p, 0))
        if best not in ranks:
            break
        symbols = _merge(symbols, best)
    return symbols


def _encode_unranked_merged(word, ranks):
    """min() over every adjacent pair with ranks.get(pair, 0), merging the pair it finds even
    without a rank, while some pair of the word has one."""
    symbols = list(word)
    while len(symbols) > 1:
        pairs = list(zip(symbols, symbols[1:]))
        if not any(p in ranks for p in pairs):
            break
        symbols = _merge(symbols, min(pairs, key=lambda p: ranks.get(p, 0)))
    return symbols


def _encode_keeps_second(word, ranks):
    """After a merge the walk moves on by one symbol: the pair's second symbol stays as well."""
    symbols = list(word)
    for _ in range(2 * len(word)):
        ranked = [p for p in zip(symbols, symbols[1:]) if p in ranks]
        if not ranked:
            break
        a, b = min(ranked, key=ranks.__getitem__)
        symbols = [
            a + b if i + 1 < len(symbols) and (s, symbols[i + 1]) == (a, b) else s
            for i, s in enumerate(symbols)
        ]
    return symbols


def _encode_joined(word, ranks):
    return " ".join(_encode(word, ranks))


# Ranks a corpus could have learned (every merged symbol made by an earlier merge). The words come
# in an order where each mistake first fails on a word on which no other mistake gives its pieces:
# "bca" only the highest rank; "abab" only one merge; "abcbca" the leftmost pair (the highest rank
# fails there too); "cabc" the most frequent pair.
_HAND_RANKS = {("b", "c"): 0, ("a", "b"): 1, ("c", "a"): 2, ("ca", "b"): 3, ("ab", "ab"): 4}
_HAND_WORDS = ("bca", "abab", "abcbca", "cabc", "abcab", "a", "")
# one symbol repeated: its pair's occurrences overlap, and are merged left to right
_REPEAT_RANKS = {("a", "a"): 0, ("aa", "a"): 1, ("aa", "aa"): 2}


def _encode_cases(thorough: bool) -> list[Call]:
    sennrich = _bert.merge_ranks(_learn(SENNRICH, 10))
    cases = [(w, _HAND_RANKS, "_HAND_RANKS") for w in _HAND_WORDS]
    cases += [(w, sennrich, "SENNRICH") for w in ("lowest", "newer", "widest", "slow", "xyz")]
    cases += [(w, _REPEAT_RANKS, "_REPEAT_RANKS") for w in ("aaa", "aaaaa")]  # left to right
    if thorough:
        for seed in (9200, 9201, 9202):
            corpus = _random_corpus(seed)
            ranks = _bert.merge_ranks(_learn(corpus, 30))
            unseen = _random_corpus(seed + 50)
            cases += [(w, ranks, f"merges of corpus {seed}") for w in [*corpus, *unseen]]
    return [
        Call(
            (word, ranks),
            label=f"bpe_encode({word!r}, ranks) with ranks {ranks if name.startswith('_') else name}",
        )
        for word, ranks, name in cases
    ]


def _same_pieces(got, expected) -> bool:
    """Equal pieces (a tuple counts as a list); two strings compare as strings, so that a student's
    joined string is named by the mistake that joins."""
    return (list(got) if isinstance(got, tuple) else got) == expected


def _describe_pieces(expected, got) -> str:
    if not isinstance(got, (list, tuple)) or not all(isinstance(p, str) for p in got):
        return f"the result should be a list of str pieces but is {got!r}"
    return f"expected {expected!r}, got {list(got)!r}"


bpe_encode = Exercise(
    name="bpe_encode",
    lesson="09",
    module="bert",
    reference=_bert.bpe_encode,
    forbidden=_FORBIDDEN,
    mistakes=[
        Mistake(
            "most-frequent",
            "encoding does not count pairs: merge the adjacent pair with the LOWEST RANK (the "
            "merge learned first), not the pair that occurs most often in the word.",
            _encode_frequent,
        ),
        Mistake(
            "highest-rank",
            "the rank is the merge's place in the learned order: merge the pair with the "
            "LOWEST rank (learned first), not the highest.",
            _encode_highest,
        ),
        Mistake(
            "leftmost",
            "do not merge the leftmost pair that has a rank: of all adjacent pairs, merge the "
            "one with the lowest rank, wherever it is in the word.",
            _encode_leftmost,
        ),
        Mistake(
            "one-merge",
            "repeat: after a merge, look at the new adjacent pairs and merge again, until no "
            "adjacent pair has a rank.",
            _encode_once,
        ),
        Mistake(
            "empty-word",
            "the empty word has no characters, so no pieces: return [] (start from list(word)), "
            "not [''].",
            _encode_empty_word,
        ),
        Mistake(
            "unranked-wins",
            "a pair without a rank was chosen (ranks.get(pair, 0) ranks it first) and the loop "
            "stopped: choose only among the pairs in ranks (or default to float('inf')).",
            _encode_unranked_wins,
        ),
        Mistake(
            "keeps-second",
            "after merging a pair, skip both of its symbols (i += 2): its second symbol is part "
            "of the new one and must not stay on its own.",
            _encode_keeps_second,
        ),
        Mistake(
            "joined",
            "return the list of pieces, not one string of them joined with spaces.",
            _encode_joined,
        ),
        Mistake(
            "from-right",
            "the occurrences of the pair are merged from the right (a a a -> a aa): merge every "
            "occurrence left to right without overlaps, so ('a', 'a') turns a a a into aa a.",
            _encode_from_right,
        ),
        Mistake(
            "joined-keys",
            "no merge is ever made: the keys of ranks are pairs of strings, so look up the tuple "
            "(a, b), not the joined string a + b.",
            _encode_joined_keys,
        ),
        Mistake(
            "unranked-merged",
            "a pair without a rank was merged (ranks.get(pair, 0) ranks every unknown pair "
            "first): choose only among the pairs in ranks (or default to float('inf')), and "
            "never merge a pair that has no rank.",
            _encode_unranked_merged,
        ),
        Mistake(
            "no-stop",
            "merging went on once no adjacent pair had a rank (min() with "
            "ranks.get(pair, float('inf')) still returns a pair): stop when the best pair has "
            "no rank, so that a word whose pairs are unknown stays in pieces.",
            _encode_no_stop,
        ),
    ],
    driver=ExactDriver(
        _encode_cases,
        covered="every word, the exact pieces",
        equal=_same_pieces,
        describe=_describe_pieces,
    ),
    doc="bpe_encode(word, ranks) -> list of pieces (repeatedly merge the adjacent pair of lowest rank)",
)
