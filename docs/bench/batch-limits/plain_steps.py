"""Batches with the gate held to plain steps (a benchmark-only patch of LookaheadGate.lookahead) against ar, alternating in one
process: where the time goes (prefill, verify, advance, commit, step, total), 16 Spec-Bench dev prompts x 64 tokens.

    OMP_NUM_THREADS=2 python docs/bench/batch-limits/plain_steps.py BATCH ROUNDS PROMPTS
"""
import sys, time, statistics, collections
from lopa.api import Engine
from lopa.bench.serve import load_prompts
from lopa.decode import gate as G
from lopa.models import runner as R
from lopa.decode import loop as L
import lopa.api as A
batch, rounds, count = (int(a) for a in sys.argv[1:4])
prompts = load_prompts("../shared/data/spec_bench_dev.jsonl")[:count]
msgs = [[{"role": "user", "content": p}] for p in prompts]
eng = Engine.from_pretrained()
T = collections.Counter()
def timed(name, f):
    def g(*a, **k):
        t = time.perf_counter(); r = f(*a, **k); T[name] += time.perf_counter() - t; return r
    return g
R.Runner.prefill = timed("prefill", R.Runner.prefill)
R.Runner.verify = timed("verify", R.Runner.verify)
R.Runner.commit = timed("commit", R.Runner.commit)
L.SequenceDecoder.advance = timed("advance", L.SequenceDecoder.advance)
L.SequenceDecoder.draft = timed("draft", L.SequenceDecoder.draft)
L.SequenceDecoder.first = timed("first", L.SequenceDecoder.first)
A.step = timed("step", L.step)
orig = G.LookaheadGate.lookahead
def run(name):
    method = "ar" if name == "ar" else "lopa"
    G.LookaheadGate.lookahead = (lambda self, rows: False) if name == "plain-gated" else orig
    T.clear()
    t = time.perf_counter()
    rs = eng.generate_many(msgs, max_new_tokens=64, method=method, max_batch=batch, progress=False)
    T["total"] = time.perf_counter() - t
    n = sum(r.stats.new_tokens for r in rs)
    return n / T["total"], {k: round(v, 2) for k, v in T.items()}
names = ["ar", "plain-gated"]
for nm in names: run(nm)
for _ in range(rounds):
    for nm in names:
        r, t = run(nm); print(nm, round(r, 1), t, flush=True)
