"""The encoder–decoder Transformer: shapes, padding invariance, causality, decoding, training.

Like test_core_parity.py, each property is a `check_*` function that raises AssertionError; the
`test_mutant_*` tests break the reference (monkeypatch) and assert that the check then FAILS.
"""

from __future__ import annotations

import itertools

import pytest
import torch

import transformer_lab.encoder_decoder as encoder_decoder_mod
from transformer_lab.encoder_decoder import (
    Transformer,
    TransformerConfig,
    beam_search,
    greedy_decode,
    length_normalised_score,
)

PAD, BOS, EOS = 0, 1, 2


def tiny_model(vocab=7, seed=0, dtype=torch.float64, device="cpu", **kwargs) -> Transformer:
    torch.manual_seed(seed)
    config = dict(d_model=16, n_heads=2, n_layers=2, d_ff=32, dropout=0.0, max_len=32, pad_id=PAD)
    model = Transformer(TransformerConfig(vocab, vocab, **{**config, **kwargs}))
    return model.to(device=device, dtype=dtype).eval()


def random_tokens(B, L, vocab, seed=0, device="cpu") -> torch.Tensor:
    """Tokens in 3..vocab-1 (never PAD, BOS or EOS)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (B, L), generator=gen).to(device)


# ----------------------------------------------------------------------------- shapes


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_shapes(norm_first, device, dtype):
    model = tiny_model(vocab=9, norm_first=norm_first, dtype=dtype, device=device)
    src = random_tokens(3, 6, 9, device=device)
    src[0, 4:] = PAD
    tgt_in = random_tokens(3, 4, 9, seed=1, device=device)
    logits = model(src, tgt_in)
    assert logits.shape == (3, 4, 9) and logits.dtype == dtype and torch.isfinite(logits).all()
    memory, src_mask = model.encode(src)
    assert memory.shape == (3, 6, 16) and src_mask.shape == (3, 1, 1, 6)
    assert src_mask.dtype == torch.bool and not src_mask[0, 0, 0, 4:].any()
    weights = model.cross_attention_weights(src, tgt_in)
    assert len(weights) == 2 and all(w.shape == (3, 2, 4, 6) for w in weights)
    for w in weights:
        torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))
        assert (w[0, ..., 4:] == 0).all(), "padding in the source must get zero cross-attention"
    assert not any(block.cross_attn.explicit for block in model.decoder)  # restored afterwards
    with pytest.raises(ValueError, match=r"\(B, L_s\)"):
        model.encode(src[0])


# ----------------------------------------------------------------------------- padding


def check_pad_invariance(model):
    """Appending padding to a source changes neither its memory (at real positions) nor the logits,
    and a short source gives the same logits alone and padded inside a batch."""
    src = random_tokens(2, 5, 7, seed=2)
    tgt_in = torch.cat([torch.full((2, 1), BOS), random_tokens(2, 3, 7, seed=3)], dim=1)
    padded = torch.cat([src, torch.full((2, 3), PAD)], dim=1)
    memory, _ = model.encode(src)
    memory_padded, _ = model.encode(padded)
    tol = {"atol": 1e-10, "rtol": 1e-8}
    torch.testing.assert_close(memory_padded[:, :5], memory, **tol)
    torch.testing.assert_close(model(padded, tgt_in), model(src, tgt_in), **tol)
    longer = random_tokens(1, 8, 7, seed=4)
    batch = torch.cat([padded[:1], longer])  # the short one padded to the longer one's length
    torch.testing.assert_close(model(batch, tgt_in)[:1], model(src[:1], tgt_in[:1]), **tol)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_source_padding_does_not_change_outputs(norm_first):
    check_pad_invariance(tiny_model(norm_first=norm_first))


def test_mutant_without_padding_mask_is_caught(monkeypatch):
    def no_padding_mask(tokens, pad_id):
        return torch.ones_like(tokens, dtype=torch.bool)[:, None, None, :]

    monkeypatch.setattr(encoder_decoder_mod, "padding_mask", no_padding_mask)
    with pytest.raises(AssertionError):
        check_pad_invariance(tiny_model())


# ----------------------------------------------------------------------------- causality


def check_decoder_causality(model, L=6):
    """Changing target token j changes no logit before position j (and does change later ones)."""
    src = random_tokens(2, 5, 7, seed=5)
    tgt_in = torch.cat([torch.full((2, 1), BOS), random_tokens(2, L - 1, 7, seed=6)], dim=1)
    logits = model(src, tgt_in)
    for j in range(1, L):
        changed = tgt_in.clone()
        changed[:, j] = 3 + (changed[:, j] - 3 + 1) % 4  # another ordinary token
        new_logits = model(src, changed)
        torch.testing.assert_close(
            new_logits[:, :j], logits[:, :j], atol=1e-10, rtol=1e-8, msg=f"position < {j} saw {j}"
        )
        assert not torch.allclose(new_logits[:, j:], logits[:, j:]), "the change had no effect"


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_decoder_is_causal(norm_first):
    check_decoder_causality(tiny_model(norm_first=norm_first))


def test_mutant_decoder_without_causal_mask_is_caught(monkeypatch):
    monkeypatch.setattr(
        encoder_decoder_mod,
        "causal_mask",
        lambda n, device=None: torch.ones(n, n, dtype=torch.bool, device=device),
    )
    with pytest.raises(AssertionError):
        check_decoder_causality(tiny_model())


# ----------------------------------------------------------------------------- decoding


def sequence_log_prob(model, src, tokens) -> float:
    """Summed log-probability of tokens (without BOS) given src, one teacher-forced pass."""
    inp = torch.tensor([[BOS, *tokens[:-1]]], device=src.device)
    log_probs = model(src, inp).log_softmax(-1)[0].cpu()
    return log_probs[torch.arange(len(tokens)), torch.tensor(tokens)].sum().item()


def brute_force_search(model, src, max_len, length_penalty=0.0, key=None):
    """The best sequence among all of length 1..max_len in which only the last token may be EOS
    (finished), plus the unfinished ones of length max_len, by summed log-probability divided by
    length**length_penalty (or by `key(score, length, length_penalty)`); returned with its summed
    log-probability.

    Every candidate is a prefix of one of the V**max_len sequences of length max_len, so one
    batched teacher-forced pass scores them all.
    """
    V = model.generator.out_features
    memory, src_mask = model.encode(src)
    everything = torch.tensor(list(itertools.product(range(V), repeat=max_len)))  # (V**n, n)
    inp = torch.cat([torch.full((len(everything), 1), BOS), everything[:, :-1]], dim=1)
    n = len(everything)
    log_probs = model.decode(inp, memory.expand(n, -1, -1), src_mask.expand(n, -1, -1, -1))
    log_probs = log_probs.log_softmax(-1).gather(-1, everything[..., None])[..., 0]
    cumulative = log_probs.double().cumsum(-1)  # score of every prefix
    best_tokens, best_score, best_key = None, -float("inf"), -float("inf")
    for seq, scores in zip(everything.tolist(), cumulative.tolist()):
        for length in range(1, max_len + 1):
            prefix = seq[:length]
            if EOS in prefix[:-1]:
                break  # only the last token may be EOS
            if prefix[-1] != EOS and length < max_len:
                continue  # unfinished and shorter than max_len: not a final hypothesis
            if key is None:
                ranked = scores[length - 1] / length**length_penalty
            else:
                ranked = key(scores[length - 1], length, length_penalty)
            if ranked > best_key:
                best_tokens, best_score, best_key = prefix, scores[length - 1], ranked
    return best_tokens, best_score


def check_beam_equals_brute_force(model, src, max_len, beam_size, length_penalty=0.0, search=None):
    search = search or beam_search
    tokens, score = search(
        model, src, BOS, EOS, max_len=max_len, beam_size=beam_size, length_penalty=length_penalty
    )
    best_tokens, best_score = brute_force_search(model, src, max_len, length_penalty)
    assert tokens[0].item() == BOS
    assert tokens[1:].tolist() == best_tokens, f"beam {tokens[1:].tolist()} != best {best_tokens}"
    assert abs(score - best_score) < 1e-9


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("vocab", [4, 5])
def test_exhaustive_beam_search_equals_brute_force(vocab, seed):
    max_len = 3
    model = tiny_model(vocab=vocab, seed=seed)
    src = random_tokens(1, 4, vocab, seed=seed)
    check_beam_equals_brute_force(model, src, max_len, beam_size=vocab**max_len)
    # the brute force's own score agrees with a separate per-sequence computation
    best_tokens, best_score = brute_force_search(model, src, max_len)
    assert abs(sequence_log_prob(model, src, best_tokens) - best_score) < 1e-9


@pytest.mark.parametrize("length_penalty", [0.5, 1.0, 2.0])
def test_exhaustive_beam_search_with_length_penalty_equals_brute_force(length_penalty):
    """The winner maximises score / len**alpha (plain length normalisation, not GNMT's)."""
    for seed in range(3):
        model = tiny_model(vocab=4, seed=seed)
        src = random_tokens(1, 4, 4, seed=seed)
        check_beam_equals_brute_force(model, src, 3, 4**3, length_penalty=length_penalty)


def test_mutant_beam_search_ignoring_the_length_penalty_is_caught():
    """Some model's best normalised sequence is not its best total one (else the test is blind)."""

    def ignores_penalty(*args, length_penalty=0.0, **kwargs):
        return beam_search(*args, **kwargs)

    caught = 0
    for seed in range(8):
        model = tiny_model(vocab=4, seed=seed)
        src = random_tokens(1, 4, 4, seed=seed)
        try:
            check_beam_equals_brute_force(model, src, 3, 64, 1.0, search=ignores_penalty)
        except AssertionError:
            caught += 1
    assert caught > 0
    with pytest.raises(ValueError, match="length_penalty"):
        beam_search(tiny_model(vocab=4), random_tokens(1, 4, 4, seed=0), BOS, EOS, 3, 2, -1.0)


def test_mutant_narrow_beam_is_caught():
    """A beam too narrow to be exact (here: greedy) misses the optimum for some model."""
    failures = 0
    for seed in range(12):
        model = tiny_model(vocab=5, seed=seed, d_model=8, n_heads=2)
        with torch.no_grad():
            model.generator.weight.mul_(3)  # sharper, more varied next-token distributions
        src = random_tokens(1, 4, 5, seed=seed)
        check_beam_equals_brute_force(model, src, 3, beam_size=125)
        try:
            check_beam_equals_brute_force(model, src, 3, beam_size=1)
        except AssertionError:
            failures += 1
            break
    assert failures > 0, "beam_size=1 matched the exhaustive search for every model"


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_greedy_equals_beam_of_one(seed, device):
    model = tiny_model(vocab=6, seed=seed, device=device)
    src = random_tokens(3, 5, 6, seed=seed, device=device)
    src[1, 3:] = PAD
    greedy = greedy_decode(model, src, BOS, EOS, max_len=6)
    assert greedy.shape[0] == 3 and (greedy[:, 0] == BOS).all()
    for b in range(3):
        tokens, score = beam_search(model, src[b : b + 1], BOS, EOS, max_len=6, beam_size=1)
        row = greedy[b].tolist()
        if EOS in row:
            row = row[: row.index(EOS) + 1]
        assert tokens.tolist() == row
        expected = sequence_log_prob(model, src[b : b + 1], row[1:])
        assert abs(score - expected) < 1e-8
    with pytest.raises(ValueError, match="one sequence at a time"):
        beam_search(model, src, BOS, EOS, max_len=3)


# ----------------------------------------------------------------------------- training


def copy_batch(B, L, vocab, gen):
    """Source: L random ordinary tokens; target: the same tokens, then EOS."""
    src = torch.randint(3, vocab, (B, L), generator=gen)
    tgt_in = torch.cat([torch.full((B, 1), BOS), src], dim=1)
    tgt_out = torch.cat([src, torch.full((B, 1), EOS)], dim=1)
    return src, tgt_in, tgt_out


@pytest.mark.slow
def test_model_learns_to_copy():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is fastest, and fair to xdist neighbours
    try:
        torch.manual_seed(0)
        vocab, L = 10, 5
        model = Transformer(
            TransformerConfig(
                vocab,
                vocab,
                d_model=32,
                n_heads=4,
                n_layers=2,
                d_ff=64,
                dropout=0.0,
                norm_first=True,
            )
        )
        optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
        gen = torch.Generator().manual_seed(0)
        loss_fn = torch.nn.CrossEntropyLoss()
        for _ in range(250):
            src, tgt_in, tgt_out = copy_batch(64, L, vocab, gen)
            loss = loss_fn(model(src, tgt_in).flatten(0, 1), tgt_out.flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        src, _, tgt_out = copy_batch(200, L, vocab, torch.Generator().manual_seed(1))
        out = greedy_decode(model, src, BOS, EOS, max_len=L + 1)
    finally:
        torch.set_num_threads(threads)
    exact = (out[:, 1:] == tgt_out).all(dim=1).float().mean().item()
    assert loss.item() < 0.1
    assert exact > 0.85, f"exact match {exact:.2f}"


def test_length_normalised_score_divides_by_the_length_to_the_alpha():
    log_probs = torch.tensor([-1.2, -1.8, -3.0], dtype=torch.float64)
    lengths = torch.tensor([3, 5, 1])
    assert torch.equal(length_normalised_score(log_probs, lengths, 0.0), log_probs)
    assert torch.allclose(
        length_normalised_score(log_probs, lengths, 1.0),
        torch.tensor([-0.4, -0.36, -3.0], dtype=torch.float64),
    )
    assert length_normalised_score(log_probs.float(), lengths, 0.6).dtype == torch.float32
    with pytest.raises(ValueError, match="alpha"):
        length_normalised_score(log_probs, lengths, -0.5)
    with pytest.raises(ValueError, match="at least 1"):
        length_normalised_score(log_probs, torch.tensor([3, 0, 1]), 1.0)


def test_beam_search_ranks_with_the_normalise_it_is_given():
    """GNMT's ((5 + |Y|) / 6)^alpha through `normalise`: the winner is brute force's under it."""

    def gnmt(log_probs, lengths, alpha):
        return log_probs / ((5 + lengths) / 6) ** alpha

    for seed in range(3):
        model = tiny_model(vocab=4, seed=seed)
        src = random_tokens(1, 4, 4, seed=seed)
        tokens, score = beam_search(model, src, BOS, EOS, 3, 64, 2.0, normalise=gnmt)
        best, best_score = brute_force_search(model, src, 3, 2.0, key=gnmt)
        assert tokens[1:].tolist() == best and score == pytest.approx(best_score, abs=1e-9)
