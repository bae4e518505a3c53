"""`python -m lopa.diffusion train-dllm|generate|bench`: the diffusion CLI without the main `lopa` parser."""

import argparse
import sys

from .cli import add_dllm_options, add_train_dllm_parser, run_bench, run_generate

parser = argparse.ArgumentParser(prog="python -m lopa.diffusion")
sub = parser.add_subparsers(required=True)
add_train_dllm_parser(sub)
gen = sub.add_parser("generate", help="decode one prompt with a diffusion LM")
gen.add_argument("prompt")
bench = sub.add_parser("bench", help="baseline vs LoPA benchmark")
bench.add_argument("--limit", type=int, default=16, help="prompts")
bench.add_argument("--out", default=None)
for p, fn in ((gen, run_generate), (bench, run_bench)):
    p.add_argument("--dllm", default=None, help="model directory (default: the shipped model)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--json", action="store_true")
    add_dllm_options(p)
    p.set_defaults(func=fn)
args = parser.parse_args()
sys.exit(args.func(args))
