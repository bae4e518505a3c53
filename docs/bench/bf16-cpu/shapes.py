"""Verification forwards in fp32 and bf16 (one process, the two models alternating): 8 sequences (prefixes of
150-220 tokens) or one, with trees of given node counts, every shape in turn, 20 timed rounds; prints the median
milliseconds of each. Run with PYTHONPATH at one checkout or another:

    OMP_NUM_THREADS=2 PYTHONPATH=/path/to/checkout/src python docs/bench/bf16-cpu/shapes.py
"""

import statistics
import time

import torch

import lopa
from lopa.api import Engine
from lopa.models.runner import Runner

shapes = {"8x1": [1] * 8, "8x2": [2] * 8, "8x4": [4] * 8, "1x1": [1], "1x4": [4], "1x12": [12], "1x24": [24]}
runners = {}
for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
    runner = Runner(Engine.from_pretrained(predictor=False, dtype=dtype).model, 8, 512)
    for slot in range(8):
        runner.prefill(slot, torch.arange(100, 250 + 10 * slot), 0)
    runners[name] = runner


def chain(n: int):
    return torch.arange(5, 5 + n), torch.arange(n), torch.ones(n, n, dtype=torch.bool).tril_()


times = {(d, s): [] for d in runners for s in shapes}
for rnd in range(23):
    for d, runner in runners.items():
        for s, sizes in shapes.items():
            start = time.perf_counter()
            runner.verify([chain(n) for n in sizes])
            if rnd >= 3:  # warm-up rounds
                times[d, s].append(time.perf_counter() - start)
print(lopa.__file__)
for d in runners:
    print(d, {s: round(1000 * statistics.median(times[d, s]), 1) for s in shapes})
