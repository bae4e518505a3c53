"""The `lopa` command line: generate, info, and the subcommands each feature package registers."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from .bench import cli as bench_cli
from .cli_options import add_model_options, load_engine
from .diffusion import cli as diffusion_cli
from .errors import InvalidRequestError, LopaError
from .serve import cli as serve_cli
from .train import cli as train_cli


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line on stderr and exits 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"lopa: error: {message}\n")


def _generate(args: argparse.Namespace) -> int:
    from .config import GenerationConfig
    from .decode.output import GenerationResult

    cfg = GenerationConfig.from_options(
        args, max_new_tokens=args.max_new_tokens, stop=args.stop or [], method=args.method
    )
    cfg.validate()  # fail on bad values before spending seconds on loading the model
    if not args.prompt.strip():
        raise InvalidRequestError("the prompt is empty")
    engine = load_engine(args)
    chat = False if args.no_chat else None
    if args.json:
        print(json.dumps(engine.generate(args.prompt, cfg, chat=chat).to_dict()))
        return 0
    result = None
    paint = _painter(engine) if args.show else None
    for item in engine.stream_steps(args.prompt, cfg, chat=chat):
        if isinstance(item, GenerationResult):
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
    from .models.int4 import kernel_name

    engine = load_engine(args)
    loaded = engine.loaded
    cfg = engine.model.config
    print(f"model:        {loaded.name}")
    print(f"path:         {loaded.path}")
    print(f"architecture: {', '.join(cfg.architectures or [type(engine.model).__name__])} ({cfg.model_type})")
    print(f"dtype:        {engine.model.dtype}")
    if getattr(engine.model, "lopa_precision", None):
        layers, detail = getattr(engine.model, "lopa_int4_layers", None), ""
        if layers:
            detail = (
                f" ({layers['from_file']} linear layers from the file's blocks, {layers['quantized_by_lopa']} by lopa;"
                f" kernel: {kernel_name(engine.model)})"
            )
        print(f"precision:    {engine.model.lopa_precision}{detail}")
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
        print(
            f"predictor:    EAGLE-3, aux layers {p['aux_layers']}, {p['draft_vocab']} draft tokens, "
            f"{p['parameters']:,} parameters ({p['percent_of_base']:.2f}% of the base)"
        )
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
    gen.add_argument("--min-p", type=float, default=0.0, help="drop tokens below this x the likeliest's probability")
    gen.add_argument("--repetition-penalty", type=float, default=1.0)
    gen.add_argument("--presence-penalty", type=float, default=0.0, help="OpenAI's, in [-2, 2]")
    gen.add_argument("--frequency-penalty", type=float, default=0.0, help="OpenAI's, in [-2, 2]")
    gen.add_argument("--min-tokens", type=int, default=0, help="no end-of-sequence before this many tokens")
    gen.add_argument(
        "--seed",
        type=int,
        default=None,
        help="sampling: the same seed gives the same text, with or without lookahead (--json reports the one drawn)",
    )
    gen.add_argument("--stop", action="append", help="stop string (repeatable)")
    gen.add_argument("--ignore-eos", action="store_true", help="generate exactly --max-new-tokens, past EOS")
    gen.add_argument("--no-chat", action="store_true", help="send the prompt as raw text, without the chat template")
    gen.add_argument("--json", action="store_true", help="print one JSON object with text, token_ids and stats")
    gen.add_argument(
        "--show", action="store_true", help="colour each token by how it was drafted (predictor, n-gram, bonus)"
    )
    gen.set_defaults(func=_generate)

    info = sub.add_parser("info", help="describe a model")
    add_model_options(info)
    info.set_defaults(func=_info)

    diffusion_cli.add_train_dllm_parser(sub)
    # Feature packages add their subcommands through a `register(subparsers)` function.
    for module in (train_cli, serve_cli, bench_cli):
        module.register(sub)
    for name, run_dllm in (("generate", diffusion_cli.run_generate), ("bench", diffusion_cli.run_bench)):
        _add_dllm(sub.choices[name], run_dllm)
    return parser


def _add_dllm(parser: argparse.ArgumentParser, run_dllm: Callable[[argparse.Namespace], int]) -> None:
    """`--dllm PATH`: the command runs on a diffusion LM (lopa.diffusion) instead."""
    parser.add_argument(
        "--dllm", default=None, metavar="PATH", help="run on a diffusion LM instead (see lopa.diffusion)"
    )
    diffusion_cli.add_dllm_options(parser)
    run_ar = parser.get_default("func")
    parser.set_defaults(func=lambda args: run_dllm(args) if args.dllm else run_ar(args))


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
