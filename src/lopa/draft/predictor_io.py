"""Save and load an Eagle3Predictor in the EAGLE-3 layout that vLLM and SGLang load (speculators' format).

A predictor directory holds `config.json` and `model.safetensors`. The config is speculators' eagle3
config: `speculators_model_type: "eagle3"`, `architectures: ["Eagle3Speculator"]`,
`transformer_layer_config` (a LlamaConfig dict, num_hidden_layers 1, vocab_size = the target's),
`draft_vocab_size`, `target_hidden_size`, `norm_before_residual: false` (written out: newer vLLM defaults
it to true when absent), `eagle_aux_hidden_state_layer_ids`, and `speculators_config` (algorithm, a
greedy proposal method with `speculative_tokens`, the verifier's name and architectures). The verifier is
named as outside tools resolve it: a catalog model's hub id (`lopa export-predictor` renames it, e.g. to a
local directory); lopa itself never reads that name. lopa adds a `lopa` section: the base model's identity
(catalog name, sizes, embedding fingerprints), which lopa's loading checks, and the training record.
The weights are `fc.weight`, `layers.0.*` (q/k/v 2 * hidden wide, `hidden_norm`), `norm.weight`,
`lm_head.weight`, `d2t` (int64 offsets: target id = draft id + d2t[draft id]) and `t2d` (bool over the
target vocabulary); the embedding is the target's own and is not stored.

Checked against (read through the code search, May 2026 snapshots):
- vllm-project/vllm vllm/model_executor/models/llama_eagle3.py: fc is `3 * target_hidden_size ->
  hidden_size`, no bias; q/k/v read [input_layernorm(embeds); hidden_norm(hidden)]; residual = the raw
  hidden unless norm_before_residual; lm_head is draft_vocab_size wide; `d2t` loads as
  draft_id_to_target_id and logits go to `arange(draft_vocab) + d2t`; `t2d` is skipped; "midlayer." is
  renamed "layers.0."; embed_tokens is optional (the target's is shared when absent); the next step reads
  the pre-norm output.
- vllm-project/vllm vllm/transformers_utils/configs/speculators/{base.py,eagle3.py}: the required
  speculators_config fields (proposal_methods[0].speculative_tokens, verifier.name_or_path) and
  transformer_layer_config; draft_vocab_size / target_hidden_size / norm_before_residual handling; newer
  copies of the updater (seen only as excerpts) also read eagle_aux_hidden_state_layer_ids.
- vLLM's target models collect aux hidden state i as `hidden_states + residual` before layer i runs,
  which is transformers' hidden_states[i]; default layers (2, n // 2, n - 3).
- vllm-project/speculators src/speculators/models/eagle3/{config.py,core.py,model_definitions_llama.py}
  and the older src/speculators/models/eagle3.py: config fields, state-dict names, d2t as offsets
  (`input_ids + d2t[input_ids]`), t2d bool, fc without bias in the current code (the older file had a bias).
- speculators 0.9.0 itself, in its own environment (tests/interop/, the slow stage): Eagle3DraftModel loads an
  exported lopa file (the `lopa` key included) with every tensor bit for bit, and lopa loads and drafts with
  checkpoints speculators' save_pretrained wrote (architectures "Eagle3DraftModel", embed_tokens stored, no
  d2t/t2d for a full draft vocabulary, the flags below written out as false), its logits equal to
  speculators' own forward. speculators' norm_before_fc, fc_norm, norm_output and embed_requires_grad,
  more than one layer, or a non-Llama layer are refused: lopa's layer does none of them.
Not checked: SGLang's llama_eagle3.py and SafeAILab/EAGLE's cnets.py (not opened in the time there was);
loading a lopa file in a real vLLM or SGLang (no GPU here).
vLLM's fc is fixed at 3 target layers, so only three aux layers make a file vLLM can serve.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from ..errors import ModelLoadError
from ..models.catalog import CATALOG
from ..models.fastlinear import PackedLinear, packing_available, replace_linears
from ..models.loading import token_rows
from .files import model_identity, read_config_json, read_weights
from .predictor import Eagle3Predictor, PredictorConfig, default_aux_layers

FORMAT = "lopa-predictor/1"
WEIGHTS = "model.safetensors"
CONFIG = "config.json"


def verifier_name(base_name: str | None) -> str | None:
    """The verifier as outside tools name it: a catalog model's hub id, else the name lopa loaded it by."""
    entry = CATALOG.get(base_name or "")
    return (entry.hub_id if entry and entry.hub_id else base_name) or None


def speculators_config(predictor: Eagle3Predictor, speculative_tokens: int = 5) -> dict:
    """The config.json of a predictor directory."""
    c = predictor.config
    base = c.base
    return {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "transformer_layer_config": {**c.layer, "model_type": "llama"},
        "draft_vocab_size": c.draft_vocab_size,
        "target_hidden_size": c.target_hidden_size,
        "norm_before_residual": False,
        "eagle_aux_hidden_state_layer_ids": list(c.aux_layers),
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": speculative_tokens}],
            "verifier": {
                "name_or_path": verifier_name(base.get("base_name")),
                "architectures": [base.get("architecture", "")],
            },
        },
        "lopa": {"format": FORMAT, "base": base, "training": c.training},
    }


def save_predictor(predictor: Eagle3Predictor, out: Path | str) -> None:
    """Write config.json and model.safetensors (weights through a temporary file, so a crash leaves no half file)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous().cpu() for k, v in predictor.state_dict().items()}
    save_file(tensors, str(out / (WEIGHTS + ".tmp")), metadata={"format": "pt"})
    (out / (WEIGHTS + ".tmp")).replace(out / WEIGHTS)
    (out / CONFIG).write_text(json.dumps(speculators_config(predictor), indent=1) + "\n")


def read_eagle3_config(path: Path) -> dict:
    """The predictor directory's config.json; ModelLoadError unless it is a speculators eagle3 config."""
    raw = read_config_json(path, CONFIG, "predictor")
    if not isinstance(raw, dict) or raw.get("speculators_model_type") != "eagle3":
        raise ModelLoadError(f"{path / CONFIG} is not an EAGLE-3 (speculators eagle3) config")
    return raw


def _read_config(path: Path, model) -> PredictorConfig:
    raw = read_eagle3_config(path)
    layer = raw.get("transformer_layer_config")
    if not isinstance(layer, dict) or "hidden_size" not in layer or "vocab_size" not in layer:
        raise ModelLoadError(f"{path / CONFIG} has no valid transformer_layer_config")
    _check_supported(raw, layer, path)
    lopa = raw.get("lopa") or {}
    text = model.config.get_text_config()
    # a file from elsewhere records no base: the summary's share is then of this model's size
    base = lopa.get("base") or {"base_parameters": sum(p.numel() for p in model.parameters())}
    try:
        config = PredictorConfig(
            layer=layer,
            aux_layers=list(raw.get("eagle_aux_hidden_state_layer_ids") or default_aux_layers(text.num_hidden_layers)),
            draft_vocab_size=int(raw.get("draft_vocab_size") or layer["vocab_size"]),
            target_hidden_size=int(raw.get("target_hidden_size") or layer["hidden_size"]),
            base=base,
            training=lopa.get("training", {}),
        )
    except (TypeError, ValueError) as exc:
        raise ModelLoadError(f"{path / CONFIG} has malformed fields: {exc}") from None
    _check_base(config, model, path)
    return config


# speculators' eagle3 options that change what the predictor computes; lopa's layer does none of them
_UNSUPPORTED = {
    "norm_before_residual": "the residual is the normed feature",
    "norm_before_fc": "the aux hidden states are normed before fc",
    "fc_norm": "each aux hidden state is normed before fc",
    "norm_output": "the next step reads the normed output",
    "embed_requires_grad": "a trained embedding, where lopa drafts on the target's own",
}


def _check_supported(raw: dict, layer: dict, path: Path) -> None:
    """Refuse, by name, an EAGLE-3 variant lopa cannot draft with (rather than a state-dict mismatch later)."""
    for key, what in _UNSUPPORTED.items():
        if raw.get(key):
            raise ModelLoadError(f"{path / CONFIG}: {key} ({what}) is not supported")
    kind, layers = layer.get("model_type", "llama"), layer.get("num_hidden_layers", 1)
    if kind != "llama" or layers != 1:
        raise ModelLoadError(
            f"{path / CONFIG}: lopa drafts with one Llama decoder layer; this predictor has {layers} {kind} layers"
        )


def _check_base(config: PredictorConfig, model, path: Path) -> None:
    """Refuse a predictor made for another model: sizes always, the embedding fingerprint where the file has one."""
    base = model_identity(model)
    n = model.config.get_text_config().num_hidden_layers
    found = {
        "hidden_size": config.target_hidden_size,
        "vocab_size": int(config.layer["vocab_size"]),
    }
    if config.base.get("fingerprint"):  # files from elsewhere carry no fingerprint
        fingerprints = [config.base["fingerprint"], *config.base.get("fingerprints", [])]
        found["fingerprint"] = (
            base["fingerprint"] if base["fingerprint"] in fingerprints else config.base["fingerprint"]
        )
    for key, value in found.items():
        if value != base[key]:
            raise ModelLoadError(
                f"predictor at {path} was made for {config.base.get('base_name') or 'another model'} "
                f"({key} {value!r}), not for this one ({key} {base[key]!r})"
            )
    if min(config.aux_layers) < 0 or max(config.aux_layers) > n:
        raise ModelLoadError(f"predictor at {path} reads hidden layers {config.aux_layers}; the model has {n} layers")


def _read_weights(path: Path, config: PredictorConfig) -> dict[str, torch.Tensor]:
    tensors = read_weights(path, WEIGHTS)
    # EAGLE's own files name the layer "midlayer"; a trained embedding or the verifier's head are not used:
    # lopa drafts on the target's frozen embedding.
    tensors = {k.replace("midlayer.", "layers.0."): v for k, v in tensors.items()}
    tensors = {k: v for k, v in tensors.items() if k != "embed_tokens.weight" and not k.startswith("verifier")}
    if "d2t" not in tensors and config.draft_vocab_size == int(config.layer["vocab_size"]):
        tensors["d2t"] = torch.zeros(config.draft_vocab_size, dtype=torch.long)  # the full vocabulary
        tensors["t2d"] = torch.ones(config.draft_vocab_size, dtype=torch.bool)
    return tensors


DEFAULT_PREDICTOR_DIR = Path(__file__).resolve().parent.parent / "data" / "predictor"
PredictorSpec = str | Path | Eagle3Predictor | bool | None


def predictor_for(model, spec: PredictorSpec, enabled: bool = True) -> Eagle3Predictor | None:
    """Resolve an Engine's `predictor`: a directory, a loaded predictor, False (none), True (the shipped one,
    required) or None (the shipped one only when it was trained for this very model)."""
    if spec is False or not enabled:
        return None
    if isinstance(spec, Eagle3Predictor):
        return spec
    if spec is None or spec is True:
        if spec is None and not fits(DEFAULT_PREDICTOR_DIR, model):
            return None
        spec = DEFAULT_PREDICTOR_DIR
    predictor = load_predictor(spec, model)
    if packing_available(model):  # it drafts at every step: its small matrices at memory speed too (half the time)
        replace_linears(predictor, PackedLinear)
    return predictor


def fits(path: Path, model) -> bool:
    """Whether the predictor at `path` exists and was made for `model` (without loading its weights)."""
    try:
        config = _read_config(path, model)  # checks the base's sizes and fingerprint
    except ModelLoadError:
        return False
    return bool(config.base.get("fingerprint"))


def load_predictor(path: Path | str, model) -> Eagle3Predictor:
    """Load a predictor for the base PreTrainedModel `model`; ModelLoadError if missing, corrupt or for another model."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise ModelLoadError(f"predictor path {path} does not exist or is not a directory")
    config = _read_config(path, model)
    tensors = _read_weights(path, config)
    predictor = Eagle3Predictor(config, token_rows(model))
    try:
        predictor.load_state_dict(tensors, strict=True)
    except RuntimeError as exc:  # missing keys or shape mismatches
        raise ModelLoadError(
            f"{path / WEIGHTS} does not match its config: {str(exc).splitlines()[-1].strip()}"
        ) from None
    ids = predictor.draft_ids
    if int(ids.min()) < 0 or int(ids.max()) >= predictor.t2d.numel():
        raise ModelLoadError(f"{path / WEIGHTS} maps draft ids outside the target vocabulary")
    return predictor.to(model.device).eval().requires_grad_(False)
