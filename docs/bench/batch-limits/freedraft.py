"""Upper bound of batched drafting: batches decoded with every step drafting (always_draft), their time split into
drafting (SequenceDecoder.draft: proposing and ranking) and the rest; 'free drafting' = tokens / (total - drafting)."""
import sys, time, statistics
from lopa.api import Engine
from lopa.config import DraftConfig
from lopa.bench.serve import load_prompts
from lopa.decode import loop as L
batch, rounds, count = (int(a) for a in sys.argv[1:4])
prompts = load_prompts("../shared/data/spec_bench_dev.jsonl")[:count]
msgs = [[{"role": "user", "content": p}] for p in prompts]
base = Engine.from_pretrained()
eng = Engine(base.loaded, DraftConfig(always_draft=True)); eng.profile()
spent = {"draft": 0.0}
orig = L.SequenceDecoder.draft
def draft(self, *a, **k):
    t = time.perf_counter(); r = orig(self, *a, **k); spent["draft"] += time.perf_counter() - t; return r
L.SequenceDecoder.draft = draft
def run(method):
    spent["draft"] = 0.0
    t = time.perf_counter()
    rs = eng.generate_many(msgs, max_new_tokens=64, method=method, max_batch=batch, progress=False)
    dt = time.perf_counter() - t
    n = sum(r.stats.new_tokens for r in rs)
    return n / dt, n / (dt - spent["draft"]), n / sum(r.stats.forwards + 1 for r in rs), spent["draft"] / dt, [r.token_ids for r in rs]
run("ar"); run("lopa")
res = {"ar": [], "lopa": [], "free": []}
for _ in range(rounds):
    a, _, _, _, ia = run("ar"); l, f, tpf, share, il = run("lopa")
    assert ia == il
    res["ar"].append(a); res["lopa"].append(l); res["free"].append(f)
    print(f"ar {a:.1f} lopa {l:.1f} (tpf {tpf:.2f}, drafting {100*share:.0f}% of its time) free drafting {f:.1f} tok/s", flush=True)
ar = statistics.median(res["ar"])
print("batch", batch, "median / ar:", {k: round(statistics.median(v) / ar, 3) for k, v in res.items()})
