"""Tests for transformer_lab.gpt: Hugging Face parity, causality, KV cache, sampling, fine-tuning.

Each property check is also run on a deliberately broken variant ("mutant") to show it catches it.
Hugging Face models are built from a small GPT2Config with random weights: nothing downloads.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_lab import gpt as gpt_module
from transformer_lab import set_explicit
from transformer_lab.gpt import (
    GPT,
    GPTClassifier,
    GPTConfig,
    finetune_loss,
    lm_loss,
    sample_next,
    shift_targets,
)
from transformer_lab.masking import causal_mask

V, N_POS, D, H, N_LAYERS = 50, 32, 32, 4, 2
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}
DTYPES = [torch.float32, torch.float64]
DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
    ),
]


# -- helpers --------------------------------------------------------------------------------------


def hf_config(**overrides):
    transformers = pytest.importorskip("transformers")
    kwargs = dict(
        vocab_size=V,
        n_positions=N_POS,
        n_embd=D,
        n_layer=N_LAYERS,
        n_head=H,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
        attn_implementation="eager",
    )
    kwargs.update(overrides)
    return transformers.GPT2Config(**kwargs)


def randomise_(model: nn.Module, seed: int = 0, std: float = 0.2) -> nn.Module:
    """Overwrite every parameter with N(0, std²) noise (LayerNorm γ with 1 + noise).

    GPT-2's own init (std 0.02, γ = 1, β = 0) gives near-uniform logits and would let mistakes
    such as swapping a LayerNorm's weight and bias go unnoticed.
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float64) * std
            is_gamma = p.dim() == 1 and name.endswith("weight")  # LayerNorm γ: around 1
            p.copy_(1 + noise if is_gamma else noise)
    return model


def make_hf(dtype=torch.float32, device="cpu", seed=0, **overrides):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    hf = transformers.GPT2LMHeadModel(hf_config(**overrides))
    return randomise_(hf, seed).to(device=device, dtype=dtype).eval()


def make_gpt(dtype=torch.float32, seed=0, **kw) -> GPT:
    torch.manual_seed(seed)
    args = dict(vocab_size=V, n_positions=N_POS, d_model=D, n_heads=H, n_layers=N_LAYERS)
    args.update(kw)
    return randomise_(GPT(GPTConfig(**args)), seed).to(dtype).eval()


def tokens(B, L, seed=0, device="cpu", vocab=V) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (B, L), generator=g).to(device)


def logit_gap(ours: GPT, hf, idx: torch.Tensor) -> float:
    with torch.no_grad():
        return (ours(idx) - hf(idx).logits).abs().max().item()


@pytest.fixture(scope="module")
def hf32():
    return make_hf(torch.float32)


# -- parity with Hugging Face GPT-2 ----------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,L", [(1, 1), (2, 7), (3, N_POS)])
def test_logits_match_hugging_face(B, L, dtype, device):
    hf = make_hf(dtype, device)
    ours = GPT.from_hf(hf)
    assert ours.wte.weight.dtype == dtype and ours.wte.weight.device.type == device
    idx = tokens(B, L, seed=B * 100 + L, device=device)
    with torch.no_grad():
        expected = hf(idx).logits
        got = ours(idx)
    assert got.shape == (B, L, V)
    torch.testing.assert_close(got, expected, atol=TOL[dtype], rtol=TOL[dtype])
    assert expected.abs().max() > 1.0  # the logits are far from trivially small


def test_from_hf_copies_every_weight(hf32):
    ours = GPT.from_hf(hf32)
    n_hf = sum(p.numel() for p in hf32.parameters())
    assert ours.num_parameters() == n_hf
    assert ours.lm_head.weight is ours.wte.weight
    assert not ours.training
    hf_names = {
        "ln_1.weight",
        "ln_1.bias",
        "attn.c_attn.weight",
        "attn.c_attn.bias",
        "attn.c_proj.weight",
        "attn.c_proj.bias",
        "ln_2.weight",
        "ln_2.bias",
        "mlp.c_fc.weight",
        "mlp.c_fc.bias",
        "mlp.c_proj.weight",
        "mlp.c_proj.bias",
    }
    assert {k.split(".", 3)[-1] for k in hf32.state_dict() if ".h." in k} == hf_names
    block, hf_block = ours.blocks[1], hf32.transformer.h[1]
    w_qkv = torch.cat(
        [block.self_attn.w_q.weight, block.self_attn.w_k.weight, block.self_attn.w_v.weight]
    )
    assert torch.equal(w_qkv.t(), hf_block.attn.c_attn.weight)
    assert torch.equal(block.ffn.w_1.weight.t(), hf_block.mlp.c_fc.weight)


def test_from_hf_accepts_the_bare_gpt2model(hf32):
    ours = GPT.from_hf(hf32.transformer)  # GPT2Model: no lm_head; ours ties it to wte
    idx = tokens(2, 9)
    assert logit_gap(ours, hf32, idx) < 1e-5


def test_from_hf_rejects_an_untied_head():
    hf = make_hf(tie_word_embeddings=False)
    assert not torch.equal(hf.lm_head.weight, hf.transformer.wte.weight)
    with pytest.raises(ValueError, match="tied"):
        GPT.from_hf(hf)


def test_from_hf_rejects_another_activation():
    with pytest.raises(ValueError, match="activation"):
        GPT.from_hf(make_hf(activation_function="relu"))


def test_from_hf_respects_n_inner_and_eps():
    hf = make_hf(n_inner=48, layer_norm_epsilon=1e-3)
    ours = GPT.from_hf(hf)
    assert ours.cfg.d_ff == 48 and ours.blocks[0].ffn.w_1.out_features == 48
    assert ours.cfg.eps == 1e-3 and ours.ln_f.eps == 1e-3
    assert logit_gap(ours, hf, tokens(2, 11)) < 1e-5


def test_to_hf_config_round_trip():
    transformers = pytest.importorskip("transformers")
    for activation in ("gelu", "gelu_tanh"):
        cfg = GPTConfig(V, N_POS, D, H, N_LAYERS, d_ff=40, eps=1e-4, activation=activation)
        ours = GPT(cfg)
        hf = transformers.GPT2LMHeadModel(ours.to_hf_config(attn_implementation="eager"))
        back = GPT.from_hf(hf)
        assert back.cfg == cfg
        assert back.num_parameters() == ours.num_parameters()


@pytest.mark.parametrize("dtype", DTYPES)
def test_loss_and_gradients_match_hugging_face(dtype):
    hf = make_hf(dtype)
    ours = GPT.from_hf(hf)
    idx = tokens(3, 13, seed=5)
    targets = shift_targets(idx)
    loss_hf = lm_loss(hf(idx).logits, targets)  # HF's own loss upcasts to float32
    loss_ours = ours.loss(idx, targets)
    tol = TOL[dtype]
    torch.testing.assert_close(loss_ours, loss_hf, atol=tol, rtol=tol)
    if dtype == torch.float32:  # HF's labels= path shifts the targets itself
        torch.testing.assert_close(loss_ours, hf(idx, labels=idx).loss, atol=tol, rtol=tol)
    loss_hf.backward()
    loss_ours.backward()
    for g_ours, g_hf in gradient_pairs(ours, hf):
        torch.testing.assert_close(g_ours, g_hf, atol=10 * tol, rtol=10 * tol)


def gradient_pairs(ours: GPT, hf):
    """(our gradient, HF gradient) for the embeddings, ln_f and every block's main weights."""
    t = hf.transformer
    pairs = [
        (ours.wte.weight.grad, t.wte.weight.grad),  # tied: both uses of W_e add up here
        (ours.wpe.weight.grad, t.wpe.weight.grad),
        (ours.ln_f.weight.grad, t.ln_f.weight.grad),
        (ours.ln_f.bias.grad, t.ln_f.bias.grad),
    ]
    for block, hf_block in zip(ours.blocks, t.h):
        a = block.self_attn
        w_qkv = torch.cat([a.w_q.weight.grad, a.w_k.weight.grad, a.w_v.weight.grad]).t()
        pairs += [
            (w_qkv, hf_block.attn.c_attn.weight.grad),
            (a.w_o.weight.grad.t(), hf_block.attn.c_proj.weight.grad),
            (block.ffn.w_1.weight.grad.t(), hf_block.mlp.c_fc.weight.grad),
            (block.norm1.weight.grad, hf_block.ln_1.weight.grad),
        ]
    return pairs


# mutants: each breaks the model in one plausible way; the parity checks must notice.


def test_mutant_missing_ln_f_fails_parity(hf32):
    ours = GPT.from_hf(hf32)
    ours.ln_f = nn.Identity()
    assert logit_gap(ours, hf32, tokens(2, 9)) > 1e-2


def test_mutant_wrong_qkv_split_order_fails_parity(hf32, monkeypatch):
    original = gpt_module._split_c_attn

    def k_q_v(weight, bias, d_model):
        q, k, v = original(weight, bias, d_model)
        return [k, q, v]

    monkeypatch.setattr(gpt_module, "_split_c_attn", k_q_v)
    assert logit_gap(GPT.from_hf(hf32), hf32, tokens(2, 9)) > 1e-2


def test_mutant_conv1d_not_transposed_fails_parity(monkeypatch):
    hf = make_hf(n_inner=D)  # every projection square, so the mistake loads without a shape error
    assert logit_gap(GPT.from_hf(hf), hf, tokens(2, 9)) < 1e-5
    monkeypatch.setattr(gpt_module, "_conv1d_to_linear", lambda w: w)
    assert logit_gap(GPT.from_hf(hf), hf, tokens(2, 9)) > 1e-2


def test_mutant_no_causal_mask_fails_parity(hf32, monkeypatch):
    monkeypatch.setattr(GPT, "_attention_mask", lambda self, L_q, L_k, device: None)
    assert logit_gap(GPT.from_hf(hf32), hf32, tokens(2, 9)) > 1e-2


def test_mutant_untied_head_fails_gradient_parity():
    """An untied copy of W_e gives the same logits at load time but the wrong wte gradient."""
    hf = make_hf(torch.float64)
    ours = GPT.from_hf(hf)
    ours.lm_head.weight = nn.Parameter(ours.wte.weight.detach().clone())
    idx = tokens(2, 9)
    assert logit_gap(ours, hf, idx) < 1e-10  # forward parity alone cannot see it
    lm_loss(hf(idx).logits, shift_targets(idx)).backward()
    ours.loss(idx, shift_targets(idx)).backward()
    g_ours, g_hf = gradient_pairs(ours, hf)[0]
    assert (g_ours - g_hf).abs().max() > 1e-4


def test_mutant_unshifted_targets_fail_loss_parity(hf32):
    ours = GPT.from_hf(hf32)
    idx = tokens(2, 9)
    with torch.no_grad():
        loss_hf = hf32(idx, labels=idx).loss
        assert abs(ours.loss(idx, shift_targets(idx)) - loss_hf) < 1e-5
        assert abs(ours.loss(idx, idx) - loss_hf) > 1e-2  # predicting the current token


# -- the model on its own --------------------------------------------------------------------------


def assert_causal(model: GPT, idx: torch.Tensor, t: int) -> None:
    """Changing token t must leave the logits at positions < t unchanged and change those at t."""
    changed = idx.clone()
    changed[:, t] = (changed[:, t] + 1) % model.vocab_size
    with torch.no_grad():
        before, after = model(idx), model(changed)
    torch.testing.assert_close(after[:, :t], before[:, :t], atol=0, rtol=0)
    assert (after[:, t:] - before[:, t:]).abs().amax(dim=-1).min() > 1e-6


@pytest.mark.parametrize("dtype", DTYPES)
def test_future_tokens_do_not_change_past_logits(dtype):
    model = make_gpt(dtype)
    idx = tokens(2, 12, seed=3)
    for t in (1, 6, 11):
        assert_causal(model, idx, t)


def test_mutant_without_mask_leaks_the_future(monkeypatch):
    monkeypatch.setattr(GPT, "_attention_mask", lambda self, L_q, L_k, device: None)
    with pytest.raises(AssertionError):
        assert_causal(make_gpt(), tokens(2, 12, seed=3), 6)


def test_head_stays_tied_during_training():
    model = make_gpt().train()
    assert model.lm_head.weight is model.wte.weight
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    idx = tokens(4, 10)
    before = model.wte.weight.detach().clone()
    model.loss(idx, shift_targets(idx)).backward()
    opt.step()
    assert not torch.equal(model.wte.weight, before)
    assert torch.equal(model.lm_head.weight, model.wte.weight)


def test_forward_pass_follows_the_equations():
    """h_0 = U W_e + W_p, pre-norm blocks under a causal mask, ln_f, logits = h_n W_eᵀ."""
    model = make_gpt(torch.float64)
    idx = tokens(2, 8)
    L = idx.shape[1]
    h = model.wte.weight[idx] + model.wpe.weight[:L]
    for block in model.blocks:
        h = block(h, mask=causal_mask(L))
    expected = model.ln_f(h) @ model.wte.weight.t()
    with torch.no_grad():
        torch.testing.assert_close(model(idx), expected, atol=1e-12, rtol=1e-12)


def test_default_sizes_and_gpt2_small_parameter_count():
    model = GPT(GPTConfig(V, N_POS, D, H, N_LAYERS))
    assert model.blocks[0].ffn.w_1.out_features == 4 * D and model.blocks[0].norm_first
    assert model.blocks[0].ffn.activation == "gelu"  # nanoGPT's exact GELU: trained from scratch
    with torch.device("meta"):  # GPT-2 small without allocating memory
        small = GPT(GPTConfig(50257, 1024, 768, 12, 12, activation="gelu_tanh"))
    assert small.num_parameters() == 124_439_808
    assert small.num_parameters(exclude_embeddings=True) == 124_439_808 - 50257 * 768 - 1024 * 768


def test_residual_projections_get_the_scaled_init():
    torch.manual_seed(0)
    model = GPT(GPTConfig(V, N_POS, 64, 4, 8))
    std_w_o = torch.cat([b.self_attn.w_o.weight.flatten() for b in model.blocks]).std().item()
    std_w_q = torch.cat([b.self_attn.w_q.weight.flatten() for b in model.blocks]).std().item()
    assert std_w_q == pytest.approx(0.02, rel=0.05)
    assert std_w_o == pytest.approx(0.02 / 4.0, rel=0.05)  # 0.02 / sqrt(2 * 8)


def test_clear_errors_on_wrong_input():
    model = make_gpt()
    with pytest.raises(ValueError, match="n_positions=32"):
        model(tokens(1, N_POS + 1))
    with pytest.raises(ValueError, match="vocabulary has 50"):
        model(torch.tensor([[1, 2, V]]))
    with pytest.raises(ValueError, match="vocabulary"):
        model(torch.tensor([[1, -1]]))
    with pytest.raises(TypeError, match="integer token ids"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"\(B, L\)"):
        model(torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="new_cache"):
        model(tokens(1, 3), cache=[])
    with pytest.raises(ValueError, match=r"4 cached \+ 29 new"):
        cache = model.new_cache()
        model(tokens(1, 4), cache=cache)
        model(tokens(1, 29), cache=cache)


# -- the KV cache ----------------------------------------------------------------------------------


def cached_logits(model: GPT, idx: torch.Tensor, chunks: list[int]) -> torch.Tensor:
    """Logits of idx computed chunk by chunk through one KV cache."""
    cache, out, start = model.new_cache(), [], 0
    with torch.no_grad():
        for n in chunks:
            out.append(model(idx[:, start : start + n], cache=cache))
            start += n
    assert start == idx.shape[1] and len(cache[0]) == start
    return torch.cat(out, dim=1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cache_gives_the_same_logits_as_recomputation(dtype):
    model = make_gpt(dtype)
    idx = tokens(3, 20, seed=7)
    with torch.no_grad():
        full = model(idx)
    chunks = [5, 1, 1, 3, 1, 4, 1, 1, 2, 1]  # a prompt, single tokens, and multi-token chunks
    tol = TOL[dtype]
    torch.testing.assert_close(cached_logits(model, idx, chunks), full, atol=tol, rtol=tol)


def test_position_rows_equal_the_embedding_lookup(monkeypatch):
    """hidden_states adds a slice of W_p: the same loss and gradients as nn.Embedding's lookup
    of torch.arange (what nanoGPT runs)."""
    idx = tokens(2, 10)

    def loss_and_grads(model):
        model.zero_grad()
        model.loss(idx, shift_targets(idx)).backward()
        return [p.grad.clone() for p in model.parameters()]

    model = make_gpt()
    sliced = loss_and_grads(model)
    lookup = lambda self, offset, L: self.wpe(torch.arange(offset, offset + L))  # noqa: E731
    monkeypatch.setattr(GPT, "_position_rows", lookup)
    for ours, theirs in zip(sliced, loss_and_grads(model)):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)


def test_mutant_positions_not_offset_by_the_cache(monkeypatch):
    model, idx = make_gpt(), tokens(2, 10)
    with torch.no_grad():
        full = model(idx)
    monkeypatch.setattr(GPT, "_position_rows", lambda self, offset, L: self.wpe.weight[:L])
    assert (cached_logits(model, idx, [4, 1, 1, 4]) - full).abs().max() > 1e-2


@pytest.mark.parametrize("rows", ["no mask with a cache", "first rows"])
def test_mutant_wrong_mask_for_a_cached_chunk(monkeypatch, rows):
    model, idx = make_gpt(), tokens(2, 10)
    with torch.no_grad():
        full = model(idx)
    if rows == "no mask with a cache":
        mutant = lambda self, L_q, L_k, device: causal_mask(L_q) if L_q == L_k else None
    else:
        mutant = lambda self, L_q, L_k, device: causal_mask(L_k)[:L_q]
    monkeypatch.setattr(GPT, "_attention_mask", mutant)
    assert (cached_logits(model, idx, [4, 1, 1, 4]) - full).abs().max() > 1e-2


@pytest.mark.parametrize("dtype", DTYPES)
def test_greedy_generation_with_cache_equals_recomputation_past_the_crop(dtype):
    model = make_gpt(dtype, n_positions=16)
    prompt = tokens(2, 5, seed=11)
    n_new = 20  # 5 + 20 > 16: the last steps run on a cropped context
    out_c, logits_c = model.generate(prompt, n_new, temperature=0, return_logits=True)
    out_r, logits_r = model.generate(
        prompt, n_new, temperature=0, use_cache=False, return_logits=True
    )
    assert out_c.shape == (2, 5 + n_new) and torch.equal(out_c[:, :5], prompt)
    assert torch.equal(out_c, out_r)
    tol = TOL[dtype]
    torch.testing.assert_close(logits_c, logits_r, atol=tol, rtol=tol)
    # independent reference: each step is the argmax of a plain forward pass on the last 16 tokens
    with torch.no_grad():
        for step in range(n_new):
            context = out_c[:, : 5 + step][:, -16:]
            expected = model(context)[:, -1]
            torch.testing.assert_close(logits_c[:, step], expected, atol=tol, rtol=tol)
            assert torch.equal(out_c[:, 5 + step], expected.argmax(-1))


def test_sampled_generation_with_cache_equals_recomputation():
    model = make_gpt(n_positions=16)
    prompt = tokens(3, 4, seed=2)
    runs = [
        model.generate(
            prompt,
            20,
            temperature=0.8,
            top_k=10,
            generator=torch.Generator().manual_seed(1),
            use_cache=c,
        )
        for c in (True, False)
    ]
    assert torch.equal(runs[0], runs[1])


def test_generate_crops_a_long_prompt_and_restores_the_mode():
    model = make_gpt().train()
    prompt = tokens(1, N_POS + 8, seed=4)
    out = model.generate(prompt, 3, temperature=0)
    assert model.training
    assert out.shape == (1, N_POS + 11) and torch.equal(out[:, : N_POS + 8], prompt)
    with torch.no_grad():
        expected = model.eval()(prompt[:, -N_POS:])[:, -1].argmax(-1)
    assert torch.equal(out[:, N_POS + 8], expected)
    assert torch.equal(model.generate(prompt, 0), prompt)
    with pytest.raises(ValueError, match="max_new_tokens"):
        model.generate(prompt, -1)


def test_mutant_cache_never_reset_breaks_past_n_positions(monkeypatch):
    """Without the fallback to recomputation, generation runs off the position table."""
    model = make_gpt(n_positions=8)

    def generate_no_crop(self, idx, max_new_tokens):
        cache = self.new_cache()
        logits = self(idx, cache=cache)
        for _ in range(max_new_tokens):
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            idx = torch.cat([idx, nxt], dim=1)
            logits = self(nxt, cache=cache)
        return idx

    with torch.no_grad():
        assert model.generate(tokens(1, 3), 10, temperature=0).shape == (1, 13)
        with pytest.raises(ValueError, match="n_positions"):
            generate_no_crop(model, tokens(1, 3), 10)


# -- sampling --------------------------------------------------------------------------------------


def random_logits(B=4, V=20, seed=0, scale=1.0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, V, generator=g, dtype=torch.float64) * scale).to(dtype)


def check_greedy(sample):
    logits = random_logits(B=64, V=50, scale=3.0)
    assert torch.equal(sample(logits, top_k=1), logits.argmax(-1))
    assert torch.equal(sample(logits, temperature=0), logits.argmax(-1))


def check_top_k(sample, k=5):
    logits = random_logits(B=1, V=20, scale=0.5).expand(4000, 20)  # all tokens are plausible
    ids = sample(logits, top_k=k, generator=torch.Generator().manual_seed(0))
    allowed = set(torch.topk(logits[0], k).indices.tolist())
    assert set(ids.tolist()) <= allowed, "sampled a token outside the top k"
    assert set(ids.tolist()) == allowed, "some of the top k never came up"


def check_low_temperature(sample):
    logits = random_logits(B=1, V=20, scale=1.0).expand(2000, 20)
    ids = sample(logits, temperature=1e-3, generator=torch.Generator().manual_seed(0))
    assert (ids == logits[0].argmax()).all()


def check_temperature_distribution(sample, T=2.0, n=40000):
    logits = random_logits(B=1, V=8, scale=2.0)
    ids = sample(logits.expand(n, 8), temperature=T, generator=torch.Generator().manual_seed(0))
    freq = torch.bincount(ids, minlength=8).double() / n
    expected = torch.softmax(logits[0].double() / T, dim=-1)
    assert (freq - expected).abs().max() < 0.015, f"frequencies {freq} vs {expected}"


CHECKS = [check_greedy, check_top_k, check_low_temperature, check_temperature_distribution]


@pytest.mark.parametrize("check", CHECKS)
def test_sample_next_properties(check):
    check(sample_next)


def mutant_top_k_keeps_one_more(logits, temperature=1.0, top_k=None, generator=None):
    return sample_next(logits, temperature, None if top_k is None else top_k + 1, generator)


def mutant_temperature_multiplies(logits, temperature=1.0, top_k=None, generator=None):
    if temperature == 0:
        return logits.argmax(-1)
    return sample_next(logits * temperature, 1.0, top_k, generator)


def mutant_greedy_ignored(logits, temperature=1.0, top_k=None, generator=None):
    return sample_next(logits, temperature or 1.0, None if top_k == 1 else top_k, generator)


@pytest.mark.parametrize(
    "mutant,check",
    [
        (mutant_top_k_keeps_one_more, check_top_k),
        (mutant_temperature_multiplies, check_low_temperature),
        (mutant_temperature_multiplies, check_temperature_distribution),
        (mutant_greedy_ignored, check_greedy),
    ],
)
def test_sampling_checks_catch_mutants(mutant, check):
    with pytest.raises(AssertionError):
        check(mutant)


def test_seeded_generator_is_reproducible():
    logits = random_logits(B=16, V=30)
    draw = lambda seed: sample_next(logits, generator=torch.Generator().manual_seed(seed))
    assert torch.equal(draw(3), draw(3))
    assert not torch.equal(draw(3), draw(4))
    assert draw(3).shape == (16,) and draw(3).dtype == torch.long


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_sample_next_other_dtypes(dtype):
    logits = random_logits(B=3, V=10, dtype=dtype)
    ids = sample_next(logits, top_k=3, generator=torch.Generator().manual_seed(0))
    assert ids.shape == (3,) and ((ids >= 0) & (ids < 10)).all()
    assert sample_next(logits, top_k=100).shape == (3,)  # k above V keeps everything


def test_sample_next_rejects_invalid_arguments():
    logits = random_logits()
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="temperature"):
            sample_next(logits, temperature=bad)
    for bad in (0, -3, 1.5, True):
        with pytest.raises(ValueError, match="top_k"):
            sample_next(logits, top_k=bad)
    with pytest.raises(ValueError, match=r"\(B, V\)"):
        sample_next(logits[0])
    with pytest.raises(TypeError, match="floating point"):
        sample_next(torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="temperature"):
        sample_next(logits, temperature="hot")


# -- fine-tuning -----------------------------------------------------------------------------------


def test_classifier_matches_hugging_face_sequence_classification():
    transformers = pytest.importorskip("transformers")
    pad = V - 1
    torch.manual_seed(0)
    hf = transformers.GPT2ForSequenceClassification(hf_config(num_labels=3, pad_token_id=pad))
    hf = randomise_(hf).eval()
    cls = GPTClassifier(GPT.from_hf(hf.transformer), n_classes=3, pad_id=pad).eval()
    with torch.no_grad():
        cls.w_y.weight.copy_(hf.score.weight)
    idx = tokens(3, 9, vocab=V - 1)
    idx[0, 6:] = pad  # right padding of different lengths
    idx[1, 3:] = pad
    with torch.no_grad():
        expected = hf(idx).logits
        torch.testing.assert_close(cls(idx), expected, atol=1e-5, rtol=1e-5)
        # mutant: reading the last position regardless of padding
        cls.pad_id = None
        assert (cls(idx)[:2] - expected[:2]).abs().max() > 1e-2


def test_classifier_ignores_right_padding_and_returns_lm_logits():
    pad = V - 1
    gpt = make_gpt(torch.float64)
    cls = GPTClassifier(gpt, n_classes=4, pad_id=pad).double()
    idx = tokens(1, 6, vocab=V - 1)
    padded = torch.cat([idx, torch.full((1, 4), pad)], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(cls(padded), cls(idx), atol=1e-12, rtol=0)
        cls_logits, lm_logits = cls(idx, return_lm_logits=True)
        torch.testing.assert_close(lm_logits, gpt(idx))
        h_last = gpt.hidden_states(idx)[:, -1]
        torch.testing.assert_close(cls_logits, h_last @ cls.w_y.weight.t())
    with pytest.raises(ValueError, match="only padding"):
        cls(torch.full((2, 3), pad))


def test_finetune_loss_is_l2_plus_lambda_l1():
    g = torch.Generator().manual_seed(0)
    cls_logits = torch.randn(4, 3, generator=g, dtype=torch.float64)
    labels = torch.tensor([0, 2, 1, 2])
    lm_logits = torch.randn(4, 6, V, generator=g, dtype=torch.float64)
    idx = torch.randint(0, V, (4, 6), generator=g)
    targets = shift_targets(idx)
    # written out by hand: mean negative log-likelihoods
    L2 = -torch.log_softmax(cls_logits, -1)[torch.arange(4), labels].mean()
    logp = torch.log_softmax(lm_logits[:, :-1], -1)
    L1 = -logp.gather(-1, idx[:, 1:, None]).mean()
    for lam in (0.0, 0.5, 2.0):
        got = finetune_loss(cls_logits, labels, lm_logits, targets, lam)
        torch.testing.assert_close(got, L2 + lam * L1, atol=1e-12, rtol=0)
    swapped = L1 + 0.5 * L2  # mutant: λ on the wrong term
    assert abs(finetune_loss(cls_logits, labels, lm_logits, targets, 0.5) - swapped) > 1e-3
    with pytest.raises(ValueError, match="lam"):
        finetune_loss(cls_logits, labels, lm_logits, targets, -1.0)
    with pytest.raises(ValueError, match="targets"):
        finetune_loss(cls_logits, labels, lm_logits, targets[:, :-1], 0.5)


def test_finetune_step_trains_both_heads():
    pad = V - 1
    cls = GPTClassifier(make_gpt(), n_classes=2, pad_id=pad).train()
    idx = tokens(4, 8, vocab=V - 1)
    idx[0, 5:] = pad
    labels = torch.tensor([0, 1, 1, 0])
    cls_logits, lm_logits = cls(idx, return_lm_logits=True)
    loss = finetune_loss(cls_logits, labels, lm_logits, shift_targets(idx, pad_id=pad), lam=0.5)
    loss.backward()
    assert cls.w_y.weight.grad.abs().sum() > 0 and cls.gpt.wte.weight.grad.abs().sum() > 0


def test_shift_targets_and_lm_loss():
    idx = torch.tensor([[5, 6, 7, 0, 0]])
    assert shift_targets(idx).tolist() == [[6, 7, 0, 0, -100]]
    assert shift_targets(idx, pad_id=0).tolist() == [[6, 7, -100, -100, -100]]
    logits = torch.randn(1, 5, 9, dtype=torch.float64)
    expected = F.cross_entropy(logits[0, :2], torch.tensor([6, 7]))
    torch.testing.assert_close(lm_loss(logits, shift_targets(idx, pad_id=0)), expected)


# -- the activation: GPT-2's tanh GELU or the exact one ------------------------------------------


def test_activation_is_a_choice_with_the_exact_gelu_by_default():
    assert make_gpt().cfg.activation == "gelu"
    for activation, function in [
        ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")),
        ("gelu", F.gelu),
    ]:
        model = make_gpt(torch.float64, activation=activation)
        ffn = model.blocks[0].ffn
        x = torch.randn(2, 3, D, dtype=torch.float64)
        torch.testing.assert_close(ffn(x), ffn.w_2(function(ffn.w_1(x))), atol=1e-12, rtol=0)
        assert all(b.ffn.activation == activation for b in model.blocks)
    with pytest.raises(ValueError, match="activation"):
        GPTConfig(V, N_POS, D, H, N_LAYERS, activation="swish")


@pytest.mark.parametrize("hf_name,ours", [("gelu_new", "gelu_tanh"), ("gelu", "gelu")])
def test_from_hf_sets_the_activation_and_matches_hugging_face(hf_name, ours):
    hf = make_hf(activation_function=hf_name)
    model = GPT.from_hf(hf)
    assert model.cfg.activation == ours
    assert logit_gap(model, hf, tokens(2, 11)) < 1e-5
    assert model.to_hf_config().activation_function == hf_name


@pytest.mark.parametrize("hf_name,wrong", [("gelu_new", "gelu"), ("gelu", "gelu_tanh")])
def test_mutant_from_hf_with_the_other_gelu_fails_parity(monkeypatch, hf_name, wrong):
    hf = make_hf(activation_function=hf_name)
    monkeypatch.setitem(gpt_module._FROM_HF_ACTIVATION, hf_name, wrong)
    assert logit_gap(GPT.from_hf(hf), hf, tokens(2, 11)) > 1e-4


# -- the fast path (fused QKV product, the kernel's own causal mask) equals the written-out one ---


def fused_and_explicit(module: nn.Module, run) -> list[list[torch.Tensor]]:
    """[fused, explicit]: for each path, run(module)'s output and the gradients of its squares
    with respect to every parameter of `module`."""
    results = []
    for explicit in (False, True):
        set_explicit(module, explicit)
        out = run(module)
        grads = torch.autograd.grad(out.square().sum(), list(module.parameters()))
        results.append([out, *grads])
    set_explicit(module, False)
    return results


def assert_paths_equal(results, tol=1e-10) -> None:
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)


def gpt2_block_masks(B: int, L: int) -> dict[str, tuple[torch.Tensor, bool]]:
    """(mask, is_causal) for GPT's causal mask (with the hint), and with padding (without)."""
    keep = torch.ones(B, L, dtype=torch.bool)
    keep[0, L - 3 :] = False  # the first row's last 3 keys are padding
    causal = causal_mask(L)
    return {
        "causal, is_causal": (causal, True),
        "causal and padding": (causal & keep[:, None, None, :], False),
        "padding only": (keep[:, None, None, :], False),
    }


@pytest.mark.parametrize("kind", ["causal, is_causal", "causal and padding", "padding only"])
def test_block_fused_path_equals_explicit_path(kind):
    model = make_gpt(torch.float64)
    x = torch.randn(3, 9, D, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    mask, is_causal = gpt2_block_masks(3, 9)[kind]
    results = fused_and_explicit(model.blocks[0], lambda b: b(x, mask=mask, is_causal=is_causal))
    assert_paths_equal(results)


def test_mutant_kernel_causal_despite_padding_is_caught(monkeypatch):
    """A fast path that lets the kernel mask causally whenever it gets a square mask (and so
    drops the padding) must differ from the written-out path."""
    from transformer_lab import multihead

    def causal_whenever_square(q, k, v, mask=None, dropout_p=0.0, is_causal=False):
        square = mask is not None and q.shape[-2] == k.shape[-2]
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=None if square else mask, dropout_p=dropout_p, is_causal=square
        )

    monkeypatch.setattr(multihead, "fused_attention", causal_whenever_square)
    model = make_gpt(torch.float64)
    x = torch.randn(3, 9, D, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    mask, _ = gpt2_block_masks(3, 9)["causal and padding"]
    results = fused_and_explicit(model.blocks[0], lambda b: b(x, mask=mask))
    with pytest.raises(AssertionError):
        assert_paths_equal(results)


def test_is_causal_with_another_mask_is_refused():
    block = make_gpt().blocks[0]
    x = torch.randn(3, 9, D)
    mask, _ = gpt2_block_masks(3, 9)["causal and padding"]
    with pytest.raises(ValueError, match="is_causal=True says the mask is the causal mask"):
        block(x, mask=mask, is_causal=True)
    with pytest.raises(ValueError, match="is_causal"):
        block(x, mask=None, is_causal=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gpt_fused_path_equals_explicit_path_and_keeps_its_parameters(dtype):
    model = make_gpt(dtype)
    keys = {k for k in model.state_dict() if ".self_attn." in k and k.startswith("blocks.0.")}
    assert keys == {f"blocks.0.self_attn.w_{n}.{p}" for n in "qkvo" for p in ("weight", "bias")}
    idx = tokens(3, 20, seed=5)
    tol = TOL[dtype] * 10
    assert_paths_equal(fused_and_explicit(model, lambda m: m(idx)), tol)
    # through the cache: a prompt, single tokens and multi-token chunks
    set_explicit(model, True)
    with torch.no_grad():
        explicit = model(idx)
    set_explicit(model, False)
    got = cached_logits(model, idx, [5, 1, 3, 1, 4, 6])
    torch.testing.assert_close(got, explicit, atol=tol, rtol=tol)


def test_mutant_is_causal_passed_with_a_cached_prefix_is_refused(monkeypatch):
    """is_causal at every mask would be wrong for a chunk after cached positions (its mask is the
    last rows of the causal mask, not a causal mask of its own): attend refuses it."""
    original = gpt_module.GPTBlock.forward

    def hint_whenever_masked(self, x, mask=None, cache=None, is_causal=False):
        return original(self, x, mask=mask, cache=cache, is_causal=mask is not None)

    monkeypatch.setattr(gpt_module.GPTBlock, "forward", hint_whenever_masked)
    model, idx = make_gpt(), tokens(2, 10)
    model(idx)  # no cache: the hint is right
    with pytest.raises(ValueError, match="is_causal"):
        cached_logits(model, idx, [4, 1, 1, 4])
