#!/usr/bin/env python3
"""Import cycles between the modules of one Rust crate.

Reads every `.rs` file under SRC (a crate's `src/`), strips comments, string and char
literals, and collects each `crate::...` path (a `use crate::{a, b::c}` tree is expanded;
`super::` paths are resolved against the module they are written in, inline `mod`s
included). Each path is resolved to the
longest module that exists (`src/a/b.rs` or `src/a/b/mod.rs` is `a::b`), following one level
of `pub use` re-exports. Edges are grouped at a depth (`--depth 1`: the top-level modules and
folders, the default; `--depth 0`: every file), and the strongly connected components with
more than one member (Tarjan) are printed. Test code counts (a test that imports a module is
an import) unless `--no-tests`. Exit status 1 if there is a cycle.

    python3 ops/import_cycles.py portus-agent/runtime/src            # top-level modules
    python3 ops/import_cycles.py portus-agent/runtime/src --depth 0  # every file
"""
import argparse
import re
import sys
from pathlib import Path

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip(src: str) -> str:
    """Source without comments and literals (kept as spaces so offsets do not matter)."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif (c == "r" and re.match(r'r#*"', src[i:i + 10])
              and not re.match(r"[A-Za-z0-9_]", src[i - 1] if i else " ")):
            m = re.match(r'r(#*)"', src[i:])
            end = '"' + m.group(1)
            j = src.find(end, i + m.end())
            i = n if j < 0 else j + len(end)
            out.append(' ""')
        elif c == '"':
            i += 1
            while i < n and src[i] != '"':
                i += 2 if src[i] == "\\" else 1
            i += 1
            out.append(' ""')
        elif c == "'":
            m = re.match(r"'(\\.|\\u\{[0-9a-fA-F]+\}|\\x[0-9a-fA-F]{2}|[^\\'])'", src[i:])
            if m:
                i += m.end()
                out.append(" ' ' ")
            else:  # a lifetime
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parse_tree(s: str, i: int, prefix: list, paths: list) -> int:
    """Parse a use tree at s[i:] (after `crate::`); append full paths; return the end."""
    while True:
        while i < len(s) and s[i].isspace():
            i += 1
        if i < len(s) and s[i] == "{":
            i += 1
            while True:
                while i < len(s) and (s[i].isspace() or s[i] == ","):
                    i += 1
                if i >= len(s) or s[i] == "}":
                    return i + 1
                i = parse_tree(s, i, list(prefix), paths)
        m = re.match(IDENT + r"|\*", s[i:])
        if not m:
            paths.append(prefix)
            return i
        prefix = prefix + [m.group(0)]
        i += m.end()
        m2 = re.match(r"\s*::\s*", s[i:])
        if m2:
            i += m2.end()
            continue
        paths.append(prefix)
        return i


def inline_mods(text: str) -> list:
    """(start, end) of each inline `mod name { ... }` block in stripped source."""
    out = []
    for m in re.finditer(r"\bmod\s+" + IDENT + r"\s*\{", text):
        depth, i = 0, m.end() - 1
        while i < len(text):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        out.append((m.start(), i))
    return out


def module_of(path: Path, src: Path) -> tuple:
    rel = path.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("--depth", type=int, default=1)
    ap.add_argument("--edges", action="store_true",
                    help="print every edge with the paths behind it")
    ap.add_argument("--no-tests", action="store_true", help="leave out `#[cfg(test)] mod` blocks")
    args = ap.parse_args()
    src = Path(args.src)
    files = {module_of(p, src): strip(p.read_text()) for p in sorted(src.rglob("*.rs"))}
    if args.no_tests:
        for mod, text in files.items():
            for a, b in reversed(inline_mods(text)):
                if re.search(r"#\[cfg\(test\)\]\s*$", text[:a]):
                    text = text[:a] + " " * (b + 1 - a) + text[b + 1 :]
            files[mod] = text
    modules = set(files)

    def longest(path: list[str]) -> tuple[tuple[str, ...], list[str]]:
        for k in range(len(path), -1, -1):
            if tuple(path[:k]) in modules:
                return tuple(path[:k]), path[k:]
        return (), path

    # one level of `pub use` re-exports: (module, name) -> target path
    reexports = {}
    for mod, text in files.items():
        for m in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+", text):
            paths = []
            start = m.end()
            rel = mod
            if text.startswith("crate::", start):
                start, rel = start + len("crate::"), ()
            elif text.startswith("self::", start):
                start = start + len("self::")
            parse_tree(text, start, [], paths)
            for p in paths:
                if p and p[-1] != "*":
                    reexports[(mod, p[-1])] = tuple(rel) + tuple(p)

    def resolve(path: list[str]) -> tuple[str, ...]:
        mod, rest = longest(list(path))
        if rest and (mod, rest[0]) in reexports:
            mod2, _ = longest(list(reexports[(mod, rest[0])]))
            return mod2
        return mod

    edges = {}
    for mod, text in files.items():
        found = []
        for m in re.finditer(r"(?<![A-Za-z0-9_$])crate\s*::\s*", text):
            paths = []
            parse_tree(text, m.end(), [], paths)
            found += paths
        inline = inline_mods(text)
        for m in re.finditer(r"(?<![A-Za-z0-9_:])((?:super\s*::\s*)+)", text):
            ups = m.group(1).count("super")
            paths = []
            parse_tree(text, m.end(), [], paths)
            # `super::` inside an inline `mod tests { ... }` counts that module too
            depth = sum(1 for a, b in inline if a < m.start() < b)
            base = list(mod) + ["<inline>"] * depth
            base = [x for x in base[: len(base) - ups] if x != "<inline>"]
            found += [base + p for p in paths]
        for p in found:
            target = resolve(p)
            edges.setdefault(mod, {}).setdefault(target, set()).add("::".join(p))

    def group(m: tuple[str, ...]) -> str:
        if args.depth == 0:
            return "::".join(m) or "lib"
        return "::".join(m[: args.depth]) or "lib"

    graph = {}
    why = {}
    for a, ts in edges.items():
        for b, ps in ts.items():
            ga, gb = group(a), group(b)
            if ga == gb or gb == "lib" and not b:
                # the crate root: only re-exports; attribute to what it re-exports
                if gb == "lib" and not b:
                    for p in ps:
                        parts = p.split("::")
                        if ((), parts[0]) in reexports:
                            gb = group(longest(list(reexports[((), parts[0])]))[0])
                            if gb != ga:
                                graph.setdefault(ga, set()).add(gb)
                                why.setdefault((ga, gb), set()).add(f"{'::'.join(a)}: crate::{p}")
                continue
            graph.setdefault(ga, set()).add(gb)
            why.setdefault((ga, gb), set()).update(f"{'::'.join(a)}: crate::{p}" for p in ps)
    for m in modules:
        graph.setdefault(group(m), set())

    # Tarjan
    index, low, on, stack, sccs, counter = {}, {}, set(), [], [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            sccs.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    cycles = [c for c in sccs if len(c) > 1]
    nodes = len(graph)
    nedges = sum(len(s) for s in graph.values())
    print(f"{src} at depth {args.depth}: {nodes} modules, {nedges} edges, {len(cycles)} cycle(s)")
    if args.edges:
        for a in sorted(graph):
            for b in sorted(graph[a]):
                print(f"  {a} -> {b}")
    for c in cycles:
        print(f"  cycle of {len(c)}: {', '.join(c)}")
        members = set(c)
        for a in c:
            for b in sorted(graph[a] & members):
                print(f"    {a} -> {b}  ({'; '.join(sorted(why.get((a, b), {'?'}))[:3])})")
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main())
