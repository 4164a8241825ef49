"""Lesson 13 checks: clip_loss.

Correct implementations written the way a student would pass (F.cross_entropy, a hand-written
log-softmax, a loop over the pairs); every catalogued mistake is named by the visible check and by
the thorough one; further wrong variants are caught; forbidden built-ins are refused; bad input
gets a clear message. The check is deterministic (fixed inputs from the check's own generators),
so there is no false-failure probability to bound.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from transformer_lab import check, clip
from transformer_lab.check import lesson13

# ---------------------------------------------------------------------------------------------
# Correct student implementations, each by another route than the reference.


def good_clip_loss(image_features, text_features, logit_scale):
    image = image_features / image_features.norm(dim=-1, keepdim=True)
    text = text_features / text_features.norm(dim=-1, keepdim=True)
    logits_per_image = logit_scale.exp() * image @ text.T
    labels = torch.arange(len(image), device=image.device)
    return (
        F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_image.T, labels)
    ) / 2


def log_softmax_clip_loss(image_features, text_features, logit_scale):
    """No cross_entropy: the diagonal of the log-softmax over rows and over columns."""
    image = F.normalize(image_features, dim=1)
    text = F.normalize(text_features, dim=1)
    logits = torch.exp(logit_scale) * (image @ text.t())
    return -(logits.log_softmax(1).diagonal().mean() + logits.log_softmax(0).diagonal().mean()) / 2


def loop_clip_loss(image_features, text_features, logit_scale):
    """Pair by pair, with cosine_similarity and logsumexp."""
    B = image_features.shape[0]
    scale = logit_scale.exp()
    total = 0
    for i in range(B):
        row = scale * F.cosine_similarity(image_features[i : i + 1], text_features, dim=-1)
        col = scale * F.cosine_similarity(text_features[i : i + 1], image_features, dim=-1)
        total = total + (torch.logsumexp(row, 0) - row[i]) + (torch.logsumexp(col, 0) - col[i])
    return total / (2 * B)


GOOD = [good_clip_loss, log_softmax_clip_loss, loop_clip_loss]


@pytest.mark.parametrize("thorough", [False, True], ids=["visible", "thorough"])
@pytest.mark.parametrize("impl", GOOD, ids=[f.__name__ for f in GOOD])
def test_correct_implementations_pass(impl, thorough, capsys):
    assert check.clip_loss(impl, thorough=thorough) is None
    out = capsys.readouterr().out
    assert "✓ clip_loss" in out and "gradients" in out


def test_passing_clip_loss_is_saved_into_the_students_package(tmp_path):
    check.clip_loss(good_clip_loss)
    saved = (tmp_path / "pkg" / "transformer_lab_student" / "clip.py").read_text()
    assert "def good_clip_loss" in saved and "clip_loss = good_clip_loss" in saved


def test_checks_do_not_touch_the_global_seed():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check.clip_loss(good_clip_loss)
    assert torch.equal(torch.rand(3), expected)


# ---------------------------------------------------------------------------------------------
# The catalogue: every mistake is caught and named, visible and thorough.

EX = check.EXERCISES["clip_loss"]
KEYS = [m.key for m in EX.mistakes]


def test_catalogue_holds_the_mistakes_the_design_names():
    for key in (
        "image-to-text-only",
        "text-to-image-only",
        "no-normalisation",
        "divided-by-scale",
        "scale-without-exp",
        "labels-not-diagonal",
    ):
        assert key in KEYS


@pytest.mark.parametrize("thorough", [False, True], ids=["visible", "thorough"])
@pytest.mark.parametrize("key", KEYS)
def test_each_catalogued_mistake_is_caught_and_named(key, thorough):
    mistake = EX.mistake(key)
    with pytest.raises(check.CheckFailed) as info:
        check.clip_loss(mistake.impl, thorough=thorough)
    assert info.value.exercise == "clip_loss"
    assert info.value.mistake == mistake.sentence
    assert f"Likely mistake: {mistake.sentence}" in str(info.value)


def test_the_first_visible_case_tells_every_mistake_apart():
    """Each mutant differs from the reference and from every other one on the first case (rows
    of different norms, B != d, exp(t) neither 1 nor t): the name given is the right one."""
    case = lesson13._clip_loss_cases(False)[0]
    inputs = case.make(torch.Generator().manual_seed(0))
    # a clamp at 100 shows only above it: the visible case exp(logit_scale) = 200 tells it apart
    # and log(softmax) only where the softmax underflows (a visible case of large logits)
    mistakes = [m for m in EX.mistakes if m.key not in ("scale-clamped", "log-of-softmax")]
    values = [clip.clip_loss(**inputs).item()] + [m.impl(**inputs).item() for m in mistakes]
    for i, a in enumerate(values):
        for b in values[i + 1 :]:
            assert abs(a - b) > 1e-6, values
    above = next(c for c in lesson13._clip_loss_cases(False) if "= 200" in c.label)
    inputs = above.make(torch.Generator().manual_seed(0))
    clamped = EX.mistake("scale-clamped").impl(**inputs).item()
    assert abs(clamped - clip.clip_loss(**inputs).item()) > 1e-6
    underflows = [  # in float32, as the visible check runs each case too
        EX.mistake("log-of-softmax")
        .impl(**{k: v.float() for k, v in c.make(torch.Generator().manual_seed(0)).items()})
        .item()
        for c in lesson13._clip_loss_cases(False)
    ]
    assert any(v == float("inf") for v in underflows)


def test_the_mutants_follow_the_contract_when_right():
    """The mutants share private helpers: where a mistake cannot show (one pair, exp(t) = 1 for
    the temperature mistakes), they equal the reference, so they are wrong only where named."""
    g = torch.Generator().manual_seed(0)
    image, text = torch.randn(1, 4, generator=g), torch.randn(1, 4, generator=g)
    t = torch.tensor(0.7)
    for key in ("image-to-text-only", "text-to-image-only", "labels-not-diagonal"):
        torch.testing.assert_close(
            EX.mistake(key).impl(image, text, t), clip.clip_loss(image, text, t)
        )
    image, text = torch.randn(5, 3, generator=g), torch.randn(5, 3, generator=g)
    zero = torch.tensor(0.0)
    torch.testing.assert_close(
        EX.mistake("divided-by-scale").impl(image, text, zero), clip.clip_loss(image, text, zero)
    )


def no_grad_to_scale(image_features, text_features, logit_scale):
    """The temperature as a Python float: no gradient reaches logit_scale."""
    image = F.normalize(image_features, dim=-1)
    text = F.normalize(text_features, dim=-1)
    logits = logit_scale.exp().item() * image @ text.T
    labels = torch.arange(len(image))
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def cpu_labels(image_features, text_features, logit_scale):
    """Right on the CPU, but the labels never follow the features to another device."""
    image = F.normalize(image_features, dim=-1)
    text = F.normalize(text_features, dim=-1)
    logits = logit_scale.exp() * image @ text.T
    labels = torch.arange(len(image))
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def float32_only(image_features, text_features, logit_scale):
    """Computes in float32 whatever the input dtype."""
    return good_clip_loss(image_features.float(), text_features.float(), logit_scale.float())


def squared_norm(image_features, text_features, logit_scale):
    """Divides by the squared norm: the rows do not have unit length."""
    image = image_features / (image_features**2).sum(-1, keepdim=True)
    text = text_features / (text_features**2).sum(-1, keepdim=True)
    logits = logit_scale.exp() * image @ text.T
    labels = torch.arange(len(image), device=image.device)
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


@pytest.mark.parametrize(
    "wrong,message",
    [
        (no_grad_to_scale, "no gradient flows back to `logit_scale`"),
        (float32_only, "dtype"),
        (squared_norm, "loss"),
    ],
    ids=["no-grad-to-scale", "float32-only", "squared-norm"],
)
def test_other_wrong_variants_are_caught(wrong, message):
    with pytest.raises(check.CheckFailed, match=message):
        check.clip_loss(wrong, thorough=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_labels_left_on_the_cpu_fail_the_hidden_check_on_cuda():
    assert check.clip_loss(cpu_labels) is None
    with pytest.raises(check.CheckFailed, match="raised"):
        check.clip_loss(cpu_labels, thorough=True)


# ---------------------------------------------------------------------------------------------
# Forbidden names, the reference, nothing passed.


def uses_reference(image_features, text_features, logit_scale):
    return clip.clip_loss(image_features, text_features, logit_scale)


def uses_transformers(image_features, text_features, logit_scale):
    from transformers.models.clip import modeling_clip

    image = F.normalize(image_features, dim=-1)
    text = F.normalize(text_features, dim=-1)
    loss = getattr(modeling_clip, "image_text_contrastive_loss", None) or modeling_clip.clip_loss
    return loss(logit_scale.exp() * text @ image.T)


@pytest.mark.parametrize(
    "impl,what",
    [
        (uses_reference, "transformer_lab.clip.clip_loss"),
        (uses_transformers, "transformers.models.clip.modeling_clip.[a-z_]*"),
    ],
    ids=["course", "transformers"],
)
def test_forbidden_names_are_refused_and_restored(impl, what):
    pytest.importorskip("transformers")
    with pytest.raises(check.ImplementThisYourself, match=f"{what} is what the exercise"):
        check.clip_loss(impl)
    image, text = torch.randn(3, 4), torch.randn(3, 4)
    assert clip.clip_loss(image, text, torch.tensor(1.0)).shape == ()  # restored


def test_the_check_does_not_import_transformers_itself():
    """transformers' loss is switched off once transformers is imported (as code that calls it
    has done); a check of code that never imported it does not pay seconds to import it."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "import torch, torch.nn.functional as F\n"
        "from transformer_lab import check\n"
        "def f(image_features, text_features, logit_scale):\n"
        "    i = F.normalize(image_features, dim=-1)\n"
        "    t = F.normalize(text_features, dim=-1)\n"
        "    logits = logit_scale.exp() * i @ t.T\n"
        "    labels = torch.arange(len(i))\n"
        "    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2\n"
        "check.clip_loss(f)\n"
        "print('transformers' in sys.modules)\n"
    )
    env = {**os.environ, "TRANSFORMER_LAB_GRADING": "1"}
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "False"
    assert lesson13.clip_loss.forbidden[-1].startswith("transformers.")  # still declared


def test_cross_entropy_and_normalize_are_allowed():
    assert check.clip_loss(good_clip_loss) is None  # F.cross_entropy
    assert check.clip_loss(log_softmax_clip_loss) is None  # F.normalize


def test_passing_the_reference_itself_is_refused():
    with pytest.raises(check.ImplementThisYourself, match="reference implementation"):
        check.clip_loss(clip.clip_loss)


def test_nothing_passed_gets_a_clear_message():
    with pytest.raises(check.CheckFailed, match="pass your implementation, e.g. check.clip_loss"):
        check.clip_loss(None)


def test_a_not_implemented_stub_propagates():
    def stub(image_features, text_features, logit_scale):
        raise NotImplementedError()

    with pytest.raises(NotImplementedError):
        check.clip_loss(stub)


def test_a_student_error_names_the_case():
    def crashes(image_features, text_features, logit_scale):
        return image_features @ text_features  # (B, d) @ (B, d): a shape error

    with pytest.raises(check.CheckFailed, match=r"your function raised RuntimeError") as info:
        check.clip_loss(crashes)
    assert "B=4, d=6" in info.value.case


# ---------------------------------------------------------------------------------------------
# zero_shot_classify


def good_zero_shot(image_features, class_features, logit_scale):
    classes = F.normalize(F.normalize(class_features, dim=-1).mean(dim=1), dim=-1)
    image = F.normalize(image_features, dim=-1)
    return (logit_scale.exp() * image @ classes.T).softmax(dim=-1)


def loop_zero_shot(image_features, class_features, logit_scale):
    """Class by class, prompt by prompt, with norms written out."""
    K, P, _ = class_features.shape
    class_vectors = []
    for k in range(K):
        total = sum(class_features[k, p] / class_features[k, p].norm() for p in range(P))
        class_vectors.append(total / total.norm())
    classes = torch.stack(class_vectors)
    image = image_features / image_features.norm(dim=1, keepdim=True)
    logits = torch.exp(logit_scale) * image @ classes.T
    return torch.exp(logits - logits.logsumexp(dim=1, keepdim=True))


ZS = check.EXERCISES["zero_shot_classify"]
ZS_GOOD = [good_zero_shot, loop_zero_shot]


@pytest.mark.parametrize("thorough", [False, True], ids=["visible", "thorough"])
@pytest.mark.parametrize("impl", ZS_GOOD, ids=[f.__name__ for f in ZS_GOOD])
def test_correct_zero_shot_implementations_pass(impl, thorough, capsys):
    assert check.zero_shot_classify(impl, thorough=thorough) is None
    assert "✓ zero_shot_classify" in capsys.readouterr().out


@pytest.mark.parametrize("thorough", [False, True], ids=["visible", "thorough"])
@pytest.mark.parametrize("key", [m.key for m in ZS.mistakes])
def test_each_zero_shot_mistake_is_caught_and_named(key, thorough):
    mistake = ZS.mistake(key)
    with pytest.raises(check.CheckFailed) as info:
        check.zero_shot_classify(mistake.impl, thorough=thorough)
    assert info.value.exercise == "zero_shot_classify"
    assert info.value.mistake == mistake.sentence


def test_the_first_zero_shot_case_tells_every_mistake_apart():
    case = lesson13._zero_shot_cases(False)[0]
    inputs = case.make(torch.Generator().manual_seed(0))
    outputs = [clip.zero_shot_classify(**inputs)] + [m.impl(**inputs) for m in ZS.mistakes]
    for i, a in enumerate(outputs):
        for b in outputs[i + 1 :]:
            assert not torch.allclose(a, b, atol=1e-6)


def test_with_one_prompt_the_ensemble_mistakes_cannot_show():
    """Why the cases have P > 1: with one prompt per class the three ensembling mistakes equal
    the reference (so the first visible case has P = 4)."""
    g = torch.Generator().manual_seed(1)
    image, classes = torch.randn(3, 5, generator=g), torch.randn(4, 1, 5, generator=g) * 3
    t = torch.tensor(1.3)
    for key in ("first-prompt-only", "mean-of-raw-prompts", "probabilities-averaged"):
        expected = clip.zero_shot_classify(image, classes, t)
        torch.testing.assert_close(ZS.mistake(key).impl(image, classes, t), expected)


def test_zero_shot_forbidden_reference_is_refused():
    def uses_reference(image_features, class_features, logit_scale):
        return clip.zero_shot_classify(image_features, class_features, logit_scale)

    with pytest.raises(check.ImplementThisYourself, match="zero_shot_classify is what the"):
        check.zero_shot_classify(uses_reference)
    with pytest.raises(check.ImplementThisYourself, match="reference implementation"):
        check.zero_shot_classify(clip.zero_shot_classify)


def test_zero_shot_may_not_call_the_course_clip_loss_but_argmax_of_nothing_fails():
    def argmax_only(image_features, class_features, logit_scale):
        """Returns hard one-hot predictions: right classes, wrong probabilities, no gradient."""
        probs = good_zero_shot(image_features, class_features, logit_scale)
        return F.one_hot(probs.argmax(-1), probs.shape[-1]).to(probs.dtype)

    with pytest.raises(check.CheckFailed, match="probs differs"):
        check.zero_shot_classify(argmax_only)
