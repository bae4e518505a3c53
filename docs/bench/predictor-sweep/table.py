"""The sweep's table: one line per run (its settings, size, loss and held-out top-1 by depth after each epoch).

Usage: python docs/bench/predictor-sweep/table.py RUNS_DIR  (the `/work/sweep` of run.sh)."""

import json
import sys
from pathlib import Path


def main(runs: Path) -> None:
    print("| run | settings | parameters (% base) | loss | held-out top-1 depth 1 / 2 after each epoch | s / epoch |")
    print("|---|---|---|---|---|---|")
    for result in sorted(runs.glob("*/held_out.json"), key=lambda p: p.stat().st_mtime):
        summary = json.loads(result.read_text())
        log = [json.loads(line) for line in (result.parent / "train_log.jsonl").read_text().splitlines()]
        args = summary["command"].split()
        shown = {a: args[i + 1] for i, a in enumerate(args) if a in ("--intermediate-size", "--ttt-steps", "--lr")}
        settings = ", ".join(f"{k.lstrip('-')} {v}" for k, v in shown.items())
        top1 = ", ".join(" / ".join(f"{t:.3f}" for t in e["held_out_top1"][:2]) for e in log)
        seconds = "/".join(f"{e['seconds']:.0f}" for e in log)
        print(
            f"| {result.parent.name} | {settings} | {summary['parameters']:,} ({summary['percent_of_base']:.2f} %) "
            f"| {log[-1]['loss']:.3f} | {top1} | {seconds} |"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
