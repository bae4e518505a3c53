"""A batch step's per-row bookkeeping: 16 Spec-Bench dev prompts decoded 8 at a time (engine.generate([...])), 64 new
tokens, `lopa` then `ar`, two rounds each; per run the microseconds per row in SequenceDecoder.advance (acceptance,
drafter feedback) and Runner.commit (moving the kept KV rows down), and tokens/s. Run with PYTHONPATH at one
checkout or another (a git worktree of an older commit) to compare code versions:

    OMP_NUM_THREADS=2 PYTHONPATH=/path/to/checkout/src python docs/bench/batch-overhead/step_parts.py
"""

import time

import lopa.decode.loop as loop
import lopa.models.runner as runner_module
from lopa.api import Engine
from lopa.bench.data import load_questions, spread

questions = spread(load_questions("../shared/data/spec_bench_dev.jsonl"), 16)
prompts = [[{"role": "user", "content": q.turns[0]}] for q in questions]
engine = Engine.from_pretrained()
seconds: dict[str, float] = {}
calls: dict[str, int] = {}


def timed(name: str, owner, attribute: str) -> None:
    call = getattr(owner, attribute)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        result = call(*args, **kwargs)
        seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - start
        calls[name] = calls.get(name, 0) + 1
        return result

    setattr(owner, attribute, wrapper)


timed("advance", loop.SequenceDecoder, "advance")
timed("commit", runner_module.Runner, "commit")
for method in ("lopa", "ar"):
    engine.generate_many(prompts[:8], max_new_tokens=16, method=method, max_batch=8, progress=False)  # warm-up
    for _ in range(2):
        seconds.clear()
        calls.clear()
        start = time.perf_counter()
        results = engine.generate_many(prompts, max_new_tokens=64, method=method, max_batch=8, progress=False)
        rate = sum(r.stats.new_tokens for r in results) / (time.perf_counter() - start)
        parts = ", ".join(f"{name} {1e6 * seconds[name] / calls[name]:.0f} us/row" for name in ("advance", "commit"))
        print(f"{loop.__file__.split('/src/')[0]} {method}: {parts}, {rate:.1f} tokens/s", flush=True)
