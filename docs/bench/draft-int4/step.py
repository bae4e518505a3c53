"""The draft model's own step at each CPU precision, in one process, interleaved: a forward of 1 and 4 tokens
after 128 (a draft model drafts a token at a time, then re-reads what was accepted), medians of rounds.

    OMP_NUM_THREADS=2 python docs/bench/draft-int4/step.py qwen2.5-coder-0.5b
"""

import statistics
import sys

import torch

from lopa.models.loading import load_model
from lopa.models.profile import forward_latency
from lopa.models.runner import Runner

torch.set_num_threads(2)
spec = sys.argv[1]
runners = {}
for dtype in ("int8", "int4"):
    loaded = load_model(spec, dtype=dtype)
    runners[dtype] = Runner(loaded.model)
    print(f"{dtype}: loaded in {loaded.load_s:.1f} s", flush=True)
times = {(d, n): [] for d in runners for n in (1, 4)}
for _ in range(7):
    for (dtype, tokens), seen in times.items():
        seen.append(forward_latency(runners[dtype], tokens, prefix=128, reps=5) * 1e3)
for tokens in (1, 4):
    int8, int4 = (statistics.median(times[d, tokens]) for d in ("int8", "int4"))
    print(f"{tokens} token(s) after 128: int8 {int8:.1f} ms, int4 {int4:.1f} ms, int4 / int8 {int4 / int8:.2f}")
