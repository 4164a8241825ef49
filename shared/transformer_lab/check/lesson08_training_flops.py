"""Checks for lesson 08, exercise 6 — `training_flops`: the compute of a training run, 6·N·D.

`training_flops(model, batch_size, block_size, n_steps)` returns an exact integer, compared with
the reference's by an ``ExactDriver`` on small GPTs whose sizes make every catalogued mistake give
a different number: N is the parameters outside the embeddings (not `wte`, the tied output layer,
nor `wpe`), each counted once; D is every token of every window of every step; 6 FLOPs per
parameter and token (2 forward, 4 backward).
"""

from __future__ import annotations

from .. import gpt as _gpt
from .answer_drivers import Call, ExactDriver, exactly_equal
from .answers import plain_number
from .exercise import Exercise, Mistake

__all__ = ["training_flops"]


# -- the mutants: each counts N or D, or the FLOPs per parameter and token, wrongly ----------------


def _all_params(model):
    return sum(p.numel() for p in model.parameters())


def _non_embedding(model):
    return _all_params(model) - model.wte.weight.numel() - model.wpe.weight.numel()


def _flops_forward_only(model, batch_size, block_size, n_steps):
    return 2 * _non_embedding(model) * batch_size * block_size * n_steps


def _flops_backward_as_forward(model, batch_size, block_size, n_steps):
    return 4 * _non_embedding(model) * batch_size * block_size * n_steps


def _flops_multiply_adds(model, batch_size, block_size, n_steps):
    return 3 * _non_embedding(model) * batch_size * block_size * n_steps


def _flops_tokens_per_step(model, batch_size, block_size, n_steps):
    return 6 * _non_embedding(model) * batch_size * block_size


def _flops_sequences(model, batch_size, block_size, n_steps):
    return 6 * _non_embedding(model) * batch_size * n_steps


def _flops_context(model, batch_size, block_size, n_steps):
    return 6 * _non_embedding(model) * batch_size * model.n_positions * n_steps


def _flops_with_embeddings(model, batch_size, block_size, n_steps):
    return 6 * _all_params(model) * batch_size * block_size * n_steps


def _flops_wpe_counted(model, batch_size, block_size, n_steps):
    n = _all_params(model) - model.wte.weight.numel()
    return 6 * n * batch_size * block_size * n_steps


def _flops_wte_counted(model, batch_size, block_size, n_steps):
    n = _all_params(model) - model.wpe.weight.numel()
    return 6 * n * batch_size * block_size * n_steps


def _flops_predictions(model, batch_size, block_size, n_steps):
    """D counts the block_size - 1 positions that have a target, not every token."""
    return 6 * _non_embedding(model) * batch_size * (block_size - 1) * n_steps


def _flops_tensor_count(model, batch_size, block_size, n_steps):
    """N counts parameter tensors, not the numbers they hold."""
    n = sum(1 for name, _ in model.named_parameters() if not name.startswith(("wte", "wpe")))
    return 6 * n * batch_size * block_size * n_steps


def _flops_blocks_only(model, batch_size, block_size, n_steps):
    n = sum(p.numel() for p in model.blocks.parameters())
    return 6 * n * batch_size * block_size * n_steps


def _non_embedding_where(model, keep):
    return sum(
        keep(p) for name, p in model.named_parameters() if not name.startswith(("wte.", "wpe."))
    )


def _flops_first_axis(model, batch_size, block_size, n_steps):
    """len(p), the first axis, counted for each parameter instead of p.numel()."""
    return 6 * _non_embedding_where(model, len) * batch_size * block_size * n_steps


def _flops_matrices_only(model, batch_size, block_size, n_steps):
    """Only the 2-D weight matrices counted: the biases and the LayerNorms left out."""
    n = _non_embedding_where(model, lambda p: p.numel() if p.dim() == 2 else 0)
    return 6 * n * batch_size * block_size * n_steps


# -- the cases ---------------------------------------------------------------------------------


def _model(vocab_size, n_positions, d_model, n_heads, n_layers, d_ff=None):
    cfg = _gpt.GPTConfig(
        vocab_size, n_positions, d_model, n_heads=n_heads, n_layers=n_layers, d_ff=d_ff
    )
    label = f"GPT(vocab_size={vocab_size}, n_positions={n_positions}, d_model={d_model}, "
    label += f"n_layers={n_layers}" + (f", d_ff={d_ff}" if d_ff else "") + ")"
    return _gpt.GPT(cfg), label


def _calls(thorough: bool) -> list[Call]:
    sizes = [
        ((50, 16, 8, 2, 2), 4, 12, 10),  # block_size below n_positions: windows, not the context
        ((65, 32, 16, 4, 3), 8, 32, 25),
    ]
    if thorough:
        sizes += [
            ((100, 64, 64, 4, 4), 32, 64, 950),  # lecture 08's run
            ((10, 8, 4, 1, 1), 1, 1, 1),
            ((30, 24, 12, 3, 2, 20), 16, 20, 300),  # d_ff other than 4 d_model
            ((500, 128, 32, 4, 6), 64, 100, 7),
        ]
    calls = []
    for config, batch_size, block_size, n_steps in sizes:
        model, label = _model(*config)
        text = f"training_flops({label}, batch_size={batch_size}, block_size={block_size}, "
        calls.append(
            Call((model, batch_size, block_size, n_steps), {}, text + f"n_steps={n_steps})")
        )
    return calls


def _same_count(got, expected) -> bool:
    """Exactly equal as numbers: "return 6 N D as a number" (an int, a float, a NumPy number or a
    0-d tensor, compared by value; a bool is not a number)."""
    return exactly_equal(plain_number(got), plain_number(expected))


def _describe(expected, got) -> str:
    got = plain_number(got)
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        return f"the result should be a number (of FLOPs) but is a {type(got).__name__}"
    return f"returned {got:,} FLOPs, expected {expected:,} ({got / expected:.4g} times as many)"


training_flops = Exercise(
    name="training_flops",
    lesson="08",
    module="gpt",
    reference=_gpt.training_flops,
    forbidden=("transformer_lab.gpt.training_flops", "transformer_lab.gpt.GPT.num_parameters"),
    mistakes=[
        Mistake(
            "first-axis",
            "len(p) counts a parameter's first axis only: a parameter holds p.numel() numbers "
            "(a d_ff × d_model matrix holds d_ff · d_model).",
            _flops_first_axis,
        ),
        Mistake(
            "matrices-only",
            "only the weight matrices are counted: N counts every parameter outside the "
            "embeddings, the biases and the LayerNorms' γ and β too.",
            _flops_matrices_only,
        ),
        Mistake(
            "forward-only",
            "you counted the forward pass only (2·N·D): the backward pass costs twice as much "
            "again, 6·N·D in all.",
            _flops_forward_only,
        ),
        Mistake(
            "backward-as-forward",
            "the backward pass was counted as one more forward (4·N·D): it computes two "
            "gradients per weight product (for the activations and for the weight), 4 FLOPs per "
            "parameter and token, so 6·N·D in all.",
            _flops_backward_as_forward,
        ),
        Mistake(
            "multiply-adds",
            "you counted multiply-adds (3·N·D): each is 2 FLOPs, a multiplication and an "
            "addition, so 6·N·D.",
            _flops_multiply_adds,
        ),
        Mistake(
            "tokens-per-step",
            "D is the tokens of one step (batch_size · block_size): multiply by n_steps, D is "
            "every token the run trains on.",
            _flops_tokens_per_step,
        ),
        Mistake(
            "sequences",
            "D counts windows, not tokens: each of the batch_size windows holds block_size "
            "tokens, D = batch_size · block_size · n_steps.",
            _flops_sequences,
        ),
        Mistake(
            "context",
            "D used the model's n_positions: the windows trained on are block_size tokens long.",
            _flops_context,
        ),
        Mistake(
            "with-embeddings",
            "N included the embeddings wte and wpe: count the parameters outside them "
            "(Kaplan et al.'s N).",
            _flops_with_embeddings,
        ),
        Mistake(
            "wpe-counted",
            "N still includes the position table wpe: leave out both embeddings, wte and wpe.",
            _flops_wpe_counted,
        ),
        Mistake(
            "wte-counted",
            "N still includes the token table wte, which is also the tied output layer (counted "
            "directly, or as lm_head.weight through state_dict()): leave out both embeddings, "
            "wte and wpe.",
            _flops_wte_counted,
        ),
        Mistake(
            "blocks-only",
            "N counted only the blocks: the final LayerNorm ln_f is a parameter outside the "
            "embeddings too.",
            _flops_blocks_only,
        ),
        Mistake(
            "predictions",
            "D counts block_size - 1 predictions per window: every token of the window runs "
            "forward and backward, so D = batch_size · block_size · n_steps.",
            _flops_predictions,
        ),
        Mistake(
            "tensor-count",
            "N counted the parameter tensors, not the numbers in them: add up p.numel() for "
            "every parameter outside the embeddings.",
            _flops_tensor_count,
        ),
    ],
    driver=ExactDriver(
        _calls, covered="N, D and the FLOPs exactly", equal=_same_count, describe=_describe
    ),
    doc="training_flops(model, batch_size, block_size, n_steps) -> 6·N·D, N the parameters "
    "outside the embeddings, D every token trained on",
)
