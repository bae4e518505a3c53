"""Benchmark prompts: Spec-Bench JSONL or the built-in set, category/limit selection, and the LoPA scenarios.

Spec-Bench rows are {"question_id", "category", "turns": [str, ...]}. The built-in set
(scenarios.json, written for this project) uses the same fields and Spec-Bench category
names, so the LoPA scenarios select from either source the same way.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from ..errors import InvalidRequestError

BUILTIN = Path(__file__).with_name("scenarios.json")
MT_BENCH = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")


@dataclass(frozen=True)
class Question:
    question_id: str
    category: str
    turns: tuple[str, ...]


@dataclass(frozen=True)
class Scenario:
    """One row of the LoPA table: which categories, how many new tokens, how long the inputs must be."""

    name: str
    categories: tuple[str, ...]
    max_new_tokens: int
    min_prompt_tokens: int = 0


LOPA_SCENARIOS = (
    Scenario("chat", MT_BENCH, 64),
    Scenario("code", ("coding",), 256),
    Scenario("summary", ("summarization",), 512, min_prompt_tokens=512),
)


def _question(row: object, where: str) -> Question:
    if not isinstance(row, dict) or not {"question_id", "category", "turns"} <= row.keys():
        raise InvalidRequestError(f"{where}: expected an object with question_id, category and turns")
    turns = row["turns"]
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t.strip() for t in turns):
        raise InvalidRequestError(f"{where}: turns must be a non-empty list of non-empty strings")
    return Question(str(row["question_id"]), str(row["category"]), tuple(turns))


def load_questions(path: str | Path | None) -> list[Question]:
    """Read Spec-Bench JSONL from `path`, or the built-in set when `path` is None."""
    if path is None:
        return [_question(row, f"{BUILTIN}[{i}]") for i, row in enumerate(json.loads(BUILTIN.read_text()))]
    path = Path(path)
    if not path.is_file():
        raise InvalidRequestError(f"benchmark data {path} does not exist")
    questions = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidRequestError(f"{path}:{number}: not JSON ({exc.msg})") from exc
        questions.append(_question(row, f"{path}:{number}"))
    if not questions:
        raise InvalidRequestError(f"{path} holds no questions")
    return questions


def select(questions: list[Question], categories: list[str] | None, limit: int | None, seed: int) -> list[Question]:
    """Keep the asked-for categories (file order), at most `limit` per category, sampled with `seed`."""
    present = list(dict.fromkeys(q.category for q in questions))
    if categories:
        unknown = sorted(set(categories) - set(present))
        if unknown:
            raise InvalidRequestError(f"unknown categories {unknown}; the data has {present}")
        present = [c for c in present if c in categories]
    rng = random.Random(seed)
    chosen: list[Question] = []
    for category in present:
        pool = [q for q in questions if q.category == category]
        if limit is not None and limit < len(pool):
            keep = set(rng.sample(range(len(pool)), limit))
            pool = [q for i, q in enumerate(pool) if i in keep]
        chosen.extend(pool)
    return chosen


def spread(questions: list, count: int) -> list:
    """`count` questions taken from every category in turn (the first of each, then the second, ...)."""
    by_category: dict[str, list] = {}
    for q in questions:
        by_category.setdefault(q.category, []).append(q)
    rounds = zip(*(qs + [None] * (count - len(qs)) for qs in by_category.values()))
    return [q for row in rounds for q in row if q is not None][:count]
