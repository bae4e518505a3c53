#!/usr/bin/env bash
# Issue 39, run from the repository root with nothing else running (2026-12-06, the 2-core Xeon VM).
set -euo pipefail
out=docs/bench/replicas
ray stop --force >/dev/null 2>&1 || true
# 1. The throughput curve (curve.log): two Ray Serve replicas of one thread each (`lopa serve --replicas 2 --threads 1`)
#    against one single-process server of one thread (`lopa serve --threads 1`, no Ray), 1, 4 and 8 streaming clients,
#    interleaved. This command also had a 16-client level and a soak; an outer `timeout 1500` ended it during the
#    16-client level (32 requests per round at 1 client took ~3 min a round), so only the levels it printed are kept.
#    lopa bench-serve --modes one-thread,replicas --concurrency 1,4,8,16 --rounds 2 --requests 32 --max-tokens 64 \
#      --soak-mode replicas --load-seconds 60 --load-clients 16 --retries 2 --kill-replica-at 30 --long-prompt 0 --out "$out"
# 2. 16 clients, the two servers interleaved over rounds, with the CPU seconds of every process group per round, then a
#    60 s soak of the replicas with one replica SIGKILLed 30 s in (results.json, replicas.log).
python "$out/replicas.py" "$out" 3 60 2>&1 | grep -v "^\s*$" | grep -v "^\[\|INFO\|WARN\|Token auth" | tee "$out/replicas.log"
