"""Per-prompt tokens/s ratios from a `lopa bench` results.json (default: spec-bench/results.json beside this script):
lopa over ar and over lopa-ngram when the run has it (medians), and lopa over ar per category (medians).

    python docs/bench/predictor-v3/spec_bench_ratios.py [RESULTS_JSON]
"""

import collections
import json
import statistics
import sys
from pathlib import Path

default = Path(__file__).parent / "spec-bench" / "results.json"
results = json.loads(Path(sys.argv[1] if len(sys.argv) > 1 else default).read_text())
by_category, vs_ngram, vs_ar = collections.defaultdict(list), [], []
for prompt in results["prompts"]:
    rate = {method: run["tokens_per_s"] for method, run in prompt["runs"].items()}
    vs_ar.append(rate["lopa"] / rate["ar"])
    if "lopa-ngram" in rate:
        vs_ngram.append(rate["lopa"] / rate["lopa-ngram"])
    by_category[prompt["category"]].append(rate["lopa"] / rate["ar"])
print("median lopa/ar (tokens/s, per prompt)", round(statistics.median(vs_ar), 3))
if vs_ngram:
    print("median lopa/lopa-ngram (tokens/s, per prompt)", round(statistics.median(vs_ngram), 3))
for category, ratios in by_category.items():
    print(f"{category:15s} lopa/ar median {statistics.median(ratios):.3f}  ({len(ratios)} prompts)")
