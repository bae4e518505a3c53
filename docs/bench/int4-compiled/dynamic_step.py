"""The compiled int4 one-token step on the graphs generation uses (warm_up: dynamic KV length), against eager, and a
profile of the compiled call (issue 37: why a compiled forward faster than eager in ab.py did not make generation
faster). Usage: OMP_NUM_THREADS=2 python docs/bench/int4-compiled/dynamic_step.py"""
import statistics, time, torch
torch.set_num_threads(2)
from lopa import DraftConfig, Engine
eager = Engine.from_pretrained(dtype="int4", profile=False)
compiled = Engine(eager.loaded, DraftConfig(node_budget=1), compile=True, predictor=False)
t = time.time(); compiled.warm_up(); print(f"warm_up {time.time()-t:.0f} s", flush=True)
prefix = torch.randint(100, 20000, (128,), generator=torch.Generator().manual_seed(0))
one = (torch.tensor([5]), torch.zeros(1, dtype=torch.long), torch.ones(1, 1, dtype=torch.bool))
runners = {"eager": eager.runner, "compiled": compiled.runner}
for r in runners.values():
    r.prefill(0, prefix)
times = {k: [] for k in runners}
for rep in range(33):
    for name, r in runners.items():
        s = time.perf_counter(); r.verify([one]); e = time.perf_counter() - s
        if rep >= 3: times[name].append(e * 1e3)
for k, v in times.items():
    print(f"{k}: verify 1 token after 128: median {statistics.median(v):.1f} ms", flush=True)
# the compiled call split: wrapper (lookup, guards) vs graph
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU]) as prof:
    for _ in range(10):
        compiled.runner.verify([one])
print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25))
