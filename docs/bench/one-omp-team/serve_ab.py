"""One client, 8 Spec-Bench dev prompts (categories order) x 64 tokens, through `lopa serve` from two checkouts
(argument: their src directories, e.g. the commit before and this one), lookahead and plain, alternating."""
import asyncio
import os
import statistics
import sys

from lopa.bench.serve import ServerProcess, load_prompts, run_level

prompts = load_prompts("../shared/data/spec_bench_dev.jsonl", "categories")[:8]
figures: dict[str, list[float]] = {}
for _ in range(2):
    for src in sys.argv[1:]:
        os.environ["PYTHONPATH"] = src
        for mode, extra in (("lookahead", []), ("plain", ["--no-parallel"])):
            with ServerProcess(extra, None, 8, 300.0) as server:
                asyncio.run(run_level(server.url, prompts, 1, 1, 8))  # warm-up
                level = asyncio.run(run_level(server.url, prompts, 1, len(prompts), 64))
            figures.setdefault(f"{src} {mode}", []).append(level["tokens_per_s"])
            print(f"{src} {mode}: {level['tokens_per_s']:.1f} tokens/s", flush=True)
for key, values in figures.items():
    print(f"median {key}: {statistics.median(values):.1f} tokens/s")
