"""Predictor forwards per step and their time by rows, every step drafting, 8 Spec-Bench dev prompts x 64 tokens (the second
pass is counted). Run before the cutoff (9b6c59c^).

    OMP_NUM_THREADS=2 python docs/bench/cutoff/predictor_runs.py
"""
import collections
import time
from lopa.api import Engine
from lopa.bench.serve import load_prompts
from lopa.config import DraftConfig
from lopa.draft import predictor as P
prompts = load_prompts("../shared/data/spec_bench_dev.jsonl")[:8]
msgs = [[{"role": "user", "content": p}] for p in prompts]
eng = Engine(Engine.from_pretrained().loaded, DraftConfig(always_draft=True))
orig = P.PredictorCache.run
stats = collections.defaultdict(list)
def run(self, predictor, features, tokens, positions, ancestors):
    t = time.perf_counter(); r = orig(self, predictor, features, tokens, positions, ancestors)
    stats[tokens.numel()].append(time.perf_counter() - t); return r
P.PredictorCache.run = run
steps = 0
for m in msgs: steps += eng.generate(m, max_new_tokens=64).stats.forwards
stats.clear(); steps = 0
for m in msgs: steps += eng.generate(m, max_new_tokens=64).stats.forwards
calls = sum(len(v) for v in stats.values())
print("steps", steps, "predictor runs", calls, "per step", round(calls/steps, 2), "ms per step", round(1000*sum(map(sum, stats.values()))/steps, 2))
for t in sorted(stats)[:12]: print(t, len(stats[t]), "median ms", round(1000*sorted(stats[t])[len(stats[t])//2], 2))
