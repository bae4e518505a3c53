"""Does the lookahead gate's choice of plain steps pay on this CPU? The gated default against drafting at every step,
SmolLM2-135M fp32, 2 threads, greedy, the project's own 22 prompts (tests/prompts.py) x 128 new tokens, the two
engines alternating per prompt (which goes first alternates too), 2 rounds; per-prompt ratio gated / always, its
median, each mode's median tok/s and TPF, and the share of the gated engine's steps that drafted.
Run from the repository root: OMP_NUM_THREADS=2 python docs/bench/avx2-step/gate_ab.py
"""

import statistics
import sys
import time
from pathlib import Path

import torch

from lopa import Engine
from lopa.config import DraftConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root, for tests/prompts.py
from tests.prompts import ALL  # noqa: E402

torch.set_num_threads(2)
engines = {"gated": Engine.from_pretrained(), "always": Engine.from_pretrained(draft=DraftConfig(always_draft=True))}
rates: dict[str, list[float]] = {name: [] for name in engines}
tpf: dict[str, list[float]] = {name: [] for name in engines}
drafted, steps, same = 0, 0, 0
for round_ in range(2):
    for i, prompt in enumerate(ALL):
        order = list(engines) if (i + round_) % 2 == 0 else list(engines)[::-1]
        tokens = {}
        for name in order:
            start = time.perf_counter()
            out = engines[name].generate(prompt.text, max_new_tokens=128)
            rates[name].append(len(out.token_ids) / (time.perf_counter() - start))
            tpf[name].append(out.stats.tokens_per_forward)
            tokens[name] = out.token_ids
            if name == "gated":
                sizes = out.stats.window.get("tree_sizes", {})
                steps += sum(sizes.values())
                drafted += sum(n for size, n in sizes.items() if int(size) > 1)
        same += tokens["gated"] == tokens["always"]
ratios = [g / a for g, a in zip(rates["gated"], rates["always"])]
for name in engines:
    print(f"{name}: {statistics.median(rates[name]):.1f} tok/s, TPF {statistics.median(tpf[name]):.2f} (medians)")
print(
    f"gated / always per prompt: median {statistics.median(ratios):.3f}, min {min(ratios):.3f}, max {max(ratios):.3f}"
)
print(
    f"gated engine: {drafted} of {steps} steps drafted ({drafted / max(steps, 1):.2f}); same tokens {same}/{len(ratios)}"
)
