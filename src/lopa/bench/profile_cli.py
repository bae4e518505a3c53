"""`lopa profile`: the forward-cost curves and memory floor of a model on this machine, as JSON and a PNG.

It also writes the cached latency curve the engine's dynamic window reads, so a profile
taken on a quiet machine is what later runs size their trees by.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ..cli_options import add_model_options, load_engine
from ..errors import InvalidRequestError

SPLIT_PROMPT = "Explain in a few paragraphs how a hash table handles collisions, with a short Python example."


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(sorted({int(s) for s in text.split(",") if s.strip()}))
    except ValueError:
        raise InvalidRequestError(f"expected comma-separated integers, got {text!r}") from None
    if not sizes or sizes[0] < 1:
        raise InvalidRequestError(f"sizes must be integers >= 1, got {text!r}")
    return sizes


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "profile",
        help="measure forward latency vs tree size and prefix, and the memory floor",
        description="Write profile.json and profile.png to --out, and the latency cache the dynamic window reads.",
    )
    add_model_options(p)
    p.add_argument(
        "--out", default="profile", metavar="DIR", help="where profile.json and profile.png go (default: ./profile)"
    )
    p.add_argument("--sizes", default="1,2,4,8,16,32,64", help="tokens per forward to time")
    p.add_argument("--prefixes", default="128,512,1024", help="committed prefix lengths to time a 1-token forward at")
    p.add_argument("--reps", type=int, default=5, help="timed repetitions per point (median kept)")
    p.add_argument("--max-rows", type=int, default=16, help="the latency surface's most batch rows")
    p.add_argument("--no-cache", action="store_true", help="do not write the engine's cached latency curve")
    p.add_argument("--breakdown-sizes", default="1,4,8,16", help="tokens per forward to split into parts ('' to skip)")
    p.add_argument("--breakdown-prefixes", default="128,1024", help="prefix lengths of that split")
    p.add_argument(
        "--no-thread-sweep",
        action="store_true",
        help="do not time each thread count (the sweep caches the fastest for later runs)",
    )
    p.add_argument(
        "--decode-tokens",
        type=int,
        default=64,
        help="then decode this many tokens with lookahead and split a step's time (0: skip)",
    )
    p.add_argument("--decode-prompt", default=SPLIT_PROMPT, help="the prompt of that decode")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..decode.cost import CostModel
    from ..models.breakdown import breakdown_table
    from ..models.profile import full_profile, profile_path, save_profile
    from ..models.threads import apply_threads, save_threads, sweep_threads

    sizes, prefixes = _sizes(args.sizes), _sizes(args.prefixes)
    split_sizes = _sizes(args.breakdown_sizes) if args.breakdown_sizes.strip() else ()
    split_prefixes = _sizes(args.breakdown_prefixes)
    if args.reps < 1 or args.max_rows < 1:
        raise InvalidRequestError("--reps and --max-rows must be >= 1")
    engine = load_engine(args, profile=False)  # this command measures the profile itself
    start = time.perf_counter()
    engine.warm_up()  # with --compile: build the graphs before timing
    warm_up_s = time.perf_counter() - start
    sweep = None
    if not args.no_thread_sweep and engine.runner.device.type == "cpu":
        sweep = sweep_threads(engine.runner, reps=args.reps)
        if not args.no_cache:
            save_threads(engine.loaded.fingerprint, engine.runner, sweep)
            apply_threads(engine.loaded.fingerprint, engine.runner, args.threads)  # the rest runs at the chosen count
    data = full_profile(engine.runner, sizes, prefixes, args.reps, args.max_rows)
    data["model"] = engine.loaded.name
    data["load_s"], data["warm_up_s"] = engine.loaded.load_s, warm_up_s  # warm_up: compiling, with --compile
    data["kernels"] = list(getattr(engine.model, "lopa_kernels", ())) or ["stock"]
    if sweep is not None:
        data["thread_sweep"] = sweep
    if split_sizes and engine.runner.compiled is not None:
        print("no breakdown with --compile: a compiled graph runs as one profiler region")
    elif split_sizes:
        data["breakdown"] = breakdown_table(
            engine.runner, split_sizes, split_prefixes, data["copy_bandwidth_bytes_per_s"], args.reps
        )
    if args.decode_tokens > 0:  # sized by the surface just measured, as a profiled engine sizes its trees
        engine.cost = CostModel(
            data["latency_surface_s"], stepwise=engine.runner.compiled is not None, packed=engine.runner.packs
        )
        data["step_split"] = step_split(engine, args.decode_prompt, args.decode_tokens)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "profile.json").write_text(json.dumps(data, indent=1))
    plot_profile(data, out / "profile.png")
    if not args.no_cache:
        save_profile(profile_path(engine.loaded.fingerprint, engine.runner), data)
    _print_table(data)
    print(f"wrote {out / 'profile.json'} and {out / 'profile.png'}")
    return 0


def step_split(engine, prompt: str, tokens: int) -> dict:
    """Where a lookahead step's time goes: drafting, the verification forward, the rest (accepting, bookkeeping)."""
    engine.generate(prompt, max_new_tokens=8)  # first-call costs (cost model, allocations) stay out
    stats = engine.generate(prompt, max_new_tokens=tokens).stats.to_dict()
    steps = max(1, stats["forwards"])
    split = {k: stats[k] / steps for k in ("draft_s", "verify_s", "bookkeeping_s")}
    total = sum(split.values()) or 1.0
    return {
        "steps": steps,
        "tokens_per_forward": stats["tokens_per_forward"],
        "per_step_s": split,
        "share": {k: v / total for k, v in split.items()},
    }


def _print_table(data: dict) -> None:
    floor = data["memory_floor_s"]
    print(
        f"weights {data['weight_bytes'] / 1e6:.0f} MB, copy bandwidth {data['copy_bandwidth_bytes_per_s'] / 1e9:.1f} GB/s, "
        f"memory floor {floor * 1e3:.1f} ms ({data['precision']}, {data['threads']} threads)"
    )
    print(f"load {data['load_s']:.1f} s, warm-up (compiling) {data['warm_up_s']:.1f} s")
    print("tokens  ms      x 1-token  x floor")
    one = data["latency_s"].get(1)
    for t, s in data["latency_s"].items():
        rel = f"{s / one:9.2f}" if one else "        -"
        print(f"{t:>6}  {s * 1e3:6.1f}  {rel}  {s / floor:7.2f}")
    for p, s in data["latency_by_prefix_s"].items():
        print(f"prefix {p:>5}: 1-token forward {s * 1e3:.1f} ms")
    if "thread_sweep" in data:
        sweep = data["thread_sweep"]
        cells = ", ".join(
            f"{n}: " + "/".join(f"{s * 1e3:.1f}" for s in row.values()) for n, row in sweep["latency_s"].items()
        )
        print(f"threads (1-/8-token ms) {cells}; fastest {sweep['best']}")
    for prefix, row in data.get("breakdown", {}).items():
        print(f"where a forward's time goes after {prefix} tokens (ms; floor in brackets):")
        for tokens, part in row.items():
            floors = part["floors_s"]
            cells = "  ".join(
                f"{k} {v * 1e3:.1f}" + (f" [{floors[k] * 1e3:.1f}]" if k in floors else "")
                for k, v in part["parts_s"].items()
            )
            print(f"  {tokens:>3} tokens: {part['wall_s'] * 1e3:6.1f} = {cells}")
    if "step_split" in data:
        split = data["step_split"]
        parts = ", ".join(
            f"{k[:-2]} {v * 1e3:.1f} ms ({split['share'][k]:.0%})" for k, v in split["per_step_s"].items()
        )
        print(f"lookahead step ({split['steps']} steps, {split['tokens_per_forward']:.2f} tokens/forward): {parts}")


def plot_profile(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    floor_ms = data["memory_floor_s"] * 1e3
    sizes = list(data["latency_s"])
    left.plot(sizes, [data["latency_s"][t] * 1e3 for t in sizes], "o-", label="forward")
    left.axhline(floor_ms, color="grey", ls="--", label=f"memory floor {floor_ms:.1f} ms")
    left.set_xscale("log", base=2)
    left.set_xlabel("tokens in the forward")
    left.set_ylabel("latency (ms)")
    left.set_title(f"prefix {data['prefix']} tokens")
    left.legend()
    prefixes = list(data["latency_by_prefix_s"])
    right.plot(prefixes, [data["latency_by_prefix_s"][p] * 1e3 for p in prefixes], "s-", label="1-token forward")
    right.axhline(floor_ms, color="grey", ls="--", label="memory floor")
    right.set_xlabel("committed prefix length (tokens)")
    right.set_ylabel("latency (ms)")
    right.set_title("1-token forward vs prefix")
    right.legend()
    fig.suptitle(f"{data.get('model', '')} {data['precision']} on {data['device']}, {data['threads']} threads")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
