"""Where the model runs (argument: main or passing): 3 Spec-Bench dev prompts x 64 tokens (plain decoding) on the thread that loaded the
engine, on another thread, and on another thread after loading in a passing thread (lopa serve's way now)."""
import sys
import threading
import time

from lopa.api import Engine
from lopa.models.threads import in_passing_thread
from lopa.bench.serve import load_prompts

prompts = load_prompts("../shared/data/spec_bench_dev.jsonl", "categories")[:3]


def tokens_per_s(engine: Engine) -> float:
    start, tokens = time.perf_counter(), 0
    for p in prompts:
        tokens += engine.generate([{"role": "user", "content": p}], max_new_tokens=64, method="ar").stats.new_tokens
    return tokens / (time.perf_counter() - start)


def on_thread(fn, *args):
    out = []
    thread = threading.Thread(target=lambda: out.append(fn(*args)))
    thread.start()
    thread.join()
    return out[0]


if sys.argv[1] == "passing":  # a fresh process: its main thread never runs torch
    engine = in_passing_thread(Engine.from_pretrained)
    on_thread(tokens_per_s, engine)  # warm-up
    for _ in range(2):
        print(f"loaded in a passing thread, decoded on another: {on_thread(tokens_per_s, engine):.1f} tokens/s", flush=True)
else:
    engine = Engine.from_pretrained()
    tokens_per_s(engine)  # warm-up
    for _ in range(2):
        print(f"loaded and decoded on the main thread:          {tokens_per_s(engine):.1f} tokens/s", flush=True)
        print(f"loaded on the main thread, decoded on another:  {on_thread(tokens_per_s, engine):.1f} tokens/s", flush=True)
