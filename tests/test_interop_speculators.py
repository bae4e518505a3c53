"""lopa's EAGLE-3 files checked by speculators, the library that defines the layout, in its own environment
(it pins another transformers than lopa's): speculators loads an exported lopa predictor bit for bit, and lopa
loads the checkpoints speculators writes, computes their draft logits as speculators does, and drafts with them,
its greedy output stock generate()'s. tests/interop/speculators_roundtrip.py is the speculators side."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from lopa import DraftConfig, Engine
from lopa.cli import main
from lopa.draft.predictor_io import load_predictor

from .prompts import FAST
from .test_greedy import NEW_TOKENS, assert_every_drafter_drafted, sweep

pytestmark = pytest.mark.slow  # builds a 1.5 GB virtual environment (about 70 s from PyPI), reused afterwards

SPECULATORS = "speculators==0.9.0"
VENV = Path(tempfile.gettempdir()) / "lopa-speculators-0.9.0"
SCRIPT = Path(__file__).parent / "interop" / "speculators_roundtrip.py"
OFFLINE = ("NewConnectionError", "Failed to establish", "name resolution", "No matching distribution", "timed out")


def _run(*cmd: str | Path, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HF_HUB_OFFLINE": "1"}
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, **kw)


def speculators_python() -> Path:
    """The venv's python, built on first use: torch pinned to this environment's CPU build, so no CUDA build is
    pulled. speculators requires torchvision and torchaudio but never imports them, and PyPI's torchvision does
    not load beside the CPU build (transformers would then fail to import): both are removed."""
    python = VENV / "bin" / "python"
    if (VENV / "ready").exists():
        return python
    shutil.rmtree(VENV, ignore_errors=True)
    torch_pin = "torch==" + torch.__version__.split("+")[0]
    _run(sys.executable, "-m", "venv", VENV, check=True)
    done = _run(python, "-m", "pip", "install", "-q", torch_pin, SPECULATORS, timeout=480)
    if done.returncode != 0:
        reason = done.stderr.strip()[-400:]
        if any(word in done.stderr for word in OFFLINE):
            pytest.skip(f"cannot build speculators' environment (pip install {SPECULATORS}): {reason}")
        pytest.fail(f"pip install {torch_pin} {SPECULATORS} failed: {reason}")
    _run(python, "-m", "pip", "uninstall", "-q", "-y", "torchvision", "torchaudio", check=True)
    (VENV / "ready").write_text(f"{torch_pin} {SPECULATORS}\n")
    return python


@pytest.fixture(scope="module")
def roundtrip(engine: Engine, tmp_path_factory) -> tuple[Path, Path, dict]:
    """(the exported predictor, speculators' output directory, its report): the shipped predictor exported with
    a local verifier written by --verifier-dir (speculators loads the verifier's embedding and head from it)."""
    python = speculators_python()
    tmp = tmp_path_factory.mktemp("speculators")
    exported, verifier, out = tmp / "exported", tmp / "verifier", tmp / "out"
    assert main(["export-predictor", "--out", str(exported), "--verifier-dir", str(verifier)]) == 0
    done = _run(python, SCRIPT, exported, verifier, out, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"speculators loaded the exported predictor: {report['speculators_load']}")
    return exported, out, report


def test_speculators_loads_an_exported_predictor_bit_for_bit(roundtrip) -> None:
    exported, _, report = roundtrip
    verifier = json.loads((exported / "config.json").read_text())["speculators_config"]["verifier"]
    assert Path(verifier["name_or_path"]).name == "verifier" and verifier["architectures"] == ["LlamaForCausalLM"]
    assert {k: report["speculators_load"][k] for k in ("tensors", "equal", "differ")} == {
        "tensors": 15,
        "equal": 15,
        "differ": [],
    }
    # known: speculators 0.9.0 leaves the embedding of a checkpoint that does not store one at zero (vLLM shares the
    # target's instead); the forward check below loads it from the verifier
    assert report["speculators_load"]["embed_tokens_zero"]
    assert report["copied"]["copied_back"] == {"tensors": 15, "equal": 15, "differ": []}


def test_speculators_checkpoints_differ_from_lopas_files_where_expected(roundtrip) -> None:
    """What the loader must accept: speculators' own names and fields, not lopa's."""
    _, _, report = roundtrip
    for name, mapped in (("copied", True), ("full-vocab", False)):
        config, keys = report[name]["config"], set(report[name]["keys"])
        assert config["architectures"] == ["Eagle3DraftModel"] and "lopa" not in config
        assert "embed_tokens.weight" in keys and ({"d2t", "t2d"} <= keys) == mapped


def test_lopa_computes_the_draft_logits_speculators_computes(engine: Engine, roundtrip) -> None:
    exported, out, _ = roundtrip
    forward = load_file(str(out / "forward.safetensors"))
    rows = forward["ids"].shape[1]
    mask = torch.full((rows, rows), float("-inf")).triu(1)[None, None]
    for name, path in (("exported", exported), ("copied", out / "copied"), ("full-vocab", out / "full-vocab")):
        predictor = load_predictor(path, engine.model)
        with torch.no_grad():
            logits, _ = predictor(predictor.fuse(forward["hidden"]), forward["ids"], forward["positions"], mask, None)
        difference = (logits - forward[name]).abs().max()
        print(f"{name}: draft logits, lopa against speculators: max difference {difference:.1e}")
        assert torch.allclose(logits, forward[name], atol=1e-4, rtol=1e-4), f"{name}: max difference {difference:.2e}"


def test_lopa_drafts_with_speculators_checkpoints_and_equals_stock_generate(engine: Engine, stock, roundtrip) -> None:
    _, out, _ = roundtrip
    only = DraftConfig(use_prompt_lookup=False, use_ngram_pool=False, dynamic_window=False, always_draft=True)
    for name in ("copied", "full-vocab"):
        drafted = Engine(engine.loaded, only, predictor=str(out / name))
        failures, results, _ = sweep(drafted, stock, FAST[:3], NEW_TOKENS)
        assert not failures, (name, failures)
        tokens, forwards = sum(r.stats.new_tokens for r in results), sum(r.stats.forwards for r in results)
        print(f"{name}: {len(results)} prompts equal stock generate(), {tokens} tokens in {forwards} forwards")
        if name == "copied":  # the shipped predictor's weights: its drafts are accepted
            assert_every_drafter_drafted(results, ["predictor"])
