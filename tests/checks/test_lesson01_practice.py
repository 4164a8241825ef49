"""Lesson 01's practice questions: the relative clause (counted), the drop-in question (letters) and
Transformer vs LSTM (one letter).

Every wrong answer fails, and each catalogued one is named: all 31 letter sets but the right one,
and the off-by-one counts a student makes."""

from __future__ import annotations

import itertools

import pytest
import torch

from transformer_lab import check
from transformer_lab.check import lesson01, lesson01_lstm
from transformer_lab.check.answers import letters

RIGHT_JOHN = {"answer": "B", "rnn_steps": 11, "attention_layers": 1}


def _named(call, *args) -> check.CheckFailed:
    with pytest.raises(check.CheckFailed) as info:
        call(*args)
    return info.value


def test_the_counts_come_from_the_sentence():
    assert lesson01.john_distances() == {"rnn_steps": 11, "attention_layers": 1}
    assert lesson01.john_distances("John, aged 40, is visiting Rome.")["rnn_steps"] == 4


@pytest.mark.parametrize("thorough", [False, True])
def test_the_right_answers_pass(thorough, capsys):
    assert check.practice_john(dict(RIGHT_JOHN, answer="(b)"), thorough=thorough) is None
    assert check.practice_drop_in("(A), (c), E", thorough=thorough) is None
    assert check.practice_drop_in("ECA", thorough=thorough) is None
    out = capsys.readouterr().out
    assert "✓ practice_john" in out and "✓ practice_drop_in" in out


@pytest.mark.parametrize(
    "change,key",
    [
        ({"answer": "A"}, "nearest-place"),
        ({"rnn_steps": 12}, "counted-both-ends"),
        ({"rnn_steps": 10}, "words-between"),
        ({"rnn_steps": 16}, "whole-sentence"),
        ({"attention_layers": 11}, "attention-is-sequential"),
        ({"rnn_steps": 9}, "clause-only"),
        ({"attention_layers": 0}, "attention-zero-layers"),
    ],
)
def test_each_catalogued_john_mistake_is_named(change, key):
    failure = _named(check.practice_john, dict(RIGHT_JOHN, **change))
    assert failure.mistake == lesson01._john_mistakes()[key].sentence


@pytest.mark.parametrize("change", [{"rnn_steps": 5}, {"attention_layers": -1}])
def test_other_wrong_counts_fail_without_a_guess(change):
    failure = _named(check.practice_john, dict(RIGHT_JOHN, **change))
    assert failure.mistake is None


@pytest.mark.parametrize(
    "value,message",
    [
        (None, "replace the"),
        ("B", "a dict"),
        ({"answer": "B", "rnn_steps": 11}, "a dict"),
        (dict(RIGHT_JOHN, rnn_steps=11.5), "whole number"),
        (dict(RIGHT_JOHN, attention_layers=True), "whole number"),
        (dict(RIGHT_JOHN, answer="C"), "letters A, B"),
    ],
)
def test_bad_forms_of_the_john_answer_say_what_to_write(value, message):
    assert message in str(_named(check.practice_john, value))


WRONG_SETS = [
    "".join(s)
    for n in range(1, 6)
    for s in itertools.combinations("ABCDE", n)
    if "".join(s) != lesson01.DROP_IN_RIGHT
]


@pytest.mark.parametrize("answer", WRONG_SETS)
def test_every_other_letter_set_fails_and_names_a_wrong_letter(answer):
    failure = _named(check.practice_drop_in, answer)
    mistakes = {m.sentence: letter for letter, m in lesson01._drop_in_mistakes().items()}
    letter = mistakes[failure.mistake]
    assert (letter in answer) != (letter in lesson01.DROP_IN_RIGHT)


def test_a_subset_of_the_barriers_is_not_enough():
    """The weakened check that accepts any subset of the right letters is caught here."""
    for partial in ("A", "AC", "CE", "AE"):
        assert "is missing" in _named(check.practice_drop_in, partial).problem


@pytest.mark.parametrize(
    "value,many,message",
    [
        (None, True, "replace the None"),
        (3, True, "in quotes"),
        ("and", True, "made of the letters"),
        ("", True, "made of the letters"),
        ("AB", False, "exactly one"),
        ("A B", False, "exactly one"),
    ],
)
def test_letters_say_what_to_write(value, many, message):
    with pytest.raises(check.CheckFailed, match=message):
        letters("q", value, "ABCDE", many=many)


@pytest.mark.parametrize("call", [check.practice_john, check.practice_drop_in])
def test_the_released_answer_is_not_written_yet_in_one_line(call):
    """The released cell leaves the answer at ...: one line, as an untouched stub gives."""
    with pytest.raises(check.NotWrittenYet, match="is not written yet: set it in the cell above"):
        call(...)


def test_letters_reads_the_usual_ways_of_writing_them():
    assert letters("q", "(c)", "ABCD") == "C"
    assert letters("q", "e, a; C", "ABCDE", many=True) == "ACE"
    assert letters("q", "AAC", "ABCDE", many=True) == "AC"


# ---------------------------------------------------------------------------------------------
# Practice 3: Transformer vs LSTM (one letter; check/lesson01_lstm.py).


def test_the_lstm_question_takes_b_in_any_usual_form(capsys):
    for answer in ("B", "b", "(b)", " (B) "):
        assert check.practice_lstm(answer) is None
        assert check.practice_lstm(answer, thorough=True) is None
    assert "✓ practice_lstm" in capsys.readouterr().out


@pytest.mark.parametrize("letter", ["A", "C", "D"])
def test_each_wrong_lstm_letter_is_named_with_its_reason(letter):
    failure = _named(check.practice_lstm, letter)
    assert failure.problem == f"({letter}) is not the correct statement"
    assert failure.mistake == lesson01_lstm._lstm_mistakes()[letter].sentence


@pytest.mark.parametrize(
    "value,message",
    [(None, "replace the None"), (2, "in quotes"), ("BC", "exactly one"), ("E", "letters A, B")],
)
def test_bad_forms_of_the_lstm_answer_say_what_to_write(value, message):
    assert message in str(_named(check.practice_lstm, value))


def test_the_lstm_answer_is_not_written_yet_in_one_line():
    with pytest.raises(check.NotWrittenYet, match="is not written yet"):
        check.practice_lstm(...)


def test_the_weight_counts_the_lstm_sentences_quote_are_pytorchs():
    """(C)'s reason: 8·d² weights in an LSTM layer, 12·d² in a Transformer layer (d_ff = 4·d)."""
    d = 16
    lstm = torch.nn.LSTM(d, d)
    layer = torch.nn.TransformerEncoderLayer(d, 4, dim_feedforward=4 * d)
    matrices = [p for name, p in layer.named_parameters() if p.dim() == 2]
    assert lstm.weight_ih_l0.numel() + lstm.weight_hh_l0.numel() == 8 * d * d
    assert sum(p.numel() for p in matrices) == 12 * d * d
    assert f"{12 * 512 * 512:,}" in lesson01_lstm._lstm_mistakes()["C"].sentence
