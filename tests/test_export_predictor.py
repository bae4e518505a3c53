"""`lopa export-predictor` and the verifier a predictor's config names: hub ids for catalog models, a local
directory on request; the weights copied unchanged; old files (a catalog name there) still load; speculators-style
files load and the EAGLE-3 variants lopa cannot draft with are refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from lopa.cli import main
from lopa.draft.predictor import Eagle3Predictor, PredictorConfig
from lopa.draft.predictor_io import DEFAULT_PREDICTOR_DIR, fits, load_predictor, save_predictor, speculators_config
from lopa.errors import ModelLoadError
from lopa.models.catalog import CATALOG, DEFAULT_MODEL
from lopa.models.loading import token_rows

from .conftest import tiny_llama

HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"


def config_of(path: Path) -> dict:
    return json.loads((path / "config.json").read_text())


def export(capsys, *args: str) -> tuple[int, str]:
    """Run `lopa export-predictor ARGS`: (exit code, stderr)."""
    code = main(["export-predictor", *args])
    return code, capsys.readouterr().err


def test_catalog_entries_name_their_hub_models() -> None:
    assert CATALOG[DEFAULT_MODEL].hub_id == HUB_ID
    assert all(entry.hub_id.count("/") == 1 for entry in CATALOG.values())


def test_training_names_the_hub_id_and_keeps_the_catalog_name_for_lopa() -> None:
    model = tiny_llama()
    predictor = Eagle3Predictor(PredictorConfig.for_base(model, name=DEFAULT_MODEL), token_rows(model))
    config = speculators_config(predictor)
    assert config["speculators_config"]["verifier"]["name_or_path"] == HUB_ID
    assert config["lopa"]["base"]["base_name"] == DEFAULT_MODEL
    predictor.config.base["base_name"] = "my-model"  # a local directory's name: no hub id known
    assert speculators_config(predictor)["speculators_config"]["verifier"]["name_or_path"] == "my-model"


def test_export_names_the_hub_id_and_copies_the_weights_unchanged(engine, tmp_path, capsys) -> None:
    assert export(capsys, "--out", str(tmp_path / "out"))[0] == 0
    shipped, exported = config_of(DEFAULT_PREDICTOR_DIR), config_of(tmp_path / "out")
    assert exported["speculators_config"]["verifier"] == {"name_or_path": HUB_ID, "architectures": ["LlamaForCausalLM"]}
    shipped["speculators_config"]["verifier"]["name_or_path"] = HUB_ID
    assert exported == shipped  # nothing else changes
    weights = (DEFAULT_PREDICTOR_DIR / "model.safetensors").read_bytes()
    assert (tmp_path / "out" / "model.safetensors").read_bytes() == weights
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["config.json", "model.safetensors"]
    assert fits(tmp_path / "out", engine.model)  # lopa's identity of the base is kept
    loaded = load_predictor(tmp_path / "out", engine.model)
    stored = load_file(str(DEFAULT_PREDICTOR_DIR / "model.safetensors"))
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in stored.items())


def test_an_old_file_naming_the_catalog_entry_loads_and_exports_to_the_hub_id(engine, tmp_path, capsys) -> None:
    old = tmp_path / "old"
    old.mkdir()
    config = config_of(DEFAULT_PREDICTOR_DIR)
    config["speculators_config"]["verifier"]["name_or_path"] = DEFAULT_MODEL
    (old / "config.json").write_text(json.dumps(config))
    (old / "model.safetensors").symlink_to(DEFAULT_PREDICTOR_DIR / "model.safetensors")
    assert fits(old, engine.model) and load_predictor(old, engine.model) is not None
    assert export(capsys, "--predictor", str(old), "--out", str(tmp_path / "new"))[0] == 0
    assert config_of(tmp_path / "new")["speculators_config"]["verifier"]["name_or_path"] == HUB_ID
    assert export(capsys, "--out", str(tmp_path / "named"), "--verifier", DEFAULT_MODEL)[0] == 0  # a catalog name
    assert config_of(tmp_path / "named")["speculators_config"]["verifier"]["name_or_path"] == HUB_ID


def test_export_names_a_local_verifier_directory_or_another_hub_id(engine, tmp_path, capsys) -> None:
    local = engine.loaded.path  # lopa's HF directory of the default model
    assert export(capsys, "--out", str(tmp_path / "local"), "--verifier", str(local))[0] == 0
    verifier = config_of(tmp_path / "local")["speculators_config"]["verifier"]
    assert verifier == {"name_or_path": str(local.resolve()), "architectures": ["LlamaForCausalLM"]}
    assert export(capsys, "--out", str(tmp_path / "hub"), "--verifier", "someone/SmolLM2-finetune")[0] == 0
    assert config_of(tmp_path / "hub")["speculators_config"]["verifier"]["name_or_path"] == "someone/SmolLM2-finetune"


def test_a_bad_verifier_or_predictor_is_refused_clearly(tmp_path, capsys) -> None:
    out = str(tmp_path / "out")
    code, err = export(capsys, "--out", out, "--verifier", "./no/such/dir")
    assert code == 2 and "neither a local Hugging Face model directory nor a hub id" in err
    (tmp_path / "empty").mkdir()
    code, err = export(capsys, "--out", out, "--verifier", str(tmp_path / "empty"))
    assert code == 2 and "not a Hugging Face model directory: no config.json" in err
    tiny_llama(vocab=48).save_pretrained(tmp_path / "other")  # a model of other sizes
    code, err = export(capsys, "--out", out, "--verifier", str(tmp_path / "other"))
    assert code == 2 and "hidden_size 32; the predictor was made for 576" in err
    code, err = export(capsys, "--out", out, "--predictor", str(tmp_path / "empty"))
    assert code == 2 and "not a predictor directory" in err
    code, err = export(capsys, "--out", str(DEFAULT_PREDICTOR_DIR))
    assert code == 2 and "is the predictor itself" in err
    assert not (tmp_path / "out").exists()


def test_a_speculators_style_file_loads_and_unsupported_variants_are_refused(tmp_path) -> None:
    """What speculators' save_pretrained writes (tests/test_interop_speculators.py checks the real thing): its
    architecture name, no lopa section, embed_tokens stored, no d2t/t2d for a full draft vocabulary."""
    model = tiny_llama()
    predictor = Eagle3Predictor(PredictorConfig.for_base(model), token_rows(model))
    save_predictor(predictor, tmp_path / "p")
    config = config_of(tmp_path / "p")
    del config["lopa"]
    config |= {"architectures": ["Eagle3DraftModel"], "norm_before_fc": False, "fc_norm": False, "norm_output": False}
    (tmp_path / "p" / "config.json").write_text(json.dumps(config))
    weights = load_file(str(tmp_path / "p" / "model.safetensors"))
    del weights["d2t"], weights["t2d"]
    weights["embed_tokens.weight"] = model.get_input_embeddings().weight.detach().clone()
    save_file(weights, str(tmp_path / "p" / "model.safetensors"))
    loaded = load_predictor(tmp_path / "p", model)
    assert torch.equal(loaded.draft_ids, torch.arange(32)) and not fits(tmp_path / "p", model)
    assert loaded.summary()["percent_of_base"] < 100  # of this model's size: the file records none

    for change, message in (
        ({"norm_output": True}, "norm_output"),
        ({"fc_norm": True}, "fc_norm"),
        ({"embed_requires_grad": True}, "trained embedding"),
        ({"transformer_layer_config": {**config["transformer_layer_config"], "num_hidden_layers": 2}}, "2 llama"),
        ({"transformer_layer_config": {**config["transformer_layer_config"], "model_type": "qwen3"}}, "1 qwen3"),
    ):
        (tmp_path / "p" / "config.json").write_text(json.dumps(config | change))
        with pytest.raises(ModelLoadError, match=message):
            load_predictor(tmp_path / "p", model)
