"""A cold engine with and without the predictor's warm-up at load (draft/predictor.py warm_up, run by
Engine.profile): in one fresh process, 8 Spec-Bench dev prompts x 64 tokens as single requests, lopa then ar, twice
(round 1 is the cold engine's first requests, round 2 the same engine warm); greedy outputs asserted equal. `off`
replaces the warm-up by a no-op (this script only). Prints each round's tokens/s, lopa's tokens per forward and
the lookahead gate's leader at 1 row after the round.

    OMP_NUM_THREADS=2 python docs/bench/warm-up/cold_ab.py on|off
"""
import sys
import time
import lopa.api
from lopa.api import Engine
from lopa.bench.serve import load_prompts
if sys.argv[1] == "off":
    lopa.api.warm_up_predictor = lambda predictor, rows: None
prompts = load_prompts("../shared/data/spec_bench_dev.jsonl")[:8]
msgs = [[{"role": "user", "content": p}] for p in prompts]
start = time.perf_counter()
eng = Engine.from_pretrained()
load_s = time.perf_counter() - start
for rnd in (1, 2):
    rates, ids = {}, {}
    for method in ("lopa", "ar"):
        t = time.perf_counter()
        rs = [eng.generate(m, max_new_tokens=64, method=method) for m in msgs]
        dt = time.perf_counter() - t
        n = sum(r.stats.new_tokens for r in rs)
        rates[method], ids[method] = n / dt, [r.token_ids for r in rs]
        if method == "lopa":
            tpf = n / sum(r.stats.forwards + 1 for r in rs)
    assert ids["lopa"] == ids["ar"], "greedy outputs differ"
    gate = eng.cost.gate.sizes[1]
    print(f"warm-up {sys.argv[1]:3s} load {load_s:.1f} s round {rnd}: lopa {rates['lopa']:.1f} tok/s (tpf {tpf:.2f}), "
          f"ar {rates['ar']:.1f}, lopa/ar {rates['lopa'] / rates['ar']:.3f}; gate at 1 row: "
          f"{'lookahead' if gate.leader else 'plain'} leads", flush=True)
