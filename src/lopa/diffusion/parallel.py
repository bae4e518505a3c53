"""Branch parallelism: LoPA's branches split over processes (torch.distributed).

Each rank holds the same model, context and winner logits, builds the same branches,
and runs a forward on its contiguous slice of them; scores are all-gathered, every
rank picks the same winner (first maximum, as in one process), and the winner's
owner broadcasts its logits, the only per-branch state the next iteration needs
(branches never write the KV cache, which holds committed tokens only). gloo on CPU.
Works under `torchrun` or through `spawn`.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from .decoder import DecodeConfig, DiffusionDecoder, branch_scores
from .loader import load_dllm

BACKEND = "gloo"  # the adapters run on CPU; a GPU build would switch to NCCL with cuda:rank devices


class DistributedEvaluator:
    """Drop-in for `LocalEvaluator`: the same winner and logits, computed across ranks."""

    def __call__(self, adapter, ctx, branches: torch.Tensor, kind: str) -> tuple[int, torch.Tensor]:
        rank, world = dist.get_rank(), dist.get_world_size()
        n, b = branches.shape
        per = -(-n // world)
        mine = branches[rank * per : (rank + 1) * per]
        scores = torch.full((per,), -float("inf"), device=branches.device)
        logits = None
        if len(mine):
            logits = adapter.logits(ctx, mine)
            scores[: len(mine)] = branch_scores(logits, mine, adapter.mask_token_id, kind)
        every = [torch.empty_like(scores) for _ in range(world)]
        dist.all_gather(every, scores)
        w = int(torch.cat(every).argmax())
        owner = w // per
        buf = (
            logits[w - owner * per].contiguous()
            if rank == owner
            else torch.empty(b, adapter.vocab_size, device=branches.device)
        )
        dist.broadcast(buf, src=owner)
        return w, buf


def init_from_env() -> bool:
    """Join the process group described by torchrun's environment; False when not under torchrun."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    if not dist.is_initialized():
        dist.init_process_group(BACKEND)
    return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, threads: int, timeout_s: float, fn, args, queue) -> None:
    torch.set_num_threads(threads)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    dist.init_process_group(BACKEND, rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s))
    try:
        result = fn(*args)
        if rank == 0:
            queue.put(result)
    finally:
        dist.destroy_process_group()


def spawn(procs: int, fn, *args, threads: int = 1, timeout_s: float = 300):
    """Run fn(*args) in `procs` fresh processes joined by a process group; returns rank 0's result.

    fn must be a picklable top-level function; it can use `DistributedEvaluator`. A collective
    that waits longer than timeout_s fails the run instead of hanging it.
    """
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    pc = mp.start_processes(
        _worker,
        (procs, _free_port(), threads, timeout_s, fn, args, queue),
        nprocs=procs,
        join=False,
        start_method="spawn",
    )
    while queue.empty() and not pc.join(timeout=0.05):  # join raises if a worker failed
        pass
    result = queue.get()
    while not pc.join():
        pass
    return result


def decode_job(
    model_path: str | None, cfg: DecodeConfig, prompts: list[list[int]], trust_remote_code: bool = False
) -> list[tuple[list[int], dict]]:
    """Decode every prompt with branches split over the current process group (a `spawn` target)."""
    adapter, _ = load_dllm(model_path, trust_remote_code)
    dec = DiffusionDecoder(adapter, cfg, DistributedEvaluator() if dist.is_initialized() else None)
    return [(ids, st.to_dict()) for ids, st in map(dec.generate, prompts)]
