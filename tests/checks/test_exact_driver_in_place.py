"""One in-place mechanism for every driver: ExactDriver, like FunctionDriver, gives the student its
own copy of each integer or bool tensor and names a change made to it, generically (by the
argument's name, positional or keyword) or by the exercise's own sentence (`in_place=`).
Lesson 06's padding_mask used to run the student twice for this, in a check of its own."""

from __future__ import annotations

import pytest
import torch

from transformer_lab import check
from transformer_lab.check import answer_drivers, drivers
from transformer_lab.check import lesson06 as checks06

EX = check.EXERCISES["padding_mask"]


def padding_in_place(tokens, pad_id):
    """The right mask, but written into the caller's tokens first."""
    keep = tokens != pad_id
    tokens.copy_(keep)
    return keep[:, None, None, :]


def _positional(thorough):
    return [
        answer_drivers.Call((c.kwargs["tokens"], c.kwargs["pad_id"]), label=c.label)
        for c in checks06._padding_cases(thorough)
    ]


def _driver(cases=checks06._padding_cases, in_place=None):
    return answer_drivers.ExactDriver(
        cases, equal=checks06._identical, describe=checks06._describe, in_place=in_place
    )


@pytest.mark.parametrize("cases", [checks06._padding_cases, _positional], ids=["kw", "positional"])
def test_an_in_place_input_is_named_generically_by_its_parameter_name(cases):
    with pytest.raises(check.CheckFailed) as info:
        _driver(cases).run(EX, padding_in_place, False)
    assert info.value.mistake_key == "in-place-input"
    assert "your function changed its input `tokens` in place" in str(info.value)


def test_the_exercise_sentence_names_it_where_given():
    with pytest.raises(check.CheckFailed) as info:
        check.padding_mask(padding_in_place)
    assert info.value.mistake_key == "tokens-changed"


def test_the_callers_tokens_are_never_changed():
    calls = checks06._padding_cases(False)
    before = [c.kwargs["tokens"].clone() for c in calls]
    with pytest.raises(check.CheckFailed):
        _driver(lambda thorough: calls).run(EX, padding_in_place, False)
    assert all(torch.equal(c.kwargs["tokens"], b) for c, b in zip(calls, before))


def test_a_right_function_runs_once_per_case():
    runs = []

    def right(tokens, pad_id):
        runs.append(1)
        return (tokens != pad_id)[:, None, None, :]

    assert check.padding_mask(right) is None
    assert len(runs) == len(checks06._padding_cases(False))


def test_mutant_without_copies_lets_the_in_place_function_through(monkeypatch):
    monkeypatch.setattr(drivers, "own_copies", lambda inputs: inputs)
    monkeypatch.setattr(drivers, "require_unchanged", lambda *args, **kwargs: None)
    assert _driver().run(EX, padding_in_place, False) > 0


def test_a_variadic_reference_falls_back_to_positions():
    class Ex:
        def reference(*args):  # noqa: N805
            return args

    named = drivers.named_arguments(Ex, (torch.tensor([1]), 2), {"k": 3})
    assert list(named) == ["argument 1", "argument 2", "k"]
