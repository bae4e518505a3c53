"""`lopa export-predictor`: a copy of a predictor directory whose verifier outside tools can find.

vLLM, SGLang and speculators load the target model named by `speculators_config.verifier.name_or_path`: a
hub id or a local Hugging Face directory. Files lopa wrote before catalog entries had hub ids name a lopa
catalog entry there, which only lopa knows; and a machine without hub access needs a local directory. The
export copies the weights byte for byte and rewrites only that name (and the verifier's architectures);
lopa's own `lopa` section, which its loading checks, is kept.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from ..draft.files import read_config_json
from ..draft.predictor_io import CONFIG, DEFAULT_PREDICTOR_DIR, WEIGHTS, read_eagle3_config, verifier_name
from ..errors import ModelLoadError
from ..models.catalog import CATALOG
from ..models.loading import resolve_model_dir

HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def export_predictor(
    out: Path, predictor: Path | None = None, verifier: str | None = None, verifier_dir: Path | None = None
) -> dict:
    """Write config.json and model.safetensors of `predictor` (default: the shipped one) to `out`, the verifier
    named `verifier` (a hub id, a local HF directory or a catalog name; default: the base's hub id) or, with
    `verifier_dir`, a copy of lopa's HF directory of the base written there. Returns what was written."""
    src = Path(predictor or DEFAULT_PREDICTOR_DIR).expanduser()
    config = read_eagle3_config(src)
    if not (src / WEIGHTS).is_file():
        raise ModelLoadError(f"{src} has no {WEIGHTS}")
    out = Path(out).expanduser()
    if out.resolve() == src.resolve():
        raise ModelLoadError(f"--out {out} is the predictor itself: export to another directory")
    verifier_config = config.setdefault("speculators_config", {}).setdefault("verifier", {})
    base = (config.get("lopa") or {}).get("base", {}).get("base_name") or verifier_config.get("name_or_path")
    if verifier_dir is not None:
        verifier = str(_write_verifier(base, Path(verifier_dir).expanduser()))
    name, architectures = _resolve(verifier, config) if verifier else _default(base, config)
    verifier_config["name_or_path"] = name
    verifier_config["architectures"] = architectures or verifier_config.get("architectures", [])
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src / WEIGHTS, out / WEIGHTS)
    (out / CONFIG).write_text(json.dumps(config, indent=1) + "\n")
    return {"out": str(out), "predictor": str(src), "verifier": name}


def _write_verifier(base: str | None, into: Path) -> Path:
    """Copy lopa's HF directory of the catalog model `base` (the GGUF dequantised to fp32 safetensors: the
    weights the predictor was trained on) to `into`."""
    if base not in CATALOG:
        raise ModelLoadError(f"--verifier-dir: the predictor's base {base!r} is not a catalog model; give --verifier")
    if into.exists():
        raise ModelLoadError(f"--verifier-dir {into} exists: give a new directory")
    _, path = resolve_model_dir(base)
    shutil.copytree(path, into)
    return into.resolve()


def _default(base: str | None, config: dict) -> tuple[str, list[str]]:
    """The verifier named by the predictor's base: its hub id for a catalog model, else the name it records."""
    try:
        return _resolve(verifier_name(base) or "", config)
    except ModelLoadError as exc:
        raise ModelLoadError(
            f"the predictor's base {base!r} names no verifier outside tools can load ({exc}): "
            "give --verifier (hub id or model directory)"
        ) from None


def _resolve(spec: str, config: dict) -> tuple[str, list[str]]:
    """(name_or_path, architectures) of the verifier `spec`; a local directory is checked against the predictor."""
    if spec in CATALOG and CATALOG[spec].hub_id:
        return CATALOG[spec].hub_id, []
    path = Path(spec).expanduser()
    if spec and path.exists():
        return str(path.resolve()), _check_local(path, config)
    if HUB_ID.fullmatch(spec):
        return spec, []
    raise ModelLoadError(
        f"--verifier {spec!r} is neither a local Hugging Face model directory nor a hub id (owner/name)"
    )


def _check_local(path: Path, config: dict) -> list[str]:
    """The architectures of the HF model directory `path`; ModelLoadError if it is none or not the predictor's base."""
    model = read_config_json(path, "config.json", "Hugging Face model") if path.is_dir() else None
    if not isinstance(model, dict):
        raise ModelLoadError(f"--verifier {path} is not a Hugging Face model directory")
    text = model.get("text_config") or model
    layer = config.get("transformer_layer_config") or {}
    want = {
        "hidden_size": config.get("target_hidden_size") or layer.get("hidden_size"),
        "vocab_size": layer.get("vocab_size"),
    }
    for key, value in want.items():
        if text.get(key) is not None and text.get(key) != value:
            raise ModelLoadError(f"--verifier {path} has {key} {text.get(key)}; the predictor was made for {value}")
    return list(model.get("architectures") or [])
