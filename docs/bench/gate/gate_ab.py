"""In-process A/B of the lookahead gate (decode/gate.py): Spec-Bench dev prompts (one per category in turn), 64 new
tokens, decoded `batch` at a time by engine.generate([...]) (batch 1: one generate() call per prompt), per round
`ar`, `lopa` (gated) and `lopa` with the gate held open (every step drafts, as before the gate), in turn, one engine;
greedy outputs of the three asserted equal. Prints each round's tokens/s and the gate's state for the batch size
(leader: lookahead?, its probe gap, lookahead's and plain's recent tokens/s), then the median ratios to `ar`.

    OMP_NUM_THREADS=2 python docs/bench/gate/gate_ab.py BATCH ROUNDS PROMPTS
"""

import statistics
import sys
import time

from lopa.api import Engine
from lopa.bench.data import load_questions, spread
from lopa.decode.gate import LookaheadGate

batch, rounds, count = (int(a) for a in sys.argv[1:4])
questions = spread(load_questions("../shared/data/spec_bench_dev.jsonl"), count)
prompts = [[{"role": "user", "content": q.turns[0]}] for q in questions]
engine = Engine.from_pretrained()
gated_lookahead, gated_observe = LookaheadGate.lookahead, LookaheadGate.observe


def run(method: str, gated: bool = True) -> tuple[float, list[list[int]]]:
    LookaheadGate.lookahead = gated_lookahead if gated else (lambda self, rows: True)
    LookaheadGate.observe = gated_observe if gated else (lambda self, *args: None)
    start = time.perf_counter()
    if batch == 1:
        results = [engine.generate(p, max_new_tokens=64, method=method) for p in prompts]
    else:
        results = engine.generate_many(prompts, max_new_tokens=64, method=method, max_batch=batch, progress=False)
    return sum(r.stats.new_tokens for r in results) / (time.perf_counter() - start), [r.token_ids for r in results]


run("ar"), run("lopa"), run("lopa", gated=False)  # warm-up (the gate's figures carry on, as in a server)
rates: dict[str, list[float]] = {"ar": [], "lopa": [], "lopa-ungated": []}
for _ in range(rounds):
    (ar, plain_ids), (gated, gated_ids), (ungated, ungated_ids) = run("ar"), run("lopa"), run("lopa", gated=False)
    assert plain_ids == gated_ids == ungated_ids, "greedy outputs differ"
    for name, rate in zip(rates, (ar, gated, ungated)):
        rates[name].append(rate)
    size = engine.cost.gate.sizes[batch]
    print({name: round(r[-1], 1) for name, r in rates.items()},
          f"gate at {batch}: lookahead leads {size.leader}, gap {size.gap}, "
          f"lookahead {size.rate(True):.1f} / plain {size.rate(False):.1f} tok/s", flush=True)
ar = statistics.median(rates["ar"])
print("batch", batch, "median / ar:", {name: round(statistics.median(r) / ar, 3) for name, r in rates.items()})
