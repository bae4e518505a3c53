"""Aggregate per-prompt runs into per-method figures, overall, per category and per scenario.

Speedup is the median of per-prompt ratios (hf wall time / method wall time), not a
ratio of sums, so one long prompt cannot dominate it.
"""

from __future__ import annotations

from collections import Counter
from statistics import median

import numpy as np

from .data import Scenario


def _median(values: list[float]) -> float | None:
    return float(median(values)) if values else None


def _p90(values: list[float]) -> float | None:
    return float(np.percentile(values, 90)) if values else None


def _present(runs: list[dict], key: str) -> list[float]:
    return [r[key] for r in runs if r[key] is not None]


def summarize(runs: list[dict], reference_perplexities: list[float]) -> dict:
    """Figures for one method over a set of prompts."""
    walls = [r["wall_s"] for r in runs]
    tokens = sum(r["new_tokens"] for r in runs)
    accepts = [a for r in runs for a in r["accept_lengths"]]
    matches = _present(runs, "exact_match")
    tpf = _present(runs, "tokens_per_forward")
    ppl = _present(runs, "perplexity")
    hits, trials = sum(_present(runs, "predictor_depth1_hits")), sum(_present(runs, "predictor_depth1_trials"))
    return {
        "prompts": len(runs),
        "new_tokens": tokens,
        "latency_median_s": _median(walls),
        "latency_p90_s": _p90(walls),
        "prefill_median_s": _median([r["prefill_s"] for r in runs]),
        "tokens_per_s": tokens / sum(walls) if sum(walls) > 0 else 0.0,
        "tokens_per_forward_median": _median(tpf),
        "tokens_per_forward_mean": float(np.mean(tpf)) if tpf else None,
        "accept_length_hist": {str(k): v for k, v in sorted(Counter(accepts).items())},
        "accept_length_mean": float(np.mean(accepts)) if accepts else None,
        "draft_share_median": _median(
            [r["draft_s"] / r["wall_s"] for r in runs if r["draft_s"] is not None and r["wall_s"] > 0]
        ),
        "verify_share_median": _median(
            [r["verify_s"] / r["wall_s"] for r in runs if r["verify_s"] is not None and r["wall_s"] > 0]
        ),
        "predictor_depth1_accept": hits / trials if trials else None,
        "speedup_median": _median(_present(runs, "speedup")),
        "exact_match_rate": sum(matches) / len(matches) if matches else None,
        "peak_rss_mb": max(r["peak_rss_mb"] for r in runs) if runs else None,
        "perplexity_median": _median(ppl),
        "reference_perplexity_median": _median(reference_perplexities) if ppl else None,
    }


def _group(records: list[dict], key: str) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = {}
    for record in records:
        if record[key] is not None:
            groups.setdefault(record[key], []).append(record)
    return groups


def _summary(records: list[dict], method: str) -> dict:
    ref = [r["reference_perplexity"] for r in records if r["reference_perplexity"] is not None]
    return summarize([r["runs"][method] for r in records if method in r["runs"]], ref)


def aggregate(records: list[dict], methods: list[str]) -> dict:
    """{method: {"overall": ..., "by_category": {...}, "by_scenario": {...}}}."""
    categories = _group(records, "category")
    scenarios = _group(records, "scenario")
    return {
        m: {
            "overall": _summary(records, m),
            "by_category": {c: _summary(rs, m) for c, rs in categories.items()},
            "by_scenario": {s: _summary(rs, m) for s, rs in scenarios.items()},
        }
        for m in methods
    }


def lopa_table(aggregated: dict, scenarios: tuple[Scenario, ...], ar: str = "hf", lopa: str = "lopa") -> list[dict]:
    """Rows of the LoPA table: AR (transformers generate) against lopa, per scenario that ran."""
    rows = []
    for s in scenarios:
        base = aggregated.get(ar, {}).get("by_scenario", {}).get(s.name)
        ours = aggregated.get(lopa, {}).get("by_scenario", {}).get(s.name)
        if not base or not ours:
            continue
        rows.append(
            {
                "scenario": s.name,
                "length": s.max_new_tokens,
                "prompts": ours["prompts"],
                "ar_ms": base["latency_median_s"] * 1000,
                "lopa_ms": ours["latency_median_s"] * 1000,
                "speedup": ours["speedup_median"],
                "exact_match_rate": ours["exact_match_rate"],
                "tokens_per_forward_median": ours["tokens_per_forward_median"],
            }
        )
    return rows
