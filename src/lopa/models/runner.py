"""Drive the stock transformers forward over draft trees with preallocated KV slots.

The runner owns per-layer KV buffers [slots, kv_heads, capacity, head_dim]; each slot holds one
sequence's committed rows 0..length-1. One call verifies the trees of slots 0..n-1 together: every
row's tree is written at the same column (the longest committed length in the batch), padded to the
largest tree, and node i of row b sits at position length_b + depth_i and attends to its row's
committed prefix plus its own ancestors (a 4D additive mask; sliding-window layers get their own).
A row's output does not depend on the others. Trees of different sizes run packed where the model's
attention is lopa's (models/attention.py): every layer but attention works on the real nodes only, so a
row with a large tree does not make every other row pay for as many nodes. `generate`/`stream` use one
slot, the server and `generate([...])` many: the same methods, the compiled path included. The runner knows nothing
about drafting: it gets tokens, depths and an ancestor matrix per row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel

from ..errors import InvalidRequestError, UnsupportedModelError
from .attention import TREE_ATTENTION, Packing
from .compiled import BUCKETS, bucket, pad_queries
from .kvcache import TreeKVCache

SUPPORTED_LAYER_TYPES = {"full_attention", "sliding_attention"}
TreeTensors = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # tokens [T], depths [T], ancestors [T, T]


@dataclass
class ForwardOutput:
    logits: torch.Tensor  # [T, vocab] (or [1, vocab] for a prefill: its last position)
    layers: torch.Tensor | None = None  # [T, len(hidden_layers) * hidden] for Runner.hidden_layers; every row


def tree_mask(
    prefix: torch.Tensor,
    start: int,
    positions: torch.Tensor,
    ancestors: torch.Tensor,
    window: int | None,
    dtype,
    width: int | None = None,
) -> torch.Tensor:
    """Additive mask [B, 1, T, start + K] for T queries over a tree of K >= T nodes written at slots start..
    (the queries are its last T nodes). Row b sees its first prefix[b] committed slots and its own ancestors
    (ancestors [B, T, K]); `window` also hides keys more than window - 1 positions back. positions [B, K].
    `width`: the mask spans this many key slots (a static cache's capacity), the ones past the tree hidden."""
    b, t, k = ancestors.shape
    slots = torch.arange(start, device=positions.device)
    committed = (slots[None, None, :] < prefix[:, None, None]).expand(b, t, start)
    allowed = torch.cat([committed, ancestors], dim=2)
    if window is not None:
        kv_pos = torch.cat([slots.expand(b, start), positions], dim=1)
        allowed &= kv_pos[:, None, :] > positions[:, k - t :, None] - window
    mask = torch.full((b, 1, t, width or start + k), torch.finfo(dtype).min, dtype=dtype, device=positions.device)
    mask[:, 0, :, : start + k].masked_fill_(allowed, 0.0)
    return mask  # not a view: the compiled runner would have to copy a view (see compiled._owned)


def chunks(total: int, limit: int | None) -> list[tuple[int, int]]:
    """[lo, hi) node ranges of at most `limit` nodes covering 0..total (one range when limit is None)."""
    step = limit or total
    return [(lo, min(lo + step, total)) for lo in range(0, total, step)]


def stack_trees(trees: list[TreeTensors], rows: int) -> TreeTensors:
    """The trees as [rows, T] tokens/depths and [rows, T, T] ancestors, padded to the largest; rows past
    the trees (padding a batch up to a compiled size) hold one token; padding nodes see only themselves."""
    t = max(tokens.numel() for tokens, _, _ in trees)
    tokens = torch.zeros(rows, t, dtype=torch.long)
    depths = torch.zeros(rows, t, dtype=torch.long)
    ancestors = torch.eye(t, dtype=torch.bool).repeat(rows, 1, 1)
    for row, (tok, dep, anc) in enumerate(trees):
        size = tok.numel()
        tokens[row, :size], depths[row, :size], ancestors[row, :size, :size] = tok, dep, anc
    return tokens, depths, ancestors


class Runner:
    """Prefill a slot, verify the trees of slots 0..n-1 in one forward, commit each row's accepted path."""

    def __init__(
        self,
        model: PreTrainedModel,
        slots: int = 1,
        capacity: int = 256,
        *,
        max_verify_tokens: int | None = None,
        compiled: Callable[..., Any] | None = None,
        static: bool = False,
    ):
        """`capacity`: KV rows per slot; they grow on demand unless `static`.
        `max_verify_tokens` caps the tokens per row of one model call: longer trees (and prompts) are fed
        in chunks, each attending to the rows the earlier chunks wrote, with the same outputs.
        `compiled`: the model's forward through torch.compile (models/compiled.py), used for verification.
        `static`: fixed buffers attended to in full under the mask, batches padded to a power of two: every
        compiled shape is fixed (CUDA graphs replay them)."""
        if max_verify_tokens is not None and max_verify_tokens < 1:
            raise ValueError(f"max_verify_tokens must be >= 1, got {max_verify_tokens}")
        self.model = model
        self.max_verify_tokens = max_verify_tokens
        self.compiled = compiled
        self.static = static
        self.config = model.config.get_text_config()
        layer_types = getattr(self.config, "layer_types", None) or ["full_attention"] * self.config.num_hidden_layers
        unknown = set(layer_types) - SUPPORTED_LAYER_TYPES
        if unknown:
            raise UnsupportedModelError(
                f"{type(model).__name__} has attention layers of type {sorted(unknown)}, which tree verification "
                "cannot mask exactly; use --method ar or another model"
            )
        self.hybrid = "sliding_attention" in layer_types
        # eager, dynamic and with lopa's attention: trees of different sizes run packed (compiled forwards and
        # CUDA graphs keep fixed shapes)
        attention = getattr(self.config, "_attn_implementation", None)
        self.packs = not static and compiled is None and attention == TREE_ATTENTION
        self.sliding_window = getattr(self.config, "sliding_window", None) if self.hybrid else None
        self.max_positions = getattr(self.config, "max_position_embeddings", None) or 1 << 30
        self.device = model.device
        self.dtype = model.dtype
        self.slots = slots
        self.lengths = [0] * slots
        self.capacity = 0
        self.kv = torch.empty(0)  # every layer's keys and values (see _grow)
        self.buffers: list[tuple[torch.Tensor, torch.Tensor]] = []  # per layer (keys, values): views of self.kv
        self.offset = torch.zeros((), dtype=torch.long, device=self.device) if static else None
        self._start = 0  # column where the last verified trees were written
        self._grow(capacity)
        # hidden_states indices (0 = embeddings, i = the input of decoder layer i) a drafter reads, such as
        # EAGLE-3's low/middle/high layers; ForwardOutput.layers carries them. Empty: no hidden states at all
        self.hidden_layers: tuple[int, ...] = ()

    def sibling(self, slots: int, capacity: int) -> Runner:
        """A runner of `slots` slots of `capacity` rows (and a compiled forward's padding) over the same model,
        compiled forward and hidden layers."""
        runner = Runner(
            self.model,
            slots,
            capacity + self.padding,
            max_verify_tokens=self.max_verify_tokens,
            compiled=self.compiled,
            static=self.static,
        )
        runner.hidden_layers = self.hidden_layers
        return runner

    # --- KV slots ------------------------------------------------------------------------------

    def _grow(self, rows: int) -> None:
        """Make every slot hold at least `rows` KV rows, keeping what they hold (a static cache cannot grow).

        Every layer's keys and values are views of one tensor [layers, 2, slots, kv_heads, capacity, head_dim], so
        moving a slot's rows (a commit's compaction, a slot move) is one copy for all layers, not two per layer."""
        if rows <= self.capacity:
            return
        if self.static and self.buffers:
            raise InvalidRequestError(f"this request needs {rows} KV rows; the static cache holds {self.capacity}")
        c = self.config
        kv_heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        capacity = rows if self.static or not self.buffers else max(rows, 2 * self.capacity)
        shape = (c.num_hidden_layers, 2, self.slots, kv_heads, capacity, head_dim)
        kv = torch.zeros(shape, dtype=self.dtype, device=self.device)
        if self.buffers:
            kv[..., : self.capacity, :] = self.kv
        self.kv, self.capacity = kv, capacity
        self.buffers = [(layer[0], layer[1]) for layer in kv]

    @property
    def padding(self) -> int:
        """KV rows a compiled forward may write past a sequence's own: its tree padded up to a size bucket."""
        return BUCKETS[-1] if self.compiled is not None else 0

    def reserve(self, rows: int) -> None:
        """Room for `rows` KV rows per slot (plus a compiled forward's padding) before decoding starts."""
        self._grow(rows + self.padding)

    def _view(self, lo: int, hi: int, length: int, packing: Packing | None = None) -> TreeKVCache:
        return TreeKVCache.over([(k[lo:hi], v[lo:hi]) for k, v in self.buffers], length, self.offset, packing)

    def truncate(self, slot: int, length: int) -> None:
        """Forget the slot's rows past `length`: a draft model's sequence rewinding to what the target kept."""
        if not 0 <= length <= self.lengths[slot]:
            raise ValueError(f"cannot truncate a sequence of {self.lengths[slot]} rows to {length}")
        self.lengths[slot] = length

    def move(self, src: int, dst: int) -> None:
        """Copy slot src's committed rows into slot dst (to keep the active slots contiguous)."""
        n = self.lengths[src]
        self.kv[:, :, dst, :, :n] = self.kv[:, :, src, :, :n]
        self.lengths[dst] = n

    def free(self, slot: int, occupants: list) -> None:
        """Free `slot` of the slots 0..len(occupants)-1 in use: the last occupant (its KV rows and its entry in
        `occupants`, the caller's per-slot list) moves into it, so the slots in use stay contiguous."""
        last = len(occupants) - 1
        if slot != last:
            self.move(last, slot)
            occupants[slot] = occupants[last]
        occupants.pop()
        self.lengths[last] = 0

    # --- forwards ------------------------------------------------------------------------------

    def masks(self, prefix: torch.Tensor, start: int, positions: torch.Tensor, ancestors: torch.Tensor):
        """The attention mask(s) for trees written at slot `start` of rows whose committed lengths are `prefix`."""
        width = self.capacity if self.static else None
        full = tree_mask(prefix, start, positions, ancestors, None, self.dtype, width)
        if not self.hybrid:
            return full
        sliding = tree_mask(prefix, start, positions, ancestors, self.sliding_window, self.dtype, width)
        return {"full_attention": full, "sliding_attention": sliding}

    @torch.no_grad()
    def _call(
        self, cache: TreeKVCache, tokens: torch.Tensor, positions: torch.Tensor, mask, last_only: bool, packing=None
    ):
        """One stock transformers forward of tokens [B, T] (packed: [1, N]): logits [B, T or 1, vocab],
        hidden_layers [B, T, ...] or None."""
        t, size = tokens.shape[1], bucket(tokens.shape[1])
        model = self.model
        if self.compiled is not None and not last_only and size is not None:
            model = self.compiled
            tokens, positions, mask = pad_queries(tokens, positions, mask, size, self.static)
            if not self.static:  # one graph whatever the slots' capacity (it grows; each runner has its own)
                for layer in cache.layers:
                    torch._dynamo.maybe_mark_dynamic(layer.keys, 2)
                    torch._dynamo.maybe_mark_dynamic(layer.values, 2)
        out = model(
            input_ids=tokens.to(self.device),
            position_ids=positions,
            attention_mask=mask,
            cache=cache,
            use_cache=True,
            output_hidden_states=bool(self.hidden_layers),
            logits_to_keep=1 if last_only else 0,
            **({"lopa_packing": packing} if packing is not None else {}),
        )
        logits = out.logits if last_only else out.logits[:, :t]
        layers = (
            torch.cat([out.hidden_states[i][:, :t] for i in self.hidden_layers], -1) if self.hidden_layers else None
        )
        if model is not self.model and self.static:  # a CUDA graph's next replay overwrites its outputs
            logits, layers = logits.clone(), None if layers is None else layers.clone()
        return logits, layers

    def _forward(
        self,
        rows: slice,
        prefix: list[int],
        start: int,
        trees: TreeTensors,
        last_only: bool,
        sizes: list[int] | None = None,
    ):
        """Write trees [B, T, ...] at column `start` of slots `rows` (committed lengths `prefix`) and run them,
        in chunks of max_verify_tokens; returns logits [B, T or 1, vocab] and hidden layers or None.
        `sizes`: each row's real nodes, run packed; then the outputs are [1, N, ...], row after row."""
        tokens, depths, ancestors = trees
        t = tokens.shape[1]
        self._grow(start + (bucket(t) or t if self.compiled is not None else t))
        lengths = torch.tensor(prefix, device=self.device)
        positions = depths.to(self.device) + lengths[:, None]
        ancestors = ancestors.to(self.device)
        real = None if sizes is None else torch.arange(t)[None, :] < torch.tensor(sizes)[:, None]  # [B, T]
        logits, layers, packed = [], [], []
        for lo, hi in chunks(t, self.max_verify_tokens):
            mask = self.masks(lengths, start, positions[:, :hi], ancestors[:, lo:hi, :hi])
            part_tokens, part_positions, packing = tokens[:, lo:hi], positions[:, lo:hi], None
            if real is not None:
                cpu = Packing.of(real[:, lo:hi])
                packed.append(cpu.rows * t + cpu.columns + lo)
                packing = cpu.to(self.device)
                part_tokens = part_tokens[cpu.rows, cpu.columns][None]
                part_positions = part_positions[packing.rows, packing.columns][None]
            cache = self._view(rows.start, rows.stop, start + lo, packing)
            part_logits, part_layers = self._call(cache, part_tokens, part_positions, mask, last_only, packing)
            logits.append(part_logits)
            if part_layers is not None:
                layers.append(part_layers)
        logits = logits[-1] if last_only else torch.cat(logits, 1)
        layers = torch.cat(layers, 1) if layers else None
        if packed:  # the nodes came column after column: put them back row after row
            order = torch.cat(packed).argsort().to(self.device)
            logits = logits[0].index_select(0, order)[None]
            layers = None if layers is None else layers[0].index_select(0, order)[None]
        return logits, layers

    def prefill(self, slot: int, ids: torch.Tensor, start: int | None = None) -> ForwardOutput:
        """Feed tokens causally into `slot` after its first `start` rows (default: all it holds; 0 starts a new
        sequence; a chunk of a long prompt continues where the last ended) and commit them. Returns the last
        position's logits and the hidden layers of every fed position."""
        start = self.lengths[slot] if start is None else start
        t = ids.numel()
        causal = torch.ones(t, t, dtype=torch.bool).tril_()
        trees = (ids.reshape(1, t), torch.arange(t)[None], causal[None])
        logits, layers = self._forward(slice(slot, slot + 1), [start], start, trees, last_only=True)
        self.lengths[slot] = start + t
        return ForwardOutput(logits[0], None if layers is None else layers[0])

    @torch.no_grad()
    def verify(self, trees: list[TreeTensors]) -> list[ForwardOutput]:
        """One forward over the trees of slots 0..len(trees)-1; each row's logits (and hidden layers)."""
        n, sizes = len(trees), [tokens.numel() for tokens, _, _ in trees]
        rows = min(self.slots, 1 << (n - 1).bit_length()) if self.static else n  # fixed batch shapes
        start = max(self.lengths[:rows])
        packed = self.packs and min(sizes) < max(sizes)
        stacked = stack_trees(trees, rows)
        logits, layers = self._forward(
            slice(0, rows), self.lengths[:rows], start, stacked, False, sizes if packed else None
        )
        self._start = start
        if packed:  # [1, N, ...], row after row
            per_row = logits[0].split(sizes), [None] * n if layers is None else layers[0].split(sizes)
        else:
            per_row = (
                [logits[r, :size] for r, size in enumerate(sizes)],
                [None if layers is None else layers[r, :size] for r, size in enumerate(sizes)],
            )
        return [ForwardOutput(row_logits, row_layers) for row_logits, row_layers in zip(*per_row)]

    def commit(self, slot: int, nodes: list[int]) -> None:
        """Keep tree nodes `nodes` (root first) of the last verify as the slot's next committed rows."""
        base = self.lengths[slot]
        if self._start != base or nodes != list(range(len(nodes))):  # move the kept rows down, every layer at once
            src = torch.tensor(nodes, device=self.device) + self._start
            rows = self.kv[:, :, slot]  # [layers, 2, kv_heads, capacity, head_dim]
            rows[:, :, :, base : base + len(nodes)] = rows.index_select(3, src)
        self.lengths[slot] = base + len(nodes)
