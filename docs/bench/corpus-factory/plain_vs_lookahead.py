"""Factory step: lopa defaults (gate decides) vs plain steps, same 64 corpus prompts, batch 32, interleaved."""
import gzip, json, sys, time
import torch
from lopa import Engine, GenerationConfig
torch.set_num_threads(2)
dtype = getattr(torch, sys.argv[1]) if len(sys.argv) > 1 else torch.float32
prompts = [json.loads(l)["text"] for l in gzip.decompress(open("/tmp/rate-fp32/prompts.jsonl.gz", "rb").read()).decode().splitlines()][:64]
engine = Engine.from_pretrained(dtype=dtype)
configs = [GenerationConfig(max_new_tokens=128) if i % 2 else GenerationConfig(max_new_tokens=128, temperature=0.8, top_p=0.95, seed=i) for i in range(64)]
for rep in range(2):
    for method in ("lopa", "ar"):
        t = time.perf_counter()
        res = engine.generate_many(prompts, configs, max_batch=32, method=method, progress=False)
        s = time.perf_counter() - t
        n = sum(len(r.token_ids) for r in res)
        f = sum(r.stats.forwards for r in res)
        print(json.dumps({"dtype": str(dtype), "rep": rep, "method": method, "tokens": n, "seconds": round(s, 1), "tokens_per_s": round(n / s, 1), "tokens_per_forward_per_seq": round(n / max(f, 1), 2)}), flush=True)
