"""The predictor's first forward at each row count against a second one (fresh process, before the warm-up existed:
run at dbcb357).

    OMP_NUM_THREADS=2 python docs/bench/warm-up/first_shape.py
"""
import time, torch
from lopa.api import Engine
from lopa.draft.predictor import PredictorCache, causal
eng = Engine.from_pretrained()
p = eng.predictor
def once(rows):
    c = PredictorCache(); f = p.fuse(torch.zeros(rows, 3 * 576))
    t = time.perf_counter(); c.run(p, f, torch.zeros(rows, dtype=torch.long), torch.arange(rows) + 1, causal(rows)); return 1000 * (time.perf_counter() - t)
with torch.no_grad():
    for rows in (1, 2, 3, 4, 5, 6, 7, 8, 20, 21):
        a = once(rows); b = once(rows); print(rows, "rows: first", round(a, 2), "ms, again", round(b, 2))
