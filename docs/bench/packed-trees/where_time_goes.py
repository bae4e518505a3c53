"""Where a batch's time goes: 16 Spec-Bench dev prompts, 8 at a time, 64 tokens, `ar` then `lopa`, twice. Per run:
wall seconds, the time in the step (decode/loop.py step) and in its parts (drafting, verification, acceptance,
commits), and over the steps with all 8 rows: tokens and tree nodes per step. The rest of the wall time is
prompt intake (prefill) and output.

    OMP_NUM_THREADS=2 python docs/bench/packed-trees/where_time_goes.py
"""

import statistics
import time
from collections import defaultdict

import lopa.api
import lopa.decode.loop as loop
import lopa.models.runner as runner_module
from lopa.api import Engine
from lopa.bench.data import load_questions, spread

questions = spread(load_questions("../shared/data/spec_bench_dev.jsonl"), 16)
prompts = [[{"role": "user", "content": q.turns[0]}] for q in questions]
engine = Engine.from_pretrained()
seconds: dict[str, float] = defaultdict(float)
full_steps: list[tuple[int, int]] = []  # (tokens, nodes) of steps with 8 rows


def timed(name: str, owner, attribute: str) -> None:
    call = getattr(owner, attribute)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        result = call(*args, **kwargs)
        seconds[name] += time.perf_counter() - start
        if name == "step" and len(args[1]) == 8:
            records = [r for r in result if not isinstance(r, Exception)]
            full_steps.append((sum(len(r.tokens) for r in records), sum(r.tree_size for r in records)))
        return result

    setattr(owner, attribute, wrapper)


timed("draft", loop.SequenceDecoder, "draft")
timed("accept", loop.SequenceDecoder, "advance")
timed("verify", runner_module.Runner, "verify")
timed("commit", runner_module.Runner, "commit")
timed("step", loop, "step")
lopa.api.step = loop.step
for method in ("ar", "lopa", "ar", "lopa"):
    seconds.clear()
    full_steps.clear()
    start = time.perf_counter()
    engine.generate_many(prompts, max_new_tokens=64, method=method, max_batch=8, progress=False)
    wall = time.perf_counter() - start
    print(method, f"wall {wall:.2f} s,", ", ".join(f"{k} {v:.2f}" for k, v in seconds.items()),
          f"| {len(full_steps)} full-batch steps: tokens/step {statistics.mean(t for t, _ in full_steps):.2f},",
          f"nodes/step {statistics.mean(n for _, n in full_steps):.2f}", flush=True)
