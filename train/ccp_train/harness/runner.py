"""Runs: one (scenario, algorithm, seed[, w]) through ``ccp-agent --sim``, locally in parallel or on
a Ray cluster.

Each run writes the simulator scenario it ran (TOML) and its 100 ms series (CSV) under
``OUT/runs/`` and returns one record (a line of ``results.jsonl``). What a seed changes: the
simulator's seed (random loss), every flow's start by up to 100 ms, and on a trace link the
point of the trace's period the run starts at (seed 1 starts at the trace's beginning). All of it
is derived from the scenario's key and the seed, so a run is reproducible and identical locally
and on Ray.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .matrix import Scenario, repo_root
from .metrics import Series, run_metrics

#: the repository root (the agent binary and models are found relative to it by default)
ROOT = repo_root()
#: the name under which the agent chooses each flow's algorithm from models/portfolio.json
AUTO = "auto"
#: longest a single run may take (s)
RUN_TIMEOUT_S = 600.0
#: ``ALG+stats`` runs ALG with the bottleneck exporting in-network statistics (``[netstats]``:
#: PNC/PNA every second, the whole path known), Owl's unmasked case; ``ALG`` alone runs with
#: none (masked). The records and tables keep the suffix.
STATS_SUFFIX = "+stats"
#: ``ALG+rx`` runs ALG with its law at the receiver (the flows under test get
#: ``receiver = "nuwa"``: the advertised window from the one-way delay, the paper's
#: deployment); ``ALG`` alone is the sender-side form the kernel runs. Only for Nuwa.
RX_SUFFIX = "+rx"
#: ``ALG+rxk``: the same with the receiver's one-way delay Kalman-filtered
#: (``receiver = "nuwa_kalman"``, the paper's extended version)
RXK_SUFFIX = "+rxk"


@functools.lru_cache(maxsize=1)
def git_rev() -> str:
    """The repository's commit (short), for provenance; "" outside a git checkout."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def rx_algs() -> tuple[str, ...]:
    """The algorithms a receiver-side law exists for (the simulator's receivers)."""
    from .. import _native

    return tuple(sorted({alg for alg, _ in _native.receiver_forms()}))


@functools.lru_cache(maxsize=1)
def preference_algs() -> tuple[str, ...]:
    """The algorithms that take a preference ``w``: every learned algorithm whose observation
    has a ``w`` slice (its ``spec()['layout']``, from the registry), and ``auto`` (the portfolio
    chooses by ``w``)."""
    from .. import _native

    takes_w = tuple(a for a in _native.learned_algorithms()
                    if "w" in _native.spec(a)["layout"])
    return (*takes_w, AUTO)


def _rx_suffix(alg: str) -> str | None:
    return next((s for s in (RXK_SUFFIX, RX_SUFFIX) if alg.endswith(s)), None)


def base_alg(alg: str) -> str:
    """The agent's algorithm of a sweep's algorithm name (``owl+stats`` -> ``owl``,
    ``nuwa+rx`` -> ``nuwa``)."""
    sfx = _rx_suffix(alg)
    return alg.removesuffix(sfx) if sfx else alg.removesuffix(STATS_SUFFIX)


def receiver_of(alg: str) -> str | None:
    """The simulator's ``receiver`` for the flows under test of a sweep name, if any."""
    sfx = _rx_suffix(alg)
    if sfx is None:
        return None
    return base_alg(alg) + ("_kalman" if sfx == RXK_SUFFIX else "")


def check_alg_variant(alg: str) -> None:
    """Refuse a sweep name whose variant does not exist (``cubic+rx``), naming the fix."""
    sfx = _rx_suffix(alg)
    if sfx and base_alg(alg) not in rx_algs():
        raise ValueError(f"{alg!r}: only {', '.join(a + sfx for a in rx_algs())} has a "
                         f"receiver-side form; drop the {sfx} suffix")


@dataclass(frozen=True)
class RunSpec:
    """One run of the sweep."""

    scenario: Scenario
    alg: str
    seed: int
    #: the preference the flows under test carry (preference algorithms in the preferences
    #: suite); None: the agent's default
    w: tuple[float, float, float] | None = None
    agent: str = str(ROOT / "target" / "release" / "ccp-agent")
    models: str = str(ROOT / "models")
    config: str | None = None
    extra_args: tuple[str, ...] = field(default_factory=tuple)

    @property
    def run_id(self) -> str:
        w = "" if self.w is None else "-w" + "_".join(f"{x:g}" for x in self.w)
        return f"{self.scenario.suite}--{self.scenario.name}--{self.alg}{w}--s{self.seed}"


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        if not math.isfinite(float(v)):
            raise ValueError(f"non-finite number {v} in a scenario")
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise ValueError(f"cannot write {v!r} as TOML")


@functools.lru_cache(maxsize=32)
def _trace_times(path: str) -> tuple[int, ...]:
    """A trace's timestamps, parsed once per process (every seed of every run reuses them)."""
    return tuple(int(x) for x in Path(path).read_text().split())


def is_log(path: Path) -> bool:
    """Whether a trace file is a throughput log (``time_s rate_mbps``) rather than a mahimahi
    file: the simulator's own rule (a ``.tput`` suffix, else two numbers on the first line that
    is neither empty nor a comment)."""
    if path.suffix == ".tput":
        return True
    with path.open() as fh:
        for line in fh:
            s = line.strip()
            if s and not s.startswith("#"):
                return len(s.split()) == 2
    return False


@functools.lru_cache(maxsize=64)
def _log_samples(path: str) -> tuple[tuple[tuple[float, str], ...], float]:
    """A throughput log's samples (time from the first, the rate as written; a later sample
    at the same time replaces the earlier) and its period (the simulator's: the last sample
    holds for the median interval, 1 s alone)."""
    rows: list[tuple[float, str]] = []
    for line in Path(path).read_text().splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        t, r = s.split()
        if rows and float(t) == rows[-1][0]:
            rows[-1] = (float(t), r)
        else:
            rows.append((float(t), r))
    t0 = rows[0][0]
    gaps = sorted(b[0] - a[0] for a, b in zip(rows, rows[1:], strict=False))
    hold = gaps[len(gaps) // 2] if gaps else 1.0
    return tuple((t - t0, r) for t, r in rows), rows[-1][0] - t0 + hold


def _rotated_log(path: Path, frac: float, cache: Path) -> Path:
    """A throughput log started ``frac`` of its period later, at the sample nearest that point
    (every rate and interval kept, but the one before the cut, which holds the median
    interval)."""
    samples, period = _log_samples(str(path.resolve()))
    k = min(range(len(samples)), key=lambda i: abs(samples[i][0] - frac * period))
    off = samples[k][0]
    if off <= 0:
        return path
    digest = hashlib.sha256(f"{path.resolve()}|{off}".encode()).hexdigest()[:12]
    out = cache / f"{path.name}.{off:g}s.{digest}.tput"
    if out.exists():
        return out
    rows = samples[k:] + tuple((t + period, r) for t, r in samples[:k])
    _write_once(out, "".join(f"{t - off:.6f} {r}\n" for t, r in rows))
    return out


def _write_once(out: Path, text: str) -> None:
    """Write a cache file atomically. Runs in threads of one process (``--jobs``) and in other
    processes may write the same file at once: each writes its own temporary file, and the
    last rename wins with the same content."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def rotated_trace(path: Path, frac: float, cache: Path) -> Path:
    """The trace ``path`` started ``frac`` of its period later (same period and
    opportunities; a throughput log: :func:`_rotated_log`); written once into ``cache``."""
    if frac <= 0.0:
        return path
    if is_log(path):
        return _rotated_log(path, frac, cache)
    times = _trace_times(str(path.resolve()))
    period = times[-1]
    # start at an opportunity (so the rotated file's last timestamp is the period again)
    k = min(range(len(times)), key=lambda i: abs(times[i] - frac * period))
    off = times[k]
    if off <= 0 or off >= period:
        return path
    digest = hashlib.sha256(f"{path.resolve()}|{off}".encode()).hexdigest()[:12]
    out = cache / f"{path.name}.{off}ms.{digest}"
    if out.exists():
        return out
    new = sorted((t - off) % period or period for t in times)
    _write_once(out, "\n".join(str(t) for t in new) + "\n")
    return out


def scenario_toml(spec: RunSpec, trace_cache: Path) -> str:
    """The simulator scenario of one run."""
    sc = spec.scenario
    rng = random.Random(f"{sc.key}|{spec.seed}")
    lines = [f"duration_s = {_toml_value(sc.duration_s)}", f"seed = {spec.seed}", "[link]"]
    link = dict(sc.link)
    if "trace" in link:
        frac = 0.0 if spec.seed == 1 else rng.random()
        link["trace"] = str(rotated_trace(Path(link["trace"]), frac, trace_cache))
    for k, v in link.items():
        lines.append(f"{k} = {_toml_value(v)}")
    for f in sc.flows:
        g = dict(f)
        start = float(g.get("start_s", 0.0)) + rng.uniform(0.0, 0.1)
        stop = g.get("stop_s")
        g["start_s"] = min(start, (float(stop) if stop is not None else sc.duration_s) - 0.01)
        if "alg" not in g:
            g["alg"] = base_alg(spec.alg)
            if spec.w is not None and "w" not in g:
                g["w"] = list(spec.w)
            rx = receiver_of(spec.alg)
            if rx is not None:
                g["receiver"] = rx
        lines.append("[[flow]]")
        for k, v in g.items():
            lines.append(f"{k} = {_toml_value(v)}")
    if spec.alg.endswith(STATS_SUFFIX):
        lines += ["[netstats]", "period_s = 1.0", "known_share = 1.0"]
    return "\n".join(lines) + "\n"


def read_series(path: Path) -> dict[int, Series]:
    """The agent's ``--csv`` file as one :class:`Series` per flow."""
    t: dict[int, list[float]] = {}
    x: dict[int, list[float]] = {}
    with path.open() as fh:
        for row in csv.DictReader(fh):
            i = int(row["flow"])
            t.setdefault(i, []).append(float(row["t_s"]))
            v = row["throughput_mbps"]
            x.setdefault(i, []).append(float(v) if v else 0.0)
    return {i: Series(t[i], x[i]) for i in t}


def run_one(spec: RunSpec, out: str) -> dict:
    """Run one spec; never raises: a failure is a record with ``error``."""
    outp = Path(out).resolve()  # trace copies are referenced from the run's scenario file
    runs = outp / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    sc = spec.scenario
    rec: dict = {
        "run_id": spec.run_id, "suite": sc.suite, "scenario": sc.name, "split": sc.split,
        "alg": spec.alg, "seed": spec.seed, "w": list(spec.w) if spec.w else None,
    }
    t0 = time.monotonic()
    try:
        toml_path = runs / f"{spec.run_id}.toml"
        csv_path = runs / f"{spec.run_id}.csv"
        toml_path.write_text(scenario_toml(spec, outp / "traces"))
        cmd = [spec.agent, "--sim", str(toml_path), "--json", "--csv", str(csv_path),
               "--alg", base_alg(spec.alg), "--models", spec.models, *spec.extra_args]
        if spec.config:
            cmd += ["--config", spec.config]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                           check=False)
        if p.returncode != 0:
            raise RuntimeError(f"ccp-agent exited {p.returncode}: "
                               f"{p.stderr.strip()[-800:] or p.stdout.strip()[-800:]}")
        summary = json.loads(p.stdout)
        test = sc.test_flows()
        for i in test:
            got = summary["flows"][i]["alg"]
            if spec.alg == AUTO:
                # the agent chose from its portfolio table: record what it chose
                rec.setdefault("chosen", []).append(got)
            elif got != base_alg(spec.alg):
                raise RuntimeError(f"flow {i} ran {got!r}, not {base_alg(spec.alg)!r} (is the "
                                   "model missing?)")
        series = read_series(csv_path)
        prefs = sc.prefs if (sc.prefs and spec.w is None) else ()
        rec["metrics"] = run_metrics(summary, series, sc.link, test, sc.duration_s, prefs)
        rec["flows"] = summary["flows"]
        rec["sim_packets"] = summary["sim_packets"]
        rec["sim_wall_s"] = summary["wall_s"]
    except (OSError, ValueError, RuntimeError, KeyError, IndexError, TypeError,
            subprocess.TimeoutExpired) as e:
        rec["error"] = f"{type(e).__name__}: {e}"
    rec["wall_s"] = time.monotonic() - t0
    return rec


def expand(scenarios: Iterable[Scenario], algs: list[str], seeds: list[int],
           landmarks: Sequence[tuple[float, float, float]] = (),
           w_algs: Sequence[str] = (), **kw: object) -> list[RunSpec]:
    """Every run of a sweep: each scenario × algorithm × seed, and × preference for the
    preference algorithms of a scenario with ``prefs``; in the other scenarios, × each of
    ``landmarks`` for the algorithms in ``w_algs`` (the harness's ``--w``)."""
    out = []
    for sc in scenarios:
        for alg in algs:
            ws: list[tuple[float, float, float] | None] = [None]
            if sc.prefs and alg in sc.preference_algs:
                ws = list(sc.prefs)
            elif landmarks and alg in w_algs:
                ws = list(landmarks)
            for w in ws:
                for s in seeds:
                    out.append(RunSpec(sc, alg, s, w, **kw))  # type: ignore[arg-type]
    return out


def _progress(total: int) -> Callable[[], None]:
    try:
        from tqdm import tqdm

        bar = tqdm(total=total, unit="run", file=sys.stderr, dynamic_ncols=True,
                   disable=None)
        return lambda: bar.update(1)
    except ImportError:  # pragma: no cover - tqdm is in requirements.txt
        done = [0]

        def tick() -> None:
            done[0] += 1
            print(f"\r{done[0]}/{total} runs", end="", file=sys.stderr)
        return tick


def run_local(specs: list[RunSpec], out: str, jobs: int) -> list[dict]:
    """Run specs over ``jobs`` worker threads (each drives an agent process)."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    tick = _progress(len(specs))
    recs = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        futs = [ex.submit(run_one, s, out) for s in specs]
        for f in as_completed(futs):
            recs.append(f.result())
            tick()
    return recs


def run_ray(specs: list[RunSpec], out: str, address: str) -> list[dict]:
    """Run specs as Ray tasks (one CPU each) on the cluster at ``address`` (``local`` starts
    one on this machine). Every node needs this package and the agent binary at the same
    path, and ``out`` on a shared file system (or the records only come back)."""
    try:
        import ray
    except ImportError as e:
        raise RuntimeError("--ray needs the `ray` package (pip install ray)") from e
    if address == "local":
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    else:
        ray.init(address=address, log_to_driver=False)
    try:
        task = ray.remote(num_cpus=1)(run_one)
        pending = [task.remote(s, out) for s in specs]
        tick = _progress(len(specs))
        recs = []
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            recs.extend(ray.get(done))
            tick()
        return recs
    finally:
        ray.shutdown()
