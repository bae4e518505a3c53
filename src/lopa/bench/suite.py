"""Run every method on every prompt in one process, interleaved prompt by prompt.

For prompt i the method order is rotated by i, so slow drift of the machine (thermal,
other processes) spreads over all methods instead of biasing one. One short warm-up
generation per method comes first and is not recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

from tqdm.auto import tqdm

from .data import Question
from .memory import peak_rss_mb, reset_peak
from .methods import REFERENCE, Method, Run
from .quality import perplexity

WARMUP_TOKENS = 8


@dataclass(frozen=True)
class Item:
    """One generation request of the benchmark: a question's turn, with its token budget."""

    question: Question
    turn: int  # 0-based; later turns see the reference (hf) answers to the earlier ones
    max_new_tokens: int
    scenario: str | None = None

    @property
    def id(self) -> str:
        return f"{self.question.question_id}:{self.turn + 1}" + (f"@{self.scenario}" if self.scenario else "")


def encode(engine, item: Item, answers: list[str], chat: bool | None) -> list[int]:
    """Prompt ids for a turn: the chat history (earlier turns answered by hf), or plain text for base models."""
    q = item.question
    use_chat = engine.has_chat_template if chat is None else chat
    if not use_chat:
        parts = [p for t in range(item.turn) for p in (q.turns[t], answers[t])] + [q.turns[item.turn]]
        return engine.encode_prompt("\n\n".join(parts), chat=False)
    messages = []
    for t in range(item.turn):
        messages += [{"role": "user", "content": q.turns[t]}, {"role": "assistant", "content": answers[t]}]
    return engine.encode_prompt(messages + [{"role": "user", "content": q.turns[item.turn]}])


def build_items(questions: list[Question], max_new_tokens: int, multi_turn: bool) -> list[Item]:
    """First turns (or all turns, in order) of the questions, each with the same token budget."""
    return [Item(q, t, max_new_tokens) for q in questions for t in range(len(q.turns) if multi_turn else 1)]


def long_enough(engine, questions: list[Question], min_tokens: int, chat: bool | None) -> list[Question]:
    """The questions whose first-turn prompt has at least `min_tokens` tokens (the long-document scenario)."""
    if min_tokens <= 0:
        return questions
    return [q for q in questions if len(encode(engine, Item(q, 0, 1), [], chat)) >= min_tokens]


def _run_record(run: Run, peak: float, reference: Run | None) -> dict:
    new = len(run.token_ids)
    return {
        "new_tokens": new,
        "wall_s": run.wall_s,
        "prefill_s": run.prefill_s,
        "forwards": run.forwards,
        "tokens_per_forward": None if run.forwards is None else new / max(1, run.forwards),
        "tokens_per_s": new / run.wall_s if run.wall_s > 0 else 0.0,
        "accept_lengths": run.accept_lengths,
        "draft_s": run.draft_s,
        "verify_s": run.verify_s,
        "predictor_depth1_hits": None if run.predictor_depth1 is None else run.predictor_depth1[0],
        "predictor_depth1_trials": None if run.predictor_depth1 is None else run.predictor_depth1[1],
        "peak_rss_mb": peak,
        "exact_match": None if reference is None else run.token_ids == reference.token_ids,
        "speedup": None if reference is None else reference.wall_s / run.wall_s,
        "perplexity": None,
        "token_ids": run.token_ids,
    }


def run_items(
    engine, methods: dict[str, Method], items: list[Item], chat: bool | None = None, progress: bool = True
) -> list[dict]:
    """Generate every item with every method; one record per item with a run per method."""
    names = list(methods)
    lossy = [n for n in names if not methods[n].lossless]
    bar = tqdm(total=len(items) * len(names) + len(names), unit="gen", disable=not progress, desc="lopa bench")
    if items:
        warm = encode(engine, items[0], [], chat)
        for name in names:
            bar.set_postfix_str(f"warm-up {name}")
            methods[name].generate(warm, min(WARMUP_TOKENS, items[0].max_new_tokens))
            bar.update()
    answers: dict[str, list[str]] = {}
    records = []
    for i, item in enumerate(items):
        prompt = encode(engine, item, answers.get(item.question.question_id, []), chat)
        runs: dict[str, tuple[Run, float]] = {}
        for name in names[i % len(names) :] + names[: i % len(names)]:
            bar.set_postfix_str(f"{item.question.category} {name}")
            reset_peak()
            run = methods[name].generate(prompt, item.max_new_tokens)
            runs[name] = (run, peak_rss_mb())
            bar.update()
        reference = runs[REFERENCE][0] if REFERENCE in runs else None
        if reference is not None:
            text = engine.tokenizer.decode(reference.token_ids, skip_special_tokens=True)
            answers.setdefault(item.question.question_id, []).append(text)
        record = {
            "id": item.id,
            "question_id": item.question.question_id,
            "category": item.question.category,
            "turn": item.turn + 1,
            "scenario": item.scenario,
            "max_new_tokens": item.max_new_tokens,
            "prompt_tokens": len(prompt),
            "reference_perplexity": None,
            "runs": {name: _run_record(run, peak, reference) for name, (run, peak) in runs.items()},
        }
        if lossy and reference is not None:
            record["reference_perplexity"] = perplexity(engine.model, prompt, reference.token_ids)
            for name in lossy:
                record["runs"][name]["perplexity"] = perplexity(engine.model, prompt, runs[name][0].token_ids)
        records.append(record)
    bar.close()
    return records
