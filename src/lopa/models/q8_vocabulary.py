"""An int4 model's vocabulary projection in Q8_0: the file's own Q8_0 blocks where it has them, else quantized once.

Small models tie the output projection to the token embedding, and GGUF files store that matrix in Q8_0 (an
fp16 scale per 32 int8 codes) even when the rest is 4-bit. Expanded to bf16 it was the largest tensor of an int4
model (SmolLM2: 56 MB, twice that with oneDNN's packed copy, against the file's 30 MB), and the projection reads it
whole every forward. Here it stays in Q8_0: the projection runs on the kernels int4 layers use (the int8 entry of
kernels/int4_matmul.c on AMX tiles, else of kernels/panel_matmul.c: every row computed alike whatever the row
count, so trees keep one-token steps' logits), and the embedding dequantizes only the rows it looks up, to the
bf16 values transformers' own loader gives (code * scale in fp32, rounded once).

Larger models keep a separate output projection: Qwen2.5-Coder-0.5B's file stores it in Q8_0 (kept as it is),
the 1.5B's in Q6_K, which in bf16 (0.47 GB) was a fifth of a one-token forward, read at two bytes a weight. An
untied projection the file stores otherwise is quantized to Q8_0 by lopa from the values transformers' loader gives
(a byte a weight and a scale per 32, kept in fp32); like lopa's own int4 quantization of the decoder layers the
file stores in other types, that is an approximation of the file, and lookahead stays exact against plain
decoding of the model so built.
"""

from __future__ import annotations

import ctypes

import gguf
import numpy as np
import torch
from gguf.gguf_reader import ReaderTensor
from torch import nn
from transformers import PreTrainedModel

from .gguf_tensors import GGUFTensors
from .int4 import GROUP, PANEL, fp16_field, row_invariant_kernel, row_invariant_product, tile_product, weight_name

Q8_0_BLOCK = 34  # bytes: an fp16 scale, then 32 int8 codes


class Q8Vocabulary(nn.Module):
    """logits = x @ W.T with W = code * scale per group of 32 inputs (int8 codes, fp32 scales); bf16 in and out."""

    def __init__(self, codes: torch.Tensor, scale: torch.Tensor, kernel: ctypes._CFuncPtr | None = None):
        """codes [vocab, hidden] int8, scale [vocab, hidden / 32]; vocab a multiple of 16, hidden of 64; `kernel`:
        row_invariant_kernel(8)'s by default."""
        super().__init__()
        self.out_features, self.in_features = codes.shape
        panels, groups = self.out_features // PANEL, self.in_features // GROUP
        # per panel and group, 16 tile rows of 32 bytes: tile row p holds inputs 2p and 2p + 1 of the 16 outputs
        c = codes.reshape(panels, PANEL, groups, GROUP // 2, 2).permute(0, 2, 3, 1, 4)
        self.register_buffer("codes", c.contiguous(), persistent=False)
        per_panel = scale.float().reshape(panels, PANEL, groups).transpose(1, 2).contiguous()
        self.register_buffer("scale", per_panel, persistent=False)
        self._kernel = kernel or row_invariant_kernel(8)
        self.tiles = self._kernel is not row_invariant_kernel(8, tiles=False)  # which one a compiled forward calls
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
        if torch.compiler.is_compiling():
            out = row_invariant_product(flat, self.codes, self.scale, None, self.out_features, 8, self.tiles)
        else:
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


def q8_blocks(tensor: ReaderTensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """A Q8_0 tensor's (codes [rows, columns] int8, scale [rows, columns / 32] fp32); None for another type."""
    if tensor.tensor_type != gguf.GGMLQuantizationType.Q8_0:
        return None
    blocks = np.asarray(tensor.data).reshape(int(tensor.shape[-1]), -1, Q8_0_BLOCK)
    scale = fp16_field(blocks[..., 0:2])
    codes = blocks[..., 2:].copy().view(np.int8).reshape(blocks.shape[0], -1)
    return torch.from_numpy(codes), torch.from_numpy(scale)


def quantize_q8(tensors: GGUFTensors, name: str, shape: torch.Size) -> tuple[torch.Tensor, torch.Tensor]:
    """The tensor `name` [rows, columns], as transformers' loader gives it, quantized by Q8_0's rule (llama.cpp's
    quantize_row_q8_0: per 32, scale = max |w| / 127, code = round(w / scale)) with the scale kept in fp32; a slab
    of rows at a time, into the result."""
    codes, scale = torch.empty(shape, dtype=torch.int8), torch.empty(shape[0], shape[1] // GROUP)
    for start, rows in tensors.slabs(name):
        groups = rows.float().unflatten(-1, (-1, GROUP))
        part = scale[start : start + len(rows)]
        torch.div(groups.abs().amax(-1), 127, out=part)
        codes[start : start + len(rows)] = (
            groups.div(part.clamp_min(torch.finfo(torch.float32).tiny)[..., None]).round_().flatten(1)
        )
    return codes, scale


def keep_q8_vocabulary(model: PreTrainedModel, tensors: GGUFTensors) -> str | None:
    """Swap an int4 model's vocabulary projection (its uninitialised skeleton: the bf16 matrix never filled) for a
    Q8Vocabulary in place, where a row-invariant int8 kernel runs; returns where its codes came from:
    "q8_0" (the file's: a tied Q8_0 embedding, which then stays the input embedding too where it is a plain lookup,
    or an untied projection stored in Q8_0), "q8_0-by-lopa" (an untied projection the file stores otherwise, quantize_q8), or None (left as
    it is: a tied embedding in another type, or shapes the kernel does not take)."""
    embedding, projection = model.get_input_embeddings(), model.get_output_embeddings()
    if type(projection) is not nn.Linear or projection.bias is not None or row_invariant_kernel(8) is None:
        return None
    vocab, hidden = projection.weight.shape
    if vocab % PANEL or hidden % (2 * GROUP):
        return None
    if projection.weight is embedding.weight:  # tied
        name = weight_name(model, embedding)
        blocks = q8_blocks(tensors.stored(name)) if type(embedding) is nn.Embedding and name in tensors else None
        if blocks is None:
            return None
        vocabulary = Q8Vocabulary(*blocks)
        model.set_output_embeddings(vocabulary)
        model.set_input_embeddings(Q8Embedding(vocabulary))
        return "q8_0"
    name = weight_name(model, projection)
    if name not in tensors:
        return None
    blocks = q8_blocks(tensors.stored(name))
    source = "q8_0" if blocks is not None else "q8_0-by-lopa"
    model.set_output_embeddings(Q8Vocabulary(*(blocks or quantize_q8(tensors, name, projection.weight.shape))))
    return source
