"""Training prompts that this project writes itself, plus passages of Python stdlib docstrings.

Self-distillation needs only prompts: the targets are the base model's own answers.
The mix mirrors the kinds of requests a chat model gets (writing, roleplay, reasoning,
math, coding, extraction, STEM, humanities, translation, summarisation, QA over a
passage) without using any benchmark's prompts.
"""

from __future__ import annotations

import importlib
import inspect
import random

TOPICS = [
    "volcanoes",
    "the Roman Empire",
    "photosynthesis",
    "black holes",
    "the stock market",
    "honey bees",
    "climate change",
    "the printing press",
    "machine learning",
    "the human heart",
    "coffee",
    "chess",
    "the Silk Road",
    "electric cars",
    "jazz music",
    "the Moon landing",
    "vaccines",
    "rainforests",
    "the French Revolution",
    "quantum computers",
    "recycling",
    "the Olympic Games",
    "sleep",
    "glaciers",
    "ancient Egypt",
    "social media",
    "renewable energy",
    "the immune system",
    "bridges",
    "tea ceremonies",
    "the internet",
    "dinosaurs",
    "inflation",
    "marathon training",
    "origami",
    "the water cycle",
]
WRITING = [
    "Write a short story about {t}.",
    "Write a poem about {t}.",
    "Write a blog post about {t}.",
    "Write a persuasive essay on why people should learn about {t}.",
    "Draft an email to a friend about {t}.",
    "Write a product description for a museum exhibit on {t}.",
    "Compose a speech for a school event on {t}.",
]
ROLEPLAY = [
    "Pretend you are a tour guide. Tell visitors about {t}.",
    "Act as a teacher and explain {t} to a class of ten-year-olds.",
    "You are a news reporter. Give a short report on {t}.",
    "Imagine you are a scientist in 1900 hearing about {t}. What do you say?",
]
STEM_HUM = [
    "Explain {t} in simple terms.",
    "What are the main facts everyone should know about {t}?",
    "Describe the history of {t}.",
    "What are the advantages and disadvantages of {t}?",
    "List five interesting facts about {t}.",
    "How does {t} affect everyday life?",
    "Compare {t} and {u}.",
]
CODING = [
    "Write a Python function that {c}.",
    "Write a Python function that {c}, with a docstring and an example.",
    "Explain how to write a program that {c}.",
    "Write a JavaScript function that {c}.",
    "Write a C function that {c}.",
]
CODE_TASKS = [
    "reverses a string",
    "checks whether a number is prime",
    "returns the n-th Fibonacci number",
    "sorts a list of dictionaries by a key",
    "counts the words in a text file",
    "merges two sorted lists",
    "finds the largest element in a list",
    "removes duplicates from a list while keeping order",
    "computes the factorial of a number",
    "checks whether a string is a palindrome",
    "converts Celsius to Fahrenheit",
    "parses a CSV file into a list of rows",
    "implements binary search",
    "computes the greatest common divisor of two numbers",
    "flattens a nested list",
    "validates an email address",
]
SENTENCES = [
    "The weather is beautiful today and we are going to the park.",
    "I would like to order a cup of coffee, please.",
    "Where is the nearest train station?",
    "Learning a new language takes time and patience.",
    "The library opens at nine in the morning.",
    "My brother works as an engineer in a large company.",
    "We watched a very interesting film last night.",
    "Please close the window because it is cold.",
]
LANGUAGES = ["French", "German", "Spanish", "Italian", "Chinese", "Portuguese"]
PASSAGE_TASKS = [
    "Summarize the following text in a few sentences.\n\n{p}",
    "Extract the names of all parameters mentioned in this text and describe each in one line.\n\n{p}",
    "Read the passage and answer the question: what does it return or do?\n\nPassage: {p}",
    "Based on the following documentation, write a short usage example.\n\n{p}",
    "Rewrite the following text in plain English for a beginner.\n\n{p}",
]
STDLIB_MODULES = [
    "json",
    "os.path",
    "re",
    "collections",
    "itertools",
    "functools",
    "textwrap",
    "string",
    "random",
    "statistics",
    "shutil",
    "pathlib",
    "argparse",
    "datetime",
    "subprocess",
    "heapq",
    "bisect",
    "csv",
    "logging",
    "inspect",
    "difflib",
    "fractions",
    "decimal",
    "urllib.parse",
    "zipfile",
    "tarfile",
]


def _math(rng: random.Random) -> str:
    a, b, c = rng.randint(2, 99), rng.randint(2, 99), rng.randint(2, 20)
    return rng.choice(
        [
            f"What is {a} times {b}? Show your steps.",
            f"Solve for x: {c}x + {a} = {b + a * c}.",
            f"A shop sells pens for {c} dollars each. How much do {a} pens cost?",
            f"If a train travels {a} km in {c} hours, what is its average speed?",
            f"What is the sum of all integers from 1 to {a}?",
            f"Is {a * b + 1} a prime number? Explain your reasoning.",
            f"A rectangle is {a} cm long and {b} cm wide. What are its area and perimeter?",
        ]
    )


def _reasoning(rng: random.Random) -> str:
    n = rng.randint(3, 9)
    return rng.choice(
        [
            f"There are {n} people in a room and each shakes hands with every other person once. How many handshakes are there?",
            "If all roses are flowers and some flowers fade quickly, can we conclude that some roses fade quickly? Explain.",
            "Tom is older than Ann, and Ann is older than Ben. Who is the youngest? Explain step by step.",
            f"I have {n} apples, eat two and buy {n + 1} more. How many apples do I have now?",
            f"A farmer has chickens and cows: {n * 3} heads and {n * 8} legs. How many cows are there?",
        ]
    )


def docstring_passages(min_chars: int = 300, max_chars: int = 1200) -> list[str]:
    """Docstrings of stdlib functions and classes on this machine, a few hundred characters each."""
    passages = []
    for name in STDLIB_MODULES:
        module = importlib.import_module(name)
        for _, obj in sorted(vars(module).items()):
            doc = inspect.getdoc(obj) if callable(obj) else None
            if doc and min_chars <= len(doc) <= max_chars and doc not in passages:
                passages.append(doc)
    return passages


def training_prompts(count: int, seed: int = 0) -> list[str]:
    """`count` distinct user prompts, drawn evenly from every kind of request."""
    rng = random.Random(seed)
    passages = docstring_passages()
    kinds = [
        lambda: rng.choice(WRITING).format(t=rng.choice(TOPICS)),
        lambda: rng.choice(ROLEPLAY).format(t=rng.choice(TOPICS)),
        lambda: rng.choice(STEM_HUM).format(t=rng.choice(TOPICS), u=rng.choice(TOPICS)),
        lambda: rng.choice(CODING).format(c=rng.choice(CODE_TASKS)),
        lambda: f"Translate into {rng.choice(LANGUAGES)}: {rng.choice(SENTENCES)}",
        lambda: rng.choice(PASSAGE_TASKS).format(p=rng.choice(passages)),
        lambda: _math(rng),
        lambda: _reasoning(rng),
    ]
    prompts: list[str] = []
    seen: set[str] = set()
    for attempt in range(count * 20):
        prompt = kinds[attempt % len(kinds)]()
        if prompt not in seen:
            seen.add(prompt)
            prompts.append(prompt)
        if len(prompts) == count:
            break
    return prompts
