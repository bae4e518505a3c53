"""Issue 38, item 3: how much of what the base model says falls inside a draft vocabulary of the k most frequent
tokens, ranked on one set of answers and judged on answers to other prompts. (A) ranked on the first corpus
(src/lopa/data/corpus, what the shipped predictor was trained on), judged on all of corpus-v2 (other prompts, wider
sources); the shipped predictor's own draft vocabulary (its t2d mask) is judged the same way. (B) ranked on the first
corpus and corpus-v2's even chunks, judged on its odd chunks: what a predictor retrained on the grown corpus would see.
Tokens never seen in the ranking set are not ranked (a vocabulary stops at the seen ones).

Usage: python docs/bench/draft-vocab/coverage.py   (repository root; reads only the shipped corpora and predictor)
"""

from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

DATA = Path("src/lopa/data")
VOCAB = 49152


def answer_counts(chunks: list[Path]) -> np.ndarray:
    counts = np.zeros(VOCAB, dtype=np.int64)
    for chunk in chunks:
        counts += np.bincount(np.load(chunk)["answer_ids"].astype(np.int64), minlength=VOCAB)
    return counts


def report(name: str, train: np.ndarray, held_out: np.ndarray) -> None:
    seen = int((train > 0).sum())
    ranked = np.argsort(-train, kind="stable")[:seen]
    total = held_out.sum()
    print(f"{name}: ranking set {train.sum():,} answer tokens ({seen:,} distinct), judged on {total:,}")
    for k in (2048, 4096, 8192, 12288, 16384, 24576, 32768):
        if k <= seen:
            print(f"  top {k:6,}: {held_out[ranked[:k]].sum() / total:.2%} of the judged answer tokens")
    print(f"  all {seen:,} seen tokens: {held_out[ranked].sum() / total:.2%}")
    need = int(np.searchsorted(np.cumsum(held_out[ranked]) / total, 0.97)) + 1
    print(f"  97% needs the top {need:,}" if need <= seen else "  97% is not reached by the seen tokens")


old = sorted((DATA / "corpus").glob("chunk-*.npz"))
v2 = sorted((DATA / "corpus-v2").glob("chunk-*.npz"))
first, v2_all = answer_counts(old), answer_counts(v2)
shipped = load_file(str(DATA / "predictor" / "model.safetensors"))["t2d"].astype(bool)
report("(A) first corpus -> corpus-v2", first, v2_all)
print(f"  the shipped predictor's draft vocabulary ({shipped.sum():,} tokens): {v2_all[shipped].sum() / v2_all.sum():.2%}")
report("(B) first corpus + corpus-v2 even chunks -> odd chunks", first + answer_counts(v2[0::2]), answer_counts(v2[1::2]))
