"""The engine behind every test cell: compare the student's code with the reference.

A test cell calls ``check.<name>(<name>)``, e.g. ``check.scaled_dot_product_attention(
scaled_dot_product_attention)``; the hidden tests add ``thorough=True``.

- ``engine``: ``Exercise`` and ``Mistake``, tolerances, forward and gradient comparison per dtype
  and device, ``fail`` (the one place that words a failure) and saving a passing implementation
  into the student's package;
- ``drivers``: how an exercise is run (``FunctionDriver``, ``ModuleDriver``, ``ExactDriver``,
  ``TrialDriver``, ``CustomDriver``) on identical inputs and weights;
- ``forbid``: the built-ins and references switched off while the student's code runs;
- ``feedback``: how a failed check looks in a notebook (a short message, the student's own frames;
  one line for an exercise not written yet);
- ``lessonNN``: one module per lesson declaring its exercises (each an ``Exercise``, which is
  its own check), their cases and their catalogued mistakes; a lesson whose checks would pass
  ~600 lines continues in ``lessonNN_<topic>`` modules (08, 09, 10), imported in course order.

``EXERCISES`` (also ``transformer_lab.registry.EXERCISES``) lists every exercise in course order.
Works in plain Jupyter, Colab and under nbgrader alike; nothing here needs nbgrader.
"""

from __future__ import annotations

# The lesson modules, in course order: importing one declares its exercises in EXERCISES.
# isort: off
from . import (  # noqa: F401
    lesson01,
    lesson02,
    lesson03,
    lesson04,
    lesson05,
    lesson06,
    lesson07,
    lesson08,
    lesson08_sampling,
    lesson08_kvcache,
    lesson09,
    lesson09_wordpiece,
    lesson09_pooling,
    lesson10,
    lesson10_permutation,
    lesson10_rotation,
    lesson11,
    lesson12,
    lesson13,
)

# isort: on
from .drivers import (
    Call,
    CustomDriver,
    ExactDriver,
    Finding,
    FunctionDriver,
    ModuleDriver,
    TrialDriver,
)
from .engine import (
    EXERCISES,
    TOLERANCES,
    CheckFailed,
    Exercise,
    ImplementThisYourself,
    Mistake,
    NotWrittenYet,
    available_devices,
    exact_float32,
    fail,
    forbid,
    grading_mode,
)
from .lesson01 import RNN, sequential_steps
from .lesson02 import SelfAttention, scaled_dot_product_attention
from .lesson03 import MultiHeadAttention, merge_heads, split_heads
from .lesson04 import LearnedPositionalEmbedding, rotary_embedding, sinusoidal_positional_encoding
from .lesson05 import EncoderBlock, FeedForward, LayerNorm
from .lesson06 import alpha_22, causal_mask, padding_mask
from .lesson07 import DecoderBlock, greedy_decode
from .lesson08 import lm_loss, next_token_probs, practice_transformers, shift_targets
from .lesson08_kvcache import KVCache
from .lesson08_sampling import sample_next
from .lesson09 import bert_mask_tokens
from .lesson09_pooling import mean_pool
from .lesson09_wordpiece import wordpiece_tokenize
from .lesson10 import text_infilling
from .lesson10_permutation import sentence_permutation
from .lesson10_rotation import document_rotation
from .lesson11 import ViTEmbedding, cls_attention_map, patchify
from .lesson12 import online_softmax, tiled_attention
from .lesson13 import clip_loss, zero_shot_classify

__all__ = [
    "EXERCISES",
    "TOLERANCES",
    "Call",
    "CheckFailed",
    "CustomDriver",
    "ExactDriver",
    "Exercise",
    "Finding",
    "FunctionDriver",
    "ImplementThisYourself",
    "Mistake",
    "ModuleDriver",
    "NotWrittenYet",
    "TrialDriver",
    "available_devices",
    "exact_float32",
    "fail",
    "forbid",
    "grading_mode",
    # the checks, lesson by lesson (each is the Exercise its lesson module declares)
    # lesson 01
    "RNN",
    "sequential_steps",
    # lesson 02
    "SelfAttention",
    "scaled_dot_product_attention",
    # lesson 03
    "MultiHeadAttention",
    "merge_heads",
    "split_heads",
    # lesson 04
    "LearnedPositionalEmbedding",
    "rotary_embedding",
    "sinusoidal_positional_encoding",
    # lesson 05
    "EncoderBlock",
    "FeedForward",
    "LayerNorm",
    # lesson 06
    "alpha_22",
    "causal_mask",
    "padding_mask",
    # lesson 07
    "DecoderBlock",
    "greedy_decode",
    # lesson 08
    "KVCache",
    "lm_loss",
    "next_token_probs",
    "practice_transformers",
    "sample_next",
    "shift_targets",
    # lesson 09
    "bert_mask_tokens",
    "mean_pool",
    "wordpiece_tokenize",
    # lesson 10
    "document_rotation",
    "sentence_permutation",
    "text_infilling",
    # lesson 11
    "ViTEmbedding",
    "cls_attention_map",
    "patchify",
    # lesson 12
    "online_softmax",
    "tiled_attention",
    # lesson 13
    "clip_loss",
    "zero_shot_classify",
]
