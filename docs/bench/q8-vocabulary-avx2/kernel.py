"""The vocabulary product alone, SmolLM2's shape (49,152 x 576, random codes and scales): the Q8_0 kernel
(q8_kernel(): the AMX one where it runs, else kernels/q8_matmul.c) against a stock bf16 nn.Linear, 1-16 rows,
interleaved, medians of 15; after checking that the kernel computes rows alike (1 row against calls of 2-70).

    OMP_NUM_THREADS=2 python docs/bench/q8-vocabulary-avx2/kernel.py
"""

import statistics
import time

import torch

from lopa.models.q8_vocabulary import Q8Vocabulary

torch.set_num_threads(2)
torch.manual_seed(0)
layer = Q8Vocabulary(torch.randint(-128, 128, (256, 128), dtype=torch.int8), torch.rand(256, 4) / 100)
x = (torch.randn(1024, 128) * torch.exp2(torch.randint(-20, 20, (1024, 128)).float())).bfloat16()
alone = torch.cat([layer(x[r : r + 1]) for r in range(len(x))])
for rows in (2, 3, 4, 5, 8, 16, 17, 33, 70):
    assert torch.equal(torch.cat([layer(x[lo : lo + rows]) for lo in range(0, len(x), rows)]), alone), rows
print("rows computed alike: 1 row against calls of 2-70 rows, 1,024 rows")
q8 = Q8Vocabulary(torch.randint(-128, 128, (49152, 576), dtype=torch.int8), torch.rand(49152, 18) / 100)
bf16 = torch.nn.Linear(576, 49152, bias=False).bfloat16()
print(f"{'rows':>4}  {'q8_0 kernel':>11}  {'bf16 Linear':>11}  ratio")
for n in (1, 2, 4, 8, 16):
    x = torch.randn(n, 576, dtype=torch.bfloat16)
    times: dict[str, list[float]] = {"q8": [], "bf16": []}
    for _ in range(15):
        for name, module in (("q8", q8), ("bf16", bf16)):
            start = time.perf_counter()
            module(x)
            times[name].append(time.perf_counter() - start)
    ours, stock = (statistics.median(times[k]) * 1e3 for k in ("q8", "bf16"))
    print(f"{n:>4}  {ours:>8.1f} ms  {stock:>8.1f} ms  {ours / stock:.2f}")
