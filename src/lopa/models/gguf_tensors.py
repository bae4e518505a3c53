"""A GGUF's tensors by Hugging Face parameter name, each read from the mapped file when asked for.

transformers' GGUF loader dequantizes every tensor to floats at once (lopa cached that as an fp32 copy: 7.1 GB
for the 1.1 GB Qwen2.5-Coder-1.5B file). A quantized model needs each tensor once and in its own form: 4-bit
blocks as they are (models/int4.py), the rest dequantized exactly as transformers would (the same gguf-py
dequantizer, the same per-architecture processor: Llama's rotary row order, Gemma's norm offset).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import gguf
import numpy as np
import torch
from gguf.gguf_reader import ReaderTensor
from transformers import PreTrainedModel
from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, TensorProcessor, get_gguf_hf_weights_map

from .int4 import FOUR_BIT, unpack_blocks


def tensor_table(path: Path, table: Path | None = None) -> tuple[str, list[ReaderTensor]]:
    """The GGUF's architecture and tensors, their data mapped from the file. gguf-py's reader parses every metadata
    field to find them (3.2 s for SmolLM2's 49k-token vocabulary, 13.7 s for Qwen's 152k); with `table`, where each
    tensor lies is written there the first time and read from it after (the caller keys it to the file)."""
    if table is None or not table.exists():
        reader = gguf.GGUFReader(path)
        architecture = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()
        if table is None:
            return architecture, list(reader.tensors)
        rows = [
            {
                "name": t.name, "type": int(t.tensor_type), "shape": t.shape.tolist(), "elements": int(t.n_elements),
                "bytes": int(t.n_bytes), "offset": int(t.data_offset), "dtype": t.data.dtype.str,
                "data_shape": list(t.data.shape),
            }
            for t in reader.tensors
        ]  # fmt: skip
        tmp = table.with_name(table.name + ".tmp")
        tmp.write_text(json.dumps({"architecture": architecture, "tensors": rows}))
        tmp.replace(table)
    spec = json.loads(table.read_text())
    mapped = np.memmap(path, mode="r")
    return spec["architecture"], [_mapped_tensor(mapped, row) for row in spec["tensors"]]


def _mapped_tensor(mapped: np.memmap, row: dict) -> ReaderTensor:
    """A tensor of tensor_table's `table`, its data viewed in the mapped file as gguf-py's reader views it."""
    start, end = row["offset"], row["offset"] + row["bytes"]
    return ReaderTensor(
        name=row["name"], tensor_type=gguf.GGMLQuantizationType(row["type"]),
        shape=np.array(row["shape"], dtype=np.uint64), n_elements=row["elements"], n_bytes=row["bytes"],
        data_offset=start, data=mapped[start:end].view(np.dtype(row["dtype"])).reshape(row["data_shape"]), field=None,
    )  # fmt: skip


class GGUFTensors:
    """The tensors of the GGUF at `path`, named as `model`'s parameters (the model gives the name mapping); `table`:
    see tensor_table."""

    def __init__(self, path: Path, model: PreTrainedModel, table: Path | None = None):
        self.path = path
        architecture, self.tensors = tensor_table(path, table)
        self._processor = TENSOR_PROCESSORS.get(architecture, TensorProcessor)(config=model.config.to_dict())
        to_hf = get_gguf_hf_weights_map(model, self._processor)
        self._tensors = {to_hf[t.name]: t for t in self.tensors if t.name in to_hf}

    def __contains__(self, name: str) -> bool:
        return name in self._tensors

    def blocks(self, name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """(codes, scale, low) of a 4-bit tensor, rows in the model's order (models/int4.unpack_blocks); None when
        the file stores `name` otherwise."""
        tensor = self._tensors[name]
        if tensor.tensor_type not in FOUR_BIT:
            return None
        rows = int(tensor.shape[-1])
        arrays = unpack_blocks(np.asarray(tensor.data), tensor.tensor_type, rows)
        order = self._row_order(tensor.name, rows)
        return tuple(torch.from_numpy(np.ascontiguousarray(a[order])) for a in arrays)

    def dequantized(self, name: str) -> torch.Tensor:
        """The tensor in fp32, as transformers' GGUF loader gives it."""
        tensor = self._tensors[name]
        return self._processed(tensor, tensor.data)

    def stored(self, name: str) -> ReaderTensor:
        """The file's tensor for the model's `name`, as the file stores it."""
        return self._tensors[name]

    def slabs(self, name: str, rows_per_read: int = 4096) -> Iterator[tuple[int, torch.Tensor]]:
        """(first row, rows) of the tensor as `dequantized` gives it, a slab of rows at a time where the processor
        keeps rows in place: numpy's dequantizers make temporaries several times a whole vocabulary's fp32 size."""
        tensor = self._tensors[name]
        rows = len(tensor.data)
        if tensor.data.ndim != 2 or not np.array_equal(self._row_order(tensor.name, rows), np.arange(rows)):
            yield 0, self.dequantized(name)
            return
        for start in range(0, rows, rows_per_read):
            yield start, self._processed(tensor, tensor.data[start : start + rows_per_read])

    def read_into(self, name: str, target: torch.Tensor, rows_per_read: int = 4096) -> None:
        """Fill `target` with the tensor as `dequantized` gives it, a slab of rows at a time (`slabs`)."""
        for start, rows in self.slabs(name, rows_per_read):
            target[start : start + len(rows)].copy_(rows)

    def _processed(self, tensor: ReaderTensor, data: np.ndarray) -> torch.Tensor:
        """`data` (the tensor's or some of its rows) dequantized and processed as transformers would."""
        weights = self._processor.process(weights=gguf.quants.dequantize(data, tensor.tensor_type), name=tensor.name)
        return torch.from_numpy(np.require(weights.weights, requirements=("C", "W")))  # F32 data is the file's: copied

    def _row_order(self, gguf_name: str, rows: int) -> np.ndarray:
        """The order transformers puts a tensor's rows in (it un-permutes Llama's q/k rows for rotary)."""
        index = np.arange(rows, dtype=np.float64)[:, None]
        return self._processor.process(weights=index, name=gguf_name).weights[:, 0].astype(np.int64)
