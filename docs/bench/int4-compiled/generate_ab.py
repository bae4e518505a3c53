"""Greedy `ar` generation (64 tokens, one prompt) on an eager int4 engine and a compiled one (no predictor, buckets 1-2
built by warm_up), alternating, 3 rounds; counts the calls that went through the compiled graphs, under dynamo's
error_on_recompile (issue 37). Usage: OMP_NUM_THREADS=2 python docs/bench/int4-compiled/generate_ab.py"""
import time, torch
torch.set_num_threads(2)
from lopa import DraftConfig, Engine
eager = Engine.from_pretrained(dtype="int4", profile=False)
compiled = Engine(eager.loaded, DraftConfig(node_budget=1), compile=True, predictor=False)
t = time.time(); compiled.warm_up(); print(f"warm_up {time.time()-t:.0f} s", flush=True)
calls = {"graph": 0}
inner = compiled.runner.compiled
def counting(**kw):
    calls["graph"] += 1
    return inner(**kw)
compiled.runner.compiled = counting
prompt = "Write a short story about a lighthouse keeper who finds a message in a bottle."
torch._dynamo.utils.counters.clear()
with torch._dynamo.config.patch(error_on_recompile=True):
    for rep in range(3):
        for name, e in (("eager", eager), ("compiled", compiled)):
            s = time.perf_counter(); e.generate(prompt, max_new_tokens=64, method="ar"); d = time.perf_counter() - s
            print(name, f"{64 / d:.1f} tok/s", "graph calls", calls["graph"], flush=True)
print(dict(torch._dynamo.utils.counters["stats"]), dict(torch._dynamo.utils.counters["graph_break"]))
