"""`lopa build-corpus`: generate the self-distillation corpus (see src/lopa/data/corpus/README.md);
`lopa train-heads` (alias `train-predictor`): train the EAGLE-3 lookahead predictor on that corpus, features
recomputed by teacher forcing (see src/lopa/data/predictor/README.md); `lopa export-predictor`: a copy of a
predictor whose verifier vLLM, SGLang and speculators can load (train/export.py)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path


def register(subparsers) -> None:
    c = subparsers.add_parser("build-corpus", help="generate the self-distillation corpus (resumable, in chunks)")
    c.add_argument("--out", required=True, type=Path, help="corpus directory (an existing one is resumed)")
    c.add_argument(
        "--model", default=None, help="catalog name, HF model directory or .gguf file (default: SmolLM2-135M-Instruct)"
    )
    c.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    c.add_argument(
        "--prompts", type=int, default=8192, help="prompts asked of the sources (fewer remain after deduplication)"
    )
    c.add_argument("--chunk-size", type=int, default=64, help="prompts answered per chunk file")
    c.add_argument("--batch", type=int, default=32, help="sequences in flight in the engine's batched step")
    c.add_argument(
        "--dtype",
        choices=["float32", "bfloat16", "int8"],
        default="float32",
        help="the answering copy's precision (recorded per sequence; the trainer teacher-forces in fp32)",
    )
    c.add_argument("--max-new-tokens", type=int, default=256)
    c.add_argument("--sampled-fraction", type=float, default=0.5, help="share of sampled (not greedy) answers")
    c.add_argument("--temperature", type=float, default=0.8, help="for sampled answers and self-instruct")
    c.add_argument("--top-p", type=float, default=0.95)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--chunks", type=int, default=None, help="stop after the first N chunks exist (default: all)")
    c.add_argument("--max-minutes", type=float, default=0.0, help="start no chunk after this long (0 = no limit)")
    c.add_argument("--threads", type=int, default=None, help="torch threads (default: OMP_NUM_THREADS, else all)")
    c.set_defaults(func=_build_corpus)

    t = subparsers.add_parser(
        "train-heads",
        aliases=["train-predictor"],
        help="train the EAGLE-3 lookahead predictor on a self-distillation corpus",
    )
    t.add_argument(
        "--corpus", required=True, type=Path, nargs="+", help="`lopa build-corpus` directories, read in this order"
    )
    t.add_argument("--out", required=True, type=Path, help="predictor directory (EAGLE-3 / speculators layout)")
    t.add_argument("--model", default=None, help="the corpus's base model (default: SmolLM2-135M-Instruct)")
    t.add_argument("--sequences", type=int, default=None, help="use the first N corpus sequences (default: all)")
    t.add_argument("--held-out", type=int, default=48, help="first N sequences kept out of training, for accuracy")
    t.add_argument("--epochs", type=int, default=10)
    t.add_argument("--batch-size", type=int, default=8, help="sequences per step")
    t.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (warmup, then cosine decay)")
    t.add_argument(
        "--labels",
        action="store_true",
        help="train on the base's argmax next tokens only (default: distil its next-token distribution)",
    )
    t.add_argument(
        "--ttt-steps", type=int, default=3, help="draft steps unrolled in training (EAGLE-3's training-time test)"
    )
    t.add_argument(
        "--draft-vocab", type=int, default=2048, help="most frequent target tokens the predictor can propose"
    )
    t.add_argument("--intermediate-size", type=int, default=1024, help="the predictor layer's MLP width")
    t.add_argument("--threads", type=int, default=1, help="torch threads (the CPU is shared: keep it low)")
    t.add_argument(
        "--features-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "lopa-predictor-features",
        help="cache of the teacher-forced features (recomputed when missing)",
    )
    t.add_argument(
        "--online",
        action="store_true",
        help="teacher-force each training batch when it is drawn, storing no features (for a GPU and a corpus "
        "whose features outgrow the disk); the held-out split is still computed once",
    )
    t.add_argument(
        "--device", default="cpu", help="cpu or cuda[:N]: where the base teacher-forces and the predictor trains"
    )
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--resume", action="store_true", help="continue from OUT's last checkpoint (mid-epoch too)")
    t.add_argument("--checkpoint-minutes", type=float, default=10.0, help="checkpoint within an epoch this often, too")
    t.add_argument("--max-minutes", type=float, default=0.0, help="checkpoint and stop after this long (0 = no limit)")
    t.set_defaults(func=_train_predictor)

    e = subparsers.add_parser(
        "export-predictor", help="copy a predictor, its verifier named so vLLM, SGLang and speculators load it"
    )
    e.add_argument("--out", required=True, type=Path, help="the directory to write (config.json, model.safetensors)")
    e.add_argument("--predictor", type=Path, default=None, help="predictor directory (default: the shipped one)")
    v = e.add_mutually_exclusive_group()
    v.add_argument(
        "--verifier",
        default=None,
        help="the target model: hub id (owner/name), local HF model directory or catalog name "
        "(default: the hub id of the predictor's base model)",
    )
    v.add_argument(
        "--verifier-dir",
        type=Path,
        default=None,
        help="write lopa's HF directory of the base model here (the weights the predictor was trained on; "
        "no hub access needed) and name it as the verifier",
    )
    e.set_defaults(func=_export_predictor)


def _build_corpus(args: argparse.Namespace) -> int:
    import torch

    from ..api import Engine
    from .corpus import CorpusSettings, build_corpus

    dtype = getattr(torch, args.dtype) if args.dtype in ("float32", "bfloat16") else args.dtype
    engine = Engine.from_pretrained(args.model, device=args.device, dtype=dtype, threads=args.threads)
    settings = CorpusSettings(
        prompts=args.prompts,
        chunk_size=args.chunk_size,
        batch=args.batch,
        max_new_tokens=args.max_new_tokens,
        sampled_fraction=args.sampled_fraction,
        temperature=args.temperature,
        top_p=args.top_p,
        seed=args.seed,
    )
    summary = build_corpus(args.out, engine, settings, chunks=args.chunks, max_minutes=args.max_minutes)
    print(json.dumps(summary))
    return 0


def _train_predictor(args: argparse.Namespace) -> int:
    import torch

    from ..draft.predictor import default_aux_layers
    from ..models.loading import load_model
    from .corpus import load_corpus
    from .plot import plot_accuracy
    from .predictor import LOG, OnlineTeacher, PredictorSettings, teacher_force, train_predictor

    torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = True  # a GPU's fp32 teacher forcing on tensor cores (features are bf16)
    start = time.perf_counter()
    loaded = load_model(args.model, fast=False, device=args.device, dtype=torch.float32)
    sequences = [(prompt, answer) for corpus in args.corpus for prompt, answer, _ in load_corpus(corpus)]
    sequences = sequences[: args.sequences]
    held = args.held_out
    aux = default_aux_layers(loaded.model.config.get_text_config().num_hidden_layers)
    cache = None if args.online else args.features_dir
    held_out = teacher_force(loaded.model, sequences[:held], aux, cache_dir=cache)
    train = (
        OnlineTeacher(loaded.model, sequences[held:], aux)
        if args.online
        else teacher_force(loaded.model, sequences[held:], aux, cache_dir=cache)
    )
    settings = PredictorSettings(
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        ttt_steps=args.ttt_steps,
        seed=args.seed,
        distill=not args.labels,
    )
    predictor, log = train_predictor(
        loaded.model,
        train,
        held_out=held_out,
        aux_layers=aux,
        draft_vocab_size=args.draft_vocab,
        intermediate_size=args.intermediate_size,
        settings=settings,
        out=args.out,
        resume=args.resume,
        name=loaded.name,
        checkpoint_minutes=args.checkpoint_minutes,
        max_minutes=args.max_minutes,
    )
    if len(log) < settings.epochs:
        print(f"stopped after {args.max_minutes} minutes with {len(log)} epochs done: run again with --resume")
        return 0
    plot_accuracy(args.out / LOG, args.out / "accuracy.png")
    result = {
        "command": "lopa " + shlex.join(sys.argv[1:]),
        "train_sequences": len(train),
        "train_rows": sum(map(train.length, range(len(train)))),
        "held_out_sequences": len(held_out),
        "loss": log[-1]["loss"],
        "held_out_top1_by_depth": log[-1]["held_out_top1"],
        "wall_seconds_this_run": round(time.perf_counter() - start),
        **predictor.summary(),
    }
    (args.out / "held_out.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))
    return 0


def _export_predictor(args: argparse.Namespace) -> int:
    from .export import export_predictor

    print(json.dumps(export_predictor(args.out, args.predictor, args.verifier, args.verifier_dir)))
    return 0
