"""`lopa train-heads`: self-distil lookahead heads for a model (see src/lopa/data/heads/README.md);
`lopa build-corpus`: generate the self-distillation corpus (see src/lopa/data/corpus/README.md);
`lopa train-predictor`: train an EAGLE-3 predictor on that corpus (features recomputed by teacher forcing)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path


def register(subparsers) -> None:
    from ..cli import add_model_options

    p = subparsers.add_parser("train-heads", help="train lookahead heads by self-distillation")
    add_model_options(p)
    p.add_argument("--out", required=True, type=Path, help="output heads directory")
    p.add_argument("--data-dir", type=Path, default=None, help="cache of generated data (default: under the temp dir)")
    p.add_argument("--prompts", type=int, default=384, help="training prompts to answer (written by lopa.train.prompts)")
    p.add_argument("--max-new-tokens", type=int, default=160, help="length of each self-distilled answer")
    p.add_argument("--gen-batch", type=int, default=16, help="prompts answered per generate() call")
    p.add_argument("--num-heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=1, help="residual blocks per head after its input block")
    p.add_argument("--draft-vocab", type=int, default=8192, help="most frequent tokens the heads can propose")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--checkpoint-every", type=int, default=250)
    p.add_argument("--max-minutes", type=float, default=0.0, help="stop training after this long (0 = no limit)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (the CPU is shared: keep it low)")
    p.add_argument("--grad-checkpoint", action="store_true", help="recompute vocab logits in backward (less memory)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint and the cached data")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_train_heads, no_heads=True)

    c = subparsers.add_parser("build-corpus", help="generate the self-distillation corpus (resumable, in chunks)")
    c.add_argument("--out", required=True, type=Path, help="corpus directory (an existing one is resumed)")
    c.add_argument("--model", default=None, help="catalog name, HF model directory or .gguf file (default: SmolLM2-135M-Instruct)")
    c.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    c.add_argument("--prompts", type=int, default=8192, help="prompts asked of the sources (fewer remain after deduplication)")
    c.add_argument("--chunk-size", type=int, default=64, help="prompts answered per chunk file")
    c.add_argument("--batch", type=int, default=16, help="sequences per generate() call")
    c.add_argument("--max-new-tokens", type=int, default=256)
    c.add_argument("--sampled-fraction", type=float, default=0.5, help="share of sampled (not greedy) answers")
    c.add_argument("--temperature", type=float, default=0.8, help="for sampled answers and self-instruct")
    c.add_argument("--top-p", type=float, default=0.95)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--chunks", type=int, default=None, help="stop after the first N chunks exist (default: all)")
    c.add_argument("--max-minutes", type=float, default=0.0, help="start no chunk after this long (0 = no limit)")
    c.add_argument("--threads", type=int, default=1, help="torch threads (the CPU is shared: keep it low)")
    c.set_defaults(func=_build_corpus)

    t = subparsers.add_parser("train-predictor", help="train an EAGLE-3 predictor on a self-distillation corpus")
    t.add_argument("--corpus", required=True, type=Path, help="a `lopa build-corpus` directory")
    t.add_argument("--out", required=True, type=Path, help="predictor directory (EAGLE-3 / speculators layout)")
    t.add_argument("--model", default=None, help="the corpus's base model (default: SmolLM2-135M-Instruct)")
    t.add_argument("--sequences", type=int, default=None, help="use the first N corpus sequences (default: all)")
    t.add_argument("--held-out", type=int, default=48, help="first N sequences kept out of training, for accuracy")
    t.add_argument("--epochs", type=int, default=10)
    t.add_argument("--batch-size", type=int, default=8, help="sequences per step")
    t.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (warmup, then cosine decay)")
    t.add_argument("--ttt-steps", type=int, default=3, help="draft steps unrolled in training (EAGLE-3's training-time test)")
    t.add_argument("--draft-vocab", type=int, default=2048, help="most frequent target tokens the predictor can propose")
    t.add_argument("--intermediate-size", type=int, default=1024, help="the predictor layer's MLP width")
    t.add_argument("--threads", type=int, default=1, help="torch threads (the CPU is shared: keep it low)")
    t.add_argument("--features-dir", type=Path, default=Path(tempfile.gettempdir()) / "lopa-predictor-features",
                   help="cache of the teacher-forced features (recomputed when missing)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--resume", action="store_true", help="continue from OUT's last epoch")
    t.set_defaults(func=_train_predictor)


def _train_heads(args: argparse.Namespace) -> int:
    import torch

    from ..cli import load_engine
    from ..draft.heads import HeadsConfig, base_identity
    from .data import build_data
    from .prompts import training_prompts
    from .trainer import TrainSettings, train_heads

    torch.set_num_threads(args.threads)
    engine = load_engine(args)
    loaded = engine.loaded
    identity = base_identity(loaded)
    command = "lopa " + shlex.join(sys.argv[1:])
    cache = args.data_dir or Path(tempfile.gettempdir()) / "lopa-heads-data" / f"{identity['fingerprint']}-{args.prompts}"
    prompts = [engine.encode_prompt(p) for p in training_prompts(args.prompts, args.seed)]
    data = build_data(
        loaded.model, prompts, cache, max_new_tokens=args.max_new_tokens, batch_size=args.gen_batch, num_targets=args.num_heads
    )
    config = HeadsConfig(
        num_heads=args.num_heads,
        num_layers=args.layers,
        training={"command": command, "prompts": args.prompts, "max_new_tokens": args.max_new_tokens, "rows": len(data)},
        **identity,
    )
    settings = TrainSettings(
        steps=args.steps, batch_size=args.batch_size, lr=args.lr, eval_every=args.eval_every,
        checkpoint_every=args.checkpoint_every, grad_checkpoint=args.grad_checkpoint, max_minutes=args.max_minutes,
        seed=args.seed,
    )
    result = train_heads(loaded, data, config, args.draft_vocab, args.out, settings, resume=args.resume)
    print(json.dumps({"out": str(args.out), "held_out": result}))
    return 0


def _build_corpus(args: argparse.Namespace) -> int:
    import torch

    from ..models.loading import load_model
    from .corpus import CorpusSettings, build_corpus

    torch.set_num_threads(args.threads)
    loaded = load_model(args.model, device=args.device, pack=False)  # stock generate(), no lopa layers
    settings = CorpusSettings(
        prompts=args.prompts, chunk_size=args.chunk_size, batch=args.batch, max_new_tokens=args.max_new_tokens,
        sampled_fraction=args.sampled_fraction, temperature=args.temperature, top_p=args.top_p, seed=args.seed,
    )
    summary = build_corpus(args.out, loaded.model, loaded.tokenizer, settings, chunks=args.chunks, max_minutes=args.max_minutes)
    print(json.dumps(summary))
    return 0


def _train_predictor(args: argparse.Namespace) -> int:
    import torch

    from ..draft.predictor import default_aux_layers
    from ..models.loading import load_model
    from .corpus import load_corpus
    from .plot import plot_accuracy
    from .predictor import LOG, PredictorSettings, teacher_force, train_predictor

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    loaded = load_model(args.model, pack=False)
    sequences = [(prompt, answer) for prompt, answer, _ in load_corpus(args.corpus)][: args.sequences]
    held = args.held_out
    aux = default_aux_layers(loaded.model.config.get_text_config().num_hidden_layers)
    held_out, train = (teacher_force(loaded.model, part, aux, cache_dir=args.features_dir) for part in (sequences[:held], sequences[held:]))
    settings = PredictorSettings(
        epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, ttt_steps=args.ttt_steps, seed=args.seed
    )
    predictor, log = train_predictor(
        loaded.model, train, held_out=held_out, aux_layers=aux, draft_vocab_size=args.draft_vocab,
        intermediate_size=args.intermediate_size, settings=settings, out=args.out, resume=args.resume, name=loaded.name,
    )
    plot_accuracy(args.out / LOG, args.out / "accuracy.png")
    result = {"command": "lopa " + shlex.join(sys.argv[1:]), "train_sequences": len(train), "train_rows": len(train.ids),
              "held_out_sequences": len(held_out), "loss": log[-1]["loss"], "held_out_top1_by_depth": log[-1]["held_out_top1"],
              "wall_seconds_this_run": round(time.perf_counter() - start), **predictor.summary()}
    (args.out / "held_out.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))
    return 0
