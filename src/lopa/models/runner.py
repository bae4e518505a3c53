"""Drive the stock transformers forward over a draft tree with a preallocated KV cache.

A tree of T tokens is verified in one forward: node i sits at position
committed_length + depth[i] and attends to the committed prefix plus its own
ancestors (a 4D additive mask). Sliding-window layers get their own mask, passed
as the per-layer-type mapping that transformers' hybrid models accept.
The runner knows nothing about drafting: it gets tokens, depths and an ancestor matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from ..errors import UnsupportedModelError
from .kvcache import TreeKVCache

SUPPORTED_LAYER_TYPES = {"full_attention", "sliding_attention"}


@dataclass
class ForwardOutput:
    logits: torch.Tensor  # [T, vocab] (or [1, vocab] when only the last row was asked for)
    hidden: torch.Tensor  # [T, hidden] last hidden state, for lookahead heads


class Runner:
    """Owns the KV cache of one sequence and runs prefill, tree verification and commits."""

    def __init__(self, model: PreTrainedModel):
        self.model = model
        self.config = model.config.get_text_config()
        layer_types = getattr(self.config, "layer_types", None) or ["full_attention"] * self.config.num_hidden_layers
        unknown = set(layer_types) - SUPPORTED_LAYER_TYPES
        if unknown:
            raise UnsupportedModelError(
                f"{type(model).__name__} has attention layers of type {sorted(unknown)}, which tree verification "
                "cannot mask exactly; use --method ar or another model"
            )
        self.hybrid = "sliding_attention" in layer_types
        self.sliding_window = getattr(self.config, "sliding_window", None) if self.hybrid else None
        self.max_positions = getattr(self.config, "max_position_embeddings", None) or 1 << 30
        self.device = model.device
        self.dtype = model.dtype
        self.cache: TreeKVCache | None = None
        self.forwards = 0

    @property
    def length(self) -> int:
        return self.cache.length if self.cache else 0

    def reset(self, capacity: int) -> None:
        """Start a new sequence; the buffers are allocated once and reused while they are big enough."""
        if self.cache is None or self.cache.capacity < capacity:
            self.cache = TreeKVCache(self.config.num_hidden_layers, capacity)
        self.cache.set_length(0)
        self.forwards = 0

    def _mask(self, positions: torch.Tensor, ancestors: torch.Tensor, window: int | None) -> torch.Tensor:
        length, t = self.length, positions.numel()
        allowed = torch.ones(t, length + t, dtype=torch.bool, device=self.device)
        allowed[:, length:] = ancestors
        if window is not None:
            kv_pos = torch.cat([torch.arange(length, device=self.device), positions])
            allowed &= kv_pos[None, :] > positions[:, None] - window
        mask = torch.zeros(t, length + t, dtype=self.dtype, device=self.device)
        mask.masked_fill_(~allowed, torch.finfo(self.dtype).min)
        return mask[None, None]

    @torch.no_grad()
    def forward(
        self, tokens: torch.Tensor, depths: torch.Tensor, ancestors: torch.Tensor, last_only: bool = False
    ) -> ForwardOutput:
        """Run tokens [T] at positions length + depths [T]; ancestors [T, T] bool includes the diagonal."""
        assert self.cache is not None, "call reset() first"
        t = tokens.numel()
        if self.length + t > self.cache.capacity:
            raise RuntimeError(f"KV cache overflow: {self.length} + {t} > {self.cache.capacity}")
        positions = (depths + self.length).to(self.device)
        ancestors = ancestors.to(self.device)
        full = self._mask(positions, ancestors, None)
        mask = full
        if self.hybrid:
            mask = {"full_attention": full, "sliding_attention": self._mask(positions, ancestors, self.sliding_window)}
        out = self.model(
            input_ids=tokens.to(self.device)[None],
            position_ids=positions[None],
            attention_mask=mask,
            cache=self.cache,
            use_cache=True,
            output_hidden_states=True,
            logits_to_keep=1 if last_only else 0,
        )
        self.forwards += 1
        hidden = out.hidden_states[-1][0]
        return ForwardOutput(out.logits[0], hidden[-1:] if last_only else hidden)

    def prefill(self, ids: torch.Tensor) -> ForwardOutput:
        """Feed the prompt causally, commit it, and return the last position's logits."""
        t = ids.numel()
        causal = torch.ones(t, t, dtype=torch.bool).tril_()
        out = self.forward(ids, torch.arange(t), causal, last_only=True)
        self.cache.set_length(self.length + t)
        self.forwards -= 1  # prefill is not a decoding forward
        return out

    def commit(self, nodes: list[int]) -> None:
        """Keep tree nodes `nodes` (indices into the last forward, root first) as the next prefix rows."""
        base = self.length
        if nodes != list(range(len(nodes))):
            self.cache.compact(torch.tensor(nodes, device=self.device) + base, base)
        self.cache.set_length(base + len(nodes))
