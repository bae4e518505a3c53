"""Verify the draft trees of many sequences in one forward: the runner behind the server's batches.

Every sequence owns a slot (a row of preallocated per-layer KV buffers) holding its committed
prefix in slots 0..length-1. A step writes each row's tree at the same column, the longest
committed length in the batch, padded to the largest tree; the masks let row b see only its
own prefix and its own ancestors, so a row's output does not depend on the others. Active
sequences always fill slots 0..n-1 (a leaving one is replaced by the last), so the batch is a
view of the buffers and nothing is copied per step.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from .kvcache import TreeKVCache
from .runner import ForwardOutput, Runner

TreeTensors = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # tokens [T], depths [T], ancestors [T, T]


class BatchRunner(Runner):
    """Prefill into a slot, verify the trees of slots 0..n-1 together, commit each row's accepted path."""

    def __init__(self, model: PreTrainedModel, slots: int, capacity: int):
        super().__init__(model)
        c = self.config
        kv_heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        shape = (slots, kv_heads, capacity, head_dim)
        self.buffers = [
            (torch.zeros(shape, dtype=self.dtype, device=self.device), torch.zeros(shape, dtype=self.dtype, device=self.device))
            for _ in range(c.num_hidden_layers)
        ]
        self.slots = slots
        self.capacity = capacity
        self.lengths = [0] * slots
        self._start = 0  # column where the last verified trees were written

    def _view(self, lo: int, hi: int, length: int) -> TreeKVCache:
        return TreeKVCache.over([(k[lo:hi], v[lo:hi]) for k, v in self.buffers], length)

    def prefill_slot(self, slot: int, ids: torch.Tensor, start: int = 0) -> ForwardOutput:
        """Feed prompt tokens into `slot` after its first `start` rows (a chunk of a long prompt continues
        where the last one ended; 0 starts a new prompt) and return the last position's logits."""
        self.cache = self._view(slot, slot + 1, start)
        out = self.prefill(ids)
        self.lengths[slot] = start + ids.numel()
        self.cache = None
        return out

    @torch.no_grad()
    def verify(self, trees: list[TreeTensors]) -> list[ForwardOutput]:
        """One forward over the trees of slots 0..len(trees)-1; returns each row's logits and hidden states."""
        n, t = len(trees), max(tokens.numel() for tokens, _, _ in trees)
        start = max(self.lengths[:n])
        if start + t > self.capacity:
            raise RuntimeError(f"KV cache overflow: {start} + {t} > {self.capacity}")
        tokens = torch.zeros(n, t, dtype=torch.long)
        depths = torch.zeros(n, t, dtype=torch.long)
        ancestors = torch.eye(t, dtype=torch.bool).repeat(n, 1, 1)  # padding nodes see only themselves
        for row, (tok, dep, anc) in enumerate(trees):
            size = tok.numel()
            tokens[row, :size], depths[row, :size], ancestors[row, :size, :size] = tok, dep, anc
        prefix = torch.tensor(self.lengths[:n], device=self.device)
        positions = depths.to(self.device) + prefix[:, None]
        mask = self.masks(prefix, start, positions, ancestors.to(self.device))
        logits, hidden, layers = self.run(self._view(0, n, start), tokens, positions, mask, last_only=False)
        self._start = start
        return [
            ForwardOutput(
                logits[row, : tok.numel()], hidden[row, : tok.numel()], None if layers is None else layers[row, : tok.numel()]
            )
            for row, (tok, _, _) in enumerate(trees)
        ]

    def commit_row(self, slot: int, nodes: list[int]) -> None:
        """Keep tree nodes `nodes` (root first) of the last verify as the slot's next prefix rows."""
        base = self.lengths[slot]
        if self._start != base or nodes != list(range(len(nodes))):
            src = torch.tensor(nodes, device=self.device) + self._start
            self._view(slot, slot + 1, base).compact(src, base)
        self.lengths[slot] = base + len(nodes)

    def free_slot(self, slot: int, occupants: list) -> None:
        """Free `slot` of the slots 0..len(occupants)-1 in use: the last occupant (its KV rows and its entry in
        `occupants`, the caller's per-slot list) moves into it, so the slots in use stay contiguous."""
        last = len(occupants) - 1
        if slot != last:
            self.move(last, slot)
            occupants[slot] = occupants[last]
        occupants.pop()

    def move(self, src: int, dst: int) -> None:
        """Copy slot src's committed rows into slot dst (to keep the active slots contiguous)."""
        n = self.lengths[src]
        for k, v in self.buffers:
            k[dst, :, :n] = k[src, :, :n]
            v[dst, :, :n] = v[src, :, :n]
        self.lengths[dst] = n
