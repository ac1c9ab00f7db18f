"""The trace corpus: its catalogue, its one train / tune / eval split, and drawing from it.

The corpus lives in ``datapath/sim/scenarios/traces/corpus/`` (584 public recordings and their
provenance in ``catalogue.csv``; ``README.md`` there). This module holds the **split rule**
(``docs/corpus.md`` states it in words; it was fixed before any result on the corpus was seen)
and writes its outcome to ``split.csv`` beside the catalogue, which the harness and the trainers
read. ``python -m ccp_train.corpus split`` recomputes the file; a test checks that it matches.

The rule, in order (the first that applies decides):

1. Recordings a shipped model was trained on (:data:`TRAINED_ON`) are ``train``.
2. Held-out collections (:data:`HELD_OUT`) go whole to ``eval``: per kind at least one
   collection no training episode has seen, so ``eval`` measures generalisation across
   collections, not only across recordings.
3. Synthetic traces are ``train`` (they are not recordings).
4. Every other recording belongs to a *group* (:func:`group_of`: the uplink and downlink of one
   run, the WiFi and cellular of one walk stay together); within each kind the groups are
   ordered by ``sha256(SALT | group)`` and the first 15 % (rounded up) go to ``eval``, the next
   15 % (rounded up) to ``tune``, the rest to ``train``. A group met again under another kind
   keeps its first split (kinds are visited in :data:`KINDS` order).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import math
import random
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .harness.matrix import repo_root

#: the corpus folder in the repository
CORPUS_DIR = repo_root() / "datapath" / "sim" / "scenarios" / "traces" / "corpus"
CATALOGUE = CORPUS_DIR / "catalogue.csv"
SPLIT_FILE = CORPUS_DIR / "split.csv"
#: kinds, in the order the rule visits them (and reports them)
KINDS = ("wifi", "cellular-3g", "cellular-lte", "5g", "satellite-leo", "wired-broadband",
         "synthetic")
SPLITS = ("train", "tune", "eval")
#: the split's salt: changing it is changing the split
SALT = "ccp-corpus-split-v1"
EVAL_SHARE = 0.15
TUNE_SHARE = 0.15
#: collections (``collection_of``) held out whole for ``eval``, and why each
HELD_OUT: Mapping[str, str] = {
    "cellular-traces-2018": "3G and LTE, New York 2018 (C2TCP): another city, year and tool "
                            "than the training 3G/LTE",
    "mahimahi-orange-pr152": "LTE, Orange France 2022: another operator and country",
    "irish-5g": "5G mid-band, Ireland (G-NetTrack): another country and band than Lumos5G "
                "and 5Gophers' mmWave",
    "leocc-starlink": "Starlink, LeoReplayer (LeoCC): another recorder than the Autobahn logs",
}
#: recordings the shipped models (MOCC, Owl) were trained on: they must never be tune or eval
TRAINED_ON = ("../ATT-LTE-driving-2016.down", "../TMobile-UMTS-driving.down")
#: the kinds a trainer draws by default, and their weights (a kind with no train recording
#: is dropped); the harness reports these kinds too
DEFAULT_KIND_WEIGHTS: Mapping[str, float] = {
    "cellular-3g": 1.0, "cellular-lte": 1.0, "5g": 1.0, "wifi": 1.0, "satellite-leo": 1.0,
    "wired-broadband": 1.0,
}
#: the harness's table rows: kinds merged for reporting
REPORT_KIND = {"cellular-3g": "cellular", "cellular-lte": "cellular", "5g": "5g",
               "wifi": "wifi", "satellite-leo": "leo", "wired-broadband": "broadband",
               "synthetic": "synthetic"}


class CorpusError(ValueError):
    """A catalogue, split file or selection that cannot be used; the message names the fix."""


@dataclass(frozen=True)
class Trace:
    """One recording of the catalogue."""

    path: str            # relative to the corpus folder, as the catalogue writes it
    format: str          # "mahimahi" or "tput"
    kind: str
    direction: str
    duration_s: float
    mean_mbps: float
    cv: float
    outage_frac: float
    license: str
    split: str = ""
    #: the corpus folder the path is relative to
    root: str = str(CORPUS_DIR)

    @property
    def file(self) -> Path:
        return (Path(self.root) / self.path).resolve()

    @property
    def report_kind(self) -> str:
        """The harness's table for this kind (3G and LTE share "cellular")."""
        return REPORT_KIND[self.kind]

    @property
    def collection(self) -> str:
        return collection_of(self.path)

    @property
    def name(self) -> str:
        """A name unique in the corpus, usable in a scenario name (no ``/``)."""
        return f"{self.collection}:{self.path.rsplit('/', 1)[-1]}"


def collection_of(path: str) -> str:
    """The collection a catalogue path belongs to: its top folder (the five traces one folder
    up are the mahimahi project's, as ``mahimahi/`` is)."""
    if path.startswith("../"):
        return "mahimahi"
    return path.split("/", 1)[0]


def group_of(path: str) -> str:
    """Recordings that must share a split: one run's uplink and downlink, one walk's WiFi and
    cellular, one drive's devices."""
    col = collection_of(path)
    stem = path.rsplit("/", 1)[-1]
    if col == "multipath-wireless":          # 11_2_wifi.csv.tput: walk 11_2
        return f"{col}/" + "_".join(stem.split("_")[:2])
    if col == "starlink-autobahn":           # seg00_<time>.down.tput
        return f"{col}/" + stem.split(".")[0]
    if col in ("mahimahi", "cellular-traces-2018", "mahimahi-orange-pr152"):
        s = re.sub(r"\.(down|up)$", "", stem)
        s = re.sub(r"^(downlink|uplink)-", "", s)
        s = s.replace("-up.pps", "").replace("-down.pps", "")
        return f"{col}/{s}"
    if col == "irish-5g":
        return f"{col}/" + re.sub(r"\.(dl|ul)\.tput$", "", stem)
    if col == "sigcomm21-5g-lumos":          # 4g_trace_walking_50192_a: run 50192
        return f"{col}/" + re.sub(r"_[a-z]$", "", stem)
    return path


def _h(group: str) -> str:
    return hashlib.sha256(f"{SALT}|{group}".encode()).hexdigest()


def read_catalogue(path: Path = CATALOGUE) -> list[Trace]:
    """The catalogue's rows (no split); paths relative to the catalogue's folder."""
    try:
        with path.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
    except OSError as e:
        raise CorpusError(f"cannot read the corpus catalogue {path}: {e}") from e
    out = []
    for i, r in enumerate(rows, start=2):
        try:
            out.append(Trace(r["path"], r["format"], r["kind"], r["direction"],
                             float(r["duration_s"]), float(r["mean_mbps"]), float(r["cv"]),
                             float(r["outage_frac"]), r["license"], "",
                             str(path.parent.resolve())))
        except (KeyError, ValueError) as e:
            raise CorpusError(f"{path}: line {i}: {e!r}: not a catalogue row") from e
        if out[-1].kind not in KINDS:
            raise CorpusError(f"{path}: line {i}: unknown kind {out[-1].kind!r}")
    return out


def compute_split(traces: Sequence[Trace]) -> dict[str, str]:
    """The rule of the module header: catalogue path -> split."""
    out: dict[str, str] = {}
    for t in traces:
        if t.path in TRAINED_ON:
            out[t.path] = "train"
        elif t.collection in HELD_OUT:
            out[t.path] = "eval"
        elif t.kind == "synthetic":
            out[t.path] = "train"
    of_group: dict[str, str] = {}
    for kind in KINDS:
        groups = sorted({group_of(t.path) for t in traces
                         if t.kind == kind and t.path not in out and group_of(t.path)
                         not in of_group}, key=_h)
        n_eval = math.ceil(EVAL_SHARE * len(groups))
        n_tune = math.ceil(TUNE_SHARE * len(groups))
        for i, g in enumerate(groups):
            of_group[g] = "eval" if i < n_eval else "tune" if i < n_eval + n_tune else "train"
        for t in traces:
            if t.kind == kind and t.path not in out:
                out[t.path] = of_group[group_of(t.path)]
    return out


def write_split(path: Path = SPLIT_FILE) -> dict[str, str]:
    split = compute_split(read_catalogue())
    with path.open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["path", "split"])
        for p in sorted(split):
            w.writerow([p, split[p]])
    return split


def load(root: Path = CORPUS_DIR) -> list[Trace]:
    """Every catalogued trace of the corpus in ``root`` with its split (its ``split.csv``)."""
    traces = read_catalogue(root / CATALOGUE.name)
    split_file = root / SPLIT_FILE.name
    try:
        with split_file.open(newline="") as fh:
            split = {r["path"]: r["split"] for r in csv.DictReader(fh)}
    except (OSError, KeyError) as e:
        raise CorpusError(f"cannot read the corpus split {split_file}: {e} (recompute it with "
                          "`python -m ccp_train.corpus split`)") from e
    out = []
    for t in traces:
        s = split.get(t.path)
        if s not in SPLITS:
            raise CorpusError(f"{split_file}: {t.path} has no split (is {s!r}): recompute it "
                              "with `python -m ccp_train.corpus split`")
        out.append(Trace(**{**t.__dict__, "split": s}))
    return out


def select(split: str, kinds: Sequence[str] | None = None) -> list[Trace]:
    """The traces of one split (and of the given kinds)."""
    if split not in SPLITS:
        raise CorpusError(f"split {split!r}: use one of {', '.join(SPLITS)}")
    bad = sorted(set(kinds or ()) - set(KINDS))
    if bad:
        raise CorpusError(f"unknown kind(s) {', '.join(bad)}: use {', '.join(KINDS)}")
    return [t for t in load() if t.split == split and (kinds is None or t.kind in kinds)]


def parse_kind_weights(text: str) -> dict[str, float]:
    """``kind=weight,...`` (a trainer's ``--trace-kinds``): weights >= 0, at least one > 0."""
    out: dict[str, float] = {}
    for part in filter(None, (x.strip() for x in text.split(","))):
        k, sep, v = part.partition("=")
        if not sep:
            raise CorpusError(f"{part!r}: give kind=weight, e.g. cellular-lte=2")
        k = k.strip()
        if k not in KINDS:
            raise CorpusError(f"unknown kind {k!r}: use {', '.join(KINDS)}")
        try:
            w = float(v)
        except ValueError as e:
            raise CorpusError(f"{part!r}: the weight is not a number") from e
        if not (math.isfinite(w) and w >= 0):
            raise CorpusError(f"{part!r}: a weight is a finite number >= 0")
        out[k] = w
    if not any(w > 0 for w in out.values()):
        raise CorpusError("give at least one kind a weight above 0")
    return out


@dataclass(frozen=True)
class TraceDraw:
    """Draws training traces from the ``train`` split by kind weight, then uniformly within
    the kind. Refuses anything that is not ``train`` (the guard the tests check)."""

    weights: tuple[tuple[str, float], ...]
    files: tuple[tuple[str, tuple[str, ...]], ...]   # kind -> absolute paths

    @classmethod
    def from_train_split(cls, weights: Mapping[str, float]) -> TraceDraw:
        by_kind: dict[str, list[str]] = {}
        for t in select("train"):
            by_kind.setdefault(t.kind, []).append(str(t.file))
        w = tuple((k, float(v)) for k, v in weights.items() if v > 0 and by_kind.get(k))
        if not w:
            raise CorpusError(f"no train recordings of the kinds {', '.join(weights)}")
        return cls(w, tuple((k, tuple(sorted(by_kind[k]))) for k, _ in w))

    def all_files(self) -> list[str]:
        return [f for _, fs in self.files for f in fs]

    def draw(self, rng: random.Random) -> str:
        kinds = [k for k, _ in self.weights]
        k = rng.choices(kinds, weights=[w for _, w in self.weights])[0]
        return rng.choice(dict(self.files)[k])

    def describe(self) -> dict:
        return {"source": "corpus train split", "kind_weights": dict(self.weights),
                "recordings": {k: len(fs) for k, fs in self.files}}


def check_training_traces(paths: Sequence[str]) -> None:
    """Refuse a training trace that the corpus tags ``tune`` or ``eval`` (by file identity)."""
    held = {t.file: t for t in load() if t.split != "train"}
    for p in paths:
        t = held.get(Path(p).resolve())
        if t is not None:
            raise CorpusError(f"{p} is a corpus `{t.split}` trace: training sees the `train` "
                              "split only (docs/corpus.md)")


def summary() -> str:
    """Recordings per kind and split, as a Markdown table."""
    ts = load()
    lines = ["| kind | train | tune | eval | eval-only collections |", "|---|---:|---:|---:|---|"]
    for k in KINDS:
        c = {s: sum(1 for t in ts if t.kind == k and t.split == s) for s in SPLITS}
        held = sorted({t.collection for t in ts if t.kind == k and t.collection in HELD_OUT})
        lines.append(f"| {k} | {c['train']} | {c['tune']} | {c['eval']} | "
                     f"{', '.join(held) or '—'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ccp_train.corpus",
                                description="The trace corpus's split (docs/corpus.md).")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("split", help=f"recompute {SPLIT_FILE.name} from the catalogue and the rule")
    sub.add_parser("summary", help="recordings per kind and split")
    args = p.parse_args(argv)
    try:
        if args.cmd == "split":
            s = write_split()
            print(f"wrote {SPLIT_FILE} ({len(s)} recordings)")
        print(summary(), end="")
    except CorpusError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
