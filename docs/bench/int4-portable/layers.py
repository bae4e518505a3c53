"""The int4 products alone: one decoder layer's seven shapes of SmolLM2 (q, o 576x576; k, v 192x576; gate, up
1536x576; down 576x1536; random weights quantized by lopa) x 30 layers, on lopa's portable kernel and on torch's
`_weight_int4pack_mm_for_cpu`, 1-16 rows, kernels interleaved, medians of 11 (issue 37).
Usage: OMP_NUM_THREADS=2 python docs/bench/int4-portable/layers.py
"""

import statistics
import time

import torch

from lopa.models.int4 import Int4Linear

torch.set_num_threads(2)
torch.manual_seed(0)
shapes = [(576, 576)] * 2 + [(192, 576)] * 2 + [(1536, 576)] * 2 + [(576, 1536)]
kernels = ("panel", "torch")
layers = {kernel: [] for kernel in kernels}
for out_features, in_features in shapes:
    weight = torch.randn(out_features, in_features)
    for kernel in kernels:
        layers[kernel].append(Int4Linear.from_weight(weight, kernel=kernel))
print(f"{'rows':>4}  " + "  ".join(f"{k:>8}" for k in kernels) + "  ratio  (ms for 30 layers' 210 products)")
for rows in (1, 2, 4, 8, 16):
    inputs = {n: torch.randn(rows, n, dtype=torch.bfloat16) for n in (576, 1536)}
    times = {kernel: [] for kernel in kernels}
    for _rep in range(11):
        for kernel in kernels:
            start = time.perf_counter()
            for _ in range(30):
                for layer in layers[kernel]:
                    layer(inputs[layer.in_features])
            times[kernel].append(time.perf_counter() - start)
    ours, theirs = (statistics.median(times[kernel]) * 1e3 for kernel in kernels)
    print(f"{rows:>4}  {ours:>5.1f} ms  {theirs:>5.1f} ms  {ours / theirs:.2f}")
