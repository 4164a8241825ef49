"""Transformer Lab: the course's PyTorch package, one module per lesson.

    01 rnn · 02 attention · 03 multihead · 04 positional · 05 add_norm · 06 masking
    07 encoder_decoder · 08 gpt · 09 bert · 10 bart · 11 vit
    plus data (offline datasets), train (training loop), viz (plots) and check (the autograder's engine).
"""

from .add_norm import EncoderBlock, FeedForward, LayerNorm
from .attention import SelfAttention, scaled_dot_product_attention
from .encoder_decoder import DecoderBlock, Transformer, beam_search, greedy_decode
from .masking import causal_mask, combine_masks, padding_mask
from .multihead import KVCache, MultiHeadAttention, merge_heads, split_heads
from .positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    rotary_embedding,
    sinusoidal_positional_encoding,
)
from .rnn import RNN, max_path_length, sequential_steps

__version__ = "0.1.0"

__all__ = [
    "RNN",
    "DecoderBlock",
    "EncoderBlock",
    "FeedForward",
    "KVCache",
    "LayerNorm",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "SelfAttention",
    "SinusoidalPositionalEncoding",
    "Transformer",
    "beam_search",
    "causal_mask",
    "combine_masks",
    "greedy_decode",
    "max_path_length",
    "merge_heads",
    "padding_mask",
    "rotary_embedding",
    "scaled_dot_product_attention",
    "sequential_steps",
    "sinusoidal_positional_encoding",
    "split_heads",
]
