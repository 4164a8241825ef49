"""Training helpers for the encoder–decoder (lesson 07): batches, teacher forcing, exact match.

    make_batch(pairs, vocab)       (source, target) strings -> src, tgt_in, tgt_out LongTensors
    batches(pairs, vocab, ...)     endless shuffled minibatches of those (for train.fit)
    teacher_forcing_loss(model, batch)   cross-entropy over every target position, PAD ignored
    label_smoothed_loss(logits, targets, eps, ignore_index)   the paper's label smoothing, written out
    token_accuracy(model, batch)   teacher-forced next-token accuracy, PAD ignored
    translate(model, vocab, sources)     free-running decoding (greedy, or beam search with an
                                         optional length penalty)
    exact_match(predictions, targets)    fraction of strings that are exactly right
    evaluate_exact_match(model, pairs, vocab)   translate + exact_match in one call

Teacher forcing: the decoder reads the true target shifted right (tgt_in = BOS + target) and is
trained to predict tgt_out = target + EOS at every position at once. At test time it reads its own
outputs instead, so exact match measures the model as it is really used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .data import Seq2SeqVocab
from .encoder_decoder import beam_search, greedy_decode

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def make_batch(pairs: Sequence[tuple[str, str]], vocab: Seq2SeqVocab) -> Batch:
    """(source, target) string pairs -> (src (B, L_s), tgt_in (B, L_t), tgt_out (B, L_t)).

    src is the source characters, right-padded with PAD. The target is BOS + characters + EOS,
    padded; tgt_in drops its last column and tgt_out its first, so tgt_out[:, t] is the token
    the decoder must predict after reading tgt_in[:, : t + 1].
    """
    if len(pairs) == 0:
        raise ValueError("make_batch needs at least one (source, target) pair")
    src = vocab.encode_batch([s for s, _ in pairs])
    tgt = vocab.encode_batch([t for _, t in pairs], bos=True, eos=True)
    return src, tgt[:, :-1], tgt[:, 1:]


def batches(
    pairs: Sequence[tuple[str, str]], vocab: Seq2SeqVocab, batch_size: int, seed: int = 0
) -> Iterator[Batch]:
    """Endless minibatches of `make_batch`, in a new shuffled order every epoch (seeded)."""
    if not 0 < batch_size <= len(pairs):
        raise ValueError(
            f"batch_size must be in 1..{len(pairs)} (the number of pairs), got {batch_size}"
        )
    g = torch.Generator()
    g.manual_seed(seed)
    while True:
        order = torch.randperm(len(pairs), generator=g).tolist()
        for i in range(0, len(pairs) - batch_size + 1, batch_size):
            yield make_batch([pairs[j] for j in order[i : i + batch_size]], vocab)


def _logits(model: nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    src, tgt_in, tgt_out = batch
    if tgt_in.shape != tgt_out.shape:
        raise ValueError(
            f"tgt_in {tuple(tgt_in.shape)} and tgt_out {tuple(tgt_out.shape)} must have one shape"
        )
    return model(src, tgt_in), tgt_out


def teacher_forcing_loss(
    model: nn.Module, batch: Batch, label_smoothing: float = 0.0
) -> torch.Tensor:
    """Mean cross-entropy of model(src, tgt_in) (B, L_t, V) against tgt_out, PAD positions ignored.

    Signature (model, batch) so it plugs straight into `transformer_lab.train.fit`.
    """
    logits, tgt_out = _logits(model, batch)
    return F.cross_entropy(
        logits.flatten(0, 1),
        tgt_out.flatten(),
        ignore_index=getattr(model, "pad_id", Seq2SeqVocab.pad_id),
        label_smoothing=label_smoothing,
    )


def label_smoothed_loss(
    logits: torch.Tensor, targets: torch.Tensor, eps: float = 0.1, ignore_index: int = 0
) -> torch.Tensor:
    """Cross-entropy against label-smoothed targets, averaged over the positions not ignored.

    logits (..., V), targets (...) integer class ids. Each position's target distribution is
    q = (1 - eps) * onehot(y) + eps / V: the mass eps is spread uniformly over all V classes, the
    true one included (Szegedy et al. 2016; the paper's eps_ls = 0.1). Its cross-entropy with
    p = softmax(logits) is (1 - eps) * (-log p_y) + eps * mean_k(-log p_k). Positions whose target
    is `ignore_index` (any integer, in 0..V-1 or not) count neither in the sum nor in the count.
    The same convention as F.cross_entropy(..., label_smoothing=eps, ignore_index=ignore_index).
    """
    if not 0.0 <= eps <= 1.0:
        raise ValueError(f"eps must be in [0, 1], got {eps}")
    if logits.dim() < 1 or logits.shape[:-1] != targets.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} must be targets' shape {tuple(targets.shape)} + (V,)"
        )
    keep = targets != ignore_index
    if not keep.any():
        raise ValueError(f"every target is ignore_index={ignore_index}: nothing to average")
    log_p = logits.log_softmax(-1)
    true = targets.masked_fill(~keep, 0)  # any valid index; these positions are dropped below
    nll = -log_p.gather(-1, true[..., None]).squeeze(-1)
    uniform = -log_p.mean(-1)
    loss = (1.0 - eps) * nll + eps * uniform
    return loss[keep].mean()


@torch.no_grad()
def token_accuracy(model: nn.Module, batch: Batch) -> float:
    """Teacher-forced accuracy: the fraction of non-PAD target tokens whose arg-max is right.

    Every position sees the *true* prefix, so this is an optimistic number: compare it with
    `evaluate_exact_match`, where the model reads its own (possibly wrong) outputs.
    """
    was_training = model.training
    model.eval()
    logits, tgt_out = _logits(model, batch)
    model.train(was_training)
    real = tgt_out != getattr(model, "pad_id", Seq2SeqVocab.pad_id)
    return ((logits.argmax(-1) == tgt_out) & real).sum().item() / real.sum().item()


@torch.no_grad()
def translate(
    model: nn.Module,
    vocab: Seq2SeqVocab,
    sources: Sequence[str],
    max_len: int = 32,
    beam_size: int | None = None,
    batch_size: int = 256,
    length_penalty: float = 0.0,
    normalise: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor] | None = None,
) -> list[str]:
    """Decode each source string free-running: greedy (beam_size=None) or beam search.

    max_len bounds the number of generated tokens (EOS included). length_penalty is beam search's
    alpha and `normalise` its length normalisation (see `beam_search`). Runs in eval mode on the
    model's device and restores the mode afterwards.
    """
    if beam_size is None and (length_penalty != 0.0 or normalise is not None):
        raise ValueError("length_penalty and normalise apply to beam search only: give beam_size")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out: list[str] = []
    try:
        for i in range(0, len(sources), batch_size):
            src = vocab.encode_batch(list(sources[i : i + batch_size])).to(device)
            if beam_size is None:
                ys = greedy_decode(model, src, vocab.bos_id, vocab.eos_id, max_len)
                out += [vocab.decode(row) for row in ys.cpu()]
            else:
                for row in src:
                    row = row[row != vocab.pad_id]  # one sequence: no padding needed
                    tokens, _ = beam_search(
                        model,
                        row,
                        vocab.bos_id,
                        vocab.eos_id,
                        max_len,
                        beam_size,
                        length_penalty,
                        normalise=normalise,
                    )
                    out.append(vocab.decode(tokens.cpu()))
    finally:
        model.train(was_training)
    return out


def exact_match(predictions: Sequence[str], targets: Sequence[str]) -> float:
    """Fraction of predictions equal to their target, character for character."""
    if len(predictions) != len(targets):
        raise ValueError(f"got {len(predictions)} predictions for {len(targets)} targets")
    if len(targets) == 0:
        raise ValueError("exact_match needs at least one target")
    return sum(p == t for p, t in zip(predictions, targets)) / len(targets)


def evaluate_exact_match(
    model: nn.Module,
    pairs: Sequence[tuple[str, str]],
    vocab: Seq2SeqVocab,
    max_len: int = 32,
    beam_size: int | None = None,
    length_penalty: float = 0.0,
) -> float:
    """Exact match of free-running decoding on (source, target) pairs."""
    sources = [s for s, _ in pairs]
    predictions = translate(
        model, vocab, sources, max_len, beam_size, length_penalty=length_penalty
    )
    return exact_match(predictions, [t for _, t in pairs])
