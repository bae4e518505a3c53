"""Issue 39: two Ray Serve replicas of one thread against one single-process server of one thread, at 16 streaming
clients, interleaved over rounds, with the CPU seconds every process group spent in each round; then a soak of the
replicas in which one replica process is SIGKILLed halfway, the clients resending a 5xx or a lost connection that
came before any text (as the OpenAI SDK does, twice at most).

Usage (repository root, nothing else running): python docs/bench/replicas/replicas.py OUT_DIR [ROUNDS] [SOAK_S]
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from lopa.bench.serve import MODES, ServerProcess, load_prompts, load_run, run_level

CLIENTS, REQUESTS, MAX_TOKENS = 16, 32, 64
GROUPS = {  # a process's group: the first of these found in its command line
    "replica": b"ServeReplica:lopa",
    "ray proxy": b"ProxyActor",
    "ray controller": b"ServeController",
    "lopa serve (driver or server)": b"lopa\x00serve",
    "ray system": b"ray",
}
TICK = os.sysconf("SC_CLK_TCK")


def cpu_by_group() -> dict[str, float]:
    """CPU seconds (user + system) so far of every live process, summed by GROUPS (the rest: 'other')."""
    totals: dict[str, float] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            command = (proc / "cmdline").read_bytes()
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        group = next((g for g, mark in GROUPS.items() if mark in command), "other")
        if int(proc.name) == os.getpid():
            group = "benchmark clients"
        totals[group] = totals.get(group, 0.0) + (int(fields[11]) + int(fields[12])) / TICK
    return totals


def timed_level(url: str, prompts: list[str], first: int) -> dict:
    before = cpu_by_group()
    level = asyncio.run(run_level(url, prompts, CLIENTS, REQUESTS, MAX_TOKENS, first))
    after = cpu_by_group()
    cpu = {g: round(after.get(g, 0.0) - before.get(g, 0.0), 1) for g in after}
    return level | {"cpu_s": {g: s for g, s in sorted(cpu.items(), key=lambda kv: -kv[1]) if s > 0}}


def main(out: Path, rounds: int = 2, soak_s: float = 60.0) -> None:
    prompts = load_prompts("../shared/data/spec_bench_dev.jsonl")
    results: dict = {"clients": CLIENTS, "requests": REQUESTS, "max_tokens": MAX_TOKENS, "rounds": {}}
    with ServerProcess(MODES["one-thread"], None, CLIENTS, 300.0) as single, ServerProcess(
        MODES["replicas"], None, CLIENTS, 300.0
    ) as replicas:
        servers = {"one-thread": single, "replicas": replicas}
        for server in servers.values():
            asyncio.run(run_level(server.url, prompts, 2, 2, 8))  # warm-up
        for r in range(rounds):
            for mode, server in servers.items():
                level = timed_level(server.url, prompts, r * REQUESTS)
                results["rounds"].setdefault(mode, []).append(level)
                print(
                    f"round {r} {mode:10s} {level['tokens_per_s']:6.1f} tok/s  failed {level['failed']}  "
                    f"cpu s {level['cpu_s']}  wall {level['wall_s']:.1f}",
                    flush=True,
                )
        soak = asyncio.run(load_run(replicas.url, prompts, CLIENTS, soak_s, MAX_TOKENS, retries=2, kill_at=soak_s / 2))
        results["soak"] = soak
        print(f"soak: {json.dumps({k: v for k, v in soak.items() if k != 'rss_mb'})}", flush=True)
    ratios = [
        rep["tokens_per_s"] / one["tokens_per_s"]
        for one, rep in zip(results["rounds"]["one-thread"], results["rounds"]["replicas"])
    ]
    results["ratio_per_round"] = ratios
    print(f"replicas / one-thread per round: {[round(x, 2) for x in ratios]}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]), *(int(a) for a in sys.argv[2:3]), *(float(a) for a in sys.argv[3:4]))
