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

from ..errors import InvalidRequestError, UnsupportedModelError
from .compiled import BUCKETS, bucket, compile_model, pad_queries
from .kvcache import TreeKVCache

SUPPORTED_LAYER_TYPES = {"full_attention", "sliding_attention"}


@dataclass
class ForwardOutput:
    logits: torch.Tensor  # [T, vocab] (or [1, vocab] when only the last row was asked for)
    hidden: torch.Tensor  # [T, hidden] last hidden state (the predictor reads `layers`)
    layers: torch.Tensor | None = None  # [T, len(hidden_layers) * hidden] for Runner.hidden_layers; every row, prefill too


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


class Runner:
    """Owns the KV cache of one sequence and runs prefill, tree verification and commits."""

    def __init__(
        self,
        model: PreTrainedModel,
        max_verify_tokens: int | None = None,
        compile: bool = False,
        static_capacity: int | None = None,
    ):
        """`max_verify_tokens` caps the tokens of one model call: longer trees (and prompts) are fed in
        chunks, each attending to the rows the earlier chunks wrote, with the same outputs.
        `compile`: verification forwards (not prefills) through torch.compile, see models/compiled.py.
        `static_capacity`: one static KV cache of this many rows for every request (fixed shapes; with
        compile on CUDA, verification forwards replay CUDA graphs)."""
        if max_verify_tokens is not None and max_verify_tokens < 1:
            raise ValueError(f"max_verify_tokens must be >= 1, got {max_verify_tokens}")
        self.model = model
        self.max_verify_tokens = max_verify_tokens
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
        self.static_capacity = static_capacity
        self.cuda_graphs = compile and static_capacity is not None and self.device.type == "cuda"
        self.compiled = compile_model(model, self.cuda_graphs) if compile else None
        # hidden_states indices (0 = embeddings, i = the input of decoder layer i) a drafter reads, such as
        # EAGLE-3's low/middle/high layers; ForwardOutput.layers carries them, empty = None (the default)
        self.hidden_layers: tuple[int, ...] = ()

    @property
    def length(self) -> int:
        return self.cache.length if self.cache else 0

    def reset(self, capacity: int) -> None:
        """Start a new sequence; the buffers are allocated once and reused while they are big enough."""
        if self.compiled is not None:
            capacity += BUCKETS[-1]  # room for padding rows past the last tree
        if self.static_capacity is not None:
            if capacity > self.static_capacity:
                raise InvalidRequestError(
                    f"this request needs {capacity} KV rows; the static cache holds {self.static_capacity}"
                )
            capacity = self.static_capacity
        if self.cache is None or self.cache.capacity < capacity:
            static_on = self.device if self.static_capacity is not None else None
            self.cache = TreeKVCache(self.config.num_hidden_layers, capacity, static_on=static_on)
        self.cache.set_length(0)
        self.forwards = 0

    def masks(self, prefix: torch.Tensor, start: int, positions: torch.Tensor, ancestors: torch.Tensor):
        """The attention mask(s) for trees written at slot `start` of rows whose committed lengths are `prefix`."""
        width = self.static_capacity
        full = tree_mask(prefix, start, positions, ancestors, None, self.dtype, width)
        if not self.hybrid:
            return full
        sliding = tree_mask(prefix, start, positions, ancestors, self.sliding_window, self.dtype, width)
        return {"full_attention": full, "sliding_attention": sliding}

    @torch.no_grad()
    def run(self, cache: TreeKVCache, tokens: torch.Tensor, positions: torch.Tensor, mask, last_only: bool):
        """One stock transformers forward of tokens [B, T]; returns (logits, last hidden state, hidden_layers or None):
        logits and last hidden state [B, T or 1, ...], the hidden_layers [B, T, len * hidden] for all T rows."""
        t, size = tokens.shape[1], bucket(tokens.shape[1])
        model = self.model
        if self.compiled is not None and not last_only and size is not None:
            model = self.compiled
            tokens, positions, mask = pad_queries(tokens, positions, mask, size, self.static_capacity is not None)
        out = model(
            input_ids=tokens.to(self.device),
            position_ids=positions,
            attention_mask=mask,
            cache=cache,
            use_cache=True,
            output_hidden_states=True,
            logits_to_keep=1 if last_only else 0,
        )
        self.forwards += 1
        logits, hidden = out.logits, out.hidden_states[-1]
        logits, hidden = (logits, hidden[:, -1:]) if last_only else (logits[:, :t], hidden[:, :t])
        layers = torch.cat([out.hidden_states[i][:, :t] for i in self.hidden_layers], -1) if self.hidden_layers else None
        if model is not self.model and self.cuda_graphs:  # the graph's next replay overwrites its outputs
            logits, hidden = logits.clone(), hidden.clone()
            layers = layers.clone() if layers is not None else None
        return logits, hidden, layers

    @torch.no_grad()
    def forward(
        self, tokens: torch.Tensor, depths: torch.Tensor, ancestors: torch.Tensor, last_only: bool = False
    ) -> ForwardOutput:
        """Run tokens [T] at positions length + depths [T]; ancestors [T, T] bool includes the diagonal.

        Nodes must come parents first, so a chunk of the tree only attends to itself and earlier chunks."""
        assert self.cache is not None, "call reset() first"
        t, base = tokens.numel(), self.length
        if base + t > self.cache.capacity:
            raise RuntimeError(f"KV cache overflow: {base} + {t} > {self.cache.capacity}")
        positions = (depths + base).to(self.device)[None]
        prefix = torch.tensor([base], device=self.device)
        ancestors = ancestors.to(self.device)[None]
        parts = chunks(t, self.max_verify_tokens)
        logits, hidden, layers = [], [], []
        for lo, hi in parts:
            self.cache.set_length(base + lo)
            mask = self.masks(prefix, base, positions[:, :hi], ancestors[:, lo:hi, :hi])
            part = self.run(self.cache, tokens[None, lo:hi], positions[:, lo:hi], mask, last_only)
            part_logits, part_hidden, part_layers = part
            logits.append(part_logits[0])
            hidden.append(part_hidden[0])
            if part_layers is not None:
                layers.append(part_layers[0])
        self.cache.set_length(base)
        self.forwards -= len(parts) - 1  # a chunked verification is still one decoding step
        all_layers = torch.cat(layers) if layers else None
        if last_only:
            return ForwardOutput(logits[-1], hidden[-1], all_layers)
        return ForwardOutput(torch.cat(logits), torch.cat(hidden), all_layers)

    def prefill(self, ids: torch.Tensor) -> ForwardOutput:
        """Feed tokens causally after the committed rows (a prompt, or a draft model's next tokens), commit
        them, and return the last position's logits."""
        t = ids.numel()
        causal = torch.ones(t, t, dtype=torch.bool).tril_()
        out = self.forward(ids, torch.arange(t), causal, last_only=True)
        self.cache.set_length(self.length + t)
        self.forwards -= 1  # prefill is not a decoding forward
        return out

    def truncate(self, length: int) -> None:
        """Forget every row past `length`: a draft model's sequence rewinding to what the target kept."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a sequence of {self.length} rows to {length}")
        self.cache.set_length(length)

    def commit(self, nodes: list[int]) -> None:
        """Keep tree nodes `nodes` (indices into the last forward, root first) as the next prefix rows."""
        base = self.length
        if nodes != list(range(len(nodes))):
            self.cache.compact(torch.tensor(nodes, device=self.device) + base, base)
        self.cache.set_length(base + len(nodes))
