"""Spike, route (a): can llama.cpp verify a tree losslessly, and what does a tree cost there?

For each GGUF: the logits of 8 continuation tokens computed one llama_decode call per token (what plain decoding
does) against the same 8 tokens in one call (what verifying a chain does), after the same prompt. Reports the
largest logit difference, whether every row's argmax agrees, and the median time of one call of 1, 2, 4 and 8
tokens (llama-cpp-python with logits_all, so each call also copies its rows' logits out). Usage: python llamacpp_invariance.py GGUF... (2 threads, nothing else running).
"""
import statistics
import sys
import time

import numpy as np
from llama_cpp import Llama

PROMPT = ("<|im_start|>user\nExplain in detail how a hash map handles collisions, with an example in Python."
          "<|im_end|>\n<|im_start|>assistant\n")


def logits_after(llm: Llama, prompt: list[int], chain: list[int], one_by_one: bool) -> np.ndarray:
    llm.reset()
    llm.eval(prompt)
    if one_by_one:
        for token in chain:
            llm.eval([token])
    else:
        llm.eval(chain)
    n = llm.n_tokens
    return np.array(llm.scores[n - len(chain) : n])


def call_ms(llm: Llama, prompt: list[int], tokens: list[int], reps: int = 20) -> float:
    times = []
    for _ in range(reps):
        llm.reset()
        llm.eval(prompt)
        start = time.perf_counter()
        llm.eval(tokens)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


for path in sys.argv[1:]:
    llm = Llama(model_path=path, n_ctx=1024, n_batch=512, n_threads=2, n_threads_batch=2, logits_all=True, verbose=False)
    prompt = llm.tokenize(PROMPT.encode(), add_bos=False, special=True)
    # the continuation plain greedy decoding gives, so the chain is one a drafter could propose
    llm.reset()
    llm.eval(prompt)
    chain = []
    for _ in range(8):
        chain.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
        llm.eval([chain[-1]])
    single = logits_after(llm, prompt, chain, one_by_one=True)
    batched = logits_after(llm, prompt, chain, one_by_one=False)
    diff = float(np.abs(single - batched).max())
    same_argmax = bool((single.argmax(-1) == batched.argmax(-1)).all())
    calls = ", ".join(f"{n} tokens {call_ms(llm, prompt, chain[:n]):.2f} ms" for n in (1, 2, 4, 8))
    print(f"{path}: max |logit diff| 1-by-1 vs batch of 8: {diff:.3g}, bit-identical: {diff == 0.0}, "
          f"argmax agree: {same_argmax}; one call of {calls}", flush=True)
