"""The student's process reads results without running the student's code, under the guard
(`verify_read`, `verify_child.Answers`), and the guard makes tampering visible (`verify_guard`).

Red team A's attacks, each at its smallest: a result whose reading runs the course's reference
(a tuple subclass's ``__iter__``, a tensor subclass's ``__torch_function__``, a property read
by the judge), and a student who reaches the guard (``sys.getprofile()``, ``threading``'s hook,
a traceback's frames) to erase its notes or switch the forbidden names back on. Each attack is
refused and named; each beats a mutant that takes the protection away again. The graded attacks
(red team A's a01, a04 and a07 as submissions) are at the end.
"""

from __future__ import annotations

import collections
import sys

import pytest
import torch

from transformer_lab import check
from transformer_lab_grader import verify_child, verify_guard, verify_read
from transformer_lab_grader.verify_cells import Cells
from transformer_lab_grader.verify_earlier import course_parts
from transformer_lab_grader.verify_guard import TAMPERED, Guard, capture
from transformer_lab_grader.verify_wire import TENSOR_MARK

SDPA = "scaled_dot_product_attention"
REF = "transformer_lab.attention.scaled_dot_product_attention"
CALLED_REF = f"called forbidden {REF}"
CHANGED = f"{TAMPERED}: its state was changed"

# The student's cells: what each attack returns or does, built on the course's reference (kept
# under another name when the cell ran, as red team A's notebooks do).
CELLS = """
import sys, threading
import torch
from transformer_lab.attention import scaled_dot_product_attention as _ref
ran = []

class LazyTuple(tuple):
    def __iter__(self):
        ran.append("__iter__")
        return iter(_ref(*self._args))

def lazy_tuple(q):
    out = LazyTuple((None, None))
    out._args = (q, q, q)
    return out

class LazyTensor(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        ran.append("__torch_function__")
        if func == torch.Tensor.layout.__get__:  # red team A's a07: "sparse", so to_dense runs
            return torch.sparse_coo
        with torch._C.DisableTorchFunctionSubclass():
            if func is torch.Tensor.to_dense:
                q = args[0].as_subclass(torch.Tensor)
                return _ref(q, q, q)[0]
            return func(*args, **(kwargs or {}))

def lazy_tensor(q):
    return q.detach().as_subclass(LazyTensor)

class Lazy:
    @property
    def weights(self):
        return _ref(self.q, self.q, self.q)[1]

def lazy_object(q):
    obj = Lazy()
    obj.q = q
    return obj

def cells_of(fn):
    return [c.cell_contents for c in getattr(fn, "__closure__", None) or ()]

def erase(hook):  # the notes: a list in a function the hook closes over
    for fn in [hook, *[v for v in cells_of(hook) if callable(v)]]:
        for value in cells_of(fn):
            if type(value) is list:
                value.clear()

def via_getprofile(q):  # red team A's a04: the hook's __self__, else its closure
    hook = sys.getprofile()
    guard = getattr(hook, "__self__", None)
    out = _ref(q, q, q)
    if guard is not None:
        guard.refused.clear()
    else:
        erase(hook)
    return out

def via_threading(q):  # no call: threading keeps the hook in a module attribute
    out = _ref(q, q, q)
    erase(threading._profile_hook)
    return out

def via_frames(q):  # a traceback's frames lead to the guard: names back on, notes erased
    try:
        raise ValueError
    except ValueError as err:
        frame = err.__traceback__.tb_frame
    while frame is not None and type(frame.f_locals.get("guard")).__name__ != "Guard":
        frame = frame.f_back
    guard = frame.f_locals["guard"]
    guard.stack.close()
    import transformer_lab.attention as A
    out = A.scaled_dot_product_attention(q, q, q)
    guard.refused.clear()
    return out
"""


@pytest.fixture
def answers():
    cells = Cells({"cells": []})
    errors, _ = cells.run([[0, CELLS]])
    assert errors == {}
    trusted = capture(check)
    yield verify_child.Answers(cells, trusted, torch, check.forbid, course_parts(check.EXERCISES))
    sys.setprofile(None)


def call(answers, name: str, exercise: str = SDPA) -> dict:
    q = torch.randn(1, 3, 4)
    request = {"op": "call", "name": name, "exercise": exercise, "tensors": [q], "grad": [False]}
    request |= {"generators": [], "args": [(TENSOR_MARK, 0)], "kwargs": {}, "tids": [None]}
    return answers.handle(request | {"extra_tids": []})


# ---------------------------------------------------------------------------------------------
# Finding 1: reading a result runs none of the student's code, and runs under the guard.


def old_plain(value, tensors, keep, depth=0):
    """The reading before the fix (a mutant): isinstance, iteration and the tensor's own
    layout, all of which run the student's overrides."""
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided:
            value = value.to_dense()
        tensors.append(value)
        return {"t": len(tensors) - 1}
    if isinstance(value, (tuple, list)):
        return {"seq": "tuple", "items": [old_plain(v, tensors, keep, depth + 1) for v in value]}
    return {"object": keep(value), "type": type(value).__name__}


def test_honest_results_read_as_before():
    kept = []
    NT = collections.namedtuple("NT", "a b")
    values = [
        NT(torch.ones(1), 2),
        torch.ones(2, 2).max(0),
        torch.Size([2, 3]),
        collections.OrderedDict(a=1.5),
        torch.nn.Parameter(torch.ones(2)),
        torch.zeros(3).to_sparse(),
    ]
    read = [verify_read.plain(v, [], kept.append) for v in values]
    assert [r.get("seq") for r in read[:3]] == ["tuple"] * 3
    assert read[3] == {"dict": {"a": {"v": 1.5}}}
    found: list = []
    verify_read.plain(values[4], found, kept.append)
    verify_read.plain(values[5], found, kept.append)
    assert [type(t) for t in found] == [torch.Tensor, torch.Tensor]
    assert found[0].requires_grad and found[1].layout == torch.strided
    assert kept == []


def unguarded(self, exercise, work, around=verify_child._NOTHING):
    """`Answers.guarded` without the guard (a mutant)."""
    with around:
        return work()


@pytest.mark.parametrize("mutant", ["fixed", "old-reading", "old-reading-unguarded"])
@pytest.mark.parametrize(
    ("name", "refusal"),
    [
        ("lazy_tuple", verify_read.refusal(tuple, "__iter__")),
        ("lazy_tensor", verify_read.refusal(torch.Tensor, "__torch_function__")),
    ],
)
def test_a_result_whose_reading_runs_the_reference_is_refused(
    answers, monkeypatch, name, refusal, mutant
):
    """Red team A's a01 and a07: the reference ran while the result was read. Fixed, the reading
    runs none of it and refuses the result. Read the old way, the student's override runs: under
    the guard it is still seen; read the old way after the guard (as before the fix), the
    reference's result goes back."""
    if mutant != "fixed":
        monkeypatch.setattr(verify_child, "plain", old_plain)
    if mutant == "old-reading-unguarded":
        monkeypatch.setattr(verify_child.Answers, "guarded", unguarded)
    reply = call(answers, name)
    ran = answers.ns["ran"]
    if mutant == "fixed":
        assert ran == [] and reply == {"refused": [refusal]}
    elif mutant == "old-reading":
        assert ran and reply["refused"][0] == CALLED_REF
    else:
        assert ran and "refused" not in reply and reply["tensors"]


@pytest.mark.parametrize("mutant", [False, True], ids=["fixed", "mutant-unguarded-getattr"])
def test_an_attribute_the_judge_reads_runs_under_the_guard(answers, monkeypatch, mutant):
    """An attribute read (a property) runs the student's code: under the guard, as a call."""
    if mutant:
        monkeypatch.setattr(verify_child.Answers, "guarded", unguarded)
    handle = call(answers, "lazy_object")["result"]["object"]
    reply = answers.handle({"op": "getattr", "handle": handle, "attr": "weights", "exercise": SDPA})
    if mutant:
        assert reply["kind"] == "value" and len(reply["tensors"]) == 1  # the reference's
    else:
        assert reply == {"refused": [CALLED_REF]}


# ---------------------------------------------------------------------------------------------
# Finding 2: the guard hands out nothing, notes a reach for it, and checks itself at exit.


def test_the_hook_is_no_bound_method_and_reaching_for_it_is_noted(answers):
    """Red team A's a04: `sys.getprofile().__self__` was the guard."""
    guard = Guard(answers.trusted, check.forbid, SDPA)
    with guard:
        hook = sys.getprofile()  # the test's own frame counts as the student's
    assert getattr(hook, "__self__", None) is None
    assert guard.refused == [f"{TAMPERED}: called sys.getprofile"]


@pytest.mark.parametrize("attack", ["via_getprofile", "via_threading", "via_frames"])
@pytest.mark.parametrize("mutant", [False, True], ids=["fixed", "mutant-no-exit-check"])
def test_tampering_with_the_guard_is_refused(answers, monkeypatch, attack, mutant):
    """The notes erased through the hook's closure, or the forbidden names switched back on
    through a traceback's frames: the guard's check at exit refuses the call. Without that check
    (a mutant), the erased notes let the reference's result through."""
    if mutant:
        monkeypatch.setattr(Guard, "intact", lambda self: True)
    reply = call(answers, attack)
    if mutant:
        assert "refused" not in reply and reply["tensors"]  # the reference's result
    else:  # the erased notes are gone; the guard's check at exit remains
        assert reply == {"refused": [CHANGED]}


def test_the_tables_the_hook_reads_are_read_only():
    table = verify_guard.forbidden_tables(check.EXERCISES)[SDPA]
    for mapping in (table.c_funcs, table.codes, table.copies):
        with pytest.raises(TypeError):
            mapping["a"] = 1


# ---------------------------------------------------------------------------------------------
# Graded: red team A's notebooks (lesson 02), judged as the grader judges them.

LAZY_TUPLE_SDPA = """
class _Lazy(tuple):
    def __iter__(self):
        from transformer_lab import attention as _att
        return iter(_att.scaled_dot_product_attention(*self._args))

def scaled_dot_product_attention(q, k, v, mask=None):
    out = _Lazy((None, None))
    out._args = (q, k, v, mask)
    return out
"""
LAZY_TENSOR_SELF = """
class _Lazy(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        me = args[0] if args else None
        if func == torch.Tensor.layout.__get__ and hasattr(me, "_tl_job"):
            return torch.sparse_coo
        if func is torch.Tensor.to_dense and hasattr(me, "_tl_job"):
            return me._tl_job()
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))

class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k=None, d_v=None):
        super().__init__()
        self.dims = (d_model, d_k or d_model, d_v or d_model)
        self.w_q = nn.Linear(d_model, self.dims[1], bias=False)
        self.w_k = nn.Linear(d_model, self.dims[1], bias=False)
        self.w_v = nn.Linear(d_model, self.dims[2], bias=False)
        self.last_weights = None

    def forward(self, x, mask=None):
        params = dict(self.named_parameters())
        def job():
            from transformer_lab import attention as att
            ref = att.SelfAttention(*self.dims)
            out = torch.func.functional_call(ref, params, (x, mask))
            object.__setattr__(self, "last_weights", ref.last_weights)
            return out
        lazy = x.new_zeros(()).as_subclass(_Lazy)
        lazy._tl_job = job
        return lazy
"""
GETPROFILE_SDPA = """
import sys
from transformer_lab import attention as _att
_ref = _att.scaled_dot_product_attention

def scaled_dot_product_attention(q, k, v, mask=None):
    guard = getattr(sys.getprofile(), "__self__", None)
    if guard is not None:
        guard.note = lambda what: None
    return _ref(q, k, v, mask)
"""
GETPROFILE_SELF = """
_RefSA = _att.SelfAttention

class SelfAttention(_RefSA.__mro__[1]):
    def __init__(self, d_model, d_k=None, d_v=None):
        super().__init__()
        inner = _RefSA(d_model, d_k, d_v)
        self.d_model, self.d_k, self.d_v = inner.d_model, inner.d_k, inner.d_v
        self.w_q, self.w_k, self.w_v = inner.w_q, inner.w_k, inner.w_v
        self.last_weights = None

    def forward(self, x, mask=None):
        guard = getattr(sys.getprofile(), "__self__", None)
        if guard is not None:
            guard.note = lambda what: None
            guard.stack.close()
        return _RefSA.forward(self, x, mask)
"""
READ_REFUSED = "returned a {} subclass with its own {}, which changes how the result is read in {}"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("answers_", "flags"),
    [
        (
            {"sdpa-solution": LAZY_TUPLE_SDPA, "self-attention-solution": LAZY_TENSOR_SELF},
            [
                READ_REFUSED.format("tuple", "__iter__", SDPA),
                READ_REFUSED.format("Tensor", "__torch_function__", "SelfAttention"),
            ],
        ),
        (
            {"sdpa-solution": GETPROFILE_SDPA, "self-attention-solution": GETPROFILE_SELF},
            [
                f"{TAMPERED}: called sys.getprofile in {SDPA}",
                f"{CALLED_REF} in {SDPA}",
                # its constructor calls the reference: refused before its forward runs
                "called forbidden transformer_lab.attention.SelfAttention in SelfAttention",
            ],
        ),
    ],
    ids=["a01-a07-lazy-results", "a04-getprofile"],
)
def test_red_team_notebooks_score_nothing_and_are_flagged(tmp_path, monkeypatch, answers_, flags):
    from test_tamper import L02, grading_env, passed, run_verify, submission

    grading_env(monkeypatch, tmp_path)
    result = run_verify(submission(tmp_path, L02, answers_), L02, tmp_path)
    assert passed(result) == {"sdpa-test": False, "self-attention-test": False}
    assert result["flags"] == flags
    assert "the re-check refused this call" in result["cells"]["sdpa-test"]["message"] or (
        "implement this yourself" in result["cells"]["sdpa-test"]["message"]
    )
