"""The scenario matrix: suite files under ``ops/eval/``, each scenario tagged ``tune`` or ``eval``.

A suite file (TOML) holds ``suite`` (its name, the file's stem), ``description``, ``duration_s``
and ``[[scenario]]`` tables with ``name``, ``split``, optional ``quick`` and ``duration_s``, a
simulator ``link`` table and ``flows`` (simulator ``[[flow]]`` entries: a flow without ``alg``
runs the algorithm under test, one with ``alg`` is a fixed competitor). The preferences suite adds
``prefs`` (preference vectors) and ``preference_algs``; the cellular suite is a template over the
traces of a folder (``traces_dir``, ``rtts_ms``, ``buffers_bdp``, ``[trace_split]``); the corpus
suite is a template over the trace corpus's ``tune`` and ``eval`` recordings (``corpus_dir``,
``rtts_ms``, ``buffers_bdp``, ``quick_per_kind``), its scenario names starting with the
recording's kind (the report's table groups). Every key is checked: a typo is an error naming
the file, the scenario and the fix.

The split is the rule the project's model work rests on: training, model selection and knob
tuning see ``tune`` scenarios only; ``eval`` scenarios are for reports. :func:`select` with
``purpose="selection"`` refuses anything but ``tune``.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SPLITS = ("tune", "eval")


def default_algs(models: Path | None = None) -> tuple[str, ...]:
    """The algorithms a sweep compares by default, from the registry (the one list of
    algorithms): every built-in one and every learned one with a model in ``models`` (default:
    the repository's ``models/``; ``<name>.onnx``), in registry order."""
    from .. import _native

    models = models if models is not None else repo_root() / "models"
    return tuple(n for n, kind in _native.algorithms()
                 if kind == "builtin" or (kind == "learned" and (models / f"{n}.onnx").is_file()))

#: suites in report order
SUITES = ("links", "cellular", "corpus", "fairness", "friendliness", "dynamics", "preferences")


def repo_root() -> Path:
    """The checkout the harness works in: ``$CCP_ROOT``, else the checkout this package lives
    in (an editable install), else the working directory (a ``pip install .`` run from it)."""
    env = os.environ.get("CCP_ROOT")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve().parents[3]
    return here if (here / "ops" / "eval").is_dir() else Path.cwd()


#: the repository's matrix folder
DEFAULT_DIR = repo_root() / "ops" / "eval"

_SUITE_KEYS = {"suite", "description", "duration_s", "scenario", "preference_algs", "prefs"}
_CELL_KEYS = {
    "suite", "description", "duration_s", "traces_dir", "rtts_ms", "buffers_bdp", "trace_split",
    "quick",
}
_CORPUS_KEYS = {
    "suite", "description", "duration_s", "corpus_dir", "rtts_ms", "buffers_bdp",
    "quick_per_kind", "max_mean_mbps_quick", "kinds",
}
_SCEN_KEYS = {"name", "split", "quick", "duration_s", "link", "flows", "prefs"}
_LINK_KEYS = {"rate_mbps", "trace", "trace_scale", "rate_schedule", "buffer_bdp", "buffer_pkts",
              "loss"}
_FLOW_KEYS = {"alg", "w", "rtt_ms", "start_s", "stop_s", "count"}


class MatrixError(ValueError):
    """A suite file or a selection that cannot be used; the message names the fix."""


@dataclass(frozen=True)
class Scenario:
    """One scenario of a suite: a simulator link and flows, tagged tune or eval."""

    suite: str
    name: str
    split: str
    duration_s: float
    link: dict[str, Any]
    flows: list[dict[str, Any]]
    quick: bool = False
    #: preference vectors to evaluate (preferences suite), else empty
    prefs: list[tuple[float, float, float]] = field(default_factory=list)
    #: algorithms that take ``w`` (run once per pref); others run once
    preference_algs: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.suite}/{self.name}"

    def test_flows(self) -> list[int]:
        """Indices (after ``count`` expansion) of the flows running the algorithm under test."""
        return [i for i, f in enumerate(self.expanded_flows()) if "alg" not in f]

    def expanded_flows(self) -> list[dict[str, Any]]:
        out = []
        for f in self.flows:
            n = int(f.get("count", 1))
            g = {k: v for k, v in f.items() if k != "count"}
            out.extend(dict(g) for _ in range(n))
        return out


def _err(path: Path, where: str, msg: str) -> MatrixError:
    return MatrixError(f"{path}: {where}: {msg}")


def _check_keys(path: Path, where: str, got: dict[str, Any], allowed: set[str]) -> None:
    bad = sorted(set(got) - allowed)
    if bad:
        raise _err(path, where, f"unknown key(s) {', '.join(bad)}: allowed are "
                   f"{', '.join(sorted(allowed))}")


def _num(path: Path, where: str, v: Any, lo: float, hi: float) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not (lo <= v <= hi):
        raise _err(path, where, f"is {v!r}: give a number in [{lo}, {hi}]")
    return float(v)


def _prefs(path: Path, where: str, v: Any) -> list[tuple[float, float, float]]:
    if not isinstance(v, list) or not v:
        raise _err(path, where, "give a non-empty list of [thr, lat, loss] vectors")
    out = []
    for i, w in enumerate(v):
        if (not isinstance(w, list) or len(w) != 3
                or any(isinstance(x, bool) or not isinstance(x, int | float) or not 0 <= x <= 1
                       for x in w)
                or abs(sum(w) - 1.0) > 1e-6):
            raise _err(path, f"{where}[{i}]", f"is {w!r}: three numbers in [0,1] summing to 1")
        out.append((float(w[0]), float(w[1]), float(w[2])))
    return out


def _scenario(path: Path, suite: str, dur: float, raw: dict[str, Any], i: int,
              prefs: list[tuple[float, float, float]], palgs: tuple[str, ...]) -> Scenario:
    where = f"scenario[{i}]"
    if not isinstance(raw, dict):
        raise _err(path, where, "must be a table")
    _check_keys(path, where, raw, _SCEN_KEYS)
    name = raw.get("name")
    if not isinstance(name, str) or not name or "/" in name:
        raise _err(path, f"{where}.name", "give a non-empty name without '/'")
    where = f"scenario {name!r}"
    split = raw.get("split")
    if split not in SPLITS:
        raise _err(path, f"{where}.split", f"is {split!r}: tag it \"tune\" or \"eval\"")
    link = raw.get("link")
    if not isinstance(link, dict):
        raise _err(path, f"{where}.link", "give the simulator's link table")
    _check_keys(path, f"{where}.link", link, _LINK_KEYS)
    link = dict(link)
    if "trace" in link:
        tp = Path(link["trace"])
        link["trace"] = str(tp if tp.is_absolute() else (path.parent / tp).resolve())
    flows = raw.get("flows")
    if not isinstance(flows, list) or not flows:
        raise _err(path, f"{where}.flows", "give at least one flow table")
    for j, f in enumerate(flows):
        if not isinstance(f, dict):
            raise _err(path, f"{where}.flows[{j}]", "must be a table")
        _check_keys(path, f"{where}.flows[{j}]", f, _FLOW_KEYS)
        _num(path, f"{where}.flows[{j}].rtt_ms", f.get("rtt_ms"), 0.1, 100_000)
    if not any("alg" not in f for f in flows):
        raise _err(path, f"{where}.flows", "no flow runs the algorithm under test: leave `alg` "
                   "out of at least one flow")
    sdur = _num(path, f"{where}.duration_s", raw.get("duration_s", dur), 0.1, 3600)
    sprefs = _prefs(path, f"{where}.prefs", raw["prefs"]) if "prefs" in raw else prefs
    quick = raw.get("quick", False)
    if not isinstance(quick, bool):
        raise _err(path, f"{where}.quick", "is true or false")
    return Scenario(suite, name, split, sdur, link, [dict(f) for f in flows], quick, sprefs,
                    palgs)


def _cellular(path: Path, raw: dict[str, Any], traces_dir: Path | None,
              traces_split: str) -> list[Scenario]:
    _check_keys(path, "suite", raw, _CELL_KEYS)
    dur = _num(path, "duration_s", raw.get("duration_s"), 0.1, 3600)
    rtts = raw.get("rtts_ms", [])
    bufs = raw.get("buffers_bdp", [])
    for k, v in (("rtts_ms", rtts), ("buffers_bdp", bufs)):
        if not isinstance(v, list) or not v:
            raise _err(path, k, "give a non-empty list of numbers")
        for x in v:
            _num(path, k, x, 0.01, 100_000)
    quick = set(raw.get("quick", []))
    if traces_dir is None:
        split_of = raw.get("trace_split", {})
        if not isinstance(split_of, dict):
            raise _err(path, "trace_split", "give a table of trace file name = \"tune\"|\"eval\"")
        folder = (path.parent / str(raw.get("traces_dir", ""))).resolve()
    else:
        folder = traces_dir.resolve()
        split_of = {}
        if traces_split not in SPLITS:
            raise MatrixError(f"--traces-split is {traces_split!r}: use tune or eval")
    if not folder.is_dir():
        raise _err(path, "traces_dir", f"{folder} is not a folder of traces (mahimahi files or "
                   "throughput logs)")
    files = sorted(p for p in folder.iterdir()
                   if p.is_file() and p.name != "README" and not p.name.startswith("."))
    if not files:
        raise _err(path, "traces_dir", f"{folder} holds no trace files")
    out = []
    for tf in files:
        split = split_of.get(tf.name, traces_split if traces_dir is not None else None)
        if split not in SPLITS:
            raise _err(path, "trace_split", f"trace {tf.name} has no split: add "
                       f"\"{tf.name}\" = \"tune\" or \"eval\" to [trace_split]")
        for r in rtts:
            for b in bufs:
                name = f"{tf.name}-{r:g}ms-{b:g}bdp"
                out.append(Scenario("cellular", name, split, dur,
                                    {"trace": str(tf), "buffer_bdp": float(b)},
                                    [{"rtt_ms": float(r)}], name in quick))
    unknown = set(split_of) - {f.name for f in files}
    if unknown:
        raise _err(path, "trace_split", f"names traces not in {folder}: "
                   f"{', '.join(sorted(unknown))}")
    return out


def _numbers(path: Path, raw: dict[str, Any], key: str) -> list[float]:
    v = raw.get(key, [])
    if not isinstance(v, list) or not v:
        raise _err(path, key, "give a non-empty list of numbers")
    return [_num(path, key, x, 0.01, 100_000) for x in v]


def _corpus(path: Path, raw: dict[str, Any]) -> list[Scenario]:
    """One flow over each ``tune`` and ``eval`` recording of the corpus (its ``split.csv``), at
    each RTT and buffer; ``quick``: per report kind and split, the ``quick_per_kind``
    recordings first in the corpus's hash order whose mean is at most ``max_mean_mbps_quick``,
    at the first RTT and buffer. ``kinds``: only the recordings of these report kinds (e.g. a
    selection run's ``["cellular", "5g"]``)."""
    from .. import corpus

    _check_keys(path, "suite", raw, _CORPUS_KEYS)
    dur = _num(path, "duration_s", raw.get("duration_s"), 0.1, 3600)
    rtts = _numbers(path, raw, "rtts_ms")
    bufs = _numbers(path, raw, "buffers_bdp")
    nq = int(_num(path, "quick_per_kind", raw.get("quick_per_kind", 1), 0, 1000))
    qmax = _num(path, "max_mean_mbps_quick", raw.get("max_mean_mbps_quick", 1e6), 0.001, 1e6)
    folder = (path.parent / str(raw.get("corpus_dir", ""))).resolve()
    try:
        traces = [t for t in corpus.load(folder) if t.split in SPLITS]
    except corpus.CorpusError as e:
        raise _err(path, "corpus_dir", str(e)) from e
    if "kinds" in raw:
        have = sorted({t.report_kind for t in traces})
        kinds = raw["kinds"]
        if not isinstance(kinds, list) or not kinds or any(k not in have for k in kinds):
            raise _err(path, "kinds", f"is {kinds!r}: give a list of report kinds from {have}")
        traces = [t for t in traces if t.report_kind in kinds]
    quick: set[str] = set()
    for kind in sorted({t.report_kind for t in traces}):
        for split in SPLITS:
            cands = sorted((t for t in traces if t.report_kind == kind and t.split == split
                            and t.mean_mbps <= qmax), key=lambda t: corpus._h("quick|" + t.path))
            quick.update(t.path for t in cands[:nq])
    out = []
    for t in traces:
        for i, r in enumerate(rtts):
            for j, b in enumerate(bufs):
                name = f"{t.report_kind}-{t.name}-{r:g}ms-{b:g}bdp"
                out.append(Scenario("corpus", name, t.split, dur,
                                    {"trace": str(t.file), "buffer_bdp": float(b)},
                                    [{"rtt_ms": float(r)}],
                                    t.path in quick and i == 0 and j == 0))
    return out


def load_suite(path: Path, traces_dir: Path | None = None,
               traces_split: str = "eval") -> list[Scenario]:
    """Read and check one suite file."""
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as e:
        raise MatrixError(f"cannot read suite file {path}: {e}") from e
    except tomllib.TOMLDecodeError as e:
        raise MatrixError(f"{path}: not valid TOML: {e}") from e
    suite = raw.get("suite")
    if suite != path.stem:
        raise _err(path, "suite", f"is {suite!r}: it must equal the file name ({path.stem!r})")
    if suite == "cellular":
        return _cellular(path, raw, traces_dir, traces_split)
    if suite == "corpus":
        return _corpus(path, raw)
    _check_keys(path, "suite", raw, _SUITE_KEYS)
    dur = _num(path, "duration_s", raw.get("duration_s"), 0.1, 3600)
    prefs = _prefs(path, "prefs", raw["prefs"]) if "prefs" in raw else []
    if "preference_algs" in raw:
        palgs = raw["preference_algs"]
        if not isinstance(palgs, list) or not all(isinstance(a, str) for a in palgs):
            raise _err(path, "preference_algs", "give a list of algorithm names")
    else:
        # from the registry: the learned algorithms whose observation holds `w`, and auto
        from .runner import preference_algs

        palgs = list(preference_algs()) if prefs else []
    scen = raw.get("scenario", [])
    if not isinstance(scen, list) or not scen:
        raise _err(path, "scenario", "no [[scenario]] tables")
    out = [_scenario(path, suite, dur, s, i, prefs, tuple(palgs)) for i, s in enumerate(scen)]
    names = [s.name for s in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise _err(path, "scenario", f"duplicate names {', '.join(dup)}: names must be unique")
    return out


def load_matrix(folder: Path = DEFAULT_DIR, suites: list[str] | None = None,
                traces_dir: Path | None = None, traces_split: str = "eval") -> list[Scenario]:
    """Every scenario of the named suites (default: all six) in ``folder``."""
    names = list(SUITES) if not suites else suites
    out: list[Scenario] = []
    for s in names:
        if s not in SUITES:
            raise MatrixError(f"unknown suite {s!r}: use one of {', '.join(SUITES)}")
        p = folder / f"{s}.toml"
        if not p.is_file():
            raise MatrixError(f"suite file {p} is missing (suites live in ops/eval/)")
        out.extend(load_suite(p, traces_dir if s == "cellular" else None, traces_split))
    return out


def select(scenarios: list[Scenario], split: str, *, quick: bool = False,
           purpose: str = "report") -> list[Scenario]:
    """The scenarios of one split (``quick``: only those marked quick).

    ``purpose="selection"`` is what training, model selection and knob tuning call: it refuses
    the ``eval`` split, so an acceptance figure can never choose a model.
    """
    if split not in SPLITS:
        raise MatrixError(f"split {split!r}: use tune or eval")
    if purpose not in ("report", "selection"):
        raise MatrixError(f"purpose {purpose!r}: use report or selection")
    if purpose == "selection" and split != "tune":
        raise MatrixError("training, model selection and knob tuning may use `tune` scenarios "
                          "only; `eval` is for reporting (see ops/eval/README.md)")
    out = [s for s in scenarios if s.split == split and (s.quick or not quick)]
    return out


def comma_list(s: str) -> list[str]:
    """A command-line list: ``"a, b,,c"`` -> ``["a", "b", "c"]``."""
    return [x.strip() for x in s.split(",") if x.strip()]
