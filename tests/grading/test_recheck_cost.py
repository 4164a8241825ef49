"""What the clean re-check no longer pays twice, and that it still promises the same.

- The wire (`verify_wire`): requests pickled with their tensors as raw bytes, replies JSON with
  raw tensor bytes; a hostile reply (a pickle, an unknown tag, a tensor larger than the message,
  a dtype or device out of the list, data nested a million deep) is refused and runs nothing.
- The cells after the last test (`verify.up_to_the_last_test`): nbgrader ran every test before
  them, so the re-check leaves them out.
- The slow cells no test needs (`cell_needs`): left out at first; a test that fails without them
  runs again with every cell, so leaving a cell out never costs a point.

Each rule comes with mutants that must fail it.
"""

from __future__ import annotations

import json
import pickle
import struct
from pathlib import Path

import nbformat
import pytest
import torch

from transformer_lab.instructor import cell_needs, verify, verify_wire
from transformer_lab.instructor.cell_needs import cells_the_tests_need
from transformer_lab.instructor.verify_wire import (
    pack_reply,
    pack_request,
    unpack_reply,
    unpack_request,
)

REPO = Path(__file__).resolve().parents[2]

# ----------------------------------------------------------------------------------------------
# The wire.


def test_replies_carry_plain_data_and_tensors_exactly():
    tensors = [
        torch.randn(3, 4, dtype=torch.float64),
        torch.randn(2, 3).t(),  # not contiguous
        torch.tensor(2.5, dtype=torch.bfloat16),  # 0-dim
        torch.zeros(0, 5),
        torch.tensor([True, False]),
        torch.randn(2, 2, dtype=torch.complex64).conj(),
        torch.arange(10, dtype=torch.int64)[::3],
        torch.randint(0, 255, (7,), dtype=torch.uint8),
        torch.nn.Parameter(torch.ones(2)),
    ]
    value = {
        "t": (1, [2.5, None, True], "é\ud800"),  # the student's keys may look like the tags
        "d": {"u": float("nan")},
        "tensors": tensors,
        "nested": [[[]]],
    }
    got = unpack_reply(pack_reply(value))
    assert got["t"] == (1, [2.5, None, True], "é\ud800")
    assert isinstance(got["t"], tuple) and isinstance(got["t"][1], list)
    assert got["d"]["u"] != got["d"]["u"]  # NaN
    assert got["nested"] == [[[]]]
    for sent, back in zip(tensors, got["tensors"]):
        assert type(back) is torch.Tensor
        assert back.dtype == sent.dtype and back.shape == sent.shape
        assert torch.equal(back, sent.detach().resolve_conj())


def test_requests_carry_any_picklable_argument():
    x = torch.randn(3, 2)
    state = torch.Generator().manual_seed(3).get_state()
    got = unpack_request(pack_request({"args": (x, slice(1, 2), torch.float16, x), "g": state}))
    assert torch.equal(got["args"][0], x) and torch.equal(got["args"][3], x)
    assert got["args"][1:3] == (slice(1, 2), torch.float16)
    assert torch.equal(got["g"], state)
    with pytest.raises(Exception):  # noqa: B017 - pickle's own error (a lambda)
        pack_request({"args": (lambda: 1,)})


def _frame(body: bytes, described: list, blob: bytes = b"") -> bytes:
    head = json.dumps(described).encode()
    frame = struct.pack(">I", len(head)) + head + struct.pack(">I", len(body)) + body
    return frame + b"\0" * (-len(frame) % 16) + blob if blob else frame


class _Boom:
    def __init__(self, mark: Path):
        self.mark = str(mark)

    def __reduce__(self):
        return (exec, (f"import pathlib; pathlib.Path({self.mark!r}).write_text('ran')",))


def _hostile(mark: Path) -> dict[str, bytes]:
    boom = pickle.dumps({"x": _Boom(mark)})
    return {
        "a pickle": _frame(boom, []),
        "an unknown tag": _frame(b'{"d": [["kind", {"obj": 1}]]}', []),
        "a tag with two keys": _frame(b'{"d": [], "t": 0}', []),
        "a tensor index out of range": _frame(b'{"t": 3}', [["float32", [1], "cpu"]], b"\0" * 4),
        "a dict key that is not text": _frame(b'{"d": [[1, 2]]}', []),
        "an object dtype": _frame(b'{"t": 0}', [["object", [1], "cpu"]], b"\0" * 8),
        "a tensor larger than the message": _frame(
            b'{"t": 0}', [["float64", [1 << 20], "cpu"]], b"\0" * 64
        ),
        "a negative dimension": _frame(b'{"t": 0}', [["float32", [-4], "cpu"]], b"\0" * 16),
        "a tensor on the meta device": _frame(b'{"t": 0}', [["float32", [1], "meta"]], b"\0" * 4),
        "a truncated frame": _frame(b'{"d": []}', [])[:-3],
        "data nested a million deep": _frame(b"[" * 1_000_000 + b"]" * 1_000_000, []),
    }


def _refuses_everything_hostile(unpack, mark: Path) -> bool:
    """Every hostile frame raises, and none runs code."""
    for frame in _hostile(mark).values():
        try:
            unpack(frame)
        except (ValueError, TypeError, RecursionError, struct.error, IndexError):
            pass
        else:
            return False
        if mark.exists():
            return False
    return True


def test_a_hostile_reply_is_refused_and_runs_nothing(tmp_path):
    assert _refuses_everything_hostile(unpack_reply, tmp_path / "ran")
    assert not (tmp_path / "ran").exists()


def _unpickling(data):  # the mutant: a reply read with pickle (as torch.load without weights_only)
    body, _ = verify_wire._unframe(data)
    return pickle.loads(body)


def _lenient_tags(data):  # the mutant: unknown tags kept as dicts
    body, tensors = verify_wire._unframe(data)
    return json.loads(body)


def _no_bounds(data):  # the mutant: tensors taken from the descriptions, not checked
    buf = bytearray(data)
    (n,) = struct.unpack_from(">I", buf, 0)
    described = json.loads(bytes(buf[4 : 4 + n]))
    return {"tensors": [torch.zeros(max(d[1][0], 0)) for d in described]}


@pytest.mark.parametrize("mutant", [_unpickling, _lenient_tags, _no_bounds])
def test_a_lenient_reader_is_caught(mutant, tmp_path):
    assert not _refuses_everything_hostile(mutant, tmp_path / "ran")


# ----------------------------------------------------------------------------------------------
# The cells after the last test.


def _nb(cells: list[tuple[str, str | None]]) -> dict:
    """Code cells (source, test grade id or None)."""
    out = []
    for src, gid in cells:
        meta = {"nbgrader": {"grade": True, "solution": False, "grade_id": gid}} if gid else {}
        out.append({"cell_type": "code", "source": src, "metadata": meta})
    return {"cells": out}


def test_the_cells_after_the_last_test_are_left_out():
    nb = _nb([("a = 1", None), ("check(a)", "t1"), ("b = 2", None), ("check(b)", "t2")])
    nb["cells"] += _nb([("train()", None), ("plot()", None)])["cells"]
    code = [(0, "a = 1"), (2, "b = 2"), (4, "train()"), (5, "plot()")]
    assert verify.up_to_the_last_test(nb, code, {"t1", "t2"}) == code[:2]
    # a test missing from the submission (nbgrader never ran it there): every cell
    assert verify.up_to_the_last_test(nb, code, {"t1", "t2", "t3"}) == code


@pytest.mark.parametrize(
    "mutant",
    [
        lambda nb, code, ids: code,  # keeps everything
        lambda nb, code, ids: [p for p in code if p[0] < 1],  # stops at the first test
        lambda nb, code, ids: [p for p in code if p[0] < 3],  # ignores a missing test
    ],
)
def test_a_wrong_cut_is_caught(mutant):
    nb = _nb([("a = 1", None), ("check(a)", "t1"), ("b = 2", None), ("check(b)", "t2")])
    nb["cells"] += _nb([("train()", None)])["cells"]
    code = [(0, "a = 1"), (2, "b = 2"), (4, "train()")]
    right = mutant(nb, code, {"t1", "t2"}) == code[:2]
    right &= mutant(nb, code, {"t1", "t2", "t3"}) == code
    assert not right


# ----------------------------------------------------------------------------------------------
# The slow cells no test needs.

CELLS = [
    "import torch\nfrom torch import nn",  # 0: f reads torch
    "def f(x):\n    return torch.tanh(helper(x)) * SCALE",  # 1: binds f
    "SCALE = 2.0\ndef helper(x):\n    step = 1\n    return x + step",  # 2: what f reads
    "model = nn.Linear(2, 2)\nfor _ in range(3):\n    loss = model(torch.randn(4, 2)).sum()",
    "torch.tanh = lambda x: x",  # 4: changes torch, which f reads
    "print(f(torch.ones(2)))",  # 5: only reads
    "SCALE = 3.0",  # 6: rebinds what f reads
    "results = [f(torch.ones(1) * i) for i in range(3)]",  # 7: a comprehension: only reads
    "base = 5",  # 8: read by the next cell's top level, as it runs
    "offset = base * 2\ndef g():\n    return offset",  # 9: binds g
    "base = 100",  # 10: after the read: not needed
    "class Probe:\n    def __init__(self):\n        self.w = 1\n",  # 11: self is the method's own
    "step = 0",  # 12: helper's step is its own
]
TESTS = ["check.f(f)", "check.g(g)"]
KEPT = [0, 1, 2, 4, 6, 8, 9]


def _kept(cells=CELLS, tests=TESTS, slow=None) -> list[int]:
    code = list(enumerate(cells))
    slow = set(range(len(cells))) if slow is None else slow
    return [i for i, _ in cells_the_tests_need(code, tests, slow)]


def test_slow_cells_that_no_test_needs_are_left_out():
    assert _kept() == KEPT
    assert _kept(slow={3, 5}) == [i for i in range(len(CELLS)) if i not in (3, 5)]
    assert _kept(slow=set()) == list(range(len(CELLS)))  # nothing slow: every cell


@pytest.mark.parametrize(
    "dynamic",
    [
        "globals()['SCALE'] = 1",
        "exec('SCALE = 1')",
        "setattr(torch, 'tanh', abs)",
        "def h():\n    global SCALE\n    SCALE = 1",
        "from math import *",
        "import sys\nsys.modules['torch'].tanh = abs",
        "vars()['SCALE'] = 1",
        "f.__globals__['SCALE'] = 1",
        "def broken(:\n    pass",
    ],
)
def test_a_notebook_that_reaches_names_another_way_runs_every_cell(dynamic):
    cells = [*CELLS, dynamic]
    assert _kept(cells) == list(range(len(cells)))


def _ignores_changes(monkeypatch):
    monkeypatch.setattr(cell_needs._Cell, "_change", lambda self, target: None)


def _ignores_function_bodies(monkeypatch):
    read = cell_needs._Cell._read

    def mutant(self, name):
        if not self.scopes:
            read(self, name)

    monkeypatch.setattr(cell_needs._Cell, "_read", mutant)


def _reads_as_if_later(monkeypatch):  # a top-level read needs the cells after it too
    read = cell_needs._Cell._read

    def mutant(self, name):
        read(self, name)
        if not self.scopes:
            self.reads_later.add(name)

    monkeypatch.setattr(cell_needs._Cell, "_read", mutant)


def _locals_are_globals(monkeypatch):
    monkeypatch.setattr(cell_needs, "_locals", lambda node: set())


@pytest.mark.parametrize(
    "mutant", [_ignores_changes, _ignores_function_bodies, _reads_as_if_later, _locals_are_globals]
)
def test_a_wrong_slice_is_caught(mutant, monkeypatch):
    mutant(monkeypatch)
    assert _kept() != KEPT


# ----------------------------------------------------------------------------------------------
# Leaving a cell out never costs a point: the re-check of a real lesson.

L02 = "02_qkv_attention"
SDPA_DEF = "def scaled_dot_product_attention(q, k, v, mask=None):\n"


def _submission(tmp_path: Path) -> tuple[Path, str]:
    """Lesson 02's solution whose graded function reads a file that a slow scratch cell writes
    (a dependence no name shows)."""
    nb = nbformat.read(REPO / "solutions" / L02 / f"{L02}.ipynb", as_version=4)
    solution = next(c for c in nb.cells if c.get("id") == "sdpa-solution")
    assert SDPA_DEF in solution.source
    solution.source = solution.source.replace(
        SDPA_DEF, SDPA_DEF + "    open('needed.txt').read()\n", 1
    )
    scratch = nbformat.v4.new_code_cell("with open('needed.txt', 'w') as out:\n    out.write('1')")
    scratch["id"] = "slow-scratch"
    nb.cells.insert(nb.cells.index(solution), scratch)
    path = tmp_path / f"{L02}.ipynb"
    nbformat.write(nb, path)
    return path, scratch["id"]


@pytest.mark.slow
def test_a_test_that_fails_without_the_left_out_cells_runs_again_with_all_of_them(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("TRANSFORMER_LAB_QUICK", "1")
    monkeypatch.setenv("TRANSFORMER_LAB_STUDENT_DIR", str(tmp_path / "pkg"))
    path, slow = _submission(tmp_path)
    kwargs = {"course": REPO, "timeout": 240, "memory": None, "slow_cells": [slow]}
    result = verify.verify(L02, path, tmp_path / "again", **kwargs)
    assert all(cell["passed"] for cell in result["cells"].values()), result
    # the mutant: no second run (as for a test with 0 points in nbgrader's run) loses the point
    alone = verify.verify(L02, path, tmp_path / "once", kernel_failed={"sdpa-test"}, **kwargs)
    assert not alone["cells"]["sdpa-test"]["passed"]
    assert "needed.txt" in alone["cells"]["sdpa-test"]["message"]
    assert alone["cells"]["self-attention-test"]["passed"]


@pytest.mark.slow
def test_a_forged_reply_from_the_students_code_is_refused_and_runs_nothing(tmp_path, monkeypatch):
    """The student's function writes a pickle that would run code into every descriptor of the
    child (its reply pipe among them): the judge refuses it, runs nothing, fails the cell."""
    monkeypatch.setenv("TRANSFORMER_LAB_QUICK", "1")
    monkeypatch.setenv("TRANSFORMER_LAB_STUDENT_DIR", str(tmp_path / "pkg"))
    mark = tmp_path / "ran"
    forged = _hostile(mark)["a pickle"]
    nb = nbformat.read(REPO / "solutions" / L02 / f"{L02}.ipynb", as_version=4)
    solution = next(c for c in nb.cells if c.get("id") == "sdpa-solution")
    solution.source = solution.source.replace(
        SDPA_DEF,
        SDPA_DEF
        + "    import os, struct\n"
        + f"    frame = {forged!r}\n"
        + "    for fd in range(3, 64):\n"
        + "        try:\n"
        + "            os.write(fd, struct.pack('>Q', len(frame)) + frame)\n"
        + "        except OSError:\n"
        + "            pass\n"
        + "    os._exit(0)\n",
        1,
    )
    path = tmp_path / f"{L02}.ipynb"
    nbformat.write(nb, path)
    result = verify.verify(L02, path, tmp_path / "w", course=REPO, timeout=240, memory=None)
    assert not result["cells"]["sdpa-test"]["passed"]
    assert "not plain tensors and numbers" in result["cells"]["sdpa-test"]["message"]
    assert not mark.exists()
