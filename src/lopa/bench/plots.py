"""PNG plots of a benchmark (matplotlib, Agg): each method keeps one colour and marker in every plot."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .methods import ALL_METHODS, REFERENCE  # noqa: E402

MARKERS = "osD^vP*Xh<>"
HATCHES = ["", "//", "..", "xx", "\\\\", "oo", "--", "++", "**", "||", "OO"]


def _style(name: str) -> dict:
    i = ALL_METHODS.index(name) if name in ALL_METHODS else len(ALL_METHODS)
    return {
        "color": plt.get_cmap("tab10")(i % 10),
        "marker": MARKERS[i % len(MARKERS)],
        "hatch": HATCHES[i % len(HATCHES)],
    }


def _bars(ax, groups: list[str], series: dict[str, list[float]]) -> None:
    """Grouped bars: one group per x label, one bar per series, hatched so grey prints still tell them apart."""
    width = 0.8 / max(1, len(series))
    x = np.arange(len(groups))
    for i, (name, values) in enumerate(series.items()):
        st = _style(name)
        ax.bar(
            x + (i - (len(series) - 1) / 2) * width,
            values,
            width,
            label=name,
            color=st["color"],
            hatch=st["hatch"],
            edgecolor="black",
            linewidth=0.4,
        )
    ax.set_xticks(x, groups, rotation=30, ha="right")
    if series:
        _legend(ax)
    else:
        ax.text(0.5, 0.5, "no method accepted any drafted token", ha="center", transform=ax.transAxes)


def speedup_by_category(aggregate: dict, path: Path) -> None:
    methods = [m for m in aggregate if m != REFERENCE]
    groups = list(dict.fromkeys(c for m in methods for c in aggregate[m]["by_category"])) + ["overall"]

    def value(m: str, g: str) -> float:
        s = aggregate[m]["overall"] if g == "overall" else aggregate[m]["by_category"].get(g)
        return (s or {}).get("speedup_median") or 0.0

    fig, ax = plt.subplots(figsize=(min(14, max(7, 0.3 * len(groups) * max(1, len(methods)))), 4.5))
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="hf (1.0x)")
    _bars(ax, groups, {m: [value(m, g) for g in groups] for m in methods})
    ax.set_xlabel("category")
    ax.set_ylabel("speedup vs hf (x)")
    ax.set_title("Speedup vs transformers generate (median of per-prompt ratios)")
    _save(fig, path)


def tokens_per_forward(records: list[dict], methods: list[str], path: Path) -> None:
    data = {
        m: [r["runs"][m]["tokens_per_forward"] for r in records if r["runs"][m]["tokens_per_forward"] is not None]
        for m in methods
    }
    data = {m: v for m, v in data.items() if v}
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(data)), 4.5))
    box = ax.boxplot(list(data.values()), patch_artist=True, medianprops={"color": "black", "linewidth": 1.5})
    ax.set_xticks(range(1, len(data) + 1), list(data), rotation=30, ha="right")
    for patch, m in zip(box["boxes"], data):
        patch.set(facecolor=_style(m)["color"], hatch=_style(m)["hatch"], alpha=0.8)
    ax.set_xlabel("method")
    ax.set_ylabel("tokens per forward (per prompt)")
    ax.set_title("Tokens per forward pass of the target model")
    _save(fig, path)


def latency_vs_length(records: list[dict], methods: list[str], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for m in methods:
        st = _style(m)
        xs = [r["runs"][m]["new_tokens"] for r in records]
        ys = [r["runs"][m]["wall_s"] * 1000 for r in records]
        ax.scatter(xs, ys, label=m, color=st["color"], marker=st["marker"], alpha=0.75, s=28)
    ax.set_xlabel("output length (new tokens)")
    ax.set_ylabel("latency (ms, prefill included)")
    ax.set_title("Latency against output length")
    _legend(ax)
    _save(fig, path)


def accept_length_hist(aggregate: dict, path: Path) -> None:
    hists = {m: a["overall"]["accept_length_hist"] for m, a in aggregate.items() if a["overall"]["accept_length_hist"]}
    hists = {m: h for m, h in hists.items() if set(h) != {"0"}}  # plain decoding only ever accepts 0
    top = max((int(k) for h in hists.values() for k in h), default=0)
    groups = [str(k) for k in range(top + 1)]
    fig, ax = plt.subplots(figsize=(min(14, max(7, 0.3 * len(groups) * max(1, len(hists)))), 4.5))
    _bars(ax, groups, {m: [h.get(g, 0) / sum(h.values()) for g in groups] for m, h in hists.items()})
    ax.set_xlabel("drafted tokens accepted in one step")
    ax.set_ylabel("fraction of decoding steps")
    ax.set_title("Acceptance length distribution")
    _save(fig, path)


def _legend(ax) -> None:
    """Outside the axes, so it never hides a bar or a point."""
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_plots(results: dict, out: Path) -> list[str]:
    """Write the four PNGs into `out`; returns their file names (none when nothing ran)."""
    agg, records = results["aggregate"], results["prompts"]
    if not records:
        return []
    methods = list(agg)
    plots = {
        "speedup_by_category.png": lambda p: speedup_by_category(agg, p),
        "tokens_per_forward.png": lambda p: tokens_per_forward(records, methods, p),
        "latency_vs_length.png": lambda p: latency_vs_length(records, methods, p),
        "accept_length_hist.png": lambda p: accept_length_hist(agg, p),
    }
    for name, draw in plots.items():
        draw(out / name)
    return list(plots)
