"""Single requests, fp32 and bf16 engines in one process: 13 Spec-Bench dev prompts (one per category) x N new
tokens, ar and lopa of each engine per prompt in turn; tokens/s, lopa / ar, tokens per forward, on how many
prompts each engine's greedy lopa equals its own ar, and bf16 against fp32.

    OMP_NUM_THREADS=2 python docs/bench/bf16-cpu/single_ab.py 128
"""

import sys
import time
from collections import defaultdict

import torch

from lopa.api import Engine
from lopa.bench.data import load_questions, spread

tokens = int(sys.argv[1])
questions = spread(load_questions("../shared/data/spec_bench_dev.jsonl"), 13)
prompts = [[{"role": "user", "content": q.turns[0]}] for q in questions]
engines = {"fp32": Engine.from_pretrained(), "bf16": Engine.from_pretrained(dtype=torch.bfloat16)}
runs = [(name, method) for name in engines for method in ("ar", "lopa")]
for name, method in runs:  # warm-up
    engines[name].generate(prompts[0], max_new_tokens=16, method=method)
seconds, made, forwards = defaultdict(float), defaultdict(int), defaultdict(int)
outputs: dict[tuple[str, str], list[list[int]]] = defaultdict(list)
for prompt in prompts:
    for name, method in runs:
        start = time.perf_counter()
        result = engines[name].generate(prompt, max_new_tokens=tokens, method=method)
        seconds[name, method] += time.perf_counter() - start
        made[name, method] += result.stats.new_tokens
        forwards[name, method] += result.stats.forwards
        outputs[name, method].append(result.token_ids)
rate = {run: made[run] / seconds[run] for run in runs}


def agree(a: tuple[str, str], b: tuple[str, str]) -> int:
    return sum(x == y for x, y in zip(outputs[a], outputs[b]))


for name in engines:
    ar, lopa = rate[name, "ar"], rate[name, "lopa"]
    print(f"{name}: ar {ar:.1f} tok/s, lopa {lopa:.1f} tok/s, lopa/ar {lopa / ar:.3f}, "
          f"tpf {made[name, 'lopa'] / forwards[name, 'lopa']:.2f}, "
          f"lopa == ar on {agree((name, 'ar'), (name, 'lopa'))}/{len(prompts)} prompts")
print(f"bf16 ar / fp32 ar {rate['bf16', 'ar'] / rate['fp32', 'ar']:.3f}, "
      f"bf16 lopa / fp32 ar {rate['bf16', 'lopa'] / rate['fp32', 'ar']:.3f}, "
      f"bf16 ar == fp32 ar on {agree(('fp32', 'ar'), ('bf16', 'ar'))}/{len(prompts)} prompts")
