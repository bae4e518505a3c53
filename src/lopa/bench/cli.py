"""`lopa bench`, `lopa bench-batch`, `lopa bench-serve` and `lopa profile`: options, and the console summaries."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..cli_options import add_model_options, load_engine, model_flags
from . import batch, profile_cli, serve
from .data import LOPA_SCENARIOS
from .methods import ALL_METHODS, parse_methods


def _csv(text: str | None) -> list[str] | None:
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "bench",
        help="benchmark lopa against transformers generate, prompt lookup and llama.cpp",
        description="Run every method on every prompt, interleaved in one process; print tables, write --out DIR.",
    )
    add_model_options(p)
    p.add_argument(
        "--data", default=None, help="Spec-Bench JSONL (question_id, category, turns); default: built-in set"
    )
    p.add_argument("--categories", default=None, help="comma-separated categories to keep (default: all)")
    p.add_argument("--limit", type=int, default=None, help="at most N prompts per category (sampled with --seed)")
    p.add_argument("--seed", type=int, default=0, help="seed of the per-category sample")
    p.add_argument("--multi-turn", action="store_true", help="all turns (later turns see hf's earlier answers)")
    p.add_argument(
        "--methods",
        default=None,
        help=f"comma-separated, from {','.join(ALL_METHODS)} (default: all; hf is always included)",
    )
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument(
        "--lopa-table",
        action="store_true",
        help="the LoPA table: "
        + ", ".join(f"{s.name} (up to {s.max_new_tokens})" for s in LOPA_SCENARIOS)
        + "; methods default to hf,lopa",
    )
    p.add_argument(
        "--scenarios", default=None, help="comma-separated subset of the LoPA scenarios (implies --lopa-table)"
    )
    p.add_argument("--out", default=None, metavar="DIR", help="write results.json, report.md and PNG plots here")
    p.add_argument("--gguf", default=None, help="GGUF for the llama.cpp methods (default: the catalog model's)")
    p.add_argument(
        "--gguf-precision",
        default="shipped",
        choices=("shipped", "f32", "bf16"),
        help="the llama.cpp methods run the GGUF as shipped, or a copy lopa writes with its weights dequantized "
        "to f32 (the weights lopa's fp32 path runs: a same-precision comparison) or bf16 (cached)",
    )
    p.add_argument("--llamacpp-flash-attn", action="store_true", help="llama.cpp with flash attention")
    p.add_argument("--no-chat", action="store_true", help="raw prompts, without the chat template")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)

    b = subparsers.add_parser(
        "bench-batch",
        help="offline batch inference: generate([...]) against sequential generate() calls",
        description="Decode the first N prompts of --data one by one and together, interleaved; outputs must match.",
    )
    add_model_options(b)
    b.add_argument("--data", default=None, help="Spec-Bench JSONL (default: the built-in set)")
    b.add_argument("--prompts", type=int, default=16, help="how many prompts (the file's first)")
    b.add_argument("--max-new-tokens", type=int, default=128)
    b.add_argument("--max-batch", type=int, default=16)
    b.add_argument("--repeats", type=int, default=2, help="rounds of sequential then batched")
    b.add_argument("--out", default=None, metavar="DIR", help="write results.json here")
    b.set_defaults(func=batch.run)
    serve.add_bench_parser(subparsers)
    profile_cli.register(subparsers)


def run(args: argparse.Namespace) -> int:
    from .benchmark import TABLE_METHODS, BenchOptions, run_benchmark, write_outputs
    from .report import lopa_table_md, overall_md

    table = args.lopa_table or bool(args.scenarios)
    opts = BenchOptions(
        data=args.data,
        categories=_csv(args.categories),
        limit=args.limit,
        seed=args.seed,
        multi_turn=args.multi_turn,
        max_new_tokens=args.max_new_tokens,
        lopa_table=table,
        scenarios=_csv(args.scenarios),
        chat=False if args.no_chat else None,
        model=args.model,
        model_flags=model_flags(args),
        gguf=args.gguf,
        gguf_precision=args.gguf_precision,
        llamacpp_flash_attn=args.llamacpp_flash_attn,
        progress=not args.no_progress,
        methods=parse_methods(args.methods or ",".join(TABLE_METHODS if table else ALL_METHODS)),
    )
    opts.validate()  # before the model load
    results = run_benchmark(load_engine(args), opts)
    for name, m in results["methods"].items():
        if m["status"] == "skipped":
            print(f"skipped {name}: {m['reason']}", file=sys.stderr)
    print(overall_md(results["aggregate"]))
    if results["lopa_table"]:
        print("\n" + lopa_table_md(results["lopa_table"]))
    if args.out:
        written = write_outputs(results, Path(args.out), opts.command())
        print(f"\nwrote {', '.join(str(p) for p in written)}", file=sys.stderr)
    return 0
