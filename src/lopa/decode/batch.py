"""One decoding step of many sequences: each proposes its tree, one batched forward verifies them all, each
accepts its own tokens and commits its own KV rows. The server's scheduler and Engine.generate([...]) run it.
"""

from __future__ import annotations

import time
from typing import Sequence

from ..models.batch import BatchRunner
from .loop import SequenceDecoder, StepRecord


def step_batch(runner: BatchRunner, seqs: Sequence[SequenceDecoder], node_budget: int) -> list[StepRecord | Exception]:
    """Advance seqs (slot i holds seqs[i]) by one verification; the node budget is shared between the rows.

    An exception while drafting or verifying fails the whole batch (it propagates); one while a row
    accepts fails only that row (its entry is the exception)."""
    share = max(1, node_budget // len(seqs))
    start = time.perf_counter()
    trees = [seq.tree(share) for seq in seqs]
    drafted = time.perf_counter()
    outs = runner.verify([tree.tensors() for tree in trees])
    verified = time.perf_counter()
    results: list[StepRecord | Exception] = []
    for slot, (seq, tree, out) in enumerate(zip(seqs, trees, outs)):
        try:
            record, path = seq.advance(tree, out)
            runner.commit_row(slot, path)
        except Exception as exc:  # noqa: BLE001 - the caller fails this row and goes on
            results.append(exc)
            continue
        record.draft_s += (drafted - start) / len(seqs)  # each row's share of the batch's drafting and forward
        record.verify_s = (verified - drafted) / len(seqs)
        results.append(record)
    return results
