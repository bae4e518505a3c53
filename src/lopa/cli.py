"""The `lopa` command line: generate, info, and the subcommands each feature package registers."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import Callable

from .diffusion import cli as diffusion_cli
from .errors import InvalidRequestError, LopaError

# Feature packages add their subcommands through a `register(subparsers)` function.
SUBCOMMAND_MODULES: tuple[str, ...] = ("lopa.train.cli", "lopa.serve.cli", "lopa.bench.cli", "lopa.models.profile_cli")


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line on stderr and exits 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"lopa: error: {message}\n")


def add_model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None, help="catalog name, HF model directory or .gguf file (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    parser.add_argument("--dtype", choices=["float32", "float16", "bfloat16", "int8"], default=None,
                        help="default: fp32 on CPU, bf16 on CUDA; int8: int8 linear layers (CPU)")
    parser.add_argument("--max-verify-tokens", type=int, default=None, metavar="N",
                        help="feed trees and prompts longer than N tokens in chunks (less peak memory, same output)")
    parser.add_argument("--lossy-int8-verify", action="store_true",
                        help="LOSSY: an int8 copy verifies drafts, full precision every --lossy-calibration-every steps")
    parser.add_argument("--lossy-calibration-every", type=int, default=10, metavar="N")
    parser.add_argument("--threads", "--torch-threads", type=int, default=None, metavar="N",
                        help="torch threads (default: OMP_NUM_THREADS, else the fastest count `lopa profile` measured)")
    parser.add_argument("--eager", action="store_true",
                        help="stock transformers modules: none of lopa's CPU kernels (packed linears, grouped-KV attention)")
    parser.add_argument("--compile", action="store_true",
                        help="verify trees through torch.compile (faster steps; minutes to build the 7 tree-size graphs on first use)")
    parser.add_argument("--trust-remote-code", action="store_true", help="allow model code from the model directory")
    parser.add_argument("--predictor", default=None, metavar="PATH",
                        help="an EAGLE-3 predictor directory (speculators layout; default: the shipped one, when it fits the model)")
    parser.add_argument("--no-predictor", action="store_true", help="draft without the EAGLE-3 predictor")
    parser.add_argument("--draft-model", default=None, metavar="NAME",
                        help="a smaller model with the same tokenizer drafts chains (catalog name, directory, .gguf; "
                        "'self': the target in --draft-dtype)")
    parser.add_argument("--draft-dtype", choices=["int8", "bfloat16", "float32"], default=None,
                        help="the draft model's precision (default: int8 on CPU, the target's on CUDA); output is unchanged")


def load_engine(args: argparse.Namespace):
    """Build an Engine from the shared model options (imported lazily: torch is slow to import)."""
    import torch

    from .api import Engine
    from .config import DraftConfig

    draft = DraftConfig(
        lossy_int8_verify=args.lossy_int8_verify, lossy_calibration_every=args.lossy_calibration_every,
        draft_model=args.draft_model, draft_model_dtype=args.draft_dtype,
    )
    dtype = args.dtype if args.dtype in (None, "int8") else getattr(torch, args.dtype)
    return Engine.from_pretrained(
        args.model, device=args.device, dtype=dtype, trust_remote_code=args.trust_remote_code,
        max_verify_tokens=args.max_verify_tokens, draft=draft, compile=args.compile,
        predictor=False if args.no_predictor else args.predictor, fast=not args.eager, threads=args.threads,
    )


def _generate(args: argparse.Namespace) -> int:
    if args.dllm:
        return diffusion_cli.run_generate(args)
    from .config import GenerationConfig

    cfg = GenerationConfig(
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        repetition_penalty=args.repetition_penalty,
        presence_penalty=args.presence_penalty,
        frequency_penalty=args.frequency_penalty,
        min_tokens=args.min_tokens,
        seed=args.seed,
        stop=args.stop or [],
        method=args.method,
        ignore_eos=args.ignore_eos,
    )
    cfg.validate()  # fail on bad values before spending seconds on loading the model
    if not args.prompt.strip():
        raise InvalidRequestError("the prompt is empty")
    engine = load_engine(args)
    chat = False if args.no_chat else None
    if args.json:
        result = engine.generate(args.prompt, cfg, chat=chat)
        stats = result.stats.to_dict()
        print(json.dumps({"text": result.text, "token_ids": result.token_ids, "finish_reason": result.finish_reason, "stats": stats}))
        return 0
    result = None
    paint = _painter(engine) if args.show else None
    for item in engine.stream_steps(args.prompt, cfg, chat=chat):
        if not hasattr(item, "step"):
            result = item
        elif paint:
            paint(item.step.tokens, item.step.sources)
        else:
            print(item.text, end="", flush=True)
    s = result.stats
    print(
        f"\n[{s.new_tokens} tokens, {s.forwards} forwards, {s.tokens_per_forward:.2f} tokens/forward, "
        f"{s.new_tokens / s.wall_s:.1f} tokens/s; drafting {s.draft_s:.2f} s, verification {s.verify_s:.2f} s, "
        f"prefill {s.prefill_s:.2f} s of {s.wall_s:.2f} s]",
        file=sys.stderr,
    )
    return 0


def _painter(engine):
    """Colour each token by how it was drafted (--show); the legend goes first, on stderr."""
    from rich.console import Console

    from .text import StepPainter

    StepPainter(engine.tokenizer, Console(stderr=True)).legend()
    return StepPainter(engine.tokenizer, Console())


def _info(args: argparse.Namespace) -> int:
    import torch

    from .models.catalog import cache_root

    engine = load_engine(args)
    loaded = engine.loaded
    cfg = engine.model.config
    print(f"model:        {loaded.name}")
    print(f"path:         {loaded.path}")
    print(f"architecture: {', '.join(cfg.architectures or [type(engine.model).__name__])} ({cfg.model_type})")
    print(f"dtype:        {engine.model.dtype}")
    print(f"device:       {engine.model.device}")
    print(f"parameters:   {loaded.num_parameters:,}")
    print(f"context:      {engine.runner.max_positions}")
    print(f"chat:         {'yes' if engine.has_chat_template else 'no'}")
    print(f"cache:        {cache_root()}")
    print(f"load time:    {loaded.load_s:.2f} s")
    print(f"kernels:      {', '.join(getattr(engine.model, 'lopa_kernels', ())) or 'stock transformers'}")
    print(f"threads:      {torch.get_num_threads()} ({engine.threads_source})")
    if engine.predictor is not None:
        p = engine.predictor.summary()
        print(f"predictor:    EAGLE-3, aux layers {p['aux_layers']}, {p['draft_vocab']} draft tokens, "
              f"{p['parameters']:,} parameters ({p['percent_of_base']:.2f}% of the base)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="lopa", description="Lossless lookahead parallel decoding for Hugging Face LLMs.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    gen = sub.add_parser("generate", help="generate text for one prompt")
    gen.add_argument("prompt")
    add_model_options(gen)
    gen.add_argument("--method", default="lopa", help="lopa (lookahead, default) or ar (plain, one token per forward)")
    gen.add_argument("--max-new-tokens", type=int, default=128)
    gen.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--top-k", type=int, default=0)
    gen.add_argument("--repetition-penalty", type=float, default=1.0)
    gen.add_argument("--presence-penalty", type=float, default=0.0, help="OpenAI's, in [-2, 2]")
    gen.add_argument("--frequency-penalty", type=float, default=0.0, help="OpenAI's, in [-2, 2]")
    gen.add_argument("--min-tokens", type=int, default=0, help="no end-of-sequence before this many tokens")
    gen.add_argument("--seed", type=int, default=None)
    gen.add_argument("--stop", action="append", help="stop string (repeatable)")
    gen.add_argument("--ignore-eos", action="store_true", help="generate exactly --max-new-tokens, past EOS")
    gen.add_argument("--no-chat", action="store_true", help="send the prompt as raw text, without the chat template")
    gen.add_argument("--json", action="store_true", help="print one JSON object with text, token_ids and stats")
    gen.add_argument("--show", action="store_true", help="colour each token by how it was drafted (predictor, n-gram, bonus)")
    gen.add_argument("--dllm", default=None, metavar="PATH", help="decode with a diffusion LM (see lopa.diffusion)")
    gen.set_defaults(func=_generate)
    diffusion_cli.add_dllm_options(gen)

    info = sub.add_parser("info", help="describe a model")
    add_model_options(info)
    info.set_defaults(func=_info)

    diffusion_cli.add_train_dllm_parser(sub)
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except LopaError as exc:
        print(f"lopa: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
