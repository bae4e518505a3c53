"""The diffusion CLI functions through a small harness shaped like the lead's `lopa` parser."""

import argparse
import json

import pytest
from safetensors.torch import load_file

from lopa.diffusion.cli import add_dllm_options, add_train_dllm_parser, run_bench, run_generate


def harness() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lopa")
    sub = parser.add_subparsers(dest="command", required=True)
    add_train_dllm_parser(sub)
    gen = sub.add_parser("generate")
    gen.add_argument("prompt")
    gen.set_defaults(func=run_generate)
    bench = sub.add_parser("bench")
    bench.add_argument("--data")
    bench.add_argument("--limit", type=int)
    bench.set_defaults(func=run_bench)
    for p in (gen, bench):  # options the lead's parser owns for both commands
        p.add_argument("--model")
        p.add_argument("--dllm")
        p.add_argument("--max-new-tokens", type=int, default=32)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--out")
        p.add_argument("--json", action="store_true")
        add_dllm_options(p)
    return parser


def call(argv: list[str]) -> int:
    args = harness().parse_args(argv)
    return args.func(args)


def test_generate_json(capsys, shipped):
    from lopa.diffusion.loader import DEFAULT_PATH

    assert call(["generate", "def main():\n    ", "--dllm", str(DEFAULT_PATH), "--json", "--branches", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["token_ids"]) == 32 and out["text"] == shipped[1].decode(out["token_ids"])
    st = out["stats"]
    assert st["new_tokens"] == 32 and st["tokens_per_forward"] == pytest.approx(32 / st["forwards"], abs=1e-3)


@pytest.mark.parametrize(
    "argv, msg",
    [
        (["--block-size", "0"], "block size"),
        (["--tau-conf", "1.5"], "tau_conf"),
        (["--tau-conf", "0"], "tau_conf"),
        (["--procs", "0"], "procs"),
    ],
)
def test_bad_options_exit_2_with_one_line(capsys, argv, msg):
    from lopa.diffusion.loader import DEFAULT_PATH

    assert call(["generate", "x", "--dllm", str(DEFAULT_PATH), *argv]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1 and "Traceback" not in err


def test_missing_model_exits_2(capsys, tmp_path):
    assert call(["generate", "x", "--dllm", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_bench_writes_results_and_plot(capsys, tmp_path):
    from lopa.diffusion.loader import DEFAULT_PATH

    assert (
        call(["bench", "--dllm", str(DEFAULT_PATH), "--limit", "2", "--branch-list", "1,2", "--out", str(tmp_path)])
        == 0
    )
    res = json.loads((tmp_path / "results.json").read_text())
    assert [r["method"] for r in res["rows"]] == ["baseline", "lopa-k1", "lopa-k2"]
    assert all(r["tpf"] >= 1 and r["loss"] > 0 for r in res["rows"])
    assert (tmp_path / "tpf_vs_branches.png").stat().st_size > 1000
    assert "baseline" in capsys.readouterr().out


def test_train_dllm_tiny(tmp_path, capsys):
    out = tmp_path / "m"
    assert (
        call(
            [
                "train-dllm",
                "--out",
                str(out),
                "--steps",
                "2",
                "--batch",
                "2",
                "--seq",
                "64",
                "--train-block",
                "16",
                "--dim",
                "32",
                "--layers",
                "1",
                "--heads",
                "2",
                "--log-every",
                "1",
            ]
        )
        == 0
    )
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2] and all(r["loss"] > 0 for r in log)
    assert "emb.weight" in load_file(str(out / "model.safetensors"))
    assert call(["generate", "def ", "--dllm", str(out), "--max-new-tokens", "8"]) == 0
