"""Measure what a verification forward costs on this machine, and cache it per model, precision and device.

The cost model (decode/cost.py) reads this profile: a latency surface over rows (sequences in one
batched forward) x tree tokens per row. On a CPU a 2-token forward can cost as much as an 8-token one
but 16 rows of 8 cost far more than one; on a GPU 64 tokens cost about what 1 does. The best tree size
follows from that surface, not from a guess. It is measured once per model, precision, device and
thread count (Engine.from_pretrained does it when the cache lacks it: the cold-start cost the README
states); `lopa profile` writes the same cache file, plus the prefix-length curve and the machine's
memory floor (weights' bytes over the measured copy bandwidth: no 1-token forward can beat it).
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
from .int4 import INT4, kernel_name
from .runner import Runner

TREE_SIZES = (1, 2, 4, 8, 16, 32, 64)
SURFACE_ROWS = (1, 2, 4, 8, 16)  # batch rows the surface is measured at; tokens per row up to 64 / rows (>= 4)
PREFIXES = (128, 512, 1024)
COST_PREFIX = 128  # the prefix length of the cached latency curve


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def forward_latency(runner: Runner, tokens: int, prefix: int, reps: int, rows: int = 1) -> float:
    """Median seconds of one forward of `rows` chains of `tokens` tokens, each after `prefix` committed ones
    (the runner needs `rows` slots)."""
    runner.reserve(prefix + tokens + 1)
    for slot in range(rows):
        runner.prefill(slot, some_ids(runner, prefix), 0)
    trees = [chain(runner, tokens)] * rows
    times = []
    for _ in range(reps + 1):  # the first run warms caches (and compiles) and is dropped
        _sync(runner.device)
        start = time.perf_counter()
        runner.verify(trees)
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
    """'int8' or 'int4-<its kernel>' for a quantized model, else its dtype name (+ '-fast' with lopa's kernels,
    + '-compiled'): profiles of these must not mix."""
    name = getattr(runner.model, "lopa_precision", None) or str(runner.dtype).removeprefix("torch.")
    if name == INT4:
        name += "-" + kernel_name(runner.model)
    fast = "-fast" if has_fast_kernels(runner.model) else ""
    return name + fast + ("-compiled" if runner.compiled is not None else "")


def profile_path(fingerprint: str, runner: Runner) -> Path:
    threads = torch.get_num_threads()
    name = f"{fingerprint}-{precision(runner)}-{runner.device.type}-t{threads}.json"
    return cache_root() / "profiles" / name


Surface = dict[int, dict[int, float]]  # rows -> tokens per row -> seconds


def surface_cells(max_rows: int, sizes=TREE_SIZES) -> list[tuple[int, int]]:
    """(rows, tokens per row) to measure: rows up to max_rows, tokens up to 64 / rows but at least 4."""
    rows = [r for r in SURFACE_ROWS if r <= max_rows]
    return [(r, t) for r in rows for t in sizes if r == 1 or t <= max(4, 64 // r)]


def measure_surface(runner: Runner, cells: list[tuple[int, int]], reps: int = 3) -> Surface:
    """Seconds of forwards of (rows, tokens per row) `cells` after COST_PREFIX tokens, on a runner of as many slots."""
    wide = runner.sibling(max(r for r, _ in cells), COST_PREFIX + max(t for _, t in cells) + 1)
    surface: Surface = {}
    for r, t in cells:
        surface.setdefault(r, {})[t] = forward_latency(wide, t, COST_PREFIX, reps, rows=r)
    return surface


def load_or_measure_surface(runner: Runner, fingerprint: str, max_rows: int = 1, sizes=TREE_SIZES) -> Surface:
    """The cached latency surface for this model/precision/device/threads; cells it lacks are measured and added."""
    path = profile_path(fingerprint, runner)
    data = json.loads(path.read_text()) if path.exists() else {"prefix": COST_PREFIX}
    surface: Surface = {
        int(r): {int(t): s for t, s in row.items()} for r, row in data.get("latency_surface_s", {}).items()
    }
    surface.setdefault(1, {}).update({int(t): s for t, s in data.get("latency_s", {}).items()})
    missing = [(r, t) for r, t in surface_cells(max_rows, sizes) if t not in surface.get(r, {})]
    if missing:
        for r, row in measure_surface(runner, missing).items():
            surface.setdefault(r, {}).update(row)
        table = {str(r): {str(t): s for t, s in sorted(row.items())} for r, row in sorted(surface.items())}
        save_profile(path, {**data, "latency_s": table["1"], "latency_surface_s": table})
    return surface


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


def full_profile(runner: Runner, sizes=TREE_SIZES, prefixes=PREFIXES, reps: int = 3, max_rows: int = 16) -> dict:
    """Latency vs tokens in the forward (at COST_PREFIX), vs rows x tokens, vs prefix (1 token), and the memory floor."""
    surface = measure_surface(runner, surface_cells(max_rows, sizes), reps)
    costs = surface[1]
    limit = runner.max_positions - max(sizes) - 1
    by_prefix = {p: forward_latency(runner, 1, p, reps) for p in prefixes if p <= limit}
    nbytes = weight_bytes(runner.model)
    bandwidth = copy_bandwidth(runner.device)
    floor = nbytes / bandwidth
    data = {
        "latency_s": costs,
        "latency_surface_s": surface,
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
