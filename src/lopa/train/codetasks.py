"""Code-task prompts from the Python standard library's own source: functions and classes of pure-Python modules
to explain, test, annotate, refactor, review, restyle, document, or implement from their signature and docstring.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import random
import textwrap
from collections.abc import Iterator
from functools import lru_cache

from .pool import Prompt, interleave

CODE_MODULES = [  # pure-Python standard library modules whose functions and classes become code tasks
    "argparse",
    "ast",
    "base64",
    "bdb",
    "calendar",
    "cmd",
    "code",
    "codeop",
    "collections",
    "colorsys",
    "concurrent.futures._base",
    "configparser",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "difflib",
    "dis",
    "email.header",
    "email.message",
    "email.utils",
    "enum",
    "filecmp",
    "fileinput",
    "fnmatch",
    "fractions",
    "ftplib",
    "functools",
    "getopt",
    "gettext",
    "glob",
    "graphlib",
    "gzip",
    "heapq",
    "hmac",
    "html",
    "html.parser",
    "http.client",
    "http.cookies",
    "http.server",
    "imaplib",
    "inspect",
    "ipaddress",
    "json.decoder",
    "json.encoder",
    "linecache",
    "locale",
    "logging",
    "mimetypes",
    "netrc",
    "ntpath",
    "numbers",
    "optparse",
    "pathlib",
    "pdb",
    "pickletools",
    "pkgutil",
    "plistlib",
    "poplib",
    "posixpath",
    "pprint",
    "pstats",
    "queue",
    "quopri",
    "random",
    "reprlib",
    "rlcompleter",
    "runpy",
    "sched",
    "secrets",
    "selectors",
    "shlex",
    "shutil",
    "smtplib",
    "socketserver",
    "statistics",
    "string",
    "sysconfig",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "timeit",
    "tokenize",
    "trace",
    "traceback",
    "unittest.case",
    "urllib.parse",
    "uuid",
    "wave",
    "weakref",
    "webbrowser",
    "wsgiref.headers",
    "xml.dom.minidom",
    "zipapp",
    "zipfile",
]
SNIPPET_CHARS = (200, 2500)
SNIPPET_TASKS = [
    "Explain what this code from Python's {module} module does, step by step.\n\n```python\n{code}\n```",
    "Write unit tests with pytest for this code from Python's {module} module.\n\n```python\n{code}\n```",
    "Add type hints to this Python code and return the whole annotated code.\n\n```python\n{code}\n```",
    (
        "Refactor this Python code for readability without changing its behaviour, and explain your changes.\n\n"
        "```python\n{code}\n```"
    ),
    "Review this Python code: which bugs, edge cases or unusual inputs could cause trouble?\n\n```python\n{code}\n```",
    (
        "Rewrite this Python code in a different style (for example more functional, or more explicit), keeping its "
        "behaviour.\n\n```python\n{code}\n```"
    ),
]
DOCSTRING_TASK = "Write a clear docstring for this Python code.\n\n```python\n{code}\n```"  # for undocumented code
SPECIFICATION_TASKS = [  # given only the signature and docstring
    "Implement this Python function so that it does what its docstring says.\n\n```python\n{code}\n```",
    "Write the body of this function.\n\n```python\n{code}\n```",
]


def _definition_source(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> str:
    """A function's or class's source, decorators included, dedented (a method's too)."""
    start = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
    return textwrap.dedent("\n".join(lines[start - 1 : node.end_lineno]))


def _module_definitions(source: str) -> Iterator[tuple[str, str]]:
    """(qualified name, source) of a module's top-level functions and classes; a class longer than SNIPPET_CHARS
    allows gives its methods instead."""
    functions, lines = (ast.FunctionDef, ast.AsyncFunctionDef), source.splitlines()
    for node in ast.parse(source).body:
        if isinstance(node, functions + (ast.ClassDef,)):
            code = _definition_source(lines, node)
            if isinstance(node, functions) or len(code) <= SNIPPET_CHARS[1]:
                yield node.name, code
            else:
                methods = (m for m in node.body if isinstance(m, functions))
                yield from ((f"{node.name}.{m.name}", _definition_source(lines, m)) for m in methods)


@lru_cache(maxsize=1)
def code_snippets() -> tuple[tuple[str, str, str], ...]:
    """(module, qualified name, source) of the functions and classes of CODE_MODULES of SNIPPET_CHARS characters.
    Each module's source comes whole from inspect.getsource and is parsed once: inspect.getsource on each class
    would parse its module again every time (half a minute for these modules). Cached: the stdlib does not change."""
    snippets, seen = [], set()
    for module in CODE_MODULES:
        try:
            source = inspect.getsource(importlib.import_module(module))
        except (OSError, TypeError):  # no source on this machine
            continue
        for name, code in _module_definitions(source):
            if SNIPPET_CHARS[0] <= len(code) <= SNIPPET_CHARS[1] and code not in seen:
                seen.add(code)
                snippets.append((module, name, code))
    return tuple(snippets)


def _specification(code: str, node: ast.stmt) -> str | None:
    """A function's signature and docstring without its body, or None where `node` is not a function with a
    docstring on lines of its own."""
    documented = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and ast.get_docstring(node)
    if not documented or node.body[0].lineno == node.lineno or len(node.body) < 2:
        return None
    return "\n".join(code.splitlines()[: node.body[0].end_lineno])


def _snippet_prompts(rng: random.Random, module: str, name: str, code: str) -> list[Prompt]:
    """Every task that suits one snippet, shuffled: a docstring is asked only for undocumented code, and a
    documented function is also given as signature and docstring only, to be implemented."""
    node = ast.parse(code).body[0]
    texts = [task.format(module=module, code=code) for task in SNIPPET_TASKS]
    if ast.get_docstring(node) is None:
        texts.append(DOCSTRING_TASK.format(code=code))
    specification = _specification(code, node)
    if specification:
        texts.append(rng.choice(SPECIFICATION_TASKS).format(code=specification))
    rng.shuffle(texts)
    return [Prompt(text, f"stdlib:{module}.{name}") for text in texts]


def code_prompts(rng: random.Random) -> list[Prompt]:
    """Code tasks on stdlib snippets: round robin over modules, and within a module over its snippets (in an order
    shuffled by rng), so that the front of the pool has one task on each of many snippets."""
    modules: dict[str, list[list[Prompt]]] = {}
    for module, name, code in code_snippets():
        modules.setdefault(module, []).append(_snippet_prompts(rng, module, name, code))
    for snippets in modules.values():
        rng.shuffle(snippets)
    return list(interleave(interleave(snippets) for snippets in modules.values()))
