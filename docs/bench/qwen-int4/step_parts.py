"""Where Qwen2.5-Coder-1.5B's int4 step goes (issue 37): a forward of 1, 2, 4, 8 chain tokens after 128, and its
vocabulary projection alone (bf16, 151,936 x 1,536: the file's Q6_K embedding is not kept quantized), sizes
interleaved, medians of 7.  Usage: OMP_NUM_THREADS=2 python docs/bench/qwen-int4/step_parts.py
"""

import statistics
import time

import torch

from lopa import Engine
from lopa.models.int4 import kernel_name

torch.set_num_threads(2)
engine = Engine.from_pretrained("qwen2.5-coder-1.5b", dtype="int4", predictor=False, profile=False)
model, runner = engine.model, engine.runner
head = model.get_output_embeddings()
print("kernel:", kernel_name(model), "| vocabulary:", type(head).__name__, tuple(head.weight.shape), head.weight.dtype)
runner.prefill(0, torch.randint(100, 20000, (128,)))


def chain(n: int):
    return torch.arange(5, 5 + n), torch.arange(n), torch.ones(n, n, dtype=torch.bool).tril()


sizes = (1, 2, 4, 8)
forward, vocab = {n: [] for n in sizes}, {n: [] for n in sizes}
with torch.inference_mode():
    for rep in range(9):  # the first 2 rounds warm up
        for n in sizes:
            start = time.perf_counter()
            runner.verify([chain(n)])
            middle = time.perf_counter()
            head(torch.randn(1, n, model.config.hidden_size, dtype=torch.bfloat16))
            end = time.perf_counter()
            if rep >= 2:
                forward[n].append(middle - start)
                vocab[n].append(end - middle)
print("tokens  forward ms  (x one)  vocabulary ms  rest ms")
for n in sizes:
    f, v = statistics.median(forward[n]) * 1e3, statistics.median(vocab[n]) * 1e3
    print(f"{n:>6}  {f:>10.1f}  {f / (statistics.median(forward[1]) * 1e3):>6.2f}x  {v:>13.1f}  {f - v:>7.1f}")
