"""The self-distillation corpus: the base model's own answers to a broad offline prompt set, as token ids.

A corpus directory holds
  config.json          the settings that decide its content and the model's fingerprint (a resume must match them)
  self-instruct.jsonl  the requests the model wrote itself, one line per batch
  prompts.jsonl.gz     every prompt in order with its source; chunk c answers prompts [c*S, (c+1)*S)
  chunk-00000.npz      prompt and answer ids, concatenated with offsets, greedy or sampled per sequence
  manifest.jsonl       one line per sequence: chunk, index, prompt, source, mode, seed, token counts, producer
Answers come from lopa's own engine (`Engine.generate([...])`: many sequences in flight in one batched step, lopa's
kernels, the lookahead gate choosing plain or lookahead steps by what each batch size measures), each sampled one
with its own seed. The coupled sampler makes an answer independent of the batch it was decoded in, so the factory
gives for a prompt and seed what `generate` alone gives, and a stopped run resumes with what an uninterrupted run
would have written. Every file is written whole (temporary file, then rename) and never regenerated once it exists.
`producer` (the engine's method, precision and device) is recorded per sequence: the answers may come from a faster,
approximate copy of the model; features are not stored (the trainer recomputes them by fp32 teacher forcing).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from ..config import GenerationConfig
from ..errors import InvalidRequestError
from ..models.loading import embedding_fingerprint
from .sources import LOCALE_DIR, SHARES, Prompt, clean_request, instruct_seeds, mix

INSTRUCT_TOKENS = 40  # enough for one request
LEGACY_PRODUCER = "transformers-generate float32 cpu"  # chunks made before the factory ran on lopa's engine


@dataclass(frozen=True)
class CorpusSettings:
    """What decides a corpus's content (a resumed run must match); how fast it is made (`batch`) may change."""

    prompts: int = 8192  # asked of the sources; fewer remain after deduplication
    chunk_size: int = 64
    batch: int = 32  # sequences in flight in the engine's batched step
    max_new_tokens: int = 256
    sampled_fraction: float = 0.5
    temperature: float = 0.8
    top_p: float = 0.95
    seed: int = 0

    def content(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "batch"}


def batch_seed(*parts) -> int:
    """A seed fixed by the corpus seed and a sequence's (or request's) place."""
    return random.Random("-".join(map(str, parts))).getrandbits(63)


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _append_jsonl(path: Path, row: dict) -> None:
    """Append one line, first ending a line that a stop cut short (it stays one bad line, dropped when read)."""
    cut = path.exists() and path.stat().st_size > 0 and not path.read_bytes().endswith(b"\n")
    with path.open("a") as f:
        f.write(("\n" if cut else "") + json.dumps(row) + "\n")


def _read_jsonl(path: Path) -> list[dict]:
    """The complete lines of a JSON-lines file (a line cut short by a stop is dropped)."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def _check_config(out: Path, settings: CorpusSettings, engine) -> None:
    """The settings and weights must match the corpus's. Weights are compared at bfloat16, so a corpus answered in
    bf16 on one machine can go on in fp32 on another (where bf16 is slow): the manifest's `producer` says which
    precision answered each chunk. Corpora of earlier versions recorded the fingerprint at the precision that ran."""
    config = {**settings.content(), "fingerprint": embedding_fingerprint(engine.model, torch.bfloat16)}
    path = out / "config.json"
    if not path.exists():
        _write(path, json.dumps(config, indent=1).encode())
        return
    old = json.loads(path.read_text())
    old.pop("batch", None)  # corpora of earlier versions recorded it
    if old.get("fingerprint") == embedding_fingerprint(engine.model):
        old["fingerprint"] = config["fingerprint"]
    changed = {k: (old.get(k), v) for k, v in config.items() if old.get(k) != v}
    if changed:
        raise InvalidRequestError(f"{out} was built with other settings or another model (was, now): {changed}")


def answer(
    engine, prompt_ids: list[list[int]], seeds: list[int | None], max_new_tokens: int, settings: CorpusSettings
) -> list[list[int]]:
    """The engine's answers (ids up to and including EOS): greedy where the seed is None, else sampled with it."""
    configs = [
        GenerationConfig(max_new_tokens=max_new_tokens)
        if seed is None
        else GenerationConfig(
            max_new_tokens=max_new_tokens, temperature=settings.temperature, top_p=settings.top_p, seed=seed
        )
        for seed in seeds
    ]
    results = engine.generate_many(prompt_ids, configs, max_batch=settings.batch, progress=False)
    return [r.token_ids for r in results]


def producer(engine) -> str:
    """What made the answers: lopa's engine, its precision and device."""
    dtype = getattr(engine.model, "lopa_precision", None) or str(engine.model.dtype).removeprefix("torch.")
    return f"lopa-engine {dtype} {engine.model.device.type}"


def self_instruct(engine, settings: CorpusSettings, out: Path, locale_root: Path = LOCALE_DIR) -> list[Prompt]:
    """User requests that the base model writes itself, sampled (a seed per request), a batch at a time. Lines of
    self-instruct.jsonl hold consecutive requests from index `batch` on, so a resume with another --batch goes on
    where the last line ended."""
    seeds = instruct_seeds(round(SHARES["self-instruct"] * settings.prompts), random.Random(settings.seed), locale_root)
    path = out / "self-instruct.jsonl"
    done: list[list[str]] = []  # [topic, reply] of requests 0..len(done)-1
    for row in sorted(_read_jsonl(path), key=lambda r: r["batch"]):
        if row["batch"] != len(done):
            raise ValueError(f"{path}: requests from {len(done)} to {row['batch']} are missing")
        done += row["requests"]
    for b in tqdm(range(len(done), len(seeds), settings.batch), desc="self-instruct", unit="batch"):
        part = seeds[b : b + settings.batch]
        sampled = [batch_seed(settings.seed, "instruct", b + i) for i in range(len(part))]
        answers = answer(engine, [engine.encode_prompt(s) for _, s in part], sampled, INSTRUCT_TOKENS, settings)
        requests = [
            [topic, engine.tokenizer.decode(a, skip_special_tokens=True)] for (topic, _), a in zip(part, answers)
        ]
        _append_jsonl(path, {"batch": b, "requests": requests})
        done += requests
    cleaned = ((topic, clean_request(text)) for topic, text in done)
    return [Prompt(text, f"self-instruct:{topic}") for topic, text in cleaned if text]


def collect_prompts(engine, settings: CorpusSettings, out: Path, locale_root: Path = LOCALE_DIR) -> list[Prompt]:
    """The corpus's prompts in answering order (those whose answer fits the model's context), built once and then
    read from prompts.jsonl.gz."""
    path = out / "prompts.jsonl.gz"
    if not path.exists():
        prompts = mix(settings.prompts, settings.seed, self_instruct(engine, settings, out, locale_root), locale_root)
        prompts = [p for p in prompts if _fits(engine, p.text, settings.max_new_tokens)]
        lines = "".join(json.dumps(asdict(p)) + "\n" for p in prompts)
        _write(path, gzip.compress(lines.encode(), mtime=0))
    return [Prompt(**json.loads(line)) for line in gzip.decompress(path.read_bytes()).decode().splitlines()]


def _fits(engine, text: str, max_new_tokens: int) -> bool:
    try:
        engine.answer_room(len(engine.encode_prompt(text)), max_new_tokens)
    except InvalidRequestError:
        return False
    return True


def _concat(seqs: list[list[int]], dtype) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(s) for s in seqs])
    return np.array([t for s in seqs for t in s], dtype=dtype), offsets


def answer_chunk(engine, prompt_ids: list[list[int]], settings: CorpusSettings, chunk: int) -> dict[str, np.ndarray]:
    """Greedy answers to some prompts and sampled ones (a seed each) to the rest, all decoded together."""
    n = len(prompt_ids)
    k = min(n, round(n * settings.sampled_fraction))
    sampled = np.zeros(n, dtype=bool)
    sampled[random.Random(batch_seed(settings.seed, "modes", chunk)).sample(range(n), k)] = True
    seeds = np.array(
        [batch_seed(settings.seed, "chunk", chunk, i) if sampled[i] else -1 for i in range(n)], dtype=np.int64
    )
    answers = answer(engine, prompt_ids, [int(s) if s >= 0 else None for s in seeds], settings.max_new_tokens, settings)
    dtype = np.uint16 if engine.model.get_input_embeddings().num_embeddings <= 1 << 16 else np.uint32
    (p, po), (a, ao) = _concat(prompt_ids, dtype), _concat(answers, dtype)
    finished = np.array([bool(x) and x[-1] in engine.eos_ids for x in answers])
    return {
        "prompt_ids": p,
        "prompt_offsets": po,
        "answer_ids": a,
        "answer_offsets": ao,
        "sampled": sampled,
        "seed": seeds,
        "finished": finished,
        "producer": np.array(producer(engine)),
    }


def _manifest_lines(chunk: int, arrays, prompts: list[Prompt], settings: CorpusSettings) -> list[dict]:
    stored = arrays.files if hasattr(arrays, "files") else arrays
    made_by = str(arrays["producer"]) if "producer" in stored else LEGACY_PRODUCER
    lines = []
    po, ao = arrays["prompt_offsets"], arrays["answer_offsets"]
    for i in range(len(po) - 1):
        g = chunk * settings.chunk_size + i
        lines.append(
            {
                "chunk": chunk,
                "index": i,
                "prompt": g,
                "source": prompts[g].source,
                "prompt_sha": hashlib.sha256(prompts[g].text.encode()).hexdigest()[:12],
                "mode": "sampled" if arrays["sampled"][i] else "greedy",
                "seed": int(arrays["seed"][i]) if arrays["sampled"][i] else None,
                "prompt_tokens": int(po[i + 1] - po[i]),
                "answer_tokens": int(ao[i + 1] - ao[i]),
                "finished": bool(arrays["finished"][i]),
                "producer": made_by,
            }
        )
    return lines


def _chunk_path(out: Path, chunk: int) -> Path:
    return out / f"chunk-{chunk:05d}.npz"


def _sync_manifest(out: Path, prompts: list[Prompt], settings: CorpusSettings) -> None:
    """Rewrite the manifest from the chunk files if a stop cut off some of its lines (it is derived from them)."""
    path = out / "manifest.jsonl"
    rows = _read_jsonl(path)
    chunks = sorted(int(p.stem.split("-")[1]) for p in out.glob("chunk-*.npz"))
    expected = {c: min(settings.chunk_size, len(prompts) - c * settings.chunk_size) for c in chunks}
    if Counter(row["chunk"] for row in rows) == Counter(expected):
        return
    rows = []
    for chunk in chunks:
        with np.load(_chunk_path(out, chunk)) as arrays:
            rows += _manifest_lines(chunk, arrays, prompts, settings)
    _write(path, "".join(json.dumps(r) + "\n" for r in rows).encode())


def build_corpus(
    out: Path,
    engine,
    settings: CorpusSettings,
    *,
    chunks: int | None = None,
    max_minutes: float = 0.0,
    locale_root: Path = LOCALE_DIR,
) -> dict:
    """Answer the prompts chunk by chunk into `out` with `engine` (lopa's Engine), skipping chunks already there;
    returns a summary with the answer tokens per second."""
    start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    _check_config(out, settings, engine)
    prompts = collect_prompts(engine, settings, out, locale_root)
    _sync_manifest(out, prompts, settings)
    total = -(-len(prompts) // settings.chunk_size)
    todo = [c for c in range(min(chunks or total, total)) if not _chunk_path(out, c).exists()]
    made = tokens = 0
    answering = 0.0
    bar = tqdm(todo, desc="corpus chunks", unit="chunk")
    for chunk in bar:
        if max_minutes and time.perf_counter() - start > max_minutes * 60:
            break
        began = time.perf_counter()
        part = prompts[chunk * settings.chunk_size : (chunk + 1) * settings.chunk_size]
        arrays = answer_chunk(engine, [engine.encode_prompt(p.text) for p in part], settings, chunk)
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **arrays)
        _write(_chunk_path(out, chunk), buffer.getvalue())
        with (out / "manifest.jsonl").open("a") as f:
            f.write("".join(json.dumps(r) + "\n" for r in _manifest_lines(chunk, arrays, prompts, settings)))
        made, tokens, seconds = made + 1, tokens + len(arrays["answer_ids"]), time.perf_counter() - began
        answering += seconds
        rate = round(len(arrays["answer_ids"]) / seconds, 1)
        bar.set_postfix(tokens_per_s=rate)
        tqdm.write(
            json.dumps(
                {
                    "chunk": chunk,
                    "sequences": len(part),
                    "answer_tokens": len(arrays["answer_ids"]),
                    "seconds": round(seconds, 1),
                    "tokens_per_s": rate,
                }
            )
        )
    done = sum(_chunk_path(out, c).exists() for c in range(total))
    return {
        "out": str(out),
        "prompts": len(prompts),
        "chunks_done": done,
        "chunks_total": total,
        "chunks_made": made,
        "answer_tokens_made": tokens,
        "answer_tokens_per_s": round(tokens / answering, 1) if made else None,
        "minutes": round((time.perf_counter() - start) / 60, 1),
    }


def load_corpus(out: Path) -> list[tuple[list[int], list[int], dict]]:
    """(prompt ids, answer ids, manifest line) for every sequence of a corpus directory, in chunk order."""
    rows = sorted(_read_jsonl(Path(out) / "manifest.jsonl"), key=lambda r: (r["chunk"], r["index"]))
    corpus, arrays, loaded = [], None, None
    for row in rows:
        if row["chunk"] != loaded:
            with np.load(_chunk_path(Path(out), row["chunk"])) as npz:
                arrays, loaded = {k: npz[k] for k in npz.files}, row["chunk"]
        i, po, ao = row["index"], arrays["prompt_offsets"], arrays["answer_offsets"]
        corpus.append(
            (arrays["prompt_ids"][po[i] : po[i + 1]].tolist(), arrays["answer_ids"][ao[i] : ao[i + 1]].tolist(), row)
        )
    return corpus
