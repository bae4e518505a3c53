"""A compact masked-diffusion transformer with block-causal attention.

Attention rule (BD3-LM / D2F style): committed tokens (prompt and finished blocks)
attend causally to committed tokens; the masked block being decoded attends to all
committed tokens before it and bidirectionally to itself. Committed tokens therefore
never look at the noisy block, so their keys/values are exact and cacheable; this is
what lets finished blocks go into a KV cache without any approximation.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class DLLMConfig:
    vocab_size: int = 260
    dim: int = 256
    n_layers: int = 4
    n_heads: int = 8
    max_len: int = 1024
    mask_token_id: int = 256
    eos_token_id: int = 257
    rope_base: float = 10000.0

    def to_dict(self) -> dict:
        return asdict(self)


def rope_cache(cfg: DLLMConfig) -> torch.Tensor:
    """cos/sin table of shape (max_len, head_dim // 2, 2)."""
    hd = cfg.dim // cfg.n_heads
    inv = 1.0 / cfg.rope_base ** (torch.arange(0, hd, 2).float() / hd)
    ang = torch.outer(torch.arange(cfg.max_len).float(), inv)
    return torch.stack([ang.cos(), ang.sin()], -1)


def apply_rope(x: torch.Tensor, rc: torch.Tensor) -> torch.Tensor:
    """Rotate x (B, H, T, hd) by the table rows rc (T, hd/2, 2)."""
    xs = x.float().reshape(*x.shape[:-1], -1, 2)
    cos, sin = rc[..., 0], rc[..., 1]
    out = torch.stack([xs[..., 0] * cos - xs[..., 1] * sin, xs[..., 0] * sin + xs[..., 1] * cos], -1)
    return out.flatten(-2).type_as(x)


class Block(nn.Module):
    def __init__(self, cfg: DLLMConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.ln1, self.ln2 = nn.LayerNorm(cfg.dim), nn.LayerNorm(cfg.dim)
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.proj = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.fc = nn.Linear(cfg.dim, 4 * cfg.dim, bias=False)
        self.out = nn.Linear(4 * cfg.dim, cfg.dim, bias=False)

    def forward(self, x, rc, mask, past=None):
        """x: (B, T, D); past: (k, v) of committed tokens or None. Returns (x, (k, v) of x)."""
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.n_heads, -1).permute(2, 0, 3, 1, 4)
        q, k = apply_rope(q, rc), apply_rope(k, rc)
        new = (k, v)
        if past is not None:
            pk, pv = past
            k = torch.cat([pk.expand(b, -1, -1, -1), k], 2)
            v = torch.cat([pv.expand(b, -1, -1, -1), v], 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        x = x + self.out(F.gelu(self.fc(self.ln2(x))))
        return x, new


class DLLM(nn.Module):
    """Masked diffusion LM; logits at a position predict the token at that same position (LLaDA-style)."""

    def __init__(self, cfg: DLLMConfig):
        super().__init__()
        self.cfg = cfg
        self.emb = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.register_buffer("rc", rope_cache(cfg), persistent=False)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, ids, pos, mask, past=None):
        """ids, pos: (B, T); mask: bool (T, S) or broadcastable, True = may attend.

        past: per-layer (k, v) of already committed tokens. Returns logits and per-layer (k, v) of ids.
        """
        x = self.emb(ids)
        rc = self.rc[pos].unsqueeze(1)
        kvs = []
        for i, blk in enumerate(self.blocks):
            x, kv = blk(x, rc, mask, None if past is None else past[i])
            kvs.append(kv)
        return self.head(self.ln(x)), kvs


def training_mask(n: int, block: int) -> torch.Tensor:
    """Mask for the concatenation [noisy (n); clean (n)] used in training (True = attend).

    noisy i attends noisy j in its own block and clean j in earlier blocks;
    clean i attends clean j <= i (causal), matching the inference-time cache.
    """
    i = torch.arange(n)
    bi = i // block
    nn_ = bi[:, None] == bi[None, :]
    nc = bi[None, :] < bi[:, None]
    cc = i[None, :] <= i[:, None]
    top = torch.cat([nn_, nc], 1)
    bottom = torch.cat([torch.zeros(n, n, dtype=torch.bool), cc], 1)
    return torch.cat([top, bottom], 0)


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
