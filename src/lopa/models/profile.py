"""Measure what a verification forward costs on this machine, and cache it per model, dtype and device.

The dynamic window controller reads this profile: on a CPU a 2-token forward can cost as
much as an 8-token one, on a GPU 64 tokens cost about what 1 does, and the best tree
size follows from that curve, not from a guess.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

from .catalog import cache_root
from .runner import Runner

TREE_SIZES = (1, 2, 4, 8, 16, 32, 64)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def forward_latency(runner: Runner, tokens: int, prefix: int, reps: int) -> float:
    """Median seconds of one forward of `tokens` chain tokens after `prefix` committed ones."""
    runner.reset(prefix + tokens + 1)
    runner.prefill(torch.randint(0, 1000, (prefix,)))
    ids = torch.randint(0, 1000, (tokens,))
    causal = torch.ones(tokens, tokens, dtype=torch.bool).tril_()
    depths = torch.arange(tokens)
    times = []
    for _ in range(reps + 1):  # the first run warms caches and is dropped
        _sync(runner.device)
        start = time.perf_counter()
        runner.forward(ids, depths, causal)
        _sync(runner.device)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def profile_path(fingerprint: str, runner: Runner) -> Path:
    threads = torch.get_num_threads()
    name = f"{fingerprint}-{str(runner.dtype).removeprefix('torch.')}-{runner.device.type}-t{threads}.json"
    return cache_root() / "profiles" / name


def measure_costs(runner: Runner, sizes=TREE_SIZES, prefix: int = 128, reps: int = 3) -> dict[int, float]:
    return {t: forward_latency(runner, t, prefix, reps) for t in sizes}


def load_or_measure_costs(runner: Runner, fingerprint: str) -> dict[int, float]:
    """The cached latency curve for this model/dtype/device/threads, measured once if missing."""
    path = profile_path(fingerprint, runner)
    if path.exists():
        data = json.loads(path.read_text())
        return {int(k): v for k, v in data["latency_s"].items()}
    costs = measure_costs(runner)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"latency_s": costs, "prefix": 128}, indent=1))
    return costs
