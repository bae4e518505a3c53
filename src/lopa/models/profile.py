"""Measure what a verification forward costs on this machine, and cache it per model, precision and device.

The dynamic window controller reads this profile: on a CPU a 2-token forward can cost as
much as an 8-token one, on a GPU 64 tokens cost about what 1 does, and the best tree
size follows from that curve, not from a guess. `lopa profile` writes the same cache
file, plus the prefix-length curve and the machine's memory floor (weights' bytes over
the measured copy bandwidth: no 1-token forward can beat it).
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch
from torch import nn

from .catalog import cache_root
from .fastkernels import has_fast_kernels
from .runner import Runner

TREE_SIZES = (1, 2, 4, 8, 16, 32, 64)
PREFIXES = (128, 512, 1024)
COST_PREFIX = 128  # the prefix length of the cached latency curve


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def forward_latency(runner: Runner, tokens: int, prefix: int, reps: int) -> float:
    """Median seconds of one forward of `tokens` chain tokens after `prefix` committed ones."""
    runner.reset(prefix + tokens + 1)
    runner.prefill(some_ids(runner, prefix))
    inputs = chain(runner, tokens)
    times = []
    for _ in range(reps + 1):  # the first run warms caches (and compiles) and is dropped
        _sync(runner.device)
        start = time.perf_counter()
        runner.forward(*inputs)
        _sync(runner.device)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:] or times)


def some_ids(runner: Runner, count: int) -> torch.Tensor:
    """`count` random token ids the model has (timing does not depend on which)."""
    return torch.randint(0, min(1000, runner.config.vocab_size), (count,))


def chain(runner: Runner, tokens: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Runner.forward's inputs for a chain of `tokens` random tokens (ids, depths, causal ancestors)."""
    return some_ids(runner, tokens), torch.arange(tokens), torch.ones(tokens, tokens, dtype=torch.bool).tril_()


def precision(runner: Runner) -> str:
    """'int8' for a quantized model, else its dtype name (+ '-fast' with lopa's kernels, + '-compiled'):
    profiles of these must not mix."""
    name = getattr(runner.model, "lopa_precision", None) or str(runner.dtype).removeprefix("torch.")
    fast = "-fast" if has_fast_kernels(runner.model) else ""
    return name + fast + ("-compiled" if runner.compiled is not None else "")


def profile_path(fingerprint: str, runner: Runner) -> Path:
    threads = torch.get_num_threads()
    name = f"{fingerprint}-{precision(runner)}-{runner.device.type}-t{threads}.json"
    return cache_root() / "profiles" / name


def measure_costs(runner: Runner, sizes=TREE_SIZES, prefix: int = COST_PREFIX, reps: int = 3) -> dict[int, float]:
    return {t: forward_latency(runner, t, prefix, reps) for t in sizes}


def load_or_measure_costs(runner: Runner, fingerprint: str, sizes=TREE_SIZES) -> dict[int, float]:
    """The cached latency curve for this model/precision/device/threads; sizes it lacks are measured and added."""
    path = profile_path(fingerprint, runner)
    data = json.loads(path.read_text()) if path.exists() else {"prefix": COST_PREFIX}
    costs = {int(k): v for k, v in data.get("latency_s", {}).items()}
    missing = [t for t in sizes if t not in costs]
    if missing:
        costs.update(measure_costs(runner, missing))
        save_profile(path, {**data, "latency_s": dict(sorted(costs.items()))})
    return costs


def save_profile(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


def weight_bytes(model: nn.Module) -> int:
    """Bytes of distinct weight storage a 1-token forward reads (tied matrices once, packed int8 at 1 byte)."""
    seen: dict[int, int] = {}
    for value in model.state_dict(keep_vars=True).values():
        for t in value if isinstance(value, tuple) else (value,):
            if isinstance(t, torch.Tensor):
                seen[t.data_ptr()] = t.numel() * t.element_size()
    return sum(seen.values())


def copy_bandwidth(device: torch.device, mbytes: int = 256, reps: int = 5) -> float:
    """Bytes per second moved (read + write) by copying a tensor far larger than the caches."""
    src = torch.ones(mbytes * 2**20 // 4, device=device)
    dst = torch.empty_like(src)
    times = []
    for _ in range(reps + 1):
        _sync(device)
        start = time.perf_counter()
        dst.copy_(src)
        _sync(device)
        times.append(time.perf_counter() - start)
    return 2 * src.numel() * 4 / statistics.median(times[1:])


def full_profile(runner: Runner, sizes=TREE_SIZES, prefixes=PREFIXES, reps: int = 3) -> dict:
    """Latency vs tokens in the forward (at COST_PREFIX) and vs prefix (1 token), and the memory floor."""
    costs = measure_costs(runner, sizes, COST_PREFIX, reps)
    limit = runner.max_positions - max(sizes) - 1
    by_prefix = {p: forward_latency(runner, 1, p, reps) for p in prefixes if p <= limit}
    nbytes = weight_bytes(runner.model)
    bandwidth = copy_bandwidth(runner.device)
    floor = nbytes / bandwidth
    data = {
        "latency_s": costs,
        "prefix": COST_PREFIX,
        "latency_by_prefix_s": by_prefix,
        "weight_bytes": nbytes,
        "copy_bandwidth_bytes_per_s": bandwidth,
        "memory_floor_s": floor,
        "threads": torch.get_num_threads(),
        "precision": precision(runner),
        "device": str(runner.device),
    }
    if 1 in costs:
        data["one_token_over_floor"] = costs[1] / floor
        data["tree_over_one_token"] = {t: c / costs[1] for t, c in costs.items()}
    return data
