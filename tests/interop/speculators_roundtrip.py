"""The speculators side of the EAGLE-3 round trip; run by tests/test_interop_speculators.py in speculators' own
environment (speculators pins another transformers than lopa's), never imported by lopa or pytest.

    python speculators_roundtrip.py EXPORTED VERIFIER OUT

(a) loads EXPORTED (a `lopa export-predictor` directory) with Eagle3DraftModel.from_pretrained and compares every
tensor of its model.safetensors with what speculators loaded, bit for bit (and reports whether speculators left the
embedding, which lopa's files do not store, at zero); (b) writes two checkpoints with
speculators' own training constructors (create_transformer_layer_config, Eagle3DraftModel.from_training_args) and
save_pretrained, for the verifier directory VERIFIER: OUT/copied (a 4,096-token draft vocabulary, lopa's weights
copied in) and OUT/full-vocab (the whole vocabulary, speculators' own initialisation). For each of the three it
writes the logits of one draft step computed by speculators' modules, reloaded from disk, to OUT/forward.safetensors
for lopa to compare with its own. Prints one JSON report.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from speculators import Eagle3DraftModel
from speculators.train.cli import create_transformer_layer_config

ROWS = 12  # positions in the forward check


def compare(model: Eagle3DraftModel, weights: dict[str, torch.Tensor]) -> dict:
    """How many stored tensors speculators loaded with the same dtype, shape and bits."""
    state = model.state_dict()
    equal = [k for k, v in weights.items() if k in state and state[k].dtype == v.dtype and torch.equal(state[k], v)]
    return {"tensors": len(weights), "equal": len(equal), "differ": sorted(set(weights) - set(equal))}


def draft_logits(model: Eagle3DraftModel, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """One draft step over causal rows, as Eagle3DraftModel.forward's first training-time-test step computes it."""
    model.config.transformer_layer_config._attn_implementation = "eager"  # the CPU: no flex attention
    positions = inputs["positions"]
    mask = torch.full((ROWS, ROWS), float("-inf")).triu(1)[None, None]
    with torch.no_grad():
        x = torch.cat([model.embed_tokens(inputs["ids"]), model.fc(inputs["hidden"])], -1)
        out = model.layers[0](
            x, attention_mask=mask, position_ids=positions, position_embeddings=model.rotary_emb(x, positions)
        )
        return model.lm_head(model.norm(out))


def write(out: Path, verifier: str, draft_vocab: int, lopa: dict[str, torch.Tensor] | None) -> None:
    """A checkpoint made the way speculators' trainer makes its draft model (llama layer, one layer), saved."""
    layer = create_transformer_layer_config(
        verifier_name_or_path=verifier,
        num_layers=1,
        draft_arch="llama",
        hidden_act=None,
        sliding_window=0,
        full_attention_indices=[0],
    )
    if lopa is not None:
        layer.intermediate_size = lopa["layers.0.mlp.up_proj.weight"].shape[0]
    torch.manual_seed(0)
    model = Eagle3DraftModel.from_training_args(
        verifier_config=layer,
        t2d=lopa["t2d"] if lopa is not None else None,
        d2t=lopa["d2t"] if lopa is not None else None,
        verifier_name_or_path=verifier,
        draft_vocab_size=draft_vocab,
        norm_before_residual=False,
        ttt_steps=5,
        draft_attn_impl="eager",
    )
    if lopa is not None:
        missing, unexpected = model.load_state_dict(lopa, strict=False)
        assert not unexpected and set(missing) <= {
            "embed_tokens.weight",
            "verifier_lm_head.weight",
            "verifier_norm.weight",
        }
    model.save_pretrained(out)


def main(exported: Path, verifier: str, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    lopa = load_file(str(exported / "model.safetensors"))
    vocab = lopa["t2d"].numel()
    gen = torch.Generator().manual_seed(0)
    inputs = {
        "hidden": torch.randn(1, ROWS, lopa["fc.weight"].shape[1], generator=gen),
        "ids": torch.randint(0, vocab, (1, ROWS), generator=gen),
        "positions": torch.arange(ROWS)[None],
    }
    model = Eagle3DraftModel.from_pretrained(exported)
    report = {"speculators_load": compare(model, lopa)}
    # lopa's files share the verifier's embedding and do not store it; speculators 0.9.0 then leaves embed_tokens
    # at zero (transformers initialises the missing key, and load_verifier_weights fills only NaN weights), so the
    # forward check loads it from the verifier through speculators' own loader
    report["speculators_load"]["embed_tokens_zero"] = bool((model.embed_tokens.weight == 0).all())
    model._load_verifier_weights(overwrite_embed_tokens=True)
    forward = dict(inputs)
    forward["exported"] = draft_logits(model, inputs)
    for name, draft_vocab, weights in (("copied", lopa["d2t"].numel(), lopa), ("full-vocab", vocab, None)):
        write(out / name, verifier, draft_vocab, weights)
        reloaded = Eagle3DraftModel.from_pretrained(out / name)
        forward[name] = draft_logits(reloaded, inputs)
        report[name] = {
            "keys": sorted(load_file(str(out / name / "model.safetensors"))),
            "config": json.loads((out / name / "config.json").read_text()),
        }
        if weights is not None:
            report[name]["copied_back"] = compare(reloaded, weights)
    save_file({k: v.contiguous() for k, v in forward.items()}, str(out / "forward.safetensors"))
    return report


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))))
