"""int4 weight-only linear layers for the CPU, taken from a GGUF's own 4-bit blocks where it has them.

A Q4_0, Q4_1 or Q4_K tensor is 4-bit codes in groups of 32 inputs with one scale and one offset per group
(Q4_K: a sub-block scale times the super-block's), w = code * scale + low. The three int4 kernels take that
layout (Int4Linear says which runs where), so those weights are repacked, never expanded to floats: the
model keeps about the file's size in memory instead of an fp32 copy 7x larger. Linear layers the file
stores otherwise (Q5/Q6/Q8, F16, or an HF directory) are quantized by lopa to the same layout (per group of
32, min-max, round to nearest). Each kernel computes each row of a product alike whatever the row count,
so with bf16 everything else and the order-fixed attention (models/ordered_attention.py) a verified tree
gives the logits one-token steps give.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache
from typing import TYPE_CHECKING

import gguf
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel

from ..errors import UnsupportedModelError
from . import native
from .fastlinear import replace_linears

if TYPE_CHECKING:
    from .gguf_tensors import GGUFTensors

INT4 = "int4"
GROUP = 32
Q = gguf.GGMLQuantizationType
FOUR_BIT = (Q.Q4_0, Q.Q4_1, Q.Q4_K)


KERNELS = ("amx-tiles", "panel", "torch")  # Int4Linear's, fastest first
PANEL = 16  # outputs per panel of the tile kernel
TILE_ROWS = 16  # input rows per tile product


@cache
def _tile_kernel() -> ctypes.CDLL | None:
    """kernels/int4_matmul.c (AMX tiles) when this CPU and process can run it, else None."""
    library = native.library("int4_matmul")
    if library is None or not library.int4_matmul_available():
        return None
    return library


@cache
def row_invariant_kernel(bits: int, tiles: bool = True) -> ctypes._CFuncPtr | None:
    """The product of `bits`-bit codes (4 or 8) in panel layout that computes each row alike whatever the row count:
    kernels/int4_matmul.c's on AMX tiles where they run (and `tiles`), else kernels/panel_matmul.c's (any CPU with
    a C compiler; same arguments), else None (no compiler)."""
    tile_library = _tile_kernel() if tiles else None
    library = tile_library or native.library("panel_matmul")
    if library is None:
        return None
    kernel = getattr(library, f"int{bits}_matmul" if tile_library else f"panel_int{bits}_matmul")
    kernel.restype = None
    kernel.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 3 + [ctypes.c_int]
    return kernel


def tile_product(kernel, flat: torch.Tensor, arrays: tuple, out_features: int) -> torch.Tensor:
    """flat [m, in] bf16 -> [m, out] bf16 through a row_invariant_kernel; `arrays`:
    its codes, scale and low (None: no offsets) in panel layout. Lean: a forward makes ~200 of these calls (each
    Python step here costs about what a small layer's kernel does)."""
    rows = flat.shape[0]
    if rows > TILE_ROWS and rows % TILE_ROWS:  # the kernel reads whole tiles of min(rows, TILE_ROWS) rows
        flat = F.pad(flat, (0, 0, 0, -rows % TILE_ROWS))
    elif not flat.is_contiguous():
        flat = flat.contiguous()
    out = torch.empty(rows, out_features, dtype=torch.bfloat16)
    codes, scale, low = arrays
    kernel(
        flat.data_ptr(), codes.data_ptr(), scale.data_ptr(), None if low is None else low.data_ptr(), out.data_ptr(),
        rows, out_features, flat.shape[1], torch.get_num_threads(),
    )  # fmt: skip
    return out


@torch.library.custom_op("lopa::row_invariant_product", mutates_args=())
def row_invariant_product(
    flat: torch.Tensor,
    codes: torch.Tensor,
    scale: torch.Tensor,
    low: torch.Tensor | None,
    out_features: int,
    bits: int,
    tiles: bool,
) -> torch.Tensor:
    """tile_product through row_invariant_kernel(bits, tiles) as a registered op: torch.compile keeps it one opaque
    kernel of known shape, where the ctypes call itself would break the graph (eager forwards call the kernel
    directly: the op's dispatch costs ~15 us)."""
    return tile_product(row_invariant_kernel(bits, tiles), flat, (codes, scale, low), out_features)


@row_invariant_product.register_fake
def _row_invariant_product_shape(flat, codes, scale, low, out_features, bits, tiles) -> torch.Tensor:
    return flat.new_empty(flat.shape[0], out_features)


class Int4Linear(nn.Module):
    """y = x @ W.T with W = q * scale + low per group of 32 inputs, q in 0..15; bf16 in and out.

    Three kernels. Two compute each row alike whatever the row count, with the codes multiplied exactly and the
    file's scales in fp32: lopa's AMX tile kernel (kernels/int4_matmul.c: 1 to 16 rows cost about one, up to 4
    rows in AVX-512 registers with the tiles' arithmetic) where the CPU has AMX-BF16, else lopa's portable one
    (kernels/panel_matmul.c: AVX2, Arm; cost growing with the rows). Without a C compiler, torch's
    `_weight_int4pack_mm_for_cpu` (scale and offset rounded to bf16)."""

    def __init__(
        self,
        codes: torch.Tensor,
        scale: torch.Tensor,
        low: torch.Tensor,
        bias: torch.Tensor | None,
        *,
        kernel: str | None = None,
    ):
        """codes [out, in] int in 0..15; scale, low [out, in / 32]. `kernel`: one of KERNELS (default: the first
        that runs here and takes the layer: AMX tiles need panels of 16 outputs and pairs of input groups, the
        portable kernel panels)."""
        super().__init__()
        self.out_features, self.in_features = codes.shape
        panels = self.out_features % PANEL == 0
        runs = {
            "amx-tiles": _tile_kernel() is not None and panels and self.in_features % (2 * GROUP) == 0,
            "panel": panels and row_invariant_kernel(4, tiles=False) is not None,
            "torch": True,
        }
        self.kernel = kernel or next(name for name in KERNELS if runs[name])
        if not runs[self.kernel]:
            raise ValueError(
                f"the {self.kernel} int4 kernel cannot run a {self.in_features}x{self.out_features} layer here"
            )
        self._kernel = None if self.kernel == "torch" else row_invariant_kernel(4, tiles=self.kernel == "amx-tiles")
        if self._kernel:
            panels, groups = self.out_features // PANEL, self.in_features // GROUP
            # per panel and group: 8 chunks of 32 bytes, chunk c holding tile rows 2c (low nibbles) and 2c + 1
            # (high); tile row p holds inputs 2p and 2p + 1 of each of the 16 outputs, side by side
            c = codes.to(torch.uint8).reshape(panels, PANEL, groups, 8, 2, 2).permute(0, 2, 3, 4, 1, 5)
            c = c.reshape(panels, groups, 8, 2, 2 * PANEL)
            self.register_buffer("codes", (c[..., 0, :] | (c[..., 1, :] << 4)).contiguous(), persistent=False)
            per_panel = lambda a: a.float().reshape(panels, PANEL, groups).transpose(1, 2).contiguous()  # noqa: E731
            self.register_buffer("scale", per_panel(scale), persistent=False)
            self.register_buffer("low", per_panel(low), persistent=False)
            self._arrays = self.codes, self.scale, self.low  # read every call: past nn.Module's slow lookup
        else:
            packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32).contiguous(), 1)
            self.register_buffer("packed", packed, persistent=False)
            zeros = low + 8 * scale  # torch's kernel takes w = (q - 8) * scale + zero
            self.register_buffer(
                "scales_zeros", torch.stack([scale, zeros], -1).transpose(0, 1).contiguous().bfloat16()
            )
        self.bias = bias

    @classmethod
    def from_weight(cls, weight: torch.Tensor, bias: torch.Tensor | None = None, **options) -> Int4Linear:
        """Quantized by lopa: per group of 32, min-max asymmetric, round to nearest."""
        groups = weight.detach().float().unflatten(1, (-1, GROUP))
        low, high = groups.amin(-1), groups.amax(-1)
        scale = ((high - low) / 15).clamp(min=1e-8)
        codes = torch.round((groups - low[..., None]) / scale[..., None]).clamp(0, 15).flatten(1)
        return cls(codes, scale, low, bias, **options)

    def weight(self) -> torch.Tensor:
        """The weight [out, in] as the kernel computes with it, in fp32 (for checks, not for the forward)."""
        return self._product(torch.eye(self.in_features, dtype=torch.bfloat16)).t().float()

    def _apply(self, fn, recurse=True):
        module = super()._apply(fn, recurse)
        if self._kernel:  # the buffers may be new tensors now
            self._arrays = self.codes, self.scale, self.low
        return module

    def _product(self, flat: torch.Tensor) -> torch.Tensor:
        """flat [m, in] bf16 -> [m, out] bf16."""
        if torch.compiler.is_compiling() and self.kernel != "torch":
            tiles = self.kernel == "amx-tiles"
            return row_invariant_product(flat, self.codes, self.scale, self.low, self.out_features, 4, tiles)
        if not self._kernel:
            return torch.ops.aten._weight_int4pack_mm_for_cpu(flat, self.packed, GROUP, self.scales_zeros)
        return tile_product(self._kernel, flat, self._arrays, self.out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.view(-1, self.in_features) if x.is_contiguous() else x.reshape(-1, self.in_features)
        out = self._product(flat if x.dtype == torch.bfloat16 else flat.to(torch.bfloat16))
        if self.bias is not None:
            out = out + self.bias
        out = out.view(*x.shape[:-1], self.out_features)
        return out if x.dtype == torch.bfloat16 else out.to(x.dtype)


class Int4Embedding(nn.Module):
    """A token embedding kept in a GGUF's 4-bit blocks (two codes a byte, fp32 scale and offset per 32): a lookup
    dequantizes just its rows, to the values transformers' loader gives (code * scale + low in fp32, rounded to bf16
    once; for Q4_0, Q4_1 and Q4_K that is gguf-py's own arithmetic, tested). For an untied embedding, which only
    looks rows up: 3/8 of the bf16 matrix (Qwen2.5-Coder-1.5B: 175 MB against 467)."""

    def __init__(self, codes: torch.Tensor, scale: torch.Tensor, low: torch.Tensor):
        """codes [vocab, hidden] in 0..15; scale, low [vocab, hidden / 32]."""
        super().__init__()
        self.num_embeddings, self.embedding_dim = codes.shape
        codes = codes.to(torch.uint8)
        self.register_buffer("codes", codes[:, 0::2] | (codes[:, 1::2] << 4), persistent=False)
        self.register_buffer("scale", scale.float().contiguous(), persistent=False)
        self.register_buffer("low", low.float().contiguous(), persistent=False)

    @property
    def weight(self) -> torch.Tensor:
        """The whole matrix in bf16, built on each access (for checks: lookups never build it)."""
        return self(torch.arange(self.num_embeddings))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        flat = ids.reshape(-1)
        packed = self.codes[flat]
        codes = torch.stack([packed & 0x0F, packed >> 4], dim=-1).view(len(flat), -1, GROUP).float()
        rows = codes * self.scale[flat, :, None] + self.low[flat, :, None]
        return rows.bfloat16().view(*ids.shape, self.embedding_dim)


def weight_name(model: nn.Module, module: nn.Module) -> str:
    """The model's name for `module`'s weight (how GGUFTensors names the file's tensor)."""
    return next(name for name, m in model.named_modules() if m is module) + ".weight"


def keep_int4_embedding(model: PreTrainedModel, tensors: GGUFTensors) -> bool:
    """Swap an untied plain token embedding that the file stores in 4-bit blocks for an Int4Embedding over them
    (in place); returns whether it did. A tied one stays: the vocabulary projection reads the whole matrix."""
    embedding, projection = model.get_input_embeddings(), model.get_output_embeddings()
    # the parameter, not .weight: a Q8_0 projection's .weight builds its whole bf16 matrix
    tied = projection is not None and projection._parameters.get("weight") is embedding.weight
    if type(embedding) is not nn.Embedding or tied:
        return False
    name = weight_name(model, embedding)
    blocks = tensors.blocks(name) if name in tensors else None
    if blocks is not None:
        model.set_input_embeddings(Int4Embedding(*blocks))
    return blocks is not None


def _halves(packed: np.ndarray) -> np.ndarray:
    """16 bytes of nibbles per 32 codes -> [..., 32]: low nibbles are codes 0..15, high nibbles 16..31."""
    return np.concatenate([packed & 0x0F, packed >> 4], axis=-1)


def fp16_field(raw: np.ndarray) -> np.ndarray:
    """A block field of 2 raw bytes [..., 2] read as the fp16 it holds, widened to float32 [...]."""
    return raw.copy().view(np.float16).astype(np.float32)[..., 0]


def _k_scales(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K's 12 bytes of 6-bit (scale, min) pairs for its 8 sub-blocks -> two [..., 8] arrays."""
    raw = raw.astype(np.uint8)
    low = np.concatenate([raw[..., 0:4] & 63, (raw[..., 8:12] & 0x0F) | ((raw[..., 0:4] >> 6) << 4)], axis=-1)
    mins = np.concatenate([raw[..., 4:8] & 63, (raw[..., 8:12] >> 4) | ((raw[..., 4:8] >> 6) << 4)], axis=-1)
    return low.astype(np.float32), mins.astype(np.float32)


def unpack_blocks(data: np.ndarray, kind: gguf.GGMLQuantizationType, rows: int):
    """A 4-bit GGUF tensor's raw bytes -> codes [rows, in] (uint8, 0..15), scale and low [rows, in / 32] (float32):
    w = codes * scale + low."""
    if kind in (Q.Q4_0, Q.Q4_1):
        size = 18 if kind == Q.Q4_0 else 20
        blocks = data.reshape(rows, -1, size)
        d = fp16_field(blocks[..., 0:2])
        codes = _halves(blocks[..., size - 16 :])
        low = -8 * d if kind == Q.Q4_0 else fp16_field(blocks[..., 2:4])
        return codes.reshape(rows, -1), d, low
    if kind == Q.Q4_K:
        blocks = data.reshape(rows, -1, 144)
        d, dmin = fp16_field(blocks[..., 0:2]), fp16_field(blocks[..., 2:4])
        sub_scale, sub_min = _k_scales(blocks[..., 4:16])
        nibbles = blocks[..., 16:].reshape(rows, -1, 4, 32)  # 4 chunks of 64 codes: low nibbles first, then high
        codes = np.stack([nibbles & 0x0F, nibbles >> 4], axis=3).reshape(rows, -1)
        scale = (d[..., None] * sub_scale).reshape(rows, -1)
        low = -(dmin[..., None] * sub_min).reshape(rows, -1)
        return codes, scale, low
    raise ValueError(f"{kind.name} is not a 4-bit block type")


def return_freed_memory() -> None:
    """Hand the load's freed transients (bf16 weights, unpacked codes) back to the OS: glibc keeps them in its arenas
    otherwise, and the process would stay ~2x its weights (measured: docs/bench/exact-low-precision/memory.log)."""
    libc = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(libc), "malloc_trim", None) if libc else None
    if trim is not None:
        trim(0)


def quantize_int4(model: PreTrainedModel, tensors: GGUFTensors | None = None) -> dict[str, int]:
    """The decoder's linear layers as Int4Linear (in place), one at a time: from the GGUF's 4-bit blocks where
    `tensors` has them, else quantized by lopa from the file's other weights (dequantized, rounded to bf16 as a
    bf16 load would) or, without a file, from the model's own. Everything else runs in bf16. Returns how many
    layers came from the file and how many lopa quantized."""
    if model.device.type != "cpu" or model.dtype != torch.bfloat16:
        raise UnsupportedModelError("int4 needs a bf16 model on the CPU (--device cpu)")
    names = {id(module): name for name, module in model.named_modules()}
    counts = {"from_file": 0, "quantized_by_lopa": 0}

    def make(linear: nn.Linear) -> Int4Linear:
        if linear.in_features % GROUP:
            raise UnsupportedModelError(f"int4 needs input sizes that are multiples of {GROUP}")
        name = f"{names[id(linear)]}.weight"
        stored = tensors.blocks(name) if tensors is not None else None
        counts["from_file" if stored else "quantized_by_lopa"] += 1
        if stored:
            return Int4Linear(*stored, linear.bias)
        weight = tensors.dequantized(name).bfloat16() if tensors is not None else linear.weight
        return Int4Linear.from_weight(weight, linear.bias)

    replace_linears(model.get_decoder(), make)
    return_freed_memory()
    model.lopa_precision = INT4
    model.lopa_int4_layers = counts
    return counts


def kernel_name(model: nn.Module) -> str:
    """Which int4 kernels the model's layers run on ('amx-tiles', 'panel', 'torch', joined by '+' where they
    differ), and '+q8-vocab' where the vocabulary projection runs in Q8_0 (models/q8_vocabulary.py)."""
    used = {layer.kernel for layer in model.modules() if isinstance(layer, Int4Linear)}
    q8 = getattr(model, "lopa_int4_layers", {}).get("vocabulary", "").startswith("q8_0")
    return "+".join([name for name in KERNELS if name in used] + ["q8-vocab"] * q8)
