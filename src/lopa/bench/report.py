"""Human-readable output of a benchmark: Markdown tables for the console and report.md."""

from __future__ import annotations

from collections.abc import Callable


def _fmt(value: float | None, spec: str = ".2f", scale: float = 1.0, suffix: str = "") -> str:
    return "-" if value is None else f"{value * scale:{spec}}{suffix}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = [" | ".join(header), " | ".join("---" for _ in header)]
    return "\n".join(lines + [" | ".join(r) for r in rows])


def lopa_table_md(rows: list[dict]) -> str:
    """The LoPA table: scenario | length | AR ms | lopa ms | speedup (AR = transformers generate)."""
    return _table(
        ["scenario", "length", "AR ms", "lopa ms", "speedup"],
        [
            [
                r["scenario"],
                str(r["length"]),
                f"{r['ar_ms']:.0f}",
                f"{r['lopa_ms']:.0f}",
                _fmt(r["speedup"], suffix="x"),
            ]
            for r in rows
        ],
    )


def overall_md(aggregate: dict) -> str:
    """One row per method: latency, throughput, tokens per forward, speedup, exact match, memory."""
    header = [
        "method",
        "prompts",
        "median ms",
        "p90 ms",
        "prefill ms",
        "tok/s",
        "TPF",
        "accept mean",
        "speedup vs hf",
        "exact match",
        "drafting share",
        "predictor depth-1",
        "peak RSS MiB",
        "ppl (ref)",
    ]
    rows = []
    for name, agg in aggregate.items():
        s = agg["overall"]
        ppl = (
            "-"
            if s["perplexity_median"] is None
            else (f"{s['perplexity_median']:.2f} ({_fmt(s['reference_perplexity_median'])})")
        )
        rows.append(
            [
                name,
                str(s["prompts"]),
                _fmt(s["latency_median_s"], ".0f", 1000),
                _fmt(s["latency_p90_s"], ".0f", 1000),
                _fmt(s["prefill_median_s"], ".0f", 1000),
                _fmt(s["tokens_per_s"], ".1f"),
                _fmt(s["tokens_per_forward_median"]),
                _fmt(s["accept_length_mean"]),
                _fmt(s["speedup_median"], suffix="x"),
                _fmt(s["exact_match_rate"], ".0%"),
                _fmt(s["draft_share_median"], ".0%"),
                _fmt(s["predictor_depth1_accept"]),
                _fmt(s["peak_rss_mb"], ".0f"),
                ppl,
            ]
        )
    return _table(header, rows)


def by_group_md(aggregate: dict, group: str, value: Callable[[dict], str]) -> str:
    """Groups (categories or scenarios) down, methods across, one figure per cell."""
    methods = list(aggregate)
    names = list(dict.fromkeys(g for m in methods for g in aggregate[m][group]))
    rows = [[g] + [value(aggregate[m][group][g]) if g in aggregate[m][group] else "-" for m in methods] for g in names]
    rows.append(["**overall**"] + [value(aggregate[m]["overall"]) for m in methods])
    return _table([group.removeprefix("by_")] + methods, rows)


def methods_md(methods: dict) -> str:
    return _table(
        ["method", "status", "what it is"],
        [[n, m["status"] + (f" ({m['reason']})" if m["reason"] else ""), m["description"]] for n, m in methods.items()],
    )


def report_md(results: dict, plots: list[str], command: str) -> str:
    """The whole report.md: set-up, method list, tables and plots."""
    c, agg = results["config"], results["aggregate"]
    parts = [
        "# lopa benchmark",
        f"`{command}`",
        f"Model `{c['model']}` ({c['dtype']}, {c['device']}, {c['threads']} threads); data: {c['data'] or 'built-in set'}; "
        f"{len(results['prompts'])} prompts; greedy; methods interleaved prompt by prompt in one process; "
        f"one warm-up generation per method excluded. Created {results['created']}.",
        "## Methods",
        methods_md(results["methods"]),
    ]
    if results["lopa_table"]:
        parts += ["## LoPA table (AR = transformers generate, greedy)", lopa_table_md(results["lopa_table"])]
    if agg:
        parts += [
            "## Overall",
            overall_md(agg),
            "Speedup = median over prompts of (hf wall time / method wall time). TPF = new tokens / forwards "
            "(prefill included). Exact match = same token ids as hf. ppl = perplexity of the output under the "
            "full-precision model (reference: the hf output), for methods that are not lossless.",
        ]
        for group in ("by_category", "by_scenario"):
            if any(agg[m][group] for m in agg):
                parts += [
                    f"## Speedup vs hf, {group.replace('_', ' ')}",
                    by_group_md(agg, group, lambda s: _fmt(s["speedup_median"], suffix="x")),
                    f"## Tokens per forward (median), {group.replace('_', ' ')}",
                    by_group_md(agg, group, lambda s: _fmt(s["tokens_per_forward_median"])),
                    f"## Exact match vs hf, {group.replace('_', ' ')}",
                    by_group_md(agg, group, lambda s: _fmt(s["exact_match_rate"], ".0%")),
                ]
    if plots:
        parts += ["## Plots"] + [f"![{p}]({p})" for p in plots]
    return "\n\n".join(parts) + "\n"
