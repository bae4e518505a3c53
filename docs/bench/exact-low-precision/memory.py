"""Memory after loading the default model at each CPU precision (and int4 with the shipped predictor, as
`Engine.from_pretrained(dtype="int4")` loads it), one fresh process each, against its GGUF: the
anonymous memory the load added (weights, packed copies, caches) and the file pages mapped (safetensors, GGUF).

    OMP_NUM_THREADS=2 python docs/bench/exact-low-precision/memory.py
"""

import subprocess
import sys

from lopa.models.catalog import fetch_gguf

CHILD = """
import gc, sys
from lopa import Engine
def rss(field):
    return int(next(line for line in open("/proc/self/status") if line.startswith(field)).split()[1]) / 1024
before = rss("RssAnon")
engine = Engine.from_pretrained(dtype=sys.argv[1], predictor=None if sys.argv[2] == "predictor" else False, profile=False)
engine.generate("Name three colours.", max_new_tokens=16)
gc.collect()
print(rss("RssAnon") - before, rss("RssFile"), rss("VmRSS"))
"""
gguf_mb = fetch_gguf("smollm2-135m-instruct").stat().st_size / 2**20
print(f"GGUF (Q4_1, shipped): {gguf_mb:.0f} MiB")
for dtype, drafter in (("float32", ""), ("bfloat16", ""), ("int4", ""), ("int4", "predictor")):
    out = subprocess.run([sys.executable, "-c", CHILD, dtype, drafter], capture_output=True, text=True, check=True)
    grown, files, total = map(float, out.stdout.split()[-3:])
    label = f"{dtype} + predictor" if drafter else dtype
    print(
        f"{label:18} after load and 16 tokens: anonymous memory +{grown:5.0f} MiB over the imports "
        f"({grown / gguf_mb:4.1f}x the GGUF), mapped files {files:4.0f} MiB, resident in all {total:5.0f} MiB"
    )
