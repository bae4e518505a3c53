"""bf16 or int4 on the CPU: greedy ar against lopa on 13 Spec-Bench dev prompts (one per category) x 64 new tokens;
at each prompt's first divergence, the gap between the log-probabilities of the reference's (ar's) two likeliest
tokens. It replaced docs/bench/bf16-cpu/ties.py (the same, bf16 only), whose runs made docs/bench/bf16-cpu/ties.log.

    OMP_NUM_THREADS=2 python docs/bench/exact-low-precision/ties.py {bfloat16,int4}
"""

import sys

import torch

import lopa
from lopa.api import Engine
from lopa.bench.data import load_questions, spread

questions = spread(load_questions("../shared/data/spec_bench_dev.jsonl"), 13)
prompts = [[{"role": "user", "content": q.turns[0]}] for q in questions]
dtype = getattr(torch, sys.argv[1]) if sys.argv[1] != "int4" else "int4"
engine = Engine.from_pretrained(dtype=dtype)
gaps = []
for prompt in prompts:
    reference = engine.generate(prompt, max_new_tokens=64, method="ar", logprobs=2)
    lookahead = engine.generate(prompt, max_new_tokens=64, method="lopa").token_ids
    first = next((i for i, (a, b) in enumerate(zip(reference.token_ids, lookahead)) if a != b), None)
    if first is not None:
        top = reference.logprobs[first].top
        gaps.append((first, round(top[0][1] - top[1][1], 4)))
print(
    sys.argv[1],
    lopa.__file__,
    f"lopa != ar on {len(gaps)}/{len(prompts)} prompts; (first divergence, top-2 gap there):",
    gaps,
)
