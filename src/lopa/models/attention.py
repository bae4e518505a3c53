"""Tree attention that reads grouped KV heads in place, plugged in through transformers' AttentionInterface.

Models with grouped-query attention (SmolLM2: 9 query heads over 3 KV heads; Qwen2.5,
Llama 3, Gemma 3 alike) store fewer KV heads than they attend with. Given a mask (a tree
verification always has one), transformers' stock SDPA path copies every KV head out
to all its query heads (`repeat_kv`) before calling SDPA, every layer, every step: at a
1,024-token prefix that copy grew with the context and SDPA ran over 3x the keys. On a
CPU, `scaled_dot_product_attention(..., enable_gqa=True)` reads the grouped heads in
place with the mask, equal to float noise (checked in the tests); on CUDA a mask
with enable_gqa falls back to the math kernel, so there the stock path stays.

In fp32 and bf16 on a CPU, attention goes through lopa's order-fixed kernel instead
(models/ordered_attention.py): SDPA's rounding depends on how many keys and queries a call holds (in bf16
enough to change greedy choices, in fp32 enough to change a seeded draw at a near-tie), so a verified tree
would not give what one-token steps give.

"lopa_sdpa" is registered as an attention implementation (and given transformers' SDPA
mask builder, so stock `generate()` on the same model still works): loading a model
with attn_implementation="lopa_sdpa" or `model.set_attn_implementation("lopa_sdpa")`
selects it. Registration is the supported extension point; no transformers code changes.

A batch of trees of different sizes runs *packed*: the model sees only the batch's real tokens as one row
[1, N] (every linear layer, norm and the lm_head work on N tokens, not rows x the largest tree), and only
attention places them back in their rows, where each attends to its own KV slot under its own mask. It does
so in two blocks: every row's first node (one query per row, the CPU kernel's fast shape), then the other
nodes of the rows that have more, padded only among those rows (with one large tree among eight rows, the
padded block took ~670 us a layer against ~90 for the first and ~65 for the rest). `Packing` says where each
token sits; the runner passes it to the model call (`lopa_packing=`, which transformers hands to every
attention call) and to the cache view that writes its keys and values.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from . import ordered_attention

TREE_ATTENTION = "lopa_sdpa"


@dataclass(frozen=True)
class QueryBlock:
    """Packed tokens `tokens` attended to as a padded block: columns first..first+width-1 of batch rows `rows`
    (a slice takes their keys and values without a copy); token i sits at (place[0][i], place[1][i]), or, when
    place is None, the tokens fill the block exactly (one column, or one row) and are read in place."""

    tokens: slice
    rows: slice | torch.Tensor
    place: tuple[torch.Tensor, torch.Tensor] | None
    first: int
    width: int


@dataclass(frozen=True)
class Packing:
    """Token n of a packed row [1, N] is column columns[n] of row rows[n] of a [batch, width] batch of trees;
    tokens go column after column, so each block of QueryBlocks is a contiguous run of them."""

    rows: torch.Tensor  # [N]
    columns: torch.Tensor  # [N]
    width: int
    blocks: tuple[QueryBlock, ...]

    @classmethod
    def of(cls, real: torch.Tensor) -> Packing:
        """The packing of the True cells of `real` [batch, width]: a first-column block and a block of the rest."""
        columns, rows = real.t().nonzero(as_tuple=True)
        first_column = int((columns == 0).sum())
        blocks = []
        for tokens, first in ((slice(0, first_column), 0), (slice(first_column, rows.numel()), 1)):
            block_rows, block_columns = rows[tokens], columns[tokens] - first
            if not block_rows.numel():
                continue
            present = block_rows.unique()
            width = int(block_columns.max()) + 1
            lo, hi = int(present[0]), int(present[-1]) + 1
            if hi - lo <= 2 * present.numel():  # mostly these rows: a view of their keys and values, no copy
                block, local = slice(lo, hi), block_rows - lo
            else:
                block, local = present, torch.searchsorted(present, block_rows)
            filled = block_rows.numel() == (hi - lo) * width  # every cell of the block holds a token
            dense = filled and (width == 1 or hi - lo == 1)
            blocks.append(QueryBlock(tokens, block, None if dense else (local, block_columns), first, width))
        return cls(rows, columns, real.shape[1], tuple(blocks))

    def to(self, device: torch.device) -> Packing:
        move = lambda t: t.to(device) if isinstance(t, torch.Tensor) else t  # noqa: E731
        blocks = tuple(
            QueryBlock(b.tokens, move(b.rows), None if b.place is None else tuple(map(move, b.place)), b.first, b.width)
            for b in self.blocks
        )
        return Packing(move(self.rows), move(self.columns), self.width, blocks)


def _packed_attention(module, query, key, value, mask, packing: Packing, **kwargs) -> torch.Tensor:
    """Attention of packed queries [1, heads, N, dim] block by block; [1, N, heads, dim]."""
    heads, dim = query.shape[1], query.shape[3]
    outs = []
    for block in packing.blocks:
        keys, values = key[block.rows], value[block.rows]
        tokens = query[0, :, block.tokens]  # [heads, n, dim]
        if block.place is None:  # [rows, heads, width, dim] in place
            padded = tokens.unflatten(1, (keys.shape[0], block.width)).transpose(0, 1)
        else:
            padded = query.new_zeros(keys.shape[0], heads, block.width, dim)
            padded[block.place[0], :, block.place[1]] = tokens.transpose(0, 1)
        block_mask = mask[block.rows, :, block.first : block.first + block.width]
        attended, _ = tree_attention(module, padded, keys, values, block_mask, **kwargs)  # [rows, width, heads, dim]
        outs.append(attended.flatten(0, 1) if block.place is None else attended[block.place[0], block.place[1]])
    return torch.cat(outs)[None]


def causal_mask(queries: int, keys: int, dtype: torch.dtype) -> torch.Tensor:
    """[1, 1, queries, keys]: the queries are the last `queries` positions, each sees the keys up to its own (what
    transformers means by no mask: stock generate() passes none for one unpadded sequence)."""
    allowed = torch.ones(queries, keys, dtype=torch.bool).tril(keys - queries)
    return torch.zeros(queries, keys, dtype=dtype).masked_fill_(~allowed, torch.finfo(dtype).min)[None, None]


def tree_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """SDPA over grouped KV heads without copying them, where that is the faster kernel; else stock SDPA.
    A packed query (kwargs["lopa_packing"]) runs block by block and comes back packed: [1, N, heads, dim]."""
    packing: Packing | None = kwargs.pop("lopa_packing", None)
    if packing is not None:
        return _packed_attention(module, query, key, value, attention_mask, packing, scaling=scaling, **kwargs), None
    grouped = getattr(module, "num_key_value_groups", 1) > 1
    plain = not any(kwargs.get(k) is not None for k in ("softcap", "position_bias", "s_aux"))
    if plain and ordered_attention.applies(query):
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        mask = attention_mask if attention_mask is not None else causal_mask(query.shape[2], key.shape[2], query.dtype)
        attend = (
            ordered_attention.ordered_attention_op
            if torch.compiler.is_compiling()
            else ordered_attention.ordered_attention
        )
        return attend(query, key, value, mask, scale), None
    if not (grouped and plain and attention_mask is not None and query.device.type == "cpu"):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    mask = attention_mask[:, :, :, : key.shape[-2]]
    (b, heads, t, dim), groups = query.shape, module.num_key_value_groups
    # each KV head's query heads folded into its query length: the CPU kernel's fast shape for several rows of
    # several queries, and for one bf16 query per row (there its grouped call took 3.7x as long for 1 row, 5.9x for 8)
    if b > 1 and t > 1 or t == 1 and query.dtype != torch.float32:
        folded = query.reshape(b, heads // groups, groups * t, dim)
        out = F.scaled_dot_product_attention(
            folded, key, value, attn_mask=mask.repeat(1, 1, groups, 1), dropout_p=dropout, scale=scaling
        )
        return out.view(b, heads, t, dim).transpose(1, 2).contiguous(), None
    out = F.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling, enable_gqa=True
    )
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(TREE_ATTENTION, tree_attention)
AttentionMaskInterface.register(TREE_ATTENTION, sdpa_mask)
