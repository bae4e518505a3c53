"""A GGUF's weights at full precision: the same model, dequantized, for a same-precision llama.cpp comparison.

lopa's fp32 path runs the catalog GGUF's weights dequantized to fp32 (transformers' GGUF loader); llama.cpp on
the quantized file as shipped runs other arithmetic and gives other tokens. Writing the dequantized weights
back to a GGUF (F32, or BF16 for the matrices) lets llama.cpp run exactly the weights lopa runs. Every key of
the source file is kept but its file type; the `gguf` package (llama.cpp's own) reads, dequantizes and writes.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from .catalog import cache_root

PRECISIONS = {
    "f32": (gguf.GGMLQuantizationType.F32, gguf.LlamaFileType.ALL_F32),
    "bf16": (gguf.GGMLQuantizationType.BF16, gguf.LlamaFileType.MOSTLY_BF16),
}


def full_precision_gguf(source: Path, precision: str) -> Path:
    """`source` with every tensor dequantized to `precision` ("f32" or "bf16": matrices in bf16, vectors in f32),
    written once under the cache and reused."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
    out = cache_root() / "gguf" / "full-precision" / f"{source.stem}-{source.stat().st_size}.{precision.upper()}.gguf"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    qtype, file_type = PRECISIONS[precision]
    reader = gguf.GGUFReader(source)
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()
    writer = gguf.GGUFWriter(tmp, arch)
    for field in reader.fields.values():
        if field.name in (gguf.Keys.General.ARCHITECTURE, gguf.Keys.General.FILE_TYPE) or field.name.startswith(
            "GGUF."
        ):
            continue  # written by GGUFWriter itself, or set below
        kind = field.types[0]
        writer.add_key_value(
            field.name, field.contents(), kind, sub_type=field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        )
    writer.add_file_type(file_type)
    for tensor in reader.tensors:
        weights = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        if qtype == gguf.GGMLQuantizationType.BF16 and weights.ndim >= 2:
            writer.add_tensor(tensor.name, gguf.quants.quantize(weights, qtype), raw_dtype=qtype)
        else:
            writer.add_tensor(tensor.name, weights)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(out)
    return out
