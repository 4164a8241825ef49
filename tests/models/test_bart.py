"""BART (lesson 10): the noising functions keep their promises and the model matches Hugging Face.

Each property check below is a plain function that raises AssertionError when a noising function
breaks its contract, run over many seeds. `test_<name>_properties` runs it on the reference;
`test_mutant_<name>_*` runs it on a deliberately wrong implementation and asserts that it FAILS,
which shows that the check catches that mistake. The parity tests copy the weights of a random
transformers BART (weights scaled up so every part matters) into ours and compare outputs; the
mutants break one BART detail (no layernorm_embedding, positions without the offset, ...) and
must miss the tolerance.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from torch import nn

import transformer_lab.bart as bart_mod
from transformer_lab.bart import (
    BART,
    BARTConfig,
    document_rotation,
    from_hf,
    hf_key_map,
    sentence_permutation,
    shift_tokens_right,
    span_corruption,
    text_infilling,
    token_deletion,
    token_masking,
)

transformers = pytest.importorskip("transformers")

N_SEEDS = 200
MASK = 3  # mask id; test documents use ids >= 10, so MASK never occurs in them
EOS = 2


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def document(seed: int, n: int = 60) -> torch.Tensor:
    """n distinct token ids >= 10, in random order: each output token has one place in the input."""
    return torch.randperm(n, generator=gen(10_000 + seed)) + 10


def positions_in(doc: torch.Tensor, kept: torch.Tensor) -> list[int]:
    """Index in `doc` of every token of `kept` (doc has distinct ids); fails on a foreign token."""
    where = {t: i for i, t in enumerate(doc.tolist())}
    for t in kept.tolist():
        assert t in where, f"token {t} is not in the input"
    return [where[t] for t in kept.tolist()]


def assert_subsequence(doc: torch.Tensor, kept: torch.Tensor) -> list[int]:
    idx = positions_in(doc, kept)
    assert all(a < b for a, b in zip(idx, idx[1:])), "tokens are not a subsequence (order changed)"
    return idx


# ============================================================================ noising: properties


def check_token_masking(fn, p: float = 0.15) -> None:
    n_masked = n_total = 0
    for seed in range(N_SEEDS):
        doc = document(seed)
        out = fn(doc, MASK, p, generator=gen(seed))
        assert out.shape == doc.shape, f"length changed: {tuple(doc.shape)} -> {tuple(out.shape)}"
        changed = out != doc
        assert (out[changed] == MASK).all(), "a token changed into something other than mask_id"
        n_masked += int(changed.sum())
        n_total += len(doc)
    rate = n_masked / n_total
    sd = math.sqrt(p * (1 - p) / n_total)
    assert abs(rate - p) < 5 * sd, f"masking rate {rate:.4f}, expected {p} +- {5 * sd:.4f}"


def check_token_deletion(fn, p: float = 0.15) -> None:
    n_kept = n_total = 0
    for seed in range(N_SEEDS):
        doc = document(seed)
        out = fn(doc, p, generator=gen(seed))
        assert out.dim() == 1 and out.dtype == doc.dtype
        assert_subsequence(doc, out)
        n_kept += len(out)
        n_total += len(doc)
    rate = 1 - n_kept / n_total
    sd = math.sqrt(p * (1 - p) / n_total)
    assert abs(rate - p) < 5 * sd, f"deletion rate {rate:.4f}, expected {p} +- {5 * sd:.4f}"


def infilling_spans(doc: torch.Tensor, out: torch.Tensor) -> list[int]:
    """The length of the span behind each [MASK] of `out`; fails if `out` is no infilling of doc.

    Kept tokens must be a subsequence of doc; every run of removed tokens must sit where exactly
    one [MASK] stands; a [MASK] between two adjacent kept tokens is a 0-length span.
    """
    out_list = out.tolist()
    for a, b in zip(out_list, out_list[1:]):
        assert not (a == MASK and b == MASK), "two consecutive masks: one span gave several masks"
    idx = assert_subsequence(doc, out[out != MASK])
    spans, prev = [], -1  # prev = input index of the last kept token
    k = 0  # kept tokens seen
    masked_here = False
    for t in out_list + [None]:  # None: the end of the document, a last gap
        if t == MASK:
            masked_here = True
            continue
        nxt = idx[k] if t is not None else len(doc)
        gap = nxt - prev - 1  # tokens removed between two kept tokens
        if masked_here:
            spans.append(gap)
        else:
            assert gap == 0, f"{gap} tokens were removed without a mask in their place"
        masked_here, prev = False, nxt
        k += t is not None
    return spans


def check_text_infilling(fn, p: float = 0.3, lam: float = 3.0, n: int = 60) -> None:
    n_spans = []
    for seed in range(N_SEEDS):
        doc = document(seed, n)
        out = fn(doc, MASK, p, lam, generator=gen(seed))
        spans = infilling_spans(doc, out)
        assert sum(spans) == round(p * n), f"{sum(spans)} tokens masked, expected {round(p * n)}"
        n_spans.append(len(spans))
    # spans of mean length lam covering p*n tokens: about p*n/lam of them (plus a little for the
    # last, trimmed span and for 0-length spans); one mask per *token* would give p*n
    mean = sum(n_spans) / len(n_spans)
    expected = p * n / lam
    assert 0.8 * expected < mean < 1.5 * expected, f"{mean:.2f} spans on average, ~{expected}"


def check_infilling_inserts(fn) -> None:
    """With a small lam many spans have length 0: they insert a [MASK] without removing anything."""
    zero_length = 0
    for seed in range(50):
        doc = document(seed)
        zero_length += infilling_spans(doc, fn(doc, MASK, 0.3, 0.5, generator=gen(seed))).count(0)
    assert zero_length > 0, "no 0-length span ever inserted a mask"


def sentences_of(tokens: torch.Tensor) -> tuple[list[tuple[int, ...]], tuple[int, ...]]:
    out, cur = [], []
    for t in tokens.tolist():
        cur.append(t)
        if t == EOS:
            out.append(tuple(cur))
            cur = []
    return out, tuple(cur)


def make_doc_with_sentences(seed: int, n_sentences: int = 5, rest: int = 0) -> torch.Tensor:
    g = gen(20_000 + seed)
    parts = []
    for _ in range(n_sentences):
        length = int(torch.randint(1, 6, (), generator=g))
        parts += [torch.randint(10, 20, (length,), generator=g), torch.tensor([EOS])]
    parts.append(torch.randint(10, 20, (rest,), generator=g))
    return torch.cat(parts)


def check_sentence_permutation(fn) -> None:
    first_sentence = Counter()
    for seed in range(N_SEEDS):
        doc = make_doc_with_sentences(seed, rest=seed % 3)
        out = fn(doc, EOS, generator=gen(seed))
        assert out.shape == doc.shape, f"length changed: {tuple(doc.shape)} -> {tuple(out.shape)}"
        (s_in, rest_in), (s_out, rest_out) = sentences_of(doc), sentences_of(out)
        assert Counter(s_out) == Counter(s_in), "the sentences are not the same multiset"
        assert rest_out == rest_in, "the unfinished last sentence did not stay at the end"
        first_sentence[s_in.index(s_out[0])] += 1
    # every sentence leads sometimes, none always (a shuffle, not a fixed reordering)
    assert sorted(first_sentence) == list(range(5)), f"first sentence counts {first_sentence}"
    assert max(first_sentence.values()) < 0.4 * N_SEEDS, f"first sentence counts {first_sentence}"


def check_document_rotation(fn, n: int = 8) -> None:
    shifts = Counter()
    for seed in range(N_SEEDS * 2):
        doc = document(seed, n)
        out = fn(doc, generator=gen(seed))
        ks = [k for k in range(n) if torch.equal(out, torch.cat([doc[k:], doc[:k]]))]
        assert ks, f"{out.tolist()} is not a rotation of {doc.tolist()}"
        shifts[ks[0]] += 1
    expected = 2 * N_SEEDS / n
    assert sorted(shifts) == list(range(n)), f"not every start is chosen: {dict(shifts)}"
    assert all(abs(c - expected) < 0.5 * expected for c in shifts.values()), dict(shifts)


SENTINELS = list(range(100, 140))


def reconstruct(inputs: torch.Tensor, targets: torch.Tensor) -> list[int]:
    """Put each span of `targets` back in place of its sentinel in `inputs`."""
    spans, cur = {}, None
    for t in targets.tolist():
        if t in SENTINELS:
            cur = t
            spans[cur] = []
        else:
            assert cur is not None, "targets do not start with a sentinel"
            spans[cur].append(t)
    out = []
    for t in inputs.tolist():
        out += spans[t] if t in SENTINELS else [t]
    return out


def check_span_corruption(fn, density: float = 0.15, mean_span: float = 3.0, n: int = 60) -> None:
    for seed in range(N_SEEDS):
        doc = document(seed, n)
        inputs, targets = fn(doc, SENTINELS, density, mean_span, generator=gen(seed))
        assert reconstruct(inputs, targets) == doc.tolist(), "inputs + targets != the original"
        n_spans = round(round(density * n) / mean_span)
        used_in = [t for t in inputs.tolist() if t in SENTINELS]
        used_out = [t for t in targets.tolist() if t in SENTINELS]
        assert used_in == SENTINELS[:n_spans], f"input sentinels {used_in}, expected {n_spans}"
        assert used_out == SENTINELS[: n_spans + 1], "targets need sentinels 0..n_spans in order"
        noise = len(targets) - len(used_out)
        assert noise == round(density * n), f"{noise} noise tokens, expected {round(density * n)}"
        t = targets.tolist()
        assert all(
            t[i + 1] not in SENTINELS for i in range(len(t) - 1) if t[i] in SENTINELS[:n_spans]
        )


# ---------------------------------------------------------------------------- the real ones pass


def test_token_masking_properties():
    check_token_masking(token_masking)
    check_token_masking(token_masking, p=0.5)


def test_token_deletion_properties():
    check_token_deletion(token_deletion)
    check_token_deletion(token_deletion, p=0.4)


def test_text_infilling_properties():
    check_text_infilling(text_infilling)
    check_text_infilling(text_infilling, p=0.5, lam=2.0, n=30)
    check_infilling_inserts(text_infilling)


def test_text_infilling_crowded():
    """More spans than gaps between kept tokens: spans merge, the total masked is still exact."""
    for seed in range(50):
        doc = document(seed, 10)
        out = text_infilling(doc, MASK, p=0.9, lam=0.3, generator=gen(seed))
        assert sum(infilling_spans(doc, out)) == 9


def test_sentence_permutation_properties():
    check_sentence_permutation(sentence_permutation)


def test_document_rotation_properties():
    check_document_rotation(document_rotation)


def test_span_corruption_properties():
    check_span_corruption(span_corruption)
    check_span_corruption(span_corruption, density=0.5, mean_span=2.0, n=21)


def test_span_corruption_layout():
    """Kept pieces and spans alternate: inputs start with a kept token and end with a sentinel."""
    for seed in range(20):
        inputs, targets = span_corruption(
            torch.arange(10, 17), [100, 101, 102], 0.3, 1.0, gen(seed)
        )
        assert len(inputs) + len(targets) == 7 + 2 * 2 + 1
        assert inputs[0] == 10 and inputs[-1] == 101 and targets[-1] == 102
        assert targets[0] == 100 and targets[1] != 101, "each span has at least one token"


@pytest.mark.parametrize(
    "fn",
    [
        lambda t, g: token_masking(t, MASK, 0.3, generator=g),
        lambda t, g: token_deletion(t, 0.3, generator=g),
        lambda t, g: text_infilling(t, MASK, generator=g),
        lambda t, g: sentence_permutation(t, 15, generator=g),
        lambda t, g: document_rotation(t, generator=g),
        lambda t, g: torch.cat(span_corruption(t, SENTINELS, generator=g)),
    ],
    ids=["masking", "deletion", "infilling", "permutation", "rotation", "span_corruption"],
)
def test_noising_is_seeded(fn, device):
    doc = torch.randint(10, 20, (60,), generator=gen(0)).to(device)  # 15 ends "sentences"
    a, b = fn(doc, gen(1)), fn(doc, gen(1))
    assert a.device == doc.device and a.dtype == doc.dtype
    assert torch.equal(a, b), "the same generator seed gave different noise"
    assert any(not torch.equal(a, fn(doc, gen(s))) for s in range(2, 6)), "the seed is ignored"
    fn(doc, None)  # the global generator works too


def test_noising_errors():
    doc = document(0)
    with pytest.raises(TypeError, match="integer"):
        token_masking(doc.float(), MASK)
    with pytest.raises(ValueError, match=r"\(L,\)"):
        token_deletion(doc[None])
    with pytest.raises(ValueError, match="probability"):
        token_masking(doc, MASK, p=1.5)
    with pytest.raises(ValueError, match="probability"):
        text_infilling(doc, MASK, p=-0.1)
    with pytest.raises(ValueError, match="lam"):
        text_infilling(doc, MASK, lam=0.0)
    with pytest.raises(ValueError, match="sentinel"):
        span_corruption(doc, [100, 101], noise_density=0.5)
    with pytest.raises(ValueError, match="sentinel"):
        span_corruption(doc, [int(doc[0]), 101, 102, 103, 104])
    with pytest.raises(ValueError, match="noise_density"):
        span_corruption(doc, SENTINELS, noise_density=1.0)
    with pytest.raises(ValueError, match="at least 2"):
        span_corruption(doc[:1], SENTINELS)
    assert text_infilling(doc, MASK, p=0.0).tolist() == doc.tolist()
    assert document_rotation(doc[:0]).numel() == 0


# ------------------------------------------------------------------------ mutants must be caught


def mutant_masking_random_token(tokens, mask_id, p, generator=None):
    """Replaces the chosen tokens by a random id instead of mask_id."""
    chosen = torch.rand(len(tokens), generator=generator) < p
    return torch.where(chosen, torch.randint(10, 70, tokens.shape, generator=generator), tokens)


def mutant_masking_half_rate(tokens, mask_id, p, generator=None):
    return token_masking(tokens, mask_id, p / 2, generator)


def mutant_masking_deletes(tokens, mask_id, p, generator=None):
    return token_deletion(tokens, p, generator)


@pytest.mark.parametrize(
    "mutant", [mutant_masking_random_token, mutant_masking_half_rate, mutant_masking_deletes]
)
def test_mutant_token_masking(mutant):
    with pytest.raises(AssertionError):
        check_token_masking(mutant)


def mutant_deletion_masks(tokens, p, generator=None):
    """'Deletes' by masking: the length is kept and a foreign id appears."""
    return token_masking(tokens, MASK, p, generator)


def mutant_deletion_reorders(tokens, p, generator=None):
    kept = token_deletion(tokens, p, generator)
    return kept[torch.randperm(len(kept), generator=generator)]


def mutant_deletion_wrong_rate(tokens, p, generator=None):
    return token_deletion(tokens, 1 - p, generator)


@pytest.mark.parametrize(
    "mutant", [mutant_deletion_masks, mutant_deletion_reorders, mutant_deletion_wrong_rate]
)
def test_mutant_token_deletion(mutant):
    with pytest.raises(AssertionError):
        check_token_deletion(mutant)


def mutant_infilling_mask_per_token(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """One [MASK] per masked token instead of one per span."""
    out = text_infilling(tokens, mask_id, p, lam, generator)
    spans = iter(infilling_spans(tokens, out))
    res = []
    for t in out.tolist():
        res += [mask_id] * max(1, next(spans)) if t == mask_id else [t]
    return torch.tensor(res)


def mutant_infilling_no_collapse(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Masks tokens in place (no span removed): token masking, not infilling."""
    return token_masking(tokens, mask_id, p, generator)


def mutant_infilling_drops_masks(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Removes the spans but forgets the mask: span deletion."""
    out = text_infilling(tokens, mask_id, p, lam, generator)
    return out[out != mask_id]


def mutant_infilling_spans_of_one(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Ignores lam: every span has length 1."""
    return text_infilling(tokens, mask_id, p, 1.0, generator)


def mutant_infilling_no_insertions(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Drops 0-length spans: a mask then always hides at least one token."""
    out = text_infilling(tokens, mask_id, p, lam, generator)
    spans = iter(infilling_spans(tokens, out))
    return torch.tensor([t for t in out.tolist() if t != mask_id or next(spans) > 0])


@pytest.mark.parametrize(
    "mutant",
    [
        mutant_infilling_mask_per_token,
        mutant_infilling_no_collapse,
        mutant_infilling_drops_masks,
        mutant_infilling_spans_of_one,
    ],
)
def test_mutant_text_infilling(mutant):
    with pytest.raises(AssertionError):
        check_text_infilling(mutant)


def test_mutant_text_infilling_without_insertions():
    check_infilling_inserts(text_infilling)  # (the reference does insert)
    with pytest.raises(AssertionError):
        check_infilling_inserts(mutant_infilling_no_insertions)


def mutant_permutation_of_tokens(tokens, eos_id, generator=None):
    return tokens[torch.randperm(len(tokens), generator=generator)]


def mutant_permutation_identity(tokens, eos_id, generator=None):
    return tokens.clone()


def mutant_permutation_reverse_sentences(tokens, eos_id, generator=None):
    sentences, rest = bart_mod._split_sentences(tokens, eos_id)
    return torch.cat([*sentences[::-1], rest])


def mutant_permutation_moves_rest(tokens, eos_id, generator=None):
    """Shuffles the unfinished tail along with the sentences (it then glues onto the next one)."""
    sentences, rest = bart_mod._split_sentences(tokens, eos_id)
    pieces = sentences + ([rest] if len(rest) else [])
    order = torch.randperm(len(pieces), generator=generator).tolist()
    return torch.cat([pieces[i] for i in order])


@pytest.mark.parametrize(
    "mutant",
    [
        mutant_permutation_of_tokens,
        mutant_permutation_identity,
        mutant_permutation_reverse_sentences,
        mutant_permutation_moves_rest,
    ],
)
def test_mutant_sentence_permutation(mutant):
    with pytest.raises(AssertionError):
        check_sentence_permutation(mutant)


def mutant_rotation_reverses(tokens, generator=None):
    return tokens.flip(0)


def mutant_rotation_never_identity(tokens, generator=None):
    k = int(torch.randint(1, len(tokens), (), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def mutant_rotation_fixed(tokens, generator=None):
    return tokens.roll(1)


def mutant_rotation_shuffles(tokens, generator=None):
    return tokens[torch.randperm(len(tokens), generator=generator)]


@pytest.mark.parametrize(
    "mutant",
    [
        mutant_rotation_reverses,
        mutant_rotation_never_identity,
        mutant_rotation_fixed,
        mutant_rotation_shuffles,
    ],
)
def test_mutant_document_rotation(mutant):
    with pytest.raises(AssertionError):
        check_document_rotation(mutant)


def mutant_span_no_closing_sentinel(tokens, sentinel_ids, d=0.15, m=3.0, generator=None):
    inputs, targets = span_corruption(tokens, sentinel_ids, d, m, generator)
    return inputs, targets[:-1]


def mutant_span_targets_out_of_order(tokens, sentinel_ids, d=0.15, m=3.0, generator=None):
    """Pairs sentinel i with the wrong span (spans rotated by one)."""
    inputs, targets = span_corruption(tokens, sentinel_ids, d, m, generator)
    t = targets.tolist()
    starts = [i for i, x in enumerate(t) if x in sentinel_ids][:-1]
    spans = [t[a + 1 : b] for a, b in zip(starts, starts[1:] + [len(t) - 1])]
    spans = spans[1:] + spans[:1]
    out = [x for k, s in enumerate(spans) for x in [sentinel_ids[k], *s]] + [t[-1]]
    return inputs, torch.tensor(out)


def mutant_span_sentinel_per_token(tokens, sentinel_ids, d=0.15, m=3.0, generator=None):
    """Corrupts single tokens (mean_span_length ignored)."""
    return span_corruption(tokens, sentinel_ids, d, 1.0, generator)


def mutant_span_drops_noise(tokens, sentinel_ids, d=0.15, m=3.0, generator=None):
    """Forgets to put the span tokens into the targets."""
    inputs, targets = span_corruption(tokens, sentinel_ids, d, m, generator)
    return inputs, targets[torch.isin(targets, torch.tensor(sentinel_ids))]


@pytest.mark.parametrize(
    "mutant",
    [
        mutant_span_no_closing_sentinel,
        mutant_span_targets_out_of_order,
        mutant_span_sentinel_per_token,
        mutant_span_drops_noise,
    ],
)
def test_mutant_span_corruption(mutant):
    with pytest.raises(AssertionError):
        check_span_corruption(mutant)


# ============================================================================ the model vs HF


def hf_config(**overrides):
    kw = dict(
        vocab_size=61,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=40,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        forced_eos_token_id=None,
        attn_implementation="eager",
    )
    kw.update(overrides)
    return transformers.BartConfig(**kw)


def make_hf(cls_name: str = "BartForConditionalGeneration", seed: int = 0, **overrides):
    """A random HF BART whose weights are all O(0.3), so LayerNorms, biases and positions matter."""
    torch.manual_seed(seed)
    hf = getattr(transformers, cls_name)(hf_config(**overrides)).eval()
    g = gen(seed)
    with torch.no_grad():
        for name, t in [*hf.named_parameters(), *hf.named_buffers()]:
            if t.is_floating_point():
                noise = 0.3 * torch.randn(t.shape, generator=g, dtype=t.dtype)
                t.copy_(noise + (1.0 if "norm" in name and name.endswith("weight") else 0.0))
    return hf


def batch(device, vocab: int = 61):
    """Encoder input with padding (rows 1 and 2 are shorter) and a decoder input."""
    g = gen(123)
    x = torch.randint(3, vocab, (3, 9), generator=g)
    attention_mask = torch.ones_like(x)
    for row, length in ((1, 6), (2, 3)):
        x[row, length:] = 1
        attention_mask[row, length:] = 0
    y = torch.randint(3, vocab, (3, 7), generator=g)
    y[:, 0] = 2
    return x.to(device), attention_mask.to(device), y.to(device)


PARITY_TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


def parity_error(hf, ours, device) -> float:
    """Largest relative-to-scale difference between HF's and our outputs on a padded batch."""
    x, attention_mask, y = batch(device, hf.config.vocab_size)
    with torch.no_grad():
        out = hf(input_ids=x, attention_mask=attention_mask, decoder_input_ids=y)
        memory, src_mask = ours.encode(x, attention_mask)
        hidden = ours.decode_hidden(y, memory, src_mask)
        pairs = [(memory, out.encoder_last_hidden_state)]
        if isinstance(hf, transformers.BartForConditionalGeneration):
            pairs.append((ours.lm_head(hidden), out.logits))
        else:
            pairs.append((hidden, out.last_hidden_state))
    return max(float((a - b).abs().max() / b.abs().max().clamp(min=1.0)) for a, b in pairs)


def loaded(cls_name, device, dtype, **overrides):
    hf = make_hf(cls_name, **overrides).to(device=device, dtype=dtype)
    return hf, from_hf(hf)


@pytest.mark.parametrize("cls_name", ["BartModel", "BartForConditionalGeneration"])
@pytest.mark.parametrize("scale_embedding", [False, True], ids=["unscaled", "scaled"])
def test_parity_with_hugging_face(cls_name, scale_embedding, device, dtype):
    hf, ours = loaded(cls_name, device, dtype, scale_embedding=scale_embedding)
    assert next(ours.parameters()).dtype == dtype and next(ours.parameters()).device == device
    err = parity_error(hf, ours, device)
    assert err < PARITY_TOL[dtype], f"{cls_name} differs by {err:.2e}"


def test_logits_and_forward_agree_and_padding_default(device):
    hf, ours = loaded("BartForConditionalGeneration", device, torch.float64)
    x, attention_mask, y = batch(device)
    with torch.no_grad():
        expected = hf(input_ids=x, attention_mask=attention_mask, decoder_input_ids=y).logits
        got = ours(x, y, attention_mask)
        got_default = ours(x, y)  # attention_mask=None: derived from pad_id
    torch.testing.assert_close(got, expected, atol=1e-10, rtol=1e-8)
    torch.testing.assert_close(got_default, expected, atol=1e-10, rtol=1e-8)


def test_gradients_match_hugging_face():
    hf, ours = loaded("BartForConditionalGeneration", "cpu", torch.float64)
    x, attention_mask, y = batch("cpu")
    labels = y.roll(-1, dims=1)
    hf(
        input_ids=x, attention_mask=attention_mask, decoder_input_ids=y, labels=labels
    ).loss.backward()
    ours.train()  # dropout is 0: train mode must not change the numbers
    loss = nn.functional.cross_entropy(ours(x, y, attention_mask).flatten(0, 1), labels.flatten())
    loss.backward()
    theirs = dict(hf.model.named_parameters())
    for key, hf_key in hf_key_map(2, 2).items():
        torch.testing.assert_close(
            dict(ours.named_parameters())[key].grad, theirs[hf_key].grad, atol=1e-9, rtol=1e-7
        )


def test_denoising_loss_matches_hugging_face():
    hf, ours = loaded("BartForConditionalGeneration", "cpu", torch.float64)
    x, attention_mask, labels = batch("cpu")
    labels[0, 5:] = -100  # ignored positions
    with torch.no_grad():
        expected = hf(input_ids=x, attention_mask=attention_mask, labels=labels).loss
        got = ours.loss(x, labels, attention_mask)
    torch.testing.assert_close(got, expected, atol=1e-10, rtol=1e-8)


def test_shift_tokens_right_matches_hugging_face():
    from transformers.models.bart.modeling_bart import shift_tokens_right as hf_shift

    labels = torch.tensor([[5, 6, 7, 2], [8, 2, -100, -100]])
    expected = hf_shift(labels, 1, 2)
    assert torch.equal(shift_tokens_right(labels, 1, 2), expected)
    assert shift_tokens_right(labels, 1, 2).tolist() == [[2, 5, 6, 7], [2, 8, 2, 1]]


def test_generate_matches_hugging_face_greedy(device):
    hf, ours = loaded("BartForConditionalGeneration", device, torch.float64)
    with torch.no_grad():
        hf.final_logits_bias[0, 2] += 4.0  # make EOS likely: rows 0 and 1 finish at once, row 2
        ours.final_logits_bias[2] += 4.0  # goes on, so padding after EOS is exercised
    x, attention_mask, _ = batch(device)
    expected = hf.generate(
        x, attention_mask=attention_mask, max_new_tokens=8, num_beams=1, do_sample=False,
        min_length=0, no_repeat_ngram_size=0,
    )  # fmt: skip
    got = ours.generate(x, attention_mask, max_new_tokens=8)
    assert torch.equal(got, expected), f"\n{got}\n{expected}"
    assert got[0, 1] == 2 and (got[0, 2:] == 1).all() and (got[2, 1:] != 2).all(), got
    bad = ours.generate(x, attention_mask, max_new_tokens=8, decoder_start_id=0)  # a mutant
    assert not torch.equal(bad, expected)


def test_from_hf_rejects_other_models():
    with pytest.raises(TypeError, match="BartModel"):
        from_hf(nn.Linear(2, 2))


def test_bart_wrong_input_shapes():
    model = BART(BARTConfig(30, 16, 2, 1, 1, 32, max_position=8))
    x = torch.randint(3, 30, (2, 5))
    with pytest.raises(ValueError, match=r"\(B, L_s\)"):
        model(x[0], x)
    with pytest.raises(ValueError, match="attention_mask"):
        model(x, x, attention_mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match="max_position"):
        model(torch.randint(3, 30, (1, 9)), x)
    assert model(x, x[:, :3]).shape == (2, 3, 30)


# ------------------------------------------------------------------------------- model mutants


def test_mutant_no_layernorm_embedding(monkeypatch):
    hf, ours = loaded("BartForConditionalGeneration", "cpu", torch.float64)
    assert parity_error(hf, ours, "cpu") < 1e-10
    ours.encoder_layernorm_embedding = nn.Identity()
    ours.decoder_layernorm_embedding = nn.Identity()
    assert parity_error(hf, ours, "cpu") > 1e-3


def test_mutant_positions_without_offset(monkeypatch):
    hf, ours = loaded("BartModel", "cpu", torch.float64)
    monkeypatch.setattr(bart_mod.BartLearnedPositions, "offset", 0)
    assert parity_error(hf, ours, "cpu") > 1e-3


def test_mutant_no_final_logits_bias():
    hf, ours = loaded("BartForConditionalGeneration", "cpu", torch.float64)
    ours.final_logits_bias.zero_()
    assert parity_error(hf, ours, "cpu") > 1e-3


def test_mutant_wrong_embedding_scale():
    hf, ours = loaded("BartModel", "cpu", torch.float64, scale_embedding=True)
    ours.embed_scale = 1.0
    assert parity_error(hf, ours, "cpu") > 1e-3


def test_mutant_no_causal_mask(monkeypatch):
    hf, ours = loaded("BartModel", "cpu", torch.float64)
    monkeypatch.setattr(bart_mod, "causal_mask", lambda n, device=None: torch.ones(n, n).bool())
    assert parity_error(hf, ours, "cpu") > 1e-3


def test_mutant_no_encoder_padding_mask(monkeypatch):
    hf, ours = loaded("BartModel", "cpu", torch.float64)
    monkeypatch.setattr(
        BART, "_key_mask", lambda self, mask, ids, name: torch.ones_like(ids).bool()[:, None, None]
    )
    assert parity_error(hf, ours, "cpu") > 1e-3


def test_mutant_relu_instead_of_gelu():
    hf, ours = loaded("BartModel", "cpu", torch.float64)
    for block in [*ours.encoder, *ours.decoder]:
        block.ffn.activation = "relu"
    assert parity_error(hf, ours, "cpu") > 1e-3


def test_untrained_bart_predicts_near_uniformly():
    """The tied output layer starts at BART's init_std (0.02): the untrained loss is about ln V.
    (Mutant: PyTorch's N(0, 1) embedding made h Eᵀ of size √d_model, an initial loss of ~57.)"""
    torch.manual_seed(0)
    model = BART(BARTConfig(100, 64, 4, 2, 2, 128, max_position=64))
    src, tgt = torch.randint(3, 100, (8, 24)), torch.randint(3, 100, (8, 24))
    with torch.no_grad():
        loss = nn.functional.cross_entropy(
            model(src, tgt[:, :-1]).flatten(0, 1), tgt[:, 1:].flatten()
        )
    assert abs(loss.item() - math.log(100)) < 0.3, loss
    assert model.shared.weight[model.pad_id].abs().sum() == 0
    with torch.no_grad():
        nn.init.normal_(model.shared.weight)  # the mutant
        loss = nn.functional.cross_entropy(
            model(src, tgt[:, :-1]).flatten(0, 1), tgt[:, 1:].flatten()
        )
    assert loss.item() > 2 * math.log(100)
