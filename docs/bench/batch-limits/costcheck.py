"""Per step of batches with every step drafting: the cost model's predicted forward seconds and expected tokens for
the trees it chose, against the measured forward and the tokens emitted."""
import sys, time, statistics
from lopa.api import Engine
from lopa.config import DraftConfig
from lopa.bench.serve import load_prompts
from lopa.decode import loop as L
from lopa.decode import cost as C
batch, count = int(sys.argv[1]), int(sys.argv[2])
prompts = load_prompts("../shared/data/spec_bench_dev.jsonl")[:count]
msgs = [[{"role": "user", "content": p}] for p in prompts]
base = Engine.from_pretrained()
eng = Engine(base.loaded, DraftConfig(always_draft=True)); eng.profile()
rec = []
cur = {}
orig_ts = C.CostModel.tree_sizes
def ts(self, probs, corrected=True):
    sizes = orig_ts(self, probs, corrected)
    n = len(probs)
    tpr = self.tokens_per_row([1 + s for s in sizes])
    cur.update(rows=n, pred=self(n, tpr), pred_plain=self(n, 1), expected=n + sum(sum(p[:s]) for p, s in zip(probs, sizes)), nodes=sum(sizes))
    return sizes
C.CostModel.tree_sizes = ts
orig_obs = C.CostModel.observe
def obs(self, rows, tokens, seconds):
    cur["measured"] = seconds
    return orig_obs(self, rows, tokens, seconds)
C.CostModel.observe = obs
orig_step = L.step
def step(runner, seqs, cost):
    cur.clear()
    r = orig_step(runner, seqs, cost)
    cur["emitted"] = sum(len(x.tokens) for x in r if not isinstance(x, Exception))
    rec.append(dict(cur)); return r
import lopa.api as A
A.step = step
for rnd in range(2):
    rec.clear()
    eng.generate_many(msgs, max_new_tokens=64, method="lopa", max_batch=batch, progress=False)
    full = [r for r in rec if r["rows"] == batch]
    print(f"round {rnd}: steps at {batch} rows {len(full)}; nodes/row {statistics.mean(r['nodes'] for r in full)/batch:.2f}; "
          f"measured/predicted forward {statistics.median(r['measured']/r['pred'] for r in full):.2f}; predicted tree/plain {statistics.median(r['pred']/r['pred_plain'] for r in full):.2f}; "
          f"emitted/expected tokens {sum(r['emitted'] for r in full)/sum(r['expected'] for r in full):.2f}; expected per row {statistics.mean(r['expected'] for r in full)/batch:.2f}, emitted per row {statistics.mean(r['emitted'] for r in full)/batch:.2f}")
