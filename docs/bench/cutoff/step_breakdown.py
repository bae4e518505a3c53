"""Where a lone request's step goes (ar and lopa with every step drafting, 8 Spec-Bench dev prompts x 64 tokens, 3 rounds):
per decoding step, drafting / verification / other ms, tokens per forward, tree nodes. Run before the cutoff (9b6c59c^).

    OMP_NUM_THREADS=2 python docs/bench/cutoff/step_breakdown.py
"""
import collections
import time
from lopa.api import Engine
from lopa.bench.serve import load_prompts
from lopa.config import DraftConfig
prompts = load_prompts("../shared/data/spec_bench_dev.jsonl")[:8]
msgs = [[{"role": "user", "content": p}] for p in prompts]
base = Engine.from_pretrained()
eng = Engine(base.loaded, DraftConfig(always_draft=True)); eng.cost = base.cost
for rnd in range(3):
    for method, e in (("ar", base), ("lopa", eng)):
        agg = collections.Counter(); t = time.perf_counter()
        for m in msgs:
            s = e.generate(m, max_new_tokens=64, method=method).stats
            agg.update(dict(wall=s.wall_s, prefill=s.prefill_s, draft=s.draft_s, verify=s.verify_s, fw=s.forwards, tok=s.new_tokens, nodes=s.tree_nodes))
        fw = agg["fw"]
        print(method, f"tok/s {agg['tok']/agg['wall']:.1f} tpf {agg['tok']/(fw+len(msgs)):.2f} per step: draft {1000*agg['draft']/fw:.1f} verify {1000*agg['verify']/fw:.1f} other {1000*(agg['wall']-agg['prefill']-agg['draft']-agg['verify'])/fw:.1f} ms; nodes/step {agg['nodes']/fw:.1f}; prefill {agg['prefill']:.1f}s of {agg['wall']:.1f}s", flush=True)
