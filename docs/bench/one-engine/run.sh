#!/bin/bash
# Issue 12 measurements, run with nothing else on the machine.
set -e
cd /work/main
export OMP_NUM_THREADS=2
out=docs/bench/one-engine
python - > $out/cold-start.log 2>&1 <<'PY'
import json, time
from lopa import Engine
from lopa.models.profile import profile_path
start = time.perf_counter()
engine = Engine.from_pretrained(profile=False)
load = time.perf_counter() - start
path = profile_path(engine.loaded.fingerprint, engine.runner)
path.unlink(missing_ok=True)  # a cold cache
start = time.perf_counter(); engine.profile(); cold = time.perf_counter() - start
start = time.perf_counter(); engine.profile(); warm = time.perf_counter() - start
print(f"command: OMP_NUM_THREADS=2 python (docs/bench/one-engine/run.sh): Engine.from_pretrained(profile=False), then engine.profile() twice after deleting {path.name}")
print(f"load {load:.2f} s; profile on a cold cache {cold:.1f} s; from the cache {warm:.3f} s")
print("latency surface (rows -> tokens per row -> ms):")
print(json.dumps({r: {t: round(s * 1e3, 2) for t, s in row.items()} for r, row in engine.cost.surface.items()}, indent=1))
PY
cat $out/cold-start.log
lopa bench-serve --concurrency 1,4,8,16 --rounds 2 --max-tokens 64 --load-seconds 0 --long-prompt 0 --out $out/serve 2>&1 | tee $out/serve.log
lopa bench-batch --data ../shared/data/spec_bench_dev.jsonl --prompts 16 --max-new-tokens 128 --repeats 2 --out $out/batch 2>&1 | tee $out/batch.log
lopa bench --data ../shared/data/spec_bench_dev.jsonl --limit 3 --max-new-tokens 128 --methods hf,ar,lopa --out $out/spec-bench 2>&1 | tail -40 | tee $out/spec-bench.log
# After the correction classes were keyed by rows (commit "Cost model corrections per (rows, tokens per row)"),
# the batch and serve figures were taken again with the same two commands:
#   OMP_NUM_THREADS=2 lopa bench-batch --data ../shared/data/spec_bench_dev.jsonl --prompts 16 --max-new-tokens 128 --repeats 2 --out docs/bench/one-engine/batch
#   OMP_NUM_THREADS=2 lopa bench-serve --concurrency 1,4,8,16 --rounds 2 --max-tokens 64 --load-seconds 0 --long-prompt 0 --out docs/bench/one-engine/serve
# (spec-bench and cold-start decode single sequences, whose classes the change does not move).
