"""Tokens per forward of seeded sampling, whichever acceptance rule the lopa on PYTHONPATH has.

Run once with the code before the coupled sampler (recursive rejection) and once after, on the same prompts and
seeds (run.sh). TPF, not time, is compared: with a fixed window (every ranked node verified) a run's trees do
not depend on measured times; the default configuration's do, and is reported too.
Usage: python tpf.py OUT.json
"""
import json
import statistics
import sys

from lopa import DraftConfig, Engine, GenerationConfig
from lopa.bench.data import load_questions, select

DATA = "../shared/data/spec_bench_dev.jsonl"
questions = select(load_questions(DATA), None, 2, 0)  # 2 per category, 26 prompts
engines = {"fixed": Engine.from_pretrained(draft=DraftConfig(dynamic_window=False)), "defaults": Engine.from_pretrained()}
results = {}
for temperature, top_p in ((0.7, 0.9), (1.0, 1.0)):
    for name, engine in engines.items():
        tpf, tokens = [], 0
        for i, q in enumerate(questions):
            cfg = GenerationConfig(max_new_tokens=128, temperature=temperature, top_p=top_p, seed=1000 + i)
            r = engine.generate(q.turns[0], cfg)
            tpf.append(r.stats.tokens_per_forward)
            tokens += r.stats.new_tokens
        key = f"T={temperature} top_p={top_p} {name}"
        results[key] = {"median_tpf": statistics.median(tpf), "mean_tpf": statistics.mean(tpf), "tokens": tokens, "per_prompt": tpf}
        print(key, round(statistics.median(tpf), 3), round(statistics.mean(tpf), 3), tokens, flush=True)
json.dump(results, open(sys.argv[1], "w"), indent=1)
