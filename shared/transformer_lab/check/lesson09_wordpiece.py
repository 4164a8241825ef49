"""Checks for lesson 09, exercise 2 — `wordpiece_tokenize`: greedy longest-match-first pieces,
compared exactly with the reference's, word by word (hand-picked words on a toy vocabulary, and
in the thorough run words on random vocabularies). Other libraries' WordPiece tokenizers are
switched off too while the student's code runs, when they are already imported.

Lesson 09's checks span four modules, imported in name order: ``lesson09`` (bert_mask_tokens),
``lesson09_bpe`` (learn_bpe, bpe_encode), ``lesson09_pooling`` (mean_pool) and this one.
"""

from __future__ import annotations

import sys

import torch

from .. import bert as _bert
from .answer_drivers import Finding, TrialDriver
from .exercise import Exercise, Mistake
from .forbid import forbid

__all__ = ["wordpiece_tokenize"]


# ==============================================================================================
# Exercise 2 — wordpiece_tokenize(word, vocab, unk_token="[UNK]", max_chars_per_word=100)


def _wp(
    word,
    vocab,
    unk_token,
    max_chars_per_word,
    *,
    shortest=False,
    prefix="##",
    first="",
    partial_unk=False,
    limit=True,
    unk_each=False,
    shortest_tried=1,
    longest_tried=0,
):
    """The algorithm with switches, each switch one catalogued mistake."""
    if limit and len(word) > max_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        low = start + shortest_tried - 1
        high = len(word) - longest_tried
        ends = range(start + 1, len(word) + 1) if shortest else range(high, low, -1)
        piece = None
        for end in ends:
            candidate = (first if start == 0 else prefix) + word[start:end]
            if candidate in vocab:
                piece = candidate
                break
        if piece is None and unk_each:  # one [UNK] for this character, then go on
            pieces.append(unk_token)
            start += 1
            continue
        if piece is None:
            return pieces + [unk_token] if partial_unk else [unk_token]
        pieces.append(piece)
        start = end
    return pieces


def _wp_shortest(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    return _wp(word, vocab, unk_token, max_chars_per_word, shortest=True)


def _wp_no_prefix(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    return _wp(word, vocab, unk_token, max_chars_per_word, prefix="")


def _wp_partial_unk(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    return _wp(word, vocab, unk_token, max_chars_per_word, partial_unk=True)


def _wp_prefix_first(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    return _wp(word, vocab, unk_token, max_chars_per_word, first="##")


def _wp_unk_each(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    return _wp(word, vocab, unk_token, max_chars_per_word, unk_each=True)


def _wp_no_single(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    return _wp(word, vocab, unk_token, max_chars_per_word, shortest_tried=2)


def _wp_no_whole_rest(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    return _wp(word, vocab, unk_token, max_chars_per_word, longest_tried=1)


def _wp_unk_string(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    pieces = _wp(word, vocab, unk_token, max_chars_per_word)
    return unk_token if pieces == [unk_token] else pieces


def _wp_limit_inclusive(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    if len(word) >= max_chars_per_word:
        return [unk_token]
    return _wp(word, vocab, unk_token, max_chars_per_word)


def _wp_no_limit(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    return _wp(word, vocab, unk_token, max_chars_per_word, limit=False)


def _wp_literal_unk(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    return _wp(word, vocab, "[UNK]", max_chars_per_word)


def _wp_from_right(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Greedy longest match from the end of the word: the longest suffix in the vocabulary
    first, then the longest piece before it."""
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces, end = [], len(word)
    while end > 0:
        starts = [k for k in range(end) if ("##" if k else "") + word[k:end] in vocab]
        if not starts:
            return [unk_token]
        pieces.insert(0, ("##" if starts[0] else "") + word[starts[0] : end])
        end = starts[0]
    return pieces


# A small vocabulary whose pieces tell the mistakes apart: a shortest match, a piece that exists
# only without (or only with) '##', and words with an uncovered character.
TOY_VOCAB = frozenset(
    "[PAD] [UNK] [CLS] [SEP] [MASK] un una aff able play ##play ##ing ##s ##ed ing s a b c x "
    "##a ##b ##c ##un ##aff ##affa ##ble ##able ##i ##n ##g token ##izer ##ize ##r ##iz ##e "
    "the th ##e ##he cat ##cat ##x low ##er ##est lowe ##st new ##w".split()
)
_TOY_WORDS = [
    "unaffable",  # un ##aff ##able (shortest: un ##aff ##a ##b ...)
    "playing",  # play ##ing
    "tokenizer",  # token ##izer
    "unplayed",  # un ##play ##ed
    "lowest",  # lowe ##st (longest first), not low ##est
    "xyz",  # y has no piece: [UNK]
    "playingq",  # q has no piece at the end: [UNK], not play ##ing [UNK]
    "the",
    "a",
    "ing",  # 'ing' exists as a first piece
    "cats",
    "abc",
]


def _random_vocab_case(seed: int):
    """A random alphabet, a random vocabulary of pieces and words made partly from them."""
    g = torch.Generator().manual_seed(seed)
    letters = "abcdefgh"

    def rand_word(n):
        idx = torch.randint(len(letters), (n,), generator=g).tolist()
        return "".join(letters[i] for i in idx)

    vocab = {"[UNK]"}
    vocab |= {rand_word(int(torch.randint(1, 5, (1,), generator=g))) for _ in range(40)}
    vocab |= {"##" + rand_word(int(torch.randint(1, 4, (1,), generator=g))) for _ in range(40)}
    vocab |= {"##" + c for c in letters[:6]}  # most letters can continue a word
    words = [rand_word(int(torch.randint(1, 12, (1,), generator=g))) for _ in range(60)]
    return frozenset(vocab), words


def _wordpiece_cases(thorough: bool) -> list[tuple[str, frozenset, dict]]:
    cases = [(w, TOY_VOCAB, {}) for w in _TOY_WORDS]
    cases.append(("ab" * 60, TOY_VOCAB, {}))  # 120 characters: [UNK] (limit 100)
    # the arguments the task names are used, not hard-coded
    cases += [("qab", TOY_VOCAB, {"unk_token": "<unk>"})]
    cases += [("ab" * 5, TOY_VOCAB, {"max_chars_per_word": 6})]
    # the stated limit, visible too: a word of exactly max_chars_per_word characters is split
    cases += [("abcab", TOY_VOCAB, {"max_chars_per_word": 5})]
    if thorough:
        for seed in (7000, 7001, 7002):
            vocab, words = _random_vocab_case(seed)
            cases += [(w, vocab, {}) for w in words]
    return cases


def _optional_forbidden() -> tuple[str, ...]:
    """Tokenizers from other libraries, switched off only when already imported (importing
    transformers to patch it would take seconds)."""
    names = []
    if "transformers" in sys.modules:
        names += [
            "transformers.BertTokenizer",
            "transformers.BertTokenizerFast",
            "transformers.models.bert.tokenization_bert.BertTokenizer",
            "transformers.models.bert.tokenization_bert.WordpieceTokenizer",  # transformers < 5
        ]
    if "tokenizers" in sys.modules:
        names += ["tokenizers.models.WordPiece", "tokenizers.decoders.WordPiece"]
    return tuple(names)


def _wordpiece_trial(impl, case: tuple[str, frozenset, dict], _setting, call) -> Finding | None:
    """One word: impl's pieces must equal the reference's (evidence: impl's pieces)."""
    word, vocab, kwargs = case
    args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    text = f"wordpiece_tokenize({word!r}, vocab{', ' + args if args else ''})"
    expected = wordpiece_tokenize.reference(word, vocab, **kwargs)

    def tokenize():  # other libraries' tokenizers are switched off too, when already imported
        with forbid(_optional_forbidden(), impl, "wordpiece_tokenize"):
            return impl(word, vocab, **kwargs)

    got = call(tokenize, text)
    if isinstance(got, tuple):
        got = list(got)
    if got == expected:
        return None
    if not isinstance(got, list) or not all(isinstance(t, str) for t in got):
        problem = f"the result should be a list of str but is {got!r}"
    else:
        problem = f"expected {expected!r}, got {got!r}"
    shown = f"\n  vocab: {sorted(vocab)}" if len(vocab) <= 80 else ""
    return Finding(f"{text}: {problem}{shown}", evidence=got)


wordpiece_tokenize = Exercise(
    name="wordpiece_tokenize",
    lesson="09",
    module="bert",
    reference=_bert.wordpiece_tokenize,
    forbidden=(
        "transformer_lab.bert.wordpiece_tokenize",
        "transformer_lab.bert.WordPieceTokenizer",
        "transformer_lab.WordPieceTokenizer",
        "transformer_lab.wordpiece_tokenize",
        "transformer_lab.bert_tokenizer.WordPieceTokenizer",  # where the class is defined
    ),
    mistakes=[
        Mistake(
            "shortest-match",
            "you take the shortest match: at each position take the LONGEST piece in the "
            "vocabulary (try the end of the word first, then shorten).",
            _wp_shortest,
        ),
        Mistake(
            "no-prefix",
            "pieces after the first need the '##' prefix: look up '##' + word[start:end] when "
            "start > 0 (and return it with the prefix).",
            _wp_no_prefix,
        ),
        Mistake(
            "partial-unk",
            "when part of a word has no piece, the WHOLE word becomes [unk_token]: return "
            "[unk_token] alone, not the pieces found so far plus [UNK].",
            _wp_partial_unk,
        ),
        Mistake(
            "prefix-on-first",
            "the first piece carries no '##': only pieces that continue a word (start > 0) "
            "are looked up with the prefix.",
            _wp_prefix_first,
        ),
        Mistake(
            "no-length-limit",
            "words longer than max_chars_per_word must become [unk_token] without being cut "
            "into pieces.",
            _wp_no_limit,
        ),
        Mistake(
            "limit-inclusive",
            "a word of exactly max_chars_per_word characters became [unk_token]: only a word "
            "LONGER than the limit does (len(word) > max_chars_per_word, not >=).",
            _wp_limit_inclusive,
        ),
        Mistake(
            "unk-per-character",
            "when no piece starts at a position, the WHOLE word becomes [unk_token]: do not "
            "put an [UNK] for that character and go on.",
            _wp_unk_each,
        ),
        Mistake(
            "no-single-character",
            "a piece of one character is never tried: the candidate ends run from len(word) "
            "down to start + 1 included (range(len(word), start, -1)).",
            _wp_no_single,
        ),
        Mistake(
            "bare-unk",
            "the result is always a list of pieces, an unknown word's too ([unk_token]): return "
            "the list itself, not the bare string unk_token or the pieces joined into a string.",
            _wp_unk_string,
        ),
        Mistake(
            "literal-unk",
            "an unknown word becomes the literal '[UNK]': return [unk_token], the token the "
            "caller passed ('[UNK]' is only its default).",
            _wp_literal_unk,
        ),
        Mistake(
            "from-right",
            "the word is cut from its end (the longest suffix first): WordPiece is greedy from "
            "the START, the longest piece beginning at `start`, then the longest '##' piece "
            "after it.",
            _wp_from_right,
        ),
        Mistake(
            "rest-never-tried",
            "the longest candidate, the whole rest of the word word[start:], is never tried: "
            "a slice stops before its end, so the ends run from len(word) down, "
            "range(len(word), start, -1), not from len(word) - 1.",
            _wp_no_whole_rest,
        ),
    ],
    driver=TrialDriver(_wordpiece_cases, _wordpiece_trial, covered="every word, exact pieces"),
    doc="wordpiece_tokenize(word, vocab, unk_token='[UNK]', max_chars_per_word=100) -> list of pieces (greedy longest-match-first, '##' on continuations)",
)
