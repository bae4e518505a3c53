"""Offline prompt sources for the self-distillation corpus, each prompt tagged with where it came from.

The targets are the base model's own answers, so the prompts only need breadth. Besides the
project's templates (prompts.py) they come from text already on the machine that nobody wrote
as a benchmark:
  locale         the messages of the installed programs (gettext catalogues), explained or rewritten
  translation    the same catalogues as translation work, English to the catalogue's language and back
  pydoc          the Python language reference (pydoc_data)
  manpages       the English man pages, cut into documents of a few thousand characters: the long inputs
  stdlib-code    functions and classes of pure-Python standard library modules, with code tasks
  self-instruct  requests the base model writes itself
Every pool is ordered so that a quota taken from its front is varied (round robin over programs, page
families or modules), and every one is a fixed function of the seed and of what is installed.
"""

from __future__ import annotations

import random
import re
import struct
from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path

from .codetasks import code_prompts
from .manpages import MAN_DIR, man_prompts
from .pool import Prompt, interleave
from .prompts import STDLIB_MODULES, TOPICS, training_prompts

LOCALE_DIR = Path("/usr/share/locale")
# catalogues whose translations are read, and the language each is in
LOCALES = {
    "de": "German",
    "fr": "French",
    "es": "Spanish",
    "it": "Italian",
    "pt_BR": "Portuguese",
    "nl": "Dutch",
    "pl": "Polish",
    "ru": "Russian",
    "ja": "Japanese",
    "zh_CN": "Chinese",
}
MESSAGE_TASKS = [
    'A program printed this message: "{m}"\nWhat does it mean, and what should I do about it?',
    'Explain this software message to someone who is not technical: "{m}"',
    'Rewrite this error message so that it is clearer and friendlier: "{m}"',
    'Translate this software message into {lang}: "{m}"',
    'In which situation would a program show the message "{m}"? Give an example.',
]
TRANSLATED_TASKS = [
    "Translate into English: {s}",
    'What does this {lang} message mean? "{s}"',
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
    "cooking pasta",
    "gardening",
    "personal finance",
    "job interviews",
    "learning to swim",
    "dogs",
    "cats",
    "healthy breakfast",
    "time management",
    "public speaking",
    "photography",
    "camping",
    "friendship",
    "home repairs",
    "board games",
    "painting",
    "mountains",
    "oceans",
    "birds",
    "trees",
    "the solar system",
    "electricity",
    "computers",
    "smartphones",
    "databases",
    "web browsers",
    "passwords",
    "email etiquette",
    "writing a CV",
    "moving to a new city",
    "saving energy at home",
    "bicycles",
    "trains",
    "airplanes",
    "rivers",
    "deserts",
    "earthquakes",
    "medieval castles",
    "ancient Greece",
    "the Industrial Revolution",
    "poetry",
    "novels",
    "theatre",
    "classical music",
    "football",
    "tennis",
    "yoga",
    "meditation",
    "nutrition",
    "first aid",
    "the human brain",
    "genetics",
    "chemistry experiments",
    "algebra",
    "geometry",
    "probability",
    "statistics",
    "economics",
    "taxes",
    "small businesses",
    "marketing",
    "negotiation",
    "parenting",
    "studying for exams",
    "learning a foreign language",
    "volunteering",
    "the environment",
    "plastic waste",
]
ASSISTANT_OPENINGS = (
    "Sure",
    "Certainly",
    "Of course",
    "Here",
    "I'm sorry",
    "I am sorry",
    "I'm here",
    "I'm ready",
    "What a",
)
# of the prompts asked for; pydoc's pool holds about 2,100 prompts, so its share stays small for 30,000-prompt corpora
SHARES = {
    "prompts.py": 0.15,
    "locale": 0.12,
    "translation": 0.12,
    "pydoc": 0.06,
    "self-instruct": 0.13,
    "manpages": 0.21,
    "stdlib-code": 0.21,
}
TRANSLATION_TASKS = {  # by direction, from English or to English
    "from": [
        "Translate into {lang}:\n\n{s}",
        'How would you say this in {lang}? "{s}"',
        'Give a natural {lang} translation of this message from a computer program: "{s}"',
        "Translate the following sentence into {lang} and explain any word that is hard to translate.\n\n{s}",
    ],
    "to": [
        'What is the English for "{s}"?',
        "This message is in {lang}. Translate it into English: {s}",
        "Translate this {lang} text into English, then explain what it means.\n\n{s}",
        'I saw this message on a computer set to {lang}: "{s}". What does it say in English?',
    ],
}
PLACEHOLDER_TASKS = {  # for user-interface strings with printf or brace placeholders
    "from": "Translate this user-interface string into {lang}. Keep placeholders like %s unchanged.\n\n{s}",
    "to": "Translate this {lang} user-interface string into English, keeping placeholders such as %s unchanged.\n\n{s}",
}
PLACEHOLDER = re.compile(r"%(\d+\$)?[-+ #0']*\d*(\.\d+)?[a-zA-Z]|\{\w*\}")


def read_mo(path: Path) -> dict[str, str]:
    """A gettext .mo catalogue as {English message: translation}, skipping entries that are not UTF-8.

    Python's gettext module gives up on a whole catalogue at one legacy-encoded entry."""
    data = path.read_bytes()
    order = "<" if struct.unpack("<I", data[:4])[0] == 0x950412DE else ">"
    _, count, originals, translations = struct.unpack(order + "4I", data[4:20])
    catalogue = {}
    for i in range(count):
        (olen, opos), (tlen, tpos) = (
            struct.unpack_from(order + "2I", data, table + 8 * i) for table in (originals, translations)
        )
        try:
            catalogue[data[opos : opos + olen].decode()] = data[tpos : tpos + tlen].decode()
        except UnicodeDecodeError:
            continue
    return catalogue


def _is_sentence(message: str) -> bool:
    """A message worth a prompt: several words, no plural forms or context prefixes."""
    return 40 <= len(message) <= 300 and len(message.split()) >= 6 and "\x00" not in message and "\x04" not in message


@lru_cache(maxsize=4)
def read_catalogues(root: Path = LOCALE_DIR) -> dict[str, dict[str, dict[str, str]]]:
    """catalogue -> English sentence -> {locale: translation} for LOCALES; cached because the locale and
    translation pools both read it (callers must not change it)."""
    catalogues: dict[str, dict[str, dict[str, str]]] = {}
    for code in LOCALES:
        for path in sorted((root / code / "LC_MESSAGES").glob("*.mo")):
            for message, translation in read_mo(path).items():
                if _is_sentence(message):
                    catalogues.setdefault(path.name, {}).setdefault(message.strip(), {})[code] = translation.strip()
    return catalogues


def _per_catalogue(rng: random.Random, root: Path, prompts_for: Callable[..., list[Prompt]]) -> list[Prompt]:
    """prompts_for(rng, catalogue, message, {locale: translation}) of every catalogue sentence, shuffled within
    each catalogue and interleaved across catalogues so that no program dominates."""
    per_catalogue = []
    for name, messages in sorted(read_catalogues(root).items()):
        prompts = [p for m, by_locale in sorted(messages.items()) for p in prompts_for(rng, name, m, by_locale)]
        rng.shuffle(prompts)
        per_catalogue.append(prompts)
    return list(interleave(per_catalogue))


def _message_prompts(rng: random.Random, catalogue: str, message: str, translations: dict[str, str]) -> list[Prompt]:
    """A task about the message, or (three times in ten) about one of its translations."""
    code = rng.choice(sorted(translations))
    if translations[code] and rng.random() < 0.3:
        text = rng.choice(TRANSLATED_TASKS).format(s=translations[code], lang=LOCALES[code])
    else:
        text = rng.choice(MESSAGE_TASKS).format(m=message, lang=LOCALES[code])
    return [Prompt(text, f"locale:{code}/{catalogue}")]


def locale_prompts(rng: random.Random, root: Path = LOCALE_DIR) -> list[Prompt]:
    """One prompt per distinct English message of the installed programs (about it, or about a translation
    of it), interleaved across catalogues so that no program dominates."""
    return _per_catalogue(rng, root, _message_prompts)


def _translation_prompt(rng: random.Random, text: str, code: str, direction: str) -> Prompt:
    """A request to translate `text` (in `code` unless `direction` is "from" English); strings with placeholders
    get, half of the time, the instruction to keep them."""
    keep_placeholders = PLACEHOLDER.search(text) and rng.random() < 0.5
    task = PLACEHOLDER_TASKS[direction] if keep_placeholders else rng.choice(TRANSLATION_TASKS[direction])
    pair = f"en->{code}" if direction == "from" else f"{code}->en"
    return Prompt(task.format(s=text, lang=LOCALES[code]), f"translate:{pair}")


def _translation_prompts(
    rng: random.Random,
    catalogue: str,
    message: str,
    translations: dict[str, str],
) -> list[Prompt]:
    """The message into one of its languages and back from another, where it has two real translations."""
    codes = sorted(code for code, text in translations.items() if text and text != message)
    if not codes:
        return []
    into, back = rng.sample(codes, 2) if len(codes) > 1 else codes * 2
    return [_translation_prompt(rng, message, into, "from"), _translation_prompt(rng, translations[back], back, "to")]


def translation_prompts(rng: random.Random, root: Path = LOCALE_DIR) -> list[Prompt]:
    """Translation both ways of the catalogue sentences that locale_prompts reads, a separate pool of its own."""
    return _per_catalogue(rng, root, _translation_prompts)


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
    return (
        TOPICS
        + EXTRA_TOPICS
        + [f"the Python {m} module" for m in STDLIB_MODULES]
        + [f"travelling in {c}" for c in countries]
    )


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
    line = (
        re.sub(r"^(question|request|instruction|user|student)\s*:\s*", "", line, flags=re.I)
        .strip()
        .strip('"“”')
        .strip()
    )
    if line.endswith(":") or line.startswith(ASSISTANT_OPENINGS):
        return None
    return line if 15 <= len(line) <= 400 and len(line.split()) >= 4 else None


def normalised(text: str) -> str:
    return " ".join(text.lower().split())


def take(pool: Iterable[Prompt], quota: int, seen: set[str]) -> list[Prompt]:
    """The first `quota` prompts of `pool` whose text is not in `seen` (which gains theirs); a lazy pool is read
    no further than that."""
    taken: list[Prompt] = []
    for prompt in pool:
        if len(taken) == quota:
            break
        key = normalised(prompt.text)
        if key not in seen:
            seen.add(key)
            taken.append(prompt)
    return taken


def mix(
    count: int,
    seed: int,
    self_instruct: list[Prompt],
    locale_root: Path = LOCALE_DIR,
    man_root: Path = MAN_DIR,
) -> list[Prompt]:
    """About `count` distinct prompts in SHARES, shuffled by `seed` (the same list for the same arguments and
    installed files). Each new pool has a random generator of its own, so adding one leaves the others as they were."""
    rng = random.Random(seed)
    quota = {name: round(share * count) for name, share in SHARES.items()}
    pools: dict[str, Iterable[Prompt]] = {
        "prompts.py": [Prompt(t, "prompts.py") for t in training_prompts(quota["prompts.py"], seed)],
        "locale": locale_prompts(rng, locale_root),
        "translation": translation_prompts(random.Random(f"{seed}:translation"), locale_root),
        "pydoc": reference_prompts(rng),
        "manpages": man_prompts(random.Random(f"{seed}:manpages"), man_root),
        "stdlib-code": code_prompts(random.Random(f"{seed}:stdlib-code")),
        "self-instruct": self_instruct,
    }
    seen: set[str] = set()
    prompts = [prompt for name, pool in pools.items() for prompt in take(pool, quota[name], seen)]
    rng.shuffle(prompts)
    return prompts
