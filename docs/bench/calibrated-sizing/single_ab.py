"""Single requests: 13 Spec-Bench dev prompts (one per category), 128 tokens, ar and lopa alternating per prompt."""
import statistics, sys, time
import lopa
from lopa.api import Engine
from lopa.bench.data import load_questions, spread
questions = spread(load_questions("../shared/data/spec_bench_dev.jsonl"), 13)
prompts = [[{"role": "user", "content": q.turns[0]}] for q in questions]
engine = Engine.from_pretrained()
rounds = int(sys.argv[1])
engine.generate(prompts[0], max_new_tokens=16, method="lopa")
ratios, tpf = [], []
for _ in range(rounds):
    t = {"ar": 0.0, "lopa": 0.0}; n = {"ar": 0, "lopa": 0}; fw = 0
    for p in prompts:
        for m in ("ar", "lopa"):
            s = time.perf_counter(); r = engine.generate(p, max_new_tokens=128, method=m); t[m] += time.perf_counter() - s
            n[m] += r.stats.new_tokens
            if m == "lopa": fw += r.stats.forwards
    ratios.append((n["lopa"] / t["lopa"]) / (n["ar"] / t["ar"])); tpf.append(n["lopa"] / fw)
    print(round(n["ar"] / t["ar"], 1), round(n["lopa"] / t["lopa"], 1), round(ratios[-1], 3), "tpf", round(tpf[-1], 2), flush=True)
print(lopa.__file__, "single median lopa/ar", round(statistics.median(ratios), 3), "tpf", round(statistics.median(tpf), 2))
