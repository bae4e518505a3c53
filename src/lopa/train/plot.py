"""Plot held-out top-1 (and top-5 where logged) accuracy by draft depth from a train_log.jsonl.

python -m lopa.train.plot src/lopa/data/predictor/train_log.jsonl src/lopa/data/predictor/accuracy.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def plot_accuracy(log: Path, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evals = [r for r in map(json.loads, log.read_text().splitlines()) if "held_out_top1" in r]
    if not evals:
        raise SystemExit(f"{log} has no held-out evaluation yet")
    last = evals[-1]
    depths = range(1, len(last["held_out_top1"]) + 1)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(depths, last["held_out_top1"], "o-", label="top-1")
    if "held_out_top5" in last:
        ax.plot(depths, last["held_out_top5"], "s--", label="top-5")
    ax.set_xlabel("draft depth (tokens after the root)")
    ax.set_ylabel("held-out accuracy")
    ax.set_xticks(list(depths))
    ax.set_ylim(0, 1)
    when = f"step {last['step']}" if "step" in last else f"epoch {last['epoch'] + 1}"
    ax.set_title(f"{log.parent.name}, {when}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    plot_accuracy(Path(sys.argv[1]), Path(sys.argv[2]))
