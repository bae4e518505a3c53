"""`lopa bench-batch`: offline batch inference, engine.generate([...]) of N prompts against N sequential
generate() calls on the same engine, interleaved; outputs must be identical."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

from ..cli_options import load_engine
from .data import load_questions, spread


def run_batch_bench(engine, prompts: list[str], max_new_tokens: int, repeats: int, max_batch: int) -> dict:
    """Tokens/s of sequential and batched decoding of `prompts` (greedy, lopa), `repeats` rounds interleaved."""
    sequential, batched = [], []
    engine.generate(prompts[0], max_new_tokens=4)  # warm-up: the cost model, allocations
    for _ in range(repeats):
        start = time.perf_counter()
        alone = [engine.generate(p, max_new_tokens=max_new_tokens) for p in prompts]
        sequential.append((time.perf_counter() - start, sum(len(r.token_ids) for r in alone)))
        start = time.perf_counter()
        together = engine.generate_many(prompts, max_new_tokens=max_new_tokens, max_batch=max_batch, progress=False)
        batched.append((time.perf_counter() - start, sum(len(r.token_ids) for r in together)))
        identical = [a.token_ids for a in alone] == [b.token_ids for b in together]
        if not identical:
            raise AssertionError("batched outputs differ from sequential ones: a bug, please report it")
    seq_tps = statistics.median(n / s for s, n in sequential)
    batch_tps = statistics.median(n / s for s, n in batched)
    return {
        "model": engine.loaded.name,
        "threads": torch.get_num_threads(),
        "prompts": len(prompts),
        "max_new_tokens": max_new_tokens,
        "max_batch": max_batch,
        "repeats": repeats,
        "identical": True,
        "sequential": [{"wall_s": s, "tokens": n} for s, n in sequential],
        "batched": [{"wall_s": s, "tokens": n} for s, n in batched],
        "sequential_tokens_per_s": seq_tps,
        "batched_tokens_per_s": batch_tps,
        "speedup": batch_tps / seq_tps,
    }


def run(args) -> int:
    questions = spread(load_questions(args.data), args.prompts)
    engine = load_engine(args)
    results = run_batch_bench(
        engine, [q.turns[0] for q in questions], args.max_new_tokens, args.repeats, args.max_batch
    )
    print(
        f"{results['prompts']} prompts, {results['max_new_tokens']} tokens: sequential "
        f"{results['sequential_tokens_per_s']:.1f} tok/s, batched {results['batched_tokens_per_s']:.1f} tok/s "
        f"({results['speedup']:.2f}x), outputs identical"
    )
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(results, indent=1))
    return 0
