"""The self-distillation corpus: the base model's own answers to a broad offline prompt set, as token ids.

A corpus directory holds
  config.json          generation settings and the model's fingerprint (a resume must match them)
  self-instruct.jsonl  the requests the model wrote itself, one line per generate() batch
  prompts.jsonl.gz     every prompt in order with its source; chunk c answers prompts [c*S, (c+1)*S)
  chunk-00000.npz      prompt and answer ids, concatenated with offsets, greedy or sampled per sequence
  manifest.jsonl       one line per sequence: chunk, index, prompt, source, mode, seed, token counts
Every file is written whole (temporary file, then rename) and is never regenerated once it exists, and
each sampled batch has its own seed, so a stopped run resumes where it stopped with the output that
an uninterrupted run would have given. Features are not stored: the trainer recomputes them by
teacher forcing the stored ids.
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
from tqdm import tqdm

from ..errors import InvalidRequestError
from ..models.loading import embedding_fingerprint
from .generate import eos_and_pad, generate_answers
from .sources import LOCALE_DIR, SHARES, Prompt, clean_request, instruct_seeds, mix

INSTRUCT_TOKENS = 40  # enough for one request


@dataclass(frozen=True)
class CorpusSettings:
    prompts: int = 8192  # asked of the sources; fewer remain after deduplication
    chunk_size: int = 64
    batch: int = 16
    max_new_tokens: int = 256
    sampled_fraction: float = 0.5
    temperature: float = 0.8
    top_p: float = 0.95
    seed: int = 0


def chat_ids(tokenizer, text: str) -> list[int]:
    """A user message's ids as lopa's Engine encodes it: through the chat template when there is one."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False)
        return tokenizer(text, add_special_tokens=False).input_ids
    return tokenizer(text).input_ids


def batch_seed(*parts) -> int:
    """A seed for one sampled generate() call, fixed by the corpus seed and the call's place."""
    return random.Random("-".join(map(str, parts))).getrandbits(63)


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


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


def _check_config(out: Path, settings: CorpusSettings, model) -> None:
    config = {**asdict(settings), "fingerprint": embedding_fingerprint(model.get_input_embeddings().weight)}
    path = out / "config.json"
    if not path.exists():
        _write(path, json.dumps(config, indent=1).encode())
        return
    old = json.loads(path.read_text())
    changed = {k: (old.get(k), v) for k, v in config.items() if old.get(k) != v}
    if changed:
        raise InvalidRequestError(f"{out} was built with other settings or another model (was, now): {changed}")


def self_instruct(model, tokenizer, settings: CorpusSettings, out: Path, locale_root: Path = LOCALE_DIR) -> list[Prompt]:
    """User requests that the base model writes itself, one sampled batch of instructions at a time."""
    seeds = instruct_seeds(round(SHARES["self-instruct"] * settings.prompts), random.Random(settings.seed), locale_root)
    path = out / "self-instruct.jsonl"
    done = {row["batch"]: row["requests"] for row in _read_jsonl(path)}
    batches = range(0, len(seeds), settings.batch)
    for b in tqdm([b for b in batches if b not in done], desc="self-instruct", unit="batch"):
        part = seeds[b : b + settings.batch]
        answers = generate_answers(
            model, [chat_ids(tokenizer, s) for _, s in part], INSTRUCT_TOKENS,
            seed=batch_seed(settings.seed, "instruct", b), temperature=settings.temperature, top_p=settings.top_p,
        )
        done[b] = [[topic, tokenizer.decode(a, skip_special_tokens=True)] for (topic, _), a in zip(part, answers)]
        with path.open("a") as f:
            f.write(json.dumps({"batch": b, "requests": done[b]}) + "\n")
    cleaned = ((topic, clean_request(text)) for b in batches for topic, text in done[b])
    return [Prompt(text, f"self-instruct:{topic}") for topic, text in cleaned if text]


def collect_prompts(model, tokenizer, settings: CorpusSettings, out: Path, locale_root: Path = LOCALE_DIR) -> list[Prompt]:
    """The corpus's prompts in answering order, built once and then read from prompts.jsonl.gz."""
    path = out / "prompts.jsonl.gz"
    if not path.exists():
        prompts = mix(settings.prompts, settings.seed, self_instruct(model, tokenizer, settings, out, locale_root), locale_root)
        lines = "".join(json.dumps(asdict(p)) + "\n" for p in prompts)
        _write(path, gzip.compress(lines.encode(), mtime=0))
    return [Prompt(**json.loads(line)) for line in gzip.decompress(path.read_bytes()).decode().splitlines()]


def _concat(seqs: list[list[int]], dtype) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(s) for s in seqs])
    return np.array([t for s in seqs for t in s], dtype=dtype), offsets


def answer_chunk(model, prompt_ids: list[list[int]], settings: CorpusSettings, chunk: int) -> dict[str, np.ndarray]:
    """Greedy answers to some prompts and sampled ones to the rest (whole batches of each), batched by length."""
    n = len(prompt_ids)
    k = min(n, round(n * settings.sampled_fraction / settings.batch) * settings.batch)
    sampled = np.zeros(n, dtype=bool)
    sampled[random.Random(batch_seed(settings.seed, "modes", chunk)).sample(range(n), k)] = True
    seeds = np.full(n, -1, dtype=np.int64)
    answers: list[list[int]] = [[] for _ in range(n)]
    for mode in (False, True):
        order = sorted((i for i in range(n) if sampled[i] == mode), key=lambda i: len(prompt_ids[i]))  # pad less
        for b in range(0, len(order), settings.batch):
            rows = order[b : b + settings.batch]
            seed = batch_seed(settings.seed, "chunk", chunk, b) if mode else None
            outs = generate_answers(
                model, [prompt_ids[i] for i in rows], settings.max_new_tokens, seed=seed,
                temperature=settings.temperature, top_p=settings.top_p,
            )
            for i, answer in zip(rows, outs):
                answers[i], seeds[i] = answer, -1 if seed is None else seed
    dtype = np.uint16 if model.get_input_embeddings().num_embeddings <= 1 << 16 else np.uint32
    (p, po), (a, ao) = _concat(prompt_ids, dtype), _concat(answers, dtype)
    eos, _ = eos_and_pad(model)
    finished = np.array([bool(x) and x[-1] in eos for x in answers])
    return {"prompt_ids": p, "prompt_offsets": po, "answer_ids": a, "answer_offsets": ao,
            "sampled": sampled, "seed": seeds, "finished": finished}


def _manifest_lines(chunk: int, arrays, prompts: list[Prompt], settings: CorpusSettings) -> list[dict]:
    lines = []
    po, ao = arrays["prompt_offsets"], arrays["answer_offsets"]
    for i in range(len(po) - 1):
        g = chunk * settings.chunk_size + i
        lines.append({
            "chunk": chunk, "index": i, "prompt": g, "source": prompts[g].source,
            "prompt_sha": hashlib.sha256(prompts[g].text.encode()).hexdigest()[:12],
            "mode": "sampled" if arrays["sampled"][i] else "greedy",
            "seed": int(arrays["seed"][i]) if arrays["sampled"][i] else None,
            "prompt_tokens": int(po[i + 1] - po[i]), "answer_tokens": int(ao[i + 1] - ao[i]),
            "finished": bool(arrays["finished"][i]),
        })
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
    out: Path, model, tokenizer, settings: CorpusSettings, *, chunks: int | None = None, max_minutes: float = 0.0,
    locale_root: Path = LOCALE_DIR,
) -> dict:
    """Answer the prompts chunk by chunk into `out`, skipping chunks already there; returns a summary."""
    start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    _check_config(out, settings, model)
    prompts = collect_prompts(model, tokenizer, settings, out, locale_root)
    _sync_manifest(out, prompts, settings)
    total = -(-len(prompts) // settings.chunk_size)
    todo = [c for c in range(min(chunks or total, total)) if not _chunk_path(out, c).exists()]
    made = tokens = 0
    bar = tqdm(todo, desc="corpus chunks", unit="chunk")
    for chunk in bar:
        if max_minutes and time.perf_counter() - start > max_minutes * 60:
            break
        began = time.perf_counter()
        part = prompts[chunk * settings.chunk_size : (chunk + 1) * settings.chunk_size]
        arrays = answer_chunk(model, [chat_ids(tokenizer, p.text) for p in part], settings, chunk)
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **arrays)
        _write(_chunk_path(out, chunk), buffer.getvalue())
        with (out / "manifest.jsonl").open("a") as f:
            f.write("".join(json.dumps(r) + "\n" for r in _manifest_lines(chunk, arrays, prompts, settings)))
        made, tokens, seconds = made + 1, tokens + len(arrays["answer_ids"]), time.perf_counter() - began
        rate = round(len(arrays["answer_ids"]) / seconds, 1)
        bar.set_postfix(tokens_per_s=rate)
        tqdm.write(json.dumps({"chunk": chunk, "sequences": len(part), "answer_tokens": len(arrays["answer_ids"]),
                               "seconds": round(seconds, 1), "tokens_per_s": rate}))
    done = sum(_chunk_path(out, c).exists() for c in range(total))
    return {"out": str(out), "prompts": len(prompts), "chunks_done": done, "chunks_total": total,
            "chunks_made": made, "answer_tokens_made": tokens, "minutes": round((time.perf_counter() - start) / 60, 1)}


def load_corpus(out: Path) -> list[tuple[list[int], list[int], dict]]:
    """(prompt ids, answer ids, manifest line) for every sequence of a corpus directory, in chunk order."""
    rows = sorted(_read_jsonl(Path(out) / "manifest.jsonl"), key=lambda r: (r["chunk"], r["index"]))
    corpus, arrays, loaded = [], None, None
    for row in rows:
        if row["chunk"] != loaded:
            with np.load(_chunk_path(Path(out), row["chunk"])) as npz:
                arrays, loaded = {k: npz[k] for k in npz.files}, row["chunk"]
        i, po, ao = row["index"], arrays["prompt_offsets"], arrays["answer_offsets"]
        corpus.append((arrays["prompt_ids"][po[i] : po[i + 1]].tolist(), arrays["answer_ids"][ao[i] : ao[i + 1]].tolist(), row))
    return corpus
