"""One benchmark from options to results.json, report.md and plots: the library entry point behind `lopa bench`."""

from __future__ import annotations

import json
import platform
import shlex
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import torch

from ..errors import InvalidRequestError
from .data import LOPA_SCENARIOS, load_questions, select
from .methods import ALL_METHODS, DESCRIPTIONS, REFERENCE, build_methods
from .metrics import aggregate, lopa_table
from .plots import write_plots
from .report import report_md
from .schema import SCHEMA_VERSION, validate
from .suite import Item, build_items, long_enough, run_items

TABLE_METHODS = (REFERENCE, "lopa")


@dataclass
class BenchOptions:
    data: str | None = None  # Spec-Bench JSONL; None = the built-in set
    categories: list[str] | None = None
    limit: int | None = None  # prompts per category
    seed: int = 0
    multi_turn: bool = False
    methods: list[str] = field(default_factory=lambda: list(ALL_METHODS))
    max_new_tokens: int = 128
    lopa_table: bool = False  # run the three LoPA scenarios, each with its own token budget
    scenarios: list[str] | None = None  # subset of the LoPA scenarios (implies lopa_table)
    chat: bool | None = None  # None: the chat template when the model has one
    model: str | None = None  # the --model spec, to find its GGUF for llama.cpp
    model_flags: list[str] = field(default_factory=list)  # the other model options given (--dtype int4, ...)
    gguf: str | None = None
    gguf_precision: str = "shipped"  # the llama.cpp methods' weights: the GGUF as shipped, or lopa's f32 / bf16 copy
    llamacpp_flash_attn: bool = False
    progress: bool = True

    def validate(self) -> None:
        if self.limit is not None and self.limit < 1:
            raise InvalidRequestError(f"--limit must be >= 1, got {self.limit}")
        if self.max_new_tokens < 1:
            raise InvalidRequestError(f"--max-new-tokens must be >= 1, got {self.max_new_tokens}")
        if self.data is not None and not Path(self.data).is_file():
            raise InvalidRequestError(f"benchmark data {self.data} does not exist")
        known = [s.name for s in LOPA_SCENARIOS]
        unknown = sorted(set(self.scenarios or []) - set(known))
        if unknown:
            raise InvalidRequestError(f"unknown scenarios {unknown}; choose from {', '.join(known)}")

    def command(self) -> str:
        """The `lopa bench` command line that reproduces this run."""
        argv = ["lopa", "bench"]
        for flag, value in (
            ("--model", self.model),
            ("--data", self.data),
            ("--gguf", self.gguf),
            ("--gguf-precision", None if self.gguf_precision == "shipped" else self.gguf_precision),
            ("--categories", ",".join(self.categories or []) or None),
            ("--limit", self.limit),
        ):
            if value is not None:
                argv += [flag, str(value)]
            if flag == "--model":
                argv += self.model_flags
        argv += ["--seed", str(self.seed), "--methods", ",".join(self.methods)]
        if self.lopa_table or self.scenarios:
            argv += ["--lopa-table"] + (["--scenarios", ",".join(self.scenarios)] if self.scenarios else [])
        else:
            argv += ["--max-new-tokens", str(self.max_new_tokens)] + (["--multi-turn"] if self.multi_turn else [])
        argv += ["--llamacpp-flash-attn"] if self.llamacpp_flash_attn else []
        return shlex.join(argv + (["--no-chat"] if self.chat is False else []))


def _items(engine, opts: BenchOptions) -> list[Item]:
    questions = load_questions(opts.data)
    if not (opts.lopa_table or opts.scenarios):
        return build_items(
            select(questions, opts.categories, opts.limit, opts.seed), opts.max_new_tokens, opts.multi_turn
        )
    items = []
    for s in LOPA_SCENARIOS:
        if opts.scenarios and s.name not in opts.scenarios:
            continue
        pool = long_enough(engine, [q for q in questions if q.category in s.categories], s.min_prompt_tokens, opts.chat)
        items += [Item(q, 0, s.max_new_tokens, s.name) for q in select(pool, None, opts.limit, opts.seed)]
    return items


def _gguf_finder(opts: BenchOptions):
    def find() -> Path | None:
        from ..models.catalog import CATALOG, DEFAULT_MODEL, fetch_gguf
        from ..models.gguf_precision import full_precision_gguf

        if opts.gguf:
            path = Path(opts.gguf)
        elif opts.model is None or opts.model in CATALOG:
            path = fetch_gguf(opts.model or DEFAULT_MODEL)
        elif opts.model.endswith(".gguf"):
            path = Path(opts.model)
        else:
            return None
        return path if opts.gguf_precision == "shipped" else full_precision_gguf(path, opts.gguf_precision)

    return find


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version(), "platform": platform.platform(), "torch": torch.__version__}
    for dist in ("transformers", "lopa", "llama-cpp-python"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return versions


def run_benchmark(engine, opts: BenchOptions) -> dict:
    """Run the benchmark on a loaded engine and return the results (the content of results.json)."""
    opts.validate()
    items = _items(engine, opts)
    if not items:
        raise InvalidRequestError("no prompts selected (check --data, --categories and the scenarios)")
    methods, skipped = build_methods(
        opts.methods, engine, _gguf_finder(opts), torch.get_num_threads(), opts.llamacpp_flash_attn
    )
    records = run_items(engine, methods, items, opts.chat, opts.progress)
    aggregated = aggregate(records, list(methods))
    results = {
        "schema_version": SCHEMA_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": {
            "model": engine.loaded.name,
            "dtype": getattr(engine.model, "lopa_precision", None) or str(engine.model.dtype).removeprefix("torch."),
            "device": str(engine.model.device),
            "threads": torch.get_num_threads(),
            "data": opts.data,
            "categories": opts.categories,
            "limit": opts.limit,
            "seed": opts.seed,
            "multi_turn": opts.multi_turn,
            "max_new_tokens": None if opts.lopa_table or opts.scenarios else opts.max_new_tokens,
            "lopa_table": bool(opts.lopa_table or opts.scenarios),
            "draft_model": engine.draft.draft_model,
            "draft_dtype": engine.draft_model_dtype if engine.draft.draft_model else None,
            "gguf_precision": opts.gguf_precision,
            "llamacpp_flash_attn": opts.llamacpp_flash_attn,
            "methods": opts.methods,
            "versions": _versions(),
        },
        "methods": {
            name: {
                "status": "skipped" if name in skipped else "ok",
                "lossless": methods[name].lossless if name in methods else None,
                "description": DESCRIPTIONS[name],
                "reason": skipped.get(name),
            }
            for name in opts.methods
        },
        "prompts": records,
        "aggregate": aggregated,
        "lopa_table": lopa_table(aggregated, LOPA_SCENARIOS),
    }
    errors = validate(results)
    assert not errors, errors  # a bug in this package, not a user error
    return results


def write_outputs(results: dict, out: Path, command: str) -> list[Path]:
    """results.json, report.md and the PNG plots in `out`; returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    plots = write_plots(results, out)
    (out / "report.md").write_text(report_md(results, plots, command))
    return [out / "results.json", out / "report.md", *(out / p for p in plots)]
