"""The thread count: swept, cached per model/precision/device, applied at load unless the user chose."""

from __future__ import annotations

import json

import pytest
import torch

from lopa import Engine
from lopa.models.runner import Runner
from lopa.models.threads import apply_threads, candidates, save_threads, sweep_threads, threads_path


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
