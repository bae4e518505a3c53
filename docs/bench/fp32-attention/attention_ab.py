"""fp32 attention on the CPU: SDPA (lopa's fp32 path until 2026-12-07) against the order-fixed kernel.

1. Whether a verified tree's logits equal one-token steps' bit for bit with each (SmolLM2-135M fp32, the test
   helper of tests/test_exact_low_precision.py, two tree shapes).
2. One attention call each, SmolLM2-135M's shapes (9 query heads, 3 KV heads, head dim 64), causal masks,
   2 threads, medians of 30 calls (10 for the prefill shapes).

Run from the repository root: python docs/bench/fp32-attention/attention_ab.py
"""

import statistics
import sys
import time

import torch

sys.path.insert(0, ".")
from tests.test_exact_low_precision import _assert_tree_logits_are_steps  # noqa: E402

from lopa import Engine  # noqa: E402
from lopa.models import ordered_attention  # noqa: E402
from lopa.models.attention import causal_mask, tree_attention  # noqa: E402

torch.set_num_threads(2)
ORDERED = ordered_attention.supports


def sdpa(dtype: torch.dtype, device: torch.device, head_dim: int) -> bool:
    return False


class Grouped:
    num_key_value_groups = 3


def median_ms(call, n: int) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


engine = Engine.from_pretrained(profile=False)
for name, kernel in (("sdpa", sdpa), ("ordered", ORDERED)):
    ordered_attention.supports = kernel
    for parents in ([-1, 0, 1, 0, 3, 2], [-1, 0, 1, 2, 0, 4, 5, 1]):
        try:
            _assert_tree_logits_are_steps(engine.runner, parents, name)
            print(f"{name}: tree {parents}: every node's logits equal its one-token steps'")
        except AssertionError as error:
            print(f"{name}: tree {parents}: differs ({error})")

for queries, keys in [
    (1, 128),
    (1, 600),
    (1, 1600),
    (8, 128),
    (8, 600),
    (16, 1600),
    (32, 600),
    (256, 256),
    (1024, 1024),
]:
    q, k, v = torch.randn(1, 9, queries, 64), torch.randn(1, 3, keys, 64), torch.randn(1, 3, keys, 64)
    mask = causal_mask(queries, keys, torch.float32)
    calls = 10 if queries > 100 else 30
    timed = {}
    for name, kernel in (("sdpa", sdpa), ("ordered", ORDERED)):
        ordered_attention.supports = kernel
        timed[name] = median_ms(
            lambda q=q, k=k, v=v, mask=mask: tree_attention(Grouped(), q, k, v, mask, scaling=0.125), calls
        )
    ratio = timed["ordered"] / timed["sdpa"]
    print(
        f"queries {queries:4} keys {keys:4}: sdpa {timed['sdpa']:.3f} ms, ordered {timed['ordered']:.3f} ms, {ratio:.2f}x"
    )
