"""Benchmark: baseline against LoPA at several branch counts, and branch parallelism.

Per method, on held-out stdlib line-completion prompts: tokens per forward (TPF),
tokens/s, the output's per-token loss under the model, and exact next-line accuracy.
With procs > 1 it also times LoPA's iterations in `procs` processes against one.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import torch

from .decoder import DecodeConfig, DiffusionDecoder
from .parallel import decode_job, spawn
from .quality import completion_tasks, exact_line, output_loss


def measure(adapter, tok, cfg: DecodeConfig, tasks: list[tuple[str, str]]) -> dict:
    """Aggregate figures of one decoding configuration over all tasks."""
    dec = DiffusionDecoder(adapter, cfg)
    new = fwd = 0
    wall = loss = 0.0
    hits = 0
    for prompt, target in tasks:
        p = tok.encode(prompt)
        ids, st = dec.generate(p)
        new, fwd, wall = new + st.new_tokens, fwd + st.forwards, wall + st.wall_s
        loss += output_loss(adapter, p, ids, cfg.block_size) * len(ids)
        hits += exact_line(tok.decode(ids), target)
    return dict(
        branches=cfg.branches,
        tokens=new,
        forwards=fwd,
        tpf=new / fwd,
        tokens_per_s=new / wall,
        s_per_forward=wall / fwd,
        loss=loss / new,
        accuracy=hits / len(tasks),
    )


def parallel_timing(
    model_path, cfg: DecodeConfig, prompts: list[list[int]], procs: int, trust: bool, repeats: int = 3
) -> dict:
    """Seconds per iteration with the branches in one process vs split over `procs` (1 thread each).

    The two runs alternate `repeats` times and the fastest of each counts, which damps the
    noise of other jobs on a shared CPU.
    """

    def per_iter(res):
        return sum(s["wall_s"] for _, s in res) / sum(s["forwards"] for _, s in res)

    threads = torch.get_num_threads()
    one, many = [], []
    for _ in range(repeats):
        torch.set_num_threads(1)
        one.append(decode_job(model_path, cfg, prompts, trust))
        torch.set_num_threads(threads)
        many.append(spawn(procs, decode_job, model_path, cfg, prompts, trust))
    a, b = min(map(per_iter, one)), min(map(per_iter, many))
    ref = [i for i, _ in one[0]]
    return dict(
        procs=procs,
        branches=cfg.branches,
        repeats=repeats,
        s_per_iter_1proc=a,
        s_per_iter_nproc=b,
        ratio=b / a,
        identical_tokens=all([i for i, _ in r] == ref for r in one + many),
    )


def run(
    adapter, tok, model_path, cfg: DecodeConfig, branch_list: list[int], n_prompts: int, procs: int, trust: bool
) -> dict:
    tasks = completion_tasks(n_prompts)
    rows = [dict(method="baseline", **measure(adapter, tok, replace(cfg, branches=0), tasks))]
    rows += [dict(method=f"lopa-k{k}", **measure(adapter, tok, replace(cfg, branches=k), tasks)) for k in branch_list]
    res = dict(config=dict(vars(cfg)), prompts=len(tasks), rows=rows)
    if procs > 1:
        prompts = [tok.encode(p) for p, _ in tasks[:4]]
        res["parallel"] = parallel_timing(model_path, replace(cfg, branches=max(branch_list)), prompts, procs, trust)
    return res


def table(res: dict) -> str:
    head = f"{'method':<10} {'TPF':>6} {'tok/s':>8} {'loss':>7} {'acc':>6}"
    lines = [head] + [
        f"{r['method']:<10} {r['tpf']:>6.2f} {r['tokens_per_s']:>8.1f} {r['loss']:>7.3f} {r['accuracy']:>6.2f}"
        for r in res["rows"]
    ]
    if "parallel" in res:
        p = res["parallel"]
        lines.append(
            f"branches={p['branches']}: {p['s_per_iter_1proc'] * 1e3:.1f} ms/iter in 1 proc, "
            f"{p['s_per_iter_nproc'] * 1e3:.1f} ms/iter in {p['procs']} procs "
            f"(x{p['ratio']:.2f}), identical tokens: {p['identical_tokens']}"
        )
    return "\n".join(lines)


def write(res: dict, out: Path) -> None:
    """results.json and tpf_vs_branches.png into `out`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(res, indent=1))
    rows = res["rows"]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot([r["branches"] for r in rows[1:]], [r["tpf"] for r in rows[1:]], "o-", label="LoPA")
    ax.axhline(rows[0]["tpf"], color="gray", ls="--", label="baseline")
    ax.set_xlabel("lookahead branches k")
    ax.set_ylabel("tokens per forward")
    ax.set_title(f"TPF vs branches (tau_conf={res['config']['tau_conf']})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "tpf_vs_branches.png", dpi=120)
    plt.close(fig)
