"""The project's own test prompts: tests/data/prompts.json plus the built-in bench set's long documents.

Nobody outside this project wrote them and no benchmark file is read, so a plain clone runs
every test. They span chat, reasoning, code, extraction, translation, QA, math and two
summaries of 500+ token documents; `copy` marks prompts built so that the answer repeats
the prompt (prompt lookup must pay on those).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from lopa.bench.data import load_questions

PROMPTS_FILE = Path(__file__).with_name("data") / "prompts.json"


@dataclass(frozen=True)
class TestPrompt:
    __test__ = False  # a prompt, not a test class
    id: str
    category: str
    text: str
    copy: bool = False


def load_prompts() -> list[TestPrompt]:
    rows = [TestPrompt(**row) for row in json.loads(PROMPTS_FILE.read_text())]
    summaries = [q for q in load_questions(None) if q.category == "summarization"]
    return rows + [TestPrompt(f"summary-{q.question_id}", q.category, q.turns[0]) for q in summaries]


ALL = load_prompts()
BY_ID = {p.id: p for p in ALL}
# the fast stage: one prompt per kind of work, the first long summary among them
FAST = [
    BY_ID[i]
    for i in ("chat-email", "code-fizz", "code-rename", "extract-table", "translate-de", "qa-bridge", "math-apples")
] + [p for p in ALL if p.category == "summarization"][:1]
COPY = [p for p in ALL if p.copy]


def accepted_by_source(steps: list[dict]) -> Counter:
    """Drafted tokens kept, by the drafter that proposed them ("bonus" tokens are not drafts)."""
    return Counter(s for step in steps for s in step["sources"] if s != "bonus")
