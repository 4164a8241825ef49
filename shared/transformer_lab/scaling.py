"""Lesson 12 — attention at scale: cheaper attention, the KV cache's memory, grouped queries.

Exact attention forms an (n, n) score matrix: O(n² d) work and O(n²) memory per head. Four ways
around it, each in a few lines:

    sparse (BigBird)  keep a local band, a few global tokens and a few random keys per query
                      bigbird_mask (n, n) for the usual masked attention, or bigbird_attention,
                      which gathers only the kept keys and never forms the (n, n) matrix
    Linformer         project keys and values along the *sequence* to k rows: scores (n, k)
    Performer         exp(q·k) ≈ φ(q)·φ(k) with positive random features; multiply right to
                      left, φ(Q) (φ(K)ᵀ V), and no (n, n) matrix appears
    FlashAttention    exact, tiled, with an online softmax: see `efficient.tiled_attention`

At generation time the cost that matters is the KV cache: `kv_cache_bytes` gives its size, and
`GroupedQueryAttention` shrinks it by letting groups of query heads share one key/value head.

Masks follow the course's convention (lesson 06): bool, True = may attend.
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import require_min_ndim, require_ndim
from .attention import scaled_dot_product_attention
from .efficient import peak_memory
from .multihead import KVCache, attend, check_inputs, merge_heads, split_heads

__all__ = [
    "GroupedQueryAttention",
    "LinformerSelfAttention",
    "PerformerSelfAttention",
    "bigbird_attention",
    "bigbird_mask",
    "cache_nbytes",
    "crossover",
    "kv_cache_bytes",
    "linformer_attention",
    "performer_attention",
    "performer_features",
    "peak_memory_bytes",
    "pooling_projection",
    "positive_random_features",
    "random_features",
    "repeat_kv",
    "sliding_window_mask",
    "wall_time",
]


def _require_nonneg_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")


# ==============================================================================================
# Sparse attention: a local band, global tokens, random links (BigBird, Zaheer et al., 2020)


def sliding_window_mask(n: int, window: int, causal: bool = False, device=None) -> torch.Tensor:
    """Bool (n, n), True where |i - j| <= window (and j <= i if causal): a local band.

    Each query sees at most 2 * window + 1 keys, so a layer costs O(n · window) scores instead
    of O(n²); information travels `window` positions per layer.
    """
    _require_nonneg_int("n", n)
    _require_nonneg_int("window", window)
    i = torch.arange(n, device=device)
    offset = i[:, None] - i[None, :]  # query - key
    mask = offset.abs() <= window
    return mask & (offset >= 0) if causal else mask


def _random_keys(n: int, n_random: int, seed: int, device=None) -> torch.Tensor:
    """(n, n_random) key indices, n_random per query, from their own seeded stream."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, max(n, 1), (n, n_random), generator=g).to(device)


def bigbird_mask(
    n: int, window: int = 3, n_global: int = 2, n_random: int = 2, seed: int = 0, device=None
) -> torch.Tensor:
    """BigBird's pattern as a bool (n, n) mask, True = may attend.

    - local: |i - j| <= window (`sliding_window_mask`);
    - global: the first n_global tokens attend to every key and every query attends to them, so
      any two tokens are at most two hops apart;
    - random: n_random keys per query, drawn with `seed` (the same ones `bigbird_attention` uses).

    About (2 window + 1 + n_global + n_random) · n entries are True: linear in n. Used as a mask
    for `scaled_dot_product_attention` it is still an (n, n) tensor, and the masked scores are
    still computed; `bigbird_attention` is the version that skips them.
    """
    for name, value in (("n_global", n_global), ("n_random", n_random)):
        _require_nonneg_int(name, value)
    if n_global > n:
        raise ValueError(f"n_global={n_global} is larger than the sequence length n={n}")
    mask = sliding_window_mask(n, window, device=device)
    mask[:n_global, :] = True
    mask[:, :n_global] = True
    if n_random and n:
        rows = torch.arange(n, device=device)[:, None]
        mask[rows, _random_keys(n, n_random, seed, device)] = True
    return mask


def _random_links(
    n: int, window: int, n_global: int, n_random: int, seed: int, device=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The random keys of bigbird_mask, (n, n_random), and which of them are new: not a global
    key, not in the local band, not a repeat within the row (so each key is counted once)."""
    i = torch.arange(n, device=device)[:, None]
    rnd = _random_keys(n, n_random, seed, device)
    new = (rnd >= n_global) & ((rnd - i).abs() > window)
    for j in range(1, n_random):
        new[:, j] &= ~(rnd[:, :j] == rnd[:, j : j + 1]).any(-1)
    return rnd, new


def _windows(t: torch.Tensor, window: int, block: int, n_pad: int) -> torch.Tensor:
    """(..., n, d) -> (..., n_pad / block, block + 2 window, d): for query block b, the keys
    at positions b · block - window ... (b + 1) · block + window - 1 (zeros off the sequence)."""
    padded = F.pad(t, (0, 0, window, n_pad - t.shape[-2] + window))
    return padded.unfold(-2, block + 2 * window, block).transpose(-2, -1)  # a view, no copy


def bigbird_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    window: int = 3,
    n_global: int = 2,
    n_random: int = 2,
    seed: int = 0,
) -> torch.Tensor:
    """Self-attention restricted to `bigbird_mask`, computed block-sparse: no (n, n) tensor.

    Args:
        q, k, v: (..., n, d_k), (..., n, d_k), (..., n, d_v) — self-attention, one length n.
    Returns:
        (..., n, d_v), equal to scaled_dot_product_attention(q, k, v, bigbird_mask(n, ...))[0].

    Each query's scores are three small pieces, normalised by one softmax:
        global   q · the first n_global keys                     (..., n, n_global)
        local    queries in blocks of `window`; a block's keys are one window-sized slice
                 on either side, so this is a batched matmul    (..., n, 3 window)
        random   q · its n_random gathered keys                  (..., n, n_random)
    Keys listed twice (a random key inside the band, ...) are masked out of all but one piece.
    The n_global global queries attend to every key: (n_global, n) scores. Memory O(n · window).
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        require_min_ndim(name, t, 2, "(..., n, d)")
    n = q.shape[-2]
    if k.shape[-2] != n or v.shape[-2] != n:
        raise ValueError(
            f"bigbird_attention is self-attention: q, k, v need the same length, got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    _require_nonneg_int("window", window)
    for name, value in (("n_global", n_global), ("n_random", n_random)):
        _require_nonneg_int(name, value)
    if n_global > n:
        raise ValueError(f"n_global={n_global} is larger than the sequence length n={n}")
    device, scale = q.device, 1 / math.sqrt(q.shape[-1])
    block = max(window, 1)
    n_blocks = -(-n // block)
    n_pad = n_blocks * block
    batch = q.shape[:-2]

    # local: (..., n_blocks, block, d) @ (..., n_blocks, d, block + 2 window)
    q_blocks = F.pad(q, (0, 0, 0, n_pad - n)).reshape(*batch, n_blocks, block, q.shape[-1])
    local = (q_blocks @ _windows(k, window, block, n_pad).transpose(-2, -1)) * scale
    query_pos = torch.arange(n_pad, device=device).view(n_blocks, block, 1)
    key_pos = (
        torch.arange(n_blocks, device=device).view(n_blocks, 1, 1) * block
        - window
        + torch.arange(block + 2 * window, device=device)
    )
    local_ok = ((key_pos - query_pos).abs() <= window) & (key_pos >= n_global) & (key_pos < n)
    local = local.masked_fill(~local_ok, float("-inf")).flatten(-3, -2)[..., :n, :]

    glob = (q @ k[..., :n_global, :].transpose(-2, -1)) * scale  # (..., n, n_global)
    rnd, rnd_ok = _random_links(n, window, n_global, n_random, seed, device)
    rand = torch.einsum("...nd,...nrd->...nr", q, k[..., rnd, :]) * scale
    rand = rand.masked_fill(~rnd_ok, float("-inf"))

    weights = torch.softmax(torch.cat([glob, local, rand], dim=-1), dim=-1)
    w_glob, w_local, w_rand = weights.split([n_global, local.shape[-1], n_random], dim=-1)
    w_local = F.pad(w_local, (0, 0, 0, n_pad - n)).unflatten(-2, (n_blocks, block))
    out = (w_local @ _windows(v, window, block, n_pad)).flatten(-3, -2)[..., :n, :]
    out = out + w_glob @ v[..., :n_global, :]
    out = out + torch.einsum("...nr,...nrd->...nd", w_rand, v[..., rnd, :])
    if n_global:  # global queries see everything
        glob_out, _ = scaled_dot_product_attention(q[..., :n_global, :], k, v)
        out = torch.cat([glob_out, out[..., n_global:, :]], dim=-2)
    return out


# ==============================================================================================
# Linformer (Wang et al., 2020): project keys and values along the sequence axis


def pooling_projection(n: int, k: int) -> torch.Tensor:
    """E (k, n): row i averages the i-th of k blocks of about n / k consecutive positions.

    The simplest fixed Linformer projection (Linformer learns E and F; this one needs no
    training and shows how far the low-rank structure alone goes).
    """
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    E = torch.zeros(k, n)
    for i, block in enumerate(torch.arange(n).chunk(k)):
        E[i, block] = 1.0 / len(block)
    return E


def linformer_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, e: torch.Tensor, f: torch.Tensor
) -> torch.Tensor:
    """softmax(Q (E K)ᵀ / sqrt(d_k)) (F V).

    Args:
        q: (..., n_q, d_k); k: (..., n, d_k); v: (..., n, d_v)
        e, f: (k, n) projections along the sequence (the paper's E and F).
    Returns:
        (..., n_q, d_v). The scores are (n_q, k): O(n k d) work instead of O(n² d).
    """
    for name, t in (("e", e), ("f", f)):
        require_ndim(name, t, 2, "(k, n)")
        if t.shape[1] != k.shape[-2]:
            raise ValueError(
                f"{name} has shape {tuple(t.shape)} but the keys have n={k.shape[-2]} positions: "
                f"{name} must be (k, {k.shape[-2]})"
            )
    out, _ = scaled_dot_product_attention(q, e @ k, f @ v)
    return out


class LinformerSelfAttention(nn.Module):
    """Multi-head self-attention with learned Linformer projections E, F (proj_len, max_len).

    forward(x (B, n, d_model)) -> (B, n, d_model) for any n <= max_len (E and F are cut to
    their first n columns). The paper's k is `proj_len`; E and F are shared across heads.
    Linformer has no mask: every query sees the k projected keys (not causal).
    """

    def __init__(self, d_model: int, n_heads: int, max_len: int, proj_len: int, bias: bool = True):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        if not 1 <= proj_len <= max_len:
            raise ValueError(f"need 1 <= proj_len <= max_len, got {proj_len}, {max_len}")
        self.d_model, self.n_heads, self.max_len, self.proj_len = (
            d_model,
            n_heads,
            max_len,
            proj_len,
        )
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.e = nn.Parameter(torch.randn(proj_len, max_len) / math.sqrt(proj_len))
        self.f = nn.Parameter(torch.randn(proj_len, max_len) / math.sqrt(proj_len))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        require_ndim("x", x, 3, "(B, n, d_model)")
        n = x.shape[1]
        if n > self.max_len:
            raise ValueError(f"sequence length {n} is longer than max_len={self.max_len}")
        q, k, v = (split_heads(w(x), self.n_heads) for w in (self.w_q, self.w_k, self.w_v))
        out = linformer_attention(q, k, v, self.e[:, :n], self.f[:, :n])
        return self.w_o(merge_heads(out))


# ==============================================================================================
# Performer (Choromanski et al., 2021): FAVOR+ positive random features


def _feature_exponent(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """ω·x − |x|²/2 for every direction ω (a row of w): (..., d), (m, d) -> (..., m)."""
    return x @ w.T - (x * x).sum(-1, keepdim=True) / 2


def positive_random_features(x: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
    """φ(x) = exp(ω·x − |x|²/2) / sqrt(m) for the m directions ω (rows of omega): FAVOR+'s "+".

    For ω ~ N(0, I), E[exp(ω·q) exp(ω·k)] = exp(|q + k|²/2), so E[φ(q)·φ(k)] = exp(q·k): the
    softmax kernel, estimated by features that are all positive (unlike sin/cos features, whose
    estimate of a small kernel value can be negative).

    Args:
        x: (..., d), floating point.
        omega: (m, d), the random directions (rows ~ N(0, I), e.g. `random_features`).
    Returns:
        (..., m), every entry > 0 (no stability shift: see `performer_features` for that).
    """
    require_min_ndim("x", x, 1, "(..., d)")
    require_ndim("omega", omega, 2, "(m, d)")
    if omega.shape[1] != x.shape[-1]:
        raise ValueError(
            f"omega must be (m, d) with d = x.shape[-1] = {x.shape[-1]}, got {tuple(omega.shape)}"
        )
    return torch.exp(_feature_exponent(x, omega)) / math.sqrt(omega.shape[0])


def performer_features(x: torch.Tensor, w: torch.Tensor, is_query: bool) -> torch.Tensor:
    """φ(x) = exp(w·x - |x|²/2) / sqrt(m), positive random features: E[φ(q)·φ(k)] = exp(q·k).

    Args:
        x: (..., n, d), already scaled by d^(-1/4) so that q·k carries the 1/sqrt(d).
        w: (m, d) random directions, rows ~ N(0, I).
        is_query: the exponent is shifted by its maximum for stability — per row for queries,
            over the whole (n, m) slice for keys. Both shifts cancel in the normalised output
            (they scale a query's numerator and denominator alike, or every key alike).
    Returns:
        (..., n, m), all entries > 0.
    """
    exponent = _feature_exponent(x, w)  # (..., n, m)
    if is_query:
        shift = exponent.amax(dim=-1, keepdim=True)
    else:
        shift = exponent.amax(dim=(-2, -1), keepdim=True)
    return torch.exp(exponent - shift.detach()) / math.sqrt(w.shape[0])


def random_features(
    m: int, d: int, orthogonal: bool = True, generator: torch.Generator | None = None
) -> torch.Tensor:
    """(m, d) random directions for `performer_features`, each row ~ N(0, I) in distribution.

    orthogonal=True (FAVOR+): rows come in blocks of d mutually orthogonal directions (QR of a
    Gaussian matrix), each rescaled to the length of a Gaussian vector. Still unbiased, with a
    smaller variance than independent rows: fewer features reach the same error.
    """
    if m < 1 or d < 1:
        raise ValueError(f"need m >= 1 and d >= 1, got m={m}, d={d}")
    if not orthogonal:
        return torch.randn(m, d, generator=generator)
    blocks = []
    for _ in range(-(-m // d)):
        q, r = torch.linalg.qr(torch.randn(d, d, generator=generator))
        q = q * torch.sign(torch.diagonal(r))  # fix QR's signs: a uniformly random rotation
        blocks.append(q.T)  # d orthonormal rows
    lengths = torch.randn(m, d, generator=generator).norm(dim=1, keepdim=True)
    return torch.cat(blocks)[:m] * lengths


def performer_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    n_features: int = 256,
    w: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """softmax(Q Kᵀ / sqrt(d_k)) V estimated with m positive random features, in O(n m d).

        out = D⁻¹ φ(Q) (φ(K)ᵀ V),   D = diag(φ(Q) φ(K)ᵀ 1)

    Args:
        q: (..., n_q, d_k); k: (..., n, d_k); v: (..., n, d_v)
        n_features: m, used when `w` is not given: orthogonal `random_features` drawn from
            `generator`.
        w: optional (m, d_k) random directions (fixed features, e.g. a module's buffer).
    Returns:
        (..., n_q, d_v). No (n_q, n) matrix is formed; the error shrinks like 1 / sqrt(m).
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        require_min_ndim(name, t, 2, "(..., n, d)")
    d = q.shape[-1]
    if w is None:
        if n_features < 1:
            raise ValueError(f"n_features must be >= 1, got {n_features}")
        w = random_features(n_features, d, generator=generator).to(q.device, q.dtype)
    elif w.dim() != 2 or w.shape[1] != d:
        raise ValueError(f"w must be (m, d_k={d}), got {tuple(w.shape)}")
    scale = d**-0.25
    phi_q = performer_features(q * scale, w, is_query=True)  # (..., n_q, m)
    phi_k = performer_features(k * scale, w, is_query=False)  # (..., n, m)
    kv = phi_k.transpose(-2, -1) @ v  # (..., m, d_v): right to left, never (n_q, n)
    normaliser = phi_q @ phi_k.sum(-2).unsqueeze(-1)  # (..., n_q, 1), the softmax denominator
    tiny = torch.finfo(normaliser.dtype).tiny  # every feature underflowed: output 0, not 0/0
    return (phi_q @ kv) / normaliser.clamp_min(tiny)


class PerformerSelfAttention(nn.Module):
    """Multi-head self-attention with FAVOR+ features (fixed random directions, a buffer).

    forward(x (B, n, d_model)) -> (B, n, d_model). No mask (not causal).
    """

    def __init__(self, d_model: int, n_heads: int, n_features: int = 64, bias: bool = True):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.d_model, self.n_heads, self.n_features = d_model, n_heads, n_features
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.register_buffer("features", random_features(n_features, d_model // n_heads))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        require_ndim("x", x, 3, "(B, n, d_model)")
        q, k, v = (split_heads(w(x), self.n_heads) for w in (self.w_q, self.w_k, self.w_v))
        return self.w_o(merge_heads(performer_attention(q, k, v, w=self.features)))


# ==============================================================================================
# The KV cache's memory, and grouped-query attention


def kv_cache_bytes(
    n_layers: int,
    n_heads: int,
    d_head: int,
    batch: int,
    length: int,
    dtype_bytes: int,
    n_kv_heads: int | None = None,
) -> int:
    """Bytes of a KV cache: 2 (K and V) · layers · kv heads · d_head · batch · length · bytes.

    n_kv_heads defaults to n_heads (multi-head attention); grouped-query attention caches only
    its n_kv_heads shared heads (1 for multi-query attention).
    """
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    for name, value in (
        ("n_layers", n_layers),
        ("n_heads", n_heads),
        ("n_kv_heads", n_kv_heads),
        ("d_head", d_head),
        ("batch", batch),
        ("length", length),
        ("dtype_bytes", dtype_bytes),
    ):
        _require_nonneg_int(name, value)
    if n_kv_heads > n_heads:
        raise ValueError(f"n_kv_heads={n_kv_heads} is larger than n_heads={n_heads}")
    return 2 * n_layers * n_kv_heads * d_head * batch * length * dtype_bytes


def cache_nbytes(cache: list[KVCache]) -> int:
    """Bytes actually held by a list of KVCache (e.g. GPT.new_cache() after generation)."""
    total = 0
    for layer in cache:
        for t in (layer.k, layer.v):
            if t is not None:
                total += t.numel() * t.element_size()
    return total


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """Grouped-query attention's head mapping: (B, h_kv, L, d) -> (B, h_kv · n_rep, L, d).

    Each key/value head is repeated n_rep times *in place* (interleaved): output head i is input
    head i // n_rep, so query heads 0 .. n_rep − 1 share K/V head 0, the next n_rep head 1, and so
    on. The same as Hugging Face Llama's `repeat_kv` and ``x.repeat_interleave(n_rep, dim=1)``;
    not ``x.repeat(1, n_rep, 1, 1)``, which tiles (head i would read K/V head i mod h_kv).
    """
    require_ndim("x", x, 4, "(B, h_kv, L, d)")
    if isinstance(n_rep, bool) or not isinstance(n_rep, int) or n_rep < 1:
        raise ValueError(f"n_rep must be a positive int, got {n_rep!r}")
    return x.repeat_interleave(n_rep, dim=1)


class GroupedQueryAttention(nn.Module):
    """Grouped-query attention (Ainslie et al., 2023): n_heads query heads, n_kv_heads K/V heads.

    Query head i uses key/value head i // (n_heads / n_kv_heads). n_kv_heads == n_heads is
    multi-head attention (same parameters, same output as `MultiHeadAttention`), n_kv_heads == 1
    is multi-query attention (Shazeer, 2019). w_k and w_v are (d_model -> n_kv_heads · d_k), and
    the KV cache keeps only the n_kv_heads heads: n_heads / n_kv_heads times less memory.

    forward(x, context=None, mask=None, need_weights=False, cache=None):
        x (B, L_q, d_model); context (B, L_k, d_model), defaults to x; mask bool, broadcastable
        to (B, h, L_q, L_k), True = may attend; returns (B, L_q, d_model) (and the weights
        (B, h, L_q, L_k) with need_weights=True). A drop-in `Parts.attention`:
        `Parts(attention=functools.partial(GroupedQueryAttention, n_kv_heads=2))`.
    """

    explicit = False
    supports_cache = True

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = None,
        bias: bool = True,
        dropout: float = 0.0,
    ):
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        if n_kv_heads < 1 or n_heads % n_kv_heads:
            raise ValueError(
                f"n_heads={n_heads} must be a multiple of n_kv_heads={n_kv_heads} (>= 1): each "
                "key/value head serves an equal group of query heads"
            )
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.d_k = d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, n_kv_heads * self.d_k, bias=bias)
        self.w_v = nn.Linear(d_model, n_kv_heads * self.d_k, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.last_weights: torch.Tensor | None = None

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
        cache: KVCache | None = None,
    ):
        context = check_inputs(self, x, context)
        q = split_heads(self.w_q(x), self.n_heads)  # (B, h, L_q, d_k)
        k = split_heads(self.w_k(context), self.n_kv_heads)  # (B, h_kv, L_k, d_k)
        v = split_heads(self.w_v(context), self.n_kv_heads)
        if cache is not None:
            k, v = cache.append(k, v)  # the cache holds the h_kv heads only
        group = self.n_heads // self.n_kv_heads
        k = repeat_kv(k, group)  # (B, h, L_k, d_k): head i reads K/V head i // g
        v = repeat_kv(v, group)
        return attend(self, q, k, v, mask, need_weights)


# ==============================================================================================
# Measuring: wall time and peak memory of one call


def wall_time(fn, repeats: int = 3, warmup: int = 1, clock=time.perf_counter) -> float:
    """Median seconds of fn() over `repeats` calls, after `warmup` untimed ones.

    clock=time.process_time measures the CPU time of this process instead: on a machine shared
    with other programs it is the steadier number (waiting for a core is not counted).
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        times.append(clock() - start)
    return sorted(times)[len(times) // 2]


def peak_memory_bytes(fn) -> int:
    """Peak bytes of CPU tensor memory that fn() holds at once beyond what was live before it.

    `efficient.peak_memory(fn)`: torch.profiler (profile_memory=True) records every allocation
    and free of PyTorch's CPU allocator, inside fused kernels too; this is the peak of their
    running sum, in time order. Tensors that already existed (inputs, weights) do not count; the
    output does (it is allocated inside). Python objects and the allocator's cache are not seen.
    """
    return peak_memory(fn)


def crossover(ns, baseline, values) -> int | None:
    """The first n of `ns` from which on `values` stays below `baseline` (None if it never does).

    ns, baseline, values: equal-length sequences (e.g. sequence lengths, exact attention's
    times, a cheaper method's times).
    """
    if not len(ns) == len(baseline) == len(values):
        raise ValueError(
            f"ns, baseline and values need the same length, got {len(ns)}, {len(baseline)}, "
            f"{len(values)}"
        )
    found = None
    for n, b, v in zip(ns, baseline, values):
        if v < b:
            found = n if found is None else found
        else:
            found = None
    return found
