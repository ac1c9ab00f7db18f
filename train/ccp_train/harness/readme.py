"""Put a sweep's tables into the README and its report into ``docs/eval/``:
``python -m ccp_train.harness.readme OUT [README [DOCS]]``.

The README's result tables are generated, not typed: each lies between the markers
``<!-- BEGIN harness:NAME -->`` and ``<!-- END harness:NAME -->``, and this command replaces
what is between them with the sweep's ``NAME.md`` from ``OUT`` (``headline``: one figure per
suite and algorithm; ``corpus``: the trace corpus by kind), followed by a line naming the
sweep (split, seeds, runs, wall time, command). The full report and both tables
(``report.md``, ``headline.md``, ``corpus.md`` of ``OUT``) are copied into the folder ``DOCS``
(default, when README is not given: the repository's ``docs/eval/``; its ``report.md`` is the
one the README links). It refuses a sweep that is not on the ``eval`` split, that had failed runs,
or a README without the markers.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from .matrix import repo_root

TABLES = ("headline", "corpus")


class ReadmeError(ValueError):
    """A sweep or README that cannot be used; the message names the fix."""


def _provenance(meta: dict) -> str:
    return (f"*From `{meta.get('command', '')}`: {meta.get('split')} split, seeds "
            f"{meta.get('seeds')}, {meta.get('runs')} runs, {meta.get('wall_s', 0) / 60:.0f} "
            "min on this 2-core machine.*")


def _meta(out: Path) -> dict:
    """The sweep's meta.json, if the README may report it."""
    try:
        meta = json.loads((out / "meta.json").read_text())
    except (OSError, ValueError) as e:
        raise ReadmeError(f"{out}/meta.json: {e} (run the harness with --out {out} first)") from e
    if meta.get("split") != "eval":
        raise ReadmeError(f"{out} is a {meta.get('split')!r} sweep: the README reports the "
                          "eval split")
    if meta.get("failed"):
        raise ReadmeError(f"{out} has {meta['failed']} failed runs: fix them first")
    return meta


#: the sweep's files copied into ``docs/eval/``
DOCS = ("report.md", "headline.md", "corpus.md")


def docs(out: Path) -> dict[str, str]:
    """The sweep's report and tables for ``docs/eval/``, if the README may report it."""
    _meta(out)
    missing = [n for n in DOCS if not (out / n).is_file()]
    if missing:
        raise ReadmeError(f"{', '.join(str(out / n) for n in missing)} missing: run the "
                          f"harness with --out {out} over every suite")
    return {n: (out / n).read_text() for n in DOCS}


def update(readme_text: str, out: Path) -> str:
    """The README with every marked table replaced by the sweep's in ``out``."""
    meta = _meta(out)
    text = readme_text
    for name in TABLES:
        pat = re.compile(rf"(<!-- BEGIN harness:{name} -->\n).*?(<!-- END harness:{name} -->)",
                         re.S)
        if not pat.search(text):
            raise ReadmeError(f"the README has no <!-- BEGIN harness:{name} --> ... <!-- END "
                              f"harness:{name} --> markers")
        src = out / f"{name}.md"
        if not src.is_file():
            raise ReadmeError(f"{src} is missing: the sweep did not run the suites it needs")
        body = src.read_text().rstrip("\n") + "\n\n" + _provenance(meta) + "\n"
        text = pat.sub(lambda m, b=body: m.group(1) + b + m.group(2), text)
    return text


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not 1 <= len(args) <= 3 or args[0].startswith("-"):
        print("usage: python -m ccp_train.harness.readme OUT [README [DOCS]]", file=sys.stderr)
        return 2
    out = Path(args[0])
    readme = Path(args[1]) if len(args) > 1 else repo_root() / "README.md"
    dst = (Path(args[2]) if len(args) > 2 else None if len(args) > 1
           else repo_root() / "docs" / "eval")
    try:
        new = update(readme.read_text(), out)
        files = docs(out) if dst is not None else {}
    except (OSError, ReadmeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    readme.write_text(new)
    print(f"updated {readme} from {out}")
    if dst is not None:
        for name, text in files.items():
            (dst / name).write_text(text)
            print(f"wrote {dst / name} from {out / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
