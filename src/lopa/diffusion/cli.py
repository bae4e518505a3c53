"""Command-line entry points of the diffusion path, mounted by `lopa.cli`.

`add_train_dllm_parser` registers `lopa train-dllm`; `add_dllm_options` adds the
decoder options to the lead's `generate` and `bench` parsers; `run_generate` and
`run_bench` serve `--dllm PATH`. User errors print one line to stderr and return 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from ..errors import InvalidRequestError, LopaError
from .decoder import CONFIDENCES, DecodeConfig, DiffusionDecoder


def _train(args: argparse.Namespace) -> int:
    from .train import train

    log = train(
        Path(args.out),
        args.steps,
        args.batch,
        args.seq,
        args.train_block,
        args.dim,
        args.layers,
        args.heads,
        args.lr,
        args.seed,
        args.threads,
        args.log_every,
        not args.fp32,
    )
    print(f"saved model to {args.out}; log {log}")
    return 0


def add_train_dllm_parser(subparsers) -> None:
    """Register `train-dllm`: train the small masked-diffusion LM on the stdlib corpus."""
    p = subparsers.add_parser("train-dllm", help="train the small diffusion LM on the Python stdlib")
    p.add_argument("--out", default="dllm-model", help="output directory")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=256, help="training window in bytes")
    p.add_argument("--train-block", type=int, default=32, help="diffusion block size used in training")
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--lr", type=float, default=1.5e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--fp32", action="store_true", help="disable bf16 autocast")
    p.set_defaults(func=_guarded(_train))


def add_dllm_options(parser: argparse.ArgumentParser) -> None:
    """Add the diffusion decoder options (dests prefixed `dllm_`) to a `generate` or `bench` parser."""
    g = parser.add_argument_group("diffusion LM (with --dllm)")
    g.add_argument(
        "--branches",
        dest="dllm_branches",
        type=int,
        default=4,
        help="LoPA lookahead branches k (0 = confidence-driven baseline)",
    )
    g.add_argument(
        "--tau-conf",
        dest="dllm_tau_conf",
        type=float,
        default=0.9,
        help="fill every masked position whose confidence exceeds this, in (0, 1]",
    )
    g.add_argument("--block-size", dest="dllm_block_size", type=int, default=32)
    g.add_argument("--confidence", dest="dllm_confidence", choices=CONFIDENCES, default="maxprob")
    g.add_argument(
        "--procs", dest="dllm_procs", type=int, default=1, help="processes to split the branches over (gloo on CPU)"
    )
    g.add_argument(
        "--branch-list",
        dest="dllm_branch_list",
        default="1,2,4,8",
        help="bench: comma-separated LoPA branch counts to compare with the baseline",
    )
    g.add_argument(
        "--dllm-trust-remote-code",
        dest="dllm_trust_remote_code",
        action="store_true",
        help="allow custom modeling code of a HF checkpoint (Dream, LLaDA)",
    )


def _decode_config(args: argparse.Namespace) -> DecodeConfig:
    cfg = DecodeConfig(
        max_new_tokens=getattr(args, "max_new_tokens", None) or 64,
        block_size=args.dllm_block_size,
        tau_conf=args.dllm_tau_conf,
        branches=args.dllm_branches,
        confidence=args.dllm_confidence,
    )
    cfg.validate()
    if args.dllm_procs < 1:
        raise InvalidRequestError(f"--procs must be >= 1, got {args.dllm_procs}")
    torch.set_num_threads(_threads(args))
    return cfg


def _threads(args: argparse.Namespace) -> int:
    """torch threads per process: the shared --threads option, 1 when not given (the branches share the cores)."""
    return getattr(args, "threads", None) or 1


def _generate(args: argparse.Namespace) -> int:
    from .loader import load_dllm
    from .parallel import DistributedEvaluator, decode_job, init_from_env, spawn

    cfg = _decode_config(args)
    if not args.prompt:
        raise InvalidRequestError("empty prompt")
    adapter, tok = load_dllm(args.dllm, args.dllm_trust_remote_code)
    prompt = tok.encode(args.prompt)
    rank0 = True
    if args.dllm_procs > 1:
        [(ids, stats)] = spawn(
            args.dllm_procs, decode_job, args.dllm, cfg, [prompt], args.dllm_trust_remote_code, threads=_threads(args)
        )
    else:
        under_torchrun = init_from_env()
        rank0 = not under_torchrun or torch.distributed.get_rank() == 0
        ids, st = DiffusionDecoder(adapter, cfg, DistributedEvaluator() if under_torchrun else None).generate(prompt)
        stats = st.to_dict()
    text = tok.decode(ids)
    if rank0:
        print(json.dumps(dict(text=text, token_ids=ids, stats=stats)) if args.json else text)
    return 0


def _bench(args: argparse.Namespace) -> int:
    from . import bench
    from .loader import load_dllm

    cfg = _decode_config(args)
    try:
        branch_list = [int(k) for k in args.dllm_branch_list.split(",")]
    except ValueError as e:
        raise InvalidRequestError(f"--branch-list must be comma-separated integers: {e}") from e
    adapter, tok = load_dllm(args.dllm, args.dllm_trust_remote_code)
    res = bench.run(
        adapter,
        tok,
        args.dllm,
        cfg,
        branch_list,
        getattr(args, "limit", None) or 16,
        args.dllm_procs,
        args.dllm_trust_remote_code,
    )
    print(bench.table(res))
    if getattr(args, "json", False):
        print(json.dumps(res))
    if getattr(args, "out", None):
        bench.write(res, Path(args.out))
    return 0


def _guarded(fn):
    """Wrap a command so a LopaError becomes one stderr line and exit code 2."""

    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except LopaError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2

    return run


run_generate = _guarded(_generate)
run_generate.__doc__ = "`lopa generate PROMPT --dllm PATH`: print the text (or one JSON object with --json); exit code."
run_bench = _guarded(_bench)
run_bench.__doc__ = "`lopa bench --dllm PATH`: baseline vs LoPA table, results.json and a TPF plot in --out."
