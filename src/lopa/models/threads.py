"""Run torch at the thread count measured fastest for this model, precision and device on this machine.

torch starts with one thread per physical core, which is not always the fastest decoding
step: on a shared or hyperthreaded machine fewer threads can win, and a kernel that
parallelises badly makes extra threads pure overhead. `lopa profile` times a 1-token and
an 8-token forward at each candidate count and caches the fastest next to the latency
profile; loading an engine then applies it, unless the user chose (an explicit `threads`,
or OMP_NUM_THREADS in the environment).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import torch

from .catalog import cache_root
from .profile import forward_latency, precision, save_profile
from .runner import Runner

SWEEP_TOKENS = (1, 8)  # a plain step and a typical tree
T = TypeVar("T")


def candidates(cpus: int | None = None) -> list[int]:
    """Every count up to 8 cores, then powers of two and the core count itself."""
    cpus = cpus or os.cpu_count() or 1
    return sorted({n for n in range(1, cpus + 1) if n <= 8 or n & (n - 1) == 0} | {cpus})


def threads_path(fingerprint: str, runner: Runner) -> Path:
    return cache_root() / "profiles" / f"{fingerprint}-{precision(runner)}-{runner.device.type}-threads.json"


def sweep_threads(runner: Runner, counts: list[int] | None = None, prefix: int = 128, reps: int = 5) -> dict:
    """{"latency_s": {n: {tokens: s}}, "best": n}: the count with the least summed 1- and 8-token latency.
    The thread count in force before the sweep is restored."""
    before = torch.get_num_threads()
    table: dict[int, dict[int, float]] = {}
    try:
        for n in counts or candidates():
            torch.set_num_threads(n)
            table[n] = {t: forward_latency(runner, t, prefix, reps) for t in SWEEP_TOKENS}
    finally:
        torch.set_num_threads(before)
    best = min(table, key=lambda n: sum(table[n].values()))
    return {"latency_s": table, "best": best, "cpus": os.cpu_count()}


def save_threads(fingerprint: str, runner: Runner, sweep: dict) -> None:
    save_profile(threads_path(fingerprint, runner), sweep)


def apply_threads(fingerprint: str, runner: Runner, requested: int | None = None) -> str:
    """Set torch's thread count: `requested`, else OMP_NUM_THREADS's (torch already applied it), else the
    cached sweep's best, else torch's default. Returns where the count came from (for `lopa info`)."""
    if requested is not None:
        if requested < 1:
            raise ValueError(f"threads must be >= 1, got {requested}")
        torch.set_num_threads(requested)
        return "requested"
    if os.environ.get("OMP_NUM_THREADS"):
        return "OMP_NUM_THREADS"
    path = threads_path(fingerprint, runner)
    if runner.device.type != "cpu" or not path.exists():
        return "torch default"
    try:
        best = int(json.loads(path.read_text())["best"])
    except (ValueError, KeyError, TypeError):
        return "torch default (unreadable thread profile)"
    torch.set_num_threads(min(best, os.cpu_count() or best))
    return f"measured ({path.name})"


def in_passing_thread(work: Callable[[], T]) -> T:
    """`work()` run in a thread that ends with it, leaving no OpenMP thread pool behind.

    torch's OpenMP (libgomp) keeps a pool of worker threads for every thread that ran a parallel
    region, and once the process holds more OpenMP threads than cores it stops spin-waiting: each
    parallel region then wakes its workers through the kernel. A server that loaded its model on
    the main thread and decoded on the scheduler's thread ran every step ~1.6x slower for it (2
    cores, docs/bench/one-omp-team). Loading here leaves the decoding thread the only pool."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="lopa-load") as pool:  # its exit joins the thread
        return pool.submit(work).result()
