"""Where lookahead stands on a CPU without AVX-512 (issue 37): plain steps (`ar`), lookahead with real defaults (the
gate decides per step whether to draft) and lookahead drafting at every step, SmolLM2-135M fp32, 2 threads, greedy,
4 prompts x 96 new tokens, 2 rounds with the methods interleaved; medians of tokens/s, tokens per forward, drafting's
share of the wall time, ms per verification forward and tree nodes per forward, and lopa == ar per prompt.
Run from the repository root: OMP_NUM_THREADS=2 python docs/bench/avx2-step/gate.py
"""

import statistics
import time

import torch

from lopa import Engine
from lopa.config import DraftConfig

torch.set_num_threads(2)
PROMPTS = [
    "Write a short story about a robot who learns to paint.",
    "Explain how a hash table works, with a Python example.",
    "Summarise the causes of the French Revolution in five bullet points.",
    "Translate into French: The weather is lovely today and we are going to the beach.",
]

gated = Engine.from_pretrained()
always = Engine.from_pretrained(draft=DraftConfig(always_draft=True))
METHODS = {"ar": (gated, "ar"), "lopa": (gated, None), "lopa-always-draft": (always, None)}
figures: dict[str, list[tuple[float, ...]]] = {name: [] for name in METHODS}
tokens: dict[tuple[str, int], list[int]] = {}
for _ in range(2):
    for name, (engine, method) in METHODS.items():
        for i, prompt in enumerate(PROMPTS):
            start = time.perf_counter()
            out = engine.generate(prompt, max_new_tokens=96, **({"method": method} if method else {}))
            seconds, stats, steps = time.perf_counter() - start, out.stats, max(1, out.stats.forwards - 1)
            figures[name].append(
                (
                    len(out.token_ids) / seconds,
                    stats.tokens_per_forward,
                    stats.draft_s / stats.wall_s,
                    stats.verify_s / steps * 1e3,
                    stats.tree_nodes / steps,
                )
            )
            tokens[(name, i)] = out.token_ids
for name, rows in figures.items():
    rate, tpf, share, ms, nodes = (statistics.median(column) for column in zip(*rows))
    same = sum(tokens[(name, i)] == tokens[("ar", i)] for i in range(len(PROMPTS)))
    print(
        f"{name}: {rate:.1f} tok/s, {tpf:.2f} tokens/forward, drafting {share:.2f} of the time, "
        f"{ms:.1f} ms/verification, {nodes:.1f} nodes/forward, same tokens as ar {same}/{len(PROMPTS)}"
    )
