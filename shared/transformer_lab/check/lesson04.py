"""Checks for lesson 04 — positional encoding: `sinusoidal_positional_encoding`,
`LearnedPositionalEmbedding`, `rotary_embedding`."""

from __future__ import annotations

import math

import torch

from .. import positional as _positional
from .answer_drivers import RaisesDriver, Reject
from .compare import TOLERANCES, compare_tensor, same_within_tolerance
from .drivers import CustomDriver, FunctionDriver, ModuleDriver, init_parameters
from .exercise import Case, Exercise, Mistake, fail
from .forbid import ImplementThisYourself

__all__ = ["LearnedPositionalEmbedding", "rotary_embedding", "sinusoidal_positional_encoding"]

# ==============================================================================================
# sinusoidal_positional_encoding(n_positions, d_model)


def _table(n, d, freq, swap=False, first_position=0):
    """Columns 2k = sin(t·freq[k]), 2k+1 = cos(t·freq[k]) (swapped when `swap`), float64, for
    t = first_position, first_position + 1, ..."""
    t = torch.arange(first_position, first_position + n, dtype=torch.float64)[:, None]
    angles = t * freq[None, :]
    pe = torch.zeros(n, d, dtype=torch.float64)
    first, second = (torch.cos, torch.sin) if swap else (torch.sin, torch.cos)
    pe[:, 0::2] = first(angles)[:, : (d + 1) // 2]
    pe[:, 1::2] = second(angles)[:, : d // 2]
    return pe.to(torch.get_default_dtype())


def _pairs(d):
    return torch.arange(0, d, 2, dtype=torch.float64)  # 2k


def _pe_swapped(n_positions, d_model):
    return _table(n_positions, d_model, 10000.0 ** (-_pairs(d_model) / d_model), swap=True)


def _pe_k_over_d(n_positions, d_model):
    return _table(n_positions, d_model, 10000.0 ** (-(_pairs(d_model) / 2) / d_model))


def _pe_exponent_doubled(n_positions, d_model):
    """arange(0, d, 2) already gives 2k, multiplied by 2 again: the exponent 4k / d_model."""
    return _table(n_positions, d_model, 10000.0 ** (-2 * _pairs(d_model) / d_model))


def _pe_base_1000(n_positions, d_model):
    return _table(n_positions, d_model, 1000.0 ** (-_pairs(d_model) / d_model))


def _pe_growing(n_positions, d_model):
    return _table(n_positions, d_model, 10000.0 ** (_pairs(d_model) / d_model))


def _pe_per_column(n_positions, d_model):
    t = torch.arange(n_positions, dtype=torch.float64)[:, None]
    j = torch.arange(d_model, dtype=torch.float64)
    angles = t * 10000.0 ** (-j / d_model)
    pe = torch.where(j.long() % 2 == 0, torch.sin(angles), torch.cos(angles))
    return pe.to(torch.get_default_dtype())


def _pe_halves(n_positions, d_model):
    """All the sines in the first half of the columns, all the cosines in the second."""
    t = torch.arange(n_positions, dtype=torch.float64)[:, None]
    angles = t * 10000.0 ** (-_pairs(d_model) / d_model)
    pe = torch.cat([torch.sin(angles), torch.cos(angles)[:, : d_model // 2]], -1)
    return pe.to(torch.get_default_dtype())


def _pe_from_one(n_positions, d_model):
    return _table(n_positions, d_model, 10000.0 ** (-_pairs(d_model) / d_model), first_position=1)


def _pe_odd_rounded_up(n_positions, d_model):
    d = d_model + d_model % 2
    return _table(n_positions, d_model, 10000.0 ** (-_pairs(d_model) / d))


def _pe_log10(n_positions, d_model):
    """ω_k = exp(−2k·log10(10000)/d_model): the base e^4 ≈ 54.6 instead of 10000."""
    return _table(n_positions, d_model, torch.exp(-_pairs(d_model) * math.log10(10000.0) / d_model))


def _pe_normalised_positions(n_positions, d_model):
    """Row t at the position t / n_positions (a fraction of the table) instead of t."""
    freq = 10000.0 ** (-_pairs(d_model) / d_model)
    return _table(n_positions, d_model, freq / n_positions)


def _pe_integer_exponent(n_positions, d_model):
    """2k // d_model on integers: the exponent is 0, so every pair turns at frequency 1."""
    return _table(n_positions, d_model, torch.ones(len(_pairs(d_model)), dtype=torch.float64))


def _pe_odd_rounded_down(n_positions, d_model):
    d = d_model - d_model % 2
    return _table(n_positions, d_model, 10000.0 ** (-_pairs(d_model) / d))


def _sinusoidal_cases(thorough: bool) -> list[Case]:
    def case(n, d):
        return Case(f"n_positions={n}, d_model={d}", lambda g: (n, d))

    cases = [case(8, 6), case(5, 4), case(6, 7)]  # odd d_model is a stated rule: visible too
    if thorough:
        cases += [case(1, 2), case(64, 32), case(10, 7), case(3, 1), case(50, 128), case(33, 10)]
    return cases


def _close(a, b) -> bool:
    """Equal within float32's tolerance (how a mistake's table is matched with the student's)."""
    atol, rtol = TOLERANCES[torch.float32]
    return (
        isinstance(a, torch.Tensor)
        and a.shape == b.shape
        and torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol, equal_nan=True)
    )


def _pe_float64(n_positions, d_model):
    """The table built in float64 (NumPy's habit) and returned without casting back."""
    return _table(n_positions, d_model, 10000.0 ** (-_pairs(d_model) / d_model)).double()


_FLOAT64 = Mistake(
    "float64-table",
    "the table is float64: build it in (or cast it back to) torch's default dtype, "
    "torch.get_default_dtype(), so that it adds to float32 embeddings without promoting them.",
    _pe_float64,
)


def _check_sinusoidal(ex: Exercise, student_fn, thorough: bool) -> tuple[int, str]:
    """Every table entry at float32's tolerance; the arguments are passed by position."""
    dtype, device = torch.float32, torch.device("cpu")
    cases = _sinusoidal_cases(thorough)
    for case in cases:
        args = case.make(None)  # (n_positions, d_model)
        expected = ex.reference(*args).double()
        try:
            got = ex.run_student(student_fn, lambda: student_fn(*args))  # noqa: B023
        except (ImplementThisYourself, NotImplementedError):
            raise
        except Exception as err:
            fail(ex, f"your function raised {type(err).__name__}: {err}", case.label, cause=err)
        if not isinstance(got, torch.Tensor):
            fail(ex, f"the table should be a tensor but is a {type(got).__name__}", case.label)
        if got.is_floating_point():
            problem = compare_tensor(expected, got.double(), "the table", dtype, device)
        else:
            problem = f"the table should be floating point but has dtype {got.dtype}"
        if problem:
            mistake = ex.diagnose(lambda impl: impl(*args), got.double(), expected, _close)  # noqa: B023
            fail(ex, problem, case.label, mistake)
        if got.dtype != torch.get_default_dtype():
            problem = (
                f"the table has dtype {got.dtype}, not the default {torch.get_default_dtype()}"
            )
            fail(ex, problem, case.label, _FLOAT64)
    return len(cases), "every table entry, even and odd d_model, float32 tolerance, default dtype"


sinusoidal_positional_encoding = Exercise(
    name="sinusoidal_positional_encoding",
    lesson="04",
    module="positional",
    reference=_positional.sinusoidal_positional_encoding,
    forbidden=(
        "transformer_lab.positional.sinusoidal_positional_encoding",
        "transformer_lab.positional.SinusoidalPositionalEncoding",
        "transformer_lab.positional._frequencies",
        "transformer_lab.sinusoidal_positional_encoding",
        "transformer_lab.SinusoidalPositionalEncoding",
    ),
    mistakes=[
        Mistake(
            "exponent-doubled",
            "the exponent is 4k / d_model: torch.arange(0, d_model, 2) already gives 2k, so do "
            "not multiply it by 2 again; ω_k = 10000^(−2k / d_model).",
            _pe_exponent_doubled,
        ),
        Mistake(
            "sin-cos-swapped",
            "sin and cos are swapped: even columns 2k hold sin(t·ω_k), odd columns 2k+1 hold "
            "cos(t·ω_k).",
            _pe_swapped,
        ),
        Mistake(
            "k-over-d",
            "the exponent is k/d_model; it must be 2k/d_model (ω_k = 10000^(−2k/d_model) for "
            "the pair of columns 2k, 2k+1).",
            _pe_k_over_d,
        ),
        Mistake("base-1000", "the base is 1000; the paper uses 10000.", _pe_base_1000),
        _FLOAT64,
        Mistake(
            "growing-frequencies",
            "your frequencies grow with k: ω_k = 10000^(−2k/d_model) = 1 / 10000^(2k/d_model) "
            "(mind the minus sign).",
            _pe_growing,
        ),
        Mistake(
            "per-column-frequency",
            "the two columns of a pair must share one frequency: column 2k+1 uses ω_k, the "
            "same as column 2k, not a frequency of its own.",
            _pe_per_column,
        ),
        Mistake(
            "odd-d_model-rounded-up",
            "odd d_model is mishandled: keep d_model itself in ω_k = 10000^(−2k/d_model) and "
            "let the last sin column have no cos partner.",
            _pe_odd_rounded_up,
        ),
        Mistake(
            "sin-then-cos-halves",
            "the sines fill the first half of the columns and the cosines the second: the two "
            "interleave, column 2k is sin(t·ω_k) and column 2k+1 is cos(t·ω_k).",
            _pe_halves,
        ),
        Mistake(
            "positions-from-one",
            "your positions start at 1: row t of the table is position t, from t = 0 (row 0 is "
            "sin 0 = 0 and cos 0 = 1).",
            _pe_from_one,
        ),
        Mistake(
            "log10",
            "log10(10000) = 4 is not ln(10000): in ω_k = exp(−2k·ln(10000)/d_model) the log is "
            "the natural one, math.log (or write 10000 ** (−2k/d_model)).",
            _pe_log10,
        ),
        Mistake(
            "normalised-positions",
            "the positions are divided by n_positions: row t holds position t itself, "
            "0, 1, 2, … (a fraction t/L is the poor signal this lesson starts from); the "
            "frequencies ω_k alone set the scale.",
            _pe_normalised_positions,
        ),
        Mistake(
            "integer-exponent",
            "every pair of columns turns at the same frequency, 1: the exponent 2k/d_model was "
            "computed on integers (// or an integer arange), which gives 0; compute it in "
            "floating point, torch.arange(0, d_model, 2, dtype=torch.float32) / d_model.",
            _pe_integer_exponent,
        ),
        Mistake(
            "odd-d_model-rounded-down",
            "odd d_model is mishandled: your exponent divides by d_model − 1 (d_model rounded "
            "down to even); keep d_model itself in ω_k = 10000^(−2k/d_model) and let the last "
            "sin column have no cos partner.",
            _pe_odd_rounded_down,
        ),
    ],
    driver=CustomDriver(_check_sinusoidal),
    doc="sinusoidal_positional_encoding(n_positions, d_model) -> (n_positions, d_model)",
)


# ==============================================================================================
# LearnedPositionalEmbedding(n_positions, d_model): forward(x, offset=0) adds rows
# offset .. offset+L-1 of its table `embedding` to x (B, L, d_model), and raises a ValueError
# for a position beyond the table (a learned table cannot extrapolate). The two range mistakes come
# first in the catalogue: they are right on every in-range case, so they are never named for a
# wrong output, while an earlier offset mistake would also "miss" the ValueError.


class _LearnedOffsetIgnored(_positional.LearnedPositionalEmbedding):
    def forward(self, x, offset=0):
        return x + self.embedding(torch.arange(x.shape[-2], device=x.device))


class _LearnedFromOne(_positional.LearnedPositionalEmbedding):
    def forward(self, x, offset=0):
        L = x.shape[-2]
        if offset + L + 1 > self.n_positions:
            raise ValueError(f"position {offset + L} is beyond the table")
        return x + self.embedding(torch.arange(offset + 1, offset + L + 1, device=x.device))


class _LearnedReplaces(_positional.LearnedPositionalEmbedding):
    def forward(self, x, offset=0):
        L = x.shape[-2]
        if offset + L > self.n_positions:
            raise ValueError(f"position {offset + L - 1} is beyond the table")
        return self.embedding(torch.arange(offset, offset + L, device=x.device)).expand_as(x)


class _LearnedNoRangeCheck(_positional.LearnedPositionalEmbedding):
    def forward(self, x, offset=0):
        return x + self.embedding(torch.arange(offset, offset + x.shape[-2], device=x.device))


class _LearnedClamped(_positional.LearnedPositionalEmbedding):
    def forward(self, x, offset=0):
        t = torch.arange(offset, offset + x.shape[-2], device=x.device)
        return x + self.embedding(t.clamp(max=self.n_positions - 1))


class _LearnedBatchAxis(_positional.LearnedPositionalEmbedding):
    """L read as x.shape[0], the batch size: the rows no longer line up with the positions."""

    def forward(self, x, offset=0):
        n = x.shape[0]
        if offset + n > self.n_positions:
            raise ValueError(f"position {offset + n - 1} is beyond the table")
        return x + self.embedding(torch.arange(offset, offset + n, device=x.device))


class _LearnedTableDtype(_positional.LearnedPositionalEmbedding):
    """x cast to the table's dtype before the sum: a float64 x comes back float32."""

    def forward(self, x, offset=0):
        L = x.shape[-2]
        if offset + L > self.n_positions:
            raise ValueError(f"position {offset + L - 1} is beyond the table")
        rows = self.embedding(torch.arange(offset, offset + L, device=x.device))
        return x.to(rows.dtype) + rows


def _learned_cases(thorough: bool) -> list[Case]:
    def case(shape, n_positions, offset=None):
        def make(g):
            inputs = {"x": torch.randn(*shape, generator=g, dtype=torch.float64)}
            if offset is not None:
                inputs["offset"] = offset
            return inputs

        label = f"x {shape}, n_positions={n_positions}" + (
            f", offset={offset}" if offset is not None else ""
        )
        return Case(label, make, init={"n_positions": n_positions, "d_model": shape[-1]})

    cases = [case((2, 5, 8), 6), case((1, 3, 4), 7, offset=4)]
    if thorough:
        cases += [
            case((3, 1, 6), 1),
            case((2, 16, 32), 16),
            case((1, 4, 5), 20, offset=0),
            case((4, 2, 8), 64, offset=61),
        ]
    return cases


def _learned_out_of_range_cases(thorough: bool) -> list[tuple[int, tuple[int, ...], int]]:
    """(n_positions, x shape, offset) whose last position lies beyond the table."""
    cases = [(4, (1, 5, 8), 0), (6, (2, 3, 8), 4)]  # too long; long enough, but shifted out
    if thorough:
        cases += [(1, (1, 2, 4), 0), (16, (1, 1, 4), 16), (10, (3, 10, 6), 1)]
    return cases


def _learned_rejects(thorough: bool) -> list[Reject]:
    rejects = []
    for n, (n_positions, shape, offset) in enumerate(_learned_out_of_range_cases(thorough)):
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(7000 + n))
        last = offset + shape[-2] - 1
        label = (
            f"x {shape}, offset={offset}, n_positions={n_positions} (position {last} has no row: "
            f"the rows are 0 .. {n_positions - 1})"
        )
        rejects.append(Reject(label, _past_the_table(n_positions, x, offset)))
    return rejects


def _past_the_table(n_positions: int, x: torch.Tensor, offset: int):
    """Run a class cls(n_positions, d) on x at `offset` (a Reject's call)."""
    return lambda cls: cls(n_positions, x.shape[-1])(x, offset)


_DTYPE_CASE = (
    "x (2, 3, 4) in float64, n_positions=5, the module left in float32 (the default dtype of "
    "its table)"
)


def _check_learned_dtype(ex: Exercise, student_cls) -> int:
    """The stated rule "the same dtype as x", on the one case where the sum could lose it: a
    float64 x through a module whose table stayed float32 (x + rows promotes to float64)."""
    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(7100), dtype=torch.float64)
    with torch.random.fork_rng(devices=[]):
        reference = ex.reference(5, 4)
    init_parameters(reference, seed=7101)
    with torch.no_grad():
        expected = reference(x)

    def run(impl):
        with torch.random.fork_rng(devices=[]):
            layer = impl(5, 4)
        layer.load_state_dict(reference.state_dict(), strict=False)  # extras of their own kept
        with torch.no_grad():
            return layer(x)

    try:
        got = ex.run_student(student_cls, lambda: run(student_cls))
    except (ImplementThisYourself, NotImplementedError):
        raise
    except Exception as err:
        fail(ex, f"your module raised {type(err).__name__}: {err}", _DTYPE_CASE, cause=err)
    cpu = torch.device("cpu")

    def same(a, b):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and same_within_tolerance(a, b, torch.float64, cpu)
        )

    if same(got, expected):
        return 1
    if isinstance(got, torch.Tensor) and got.dtype != x.dtype:
        problem = f"your output has dtype {got.dtype}, not x's {x.dtype}"
    else:
        problem = compare_tensor(expected, got, "the output", torch.float64, cpu)
    fail(ex, problem, _DTYPE_CASE, ex.diagnose(run, got, expected, same))


def _check_learned(ex: Exercise, student_cls, thorough: bool):
    """The reference comparison (weights copied in), then the ValueError past the table."""
    n = ModuleDriver(_learned_cases, outputs=("output",)).run(ex, student_cls, thorough)
    n += _check_learned_dtype(ex, student_cls)
    n += RaisesDriver(_learned_rejects, what="your module").run(ex, student_cls, thorough)
    where = "every device" if thorough else "cpu"
    what = (
        f"forward and gradients in float64 and float32 on {where}, offsets, x's dtype kept, "
        "ValueError past the last row"
    )
    return n, what


LearnedPositionalEmbedding = Exercise(
    name="LearnedPositionalEmbedding",
    lesson="04",
    module="positional",
    reference=_positional.LearnedPositionalEmbedding,
    forbidden=(
        "transformer_lab.positional.LearnedPositionalEmbedding",
        "transformer_lab.LearnedPositionalEmbedding",
    ),
    mistakes=[
        Mistake(
            "no-range-check",
            "a position beyond the table must raise a ValueError that says so (if offset + L > "
            "n_positions: raise ValueError(...)); nn.Embedding's own IndexError does not say "
            "what is wrong.",
            _LearnedNoRangeCheck,
        ),
        Mistake(
            "clamped",
            "positions beyond the table silently reuse rows of it (clamped to the last row, or "
            "wrapped round): raise a ValueError instead, a learned table has no row for a "
            "position it never saw.",
            _LearnedClamped,
        ),
        Mistake(
            "offset-ignored",
            "the `offset` argument is ignored: the tokens sit at positions offset .. offset+L−1, "
            "so add rows offset .. offset+L−1 of the table (rows 0 .. L−1 only when offset = 0).",
            _LearnedOffsetIgnored,
        ),
        Mistake(
            "positions-from-one",
            "your positions start at 1: the first token (with offset 0) gets row 0 of the table.",
            _LearnedFromOne,
        ),
        Mistake(
            "replaces-x",
            "you return the position vectors alone: add them to x (x + p_t), the token "
            "embeddings must stay in the sum.",
            _LearnedReplaces,
        ),
        Mistake(
            "batch-axis-length",
            "the number of positions is read from x.shape[0], the batch size: x is (B, L, "
            "d_model), so the L positions are x.shape[1] (or x.shape[-2]).",
            _LearnedBatchAxis,
        ),
        Mistake(
            "table-dtype",
            "x is cast to the table's dtype, so a float64 x comes back float32: the result keeps "
            "x's dtype, x + rows (PyTorch promotes the sum), or rows.to(x.dtype).",
            _LearnedTableDtype,
        ),
    ],
    driver=CustomDriver(_check_learned),
    doc="LearnedPositionalEmbedding(n_positions, d_model)(x, offset=0) -> x + rows offset .. offset+L-1",
)


# ==============================================================================================
# rotary_embedding(x, positions=None)


# The mistakes make every tensor on x's device, as the exercise asks: a mistake that crashed on a
# GPU would not be named there (the GPU check's catalogue step compares the names on both).
def _rope_angles(x, positions, exponent_scale=1.0):
    L, d = x.shape[-2], x.shape[-1]
    t = torch.arange(L, device=x.device) if positions is None else positions
    two_k = torch.arange(0, d, 2, dtype=torch.float64, device=x.device)
    freq = 10000.0 ** (-two_k * exponent_scale / d)
    angles = t.to(torch.float64)[:, None] * freq[None, :]
    return torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)


def _rotate_pairs(x, cos, sin):
    x_even, x_odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), -1).flatten(-2)


def _rope_negative(x, positions=None):
    cos, sin = _rope_angles(x, positions)
    return _rotate_pairs(x, cos, -sin)


def _rope_rotate_half(x, positions=None):
    cos, sin = _rope_angles(x, positions)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1)


def _rope_k_over_d(x, positions=None):
    cos, sin = _rope_angles(x, positions, exponent_scale=0.5)
    return _rotate_pairs(x, cos, sin)


def _rope_per_feature(x, positions=None):
    L, d = x.shape[-2], x.shape[-1]
    t = torch.arange(L, device=x.device) if positions is None else positions
    j = torch.arange(d, dtype=torch.float64, device=x.device)
    angles = t.to(torch.float64)[:, None] * 10000.0 ** (-j / d)[None, :]  # (L, d)
    rotated = torch.stack((-x[..., 1::2], x[..., 0::2]), -1).flatten(-2)
    return x * torch.cos(angles).to(x.dtype) + rotated * torch.sin(angles).to(x.dtype)


def _rope_positions_ignored(x, positions=None):
    cos, sin = _rope_angles(x, None)
    return _rotate_pairs(x, cos, sin)


def _rope_from_one(x, positions=None):
    t = torch.arange(1, x.shape[-2] + 1, device=x.device) if positions is None else positions
    cos, sin = _rope_angles(x, t)
    return _rotate_pairs(x, cos, sin)


def _rope_cos_sin_swapped(x, positions=None):
    cos, sin = _rope_angles(x, positions)
    return _rotate_pairs(x, sin, cos)


def _rope_overwritten(x, positions=None):
    """Writes the new even features into x first, then reads them back for the odd ones."""
    cos, sin = _rope_angles(x, positions)
    out = x.clone()
    out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    out[..., 1::2] = out[..., 0::2] * sin + x[..., 1::2] * cos
    return out


def _rope_exponent_doubled(x, positions=None):
    """ω_k = 10000^(−2·(2k)/d): the step-2 arange multiplied by 2 once more."""
    cos, sin = _rope_angles(x, positions, exponent_scale=2.0)
    return _rotate_pairs(x, cos, sin)


def _rope_sign_slip(x, positions=None):
    """x_2k cos θ + x_2k+1 sin θ in the first row: not a rotation."""
    cos, sin = _rope_angles(x, positions)
    x_even, x_odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((x_even * cos + x_odd * sin, x_even * sin + x_odd * cos), -1).flatten(-2)


def _rope_second_sign_slip(x, positions=None):
    """x_2k+1 cos θ − x_2k sin θ in the second row: not a rotation."""
    cos, sin = _rope_angles(x, positions)
    x_even, x_odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((x_even * cos - x_odd * sin, x_odd * cos - x_even * sin), -1).flatten(-2)


def _rope_integer_exponent(x, positions=None):
    """arange(0, d, 2) // d on integers: the exponent is 0, so every pair turns at ω = 1."""
    cos, sin = _rope_angles(x, positions, exponent_scale=0.0)
    return _rotate_pairs(x, cos, sin)


def _rotary_cases(thorough: bool) -> list[Case]:
    def case(shape, positions=None, scale=1.0):
        def make(g):
            inputs = {"x": torch.randn(*shape, generator=g, dtype=torch.float64) * scale}
            if positions is not None:
                inputs["positions"] = torch.tensor(positions, dtype=torch.long)
            return inputs

        label = f"x {shape}" + (f", positions {positions}" if positions is not None else "")
        return Case(label, make)

    # x is (..., L, d): a 4-D case (heads) is visible as well
    cases = [case((1, 4, 8)), case((2, 5, 6), positions=[3, 0, 7, 1, 2]), case((2, 3, 6, 8))]
    if thorough:
        cases += [
            case((1, 1, 2)),
            case((5, 4)),
            case((2, 16, 64)),
            case((2, 2, 6, 10), positions=list(range(20, 26))),
            case((3, 7, 4), scale=50.0),
        ]
    return cases


rotary_embedding = Exercise(
    name="rotary_embedding",
    lesson="04",
    module="positional",
    reference=_positional.rotary_embedding,
    forbidden=(
        "transformer_lab.positional.rotary_embedding",
        "transformer_lab.positional._frequencies",
        "transformer_lab.rotary_embedding",
    ),
    mistakes=[
        Mistake(
            "negative-angle",
            "you rotate by −angle: the pair (x_2k, x_2k+1) becomes "
            "(x_2k cos θ − x_2k+1 sin θ, x_2k sin θ + x_2k+1 cos θ) with θ = t·ω_k.",
            _rope_negative,
        ),
        Mistake(
            "rotate-half",
            "rotate-half layout: you pair feature k with feature k + d/2; this exercise pairs "
            "neighbours (2k, 2k+1) (x[..., 0::2] with x[..., 1::2]).",
            _rope_rotate_half,
        ),
        Mistake(
            "k-over-d",
            "the exponent is k/d; pair k turns at ω_k = 10000^(−2k/d).",
            _rope_k_over_d,
        ),
        Mistake(
            "per-feature-frequencies",
            "the frequencies must be one per pair: both features 2k and 2k+1 turn by the "
            "same angle t·ω_k; yours gives every feature its own frequency.",
            _rope_per_feature,
        ),
        Mistake(
            "positions-ignored",
            "the `positions` argument is ignored: use it (and 0 .. L−1 only when it is None).",
            _rope_positions_ignored,
        ),
        Mistake(
            "positions-from-one",
            "the default positions start at 1: without `positions` the rows are at "
            "t = 0, 1, ..., L − 1 (the first row is not rotated).",
            _rope_from_one,
        ),
        Mistake(
            "cos-sin-swapped",
            "cos and sin are swapped: the pair becomes (x_2k cos θ − x_2k+1 sin θ, "
            "x_2k sin θ + x_2k+1 cos θ); at t = 0 the rotation must leave x unchanged.",
            _rope_cos_sin_swapped,
        ),
        Mistake(
            "overwritten-in-place",
            "the odd features are computed from the already rotated even ones: both new "
            "values of a pair must be computed from the old x_2k and x_2k+1 (keep a copy, or "
            "build the result with torch.stack).",
            _rope_overwritten,
        ),
        Mistake(
            "exponent-doubled",
            "the exponent is doubled, 10000^(−2·(2k)/d): arange(0, d, 2) already holds 2k, so "
            "ω_k = 10000^(−arange(0, d, 2)/d).",
            _rope_exponent_doubled,
        ),
        Mistake(
            "sign-slip",
            "the first row has + where − belongs: the pair becomes (x_2k cos θ − x_2k+1 sin θ, "
            "x_2k sin θ + x_2k+1 cos θ), the rotation matrix [[cos, −sin], [sin, cos]].",
            _rope_sign_slip,
        ),
        Mistake(
            "second-row-sign-slip",
            "the second row has − where + belongs: the pair becomes (x_2k cos θ − x_2k+1 sin θ, "
            "x_2k sin θ + x_2k+1 cos θ), the rotation matrix [[cos, −sin], [sin, cos]].",
            _rope_second_sign_slip,
        ),
        Mistake(
            "integer-exponent",
            "every pair turns at the same frequency, ω = 1: the exponent 2k/d was computed on "
            "integers (arange(0, d, 2) // d, or an integer arange), which gives 0; compute it in "
            "floating point, torch.arange(0, d, 2, dtype=x.dtype) / d.",
            _rope_integer_exponent,
        ),
    ],
    driver=FunctionDriver(_rotary_cases, outputs=("output",)),
    doc="rotary_embedding(x, positions=None): rotate pairs (2k, 2k+1) of x by t·ω_k",
)
