"""Transformer Lab: the course's PyTorch package, one module per lesson.

01 rnn · 02 attention · 03 multihead · 04 positional · 05 add_norm · 06 masking
07 encoder_decoder · 08 gpt · 09 bert · 10 bart · 11 vit
12 efficient (exact, tiled) · scaling (cheaper attention, KV-cache memory) · distributed (DDP) · 13 clip
plus data (offline datasets), train (training loop), viz (plots) and check (the autograder's engine).
"""

from . import data, student, train, viz  # noqa: F401 (student: saves every passing check)
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

__all__ = [
    "BART",
    "BARTConfig",
    "BERT",
    "BERTConfig",
    "BertClassifier",
    "BertForPreTraining",
    "CLIP",
    "CLIPConfig",
    "GPT",
    "GPTBlock",
    "GPTConfig",
    "GPTClassifier",
    "ViT",
    "ViTConfig",
    "WordPieceTokenizer",
    "bert_mask_tokens",
    "clip_loss",
    "data",
    "document_rotation",
    "finetune_loss",
    "fused_attention",
    "lm_loss",
    "load_minilm",
    "online_softmax",
    "patchify",
    "peak_memory",
    "sample_next",
    "sentence_embedding",
    "sentence_permutation",
    "shift_targets",
    "shift_tokens_right",
    "span_corruption",
    "text_infilling",
    "tiled_attention",
    "token_deletion",
    "token_masking",
    "train",
    "unpatchify",
    "viz",
    "zero_shot_classify",
    "RNN",
    "DecoderBlock",
    "EncoderBlock",
    "FeedForward",
    "KVCache",
    "LayerNorm",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "Parts",
    "SelfAttention",
    "SinusoidalPositionalEncoding",
    "Transformer",
    "TransformerConfig",
    "beam_search",
    "causal_mask",
    "combine_masks",
    "greedy_decode",
    "max_path_length",
    "merge_heads",
    "padding_mask",
    "rotary_embedding",
    "scaled_dot_product_attention",
    "set_explicit",
    "sequential_steps",
    "sinusoidal_positional_encoding",
    "split_heads",
    "GroupedQueryAttention",
    "LinformerSelfAttention",
    "PerformerSelfAttention",
    "bigbird_attention",
    "bigbird_mask",
    "kv_cache_bytes",
    "length_normalised_score",
    "linformer_attention",
    "performer_attention",
    "positive_random_features",
    "repeat_kv",
    "sliding_window_mask",
]
