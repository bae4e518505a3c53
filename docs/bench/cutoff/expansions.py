"""Predictor forwards per step with the fixed expansion floor (CUTOFF_SMOOTHING 0) and the learned cutoff, every step
drafting (always_draft), 8 Spec-Bench dev prompts x 64 tokens, alternating in one process; the cutoff's 10/50/90th
percentiles as a path confidence.

    OMP_NUM_THREADS=2 python docs/bench/cutoff/expansions.py
"""
import math
import time
from lopa.api import Engine
from lopa.bench.serve import load_prompts
from lopa.config import DraftConfig
from lopa.draft import predictor as P, predictor_drafter as PD
prompts = load_prompts("../shared/data/spec_bench_dev.jsonl")[:8]
msgs = [[{"role": "user", "content": p}] for p in prompts]
eng = Engine(Engine.from_pretrained().loaded, DraftConfig(always_draft=True))
orig = P.PredictorCache.run; calls = [0]
def run(self, *a):
    calls[0] += 1; return orig(self, *a)
P.PredictorCache.run = run
cut = []
orig_learn = PD.PredictorDrafter._learn
def learn(self, fb):
    orig_learn(self, fb); cut.append(self.cutoff)
PD.PredictorDrafter._learn = learn
for s in (0.0, 0.3, 0.0, 0.3):
    PD.CUTOFF_SMOOTHING = s; calls[0] = 0; cut.clear(); t = time.perf_counter()
    st = [eng.generate(m, max_new_tokens=64).stats for m in msgs]
    steps = sum(x.forwards for x in st); cut.sort()
    print(f"smoothing {s}: predictor runs/step {calls[0]/steps:.2f} tpf {sum(x.new_tokens for x in st)/sum(x.forwards+1 for x in st):.2f} tok/s {sum(x.new_tokens for x in st)/(time.perf_counter()-t):.1f} cutoff p10/50/90 {[round(math.exp(cut[int(q*len(cut))]),3) for q in (0.1,0.5,0.9)]}", flush=True)
