"""A preallocated KV cache that lets the runner write a whole draft tree and keep only its accepted path.

It subclasses transformers' StaticLayer (no monkeypatching): buffers are allocated once,
`update` writes the new rows at the current length and returns a view of the filled
prefix only, so attention never reads the unused tail. After verification the runner
moves the accepted rows down to contiguous slots (Runner.commit).

A *static* cache (for CUDA graphs, which replay fixed shapes at fixed addresses) writes
at an offset held in a device tensor shared by all layers and returns the whole buffers;
the attention mask hides the unused tail instead.

A *packed* forward (models/attention.py Packing) writes each real token at its row and column past `length`.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, StaticLayer

from .attention import Packing


class TreeKVLayer(StaticLayer):
    """One layer's keys/values: [batch, kv_heads, capacity, head_dim], filled up to `length`."""

    def __init__(self, max_cache_len: int, offset: torch.Tensor | None = None):
        super().__init__(max_cache_len=max_cache_len)
        self.length = 0
        self.packing: Packing | None = None  # the layout of packed rows to write (module docstring)
        self.static = offset is not None  # write at `offset` (a device tensor), attend to the whole buffer
        if offset is not None:
            self.cumulative_length = offset  # StaticLayer marks it a static address along with the buffers

    @classmethod
    def over(
        cls, keys: torch.Tensor, values: torch.Tensor, length: int, offset: torch.Tensor | None = None
    ) -> TreeKVLayer:
        """A layer on existing buffers (a row range of the runner's slots), filled up to `length`."""
        layer = cls(keys.shape[2], offset)
        layer.keys, layer.values, layer.device = keys, values, keys.device
        layer.is_initialized = True
        layer.length = length
        return layer

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self.static:
            slots = self.cumulative_length + torch.arange(key_states.shape[-2], device=self.device)
            self.keys.index_copy_(2, slots, key_states)
            self.values.index_copy_(2, slots, value_states)
            return self.keys, self.values
        if self.packing is not None:
            columns, end = self.length + self.packing.columns, self.length + self.packing.width
            self.keys[self.packing.rows, :, columns] = key_states[0].transpose(0, 1)
            self.values[self.packing.rows, :, columns] = value_states[0].transpose(0, 1)
            return self.keys[:, :, :end], self.values[:, :, :end]
        start, end = self.length, self.length + key_states.shape[-2]
        self.keys[:, :, start:end] = key_states
        self.values[:, :, start:end] = value_states
        return self.keys[:, :, :end], self.values[:, :, :end]

    def get_seq_length(self) -> int:
        return self.length


class TreeKVCache(Cache):
    """The transformers Cache holding one TreeKVLayer per decoder layer, all at one length."""

    def __init__(
        self,
        num_layers: int,
        capacity: int,
        layers: list[TreeKVLayer] | None = None,
        offset: torch.Tensor | None = None,
    ):
        super().__init__(layers=layers or [TreeKVLayer(capacity) for _ in range(num_layers)])
        self.capacity = capacity
        self.offset = offset

    @classmethod
    def over(
        cls,
        buffers: list[tuple[torch.Tensor, torch.Tensor]],
        length: int,
        offset: torch.Tensor | None = None,
        packing: Packing | None = None,
    ) -> TreeKVCache:
        """A cache writing into existing per-layer (keys, values) buffers [batch, kv_heads, capacity, head_dim],
        filled up to `length`; `offset` (a device tensor): a static cache writing there; `packing`: packed rows
        to write (module docstring)."""
        layers = [TreeKVLayer.over(k, v, length, offset) for k, v in buffers]
        for layer in layers:
            layer.packing = packing
        cache = cls(len(layers), buffers[0][0].shape[2], layers, offset)
        cache.set_length(length)
        return cache

    @property
    def length(self) -> int:
        return self.layers[0].length

    def set_length(self, length: int) -> None:
        for layer in self.layers:
            layer.length = length
        if self.offset is not None:
            self.offset.fill_(length)
