"""Verification forwards of 8 sequences (prefixes of 150-220 tokens) with trees of given node counts, every shape
in turn, 25 rounds; prints the median milliseconds of each. Run with PYTHONPATH at one checkout or another:

    OMP_NUM_THREADS=2 PYTHONPATH=/path/to/checkout/src python docs/bench/packed-trees/verify_shapes.py
"""

import statistics
import time

import torch

import lopa
from lopa.api import Engine
from lopa.models.runner import Runner

engine = Engine.from_pretrained(predictor=False)
runner = Runner(engine.model, 8, 512)
for slot in range(8):
    runner.prefill(slot, torch.arange(100, 250 + 10 * slot), 0)


def chain(n: int):
    return torch.arange(5, 5 + n), torch.arange(n), torch.ones(n, n, dtype=torch.bool).tril_()


shapes = {"8x1": [1] * 8, "4+7x1": [4] + [1] * 7, "2,2,2,2,1,1,1,1": [2] * 4 + [1] * 4, "8x2": [2] * 8,
          "12+7x1": [12] + [1] * 7, "8x4": [4] * 8, "1x1": [1], "1x12": [12]}
times: dict[str, list[float]] = {name: [] for name in shapes}
for rnd in range(28):
    for name, sizes in shapes.items():
        start = time.perf_counter()
        runner.verify([chain(n) for n in sizes])
        if rnd >= 3:  # warm-up rounds
            times[name].append(time.perf_counter() - start)
print(lopa.__file__, {name: round(1000 * statistics.median(t), 1) for name, t in times.items()})
