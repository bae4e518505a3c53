"""An int4 model's load, one fresh process per load: wall time, peak and final resident memory (anonymous and
file-backed) after loading and a 16-token generation, against the GGUF's size. Run with the checkout to measure
first on PYTHONPATH (before: a worktree of the previous commit).

    OMP_NUM_THREADS=2 python docs/bench/gguf-direct/load.py smollm2-135m-instruct qwen2.5-coder-1.5b
"""

import subprocess
import sys

CHILD = """
import sys, time
import lopa
from lopa.models.catalog import fetch_gguf
from lopa.models.loading import load_model
def status(field):
    return int(next(line for line in open("/proc/self/status") if line.startswith(field)).split()[1]) / 1024
before = status("RssAnon")
start = time.perf_counter()
loaded = load_model(sys.argv[1], dtype="int4")
load_s = time.perf_counter() - start
ids = loaded.tokenizer("Name three colours.", return_tensors="pt").input_ids
tokens = loaded.model.generate(ids, max_new_tokens=16, do_sample=False)[0, ids.shape[1]:].tolist()
gguf_mb = fetch_gguf(sys.argv[1]).stat().st_size / 2**20
print(lopa.__file__, load_s, status("VmHWM"), status("VmRSS"), status("RssAnon") - before, status("RssFile"), gguf_mb, tokens)
"""
print("model | lopa | load s | peak RSS MiB | RSS MiB | anon added MiB | file MiB | GGUF MiB | RSS / GGUF | tokens")
for spec in sys.argv[1:]:
    out = subprocess.run([sys.executable, "-c", CHILD, spec], capture_output=True, text=True, check=True)
    where, load_s, peak, rss, anon, files, gguf_mb, tokens = out.stdout.strip().splitlines()[-1].split(" ", 7)
    print(
        f"{spec} | {where} | {float(load_s):.1f} | {float(peak):.0f} | {float(rss):.0f} | {float(anon):.0f} | "
        f"{float(files):.0f} | {float(gguf_mb):.0f} | {float(rss) / float(gguf_mb):.2f} | {tokens}",
        flush=True,
    )
