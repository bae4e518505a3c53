"""Issue 38, item 3: what a predictor's output layer costs per draft forward at a draft vocabulary of V tokens
(576 inputs, SmolLM2's width), through the same oneDNN-packed fp32 linear the predictor drafts with, at 1, 4 and 16
rows; beside it, the base model's 1-token forward it rides on. Median of 200 calls after 20 warm-up calls.

Usage: OMP_NUM_THREADS=2 python docs/bench/draft-vocab/head_cost.py
"""

import statistics
import time

import torch
from torch import nn

from lopa.models.fastlinear import PackedLinear
from lopa.models.loading import load_model
from lopa.models.runner import Runner


def median_ms(fn, reps: int = 200) -> float:
    for _ in range(20):
        fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


torch.manual_seed(0)
print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
with torch.no_grad():
    for vocab in (4096, 10752, 16384, 49152):
        head = PackedLinear(nn.Linear(576, vocab, bias=False))
        inputs = [torch.randn(rows, 576) for rows in (1, 4, 16)]
        cells = [f"{median_ms(lambda x=x, head=head: head(x)):6.3f}" for x in inputs]
        print(f"draft vocabulary {vocab:6,}: ms per call at 1 / 4 / 16 rows: {' / '.join(cells)}")
    model = load_model().model
    runner = Runner(model, capacity=512)
    runner.prefill(0, torch.randint(0, 49152, (128,)))
    one = (torch.tensor([17]), torch.tensor([0]), torch.ones(1, 1, dtype=torch.bool))

    def step():
        runner.verify([one])
        runner.lengths[0] = 128  # forget the token: every call runs after the same 128-token prefix

    print(f"base model, 1-token forward after 128 tokens: {median_ms(step, 50):.2f} ms")
