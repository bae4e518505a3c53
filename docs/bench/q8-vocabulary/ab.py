"""int4 SmolLM2 with its vocabulary in the file's Q8_0 (the default wherever a row-invariant int8 kernel runs)
against the bf16 vocabulary (oneDNN-packed where the CPU has it, as before), in one process: forwards of 1, 2, 4,
8 and 16 tokens after a 128-token prefix, both models interleaved, medians of 30; and how many of a 16-token
forward's greedy tokens differ (the Q8_0 projection applies each scale in fp32 where the bf16 matrix held
code * scale rounded to bf16, so near-ties may go either way).
Usage: OMP_NUM_THREADS=2 python docs/bench/q8-vocabulary/ab.py
"""

import statistics
import time
from unittest import mock

import torch

from lopa import Engine
from lopa.models import loading

torch.set_num_threads(2)
torch.manual_seed(0)
engines = {"q8_0 vocabulary": Engine.from_pretrained(dtype="int4", profile=False)}
with mock.patch.object(loading, "keep_q8_vocabulary", return_value=False):  # the load as it was before
    engines["bf16 vocabulary"] = Engine.from_pretrained(dtype="int4", profile=False)
prefix = torch.randint(100, 20000, (128,))
for engine in engines.values():
    engine.runner.prefill(0, prefix)


def chain(n: int):
    return torch.arange(5, 5 + n) * 7, torch.arange(n), torch.ones(n, n, dtype=torch.bool).tril()


sizes = (1, 2, 4, 8, 16)
times = {(n, name): [] for n in sizes for name in engines}
for rep in range(33):  # sizes and models interleaved; the first 3 rounds warm up
    for n in sizes:
        for name, engine in engines.items():
            start = time.perf_counter()
            engine.runner.verify([chain(n)])
            if rep >= 3:
                times[n, name].append(time.perf_counter() - start)
argmax = [engine.runner.verify([chain(16)])[0].logits.argmax(-1) for engine in engines.values()]
print(f"greedy tokens that differ in a 16-token forward: {int((argmax[0] != argmax[1]).sum())} of 16")
print(f"{'tokens':>6}  " + "  ".join(f"{name:>16}" for name in engines) + "   ratio")
for n in sizes:
    first, second = (statistics.median(times[n, name]) * 1e3 for name in engines)
    print(f"{n:>6}  {first:>13.1f} ms  {second:>13.1f} ms   {first / second:.2f}")
