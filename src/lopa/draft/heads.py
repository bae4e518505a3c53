"""Learned lookahead heads: a few small fp32 blocks on the base model's last hidden state.

Head i reads the last hidden state h_t of the node whose next token is the tree root
(the bonus token x_{t+1}) together with that root token's embedding, and predicts the
token i+1 places after the root (x_{t+2+i}). Conditioning on the root is what Medusa
lacks and what makes EAGLE strong; here it costs one extra 576x576 block per head.

The vocabulary projection is the base model's own frozen output embedding, restricted
to the `vocab_ids` the self-distillation data actually used (so training and drafting
stay cheap on a CPU); it is shared, not stored. Only the heads' own blocks are
trainable and counted against the < 5% parameter budget.

A heads directory holds `heads.safetensors` and `config.json`, which names the base
model (architecture, hidden size, vocabulary size, weight fingerprint); heads for
another model are refused with ModelLoadError.
"""

from __future__ import annotations

import heapq
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import torch
from safetensors.torch import save_file
from torch import nn

from ..errors import ModelLoadError
from ..models.loading import embedding_fingerprint
from .base import Proposal, StepFeedback
from .files import read_config_json, read_weights

FORMAT = "lopa-heads/1"
WEIGHTS = "heads.safetensors"
CONFIG = "config.json"
DEFAULT_HEADS_DIR = Path(__file__).resolve().parent.parent / "data" / "heads"


@dataclass
class HeadsConfig:
    num_heads: int
    num_layers: int  # residual blocks per head after the input block
    hidden_size: int
    vocab_size: int  # the base model's vocabulary (vocab_ids index into it)
    architecture: str
    fingerprint: str  # LoadedModel.fingerprint of the base weights
    fingerprints: list[str] = field(default_factory=list)  # the same weights run in fp16 / bf16
    base_name: str = ""
    base_parameters: int = 0
    training: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"format": FORMAT, **asdict(self)}


def base_identity(loaded) -> dict:
    """What a heads file records about its base model (a LoadedModel)."""
    return model_identity(loaded.model, loaded.name)


def model_identity(model, name: str = "") -> dict:
    """What a draft file records about its base model (a PreTrainedModel): sizes, architecture, weight fingerprints."""
    cfg = model.config
    emb = model.get_input_embeddings().weight
    return {
        "hidden_size": cfg.get_text_config().hidden_size,
        "vocab_size": model.get_output_embeddings().weight.shape[0],
        "architecture": (cfg.architectures or [type(model).__name__])[0],
        "fingerprint": embedding_fingerprint(emb),
        "fingerprints": [embedding_fingerprint(emb.to(dtype)) for dtype in (torch.float16, torch.bfloat16)],
        "base_name": name,
        "base_parameters": sum(p.numel() for p in model.parameters()),
    }


class _Head(nn.Module):
    """[h; e(root)] -> h-sized feature: an input block plus SiLU residual blocks (Medusa's ResBlock)."""

    def __init__(self, hidden: int, layers: int):
        super().__init__()
        self.inp = nn.Linear(2 * hidden, hidden)
        self.blocks = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(layers))
        with torch.no_grad():  # start as the identity on h: the base's own next-token guess
            self.inp.weight.zero_()
            self.inp.weight[:, :hidden].copy_(torch.eye(hidden))
            self.inp.bias.zero_()
            for block in self.blocks:
                block.weight.zero_()
                block.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for block in self.blocks:
            x = x + nn.functional.silu(block(x))
        return x


class LookaheadHeads(nn.Module):
    """k heads over a frozen, shared vocabulary projection; always computes in fp32."""

    def __init__(self, config: HeadsConfig, embedding: torch.Tensor, vocab_ids: torch.Tensor):
        super().__init__()
        self.config = config
        self.heads = nn.ModuleList(_Head(config.hidden_size, config.num_layers) for _ in range(config.num_heads))
        self.register_buffer("vocab_ids", vocab_ids.long(), persistent=True)
        self.attach(embedding)

    def attach(self, embedding: torch.Tensor) -> None:
        """Share the base's (tied) output embedding [vocab, hidden]; fp32 copies only what is needed."""
        emb = embedding.detach()
        self.embedding = emb if emb.dtype == torch.float32 else emb.float()
        self.projection = self.embedding.index_select(0, self.vocab_ids.to(emb.device))

    @property
    def trainable_parameters(self) -> int:
        return sum(p.numel() for p in self.heads.parameters())

    def features(self, hidden: torch.Tensor, roots: torch.Tensor) -> list[torch.Tensor]:
        """Per head, the [N, hidden] feature for hidden [N, hidden] and root token ids [N]."""
        x = torch.cat([hidden.float(), self.embedding[roots]], -1)
        return [head(x) for head in self.heads]

    def logits(self, feature: torch.Tensor) -> torch.Tensor:
        """Logits over vocab_ids for one head's features."""
        return feature @ self.projection.T

    @torch.no_grad()
    def top_k(self, hidden: torch.Tensor, root: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(probabilities [heads, k], token ids [heads, k]) for one hidden state [hidden]."""
        roots = torch.tensor([root], device=hidden.device)
        feats = torch.cat(self.features(hidden[None], roots))
        probs, idx = self.logits(feats).softmax(-1).topk(k, dim=-1)
        return probs, self.vocab_ids[idx]

    def summary(self) -> dict:
        c = self.config
        base = c.base_parameters or 1
        return {
            "heads": c.num_heads,
            "depth": c.num_heads,  # head i drafts the (i+1)-th token after the root
            "layers_per_head": c.num_layers + 1,
            "parameters": self.trainable_parameters,
            "percent_of_base": 100.0 * self.trainable_parameters / base,
            "draft_vocab": int(self.vocab_ids.numel()),
            "base": c.base_name,
            "fingerprint": c.fingerprint,
        }


def save_heads(heads: LookaheadHeads, out: Path | str) -> None:
    """Write config.json and heads.safetensors (the shared embedding is not stored)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous().cpu() for k, v in heads.state_dict().items()}
    save_file(tensors, str(out / (WEIGHTS + ".tmp")))
    (out / (WEIGHTS + ".tmp")).replace(out / WEIGHTS)
    (out / CONFIG).write_text(json.dumps(heads.config.to_json(), indent=1) + "\n")


def _read_config(path: Path) -> HeadsConfig:
    raw = read_config_json(path, CONFIG, "heads")
    if not isinstance(raw, dict) or raw.pop("format", None) != FORMAT:
        raise ModelLoadError(f"{path / CONFIG} is not a {FORMAT} heads config")
    try:
        return HeadsConfig(**raw)
    except TypeError as exc:
        raise ModelLoadError(f"{path / CONFIG} has missing or unknown fields: {exc}") from None


def _check_base(config: HeadsConfig, loaded, path: Path) -> None:
    base = base_identity(loaded)
    if base["fingerprint"] in config.fingerprints:  # the same weights, run in half precision
        base["fingerprint"] = config.fingerprint
    for key in ("architecture", "hidden_size", "vocab_size", "fingerprint"):
        if getattr(config, key) != base[key]:
            raise ModelLoadError(
                f"heads at {path} were trained for {config.base_name or 'another model'} "
                f"({key} {getattr(config, key)!r}), not for {loaded.name} ({key} {base[key]!r})"
            )


def load_heads(path: Path | str, loaded) -> LookaheadHeads:
    """Load heads for the LoadedModel `loaded`; ModelLoadError if missing, corrupt or for another model."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise ModelLoadError(f"heads path {path} does not exist or is not a directory")
    config = _read_config(path)
    _check_base(config, loaded, path)
    tensors = read_weights(path, WEIGHTS)
    vocab_ids = tensors.get("vocab_ids")
    if vocab_ids is None or vocab_ids.ndim != 1 or not vocab_ids.numel() or int(vocab_ids.max()) >= config.vocab_size:
        raise ModelLoadError(f"{path / WEIGHTS} has no valid vocab_ids")
    embedding = loaded.model.get_output_embeddings().weight
    heads = LookaheadHeads(config, embedding, vocab_ids)
    try:
        heads.load_state_dict(tensors, strict=True)
    except RuntimeError as exc:  # missing keys or shape mismatches
        raise ModelLoadError(f"{path / WEIGHTS} does not match its config: {str(exc).splitlines()[0]}") from None
    return heads.to(embedding.device).eval().requires_grad_(False)


HeadsSpec = str | Path | bool | None


def heads_for(loaded, spec: HeadsSpec, enabled: bool = True) -> LookaheadHeads | None:
    """Resolve an Engine's `heads` argument: a directory, False (none), True (shipped, required) or None.

    None takes the shipped heads only when they were trained for this very model.
    """
    if spec is False or not enabled:
        return None
    if isinstance(spec, LookaheadHeads):
        return spec
    if spec is None or spec is True:
        if spec is None and not _fits(DEFAULT_HEADS_DIR, loaded):
            return None
        spec = DEFAULT_HEADS_DIR
    return load_heads(spec, loaded)


def _fits(path: Path, loaded) -> bool:
    try:
        config = _read_config(path)
    except ModelLoadError:
        return False
    return loaded.fingerprint in [config.fingerprint, *config.fingerprints]


class HeadsDrafter:
    """Proposes the most probable tree through the heads' per-depth top-k (path probability = product).

    It drafts from the hidden state of the last accepted node of the previous step, so
    the first step after prefill gets no head proposals.
    """

    source = "heads"

    def __init__(self, heads: LookaheadHeads, top_k: int = 4, max_nodes: int = 24):
        self.heads = heads
        self.top_k = top_k
        self.max_nodes = max_nodes
        self.hidden: torch.Tensor | None = None

    def start(self, prompt: Sequence[int]) -> None:
        self.hidden = None

    def observe(self, feedback: StepFeedback) -> None:
        self.hidden = feedback.hidden[feedback.accepted_nodes[-1]]

    def propose(self, context: Sequence[int], max_depth: int) -> list[Proposal]:
        if self.hidden is None:
            return []
        depth = min(max_depth, self.heads.config.num_heads)
        probs, ids = self.heads.top_k(self.hidden, context[-1], self.top_k)
        probs, ids = probs[:depth].tolist(), ids[:depth].tolist()
        return [
            Proposal([ids[d][j] for d, j in enumerate(path)], [probs[d][j] for d, j in enumerate(path)], self.source)
            for path in best_paths(probs, self.max_nodes)
        ]


def best_paths(probs: list[list[float]], limit: int) -> list[tuple[int, ...]]:
    """Leaves of the `limit`-node tree with the highest path probabilities (products of per-depth probabilities).

    Every prefix of a chosen node scores at least as high, so the chosen nodes form a
    tree; alternatives at shallow depths win over long shots deep down.
    """
    frontier = [(-q, (j,)) for j, q in enumerate(probs[0])]
    heapq.heapify(frontier)
    chosen: list[tuple[int, ...]] = []
    while frontier and len(chosen) < limit:
        score, node = heapq.heappop(frontier)
        chosen.append(node)
        if len(node) < len(probs):
            for j, q in enumerate(probs[len(node)]):
                heapq.heappush(frontier, (score * q, node + (j,)))
    prefixes = {node[:d] for node in chosen for d in range(1, len(node))}
    return [node for node in chosen if node not in prefixes]
