"""The shape of results.json, as data, and a validator for it (documented in README "Benchmark").

A spec is a Python type, a tuple of types, `Nullable(spec)`, `ListOf(spec)`, `MapOf(spec)`
(string keys) or a dict of required keys -> spec (extra keys are allowed, so the file can
grow without breaking readers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SCHEMA_VERSION = 5  # 3: config.draft_model, config.draft_dtype; 4: config.gguf_precision, config.llamacpp_flash_attn;
# 5: runs.forwards counts the prefill's forward (tokens_per_forward = new_tokens / forwards)
NUM = (int, float)


@dataclass(frozen=True)
class Nullable:
    spec: Any


@dataclass(frozen=True)
class ListOf:
    spec: Any


@dataclass(frozen=True)
class MapOf:
    spec: Any


RUN = {
    "new_tokens": int,
    "wall_s": NUM,
    "prefill_s": NUM,
    "forwards": Nullable(int),
    "tokens_per_forward": Nullable(NUM),
    "tokens_per_s": NUM,
    "accept_lengths": ListOf(int),
    "draft_s": Nullable(NUM),
    "verify_s": Nullable(NUM),
    "predictor_depth1_hits": Nullable(int),
    "predictor_depth1_trials": Nullable(int),
    "peak_rss_mb": NUM,
    "exact_match": Nullable(bool),
    "speedup": Nullable(NUM),
    "perplexity": Nullable(NUM),
    "token_ids": ListOf(int),
}
PROMPT = {
    "id": str,
    "question_id": str,
    "category": str,
    "turn": int,
    "scenario": Nullable(str),
    "max_new_tokens": int,
    "prompt_tokens": int,
    "reference_perplexity": Nullable(NUM),
    "runs": MapOf(RUN),
}
SUMMARY = {
    "prompts": int,
    "new_tokens": int,
    "latency_median_s": Nullable(NUM),
    "latency_p90_s": Nullable(NUM),
    "prefill_median_s": Nullable(NUM),
    "tokens_per_s": NUM,
    "tokens_per_forward_median": Nullable(NUM),
    "tokens_per_forward_mean": Nullable(NUM),
    "accept_length_hist": MapOf(int),
    "accept_length_mean": Nullable(NUM),
    "draft_share_median": Nullable(NUM),
    "verify_share_median": Nullable(NUM),
    "predictor_depth1_accept": Nullable(NUM),
    "speedup_median": Nullable(NUM),
    "exact_match_rate": Nullable(NUM),
    "peak_rss_mb": Nullable(NUM),
    "perplexity_median": Nullable(NUM),
    "reference_perplexity_median": Nullable(NUM),
}
RESULTS = {
    "schema_version": int,
    "created": str,
    "config": {
        "model": str,
        "dtype": str,
        "device": str,
        "threads": int,
        "data": Nullable(str),
        "categories": Nullable(ListOf(str)),
        "limit": Nullable(int),
        "seed": int,
        "multi_turn": bool,
        "max_new_tokens": Nullable(int),
        "lopa_table": bool,
        "draft_model": Nullable(str),
        "draft_dtype": Nullable(str),
        "gguf_precision": str,
        "llamacpp_flash_attn": bool,
        "methods": ListOf(str),
        "versions": MapOf(str),
    },
    "methods": MapOf({"status": str, "lossless": Nullable(bool), "description": str, "reason": Nullable(str)}),
    "prompts": ListOf(PROMPT),
    "aggregate": MapOf({"overall": SUMMARY, "by_category": MapOf(SUMMARY), "by_scenario": MapOf(SUMMARY)}),
    "lopa_table": ListOf(
        {
            "scenario": str,
            "length": int,
            "prompts": int,
            "ar_ms": NUM,
            "lopa_ms": NUM,
            "speedup": Nullable(NUM),
            "exact_match_rate": Nullable(NUM),
            "tokens_per_forward_median": Nullable(NUM),
        }
    ),
}


def _check(value: Any, spec: Any, where: str, errors: list[str]) -> None:
    if isinstance(spec, Nullable):
        if value is not None:
            _check(value, spec.spec, where, errors)
    elif isinstance(spec, ListOf):
        if not isinstance(value, list):
            errors.append(f"{where}: expected a list, got {type(value).__name__}")
            return
        for i, item in enumerate(value):
            _check(item, spec.spec, f"{where}[{i}]", errors)
    elif isinstance(spec, (MapOf, dict)):
        if not isinstance(value, dict):
            errors.append(f"{where}: expected an object, got {type(value).__name__}")
            return
        if isinstance(spec, MapOf):
            for key, item in value.items():
                _check(item, spec.spec, f"{where}.{key}", errors)
            return
        for key, sub in spec.items():
            if key not in value:
                errors.append(f"{where}: missing {key!r}")
            else:
                _check(value[key], sub, f"{where}.{key}", errors)
    else:
        types = spec if isinstance(spec, tuple) else (spec,)
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            errors.append(f"{where}: expected {'/'.join(t.__name__ for t in types)}, got {type(value).__name__}")


def validate(results: dict) -> list[str]:
    """Every way `results` departs from RESULTS (empty when it conforms), plus cross-checks."""
    errors: list[str] = []
    _check(results, RESULTS, "results", errors)
    if errors:
        return errors
    if results["schema_version"] != SCHEMA_VERSION:
        errors.append(f"results.schema_version: expected {SCHEMA_VERSION}")
    ran = {name for name, m in results["methods"].items() if m["status"] == "ok"}
    for status in {m["status"] for m in results["methods"].values()} - {"ok", "skipped"}:
        errors.append(f"results.methods: unknown status {status!r}")
    for i, prompt in enumerate(results["prompts"]):
        if set(prompt["runs"]) != ran:
            errors.append(
                f"results.prompts[{i}].runs: methods {sorted(prompt['runs'])} != those that ran {sorted(ran)}"
            )
    if set(results["aggregate"]) != ran:
        errors.append(f"results.aggregate: methods {sorted(results['aggregate'])} != those that ran {sorted(ran)}")
    return errors
