"""Bad input gets one clear error (exit code 2 on the CLI) and leaves the engine usable."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from lopa import Engine, GenerationConfig, InvalidRequestError, ModelLoadError
from lopa.cli import main
from lopa.models.loading import load_model

BAD_REQUESTS = [
    ("", {}),
    ("   ", {}),
    ("hi", {"max_new_tokens": 0}),
    ("hi", {"max_new_tokens": 10**7}),
    ("hi", {"temperature": -0.5}),
    ("hi", {"top_p": 0.0}),
    ("hi", {"top_p": 1.5}),
    ("hi", {"method": "beam"}),
]


@pytest.mark.parametrize("prompt, overrides", BAD_REQUESTS)
def test_bad_requests_raise_and_engine_stays_usable(engine: Engine, prompt: str, overrides: dict) -> None:
    with pytest.raises(InvalidRequestError):
        engine.generate(prompt, **overrides)
    assert engine.generate("Say hi.", max_new_tokens=4).stats.new_tokens == 4


def test_prompt_longer_than_context(engine: Engine) -> None:
    too_long = [1] * (engine.runner.max_positions + 5)
    with pytest.raises(InvalidRequestError, match="context"):
        engine.generate(too_long)


@pytest.mark.parametrize(
    "argv",
    [
        ["generate", ""],
        ["generate", "hi", "--max-new-tokens", "0"],
        ["generate", "hi", "--temperature", "-1"],
        ["generate", "hi", "--top-p", "2"],
        ["generate", "hi", "--method", "beam"],
        ["generate", "hi", "--model", "/no/such/model"],
        ["generate", "hi", "--max-new-tokens", "many"],
    ],
)
def test_cli_bad_input_is_one_line_exit_2(argv: list[str], capsys) -> None:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lopa: error:") and "\n" not in err and "Traceback" not in err


def test_missing_truncated_and_non_model_files(engine: Engine, tmp_path) -> None:
    with pytest.raises(ModelLoadError):
        load_model(str(tmp_path / "missing"))
    text = tmp_path / "notes.txt"
    text.write_text("not a model")
    with pytest.raises(ModelLoadError):
        load_model(str(text))
    fake_gguf = tmp_path / "fake.gguf"
    fake_gguf.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(ModelLoadError):
        load_model(str(fake_gguf))
    truncated = tmp_path / "truncated"
    shutil.copytree(engine.loaded.path, truncated)
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: 1 << 20])
    with pytest.raises(ModelLoadError):
        load_model(str(truncated))


def test_cli_json_output_has_the_documented_fields() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lopa", "generate", "Name three colours.", "--max-new-tokens", "16", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert isinstance(data["text"], str) and data["text"]
    assert len(data["token_ids"]) == data["stats"]["new_tokens"] <= 16
    assert 1 <= data["stats"]["forwards"] <= data["stats"]["new_tokens"]  # one forward per step, each emits >= 1 token
    assert data["stats"]["forwards"] == len(data["stats"]["steps"])  # the prefill's step and each verification
    assert data["seed"] is None  # greedy
    assert data["stats"]["tokens_per_forward"] == pytest.approx(data["stats"]["new_tokens"] / data["stats"]["forwards"])
    assert data["stats"]["wall_s"] > 0


def test_cli_error_in_a_subprocess_has_no_traceback() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lopa", "generate", "hi", "--model", "/no/such/dir"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().startswith("lopa: error:") and "Traceback" not in done.stderr


def test_stop_strings_eos_and_length(engine: Engine) -> None:
    limited = engine.generate("Count from one to twenty in words.", max_new_tokens=12)
    assert limited.finish_reason == "length" and len(limited.token_ids) == 12
    stopped = engine.generate(
        "Count from one to twenty in words, separated by commas.", GenerationConfig(max_new_tokens=64, stop=[","])
    )
    assert stopped.finish_reason == "stop" and "," not in stopped.text
    full = engine.generate("Say only the word yes.", max_new_tokens=64)
    assert full.finish_reason == "stop" and full.token_ids[-1] in engine.eos_ids


def test_stream_pieces_join_to_the_generated_text(engine: Engine) -> None:
    prompt = "Write two short lines about the moon."
    assert "".join(engine.stream(prompt, max_new_tokens=40)) == engine.generate(prompt, max_new_tokens=40).text
