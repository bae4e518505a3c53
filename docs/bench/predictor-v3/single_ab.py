"""Single requests with two predictors in one process: 13 Spec-Bench dev prompts (one per category), 128 new tokens,
per prompt `ar`, `lopa` with the old predictor and `lopa` with the new one, in turn (two engines, each loading one
predictor directory).
Per round: tokens/s of each, lopa / ar ratios, tokens per forward, tokens drafted by the predictor and its depth-1
top-1 hit rate (the predictor's own quality on these prompts, whatever the tree kept); then the median ratios.
Greedy outputs of the three must be equal (asserted).

    OMP_NUM_THREADS=2 python docs/bench/predictor-v3/single_ab.py OLD_DIR NEW_DIR ROUNDS
"""

import statistics
import sys
import time
from collections import Counter

from lopa.api import Engine
from lopa.bench.data import load_questions, spread

old_dir, new_dir, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
questions = spread(load_questions("../shared/data/spec_bench_dev.jsonl"), 13)
prompts = [[{"role": "user", "content": q.turns[0]}] for q in questions]
engines = {"old": Engine.from_pretrained(predictor=old_dir), "new": Engine.from_pretrained(predictor=new_dir)}
for engine in engines.values():
    engine.generate(prompts[0], max_new_tokens=16, method="lopa")
runs = [("ar", "old", "ar"), ("lopa-old", "old", "lopa"), ("lopa-new", "new", "lopa")]
summary: dict[str, list[float]] = {name: [] for name, _, _ in runs}
for _ in range(rounds):
    seconds, tokens, forwards, predicted, hits, trials = (Counter() for _ in range(6))
    outputs: dict[str, list[list[int]]] = {name: [] for name, _, _ in runs}
    for prompt in prompts:
        for name, which, method in runs:
            start = time.perf_counter()
            result = engines[which].generate(prompt, max_new_tokens=128, method=method)
            seconds[name] += time.perf_counter() - start
            stats = result.stats
            tokens[name] += stats.new_tokens
            forwards[name] += stats.forwards + 1
            predicted[name] += sum(step["sources"].count("predictor") for step in stats.steps)
            hits[name] += stats.drafters.get("predictor", {}).get("depth1_hits", 0)
            trials[name] += stats.drafters.get("predictor", {}).get("depth1_trials", 0)
            outputs[name].append(result.token_ids)
    assert outputs["lopa-old"] == outputs["ar"] == outputs["lopa-new"], "greedy outputs differ"
    rate = {name: tokens[name] / seconds[name] for name in seconds}
    line = []
    for name in ("lopa-old", "lopa-new"):
        summary[name].append(rate[name] / rate["ar"])
        line.append(f"{name} {rate[name]:.1f} tok/s x{rate[name] / rate['ar']:.3f} tpf {tokens[name] / forwards[name]:.2f}"
                    f" predictor tokens {predicted[name]} depth-1 {hits[name]}/{trials[name]}")
    print(f"ar {rate['ar']:.1f} tok/s |", " | ".join(line), flush=True)
print("medians lopa/ar: old", round(statistics.median(summary["lopa-old"]), 3), "new", round(statistics.median(summary["lopa-new"]), 3))
