"""torch.compile and the course GPT: its training step is one graph, compiled once.

A graph break (Python that Dynamo cannot trace: a tensor read back with `.item()`, an `if` on a
tensor's value, a builtin it does not handle) cuts the compiled model into pieces that run
eagerly in between, with no fusion across them; a recompile redoes the work at every step. The
first GPU run (benchmarks/gpu/gpu_check_2026-11-27_H200.md) found the compiled course GPT 2.1×
slower than nanoGPT's for those two reasons. `torch._dynamo.explain` traces without compiling
(no C++ compiler needed), and the "eager" backend runs the captured graph as it is, so both tests
are cheap on a CPU. Each is also run on a mutant that brings a break or a recompile back.
"""

from __future__ import annotations

import pytest
import torch

from transformer_lab.gpt import GPT, GPTBlock, GPTConfig

V, N_POS = 32, 16


def tiny_gpt() -> GPT:
    """A small GPT in training mode, with dropout (its kernel's dropout_p is traced too)."""
    torch.manual_seed(0)
    cfg = GPTConfig(V, N_POS, d_model=8, n_heads=2, n_layers=1, dropout=0.1)
    return GPT(cfg).train()


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randint(V, (2, N_POS), generator=g), torch.randint(V, (2, N_POS), generator=g)


def graph_breaks(model: GPT) -> list[str]:
    """The reasons of every graph break in the model's loss (its forward pass and lm_loss)."""
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model.loss)(*batch())
    return [reason.reason.splitlines()[0] for reason in explanation.break_reasons]


def train_compiled(model: GPT, steps: int = 3) -> None:
    """`steps` training steps of torch.compile(model); raises RecompileError on a recompile."""
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="eager")  # Dynamo's capture, without a compiler
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx, targets = batch()
    with torch._dynamo.config.patch(error_on_recompile=True):
        for _ in range(steps):
            loss = torch.nn.functional.cross_entropy(compiled(idx).flatten(0, 1), targets.flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()


def test_the_training_step_has_no_graph_break():
    assert graph_breaks(tiny_gpt()) == []


def _read_back_a_value(monkeypatch):  # e.g. a log line of the activations' size
    forward = GPTBlock.forward

    def with_item(self, x, *args, **kwargs):
        self.last_max = x.abs().max().item()
        return forward(self, x, *args, **kwargs)

    monkeypatch.setattr(GPTBlock, "forward", with_item)


def _read_the_token_ids(monkeypatch):  # the ids' range checked while compiling too
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: False)


@pytest.mark.parametrize("mutant", [_read_back_a_value, _read_the_token_ids])
def test_mutant_with_a_graph_break_is_caught(monkeypatch, mutant):
    mutant(monkeypatch)
    assert graph_breaks(tiny_gpt())


def test_compiled_training_steps_do_not_recompile():
    train_compiled(tiny_gpt())


def test_mutant_that_recompiles_at_every_step_is_caught(monkeypatch):
    forward = GPT.forward

    def counting(self, *args, **kwargs):  # a step counter kept on the module
        self.calls = getattr(self, "calls", 0) + 1
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(GPT, "forward", counting)
    with pytest.raises(torch._dynamo.exc.RecompileError):
        train_compiled(tiny_gpt())


def test_a_torch_without_is_compiling_still_checks_the_ids(monkeypatch):  # torch 2.1 and 2.2
    monkeypatch.delattr(torch.compiler, "is_compiling")
    with pytest.raises(ValueError, match="vocabulary has 32 tokens"):
        tiny_gpt()(torch.tensor([[0, V]]))
