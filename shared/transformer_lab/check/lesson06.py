"""Checks for lesson 06 — masking: `causal_mask`, `padding_mask` and the practice `alpha_22`."""

from __future__ import annotations

import math

import torch

from .. import masking as _masking
from .answer_drivers import Call, ExactDriver, exactly_equal
from .answers import unanswered
from .exercise import CheckFailed, Exercise, Mistake, fail, practice

__all__ = ["alpha_22", "causal_mask", "padding_mask"]

# ==============================================================================================
# Lesson 06 — masking. Masks are exact (bool), so these checks compare exactly: the dtype, the
# shape and every entry. The catalogue's mutants are matched on all three.


def _describe(expected: torch.Tensor, got) -> str:
    """One sentence saying how `got` differs from the bool mask `expected`."""
    if not isinstance(got, torch.Tensor):
        return f"the result should be a bool tensor but is a {type(got).__name__}"
    if got.dtype != torch.bool:
        return (
            f"the result has dtype {got.dtype} but should have dtype torch.bool (True = may attend)"
        )
    if tuple(got.shape) != tuple(expected.shape):
        return (
            f"the result has shape {tuple(got.shape)} but should have shape {tuple(expected.shape)}"
        )
    where = (got != expected).nonzero()[0].tolist()
    return (
        f"the result differs at index {tuple(where)}: got {got[tuple(where)].item()}, "
        f"expected {expected[tuple(where)].item()} ({int((got != expected).sum())} of "
        f"{got.numel()} entries differ)"
    )


def _identical(got, expected) -> bool:
    """Exactly the mask expected: a tensor of the same dtype, shape, device type and entries."""
    return isinstance(expected, torch.Tensor) and exactly_equal(got, expected)


_COVERED = "exact dtype, shape and values"


# ----------------------------------------------------------------------------------------------
# causal_mask(n)


def _causal_strict(n):
    return torch.ones(n, n, dtype=torch.bool).tril(-1)


def _causal_upper(n):
    return torch.ones(n, n, dtype=torch.bool).triu()


def _causal_float(n):
    return torch.ones(n, n).tril()


def _causal_inverted(n):
    return ~torch.ones(n, n, dtype=torch.bool).tril()


def _causal_additive(n):
    return torch.full((n, n), float("-inf")).triu(1)


def _causal_next_key(n):
    return torch.ones(n, n, dtype=torch.bool).tril(1)


def _causal_no_new_axes(n):
    """Query and key positions compared entry by entry, not every pair: an (n,) vector."""
    positions = torch.arange(n)
    return positions.ge(positions)


def _causal_from_table(n, size=64):
    """Cut from a fixed size × size table built once (nanoGPT's buffer): too small past `size`."""
    return torch.ones(size, size, dtype=torch.bool).tril()[:n, :n]


_FIXED_TABLE = Mistake(
    "fixed-size-table",
    "your mask is cut from a table of a fixed size, so a longer sequence gets a mask too small "
    "for it: causal_mask(n) must work for any n, so build the (n, n) mask from n itself, "
    "torch.ones(n, n, dtype=torch.bool).tril().",
    _causal_from_table,
)


def _causal_cases(thorough: bool) -> list[Call]:
    # n = 1 last: there several mutants agree, so an earlier size names the mistake. Sizes past
    # 64 (and past 1024 when thorough): "any n", not one below a fixed table's size.
    sizes = [3, 5, 100, 1] if not thorough else [2, 3, 4, 5, 7, 8, 16, 31, 64, 100, 1100, 0, 1]
    return [Call((), {"n": n}, label=f"causal_mask({n})") for n in sizes]


def _same_size_past(ex, student_fn, n: int) -> int | None:
    """The size m < n of the square mask the student returns for both n and 2n (a table of a
    fixed size), when it is the top-left corner of the right mask; else None."""
    sizes = set()
    for length in (n, 2 * n):
        try:
            got = ex.run_student(student_fn, lambda length=length: student_fn(n=length))
        except Exception:
            return None
        if not (isinstance(got, torch.Tensor) and got.dim() == 2 and got.dtype == torch.bool):
            return None
        m = got.shape[0]
        right = torch.ones(m, m, dtype=torch.bool).tril()
        if not (got.shape == (m, m) and m < n and torch.equal(got.cpu(), right)):
            return None
        sizes.add(m)
    return sizes.pop() if len(sizes) == 1 else None


class _CausalDriver(ExactDriver):
    """The exact check; a mask too small for n, the same one for 2n, is named as a table of a
    fixed size, whatever that size."""

    def run_case(self, ex, student_fn, call: Call, index, setting) -> None:
        unnamed = None
        try:
            super().run_case(ex, student_fn, call, index, setting)
        except CheckFailed as failed:
            if failed.mistake is not None:
                raise
            unnamed = failed
        if unnamed is None:
            return
        if _same_size_past(ex, student_fn, call.kwargs["n"]) is not None:
            fail(ex, unnamed.problem, unnamed.case, _FIXED_TABLE)
        raise unnamed


causal_mask = Exercise(
    name="causal_mask",
    lesson="06",
    module="masking",
    reference=_masking.causal_mask,
    forbidden=(
        "transformer_lab.masking.causal_mask",
        "transformer_lab.causal_mask",
        "torch.nn.Transformer.generate_square_subsequent_mask",
        "torch.nn.modules.transformer._generate_square_subsequent_mask",
    ),
    mistakes=[
        Mistake(
            "diagonal-excluded",
            "the diagonal is excluded: position i may attend to itself too, so use "
            "tril() (diagonal=0), not tril(-1).",
            _causal_strict,
        ),
        Mistake(
            "upper-triangle",
            "your mask lets each position see the future (upper triangle): True belongs on "
            "and below the diagonal (tril).",
            _causal_upper,
        ),
        Mistake(
            "float-mask",
            "the mask is a float tensor: the course's masks are bool (dtype=torch.bool), "
            "True = may attend.",
            _causal_float,
        ),
        Mistake(
            "mask-inverted",
            "the mask is inverted: True means 'may attend', so the past and the diagonal "
            "must be True and the future False.",
            _causal_inverted,
        ),
        Mistake(
            "additive-mask",
            "you returned an additive float mask (0 / -inf); the contract asks for a bool "
            "mask, True = may attend.",
            _causal_additive,
        ),
        Mistake(
            "next-key-too",
            "tril(diagonal=1) lets each query see the next key too, one step into the future: "
            "use tril() with diagonal=0, so that position i sees keys 0..i.",
            _causal_next_key,
        ),
        Mistake(
            "no-new-axes",
            "the query and key positions are compared entry by entry (two (n,) aranges), which "
            "gives n values, not an (n, n) table: give them new axes so that every query meets "
            "every key, torch.arange(n)[:, None] >= torch.arange(n)[None, :].",
            _causal_no_new_axes,
        ),
        _FIXED_TABLE,
    ],
    driver=_CausalDriver(_causal_cases, covered=_COVERED, equal=_identical, describe=_describe),
    doc="causal_mask(n) -> bool (n, n), True on and below the diagonal",
)


# ----------------------------------------------------------------------------------------------
# padding_mask(tokens, pad_id)


def _padding_flat(tokens, pad_id):
    return tokens != pad_id


def _padding_from_first_pad(tokens, pad_id):
    """Everything from the first pad on is masked: right only for right-padded rows."""
    seen_pad = (tokens == pad_id).long().cummax(dim=-1).values.bool()
    return (~seen_pad)[:, None, None, :]


def _padding_three_axes(tokens, pad_id):
    return (tokens != pad_id)[:, None, :]


def _padding_query_axis(tokens, pad_id):
    return (tokens != pad_id)[:, None, :, None]


def _padding_inverted(tokens, pad_id):
    return (tokens == pad_id)[:, None, None, :]


def _padding_pad_zero(tokens, pad_id):
    return (tokens != 0)[:, None, None, :]


def _padding_zero_too(tokens, pad_id):
    return (tokens.bool() & (tokens != pad_id))[:, None, None, :]


def _padding_above_pad(tokens, pad_id):
    """tokens > pad_id: right only while the padding id is the smallest id in use."""
    return (tokens > pad_id)[:, None, None, :]


def _padding_int(tokens, pad_id):
    return (tokens != pad_id).long()[:, None, None, :]


def _padding_in_place(tokens, pad_id):
    """The right mask, written into the caller's tokens first: tokens becomes 0/1."""
    keep = tokens != pad_id
    tokens.copy_(keep)
    return keep[:, None, None, :]


_IN_PLACE = Mistake(
    "tokens-changed",
    "the tokens you were given are changed in place: build the mask as a new tensor, "
    "tokens != pad_id, and leave tokens as they were (the caller still needs them).",
    _padding_in_place,
)


def _token_batch(
    seed: int, B: int, L: int, pad_id: int, vocab: int = 12, left: bool = False
) -> torch.Tensor:
    """Random ids in [0, vocab) other than pad_id, each row right-padded (or, `left`, left-padded
    as batched generation does) by a random amount."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (B, L), generator=g)
    tokens[tokens == pad_id] = (pad_id + 1) % vocab
    for b in range(B):
        n_pad = int(torch.randint(0, L, (1,), generator=g))
        if b == 0 and L > 1:
            n_pad = max(n_pad, 1)  # at least one padded position in every batch
        if n_pad:
            tokens[b, L - n_pad :] = pad_id
    return tokens.flip(1) if left else tokens


def _padding_cases(thorough: bool) -> list[Call]:
    grid = [(2, 5, 0, False), (3, 4, 1, False), (2, 5, 0, True)]  # the last one left-padded
    if thorough:
        grid += [(1, 6, 3, False), (4, 7, 2, False), (2, 9, 11, False), (5, 3, 0, False)]
        grid += [(3, 16, 7, False), (1, 1, 0, False), (4, 7, 2, True)]
    calls = []
    for i, (B, L, pad_id, left) in enumerate(grid):
        tokens = _token_batch(100 + i, B, L, pad_id, left=left)
        label = (
            f"padding_mask(tokens {tuple(tokens.shape)}, pad_id={pad_id}), tokens={tokens.tolist()}"
            + (" (left-padded)" if left else "")
        )
        calls.append(Call((), {"tokens": tokens, "pad_id": pad_id}, label=label))
    # the stated rule, visible too: only pad_id is padding, a real token 0 is not
    tokens = _token_batch(99, 2, 6, pad_id=2)
    tokens[:, 0] = 0
    label = f"padding_mask(tokens (2, 6), pad_id=2), tokens={tokens.tolist()} (real tokens 0)"
    calls.append(Call((), {"tokens": tokens, "pad_id": 2}, label=label))
    return calls


padding_mask = Exercise(
    name="padding_mask",
    lesson="06",
    module="masking",
    reference=_masking.padding_mask,
    forbidden=("transformer_lab.masking.padding_mask", "transformer_lab.padding_mask"),
    mistakes=[
        Mistake(
            "from-first-pad",
            "everything from the first pad on is masked: that holds only for right padding. Mask "
            "exactly the positions whose token is pad_id (tokens != pad_id): a left-padded row "
            "starts with its pads.",
            _padding_from_first_pad,
        ),
        Mistake(
            "flat-shape",
            "the mask has shape (B, L): add two singleton axes, (B, 1, 1, L), so it "
            "broadcasts over the heads and the queries.",
            _padding_flat,
        ),
        Mistake(
            "three-axes",
            "the mask has shape (B, 1, L): it needs two singleton axes, (B, 1, 1, L). Against "
            "scores of shape (B, h, L_q, L_k), a (B, 1, L) mask lines B up with the heads.",
            _padding_three_axes,
        ),
        Mistake(
            "query-axis",
            "the padding runs along the query axis, (B, 1, L, 1): padding is about keys, "
            "so the L axis must be the last one, (B, 1, 1, L).",
            _padding_query_axis,
        ),
        Mistake(
            "mask-inverted",
            "the mask is inverted: True means 'may attend', so real tokens are True and "
            "padding is False (tokens != pad_id).",
            _padding_inverted,
        ),
        Mistake(
            "pad_id-zero",
            "pad_id is hard-coded to 0: compare with the pad_id argument (BERT's is 0, "
            "GPT-2's and BART's are not).",
            _padding_pad_zero,
        ),
        Mistake(
            "zero-is-padding-too",
            "a real token with id 0 is masked too: tokens.bool() (or tokens > 0) reads id 0 as "
            "padding whatever pad_id is; compare with pad_id only (tokens != pad_id).",
            _padding_zero_too,
        ),
        Mistake(
            "int-mask",
            "the mask holds integers: keep the bool result of the comparison (no .long() / "
            ".int() / .float()).",
            _padding_int,
        ),
        _IN_PLACE,
        Mistake(
            "above-pad",
            "tokens > pad_id masks every id below pad_id too: the padding id need not be the "
            "smallest, so compare for (in)equality, tokens != pad_id.",
            _padding_above_pad,
        ),
    ],
    driver=ExactDriver(
        _padding_cases, covered=_COVERED, equal=_identical, describe=_describe, in_place=_IN_PLACE
    ),
    doc="padding_mask(tokens (B, L), pad_id) -> bool (B, 1, 1, L), False at padding",
)


# ----------------------------------------------------------------------------------------------
# Practice question: α_22 in the lecture's 4 × 4 example (row 2, column 2, counting from 1 as
# the lecture does). Row 2 of the scores is [1, 1, -1, 0]; the causal mask keeps columns 1 and 2.

SCORES = [
    [1.0, 0.0, -1.0, -1.0],
    [1.0, 1.0, -1.0, 0.0],
    [0.0, 1.0, 1.0, -1.0],
    [-1.0, -1.0, 2.0, 1.0],
]

_E = math.e
# A practice answer is one number, not an exercise: each catalogued mistake is the wrong value it
# gives (matched to within 1e-3), named through `fail` like every other mistake.
_ALPHA_22_MISTAKES = [
    (
        0.0,
        Mistake(
            "diagonal-masked",
            "α_22 is the weight of position 2 on itself: the causal mask keeps the diagonal "
            "(True on and below it), so that weight is not masked to 0.",
        ),
    ),
    (
        _E / (2 * _E + 1 / _E + 1),
        Mistake(
            "no-mask",
            "that is the weight without the mask (or with the future zeroed after the softmax): "
            "the scores of columns 3 and 4 lie in the future, are set to -inf before the softmax "
            "and drop out of the sum.",
        ),
    ),
    (
        _E / (2 * _E + 2),
        Mistake(
            "masked-to-zero",
            "the future scores were set to 0, not to -inf: a score of 0 still gets weight "
            "e^0 = 1 in the softmax; masked scores must be -inf so that their weight is 0.",
        ),
    ),
    (
        _E / (1 + 2 * _E),
        Mistake(
            "counted-from-0",
            "that is row 3, column 3 (counting from 0): α_22 counts from 1, the second query "
            "and the second key.",
        ),
    ),
    (
        _E / (_E + 1 / _E + 1),
        Mistake(
            "mask-transposed",
            "the mask is transposed: position 2 keeps keys 2, 3, 4 (the future) instead of keys "
            "1 and 2 (itself and the past); causal_mask is True on and below the diagonal.",
        ),
    ),
    (
        # softmax down column 2 over the queries that may see key 2 (rows 2-4): e / (e + e + e^-1)
        _E / (2 * _E + 1 / _E),
        Mistake(
            "softmax-down-column",
            "that is a softmax down column 2 (over the queries that may see key 2): the softmax "
            "runs along row 2, over the keys that query 2 may see, dim=-1.",
        ),
    ),
    (
        # the right weight, e / (e + e) = 1/2, written as a percentage
        100 * _E / (2 * _E),
        Mistake(
            "percentage",
            "that is the weight as a percentage: attention weights are fractions between 0 and 1 "
            "that sum to 1 along a row, so give it as one (0.25, not 25).",
        ),
    ),
    (
        1.0,
        Mistake(
            "all-on-diagonal",
            "position 2 sees two keys, columns 1 and 2, with the same score 1: the softmax shares "
            "the weight between them, it does not give it all to the diagonal.",
        ),
    ),
    (
        1 / 3,
        Mistake(
            "uniform-three-keys",
            "1/3 shares the weight equally among three keys, as if the scores did not matter "
            "and the rows were counted from 0: α_22 is in row 2 counting from 1, whose query may "
            "see keys 1 and 2 only, and the softmax of their scores (both 1) gives each of them "
            "1/2.",
        ),
    ),
    (
        1 / 4,
        Mistake(
            "uniform-four-keys",
            "1/4 shares the weight equally among all four keys, as if there were neither a mask "
            "nor scores: the causal mask leaves query 2 keys 1 and 2 only, and the softmax of "
            "their scores (both 1) gives each of them 1/2.",
        ),
    ),
]


def _alpha_22_expected() -> float:
    scores = torch.tensor(SCORES, dtype=torch.float64)
    masked = scores.masked_fill(~_masking.causal_mask(4), float("-inf"))
    return torch.softmax(masked, dim=-1)[1, 1].item()  # row 2, column 2 counting from 1


@practice
def alpha_22(value, thorough: bool = False) -> None:
    """Check the practice answer α_22 (a number, to within 1e-3)."""
    if value is ...:
        raise unanswered("alpha_22")
    if value is None:
        fail("alpha_22", "replace the None with your answer, a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        fail("alpha_22", f"the answer should be a number, got {type(value).__name__}")
    if abs(number - _alpha_22_expected()) <= 1e-3:
        print(f"✓ alpha_22: {number:g} is right")
        return None
    mistake = next((m for wrong, m in _ALPHA_22_MISTAKES if abs(number - wrong) <= 1e-3), None)
    fail(
        "alpha_22",
        f"{number:g} is not the weight α_22 (row 2, column 2, counting from 1)",
        mistake=mistake,
    )
