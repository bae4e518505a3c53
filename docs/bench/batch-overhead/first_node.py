"""What the first extra tree node costs a batch of 8: verification forwards of 8 sequences (prefixes of 150-220
tokens) with every row at 1 token, one row at 2, 3 or 5 and the rest at 1 (packed), four rows at 2, every row at 2 or 3;
every shape in turn, 20 timed rounds after 3 warm-up rounds; median milliseconds.

    OMP_NUM_THREADS=2 python docs/bench/batch-overhead/first_node.py
"""

import statistics
import time

import torch

from lopa.api import Engine
from lopa.models.runner import Runner

runner = Runner(Engine.from_pretrained(predictor=False).model, 8, 512)
for slot in range(8):
    runner.prefill(slot, torch.arange(100, 250 + 10 * slot), 0)


def chain(n: int):
    return torch.arange(5, 5 + n), torch.arange(n), torch.ones(n, n, dtype=torch.bool).tril_()


shapes = {"8x1": [1] * 8, "2+7x1": [2] + [1] * 7, "3+7x1": [3] + [1] * 7, "5+7x1": [5] + [1] * 7,
          "4x2+4x1": [2] * 4 + [1] * 4, "8x2": [2] * 8, "8x3": [3] * 8}
times: dict[str, list[float]] = {name: [] for name in shapes}
for rnd in range(23):
    for name, sizes in shapes.items():
        start = time.perf_counter()
        runner.verify([chain(n) for n in sizes])
        if rnd >= 3:
            times[name].append(time.perf_counter() - start)
print({name: round(1000 * statistics.median(t), 1) for name, t in times.items()})
