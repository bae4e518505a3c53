"""Print docs/bench/README.md: every recorded run and the README sections that cite it."""

import collections
import pathlib
import re

HERE = pathlib.Path(__file__).parent
HEAD = """# Recorded runs

Every figure in the project's README comes from one of these runs; each folder holds its command (a `run.sh`, a
`README.md`, or the command recorded in its `results.json` / log) beside its output. The right column names the
README section (and, where the section has several, the paragraph's bold lead) that cites it; a run no section
cites any more goes. Regenerate this file after editing the README: `python docs/bench/index.py > docs/bench/README.md`.

| run | backs the README figures of |
|---|---|
"""


def citations(readme: list[str]) -> dict[str, list[str]]:
    section, lead, fenced, where = "", "", False, collections.defaultdict(list)
    for i, line in enumerate(readme):
        fenced ^= line.startswith("```")
        if line.startswith("#") and not fenced:
            section, lead = line.lstrip("# ").strip(), ""
        bold = re.match(r"\*\*(.+?)\*\*", line)
        if bold and (i == 0 or not readme[i - 1].strip()):
            lead = bold.group(1).rstrip(".:")
        for name in re.findall(r"docs/bench/([A-Za-z0-9_.-]+)", line):
            ref = section + (f" / {lead}" if lead else "")
            if ref not in where[name.rstrip(".,)`/")]:
                where[name.rstrip(".,)`/")].append(ref)
    return where


def main() -> None:
    where = citations((HERE.parent.parent / "README.md").read_text().splitlines())
    rows = []
    for path in sorted(HERE.iterdir()):
        name = path.name
        if name in ("README.md", "index.py"):
            continue
        stem = name.removesuffix(".log")
        if name.endswith(".log") and (HERE / stem).is_dir():
            backs = f"the console log of `{stem}/`"
        else:
            backs = "; ".join(where.get(name, [])) or "(cited by no section)"
        rows.append(f"| `{name}` | {backs} |")
    print(HEAD + "\n".join(rows))


main()
