#!/usr/bin/env python3
"""Every results table in the docs names the command that measured it (issue 49).

Scans README.md and docs/**/*.md (or the files and folders given) for markdown tables of
measured figures: at least 2 data rows, and at least a third of the data cells holding a
decimal number (`0.93`), a percentage (`12 %`) or a number with a unit (`40 ms`, `12 Mbit/s`,
`1.4×`). Such a table must have a command marker on a line from 14 lines above its first
line to 4 lines below its last (the table's own lines included):

  * a backtick span starting with `python`, `cargo`, `bash`, `ccp-agent`, `make`, `./` or
    `ops/` (it may run over a line break; the line it starts on counts), or a line of a fenced
    code block starting with one of those;
  * the words "Measured at", "Command:" or "measured with" (any case);
  * for a historical figure whose command is lost, the words "command not recorded" (say
    which commit the figures come from in the same sentence).

A `Command:` line among a file's first 5 lines, before any table, covers every table of the
file (the harness's report, docs/eval/report.md, names its sweep once). Tables without such
figures (definitions, option lists) are ignored. A table that cannot name its command is
listed, with the reason, in ops/doc_provenance_allow.txt (`FILE | HEADING | REASON`: HEADING
is the title of the section the table sits in, `-` for none). Prints FILE:LINE for each
unsourced table and exits 1 if there is one.

    python3 ops/doc_provenance.py             # README.md and docs/
    python3 ops/doc_provenance.py docs/x.md   # those files (or folders) only
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ABOVE, BELOW = 14, 4
MIN_ROWS = 2
MIN_FRACTION = 1 / 3

COMMAND_PREFIXES = ("python", "cargo", "bash", "ccp-agent", "make", "./", "ops/")
SPAN = re.compile(r"`([^`]+)`")
WORDS = re.compile(r"measured at|command:|measured with|command not recorded", re.I)
UNIT = r"(?:ms|µs|us|ns|s|min|h|Mbit/s|Gbit/s|kbit/s|Mbps|Gbps|kbps|B|KB|MB|GB|KiB|MiB|GiB|pkts?)"
FIGURE = re.compile(
    r"(?<![\w.:/-])\d+\.\d+(?![\w/.-])"  # a decimal number (not a version, DOI or name)
    r"|\d\s*%"  # a percentage
    r"|\d\s*[×x](?![A-Za-z0-9])"  # a factor
    rf"|\d\s*{UNIT}(?![A-Za-z0-9])"  # a number with a unit
)
SEPARATOR = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


@dataclass
class Table:
    path: Path
    start: int  # 0-based index of the header row
    end: int  # 0-based index of the last row
    heading: str  # the section the table sits in
    cells: list[str]  # the data rows' cells


def split_row(line: str) -> list[str]:
    """A table row's cells (an escaped pipe `\\|` or one inside a backtick span is no border)."""
    s = line.strip()
    if s.startswith("|"):
        s = s[1:]
    if s.endswith("|") and not s.endswith("\\|"):
        s = s[:-1]
    cells, cur, code = [], [], False
    prev = ""
    for c in s:
        if c == "`":
            code = not code
        if c == "|" and not code and prev != "\\":
            cells.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        prev = c
    cells.append("".join(cur).strip())
    return cells


def tables(path: Path, lines: list[str]) -> Iterator[Table]:
    """The markdown tables of a file (not those inside fenced code blocks)."""
    heading, fenced, i = "", False, 0
    while i < len(lines):
        line = lines[i]
        if FENCE.match(line):
            fenced = not fenced
            i += 1
            continue
        if fenced:
            i += 1
            continue
        m = HEADING.match(line)
        if m:
            heading = m.group(1)
        if (
            "|" in line
            and i + 1 < len(lines)
            and SEPARATOR.match(lines[i + 1])
            and "|" in lines[i + 1]
        ):
            j = i + 2
            cells: list[str] = []
            rows = 0
            while j < len(lines) and lines[j].strip() and "|" in lines[j]:
                cells += split_row(lines[j])
                rows += 1
                j += 1
            if rows >= MIN_ROWS:
                yield Table(path, i, j - 1, heading, cells)
            i = j
            continue
        i += 1


LINK_TARGET = re.compile(r"\]\([^)]*\)")


def figure(cell: str) -> bool:
    """Does the cell hold a measured figure (code spans and link targets are not figures)?"""
    return bool(FIGURE.search(LINK_TARGET.sub("]", SPAN.sub(" ", cell))))


def is_results(t: Table) -> bool:
    filled = [c for c in t.cells if c]
    if not filled:
        return False
    numeric = sum(1 for c in filled if figure(c))
    return numeric >= MIN_FRACTION * len(filled)


def markers(lines: list[str]) -> list[bool]:
    """Per line: does a command marker start on it? A backtick span may run over a line break."""
    out = [False] * len(lines)
    prose: list[str] = []  # the lines outside fenced code (fenced ones blank), for the spans
    fenced = False
    for k, line in enumerate(lines):
        if FENCE.match(line):
            fenced = not fenced
            prose.append("")
            continue
        if fenced:
            out[k] = line.strip().lstrip("$ ").startswith(COMMAND_PREFIXES)
            prose.append("")
            continue
        out[k] = bool(WORDS.search(line))
        prose.append(line)
    text = "\n".join(prose)
    for m in SPAN.finditer(text):
        if " ".join(m.group(1).split()).startswith(COMMAND_PREFIXES):
            out[text.count("\n", 0, m.start())] = True
    return out


def header_command(lines: list[str]) -> bool:
    """A `Command:` line in a file's first 5 lines, before any table, covers every table of the
    file (the harness's report names its sweep once, at the top)."""
    for line in lines[:5]:
        if line.lstrip().startswith("|"):
            return False
        if line.startswith("Command: `"):
            return True
    return False


def sourced(t: Table, lines: list[str], marks: list[bool]) -> bool:
    lo, hi = max(0, t.start - ABOVE), min(len(lines), t.end + BELOW + 1)
    return any(marks[lo:hi])


def allowed(root: Path) -> set[tuple[str, str]]:
    """(file, heading) pairs of ops/doc_provenance_allow.txt (each with a reason)."""
    path = root / "ops" / "doc_provenance_allow.txt"
    out: set[tuple[str, str]] = set()
    if not path.exists():
        return out
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 3 or not all(parts):
            raise SystemExit(f"{path}:{n}: want `FILE | HEADING | REASON`")
        out.add((parts[0], parts[1]))
    return out


def markdown_files(paths: Iterable[Path]) -> Iterator[Path]:
    for p in paths:
        if p.is_dir():
            yield from sorted(p.rglob("*.md"))
        elif p.exists():
            yield p


def unsourced(paths: Iterable[Path], root: Path = ROOT) -> list[tuple[Table, bool]]:
    """The results tables without a command nearby (each with: is it in the allow-list)."""
    allow = allowed(root)
    out = []
    for path in markdown_files(paths):
        lines = path.read_text(encoding="utf-8").splitlines()
        if header_command(lines):
            continue
        marks = markers(lines)
        for t in tables(path, lines):
            if not is_results(t) or sourced(t, lines, marks):
                continue
            try:
                rel = str(path.resolve().relative_to(root))
            except ValueError:
                rel = str(path)
            out.append((t, (rel, t.heading or "-") in allow))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", type=Path, help="files or folders (default: README, docs)")
    ap.add_argument("--root", type=Path, default=ROOT, help="the repository (its allow-list)")
    args = ap.parse_args(argv)
    paths = args.paths or [args.root / "README.md", args.root / "docs"]
    bad = 0
    for t, ok in unsourced(paths, args.root):
        if ok:
            continue
        bad += 1
        print(f"{t.path}:{t.start + 1}: results table without its command "
              f"(section: {t.heading or '-'})")
    if bad:
        print(f"{bad} results table(s) name no command within {ABOVE} lines above or "
              f"{BELOW} below (a `python ...`/`cargo ...` span, or 'Measured at ...')")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
