"""Per-prompt tokens/s ratios (medians over prompts) and greedy agreement between methods of a `lopa bench` run.

python docs/bench/exact-low-precision/ratios.py docs/bench/exact-low-precision/{int4-q4_1,bf16}/results.json
"""

import json
import statistics
import sys

PAIRS = [("lopa", "llamacpp"), ("lopa", "llamacpp-pld"), ("ar", "llamacpp"), ("lopa", "ar"), ("lopa-ngram", "ar"), ("ar", "hf")]
PAIRS += [("ar-compiled", "llamacpp"), ("lopa-compiled", "llamacpp"), ("ar-compiled", "ar"), ("lopa-compiled", "ar-compiled")]
SAME = [("lopa", "ar"), ("lopa-compiled", "ar-compiled")]  # greedy lookahead against plain decoding, same runner
for path in sys.argv[1:]:
    prompts = json.load(open(path))["prompts"]
    ratios = {
        f"{a}/{b}": statistics.median(p["runs"][a]["tokens_per_s"] / p["runs"][b]["tokens_per_s"] for p in prompts)
        for a, b in PAIRS
        if {a, b} <= prompts[0]["runs"].keys()  # the methods this run had
    }
    same = [
        f"{a} tokens == {b} tokens on {sum(p['runs'][a].get('token_ids') == p['runs'][b].get('token_ids') for p in prompts)}"
        f"/{len(prompts)}"
        for a, b in SAME
        if {a, b} <= prompts[0]["runs"].keys()
    ]
    print(path, {k: round(v, 3) for k, v in ratios.items()}, *same)
