"""Default engine, batches of 8: per step, whether it drafted, its drafting time (SequenceDecoder.draft), forward
and total, and which sources proposed."""
import sys, time, collections, statistics
from lopa.api import Engine
from lopa.bench.serve import load_prompts
from lopa.decode import loop as L
import lopa.api as A
batch, count = int(sys.argv[1]), int(sys.argv[2])
prompts = load_prompts("../shared/data/spec_bench_dev.jsonl")[:count]
msgs = [[{"role": "user", "content": p}] for p in prompts]
eng = Engine.from_pretrained()
cur = collections.Counter(); srcs = collections.Counter()
orig_draft = L.SequenceDecoder.draft
def draft(self, rate, rows, lookahead=True):
    t = time.perf_counter(); r = orig_draft(self, rate, rows, lookahead); cur["draft"] += time.perf_counter() - t
    for s, sec in self.proposing_s.items(): srcs[s] += 1; cur["prop_" + s] += sec
    cur["lookahead"] = lookahead
    return r
L.SequenceDecoder.draft = draft
steps = []
orig_step = L.step
def step(runner, seqs, cost):
    cur.clear(); t = time.perf_counter(); r = orig_step(runner, seqs, cost)
    steps.append((len(seqs), bool(cur["lookahead"]), time.perf_counter() - t, cur["draft"], sum(len(x.tokens) for x in r), dict(cur))); return r
A.step = step
for rnd in range(3):
    steps.clear(); srcs.clear()
    eng.generate_many(msgs, max_new_tokens=64, method="lopa", max_batch=batch, progress=False)
    for la in (True, False):
        s = [x for x in steps if x[0] >= 4 and x[1] == la]
        if s:
            print(f"round {rnd} {'lookahead' if la else 'plain'} steps at >=4 rows: {len(s)}, median {1000*statistics.median(x[2] for x in s):.0f} ms, drafting {1000*statistics.median(x[3] for x in s):.1f} ms (mean {1000*statistics.mean(x[3] for x in s):.1f}), tokens/row {statistics.mean(x[4]/x[0] for x in s):.2f}")
    print("  proposals by source", dict(srcs), {k: round(1000 * sum(x[5].get(k, 0) for x in steps), 0) for k in ("prop_predictor", "prop_lookup", "prop_pool", "prop_jacobi")})
