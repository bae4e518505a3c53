"""Size and source shares of a corpus directory (for its README)."""
import gzip, json, sys
from collections import Counter
from pathlib import Path
out = Path(sys.argv[1])
prompts = [json.loads(l) for l in gzip.decompress((out / "prompts.jsonl.gz").read_bytes()).decode().splitlines()]
asked = Counter(p["source"].split(":")[0] for p in prompts)
rows = [json.loads(l) for l in (out / "manifest.jsonl").read_text().splitlines()] if (out / "manifest.jsonl").exists() else []
seqs = Counter(r["source"].split(":")[0] for r in rows)
toks = Counter()
for r in rows: toks[r["source"].split(":")[0]] += r["answer_tokens"]
total = sum(toks.values())
print(f"prompts {len(prompts)}, chunks {len(set(r['chunk'] for r in rows))}, sequences {len(rows)}, answer tokens {total}, prompt tokens {sum(r['prompt_tokens'] for r in rows)}, finished {sum(r['finished'] for r in rows)}, sampled {sum(r['mode']=='sampled' for r in rows)}")
print("| source | prompts (share) | sequences answered | answer tokens (share) |\n|---|---|---|---|")
for s, n in asked.most_common():
    print(f"| `{s}` | {n:,} ({n/len(prompts):.1%}) | {seqs[s]:,} | {toks[s]:,} ({toks[s]/max(total,1):.1%}) |")
