"""The model options every model-loading subcommand shares, and the Engine built from them.

A module of its own so that the top-level parser (cli.py) can import the subcommand modules
while they import nothing from it: no import cycle. torch and the Engine are imported inside
`load_engine` only, so that building the parser (`lopa --help`) stays cheap.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .api import Engine


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """Add the options `load_engine` reads: which model, where, in what precision, drafted how."""
    parser.add_argument(
        "--model", default=None, help="catalog name, HF model directory or .gguf file (default: SmolLM2-135M-Instruct)"
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    parser.add_argument(
        "--dtype",
        choices=["float32", "float16", "bfloat16", "int8", "int4"],
        default=None,
        help="default: fp32 on CPU, bf16 on CUDA; int8: int8 linear layers (CPU); int4: bf16 with int4 weight-only "
        "linear layers, a GGUF's own Q4_0/Q4_1/Q4_K blocks kept quantized (CPU)",
    )
    parser.add_argument(
        "--max-verify-tokens",
        type=int,
        default=None,
        metavar="N",
        help="feed trees and prompts longer than N tokens in chunks (less peak memory, same output)",
    )
    parser.add_argument(
        "--threads",
        "--torch-threads",
        type=int,
        default=None,
        metavar="N",
        help="torch threads (default: OMP_NUM_THREADS, else the fastest count `lopa profile` measured)",
    )
    parser.add_argument(
        "--eager",
        action="store_true",
        help="stock transformers modules: none of lopa's CPU kernels (packed linears, grouped-KV attention)",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="verify trees through torch.compile (faster steps; minutes to build the 7 tree-size graphs on first use)",
    )
    parser.add_argument("--trust-remote-code", action="store_true", help="allow model code from the model directory")
    parser.add_argument(
        "--predictor",
        default=None,
        metavar="PATH",
        help="an EAGLE-3 predictor directory (speculators layout; default: the shipped one, when it fits the model)",
    )
    parser.add_argument("--no-predictor", action="store_true", help="draft without the EAGLE-3 predictor")
    parser.add_argument(
        "--draft-model",
        default=None,
        metavar="NAME",
        help="a smaller model with the same tokenizer drafts chains (catalog name, directory, .gguf; "
        "'self': the target in --draft-dtype)",
    )
    parser.add_argument(
        "--always-draft",
        action="store_true",
        help="every drafter proposes at every step (default: plain steps, and dear drafters idle, where measured not to pay)",
    )
    parser.add_argument(
        "--draft-dtype",
        choices=["int4", "int8", "bfloat16", "float32"],
        default=None,
        help="the draft model's precision (default: int4 under an int4 target, else int8 on CPU, the target's on "
        "CUDA); output is unchanged",
    )


def load_engine(args: argparse.Namespace, profile: bool = True) -> Engine:
    """Build an Engine from the shared model options (imported lazily: torch is slow to import); `profile`: load or
    measure its latency profile (Engine.from_pretrained's)."""
    import torch

    from .api import Engine
    from .config import DraftConfig

    draft = DraftConfig(
        draft_model=args.draft_model,
        draft_model_dtype=args.draft_dtype,
        always_draft=args.always_draft,
    )
    dtype = args.dtype if args.dtype in (None, "int8", "int4") else getattr(torch, args.dtype)
    return Engine.from_pretrained(
        args.model,
        device=args.device,
        dtype=dtype,
        trust_remote_code=args.trust_remote_code,
        max_verify_tokens=args.max_verify_tokens,
        draft=draft,
        compile=args.compile,
        predictor=False if args.no_predictor else args.predictor,
        fast=not args.eager,
        threads=args.threads,
        profile=profile,
    )


def model_flags(args: argparse.Namespace) -> list[str]:
    """The model options in `args` that differ from their defaults, as flags (a report's command must say that a run
    was int4, or drafted by a small model). --model is left to the caller."""
    parser = argparse.ArgumentParser(add_help=False)
    add_model_options(parser)
    flags: list[str] = []
    for action in parser._actions:
        value = getattr(args, action.dest, action.default)
        if action.dest == "model" or value == action.default:
            continue
        flags += [action.option_strings[0]] + ([] if isinstance(value, bool) else [str(value)])
    return flags
