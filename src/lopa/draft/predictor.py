"""An EAGLE-3 class draft predictor: one decoder layer over the target's fused features, with its own KV cache.

Row p of the predictor reads the embedding of token x_p and a feature of the position before it, and
predicts x_{p+1}. At committed positions the feature is fc(the target's hidden states of `aux_layers` at
p - 1) (EAGLE-3 fuses a low, a middle and a high layer); at drafted positions it is the predictor's own
output feature of the parent row (its layer's pre-norm output), so drafting never runs the target.

The layer is transformers' own LlamaDecoderLayer with EAGLE-3's first-layer changes (q/k/v read
[input_layernorm(embedding); hidden_norm(feature)], twice the hidden size; the residual is the raw
feature), whatever the base architecture: it is the layer vLLM's Eagle3LlamaForCausalLM serves for
every target. The token embedding is the base's input embedding, frozen and shared: not a parameter,
not stored, not counted. Output goes through a reduced draft vocabulary: draft id i is target id
i + d2t[i]; t2d marks the target ids that have a draft id (EAGLE-3's and vLLM's convention).
Everything runs in fp32, whatever the base dtype.

PredictorCache holds the predictor's KV rows: the committed rows (one per context token after the
first), then the rows of the tree being drafted, so a draft step runs the layer over the new frontier
nodes only, each attending to the committed rows and to its own ancestors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from transformers import Cache, LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

from ..models.kvcache import TreeKVCache
from ..models.runner import tree_mask
from .files import model_identity


def default_aux_layers(num_layers: int) -> list[int]:
    """EAGLE-3's and vLLM's low/middle/high choice (2, n // 2, n - 3); (1, n // 2, n - 1) for shallow models."""
    if num_layers >= 6:
        return [2, num_layers // 2, num_layers - 3]
    return [1, max(1, num_layers // 2), num_layers - 1]


@dataclass
class PredictorConfig:
    layer: dict  # LlamaConfig fields of the decoder layer (speculators' transformer_layer_config); vocab = the base's
    aux_layers: list[int]  # the base's hidden_states indices fc fuses: i = the input of decoder layer i
    draft_vocab_size: int
    target_hidden_size: int
    base: dict = field(default_factory=dict)  # files.model_identity of the base model
    training: dict = field(default_factory=dict)

    @classmethod
    def for_base(
        cls,
        model,
        aux_layers: list[int] | None = None,
        draft_vocab_size: int | None = None,
        intermediate_size: int | None = None,
        name: str = "",
    ) -> PredictorConfig:
        """A predictor shaped like the base's own layers (attention heads, rope), `intermediate_size` wide."""
        text = model.config.get_text_config()
        n, hidden = text.num_hidden_layers, text.hidden_size
        aux = list(aux_layers) if aux_layers is not None else default_aux_layers(n)
        if not aux or min(aux) < 0 or max(aux) > n:
            raise ValueError(f"aux_layers {aux} must be hidden_states indices in 0..{n}")
        vocab = model.get_output_embeddings().out_features  # a Q8_0 vocabulary builds its .weight on access
        heads = text.num_attention_heads
        rope = getattr(text, "rope_parameters", None)
        layer = LlamaConfig(
            vocab_size=vocab,
            hidden_size=hidden,
            intermediate_size=intermediate_size or text.intermediate_size,
            num_hidden_layers=1,
            num_attention_heads=heads,
            num_key_value_heads=getattr(text, "num_key_value_heads", None) or heads,
            head_dim=getattr(text, "head_dim", None) or hidden // heads,
            rms_norm_eps=getattr(text, "rms_norm_eps", 1e-6),
            max_position_embeddings=text.max_position_embeddings,
            rope_parameters=rope if isinstance(rope, dict) and "rope_type" in rope else None,
        )
        return cls(
            layer.to_diff_dict(), aux, min(draft_vocab_size or vocab, vocab), hidden, model_identity(model, name)
        )

    def layer_config(self) -> LlamaConfig:
        fields_ = {
            k: v for k, v in self.layer.items() if k not in ("model_type", "transformers_version", "architectures")
        }
        config = LlamaConfig(**fields_)
        config._attn_implementation = "sdpa"
        return config


def _eagle3_layer(config: LlamaConfig) -> LlamaDecoderLayer:
    """transformers' Llama decoder layer, q/k/v widened to [embedding; feature] and a hidden_norm added (EAGLE-3)."""
    layer = LlamaDecoderLayer(config, layer_idx=0)
    attn = layer.self_attn
    for name in ("q_proj", "k_proj", "v_proj"):
        setattr(
            attn, name, nn.Linear(2 * config.hidden_size, getattr(attn, name).out_features, bias=config.attention_bias)
        )
    layer.hidden_norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
    return layer


class Eagle3Predictor(nn.Module):
    """fc + one decoder layer + norm + lm_head over the draft vocabulary, on the base's frozen embedding."""

    def __init__(self, config: PredictorConfig, token_rows: Callable[[torch.Tensor], torch.Tensor]):
        """`token_rows`: the base's input embedding rows of token ids (models.loading.token_rows)."""
        super().__init__()
        self.config = config
        layer_config = config.layer_config()
        hidden = layer_config.hidden_size
        self.fc = nn.Linear(len(config.aux_layers) * config.target_hidden_size, hidden, bias=False)
        self.layers = nn.ModuleList([_eagle3_layer(layer_config)])
        self.norm = LlamaRMSNorm(hidden, eps=layer_config.rms_norm_eps)
        self.lm_head = nn.Linear(hidden, config.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(layer_config.vocab_size, dtype=torch.bool))
        self.rotary = LlamaRotaryEmbedding(layer_config)  # no persistent state
        self.set_vocab(torch.arange(config.draft_vocab_size))
        self.float()
        self._token_rows = token_rows  # the base's own matrix, read a few rows a step: no copy of it is held

    @property
    def device(self) -> torch.device:
        return self.d2t.device  # a buffer: packed linear layers hold no plain weight to ask

    def token_embedding(self, tokens: torch.Tensor) -> torch.Tensor:
        """The base's input embedding of `tokens`, in fp32 (the predictor's dtype whatever the base runs in)."""
        return self._token_rows(tokens).float()

    def set_vocab(self, target_ids: torch.Tensor) -> None:
        """Make the sorted target ids `target_ids` [draft_vocab] the draft vocabulary."""
        ids = target_ids.long().sort().values.to(self.d2t.device)
        self.d2t.copy_(ids - torch.arange(ids.numel(), device=ids.device))
        self.t2d.zero_()
        self.t2d[ids] = True

    @property
    def draft_ids(self) -> torch.Tensor:
        """The target id of every draft id [draft_vocab]."""
        return torch.arange(self.d2t.numel(), device=self.d2t.device) + self.d2t

    def to_draft(self, target_ids: torch.Tensor) -> torch.Tensor:
        """Draft ids of target ids; -100 (cross_entropy's ignore_index) where the draft vocabulary lacks them."""
        lookup = torch.full((self.t2d.numel(),), -100, dtype=torch.long, device=self.d2t.device)
        lookup[self.draft_ids] = torch.arange(self.d2t.numel(), device=self.d2t.device)
        return lookup[target_ids]

    @property
    def num_parameters(self) -> int:
        """Everything trained and stored (fc, layer, norm, lm_head); the shared embedding and d2t/t2d are not."""
        return sum(p.numel() for p in self.parameters())

    def fuse(self, layers: torch.Tensor) -> torch.Tensor:
        """Features [..., hidden] from the target's hidden states of aux_layers [..., len(aux) * target hidden]."""
        return self.fc(layers.float())

    def forward(
        self,
        features: torch.Tensor,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
        cache: Cache | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows [B, T]: input features [B, T, hidden], target token ids, positions and an additive mask
        [B or 1, 1, T, keys] over the cache's rows and these. Returns (draft logits [B, T, draft_vocab],
        output features [B, T, hidden]: what the next draft step reads)."""
        layer = self.layers[0]
        x = torch.cat([layer.input_layernorm(self.token_embedding(tokens)), layer.hidden_norm(features)], -1)
        attn, _ = layer.self_attn(
            hidden_states=x, position_embeddings=self.rotary(x, positions), attention_mask=mask, cache=cache
        )
        h = features + attn
        h = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.lm_head(self.norm(h)), h

    def summary(self) -> dict:
        base = self.config.base.get("base_parameters") or 1
        return {
            "parameters": self.num_parameters,
            "percent_of_base": 100.0 * self.num_parameters / base,
            "draft_vocab": self.config.draft_vocab_size,
            "aux_layers": list(self.config.aux_layers),
            "base": self.config.base.get("base_name", ""),
        }


class PredictorCache:
    """The predictor's KV rows: `committed` rows (the context), then `drafted` rows of the tree being drafted.

    One TreeKVCache layer (the runner's cache class); it doubles when full, so no maximum length is needed.
    """

    def __init__(self, capacity: int = 256):
        self.kv = TreeKVCache(1, capacity)
        self.committed = 0
        self.drafted = 0

    def reset(self) -> None:
        self.committed = self.drafted = 0

    @torch.no_grad()
    def run(
        self,
        predictor: Eagle3Predictor,
        features: torch.Tensor,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        ancestors: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write T rows (features [T, hidden], tokens [T], positions [T]) after the drafted ones; row i sees
        the committed rows and ancestors[i] ([T, drafted + T] bool over drafted and new rows, diagonal set)."""
        t, start = tokens.numel(), self.committed + self.drafted
        self._reserve(start + t)
        self.kv.set_length(start)
        unused = torch.zeros(1, self.drafted + t, dtype=torch.long)  # tree_mask reads positions only for a window
        mask = tree_mask(torch.tensor([self.committed]), self.committed, unused, ancestors[None], None, torch.float32)
        logits, out = predictor(features[None], tokens[None], positions[None], mask, self.kv)
        self.drafted += t
        return logits[0], out[0]

    def commit(self) -> None:
        """Keep the drafted rows as context (after rows for accepted tokens were run)."""
        self.committed += self.drafted
        self.drafted = 0

    def discard(self) -> None:
        self.drafted = 0

    def _reserve(self, rows: int) -> None:
        if rows <= self.kv.capacity:
            return
        capacity, old, n = max(rows, 2 * self.kv.capacity), self.kv.layers[0], self.committed + self.drafted
        if not old.is_initialized:
            self.kv = TreeKVCache(1, capacity)
            return
        shape = (*old.keys.shape[:2], capacity, old.keys.shape[3])
        keys, values = old.keys.new_zeros(shape), old.values.new_zeros(shape)
        keys[:, :, :n], values[:, :, :n] = old.keys[:, :, :n], old.values[:, :, :n]
        self.kv = TreeKVCache.over([(keys, values)], n)


@torch.no_grad()
def warm_up(predictor: Eagle3Predictor, rows: int) -> None:
    """Run the predictor once at every row count up to `rows` (the forwards a drafting step makes: a level's
    frontier, the tokens a step committed). On the CPU oneDNN builds a kernel per input shape on first use, which
    made each count's first forward ~6.5 ms against ~2.5 ms after; inside the first request's steps that made
    lookahead look slower than plain decoding, and the lookahead gate (decode/gate.py) decoded the next requests
    plainly (docs/bench/warm-up)."""
    device = predictor.device
    for n in range(1, rows + 1):
        features = predictor.fuse(torch.zeros(n, predictor.fc.in_features, device=device))
        PredictorCache(capacity=n).run(
            predictor, features, torch.zeros(n, dtype=torch.long), torch.arange(n) + 1, causal(n)
        )


def causal(n: int) -> torch.Tensor:
    """The [n, n] ancestor matrix of a chain (diagonal included)."""
    return torch.ones(n, n, dtype=torch.bool).tril_()
