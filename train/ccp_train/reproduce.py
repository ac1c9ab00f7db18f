"""Regenerate a shipped model from its card's command and compare the bytes.

    python -m ccp_train.reproduce models/mocc.json [--workdir DIR] [--keep]
    bash ops/reproduce.sh models/mocc.json

The card's ``training.command`` is one trainer command or a chain (``A && B && C``, a fine-tune
chaining its starting point's command). Each part runs in order with this Python, every
``--out DIR`` moved into the work folder (and every ``--init DIR/FILE`` that names an earlier
part's output with it), so nothing outside the work folder is written. A card trained before
the trace corpus (its ``scenario_ranges`` has no ``trace_source``) drew its trace episodes from
the two cellular traces that were then ``--traces``' default; a part that does not name
``--traces`` is replayed with them explicitly (the card's ``scenario_ranges.traces``, under
``datapath/sim/scenarios/traces/``) and ``--trace-kinds ''``. Exit 0 when the
regenerated ONNX file's sha256 equals the card's, or when the two files differ only in the
exporter's version string (ONNX export writes the torch version into ``producer_version``: a
model trained under another torch reproduces with the same graph and weights, and says so);
1 when they differ otherwise (both printed, with the card's ``training.determinism`` and this
machine's), 2 for a card that cannot be replayed.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ccp_train.card import sha256_file
from ccp_train.rl import determinism
from ccp_train.rl.flags import REPO_ROOT

_TRAINER_PREFIX = "ccp_train."
#: where a pre-corpus card's ``scenario_ranges.traces`` names live (relative to the repository)
LEGACY_TRACE_DIR = "datapath/sim/scenarios/traces"


class ReplayError(ValueError):
    """A card whose command cannot be replayed; the message says why."""


def legacy_traces(scenario_ranges: object) -> list[str] | None:
    """The ``--traces`` flags a pre-corpus card's parts ran with by default (None: the card
    records its trace source, or has no scenario ranges: nothing to add)."""
    if not isinstance(scenario_ranges, dict) or "trace_source" in scenario_ranges \
            or "traces" not in scenario_ranges:
        return None
    files = []
    for name in scenario_ranges["traces"] or ():
        rel = f"{LEGACY_TRACE_DIR}/{name}"
        if not (REPO_ROOT / rel).is_file():
            raise ReplayError(f"the card trained on the trace {name}, which is not in "
                              f"{LEGACY_TRACE_DIR}/: the command cannot be replayed")
        files.append(rel)
    return ["--traces", ",".join(files), "--trace-kinds", ""]


def plan(command: str, work: Path, scenario_ranges: object = None
         ) -> tuple[list[list[str]], Path]:
    """The argument lists to run (without the interpreter) and the last part's output folder;
    `scenario_ranges` (the card's): a pre-corpus card's parts get :func:`legacy_traces`."""
    legacy = legacy_traces(scenario_ranges)
    parts = [p.strip() for p in command.split("&&") if p.strip()]
    if not parts:
        raise ReplayError("the card has no training command")
    moved: dict[str, Path] = {}
    runs: list[list[str]] = []
    last_out: Path | None = None
    for i, part in enumerate(parts):
        argv = shlex.split(part)
        if len(argv) < 3 or argv[0] not in ("python", "python3") or argv[1] != "-m" \
                or not argv[2].startswith(_TRAINER_PREFIX):
            raise ReplayError(f"part {i + 1} is not `python -m ccp_train.<trainer> ...`: {part!r}")
        args = argv[1:]
        out_dir = work / f"part{i + 1}"
        for j, a in enumerate(args):
            if a == "--out" and j + 1 < len(args):
                moved[args[j + 1].rstrip("/")] = out_dir
                args[j + 1] = str(out_dir)
            elif a == "--init" and j + 1 < len(args):
                src = Path(args[j + 1])
                parent = str(src.parent).rstrip("/")
                if parent not in moved:
                    raise ReplayError(f"part {i + 1}: --init {src} is not an earlier part's "
                                      "output: the chain cannot be replayed from the card alone")
                args[j + 1] = str(moved[parent] / src.name)
        if "--out" not in args:
            args += ["--out", str(out_dir)]
        if legacy is not None and not any(a == "--traces" or a.startswith("--traces=")
                                           for a in args):
            args += legacy
        runs.append(args)
        last_out = out_dir
    assert last_out is not None
    return runs, last_out


def last_part(runs: list[list[str]], checkpoint: Path) -> list[list[str]]:
    """Only the last part of a replay plan, its ``--init`` replaced by `checkpoint`."""
    args = list(runs[-1])
    if "--init" not in args:
        raise ReplayError("--from-checkpoint: the card's last part has no --init to replace")
    args[args.index("--init") + 1] = str(checkpoint)
    return [args]


def same_but_producer(regenerated: Path, shipped: Path, want_sha: str) -> str | None:
    """When the regenerated file differs from the shipped one only in ``producer_version`` (the
    exporting torch's version, which ONNX export writes into the file): a description of the
    two versions; else ``None``. ``shipped`` (the card's ``model_file``) must itself have the
    card's sha256."""
    import onnx

    if not shipped.is_file() or sha256_file(shipped) != want_sha:
        return None
    a, b = onnx.load(str(regenerated)), onnx.load(str(shipped))
    if a.producer_name != b.producer_name:
        return None
    va, vb = a.producer_version, b.producer_version
    a.producer_version = b.producer_version
    if a.SerializeToString() != b.SerializeToString():
        return None
    return f"card: {b.producer_name} {vb}, here: {va}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ccp_train.reproduce", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("card", type=Path, help="the shipped model's card (<alg>.json)")
    p.add_argument("--workdir", type=Path, default=None, help="work folder (default: a temp one)")
    p.add_argument("--keep", action="store_true", help="keep the work folder")
    p.add_argument("--from-checkpoint", type=Path, default=None, metavar="CKPT",
                   help="replay only the last part, from this checkpoint")
    args = p.parse_args(argv)
    try:
        card = json.loads(args.card.read_text())
        command = card["training"]["command"]
        want = card["sha256"]
        alg = card["algorithm"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"error: {args.card}: not a model card with training.command and sha256 ({e})",
              file=sys.stderr)
        return 2
    work = args.workdir or Path(tempfile.mkdtemp(prefix=f"reproduce-{alg}-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        runs, final = plan(command, work, card["training"].get("scenario_ranges"))
        if args.from_checkpoint is not None:
            runs = last_part(runs, args.from_checkpoint.resolve())
    except ReplayError as e:
        print(f"error: {args.card}: {e}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    for i, a in enumerate(runs):
        print(f"[{i + 1}/{len(runs)}] python {shlex.join(a)}", flush=True)
        r = subprocess.run([sys.executable, *a], stdout=subprocess.DEVNULL, check=False)
        if r.returncode != 0:
            print(f"error: part {i + 1} exited {r.returncode}", file=sys.stderr)
            return 1
    wall = time.monotonic() - t0
    got = sha256_file(final / f"{alg}.onnx")
    print(f"regenerated in {wall:.0f} s: {final / (alg + '.onnx')}")
    print(f"  card    sha256 {want}")
    print(f"  rerun   sha256 {got}")
    same = got == want
    shipped = args.card.parent / str(card.get("model_file", f"{alg}.onnx"))
    if not same and (why := same_but_producer(final / f"{alg}.onnx", shipped, want)):
        print(f"IDENTICAL but for the exporter's version string ({why}): same graph, same weights")
        return 0
    if not same:
        print("DIFFERENT. The card's determinism record and this machine's:")
        print("  card:", json.dumps(card["training"].get("determinism", "(none recorded)")))
        threads = card["training"].get("determinism", {}).get("threads", 1)
        print("  here:", json.dumps(determinism.record(int(threads))))
    else:
        print("IDENTICAL")
    if not args.keep and args.workdir is None and same:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
