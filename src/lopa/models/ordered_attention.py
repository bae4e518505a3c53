"""Order-fixed attention on the CPU: a verified tree gives the logits one-token steps give, bit for bit.

SDPA's CPU kernels sum over however many keys a call holds, in blocks and vector lanes laid over the
slots: a token verified inside a tree (ancestors at other slots, masked siblings between them, a longer
key range) rounds differently from the same token decoded alone. In bf16 that flips greedy choices; in fp32
it is float noise that still flips a seeded draw where two tokens' noisy scores nearly tie. kernels/
ordered_attention.c computes each query over exactly its visible keys in slot order (kernel header says
how); with linear layers that compute each row alike (oneDNN's packed fp32 and bf16, torch's int4
weight-only kernel), the whole forward is then row-invariant. The C file is built and loaded by
models/native.py; without a compiler `supports()` is False and the caller keeps SDPA.
"""

from __future__ import annotations

import contextlib
import ctypes
from functools import cache

import torch

from . import native

DTYPES = {torch.float32: 0, torch.bfloat16: 1}
PROFILED_NAME = "lopa::ordered_attention"  # what torch.profiler calls a call of the kernel
STRIDES = ctypes.c_int64 * 19  # q's 4, k's 4, v's 4, the mask's 3, out's 4


@cache
def _library() -> ctypes.CDLL | None:
    """The compiled kernel with its signature declared; None when it cannot be built (SDPA is kept)."""
    library = native.library("ordered_attention")
    if library is not None:
        library.ordered_attention.restype = None
        pointers, sizes = [ctypes.c_void_p] * 5, [ctypes.c_int64] * 6
        library.ordered_attention.argtypes = [*pointers, STRIDES, *sizes, ctypes.c_float, *[ctypes.c_int] * 3]
    return library


@torch.compiler.assume_constant_result  # traced as its value: dynamo cannot follow the build check into the OS
def supports(dtype: torch.dtype, device: torch.device, head_dim: int) -> bool:
    """Whether fp32 or bf16 CPU attention of this head size goes through the kernel (0.7-1.4x SDPA's time a call
    for SmolLM2's shapes, no loss measured per generated token: docs/bench/fp32-attention); the head size
    must be a multiple of its 16 lanes."""
    return device.type == "cpu" and dtype in DTYPES and head_dim % 16 == 0 and _library() is not None


def applies(query: torch.Tensor) -> bool:
    """supports() for this query [B, H, T, D]."""
    return supports(query.dtype, query.device, query.shape[-1])


def ordered_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor, scale: float
) -> torch.Tensor:
    """query [B, H, T, D], key/value [B, KVH, S, D], additive mask [B or 1, 1, T, >=S] -> [B, T, H, D] (query's
    dtype). Lean: a forward makes one call per layer, and each Python step here costs about what a short one does."""
    (batch, heads, queries, dim), kv_heads, keys = query.shape, key.shape[1], key.shape[2]
    query, key, value = (t if t.stride(-1) == 1 else t.contiguous() for t in (query, key, value))
    if mask.dtype == torch.bool:  # transformers' own masks (a plain model call): True where a key is seen
        mask = torch.zeros(mask.shape).masked_fill_(~mask, float("-inf"))
    elif mask.dtype not in DTYPES or mask.stride(-1) != 1:
        mask = mask.float().contiguous()
    out = torch.empty(batch, queries, heads, dim, dtype=query.dtype)
    mask_strides = mask.stride(0) if mask.shape[0] > 1 else 0, mask.stride(2), 1  # one mask row set for all rows
    strides = STRIDES(*query.stride(), *key.stride(), *value.stride(), *mask_strides, *out.stride())
    work = batch * queries * keys * heads * dim
    threads = torch.get_num_threads() if work > 1 << 15 else 1  # an OpenMP fork costs a few microseconds
    profiled = torch.autograd._profiler_enabled()  # then named in the trace (a ctypes call is otherwise unseen)
    with torch.profiler.record_function(PROFILED_NAME) if profiled else contextlib.nullcontext():
        _library().ordered_attention(
            query.data_ptr(), key.data_ptr(), value.data_ptr(), mask.data_ptr(), out.data_ptr(), strides,
            batch, heads, kv_heads, queries, keys, dim, scale, DTYPES[query.dtype], DTYPES[mask.dtype], threads,
        )  # fmt: skip
    return out


@torch.library.custom_op("lopa::ordered_attention", mutates_args=())
def ordered_attention_op(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor, scale: float
) -> torch.Tensor:
    """ordered_attention as a registered op, which torch.compile keeps opaque (the ctypes call would break the
    graph)."""
    return ordered_attention(query, key, value, mask, scale)


@ordered_attention_op.register_fake
def _ordered_attention_shape(query, key, value, mask, scale) -> torch.Tensor:
    return query.new_empty(query.shape[0], query.shape[2], query.shape[1], query.shape[3])
