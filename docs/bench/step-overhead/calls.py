"""What one call of lopa's C kernels costs from Python, on shapes so small that the kernel itself is ~nothing:
an int4 layer of 16 x 64 on one row, and order-fixed attention of 9 query heads over 2 and 200 keys.

A 1-token forward of SmolLM2 makes 210 int4 calls and 30 attention calls, so each microsecond here is ~0.25 ms a
token. Run it under two checkouts to compare them (run.sh does, alternating). Medians of 7 x 2,000 calls.
"""

import statistics
import time

import torch

from lopa.models.int4 import Int4Linear
from lopa.models.ordered_attention import ordered_attention

torch.set_num_threads(2)
torch.manual_seed(0)


def per_call_us(call, n: int = 2000) -> float:
    runs = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(n):
            call()
        runs.append((time.perf_counter() - start) / n * 1e6)
    return statistics.median(runs)


layer = Int4Linear.from_weight(torch.randn(16, 64), kernel="amx-tiles")
x = torch.randn(1, 1, 64).bfloat16()
q = torch.randn(1, 9, 1, 64).bfloat16()
k, v = torch.randn(1, 3, 200, 64).bfloat16(), torch.randn(1, 3, 200, 64).bfloat16()
mask = torch.zeros(1, 1, 1, 200, dtype=torch.bfloat16)
print(f"int4 layer 16x64, 1 row:        {per_call_us(lambda: layer(x)):6.1f} us")
print(f"attention, 2 keys:              {per_call_us(lambda: ordered_attention(q, k[:, :, :2], v[:, :, :2], mask[..., :2], 0.125)):6.1f} us")
print(f"attention, 200 keys:            {per_call_us(lambda: ordered_attention(q, k, v, mask, 0.125)):6.1f} us")
