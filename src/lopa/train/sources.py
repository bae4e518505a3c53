"""Offline prompt sources for the self-distillation corpus, each prompt tagged with where it came from.

The targets are the base model's own answers, so the prompts only need breadth. Besides the
project's templates (prompts.py) they come from text already on the machine that nobody wrote
as a benchmark: the messages of the installed programs (gettext catalogues), the Python
language reference (pydoc_data), and requests the base model writes itself (self-instruct).
"""

from __future__ import annotations

import random
import re
import struct
from dataclasses import dataclass
from itertools import chain, zip_longest
from pathlib import Path

from .prompts import STDLIB_MODULES, TOPICS, training_prompts

LOCALE_DIR = Path("/usr/share/locale")
# catalogues whose translations are read, and the language each is in
LOCALES = {
    "de": "German", "fr": "French", "es": "Spanish", "it": "Italian", "pt_BR": "Portuguese", "nl": "Dutch",
    "pl": "Polish", "ru": "Russian", "ja": "Japanese", "zh_CN": "Chinese",
}
MESSAGE_TASKS = [
    "A program printed this message: \"{m}\"\nWhat does it mean, and what should I do about it?",
    "Explain this software message to someone who is not technical: \"{m}\"",
    "Rewrite this error message so that it is clearer and friendlier: \"{m}\"",
    "Translate this software message into {lang}: \"{m}\"",
    "In which situation would a program show the message \"{m}\"? Give an example.",
]
TRANSLATED_TASKS = [
    "Translate into English: {s}",
    "What does this {lang} message mean? \"{s}\"",
]
REFERENCE_TASKS = [
    "Summarize this section of the Python documentation.\n\n{p}",
    "Explain the following Python documentation with a short code example.\n\n{p}",
    "Write three quiz questions, with answers, about this text.\n\n{p}",
    "What are the key points a beginner should remember from this text?\n\n{p}",
    "Read this passage and explain it in your own words.\n\n{p}",
]
INSTRUCT_SEEDS = [
    "Write one question a user might ask a chatbot about {t}. Reply with the question only.",
    "Write one request a student might send to an AI assistant about {t}. Reply with the request only.",
    "Write one instruction asking an assistant to write a story, an email, a list or a plan about {t}. "
    "Reply with the instruction only.",
    "Write one difficult question about {t} that needs a detailed answer. Reply with the question only.",
]
EXTRA_TOPICS = [
    "cooking pasta", "gardening", "personal finance", "job interviews", "learning to swim", "dogs", "cats",
    "healthy breakfast", "time management", "public speaking", "photography", "camping", "friendship",
    "home repairs", "board games", "painting", "mountains", "oceans", "birds", "trees", "the solar system",
    "electricity", "computers", "smartphones", "databases", "web browsers", "passwords", "email etiquette",
    "writing a CV", "moving to a new city", "saving energy at home", "bicycles", "trains", "airplanes",
    "rivers", "deserts", "earthquakes", "medieval castles", "ancient Greece", "the Industrial Revolution",
    "poetry", "novels", "theatre", "classical music", "football", "tennis", "yoga", "meditation", "nutrition",
    "first aid", "the human brain", "genetics", "chemistry experiments", "algebra", "geometry", "probability",
    "statistics", "economics", "taxes", "small businesses", "marketing", "negotiation", "parenting",
    "studying for exams", "learning a foreign language", "volunteering", "the environment", "plastic waste",
]
ASSISTANT_OPENINGS = ("Sure", "Certainly", "Of course", "Here", "I'm sorry", "I am sorry", "I'm here", "I'm ready", "What a")
SHARES = {"prompts.py": 0.35, "locale": 0.325, "pydoc": 0.2, "self-instruct": 0.125}  # of the prompts asked for


@dataclass(frozen=True)
class Prompt:
    text: str
    source: str  # "prompts.py", "locale:<lang>/<catalogue>", "pydoc:<topic>" or "self-instruct:<topic>"


def read_mo(path: Path) -> dict[str, str]:
    """A gettext .mo catalogue as {English message: translation}, skipping entries that are not UTF-8.

    Python's gettext module gives up on a whole catalogue at one legacy-encoded entry."""
    data = path.read_bytes()
    order = "<" if struct.unpack("<I", data[:4])[0] == 0x950412DE else ">"
    _, count, originals, translations = struct.unpack(order + "4I", data[4:20])
    catalogue = {}
    for i in range(count):
        (olen, opos), (tlen, tpos) = (struct.unpack_from(order + "2I", data, table + 8 * i) for table in (originals, translations))
        try:
            catalogue[data[opos : opos + olen].decode()] = data[tpos : tpos + tlen].decode()
        except UnicodeDecodeError:
            continue
    return catalogue


def _is_sentence(message: str) -> bool:
    """A message worth a prompt: several words, no plural forms or context prefixes."""
    return 40 <= len(message) <= 300 and len(message.split()) >= 6 and "\x00" not in message and "\x04" not in message


def locale_prompts(rng: random.Random, root: Path = LOCALE_DIR) -> list[Prompt]:
    """One prompt per distinct English message of the installed programs (about it, or about a translation
    of it), interleaved across catalogues so that no program dominates."""
    catalogues: dict[str, dict[str, dict[str, str]]] = {}  # catalogue -> message -> {locale: translation}
    for code in LOCALES:
        for path in sorted((root / code / "LC_MESSAGES").glob("*.mo")):
            for message, translation in read_mo(path).items():
                if _is_sentence(message):
                    catalogues.setdefault(path.name, {}).setdefault(message.strip(), {})[code] = translation.strip()
    per_catalogue = []
    for name, messages in sorted(catalogues.items()):
        prompts = []
        for message, translations in sorted(messages.items()):
            code = rng.choice(sorted(translations))
            if translations[code] and rng.random() < 0.3:
                text = rng.choice(TRANSLATED_TASKS).format(s=translations[code], lang=LOCALES[code])
            else:
                text = rng.choice(MESSAGE_TASKS).format(m=message, lang=LOCALES[code])
            prompts.append(Prompt(text, f"locale:{code}/{name}"))
        rng.shuffle(prompts)
        per_catalogue.append(prompts)
    return [p for p in chain.from_iterable(zip_longest(*per_catalogue)) if p is not None]


def reference_passages(min_chars: int = 300, max_chars: int = 1200) -> list[tuple[str, str]]:
    """(topic, passage) from Python's language reference, paragraphs joined up to max_chars."""
    from pydoc_data.topics import topics

    passages = []
    for topic, text in sorted(topics.items()):
        current = ""
        for paragraph in re.split(r"\n\s*\n", text):
            if current and len(current) + len(paragraph) > max_chars:
                passages.append((topic, current))
                current = ""
            current = f"{current}\n\n{paragraph}" if current else paragraph
        passages.append((topic, current))
    return [(t, p.strip()) for t, p in passages if min_chars <= len(p.strip()) <= max_chars]


def reference_prompts(rng: random.Random) -> list[Prompt]:
    """Every reference passage with every task, shuffled (a quota then takes a varied subset)."""
    prompts = [Prompt(task.format(p=p), f"pydoc:{t}") for t, p in reference_passages() for task in REFERENCE_TASKS]
    rng.shuffle(prompts)
    return prompts


def instruct_topics(root: Path = LOCALE_DIR) -> list[str]:
    """Topics for self-instruct: the project's lists, stdlib modules and every 4th country named in iso_3166."""
    iso = root / "de" / "LC_MESSAGES" / "iso_3166-1.mo"
    countries = sorted(m for m in read_mo(iso) if m and "," not in m)[::4] if iso.exists() else []
    return TOPICS + EXTRA_TOPICS + [f"the Python {m} module" for m in STDLIB_MODULES] + [f"travelling in {c}" for c in countries]


def instruct_seeds(count: int, rng: random.Random, locale_root: Path = LOCALE_DIR) -> list[tuple[str, str]]:
    """(topic, instruction) pairs asking the base model to write a user request."""
    topics = instruct_topics(locale_root)
    return [(t, rng.choice(INSTRUCT_SEEDS).format(t=t)) for t in (rng.choice(topics) for _ in range(count))]


def clean_request(text: str) -> str | None:
    """The request in a self-instruct reply: its first line (or the quotation in it) without a label;
    None where the model answered as the assistant instead, or introduced something it did not write."""
    line = next((ln.strip() for ln in text.strip().splitlines() if ln.strip()), "")
    quoted = re.search(r'"([^"]{15,})"', line)  # 'A user might ask: "..."'
    line = quoted.group(1) if quoted else line
    line = re.sub(r"^(question|request|instruction|user|student)\s*:\s*", "", line, flags=re.I).strip().strip('"“”').strip()
    if line.endswith(":") or line.startswith(ASSISTANT_OPENINGS):
        return None
    return line if 15 <= len(line) <= 400 and len(line.split()) >= 4 else None


def normalised(text: str) -> str:
    return " ".join(text.lower().split())


def mix(count: int, seed: int, self_instruct: list[Prompt], locale_root: Path = LOCALE_DIR) -> list[Prompt]:
    """About `count` distinct prompts in SHARES, shuffled by `seed` (the same list for the same arguments)."""
    rng = random.Random(seed)
    quota = {name: round(share * count) for name, share in SHARES.items()}
    pools = {
        "prompts.py": [Prompt(t, "prompts.py") for t in training_prompts(quota["prompts.py"], seed)],
        "locale": locale_prompts(rng, locale_root),
        "pydoc": reference_prompts(rng),
        "self-instruct": self_instruct,
    }
    seen: set[str] = set()
    prompts = []
    for name, pool in pools.items():
        taken = 0
        for prompt in pool:
            key = normalised(prompt.text)
            if taken < quota[name] and key not in seen:
                seen.add(key)
                prompts.append(prompt)
                taken += 1
    rng.shuffle(prompts)
    return prompts
