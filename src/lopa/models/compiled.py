"""Verification forwards through torch.compile (inductor), at a few fixed tree sizes.

Compiling the stock forward fuses the pointwise work around the matrix products (norms,
rotary embedding, activations, residual adds) and drops the per-op Python dispatch (what it
gains and costs at start-up on a CPU: README, "Compiled runner"). Each distinct shape is a compilation (slow on a CPU, cached on disk by inductor), so trees
are padded up to a size bucket and the growing KV length is left to dynamo's automatic
dynamic shapes: one graph per bucket, whatever the prefix. Padding queries copy the first
query's mask row and position and their keys are hidden from every real query, so the
real rows' outputs are those of the unpadded forward (up to kernel rounding).

On CUDA a small model's step is bound by kernel launches, not arithmetic, so there the
runner keeps one static KV cache (STATIC_CONTEXT rows, attended to in full under the
mask) and every bucket has fixed shapes: inductor records it once as a CUDA graph and
replays it (mode "reduce-overhead"). On a CPU the dynamic KV length is cheaper.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

BUCKETS = (1, 2, 4, 8, 16, 32, 64)
STATIC_CONTEXT = 4096  # KV rows of the static cache CUDA graphs replay over (prompt + answer + a tree)
RECOMPILE_LIMIT = 3 * len(BUCKETS) + 2  # per bucket: a static graph, a dynamic-KV one, a dynamic-batch one


def bucket(tokens: int) -> int | None:
    """The padded size a forward of `tokens` queries runs at; None above the largest bucket."""
    return next((b for b in BUCKETS if b >= tokens), None)


def buckets_up_to(tokens: int) -> tuple[int, ...]:
    """Every bucket a forward of at most `tokens` queries can run at."""
    largest = bucket(tokens) or BUCKETS[-1]
    return tuple(b for b in BUCKETS if b <= largest)


def cuda_graph_capacity(model: nn.Module, compile: bool) -> int | None:
    """The static cache's rows when verification will replay CUDA graphs (compile on CUDA), else None."""
    if not compile or model.device.type != "cuda":
        return None
    return min(STATIC_CONTEXT, getattr(model.config.get_text_config(), "max_position_embeddings", STATIC_CONTEXT))


def compile_model(model: nn.Module, cuda_graphs: bool = False) -> Callable[..., Any]:
    """The model's forward compiled with inductor. `cuda_graphs` (a static KV cache on CUDA: every
    bucket has fixed shapes) also records each bucket as a CUDA graph and replays it."""
    if cuda_graphs:
        compiled = torch.compile(model, mode="reduce-overhead", dynamic=False)
    else:
        # bf16 and int4 (bf16 around lopa's kernels): round after each op as eager does. Inductor otherwise keeps
        # fused intermediates in fp32, and its one-token graph fused otherwise than its larger ones: a tree's first
        # token did not get its one-token step's logits (SmolLM2 int4, first 8 layers). With the casts and the lookup
        # below kept out of the graph it does, in one thread and in two (tests/test_exact_low_precision.py).
        options = {"emulate_precision_casts": model.dtype != torch.float32}
        compiled = torch.compile(model, dynamic=None, options=options)

    embed = model.get_input_embeddings()

    def forward(input_ids: torch.Tensor, **inputs: Any) -> Any:
        # the token lookup runs eagerly: fused into the first norm's reduction, a gather from a quantized
        # embedding's packed layout made inductor sum a row in another order at 8 rows than at 1 (SmolLM2 int4)
        embeddings = embed(input_ids)
        torch._dynamo.mark_static(embeddings, 1)  # the bucket size is part of the graph
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
            if cuda_graphs:
                torch.compiler.cudagraph_mark_step_begin()  # the previous step's outputs were copied out
            return compiled(inputs_embeds=embeddings, **inputs)

    return forward


def _pad_mask(mask: torch.Tensor, pad: int, static: bool) -> torch.Tensor:
    """[B, 1, T, S] -> [B, 1, T + pad, S + pad]: padding keys hidden, padding queries copy row 0.
    A static cache's mask already spans (and hides) the slots the padding rows are written to."""
    if not static:
        mask = F.pad(mask, (0, pad), value=torch.finfo(mask.dtype).min)
    return torch.cat([mask, mask[:, :, :1].expand(-1, -1, pad, -1)], dim=2)


def _owned(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor, copied if it is a view: dynamo guards on a view's base, so a view where the
    graph was built on a fresh tensor (or the other way round) would compile the bucket again."""
    return tensor if tensor._base is None else tensor.clone()


def pad_queries(tokens: torch.Tensor, positions: torch.Tensor, mask, size: int, static: bool = False):
    """Pad a forward of tokens [B, T] (positions [B, T], mask or per-layer-type masks) to `size` queries;
    `static`: the KV cache is static (its mask spans the whole cache)."""
    pad = size - tokens.shape[1]
    if pad:
        tokens = F.pad(tokens, (0, pad))
        positions = torch.cat([positions, positions[:, :1].expand(-1, pad)], dim=1)
        if isinstance(mask, dict):
            mask = {k: _pad_mask(m, pad, static) for k, m in mask.items()}
        else:
            mask = _pad_mask(mask, pad, static)
    positions = _owned(positions)  # the tokens are looked up before the graph (compile_model)
    mask = {k: _owned(m) for k, m in mask.items()} if isinstance(mask, dict) else _owned(mask)
    torch._dynamo.mark_static(positions, 1)  # the bucket size is part of the graph
    return tokens, positions, mask
