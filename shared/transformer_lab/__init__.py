"""Transformer Lab: the course's PyTorch package, one module per lesson.

01 rnn · 02 attention · 03 multihead · 04 positional · 05 add_norm · 06 masking
07 encoder_decoder · 08 gpt · 09 bert · 10 bart · 11 vit
12 efficient (exact, tiled) · scaling (cheaper attention, KV-cache memory) · distributed (DDP) · 13 clip
plus data (offline datasets), train (training loop), viz (plots) and check (the autograder's engine).

`import transformer_lab` loads only the registry and the student's package (so a passing check
saves the student's code); each model module, torch with it, loads the first time one of its
names is asked for (``transformer_lab.GPT``, ``from transformer_lab import GPT``), as Python's
lazy module attributes (PEP 562) allow. The grader's command line needs only the registry and
so starts without torch. `load_all` imports everything at once (the grader's processes do, before
any student code runs).
"""

import importlib
from typing import TYPE_CHECKING

from . import registry, student  # noqa: F401 (student: saves every passing check; no torch)

# module -> the names `import transformer_lab` offers from it
_EXPORTS = {
    "add_norm": ("EncoderBlock", "FeedForward", "LayerNorm", "set_explicit"),
    "attention": ("SelfAttention", "fused_attention", "scaled_dot_product_attention"),
    "bart": (
        "BART",
        "BARTConfig",
        "document_rotation",
        "sentence_permutation",
        "shift_tokens_right",
        "span_corruption",
        "text_infilling",
        "token_deletion",
        "token_masking",
    ),
    "bert": (
        "BERT",
        "BertClassifier",
        "BERTConfig",
        "BertForPreTraining",
        "WordPieceTokenizer",
        "bert_mask_tokens",
        "load_minilm",
        "sentence_embedding",
    ),
    "clip": ("CLIP", "CLIPConfig", "clip_loss", "zero_shot_classify"),
    "efficient": ("online_softmax", "peak_memory", "tiled_attention"),
    "encoder_decoder": (
        "DecoderBlock",
        "Parts",
        "Transformer",
        "TransformerConfig",
        "beam_search",
        "greedy_decode",
        "length_normalised_score",
    ),
    "gpt": (
        "GPT",
        "GPTBlock",
        "GPTClassifier",
        "GPTConfig",
        "finetune_loss",
        "lm_loss",
        "sample_next",
        "shift_targets",
    ),
    "masking": ("causal_mask", "combine_masks", "padding_mask"),
    "multihead": ("KVCache", "MultiHeadAttention", "merge_heads", "split_heads"),
    "positional": (
        "LearnedPositionalEmbedding",
        "SinusoidalPositionalEncoding",
        "rotary_embedding",
        "sinusoidal_positional_encoding",
    ),
    "rnn": ("RNN", "max_path_length", "sequential_steps"),
    "scaling": (
        "GroupedQueryAttention",
        "LinformerSelfAttention",
        "PerformerSelfAttention",
        "bigbird_attention",
        "bigbird_mask",
        "kv_cache_bytes",
        "linformer_attention",
        "performer_attention",
        "positive_random_features",
        "repeat_kv",
        "sliding_window_mask",
    ),
    "vit": ("ViT", "ViTConfig", "patchify", "unpatchify"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
_SUBMODULES = ("data", "train", "viz")  # offered as names too: ``from transformer_lab import viz``

if TYPE_CHECKING:  # what editors read (Pylance, Jedi): the same names, imported for real
    from . import data, train, viz
    from .add_norm import EncoderBlock, FeedForward, LayerNorm, set_explicit
    from .attention import SelfAttention, fused_attention, scaled_dot_product_attention
    from .bart import (
        BART,
        BARTConfig,
        document_rotation,
        sentence_permutation,
        shift_tokens_right,
        span_corruption,
        text_infilling,
        token_deletion,
        token_masking,
    )
    from .bert import (
        BERT,
        BertClassifier,
        BERTConfig,
        BertForPreTraining,
        WordPieceTokenizer,
        bert_mask_tokens,
        load_minilm,
        sentence_embedding,
    )
    from .clip import CLIP, CLIPConfig, clip_loss, zero_shot_classify
    from .efficient import online_softmax, peak_memory, tiled_attention
    from .encoder_decoder import (
        DecoderBlock,
        Parts,
        Transformer,
        TransformerConfig,
        beam_search,
        greedy_decode,
        length_normalised_score,
    )
    from .gpt import (
        GPT,
        GPTBlock,
        GPTClassifier,
        GPTConfig,
        finetune_loss,
        lm_loss,
        sample_next,
        shift_targets,
    )
    from .masking import causal_mask, combine_masks, padding_mask
    from .multihead import KVCache, MultiHeadAttention, merge_heads, split_heads
    from .positional import (
        LearnedPositionalEmbedding,
        SinusoidalPositionalEncoding,
        rotary_embedding,
        sinusoidal_positional_encoding,
    )
    from .rnn import RNN, max_path_length, sequential_steps
    from .scaling import (
        GroupedQueryAttention,
        LinformerSelfAttention,
        PerformerSelfAttention,
        bigbird_attention,
        bigbird_mask,
        kv_cache_bytes,
        linformer_attention,
        performer_attention,
        positive_random_features,
        repeat_kv,
        sliding_window_mask,
    )
    from .vit import ViT, ViTConfig, patchify, unpatchify

__version__ = "0.1.0"
__all__ = [*_SUBMODULES, *_MODULE_OF]


def __getattr__(name: str):
    """A model's name, or a submodule not imported yet: import it now (PEP 562)."""
    module = _MODULE_OF.get(name)
    if module is not None:
        # not cached here: while a check switches a reference off in its module
        # (`check.forbid`), this name gives the switched-off one too, and nothing outlives it
        return getattr(importlib.import_module(f".{module}", __name__), name)
    if not name.startswith("__"):
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise  # the module exists but one of its own imports is missing
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """What a notebook's completer offers after ``tl.``: every name, and every module the names
    come from, imported yet or not (``tl.vi`` offers ``vit`` as it did before the lazy names)."""
    return sorted({*globals(), *__all__, *_EXPORTS})


def load_all() -> None:
    """Import every module `import transformer_lab` offers names from (torch with them)."""
    for module in (*_SUBMODULES, *_EXPORTS):
        importlib.import_module(f".{module}", __name__)
