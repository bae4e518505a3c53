"""The thread count: swept, cached per model/precision/device, applied at load unless the user chose."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from lopa import Engine
from lopa.models.runner import Runner
from lopa.models.threads import apply_threads, candidates, in_passing_thread, save_threads, sweep_threads, threads_path


@pytest.fixture
def keep_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_candidates_cover_small_machines_and_sample_large_ones() -> None:
    assert candidates(2) == [1, 2]
    assert candidates(8) == list(range(1, 9))
    assert candidates(24) == [1, 2, 3, 4, 5, 6, 7, 8, 16, 24]


def test_sweep_times_each_count_and_restores_the_old_one(engine: Engine, keep_threads) -> None:
    torch.set_num_threads(2)
    sweep = sweep_threads(Runner(engine.model), counts=[1, 2], prefix=16, reps=1)
    assert torch.get_num_threads() == 2
    assert set(sweep["latency_s"]) == {1, 2} and all(len(row) == 2 for row in sweep["latency_s"].values())
    assert sweep["best"] == min(sweep["latency_s"], key=lambda n: sum(sweep["latency_s"][n].values()))


def test_apply_threads_prefers_the_user_then_the_environment_then_the_cache(
    engine: Engine, tmp_path, monkeypatch, keep_threads
) -> None:
    monkeypatch.setenv("LOPA_CACHE", str(tmp_path))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    runner, fingerprint = Runner(engine.model), engine.loaded.fingerprint
    torch.set_num_threads(2)
    assert apply_threads(fingerprint, runner) == "torch default" and torch.get_num_threads() == 2
    save_threads(fingerprint, runner, {"latency_s": {}, "best": 1})
    assert apply_threads(fingerprint, runner).startswith("measured") and torch.get_num_threads() == 1
    assert apply_threads(fingerprint, runner, requested=2) == "requested" and torch.get_num_threads() == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert apply_threads(fingerprint, runner) == "OMP_NUM_THREADS" and torch.get_num_threads() == 2
    monkeypatch.delenv("OMP_NUM_THREADS")
    threads_path(fingerprint, runner).write_text("{not json")
    assert "unreadable" in apply_threads(fingerprint, runner) and torch.get_num_threads() == 2
    with pytest.raises(ValueError):
        apply_threads(fingerprint, runner, requested=0)
    json.loads(json.dumps(sweep_threads(runner, counts=[1], prefix=8, reps=1)))  # what the cache stores is JSON


OPENMP_POOLS = textwrap.dedent("""
    import os, time, torch
    from lopa.models.threads import in_passing_thread
    torch.set_num_threads(2)

    def threads(settle=2.0):  # exiting threads leave /proc/self/task a moment after they are joined
        deadline = time.monotonic() + settle
        while len(os.listdir("/proc/self/task")) > before and time.monotonic() < deadline:
            time.sleep(0.01)
        return len(os.listdir("/proc/self/task"))

    before = len(os.listdir("/proc/self/task"))
    total = in_passing_thread(lambda: torch.ones(10**7).sum().item())
    after_passing = threads()
    torch.ones(10**7).sum()
    print(total, before, after_passing, threads())
""")


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in Linux's /proc")
def test_a_passing_thread_leaves_no_openmp_pool_behind_where_the_main_thread_does() -> None:
    """What the server relies on to keep its scheduler's thread the process's only OpenMP team (libgomp stops
    spin-waiting once more OpenMP threads exist than cores). The main thread's own parallel region is the
    control: it keeps a worker thread, so the count can tell."""
    out = subprocess.run([sys.executable, "-c", OPENMP_POOLS], capture_output=True, text=True, check=True).stdout
    total, before, after_passing, after_main = (float(x) for x in out.split())
    assert total == 10**7
    assert after_passing == before and after_main > before


def test_a_passing_thread_returns_its_value_and_raises_its_error_in_the_caller() -> None:
    assert in_passing_thread(lambda: 42) == 42
    with pytest.raises(ZeroDivisionError):
        in_passing_thread(lambda: 1 / 0)
