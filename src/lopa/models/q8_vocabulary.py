"""A GGUF's Q8_0 token embedding kept in Q8_0, as the input embedding and the tied vocabulary projection.

Small models tie the output projection to the token embedding, and GGUF files store that matrix in Q8_0 (an
fp16 scale per 32 int8 codes) even when the rest is 4-bit. Expanded to bf16 it was the largest tensor of an int4
model (SmolLM2: 56 MB, twice that with oneDNN's packed copy, against the file's 30 MB), and the projection reads it
whole every forward. Here it stays in Q8_0: the projection runs on the AMX kernel int4 layers use
(kernels/int4_matmul.c, its int8 entry: every row computed alike whatever the row count, so trees keep one-token
steps' logits), and the embedding dequantizes only the rows it looks up, to the bf16 values transformers' own
loader gives (code * scale in fp32, rounded once).
"""

from __future__ import annotations

import gguf
import numpy as np
import torch
from gguf.gguf_reader import ReaderTensor
from torch import nn
from transformers import PreTrainedModel

from .int4 import GROUP, PANEL, _tile_kernel, fp16_field, tile_product

Q8_0_BLOCK = 34  # bytes: an fp16 scale, then 32 int8 codes


class Q8Vocabulary(nn.Module):
    """logits = x @ W.T with W = code * scale per group of 32 inputs (int8 codes, fp32 scales); bf16 in and out."""

    def __init__(self, codes: torch.Tensor, scale: torch.Tensor):
        """codes [vocab, hidden] int8, scale [vocab, hidden / 32]; vocab a multiple of 16, hidden of 64."""
        super().__init__()
        self.out_features, self.in_features = codes.shape
        panels, groups = self.out_features // PANEL, self.in_features // GROUP
        # per panel and group, 16 tile rows of 32 bytes: tile row p holds inputs 2p and 2p + 1 of the 16 outputs
        c = codes.reshape(panels, PANEL, groups, GROUP // 2, 2).permute(0, 2, 3, 1, 4)
        self.register_buffer("codes", c.contiguous(), persistent=False)
        per_panel = scale.float().reshape(panels, PANEL, groups).transpose(1, 2).contiguous()
        self.register_buffer("scale", per_panel, persistent=False)
        self._kernel = _tile_kernel().int8_matmul
        self._arrays = self.codes, self.scale, None  # read every call: past nn.Module's slow lookup

    def _apply(self, fn, recurse=True):
        module = super()._apply(fn, recurse)
        self._arrays = self.codes, self.scale, None  # the buffers may be new tensors now
        return module

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        """The weight's rows `ids` [n] as bf16 [n, hidden]: code * scale in fp32, rounded once."""
        codes = self.codes[ids // PANEL, :, :, ids % PANEL, :].reshape(-1, self.in_features)
        scale = self.scale[ids // PANEL, :, ids % PANEL].repeat_interleave(GROUP, dim=-1)
        return (codes.float() * scale).bfloat16()

    @property
    def weight(self) -> torch.Tensor:
        """The whole weight in bf16, built on each access (for checks: the forward and lookups never build it)."""
        return self.rows(torch.arange(self.out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features).to(torch.bfloat16)
        out = tile_product(self._kernel, flat, self._arrays, self.out_features)
        return out.view(*x.shape[:-1], self.out_features)


class Q8Embedding(nn.Module):
    """The input embedding over a Q8Vocabulary's arrays (the tied matrix, held once)."""

    def __init__(self, vocabulary: Q8Vocabulary):
        super().__init__()
        self.num_embeddings, self.embedding_dim = vocabulary.out_features, vocabulary.in_features
        self._vocabulary = (vocabulary,)  # not a submodule: the model holds it as its output projection

    @property
    def weight(self) -> torch.Tensor:
        return self._vocabulary[0].weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self._vocabulary[0].rows(ids.reshape(-1)).view(*ids.shape, self.embedding_dim)


def q8_blocks(tensors: list[ReaderTensor]) -> tuple[torch.Tensor, torch.Tensor] | None:
    """A GGUF's token embedding, from its tensors, as (codes [vocab, hidden] int8, scale [vocab, hidden / 32] fp32)
    when it is Q8_0, else None. Its rows are token ids in order (no reordering applies to it)."""
    tensor = next((t for t in tensors if t.name == "token_embd.weight"), None)
    if tensor is None or tensor.tensor_type != gguf.GGMLQuantizationType.Q8_0:
        return None
    blocks = np.asarray(tensor.data).reshape(int(tensor.shape[-1]), -1, Q8_0_BLOCK)
    scale = fp16_field(blocks[..., 0:2])
    codes = blocks[..., 2:].copy().view(np.int8).reshape(blocks.shape[0], -1)
    return torch.from_numpy(codes), torch.from_numpy(scale)


def keep_q8_vocabulary(model: PreTrainedModel, tensors: list[ReaderTensor]) -> bool:
    """Swap a tied embedding/projection (an int4 model's uninitialised skeleton: its bf16 matrix never filled) for the
    file's Q8_0 blocks (in place), where the AMX kernel runs and the model's embedding is a plain lookup (Gemma
    scales its own); returns whether it did."""
    embedding, projection = model.get_input_embeddings(), model.get_output_embeddings()
    tied = projection is not None and projection.weight is embedding.weight
    if not tied or type(embedding) is not nn.Embedding or _tile_kernel() is None:
        return False
    vocab, hidden = embedding.weight.shape
    if vocab % PANEL or hidden % (2 * GROUP):
        return False
    blocks = q8_blocks(tensors)
    if blocks is None:
        return False
    vocabulary = Q8Vocabulary(*blocks)
    model.set_output_embeddings(vocabulary)
    model.set_input_embeddings(Q8Embedding(vocabulary))
    return True
