"""Lossy int8 verification against lossless fp32 lookahead: tokens/s, tokens per forward, and how many answers
equal fp32 greedy decoding. Run from a checkout of commit 1d7cf50, the last with the mode (run.sh). Without the
predictor on both lookahead engines: with it the lossy mode fails at its first step (its int8 runner returns no
hidden layers for the predictor to read; the first run of this script, in run.log)."""

import json
import statistics
import sys

from lopa import DraftConfig, Engine

PROMPTS = [p["text"] for p in json.load(open("tests/data/prompts.json"))[:8]]
NEW_TOKENS, ROUNDS = 96, 2

engines = {
    "ar": Engine.from_pretrained(),
    "lopa": Engine.from_pretrained(predictor=False),
    "lopa-lossy-int8": Engine.from_pretrained(draft=DraftConfig(lossy_int8_verify=True), predictor=False),
}
runs = {name: [] for name in engines}
for prompt in PROMPTS:
    for _ in range(ROUNDS):  # methods interleaved on every prompt
        for name, engine in engines.items():
            method = "ar" if name == "ar" else "lopa"
            result = engine.generate(prompt, max_new_tokens=NEW_TOKENS, method=method, ignore_eos=True)
            s = result.stats
            runs[name].append({"prompt": prompt, "tokens": result.token_ids, "tokens_per_s": s.new_tokens / s.wall_s,
                               "tokens_per_forward": s.tokens_per_forward})
summary = {}
for name, rs in runs.items():
    exact = sum(r["tokens"] == a["tokens"] for r, a in zip(rs, runs["ar"]))
    summary[name] = {
        "median_tokens_per_s": statistics.median(r["tokens_per_s"] for r in rs),
        "median_tokens_per_forward": statistics.median(r["tokens_per_forward"] for r in rs),
        "equal_to_fp32_greedy": f"{exact}/{len(rs)}",
        "median_ratio_to_lopa": statistics.median(r["tokens_per_s"] / l["tokens_per_s"] for r, l in zip(rs, runs["lopa"])),
    }
json.dump({"summary": summary, "new_tokens": NEW_TOKENS, "rounds": ROUNDS, "runs": runs}, open(sys.argv[1], "w"), indent=1)
print(json.dumps(summary, indent=1))
