"""The walk's wrong answers (issue 29): one catalogued wrong answer per graded exercise, derived.

The browser walk (test_browser_walk.py) types each into the exercise's solution cell, runs the
visible check and expects the catalogued "Likely mistake" sentence, in one tidy message. Nothing is
pasted here; each wrong answer is read at test time from code that already exists:

- a held-out wrong implementation (``benchmarks/heldout/lessonNN.py``, written from the exercise
  text) that the visible check names: its source, with the module's imports and the module-level
  helpers it uses, the function or class renamed to the exercise's name (``HELDOUT``: exercise ->
  (implementation, the catalogued mistake's key));
- where no held-out implementation is named, the catalogue's own first wrong implementation
  (``check.EXERCISES[name].mistakes``), bound to the exercise's name in the cell;
- a practice question: its solution with one wrong answer after it, the answer whose mistake the
  question's check names (``QUESTIONS``).

The tests below are cheap (no browser): every check of every exercise has a wrong answer, and the
derived source defines the exercise's name by itself; one held-out answer is run through its check.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
HELDOUT_DIR = ROOT / "benchmarks" / "heldout"
CHECK_CALL = re.compile(r"^check\.(\w+)\(", re.M)

# exercise -> (held-out implementation in benchmarks/heldout/lessonNN.py, the mistake's key): the
# first held-out implementation that bench_mistakes.py finds named by the visible check
HELDOUT = {
    "RNN": ("RNNRecordsPrevious", "records-previous-state"),
    "sequential_steps": ("steps_conv_divides_by_k", "conv-n-over-k"),
    "scaled_dot_product_attention": ("sdpa_scale_dv", "scale-by-sqrt-d_v"),
    "SelfAttention": ("SelfAttentionRawValues", "values-are-x"),
    "split_heads": ("split_heads_dk_as_heads", "interleaved"),
    "sinusoidal_positional_encoding": ("sinusoidal_half_split", "sin-then-cos-halves"),
    "LearnedPositionalEmbedding": ("LPEOffByOneBound", "no-range-check"),
    "rotary_embedding": ("rotary_angle_per_feature", "per-feature-frequencies"),
    "LayerNorm": ("LayerNormEpsOnStd", "eps-outside-sqrt"),
    "FeedForward": ("FFNGelu", "gelu"),
    "EncoderBlock": ("EncoderNormsSwapped", "norms-swapped"),
    "causal_mask": ("causal_triu", "upper-triangle"),
    "padding_mask": ("padding_int", "int-mask"),
    "lm_loss": ("lm_loss_naive_log", "log-of-softmax-inf"),
    "next_token_probs": ("probs_no_renormalise", "softmax-first"),
    "sample_next": ("sample_gumbel_no_generator", "global-rng"),
    "bert_mask_tokens": ("mask_exact_count", "specials-chosen"),
    "mean_pool": ("pool_ignores_normalize_flag", "always-normalized"),
    "document_rotation": ("rotation_python_random", "global-rng"),
    "sentence_permutation": ("permutation_derangement", "cyclic-orders"),
    "patchify": ("patchify_unfold_tensor", "channels-last"),
    "ViTEmbedding": ("ViTEmbeddingClsNoPos", "positions-before-cls"),
    "cls_attention_map": ("cls_map_keeps_last_drops_first_patch", "keeps-cls-self"),
    "online_softmax": ("online_no_neginf_guard_inf", "unguarded-max"),
    "clip_loss": ("clip_same_direction_twice", "image-to-text-only"),
    "zero_shot_classify": ("zs_normalise_whole_tensor", "mean-of-raw-prompts"),
}


def _question_mistakes(name: str) -> tuple[str, str]:
    """A practice question's wrong answer (a line typed after its solution) and the sentence of
    the catalogued mistake its check names, both from the check's own module."""
    from transformer_lab.check import lesson01, lesson01_lstm, lesson03_thinking, lesson06, lesson08

    if name == "practice_john":  # the other place
        return (
            'practice_john = {**practice_john, "answer": "A"}',
            lesson01._john_mistakes()["nearest-place"].sentence,
        )
    if name == "practice_drop_in":  # the right letters and the first one that is no barrier
        extra = next(x for x in "ABCDE" if x not in lesson01.DROP_IN_RIGHT)
        return (
            f"practice_drop_in = {lesson01.DROP_IN_RIGHT + extra!r}",
            lesson01._drop_in_mistakes()[extra].sentence,
        )
    if name == "alpha_22":  # the first catalogued wrong number
        number, mistake = lesson06._ALPHA_22_MISTAKES[0]
        return f"alpha_22 = {number!r}", mistake.sentence
    if name == "practice_transformers":  # the first catalogued wrong letter
        letter, mistake = next(iter(lesson08._practice_mistakes().items()))
        return f"practice_transformers = {letter!r}", mistake.sentence
    if name == "practice_lstm":  # the first catalogued wrong letter
        letter, mistake = next(iter(lesson01_lstm._lstm_mistakes().items()))
        return f"practice_lstm = {letter!r}", mistake.sentence
    if name == "practice_thinking":  # the right weights with the first catalogued wrong letter
        letter, mistake = next(iter(lesson03_thinking._letter_mistakes().items()))
        return (
            f'practice_thinking = {{**practice_thinking, "answer": {letter!r}}}',
            mistake.sentence,
        )
    raise KeyError(f"no wrong answer for the practice question {name!r}")


QUESTIONS = (
    "practice_john",
    "practice_drop_in",
    "practice_lstm",
    "practice_thinking",
    "alpha_22",
    "practice_transformers",
)


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def heldout_source(lesson: str, impl: str, name: str) -> str:
    """`impl` of benchmarks/heldout/lesson<lesson>.py as a cell defining `name`: the module's
    imports, the module-level definitions `impl` uses (in file order), then `impl` renamed."""
    path = HELDOUT_DIR / f"lesson{lesson}.py"
    text = path.read_text()
    tree = ast.parse(text)
    defs = {
        node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))
    }
    if impl not in defs:
        raise KeyError(f"{path.name} defines no function or class {impl!r}")
    needed, todo = set(), [impl]
    while todo:
        for used in _names(defs[todo.pop()]) & defs.keys() - needed - {impl}:
            needed.add(used)
            todo.append(used)
    parts = [
        ast.get_source_segment(text, node)
        for node in tree.body
        if isinstance(node, (ast.Import, ast.ImportFrom))
        or (isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in needed)
    ]
    parts.append(re.sub(rf"\b{re.escape(impl)}\b", name, ast.get_source_segment(text, defs[impl])))
    return "\n\n\n".join(parts) + "\n"


def wrong_answer(lesson: str, name: str, solution: str) -> tuple[str, str]:
    """For the check `name` of exercise notebook `lesson` ("12_attention_at_scale"), whose solution
    cell's source is `solution`: (the wrong cell to type, the "Likely mistake" sentence expected)."""
    from transformer_lab import check

    if name in QUESTIONS:
        line, sentence = _question_mistakes(name)
        return f"{solution.rstrip()}\n{line}  # a wrong answer\n", sentence
    exercise = check.EXERCISES[name]
    if name in HELDOUT:
        impl, key = HELDOUT[name]
        return heldout_source(lesson[:2], impl, name), exercise.mistake(key).sentence
    mistake = next(m for m in exercise.mistakes if m.impl is not None)
    code = (
        "from transformer_lab.check import EXERCISES\n\n"
        f"# the check's own catalogued mistake {mistake.key!r}\n"
        f"{name} = EXERCISES[{name!r}].mistake({mistake.key!r}).impl\n"
    )
    return code, mistake.sentence


def check_names(notebook: Path) -> dict[int, str]:
    """Each check cell's index in `notebook` and the check it calls."""
    nb = nbformat.read(notebook, as_version=4)
    return {
        i: found.group(1)
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and (found := CHECK_CALL.search(c.source))
    }


# ----------------------------------------------------------------------------------------------


def _exercises() -> list[Path]:
    return sorted(p for p in (ROOT / "exercises").iterdir() if p.name[:2].isdigit())


def test_every_check_of_every_exercise_has_a_wrong_answer():
    from transformer_lab import check

    named = set()
    for folder in _exercises():
        for name in check_names(folder / f"{folder.name}.ipynb").values():
            code, sentence = wrong_answer(folder.name, name, "")
            assert code.strip() and sentence, name
            named.add(name)
    assert set(check.EXERCISES) <= named, set(check.EXERCISES) - named
    assert set(HELDOUT) <= named and set(QUESTIONS) <= named


def test_a_held_out_answer_is_self_contained_and_defines_the_exercise():
    lessons = {
        name: f.name for f in _exercises() for name in check_names(f / f"{f.name}.ipynb").values()
    }
    for name, (impl, _) in HELDOUT.items():
        lesson = lessons[name]
        namespace: dict = {}
        exec(compile(heldout_source(lesson[:2], impl, name), name, "exec"), namespace)
        assert callable(namespace[name]) and impl not in namespace, name


def test_the_derived_held_out_answer_is_named_by_its_check():
    from transformer_lab import check
    from transformer_lab.check import CheckFailed

    namespace: dict = {}
    exec(heldout_source("03", "split_heads_dk_as_heads", "split_heads"), namespace)
    with pytest.raises(CheckFailed) as err:
        check.split_heads(namespace["split_heads"])
    assert err.value.mistake_key == HELDOUT["split_heads"][1], err.value


def test_a_missing_held_out_implementation_is_a_clear_error():
    with pytest.raises(KeyError, match="lesson03.py defines no function or class"):
        heldout_source("03", "no_such_split_heads", "split_heads")
