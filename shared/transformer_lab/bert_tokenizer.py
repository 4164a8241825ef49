"""Lesson 09 — BERT's tokenizer: `WordPieceTokenizer`, what transformers.BertTokenizer does for
an uncased vocabulary (basic splitting, then greedy longest-match-first word pieces).

`transformer_lab.bert` re-exports it (``bert.WordPieceTokenizer``) and `bert.load_minilm` returns
one for all-MiniLM-L6-v2's vocabulary. The one step the students write themselves, cutting one
word into pieces, is `bert.wordpiece_tokenize`.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import torch

__all__ = ["WordPieceTokenizer"]


def _is_whitespace(ch: str) -> bool:
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def _is_control(ch: str) -> bool:
    return ch not in "\t\n\r" and unicodedata.category(ch).startswith("C")


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)  # all non-alphanumeric ASCII counts, e.g. "$" and "`"
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


class WordPieceTokenizer:
    """BERT's tokenizer: basic splitting, then greedy longest-match-first word pieces.

    1. clean: drop control characters, turn any whitespace into a space, space out CJK characters;
    2. lower-case and strip accents ("Café" -> "cafe");
    3. split on whitespace and make every punctuation character its own word;
    4. cut each word into the longest pieces found in the vocabulary, left to right; pieces after
       the first carry a "##" prefix ("playing" -> "play", "##ing"). A word that cannot be cut, or
       longer than 100 characters, becomes [UNK].
    Special tokens written in the text ("[MASK]") are kept whole.

    tokenize(text) -> list[str];  encode(text, pair=None) -> list[int] with [CLS] ... [SEP];
    __call__(texts, pairs=None, max_length=512) -> dict of (B, L) LongTensors input_ids,
    token_type_ids, attention_mask (padded with [PAD] on the right);  decode(ids) -> str.
    """

    SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

    def __init__(self, vocab, lower_case: bool = True, max_chars_per_word: int = 100):
        if isinstance(vocab, (str, Path)):
            vocab = Path(vocab).read_text(encoding="utf-8").splitlines()
        self.itos = [t.rstrip("\n") for t in vocab]
        self.stoi = {t: i for i, t in enumerate(self.itos)}
        missing = [t for t in self.SPECIALS if t not in self.stoi]
        if missing:
            raise ValueError(f"the vocabulary lacks the special tokens {missing}")
        self.lower_case, self.max_chars_per_word = lower_case, max_chars_per_word
        self.pad_id, self.unk_id = self.stoi["[PAD]"], self.stoi["[UNK]"]
        self.cls_id, self.sep_id = self.stoi["[CLS]"], self.stoi["[SEP]"]
        self.mask_id = self.stoi["[MASK]"]
        self.special_ids = [self.stoi[t] for t in self.SPECIALS]
        self._special_re = re.compile("(" + "|".join(re.escape(t) for t in self.SPECIALS) + ")")

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def _basic_words(self, text: str) -> list[str]:
        chars = []
        for ch in text:
            if ch in ("\x00", "\ufffd") or _is_control(ch):
                continue
            chars.append(" " if _is_whitespace(ch) else f" {ch} " if _is_cjk(ch) else ch)
        text = "".join(chars)
        if self.lower_case:
            text = text.lower()
            text = "".join(
                c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn"
            )
        words, current = [], []
        for ch in text:
            if _is_whitespace(ch) or _is_punctuation(ch):
                if current:
                    words.append("".join(current))
                    current = []
                if _is_punctuation(ch):
                    words.append(ch)
            else:
                current.append(ch)
        if current:
            words.append("".join(current))
        return words

    def _wordpieces(self, word: str) -> list[str]:
        if len(word) > self.max_chars_per_word:
            return ["[UNK]"]
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:  # the longest piece in the vocabulary that starts at `start`
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.stoi:
                    break
                end -= 1
            if end == start:
                return ["[UNK]"]  # some part of the word has no piece at all
            pieces.append(piece)
            start = end
        return pieces

    def tokenize(self, text: str) -> list[str]:
        tokens = []
        for part in self._special_re.split(text):
            if part in self.SPECIALS:
                tokens.append(part)
            else:
                for word in self._basic_words(part):
                    tokens.extend(self._wordpieces(word))
        return tokens

    def convert_tokens_to_ids(self, tokens: list[str]) -> list[int]:
        return [self.stoi.get(t, self.unk_id) for t in tokens]

    def encode(
        self, text: str, pair: str | None = None, max_length: int | None = None
    ) -> list[int]:
        """[CLS] text [SEP] (pair [SEP]); with max_length, the longer part is cut first."""
        a = self.convert_tokens_to_ids(self.tokenize(text))
        b = self.convert_tokens_to_ids(self.tokenize(pair)) if pair is not None else None
        if max_length is not None:
            budget = max_length - (3 if b is not None else 2)
            if budget < 0:
                raise ValueError(f"max_length={max_length} leaves no room for the special tokens")
            while len(a) + (len(b) if b is not None else 0) > budget:
                if b is not None and len(b) > len(a):
                    b.pop()
                else:
                    a.pop()
        ids = [self.cls_id, *a, self.sep_id]
        return ids + [*b, self.sep_id] if b is not None else ids

    def __call__(self, texts, pairs=None, max_length: int | None = 512) -> dict[str, torch.Tensor]:
        if isinstance(texts, str):
            texts = [texts]
            pairs = [pairs] if isinstance(pairs, str) else pairs
        if pairs is not None and len(pairs) != len(texts):
            raise ValueError(f"got {len(texts)} texts but {len(pairs)} pairs")
        pairs = pairs if pairs is not None else [None] * len(texts)
        rows, types = [], []
        for a, b in zip(texts, pairs):
            ids = self.encode(a, b, max_length)
            first = ids.index(self.sep_id) + 1  # segment 0 runs up to and including the first [SEP]
            rows.append(ids)
            types.append([0] * first + [1] * (len(ids) - first))
        L = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), L), self.pad_id, dtype=torch.long)
        token_type_ids = torch.zeros((len(rows), L), dtype=torch.long)
        attention_mask = torch.zeros((len(rows), L), dtype=torch.long)
        for i, (ids, tt) in enumerate(zip(rows, types)):
            input_ids[i, : len(ids)] = torch.tensor(ids)
            token_type_ids[i, : len(ids)] = torch.tensor(tt)
            attention_mask[i, : len(ids)] = 1
        return {
            "input_ids": input_ids,
            "token_type_ids": token_type_ids,
            "attention_mask": attention_mask,
        }

    def decode(self, ids, skip_special: bool = True) -> str:
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        words = []
        for i in ids:
            if skip_special and i in self.special_ids and i != self.unk_id:
                continue
            token = self.itos[i]
            if token.startswith("##") and words:
                words[-1] += token[2:]
            else:
                words.append(token)
        return " ".join(words)
