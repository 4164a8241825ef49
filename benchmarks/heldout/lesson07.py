"""Lesson 07: the decoder block and greedy decoding."""

import torch
from torch import nn

from transformer_lab.add_norm import FeedForward, LayerNorm
from transformer_lab.multihead import MultiHeadAttention


class _DecBase(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, "relu", dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)


class DecoderRight(_DecBase):
    """Correct."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        subs = [
            (self.norm1, lambda h: self.self_attn(h, mask=self_mask)),
            (self.norm2, lambda h: self.cross_attn(h, context=memory, mask=memory_mask)),
            (self.norm3, self.ffn),
        ]
        for norm, sub in subs:
            x = (
                x + self.dropout(sub(norm(x)))
                if self.norm_first
                else norm(x + self.dropout(sub(x)))
            )
        return x


class DecoderMemoryNormed(_DecBase):
    """Pre-norm: also normalises the memory with norm2 before cross-attention."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=self_mask)
            x = x + self.cross_attn(self.norm2(x), context=self.norm2(memory), mask=memory_mask)
            return x + self.ffn(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, mask=self_mask))
        x = self.norm2(x + self.cross_attn(x, context=memory, mask=memory_mask))
        return self.norm3(x + self.ffn(x))


class DecoderMasksSwapped(_DecBase):
    """Passes memory_mask to self-attention and self_mask to cross-attention."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        try:
            a = self.self_attn(x if not self.norm_first else self.norm1(x), mask=memory_mask)
        except RuntimeError:
            a = self.self_attn(x if not self.norm_first else self.norm1(x))
        if self.norm_first:
            x = x + a
            x = x + self.cross_attn(self.norm2(x), context=memory)
            return x + self.ffn(self.norm3(x))
        x = self.norm1(x + a)
        x = self.norm2(x + self.cross_attn(x, context=memory))
        return self.norm3(x + self.ffn(x))


class DecoderCrossFirst(_DecBase):
    """Does cross-attention before self-attention."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.cross_attn(self.norm1(x), context=memory, mask=memory_mask)
            x = x + self.self_attn(self.norm2(x), mask=self_mask)
            return x + self.ffn(self.norm3(x))
        x = self.norm1(x + self.cross_attn(x, context=memory, mask=memory_mask))
        x = self.norm2(x + self.self_attn(x, mask=self_mask))
        return self.norm3(x + self.ffn(x))


class DecoderCrossFromBlockInput(_DecBase):
    """Cross-attention queries come from the block's input x, not the self-attention output."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            h = x + self.self_attn(self.norm1(x), mask=self_mask)
            h = h + self.cross_attn(self.norm2(x), context=memory, mask=memory_mask)
            return h + self.ffn(self.norm3(h))
        h = self.norm1(x + self.self_attn(x, mask=self_mask))
        h = self.norm2(h + self.cross_attn(x, context=memory, mask=memory_mask))
        return self.norm3(h + self.ffn(h))


class DecoderNoCrossResidual(_DecBase):
    """Forgets the residual around cross-attention."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=self_mask)
            x = self.cross_attn(self.norm2(x), context=memory, mask=memory_mask)
            return x + self.ffn(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, mask=self_mask))
        x = self.norm2(self.cross_attn(x, context=memory, mask=memory_mask))
        return self.norm3(x + self.ffn(x))


@torch.no_grad()
def greedy_right(model, src, bos_id, eos_id, max_len):
    """Correct."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == eos_id
        if done.all():
            break
    return ys


@torch.no_grad()
def greedy_eos_replaced(model, src, bos_id, eos_id, max_len):
    """Writes PAD in place of the EOS token itself (done updated before the replacement)."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        done |= nxt == eos_id
        nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        if done.all():
            break
    return ys


@torch.no_grad()
def greedy_max_len_total(model, src, bos_id, eos_id, max_len):
    """Counts BOS in max_len: at most max_len - 1 steps."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    while ys.shape[1] < max_len:
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == eos_id
        if done.all():
            break
    return ys


@torch.no_grad()
def greedy_softmax_sample(model, src, bos_id, eos_id, max_len):
    """Argmax over the wrong axis of the last logits (the batch axis, dim=0)."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        logits = model.decode(ys, memory, src_mask)[:, -1]
        nxt = logits.argmax(-1) if logits.shape[0] == 1 else logits.argmax(0)[: logits.shape[0]]
        nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == eos_id
        if done.all():
            break
    return ys


@torch.no_grad()
def greedy_no_encode_reuse(model, src, bos_id, eos_id, max_len):
    """Keeps decoding only the new token (ys[:, -1:]) without a cache."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys[:, -1:], memory, src_mask)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == eos_id
        if done.all():
            break
    return ys


@torch.no_grad()
def greedy_float_ys(model, src, bos_id, eos_id, max_len):
    """Builds ys with torch.full's default float dtype, then casts only at the end."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), float(bos_id), device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys.long(), memory, src_mask)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None].float()], dim=1)
        done |= nxt == eos_id
        if done.all():
            break
    return ys


WRONG = {
    "DecoderBlock": [
        DecoderMemoryNormed,
        DecoderMasksSwapped,
        DecoderCrossFirst,
        DecoderCrossFromBlockInput,
        DecoderNoCrossResidual,
    ],
    "greedy_decode": [
        greedy_eos_replaced,
        greedy_max_len_total,
        greedy_softmax_sample,
        greedy_no_encode_reuse,
        greedy_float_ys,
    ],
}
RIGHT = {"DecoderBlock": DecoderRight, "greedy_decode": greedy_right}
