"""In-process A/B of the predictor's learned expansion cutoff (draft/predictor_drafter.py): Spec-Bench dev prompts
(one per category in turn), 64 new tokens, per round `ar`, `lopa` with the fixed floor of before (CUTOFF_SMOOTHING 0:
the cutoff stays at min_path_prob) and `lopa` with the learned cutoff, in turn, one engine (default DraftConfig: gate
and pricing on); greedy outputs of the three asserted equal. Batch 1: one generate() per prompt; else
generate([...]) `batch` at a time. Prints each round's tokens/s and tokens per forward, then median ratios to `ar`.

    OMP_NUM_THREADS=2 python docs/bench/cutoff/cutoff_ab.py BATCH ROUNDS PROMPTS
"""
import time, statistics, sys
from lopa.api import Engine
from lopa.bench.serve import load_prompts
from lopa.draft import predictor_drafter as PD
batch, rounds, count = (int(a) for a in sys.argv[1:4])
prompts = load_prompts("../shared/data/spec_bench_dev.jsonl")[:count]
msgs = [[{"role": "user", "content": p}] for p in prompts]
eng = Engine.from_pretrained()
def run(method, smoothing=0.3):
    PD.CUTOFF_SMOOTHING = smoothing
    t = time.perf_counter()
    if batch == 1:
        rs = [eng.generate(m, max_new_tokens=64, method=method) for m in msgs]
    else:
        rs = eng.generate_many(msgs, max_new_tokens=64, method=method, max_batch=batch, progress=False)
    dt = time.perf_counter() - t
    return sum(r.stats.new_tokens for r in rs) / dt, [r.token_ids for r in rs], sum(r.stats.new_tokens for r in rs) / sum(r.stats.forwards + 1 for r in rs)
run("ar"); run("lopa", 0.0); run("lopa")
res = {"ar": [], "fixed": [], "learned": []}
for _ in range(rounds):
    (a, ia, _), (f, i_f, tf), (l, il, tl) = run("ar"), run("lopa", 0.0), run("lopa")
    assert ia == i_f == il, "greedy outputs differ"
    for k, v in zip(res, (a, f, l)): res[k].append(v)
    print({k: round(v[-1], 1) for k, v in res.items()}, f"tpf fixed {tf:.2f} learned {tl:.2f}", flush=True)
ar = statistics.median(res["ar"])
print("batch", batch, "median / ar:", {k: round(statistics.median(v) / ar, 3) for k, v in res.items()})
