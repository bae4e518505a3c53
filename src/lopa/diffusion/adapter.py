"""Masked-diffusion model adapters: one interface for the decoder, whatever the model.

An adapter turns a decoding context (committed tokens) plus a batch of candidate
blocks into block logits aligned so that row j predicts block position j. Two kinds:

- `CachedAdapter`: the project's block-causal `DLLM`; committed tokens live in a KV
  cache, and a finished block is folded in during the next forward (no extra pass).
- `FullSequenceAdapter`: any Hugging Face masked diffusion LM (Dream, LLaDA, or a
  plain masked LM): bidirectional attention over the whole sequence, no cache;
  `shift=True` for Dream-style models whose logits at i predict token i + 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..errors import InvalidRequestError
from .model import DLLM


@dataclass
class Context:
    """Decoding state shared by all branches: what is committed, and what is not yet cached."""

    length: int = 0  # committed tokens already inside `cache`
    pending: list[int] = field(default_factory=list)
    cache: list | None = None  # model-specific (per-layer KV, or committed ids)


class CachedAdapter:
    """Adapter of the block-causal `DLLM` with an exact KV cache of committed tokens."""

    shift = False

    def __init__(self, model: DLLM):
        self.model = model.eval()
        self.mask_token_id = model.cfg.mask_token_id
        self.max_len = model.cfg.max_len
        self.vocab_size = model.cfg.vocab_size
        self.device = next(model.parameters()).device

    def begin(self, prompt: list[int]) -> Context:
        return Context(pending=list(prompt))

    def commit(self, ctx: Context, tokens: list[int]) -> None:
        ctx.pending += tokens

    @torch.no_grad()
    def logits(self, ctx: Context, blocks: torch.Tensor) -> torch.Tensor:
        """blocks (n, b) -> logits (n, b, V); folds pending tokens into the cache on the way."""
        n, b = blocks.shape
        p, s = len(ctx.pending), ctx.length
        if s + p + b > self.max_len:
            raise InvalidRequestError(f"prompt + new tokens exceed the model's {self.max_len} positions")
        dev = self.device
        pend = torch.tensor(ctx.pending, dtype=torch.long, device=dev).expand(n, p)
        ids = torch.cat([pend, blocks], 1)
        pos = torch.arange(s, s + p + b, device=dev).expand(n, -1)
        q = torch.arange(p + b, device=dev)
        mask = torch.cat(
            [
                torch.ones(p + b, s, dtype=torch.bool, device=dev),
                (q[None, :] <= q[:, None]) | ((q[:, None] >= p) & (q[None, :] >= p)),
            ],
            1,
        )
        out, kvs = self.model(ids, pos, mask, ctx.cache)
        if p:
            new = [(k[:1, :, :p], v[:1, :, :p]) for k, v in kvs]
            ctx.cache = (
                new
                if ctx.cache is None
                else [(torch.cat([ck, k], 2), torch.cat([cv, v], 2)) for (ck, cv), (k, v) in zip(ctx.cache, new)]
            )
            ctx.length, ctx.pending = s + p, []
        return out[:, p:].float()


class FullSequenceAdapter:
    """Adapter of a Hugging Face masked diffusion LM: full bidirectional forward each call."""

    def __init__(self, model, mask_token_id: int, shift: bool, max_len: int):
        self.model = model.eval()
        self.mask_token_id = mask_token_id
        self.shift, self.max_len = shift, max_len
        head = model.get_output_embeddings()  # logits width, which may exceed config.vocab_size
        self.vocab_size = head.weight.shape[0] if head is not None else model.config.vocab_size
        self.device = next(model.parameters()).device

    def begin(self, prompt: list[int]) -> Context:
        if self.shift and not prompt:
            raise InvalidRequestError("a shifted (Dream-style) model needs a non-empty prompt")
        return Context(pending=list(prompt))

    def commit(self, ctx: Context, tokens: list[int]) -> None:
        ctx.pending += tokens

    @torch.no_grad()
    def logits(self, ctx: Context, blocks: torch.Tensor) -> torch.Tensor:
        n, b = blocks.shape
        s = len(ctx.pending)
        if s + b > self.max_len:
            raise InvalidRequestError(f"prompt + new tokens exceed the model's {self.max_len} positions")
        ids = torch.cat([torch.tensor(ctx.pending, dtype=torch.long, device=self.device).expand(n, s), blocks], 1)
        out = self.model(input_ids=ids).logits
        return out[:, s - 1 : s - 1 + b].float() if self.shift else out[:, s:].float()
