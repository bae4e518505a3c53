"""Tree attention that reads grouped KV heads in place, plugged in through transformers' AttentionInterface.

Models with grouped-query attention (SmolLM2: 9 query heads over 3 KV heads; Qwen2.5,
Llama 3, Gemma 3 alike) store fewer KV heads than they attend with. Given a mask (a tree
verification always has one), transformers' stock SDPA path copies every KV head out
to all its query heads (`repeat_kv`) before calling SDPA, every layer, every step: at a
1,024-token prefix that copy grew with the context and SDPA ran over 3x the keys. On a
CPU, `scaled_dot_product_attention(..., enable_gqa=True)` reads the grouped heads in
place with the mask, equal to float noise (checked in the tests); on CUDA a mask
with enable_gqa falls back to the math kernel, so there the stock path stays.

"lopa_sdpa" is registered as an attention implementation (and given transformers' SDPA
mask builder, so stock `generate()` on the same model still works): loading a model
with attn_implementation="lopa_sdpa" or `model.set_attn_implementation("lopa_sdpa")`
selects it. Registration is the supported extension point; no transformers code changes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

TREE_ATTENTION = "lopa_sdpa"


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
    """SDPA over grouped KV heads without copying them, where that is the faster kernel; else stock SDPA."""
    grouped = getattr(module, "num_key_value_groups", 1) > 1
    plain = not any(kwargs.get(k) is not None for k in ("softcap", "position_bias", "s_aux"))
    if not (grouped and plain and attention_mask is not None and query.device.type == "cpu"):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    out = F.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask[:, :, :, : key.shape[-2]], dropout_p=dropout, scale=scaling, enable_gqa=True
    )
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(TREE_ATTENTION, tree_attention)
AttentionMaskInterface.register(TREE_ATTENTION, sdpa_mask)
