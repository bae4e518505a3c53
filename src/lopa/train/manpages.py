"""Long-document prompts from the machine's English man pages: troff read into plain text, cut into documents of a
few thousand characters at section boundaries, each paired with a task (summarise, explain the options, answer
a question on a section, write usage examples, list key points). The corpus's long inputs.
"""

from __future__ import annotations

import gzip
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .pool import Prompt, interleave

MAN_DIR = Path("/usr/share/man")
MAN_SECTIONS = ("man1", "man2", "man3", "man4", "man5", "man6", "man7", "man8")  # not the localised directories
PAGE_MIN_CHARS = 800  # a shorter page (or a .so redirect to another page) says too little to work on
DOC_CHARS = (1500, 6000)  # a document ends at a section boundary once it is this long, and never grows past this
MAN_TASKS = [
    "Summarize this part of the {page} manual page in a few sentences.\n\n{doc}",
    "{doc}\n\nList the key points of the documentation above as short bullet points.",
    (
        "Here is part of the documentation of {page}:\n\n{doc}\n\nWrite three practical usage examples based on it, "
        "each with a one-line explanation."
    ),
    "Explain this excerpt from the {page} manual to someone who has never used it.\n\n{doc}",
]
OPTION_TASKS = [
    "Explain the options described in this part of the {page} manual to a beginner, with an example for each.\n\n{doc}",
    "{doc}\n\nAccording to this manual text, what does the {option} option do, and when would I use it?",
]
HEADING_TASKS = [
    'Read this excerpt from the {page} manual and answer: what does the section "{heading}" explain?\n\n{doc}',
    '{doc}\n\nUsing only the text above, explain simply what the "{heading}" part of the {page} manual says.',
]
OPTION = re.compile(r"(?<![\w-])(--[a-z][\w-]+|-[A-Za-z])\b")
GENERIC_HEADINGS = {
    "NAME",
    "SYNOPSIS",
    "DESCRIPTION",
    "OPTIONS",
    "SEE ALSO",
    "AUTHOR",
    "AUTHORS",
    "COPYRIGHT",
    "REPORTING BUGS",
    "BUGS",
    "HISTORY",
    "COLOPHON",
    "NOTES",
    "LICENSE",
    "AVAILABILITY",
}
# troff: glyphs \(xx and \[xx] worth keeping, single-character escapes \x that print something, and the strings
# \*x the man macros define (pages define more with .ds); every other escape prints nothing readable
GLYPHS = {
    "em": "—",
    "en": "–",
    "hy": "-",
    "mi": "-",
    "bu": "•",
    "co": "©",
    "rg": "®",
    "tm": "™",
    "aq": "'",
    "dq": '"',
    "lq": "“",
    "rq": "”",
    "oq": "‘",
    "cq": "’",
    "ga": "`",
    "ha": "^",
    "ti": "~",
    "rs": "\\",
    "sl": "/",
    "ba": "|",
    "br": "|",
    "bv": "|",
    "mu": "×",
    "di": "÷",
    "+-": "±",
    "<=": "≤",
    ">=": "≥",
    "!=": "≠",
    "->": "→",
    "<-": "←",
    "de": "°",
    "Fo": "«",
    "Fc": "»",
    "sc": "§",
    "ps": "¶",
    "pl": "+",
    "eq": "=",
    "ul": "_",
    "ru": "_",
    "at": "@",
    "sh": "#",
    "Do": "$",
    "dg": "†",
    "Eu": "€",
    "eu": "€",
    "Po": "£",
    "ct": "¢",
    "aa": "´",
}
CHARS = {
    "-": "-",
    "e": "\\",
    "\\": "\\",
    " ": " ",
    "~": " ",
    "0": " ",
    "'": "'",
    "`": "`",
    ".": ".",
    "t": "\t",
    "_": "_",
}
MAN_STRINGS = {"R": "®", "Tm": "™", "lq": "“", "rq": "”", "Aq": "'"}
TROFF_ESCAPE = re.compile(
    r"\\(?:f(?:\[[^\]]*\]|\(..|.)"  # font
    r"|s[-+]?(?:\(\d\d|\[[^\]]*\]|'[^']*'|\d)"  # size
    r"|[nmgkFYV][-+]?(?:\[[^\]]*\]|\(..|.)"  # registers, colours
    r"|[hvwlLoxXbDNRSZAB]'[^']*'"  # motions and other escapes with a quoted argument
    r"|\*(?:\[(?P<string>[^\]]*)\]|\((?P<string2>..)|(?P<string1>.))"
    r"|\((?P<glyph2>..)|\[(?P<glyph>[^\]]*)\]"
    r"|(?P<char>.)|$)"
)
TROFF_COMMENT = re.compile(r'(?<!\\)\\["#].*')
TROFF_REQUEST = re.compile(r"[.']\s*([^\s\\]*)(.*)")
TROFF_ARG = re.compile(r'"((?:[^"]|"")*)"?|(\S+)')
DEFINITIONS = {"de", "de1", "dei", "am", "am1", "ami", "ig"}  # skipped up to their end line (".." by default)
NOFILL_STARTS, NOFILL_ENDS = {"nf", "EX", "Vb", "Bd"}, {"fi", "EE", "Ve", "Ed"}
PARAGRAPHS = {"PP", "LP", "P", "Pp", "HP", "sp", "Sp", "bP"}
IGNORED_MACROS = {
    "TH",
    "Dd",
    "Dt",
    "Os",
    "Bl",
    "El",
    "RS",
    "RE",
    "UR",
    "UE",
    "MT",
    "ME",
    "YS",
    "IX",
    "PD",
    "Ek",
    "Bk",
    "Tg",
    "Sm",
    "INDENT",
    "UNINDENT",
    "LINKSTYLE",
    "Rs",
    "Re",
}
ALTERNATING = {"BR", "RB", "BI", "IB", "IR", "RI"}  # the man macros that join their arguments without spaces
# mdoc (BSD) macros: those that enclose the rest of their line, those that print a mark or a name, and those that
# only set the font of their arguments
MDOC_PAIRS = {
    "Op": ("[", "]"),
    "Dq": ("“", "”"),
    "Qq": ('"', '"'),
    "Sq": ("‘", "’"),
    "Pq": ("(", ")"),
    "Bq": ("[", "]"),
    "Brq": ("{", "}"),
    "Aq": ("<", ">"),
}
MDOC_WORDS = {
    "Fl": "-",
    "Oo": "[",
    "Oc": "]",
    "Nd": "—",
    "Ux": "UNIX",
    "Bx": "BSD",
    "Ox": "OpenBSD",
    "Nx": "NetBSD",
    "Fx": "FreeBSD",
}
MDOC_SILENT = {
    "Ar",
    "Cm",
    "Pa",
    "Li",
    "Em",
    "Sy",
    "Ev",
    "Va",
    "Ic",
    "Dv",
    "Er",
    "Ql",
    "Ad",
    "An",
    "Ms",
    "Ft",
    "Fn",
    "Fa",
    "Cd",
    "Tn",
    "Sx",
    "Lk",
    "Mt",
    "No",
    "Ta",
    "Xc",
    "Xo",
    "Ek",
    "Bk",
    "Dl",
    "D1",
    "It",
}
GLUE_NEXT, GLUE_PREVIOUS = set("-[(“‘{<"), set("]).,:;!?”’}>")  # no space after these, or before these


def _glyph(name: str) -> str:
    """What a named troff glyph (\\(xx or \\[name]) prints, "" for the ones without a plain-text equivalent."""
    code = re.fullmatch(r"u([0-9A-Fa-f]{4,6})(_.*)?", name)
    return chr(int(code.group(1), 16)) if code else GLYPHS.get(name, "")


def unescape_troff(text: str, strings: dict[str, str]) -> str:
    """`text` with troff's escapes replaced by what they print; font, size and motion escapes are dropped, and
    \\*x strings are looked up in `strings` (one level deep)."""

    def replace(m: re.Match) -> str:
        string = m.group("string") or m.group("string2") or m.group("string1")
        if string:
            return unescape_troff(strings[string], {}) if string in strings else ""
        glyph = m.group("glyph") or m.group("glyph2")
        if glyph:
            return _glyph(glyph)
        return CHARS.get(m.group("char") or "", "")

    return TROFF_ESCAPE.sub(replace, text) if "\\" in text else text


def _mdoc_text(tokens: list[str], page: str) -> str:
    """The words an mdoc line prints: macro names dropped or turned into their marks (Fl v -> -v, Xr ls 1 -> ls(1),
    Op x -> [x]), punctuation glued to its neighbour."""
    words, closers, i = [], [], 0  # an empty word joins its neighbours
    while i < len(tokens):
        token, following = tokens[i], tokens[i + 1] if i + 1 < len(tokens) else None
        if token in MDOC_PAIRS:
            opener, closer = MDOC_PAIRS[token]
            words.append(opener)
            closers.append(closer)
        elif token == "Nm" and (following is None or following in MDOC_SILENT or following in MDOC_PAIRS):
            words.append(page)
        elif token == "Xr" and i + 2 < len(tokens):
            words += [following, "", f"({tokens[i + 2]})"]
            i += 2
        elif token in ("Ns", "Pf"):
            words.append("")
        elif token not in MDOC_SILENT and token != "Nm":
            words.append(MDOC_WORDS.get(token, token))
        i += 1
    text, glue = "", True
    for word in words + closers[::-1]:
        if word and not glue and word[0] not in GLUE_PREVIOUS:
            text += " "
        text += word
        glue = not word or word[-1] in GLUE_NEXT
    return text


def _macro_text(name: str, args: list[str], page: str) -> str:
    """What a text macro (.B, .BR, .Fl, a page's own ones) prints: its arguments, spaced as the macro spaces them."""
    if name in ALTERNATING:
        return "".join(args)
    if name[1:2].islower() or name in MDOC_SILENT:  # mdoc macros are capitalised words
        return _mdoc_text([name, *args], page)
    return " ".join(args)


@dataclass
class TroffText:
    """The plain text of a man page as it is read: (heading, lines) sections, and every heading seen."""

    sections: list[tuple[str, list[str]]] = field(default_factory=lambda: [("", [])])
    headings: list[str] = field(default_factory=list)
    words: list[str] = field(default_factory=list)  # the filled line being gathered
    fill: bool = True
    tag_pending: bool = False  # .TP: the next line is an item's tag, on a line of its own

    def flush(self) -> None:
        if self.words:
            self.sections[-1][1].append(" ".join(self.words))
            self.words = []

    def paragraph(self) -> None:
        self.flush()
        lines = self.sections[-1][1]
        if lines and lines[-1]:
            lines.append("")

    def heading(self, title: str, subsection: bool) -> None:
        self.headings.append(title)
        if subsection:
            self.paragraph()
            self.sections[-1][1].append(title)
        else:
            self.flush()
            self.sections.append((title, []))

    def blank(self) -> None:
        """An empty input line: a paragraph break in filled text (and an empty .TP tag), else an empty line."""
        self.tag_pending = False
        if self.fill:
            self.paragraph()
        else:
            self.flush()
            self.sections[-1][1].append("")

    def text(self, line: str) -> None:
        if not self.fill:
            self.flush()
            self.sections[-1][1].append(line.rstrip().replace("\t", "    "))
        elif line.strip():
            if line[0].isspace():
                self.flush()
            self.words.append(" ".join(line.split()))
            if self.tag_pending:
                self.flush()
                self.tag_pending = False

    def plain_sections(self) -> list[tuple[str, str]]:
        """(heading, text) of the sections that have text, blank lines collapsed."""
        self.flush()
        bodies = ((title, re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()) for title, lines in self.sections)
        return [(title, body) for title, body in bodies if body]

    def plain(self) -> str:
        return "\n\n".join(f"{title}\n{body}" if title else body for title, body in self.plain_sections())


class TroffReader:
    """Reads man(7) and mdoc(7) source into TroffText: the common macros and requests are followed, macro
    definitions, conditions that only hold for typesetters and table formats are skipped, and any other request
    prints nothing. Not a troff: just enough to make a page readable."""

    def __init__(self, source: str, page: str = ""):
        source = "\n".join(TROFF_COMMENT.sub("", line) for line in source.splitlines())
        self.lines = iter(re.sub(r"(?<!\\)\\\n", "", source).splitlines())  # an escaped newline joins two lines
        self.page, self.out, self.strings = page, TroffText(), dict(MAN_STRINGS)
        self.condition_held = True  # of the last .ie, for its .el

    @staticmethod
    def args(rest: str) -> list[str]:
        """A request's arguments: words, or double-quoted strings in which "" stands for a quote."""
        return [m.group(2) if m.group(1) is None else m.group(1).replace('""', '"') for m in TROFF_ARG.finditer(rest)]

    def read(self) -> TroffText:
        for line in self.lines:
            self.line(line)
        return self.out

    def line(self, line: str) -> None:
        request = TROFF_REQUEST.match(line)
        if request:
            self.request(request.group(1), request.group(2))
        elif not line.strip():
            self.out.blank()
        else:
            self.out.text(unescape_troff(line, self.strings))

    def skip_until(self, end: str) -> None:
        """Skip a macro definition or ignored block, up to its end line."""
        for line in self.lines:
            if line.strip() == end:
                return

    def skip_table_format(self) -> str:
        """Skip a table's options and format lines (they end at the first line ending in a period); returns the
        character that separates its cells."""
        separator = "\t"
        for line in self.lines:
            separator = next(iter(re.findall(r"tab\s*\((.)\)", line)), separator)
            if line.rstrip().endswith("."):
                return separator
        return separator

    def table(self) -> None:
        """A tbl table as unfilled rows of cells separated by " | " (T{ ... T} text blocks joined, requests in it
        dropped)."""
        separator, rows = self.skip_table_format(), []
        for line in self.lines:
            name = TROFF_REQUEST.match(line)
            if name and name.group(1) == "TE":
                break
            if name and name.group(1) == "T&":
                separator = self.skip_table_format()
            elif not name:
                rows.append(line)
        blocks = re.compile(r"T\{\n(.*?)\n?T\}", flags=re.DOTALL)
        text = blocks.sub(lambda block: block.group(1).replace("\n", " "), "\n".join(rows))
        self.out.flush()
        for row in text.splitlines():
            self.out.sections[-1][1].append(unescape_troff(row.replace(separator, " | "), self.strings))

    def skip_block(self, depth: int) -> None:
        """Skip the rest of a \\{ ... \\} block whose condition failed, `depth` blocks deep."""
        for line in self.lines if depth > 0 else ():
            depth += line.count("\\{") - line.count("\\}")
            if depth <= 0:
                return

    def conditional(self, name: str, rest: str) -> None:
        """.if/.ie/.el: only the nroff condition `n` holds (a terminal, not a typesetter)."""
        if name == "el":
            held, body = not self.condition_held, rest
        else:
            condition, _, body = rest.strip().partition(" ")
            held = condition == "n"
            if name == "ie":
                self.condition_held = held
        body = body.strip()
        if held:
            body = body.removeprefix("\\{").strip()
            if body:
                self.line(body)
        elif body.startswith("\\{"):
            self.skip_block(body.count("\\{") - body.count("\\}"))

    def request(self, name: str, rest: str) -> None:
        out, args = self.out, self.args(rest)
        if name in DEFINITIONS:  # .de NAME [END] and .ig [END]
            end = args[1:2] if name != "ig" else args[:1]
            self.skip_until("." + (end[0] if end else "."))
        elif name in ("if", "ie", "el"):
            self.conditional(name, rest)
        elif name == "ds" and args:
            self.strings[args[0]] = rest.strip()[len(args[0]) :].strip().removeprefix('"')
        elif name in ("SH", "Sh", "SS", "Ss"):
            out.heading(unescape_troff(" ".join(args), self.strings), subsection=name in ("SS", "Ss"))
        elif name in NOFILL_STARTS or name in NOFILL_ENDS:
            out.flush()
            out.fill = name in NOFILL_ENDS
        elif name == "TS":
            self.table()
        elif name in PARAGRAPHS:
            out.paragraph()
        elif name == "br":
            out.flush()
        elif name in ("TP", "TQ", "It"):  # an item whose tag goes on a line of its own
            out.paragraph()
            out.tag_pending = True
            if name == "It" and args:
                out.text(unescape_troff(_macro_text(name, args, self.page), self.strings))
        elif name == "IP":  # an item whose tag (a bullet, a number) starts its paragraph
            out.paragraph()
            if args:
                out.text(unescape_troff(args[0], self.strings))
        elif name[:1].isupper() and name not in IGNORED_MACROS:
            text = unescape_troff(_macro_text(name, args, self.page), self.strings)
            if text:
                out.text(text)


def man_page_paths(root: Path = MAN_DIR) -> list[Path]:
    """The English man pages installed (the localised directories left out), without the aliases that are links."""
    return sorted(path for section in MAN_SECTIONS for path in (root / section).glob("*.gz") if not path.is_symlink())


def page_name(path: Path) -> tuple[str, str]:
    """("ls", "1") for man1/ls.1.gz."""
    name, _, section = path.name.removesuffix(".gz").rpartition(".")
    return name, section


def page_family(path: Path) -> str:
    """The program or package a page belongs to (git for git-add, pg for pg_dump), so that the families with
    thousands of pages (gcloud) take turns with the rest instead of crowding them out."""
    return re.split(r"[-_.:]", path.name, maxsplit=1)[0].lower()


def _pieces(text: str, limit: int) -> list[str]:
    """`text` in runs of whole lines of at most `limit` characters (a longer line is cut)."""
    pieces, current = [], ""
    for line in text.splitlines():
        for part in [line[i : i + limit] for i in range(0, len(line), limit)] or [""]:
            if current and len(current) + 1 + len(part) > limit:
                pieces.append(current)
                current = ""
            current = f"{current}\n{part}" if current else part
    return pieces + [current] if current else pieces


def _units(sections: list[tuple[str, str]], limit: int) -> Iterator[tuple[bool, str]]:
    """(starts a section, text): the paragraphs of the sections, the first one under its heading, cut to `limit`."""
    for heading, body in sections:
        for i, paragraph in enumerate(body.split("\n\n")):
            text = f"{heading}\n{paragraph}" if i == 0 and heading else paragraph
            for j, piece in enumerate(_pieces(text, limit)):
                yield i == 0 and j == 0, piece


def split_documents(sections: list[tuple[str, str]], bounds: tuple[int, int] = DOC_CHARS) -> list[str]:
    """A page's (heading, text) sections as documents of bounds[0] to bounds[1] characters: each ends at a section
    boundary once it is long enough, else at a paragraph or line before it grows too long; a short tail joins the
    document before it where that fits. Documents under PAGE_MIN_CHARS (short pages, .so redirects) are dropped."""
    shortest, longest = bounds
    documents, current = [], ""
    for starts_section, unit in _units(sections, longest):
        if current and (len(current) + 2 + len(unit) > longest or starts_section and len(current) >= shortest):
            documents.append(current)
            current = ""
        current = f"{current}\n\n{unit}" if current else unit
    if documents and len(current) < shortest and len(documents[-1]) + 2 + len(current) <= longest:
        documents[-1] = f"{documents[-1]}\n\n{current}"
    elif current:
        documents.append(current)
    return [document for document in documents if len(document) >= PAGE_MIN_CHARS]


def troff_to_text(source: str, page: str = "") -> str:
    """A troff man page as readable plain text: headings on lines of their own, escapes resolved."""
    return TroffReader(source, page).read().plain()


def man_documents(path: Path) -> tuple[list[str], list[str]]:
    """The documents of one gzip-compressed page and its headings (nothing for an unreadable page)."""
    try:
        source = gzip.decompress(path.read_bytes()).decode("utf-8", "replace")
    except (OSError, EOFError):
        return [], []
    text = TroffReader(source, page_name(path)[0]).read()
    return split_documents(text.plain_sections()), text.headings


def _man_prompt(rng: random.Random, document: str, page: str, headings: list[str]) -> Prompt:
    """A task on one document; the option and heading questions only where the document has options or a
    heading more telling than DESCRIPTION."""
    options = sorted(set(OPTION.findall(document)))
    asked = sorted({h for h in headings if h.upper() not in GENERIC_HEADINGS and f"\n{h}\n" in f"\n{document}\n"})
    tasks = MAN_TASKS + (OPTION_TASKS if options else []) + (HEADING_TASKS if asked else [])
    text = rng.choice(tasks).format(
        page=page, doc=document, option=rng.choice(options or [""]), heading=rng.choice(asked or [""])
    )
    return Prompt(text, f"man:{page}")


def _family_prompts(rng: random.Random, paths: list[Path]) -> Iterator[Prompt]:
    """A task on each document of the pages, page after page, reading each page only when it is reached."""
    for path in paths:
        documents, headings = man_documents(path)
        for document in documents:
            yield _man_prompt(rng, document, "{}({})".format(*page_name(path)), headings)


def man_prompts(rng: random.Random, root: Path = MAN_DIR) -> Iterator[Prompt]:
    """A task on every man page document, round robin over page families (each family's pages in an order
    shuffled by rng); lazy, so that a quota reads only the pages it takes."""
    families: dict[str, list[Path]] = {}
    for path in man_page_paths(root):
        families.setdefault(page_family(path), []).append(path)
    for paths in families.values():
        rng.shuffle(paths)
    return interleave(_family_prompts(rng, paths) for paths in families.values())
