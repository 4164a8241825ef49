"""The model families run on the student's own parts (student.parts / student.use).

A student's MultiHeadAttention, LayerNorm, FeedForward, EncoderBlock and DecoderBlock that passed
their checks are saved into their package; `student.parts()` gives them as the `Parts` a model is
built from, `GPT(GPTConfig(...), parts=student.parts())` (likewise Transformer, BERT, BART, ViT), and
`student.use("GPT")` is GPT with those parts as its default. The proof that the student's code really
runs: with copied Hugging Face weights their model reproduces Hugging Face's logits, and the same
model with one saved part broken does not.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import transformer_lab
from transformer_lab import bart, bert, check, student
from transformer_lab.encoder_decoder import Parts, Transformer, TransformerConfig
from transformer_lab.gpt import GPT, GPTConfig
from transformer_lab.vit import ViT

transformers = pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def _fresh_student(student_dir):
    student._TOLD.clear()


# ---------------------------------------------------------------------------------------------
# What a student writes in lessons 03 and 05 (the API contract's signatures: fewer options than
# the reference — no dropout or cache in attention, ReLU only in the FFN).


class MyAttention(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        self.n_heads = n_heads
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        B, L, d = x.shape
        h = self.n_heads

        def heads(t):
            return t.view(B, t.shape[1], h, d // h).transpose(1, 2)

        q, k, v = heads(self.w_q(x)), heads(self.w_k(context)), heads(self.w_v(context))
        scores = q @ k.transpose(-2, -1) / (d // h) ** 0.5
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
        return self.w_o(out.transpose(1, 2).reshape(B, L, d))


class MyLayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return self.weight * (x - mu) / torch.sqrt(var + self.eps) + self.bias


class MyFeedForward(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(F.relu(self.w_1(x)))


def _pass_parts(capsys):
    check.MultiHeadAttention(MyAttention)
    check.LayerNorm(MyLayerNorm)
    check.FeedForward(MyFeedForward)
    out = capsys.readouterr().out
    assert out.count("saved into your package") == 3, out


def _break_saved_layer_norm():
    """Simulate a wrong LayerNorm in the package (unbiased variance) behind the check's back."""
    path = student._package_dir() / "add_norm.py"
    text = path.read_text()
    broken = text.replace("((x - mu) ** 2).mean(-1, keepdim=True)", "x.var(-1, keepdim=True)")
    assert broken != text
    path.write_text(broken)
    for name in [m for m in list(__import__("sys").modules) if m.startswith("transformer_lab_st")]:
        del __import__("sys").modules[name]


def _randomise(model: nn.Module, seed: int = 0) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = 0.2 * torch.randn(p.shape, generator=g)
            p.copy_(1 + noise if p.dim() == 1 and name.endswith("weight") else noise)
    return model.eval()


def _gpt2():
    config = transformers.GPT2Config(
        vocab_size=40,
        n_positions=16,
        n_embd=32,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    return _randomise(transformers.GPT2LMHeadModel(config))


# ---------------------------------------------------------------------------------------------


def test_without_passed_parts_the_reference_class_comes_back(capsys):
    assert student.use("GPT") is GPT
    assert student.built_from_yours(Transformer) is Transformer


@pytest.mark.parametrize("name", ["GPT", "CLIP"])
def test_a_model_no_exercise_writes_is_not_called_yours_to_pass(name, capsys):
    """No check passes CLIP or GPT: "yours has not passed its check yet" would never come true
    (issue 29: exercise 13 printed it after every check had passed)."""
    student.use(name)
    out = capsys.readouterr().out
    assert "yours has not passed" not in out
    assert f"no exercise writes {name}" in out


def test_gpt_is_built_from_the_students_parts(capsys):
    _pass_parts(capsys)
    MyGPT = student.use("GPT")
    assert issubclass(MyGPT, GPT) and MyGPT is not GPT
    model = MyGPT(GPTConfig(vocab_size=20, n_positions=8, d_model=16, n_heads=2, n_layers=2))
    out = capsys.readouterr().out
    built = next(line for line in out.splitlines() if line.startswith("GPT: built from YOUR"))
    # the line names what the model really contains: not the FeedForward that fell back
    assert "MultiHeadAttention" in built and "LayerNorm" in built and "FeedForward" not in built
    assert "FeedForward: the reference is used here" in out
    block = model.blocks[0]
    assert type(block.self_attn).__module__ == "transformer_lab_student.multihead"
    assert type(block.norm1).__module__ == "transformer_lab_student.add_norm"
    assert type(model.ln_f).__module__ == "transformer_lab_student.add_norm"
    # GPT needs a GELU feed-forward; the student's has ReLU only, so that part stays the reference
    assert type(block.ffn) is transformer_lab.add_norm.FeedForward
    # the reference classes are untouched afterwards
    assert (
        type(GPT(GPTConfig(20, 8, 16, 2, 1)).blocks[0].self_attn)
        is transformer_lab.MultiHeadAttention
    )


def test_students_gpt_reproduces_hugging_face_logits(capsys):
    _pass_parts(capsys)
    hf = _gpt2()
    mine = student.use("GPT").from_hf(hf)
    assert type(mine.blocks[1].self_attn).__module__ == "transformer_lab_student.multihead"
    idx = torch.randint(0, 40, (3, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(mine(idx), hf(idx).logits, atol=1e-5, rtol=1e-5)


def test_a_broken_saved_part_breaks_the_parity(capsys):
    """Mutant: the parity above holds only because the student's (correct) code runs."""
    _pass_parts(capsys)
    _break_saved_layer_norm()
    hf = _gpt2()
    mine = student.use("GPT").from_hf(hf)
    idx = torch.randint(0, 40, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (mine(idx) - hf(idx).logits).abs().max() > 1e-3


def test_generation_without_a_kv_cache_in_the_students_attention(capsys):
    _pass_parts(capsys)
    hf = _gpt2()
    mine, ref = student.use("GPT").from_hf(hf), GPT.from_hf(hf)
    assert not mine.supports_cache
    prompt = torch.tensor([[1, 2, 3]])
    got = mine.generate(prompt, 10, temperature=0.0)
    assert "no KV cache; recomputing" in capsys.readouterr().out
    assert torch.equal(got, ref.generate(prompt, 10, temperature=0.0))


# Lessons 05 and 07 build blocks from the names of the earlier parts, as the notebooks do.
MultiHeadAttention, LayerNorm, FeedForward = MyAttention, MyLayerNorm, MyFeedForward


class MyEncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.ffn = FeedForward(d_model, d_ff)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.drop(self.self_attn(self.norm1(x), mask=mask))
            return x + self.drop(self.ffn(self.norm2(x)))
        x = self.norm1(x + self.drop(self.self_attn(x, mask=mask)))
        return self.norm2(x + self.drop(self.ffn(x)))


class MyDecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.cross_attn = MultiHeadAttention(d_model, n_heads)
        self.ffn = FeedForward(d_model, d_ff)
        self.norm1, self.norm2, self.norm3 = (LayerNorm(d_model) for _ in range(3))
        self.drop = nn.Dropout(dropout)

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.drop(self.self_attn(self.norm1(x), mask=self_mask))
            x = x + self.drop(self.cross_attn(self.norm2(x), context=memory, mask=memory_mask))
            return x + self.drop(self.ffn(self.norm3(x)))
        x = self.norm1(x + self.drop(self.self_attn(x, mask=self_mask)))
        x = self.norm2(x + self.drop(self.cross_attn(x, context=memory, mask=memory_mask)))
        return self.norm3(x + self.drop(self.ffn(x)))


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_runs_on_the_students_blocks(capsys, norm_first):
    _pass_parts(capsys)
    check.EncoderBlock(MyEncoderBlock)
    check.DecoderBlock(MyDecoderBlock)
    MyTransformer = student.use("Transformer")
    assert "EncoderBlock" in capsys.readouterr().out
    kw = dict(d_model=16, n_heads=2, n_layers=2, d_ff=32, dropout=0.1, norm_first=norm_first)
    cfg = TransformerConfig(11, 13, **kw)
    mine, ref = MyTransformer(cfg), Transformer(cfg)
    assert type(mine.encoder[0]).__module__ == "transformer_lab_student.add_norm"
    assert type(mine.decoder[1]).__module__ == "transformer_lab_student.encoder_decoder"
    assert type(mine.decoder[1].cross_attn).__module__ == "transformer_lab_student.multihead"
    _randomise(ref)
    mine.load_state_dict(ref.state_dict())
    mine.eval()
    src = torch.randint(1, 11, (2, 7), generator=torch.Generator().manual_seed(6))
    src[1, 5:] = 0  # padding
    tgt = torch.randint(1, 13, (2, 5), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        torch.testing.assert_close(mine(src, tgt), ref(src, tgt), atol=1e-5, rtol=1e-5)
        weights = mine.cross_attention_weights(src, tgt)
        torch.testing.assert_close(weights, ref.cross_attention_weights(src, tgt))


def test_bert_and_bart_parity_on_the_students_parts(capsys):
    _pass_parts(capsys)
    config = transformers.BertConfig(
        vocab_size=30,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=16,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    hf = _randomise(transformers.BertModel(config))
    mine = bert.from_hf(hf, parts=student.parts())
    assert "transformer_lab_student.multihead" in {type(m).__module__ for m in mine.modules()}
    ids = torch.randint(0, 30, (2, 11), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = hf(ids).last_hidden_state
        got = mine(ids, attention_mask=torch.ones_like(ids))
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)

    config = transformers.BartConfig(
        vocab_size=30,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=20,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    hf = _randomise(transformers.BartForConditionalGeneration(config))
    mine = bart.from_hf(hf, parts=student.parts())
    kinds = {type(m).__module__ for m in mine.modules()}
    assert "transformer_lab_student.multihead" in kinds
    src = torch.randint(3, 30, (2, 9), generator=torch.Generator().manual_seed(3))
    tgt = torch.randint(3, 30, (2, 7), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        expected = hf(input_ids=src, decoder_input_ids=tgt).logits
        torch.testing.assert_close(mine(src, tgt), expected, atol=1e-5, rtol=1e-5)


def test_vit_parity_and_attention_maps_on_the_students_parts(capsys):
    _pass_parts(capsys)
    config = transformers.ViTConfig(
        image_size=16,
        patch_size=4,
        num_channels=3,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        num_labels=5,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    hf = _randomise(transformers.ViTForImageClassification(config))
    mine, ref = student.use("ViT").from_hf(hf), ViT.from_hf(hf)
    assert type(mine.blocks[0].self_attn).__module__ == "transformer_lab_student.multihead"
    built = [line for line in capsys.readouterr().out.splitlines() if "built from YOUR" in line]
    assert built == [
        "ViT: built from YOUR MultiHeadAttention, LayerNorm (the reference for the rest)"
    ]
    images = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        torch.testing.assert_close(mine(images), hf(images).logits, atol=1e-5, rtol=1e-5)
        # attention maps for plots come from the student's own projections
        torch.testing.assert_close(mine.attention_weights(images), ref.attention_weights(images))


def test_grading_mode_builds_nothing_from_the_students_parts(capsys, monkeypatch):
    _pass_parts(capsys)
    monkeypatch.setenv("TRANSFORMER_LAB_GRADING", "1")
    assert student.use("GPT") is GPT
    assert student.parts() == Parts()


def test_a_part_without_dropout_is_used_without_it(capsys):
    """Attention dropout is a regulariser: the student's attention runs without it (and says so);
    an option that changes the function (GELU instead of ReLU) makes that part the reference."""
    _pass_parts(capsys)
    MyBERT = student.use("BERT")
    model = MyBERT(
        bert.BERTConfig(30, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_position=8, dropout=0.1)
    )
    kinds = {type(m).__module__ for m in model.modules()}
    assert "transformer_lab_student.multihead" in kinds
    out = capsys.readouterr().out
    assert "MultiHeadAttention: yours has no `dropout` argument; it runs without dropout" in out
    assert "FeedForward: the reference is used here" in out


def test_a_used_part_takes_the_reference_options_lectures_pass(capsys):
    """`student.use("MultiHeadAttention")` is the student's class, and also answers the
    lectures' need_weights=True (weights recomputed from the student's own projections)."""
    _pass_parts(capsys)
    Mine = student.use("MultiHeadAttention")
    assert type(Mine).__name__ == "type" and Mine.__module__ == "transformer_lab_student.multihead"
    mine, ref = Mine(16, 4), transformer_lab.MultiHeadAttention(16, 4)
    ref.load_state_dict(mine.state_dict())
    x, context = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    out, weights = mine(x, context=context, need_weights=True)
    ref_out, ref_weights = ref(x, context=context, need_weights=True)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(weights, ref_weights)
    assert torch.equal(mine(x), Mine.__mro__[1].forward(mine, x))  # the student's own forward


def test_parts_passed_in_as_the_lectures_write_it(capsys):
    """`GPT(GPTConfig(...), parts=student.parts())`: the student's classes are in the model, the model says
    so, and without passed parts `student.parts()` is the reference."""
    assert student.parts() == Parts()
    _pass_parts(capsys)
    parts = student.parts()
    assert parts != Parts()
    model = GPT(
        GPTConfig(vocab_size=20, n_positions=8, d_model=16, n_heads=2, n_layers=1), parts=parts
    )
    out = capsys.readouterr().out
    assert "GPT: built from YOUR MultiHeadAttention, LayerNorm (the reference for the rest)" in out
    assert type(model.blocks[0].self_attn).__module__ == "transformer_lab_student.multihead"
    assert type(model.ln_f).__module__ == "transformer_lab_student.add_norm"
    quiet = GPT(GPTConfig(20, 8, 16, 2, 1), parts=student.parts(quiet=True))
    assert type(quiet.ln_f).__module__ == "transformer_lab_student.add_norm"
    assert "built from" not in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# A saved module that asks for parts while it loads (issue 29's browser walk: exercises 08-10 hung
# for ever when lesson 07's DecoderBlock was saved but lesson 03's MultiHeadAttention was not).


class _Runaway(BaseException):
    """Stops a load that does not end (a BaseException: `_yours` catches Exception)."""


def _save_by_hand(module: str, name: str, source: str) -> None:
    """A saved part as `student.save` writes it: its module file and its manifest entry."""
    package = student._package_dir()
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / f"{module}.py").write_text(source)
    entry = {"lesson": 7, "module": module, "check": "visible", "source": "", "imports": []}
    (package / student.MANIFEST).write_text(json.dumps({name: entry}))


_DECODER_BLOCK = """
from torch import nn
from transformer_lab.student import use as _use
MultiHeadAttention = _use("MultiHeadAttention", quiet=True)
LayerNorm = _use("LayerNorm", quiet=True)
{also}

class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.norm = LayerNorm(d_model)

    def forward(self, x, memory=None, self_mask=None, memory_mask=None):
        return self.norm(x + self.self_attn(x, mask=self_mask))
"""


def _count_loads(monkeypatch, cap: int = 50) -> list[str]:
    loads, load = [], student._load_student

    def counting(name, module):
        loads.append(name)
        if len(loads) > cap:
            raise _Runaway(f"{len(loads)} loads: {loads[:8]} ...")
        return load(name, module)

    monkeypatch.setattr(student, "_load_student", counting)
    return loads


def test_a_saved_block_whose_sublayers_are_not_saved_loads_once(monkeypatch, capsys):
    """use("GPT") loads the saved DecoderBlock's module once: its `_use("MultiHeadAttention")`
    lines ask for leaf parts, which are not built from parts, so they load nothing."""
    _save_by_hand("encoder_decoder", "DecoderBlock", _DECODER_BLOCK.format(also=""))
    loads = _count_loads(monkeypatch)
    MyGPT = student.use("GPT")
    MyGPT(GPTConfig(vocab_size=20, n_positions=8, d_model=16, n_heads=2, n_layers=1))
    assert loads == ["DecoderBlock"], loads


def test_a_saved_module_that_asks_for_its_own_block_ends(monkeypatch, capsys):
    """A module that, while loading, asks for a block built from parts (here the EncoderBlock,
    while the file holds the saved DecoderBlock) gets the reference: the guard stops the module
    from loading itself again. The mutant without the guard loads without end."""
    source = _DECODER_BLOCK.format(also='EncoderBlock = _use("EncoderBlock", quiet=True)')
    _save_by_hand("encoder_decoder", "DecoderBlock", source)
    loads = _count_loads(monkeypatch)
    assert student.use("EncoderBlock", quiet=True) is not None
    assert len(loads) <= 3, loads

    class NeverLoading(set):  # the mutant: no module is ever "being loaded"
        def __contains__(self, item):
            return False

    monkeypatch.setattr(student, "_LOADING", NeverLoading())
    loads.clear()
    with pytest.raises(_Runaway):
        student.use("EncoderBlock", quiet=True)
