"""Check fixes for lessons 08-13 that the third held-out set found (benchmarks/heldout3, issue 25),
each kept here with the held-out implementation that found it and, where one applies, a mutant:
the check as it was, which let the implementation through.

Visible passes that broke a rule the exercise text states, now failing the visible check with a
sentence that names them:

- shift_targets built int64 targets whatever idx's dtype (the visible cases were all int64);
- sample_next reseeded the global generator from generator.initial_seed(): every call the same
  draws (two calls with one generator must differ);
- next_token_probs read T = 0 as a tiny T, which differs from the one-hot row only on tied maxima;
- text_infilling returned the input itself, not a copy, when nothing is removed;
- sentence_permutation dropped a lone eos_id (an empty sentence; only the hidden check had one);
- document_rotation replaced generator=None by torch.Generator(), whose seed never changes;
- patchify raised a ValueError that does not name the sizes.

Misleading names fixed: `if self.k:` in KVCache (was "joined along the wrong axis": an error is
now matched by its message, not its type alone), k = round(u·(L−1)) (was "k is drawn from 0..L"),
tokens[:k] then tokens[k:] (was "k must be drawn at random"), lm_loss changing its targets in place
(an autograd error from the reference's graph; now FunctionDriver gives the student a copy of each
integer input and names the change).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from transformer_lab import check
from transformer_lab.check import answer_drivers, drivers, lesson08_kvcache, lesson10_rotation

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from heldout3 import lesson08, lesson10, lesson11  # noqa: E402


@pytest.fixture(autouse=True)
def _no_saving(monkeypatch, tmp_path):
    monkeypatch.setenv("TRANSFORMER_LAB_STUDENT_DIR", str(tmp_path))


def key_of(check_fn, impl):
    with pytest.raises(check.CheckFailed) as info:
        check_fn(impl)
    return info.value.mistake_key


@pytest.mark.parametrize(
    "name, impl, key",
    [
        ("shift_targets", lesson08.shift_default_dtype, "int64-always"),
        ("sample_next", lesson08.sample_reseed_global, "reseeds"),
        ("next_token_probs", lesson08.ntp_tiny_temperature, "tiny-temperature"),
        ("text_infilling", lesson10.infill_returns_input, "returns-input"),
        ("sentence_permutation", lesson10.perm_lone_eos_dropped, "lone-eos-dropped"),
        ("document_rotation", lesson10.rotate_fresh_generator, "fresh-generator"),
        ("patchify", lesson11.patchify_vague_error, "vague-error"),
    ],
)
def test_visible_passes_now_fail_visibly_and_are_named(name, impl, key):
    assert key_of(getattr(check, name), impl) == key


def test_mutant_shift_cases_all_int64_let_int64_targets_through(monkeypatch):
    from transformer_lab.check import lesson08 as l08

    real = l08._shift_calls
    monkeypatch.setattr(
        l08.shift_targets.driver,
        "_cases",
        lambda thorough: [c for c in real(thorough) if c[1]["idx"].dtype == torch.int64],
    )
    assert check.shift_targets(lesson08.shift_default_dtype) is None


def test_mutant_ids_moved_without_a_copy_crash_the_reference_on_in_place_targets(monkeypatch):
    monkeypatch.setattr(drivers, "own_copies", lambda inputs: inputs)
    monkeypatch.setattr(drivers, "require_unchanged", lambda *args: None)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        check.lm_loss(lesson08.lm_in_place_targets)


def test_in_place_targets_are_named():
    assert key_of(check.lm_loss, lesson08.lm_in_place_targets) == "in-place-input"


def test_mutant_kv_errors_matched_by_type_name_tensor_truthiness_as_wrong_axis(monkeypatch):
    assert key_of(check.KVCache, lesson08.KVTensorTruthiness) == "tensor-truth"
    real = lesson08_kvcache._kv_entry_equal

    def by_type(a, b, dtype, device):
        if a[0] == b[0] == "error":
            return a[1].split(":")[0] == b[1].split(":")[0]
        return real(a, b, dtype, device)

    monkeypatch.setattr(lesson08_kvcache, "_kv_entry_equal", by_type)
    assert key_of(check.KVCache, lesson08.KVTensorTruthiness) == "wrong-axis"


def test_rotation_names_rounded_and_joined_in_the_wrong_order():
    assert key_of(check.document_rotation, lesson10.rotate_rounded) == "rounded"
    assert key_of(check.document_rotation, lesson10.rotate_cat_order) == "cat-order"


def test_one_call_without_a_generator_cannot_tell_a_fresh_generator():
    """The check as it was made one generator=None call and asked for a rotation: a fresh
    torch.Generator() gives one. Ten calls all alike give it away (chance 12^-9 when right)."""
    doc = lesson10_rotation.distinct_doc(9, 12)
    out = lesson10.rotate_fresh_generator(doc)
    lesson10_rotation._rotation_offset(doc.tolist(), out.tolist(), "one call")  # no Broken
    again = {tuple(lesson10.rotate_fresh_generator(doc).tolist()) for _ in range(10)}
    assert again == {tuple(out.tolist())}


def test_patchify_error_must_quote_the_sizes_but_any_wording_passes():
    # the mutant: a ValueError of any message accepted, as before
    outcome = answer_drivers.RaisesDriver(lambda t: []).outcome
    reject = answer_drivers.Reject("case", lambda impl: impl(), ("6", "4"))

    def vague():
        raise ValueError("bad image size")

    def quoted():
        raise ValueError("H=6 is not divisible by patch_size=4")

    assert outcome(vague, reject)[0] == "vague"
    assert outcome(quoted, reject)[0] == "ValueError"
    assert outcome(vague, answer_drivers.Reject("case", lambda impl: impl()))[0] == "ValueError"


@pytest.mark.parametrize(
    "name, impl, key",
    [
        ("shift_targets", lesson08.shift_in_place, "in-place"),
        ("shift_targets", lesson08.shift_last_is_pad, "last-not-ignored"),
        ("lm_loss", lesson08.lm_positive_ids_only, "positive-only"),
        ("sample_next", lesson08.sample_int32, "int32"),
        ("KVCache", lesson08.KVCountsAppends, "counts-appends"),
        ("KVCache", lesson08.KVCopyPaste, "values-from-keys"),
        ("text_infilling", lesson10.infill_int64, "fixed-dtype"),
        ("sentence_permutation", lesson10.perm_drops_tail, "tail-dropped"),
        ("document_rotation", lesson10.rotate_int64, "fixed-dtype"),
    ],
)
def test_common_unnamed_mistakes_are_named(name, impl, key):
    assert key_of(getattr(check, name), impl) == key
