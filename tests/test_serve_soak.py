"""A 60-second soak of `lopa serve` with 16 clients: streaming, not streaming, and leaving mid-answer."""

from __future__ import annotations

import asyncio
import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")  # the server inherits it: never oversubscribe the shared CPU

from lopa.bench.serve import CLIENT_KINDS, ServerProcess, load_run, run_level  # noqa: E402

from .test_serve import PROMPTS  # noqa: E402


@pytest.mark.slow
def test_a_minute_of_mixed_clients_fails_nothing_leaks_no_slot_and_keeps_memory_flat():
    with ServerProcess([], None, max_batch=8, timeout=180.0) as server:
        asyncio.run(run_level(server.url, PROMPTS, 1, 1, 8))  # warm-up: first-use profiling, allocations
        soak = asyncio.run(load_run(server.url, PROMPTS, 16, 60.0, 32))
    print(soak)
    assert soak["failed"] == 0, soak["errors"]
    assert all(soak["requests"][kind] >= 3 for kind in CLIENT_KINDS), soak["requests"]
    assert soak["running_after"] == 0, "a request still holds a slot after every client is gone"
    assert soak["rss_growth_second_half_pct"] < 5.0, soak["rss_mb"]
