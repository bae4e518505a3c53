"""The CPU attention kernel on SmolLM2's shapes (9 query heads over 3 KV heads, head dim 64, random data, an
additive mask): SDPA with enable_gqa against the same with each KV head's 3 query heads folded into its query
length (models/attention.py); rows x queries x keys, median microseconds of 300 calls each (outputs checked equal).
An argument gives the dtype (default float32; bfloat16 for docs/bench/bf16-cpu).

    OMP_NUM_THREADS=2 python docs/bench/packed-trees/sdpa_shapes.py [bfloat16]
"""

import statistics
import sys
import time

import torch
import torch.nn.functional as F


def median_us(call, reps: int = 300) -> int:
    for _ in range(5):
        call()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return round(1e6 * statistics.median(times))


dtype = getattr(torch, sys.argv[1]) if len(sys.argv) > 1 else torch.float32
for rows, queries, keys in [(1, 1, 224), (1, 12, 224), (8, 1, 224), (8, 2, 224), (8, 4, 224), (16, 1, 224), (16, 2, 600)]:
    q, k, v = (torch.randn(rows, heads, n, 64, dtype=dtype) for heads, n in ((9, queries), (3, keys), (3, keys)))
    mask = torch.randn(rows, 1, queries, keys, dtype=dtype)
    folded_mask = mask.repeat(1, 1, 3, 1)

    def grouped():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

    def folded():
        out = F.scaled_dot_product_attention(q.reshape(rows, 3, 3 * queries, 64), k, v, attn_mask=folded_mask)
        return out.view(rows, 9, queries, 64)

    tolerance = 1e-4 if dtype == torch.float32 else 2e-2  # bf16: a rounding step of an output near 1
    torch.testing.assert_close(grouped(), folded(), atol=tolerance, rtol=tolerance)
    print(f"{rows} x {queries} x {keys}: grouped {median_us(grouped)} us, folded {median_us(folded)} us")
