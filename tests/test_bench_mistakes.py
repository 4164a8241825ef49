"""The held-out mistakes benchmark's classification (benchmarks/bench_mistakes.py), on fake checks.

The benchmark itself (every held-out implementation through every check) is too slow for the
suite; this covers the logic that turns a check's verdict into named / caught / hidden only / passed.
"""

import importlib.util
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_mistakes.py"
spec = importlib.util.spec_from_file_location("bench_mistakes", PATH)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def named_check(impl, thorough=False):
    raise AssertionError(
        "f: output differs in 3 of 4 entries\nLikely mistake: the mask is inverted."
    )


def caught_check(impl, thorough=False):
    raise AssertionError("f: output differs in 3 of 4 entries")


def visible_only_check(impl, thorough=False):
    """Passes the visible check; only the hidden one fails."""
    if thorough:
        raise AssertionError("f: a hidden case differs")


def passing_check(impl, thorough=False):
    return None


def crashing_impl_check(impl, thorough=False):
    impl()  # the implementation raises inside the check


def _rows(outcome):
    def run(check_fn, impl=None):
        visible, _ = outcome(check_fn, impl)
        hidden, _ = outcome(check_fn, impl, thorough=True)
        return dict(lesson="00", right=False, visible=visible, hidden=hidden)

    return [
        run(named_check),
        run(caught_check),
        run(visible_only_check),
        run(passing_check),
        run(crashing_impl_check, lambda: 1 / 0),
    ]


def _assert_classifies(outcome):
    rows = _rows(outcome)
    assert [bench.kind(r["visible"], r["hidden"]) for r in rows] == [
        "named",
        "caught",
        "hidden only",
        "passed",
        "caught",
    ]
    assert bench.tally(rows) == {"named": 1, "caught": 2, "hidden only": 1, "passed": 1}
    assert "| **all** | 5 | 1 (20 %) | 2 | 1 | 1 |" in bench.report(rows)


def test_classification():
    _assert_classifies(bench.outcome)


def test_a_classifier_that_counts_caught_as_named_fails():
    def mutant(check_fn, impl, **kwargs):
        verdict, message = bench.outcome(check_fn, impl, **kwargs)
        return ("named" if verdict == "caught" else verdict), message

    with pytest.raises(AssertionError):
        _assert_classifies(mutant)


def test_a_rejected_right_implementation_is_reported():
    row = dict(
        lesson="00",
        exercise="f",
        impl="f_right",
        right=True,
        visible="caught",
        hidden="passed",
        message="f: differs",
        hidden_message="",
    )
    assert "REJECTED f (f_right)" in bench.report([row])


def test_the_unnamed_list_holds_the_caught_and_the_passed_only():
    rows = [
        dict(
            lesson="00",
            exercise="f",
            impl=f"f_{name}",
            right=False,
            doc=name,
            visible=v,
            hidden=h,
            message=m,
        )
        for name, v, h, m in [
            ("named", "named", "named", "Likely mistake: x"),
            ("caught", "caught", "caught", "differs"),
            ("sneaks", "passed", "caught", ""),
        ]
    ]
    text = bench.unnamed(rows)
    assert "f_caught" in text and "f_sneaks" in text and "f_named" not in text
