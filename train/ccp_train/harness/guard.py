"""The regression guard: each shipped model against the figures recorded in its card.

```
python -m ccp_train.harness.guard --out target/guard            # CI (ops/test.sh): check
python -m ccp_train.harness.guard --record --out /tmp/g          # record into the cards
python -m ccp_train.harness.guard --algs mocc --suites links --seeds 1 --models DIR --out /tmp/g
```

**What is guarded.** Every model in ``--models`` (default ``models/``): each card
``<alg>.json`` next to its ``model_file``, and ``portfolio.json`` (the table ``ccp_auto``
chooses from, guarded as the harness algorithm ``auto``, in the preferences suite only, where
its choice depends on ``w``). The scenarios are the ``tune`` split (:data:`SUITES`; the
corpus suite: only its recordings marked quick, one per kind): training, selection and knob
tuning see ``tune`` only (``ops/eval/README.md``), and a guard's bound is a threshold, which
the ``eval`` split must never set. Per scenario group (a suite; the corpus by kind,
friendliness by competitor, dynamics by kind: the harness report's tables) and seed, each
metric of :data:`METRICS` is the mean over the group's scenarios (and preferences), as in the
report.

**Recording.** ``--record`` runs seeds 1..5 (``--seeds``) and writes, per group and metric,
the per-seed values, their mean and sample standard deviation into the card's
``evaluation.guard`` (``portfolio.json``: its ``evaluation.guard``), with the scenarios, the
command, the commit and the model's sha256. A card written by training has no such section:
the guard fails on it until the figures are recorded (a deliberate step, seen in the card's
diff). Figures are never edited by hand.

**The rule** (fixed before any figure was recorded; not tuned to what passes). A check runs
seeds 1..N (default 2) and compares the mean over those seeds with the recorded mean over the
*same* seeds (so the shipped model on unchanged code reproduces its figure exactly). The
margin is

    margin = max(K * sd, REL * |recorded|, ABS[metric])      K = 3, REL = 0.05

where ``sd`` is the recorded per-seed standard deviation (over all recorded seeds). A metric
where more is better fails below ``recorded - margin``, one where less is better above
``recorded + margin``; the friendliness share (neither better) fails outside
``recorded ± margin``. It also fails, rather than passes, when a run fails, when a model has
no recorded figures, when a recorded group or metric has no finite measurement, when the
recorded seeds do not cover the check's, or when a group's scenarios differ from the recorded
ones (the matrix changed: record again). Exit codes: 0 every check passed, 1 some check
failed (each named: model, scenario group, metric, figure, bound), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from .matrix import DEFAULT_DIR, MatrixError, Scenario, comma_list, load_matrix, select
from .report import _group, rows
from .runner import AUTO, ROOT, expand, git_rev, run_local

#: the suites a model is guarded in (``auto``: only ``preferences``)
SUITES = ("links", "cellular", "corpus", "fairness", "friendliness", "dynamics", "preferences")
#: per suite, the guarded metrics and which way is better ("max", "min", or "both": a move
#: either way is a regression): the figures the README's tables report
METRICS: dict[str, tuple[tuple[str, str], ...]] = {
    "links": (("utilization", "max"), ("queue_delay_p95_ms", "min"), ("loss_rate", "min")),
    "cellular": (("throughput_mbps", "max"), ("queue_delay_p95_ms", "min")),
    "corpus": (("utilization", "max"), ("queue_delay_p95_ms", "min")),
    "fairness": (("jain_mean", "max"), ("utilization", "max")),
    "friendliness": (("share", "both"),),
    "dynamics": (("utilization", "max"),),
    "preferences": (("utility", "max"),),
}
#: margin: K recorded seed standard deviations ...
K = 3.0
#: ... at least REL of the recorded figure ...
REL = 0.05
#: ... and at least this much in the metric's unit
ABS: dict[str, float] = {
    "utilization": 0.01, "jain_mean": 0.01, "share": 0.01, "utility": 0.01,
    "queue_delay_p95_ms": 2.0, "throughput_mbps": 0.1, "loss_rate": 0.002,
}
#: seeds a recording runs by default, and a check
RECORD_SEEDS = 5
CHECK_SEEDS = 2


class GuardError(ValueError):
    """Input the guard cannot use; the message names the fix."""


@dataclass(frozen=True)
class Guarded:
    """A shipped model: the harness algorithm, the JSON file that holds its figures, and the
    suites it is guarded in."""

    alg: str
    card: Path
    suites: tuple[str, ...]
    sha256: str | None


def guarded_models(models: Path) -> list[Guarded]:
    """Every model card in ``models`` whose model file is there, and ``portfolio.json``."""
    out = []
    for p in sorted(models.glob("*.json")):
        if p.name == "portfolio.json":
            out.append(Guarded(AUTO, p, ("preferences",), None))
            continue
        try:
            card = json.loads(p.read_text())
        except (OSError, ValueError) as e:
            raise GuardError(f"{p}: {e}") from e
        if not isinstance(card, dict) or "algorithm" not in card or "model_file" not in card:
            continue
        if (models / card["model_file"]).is_file():
            out.append(Guarded(card["algorithm"], p, SUITES, card.get("sha256")))
    return out


def scenarios(matrix_dir: Path, suites: tuple[str, ...]) -> list[Scenario]:
    """The guard's scenarios of ``suites``: the ``tune`` split, the corpus's quick ones only."""
    return [s for s in select(load_matrix(matrix_dir, list(suites)), "tune", purpose="selection")
            if s.suite != "corpus" or s.quick]


def group_key(suite: str, scenario: str) -> str:
    g = _group(suite, scenario)
    return f"{suite}/{g}" if g else suite


def per_seed(records: list[dict], alg: str) -> dict[str, dict]:
    """``group -> {"scenarios": [...], metric: {seed: value}}`` for ``alg``: per seed, the mean
    over the group's scenarios (and preferences) of each guarded metric, NaN if none is
    finite."""
    vals: dict[str, dict[str, dict[int, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list)))
    scen: dict[str, set[str]] = defaultdict(set)
    for r in rows(records):
        if r["alg"] != alg:
            continue
        g = group_key(r["suite"], r["scenario"])
        scen[g].add(r["scenario"])
        for metric, _ in METRICS[r["suite"]]:
            v = r.get(metric, math.nan)
            vals[g][metric][r["seed"]].append(v)
    out: dict[str, dict] = {}
    for g, ms in vals.items():
        out[g] = {"scenarios": sorted(scen[g])}
        for metric, by_seed in ms.items():
            out[g][metric] = {s: (sum(v) / len(v) if v and all(math.isfinite(x) for x in v)
                                  else math.nan) for s, v in by_seed.items()}
    return out


def _sd(v: list[float]) -> float:
    m = sum(v) / len(v)
    return math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0.0


def _r(x: float) -> float:
    return float(f"{x:.6g}")


def record_section(records: list[dict], alg: str, seeds: list[int], meta: dict) -> dict:
    """The ``evaluation.guard`` section for ``alg`` from a recording's records."""
    fails = [r for r in records if r["alg"] == alg and "error" in r]
    if fails:
        raise GuardError(f"{alg}: {len(fails)} runs failed (first: {fails[0]['run_id']}: "
                         f"{fails[0]['error']}): nothing recorded")
    groups: dict[str, dict] = {}
    for g, d in sorted(per_seed(records, alg).items()):
        suite = g.split("/")[0]
        figs: dict[str, dict] = {}
        for metric, _ in METRICS[suite]:
            by = d.get(metric, {})
            v = [by.get(s, math.nan) for s in seeds]
            if not all(math.isfinite(x) for x in v):
                raise GuardError(f"{alg} {g} {metric}: no finite figure on every seed "
                                 f"({v}): nothing recorded")
            figs[metric] = {"per_seed": [_r(x) for x in v], "mean": _r(sum(v) / len(v)),
                            "sd": _r(_sd(v))}
        groups[g] = {"scenarios": d["scenarios"], "metrics": figs}
    if not groups:
        raise GuardError(f"{alg}: no runs: nothing recorded")
    return {**meta, "seeds": seeds, "rule": f"margin = max({K:g} * sd, {REL:g} * |recorded|, "
            "ABS[metric]); see ccp_train.harness.guard", "groups": groups}


def write_section(card: Path, section: dict) -> None:
    data = json.loads(card.read_text())
    data.setdefault("evaluation", {})["guard"] = section
    tmp = card.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(card)


@dataclass(frozen=True)
class Check:
    """One comparison: a model's figure in a group against its bound."""

    alg: str
    group: str
    metric: str
    better: str
    figure: float
    recorded: float
    margin: float
    sd: float
    seeds: tuple[int, ...]
    n_scenarios: int

    @property
    def ok(self) -> bool:
        if not math.isfinite(self.figure):
            return False
        lo, hi = self.bounds
        return lo <= self.figure <= hi

    @property
    def bounds(self) -> tuple[float, float]:
        lo = self.recorded - self.margin if self.better in ("max", "both") else -math.inf
        hi = self.recorded + self.margin if self.better in ("min", "both") else math.inf
        return lo, hi

    def line(self) -> str:
        lo, hi = self.bounds
        bound = (f"≥ {lo:.4g}" if self.better == "max" else f"≤ {hi:.4g}"
                 if self.better == "min" else f"in [{lo:.4g}, {hi:.4g}]")
        return (f"{'ok  ' if self.ok else 'FAIL'} {self.alg} {self.group} ({self.n_scenarios} "
                f"tune scenarios) {self.metric}: {self.figure:.4g}, bound {bound} (recorded "
                f"{self.recorded:.4g} on seeds {list(self.seeds)}; margin {self.margin:.3g} = "
                f"max({K:g} × sd {self.sd:.3g}, {REL:g} × {abs(self.recorded):.4g}, "
                f"{ABS[self.metric]:g}))")


def check(records: list[dict], model: Guarded, seeds: list[int],
          suites: tuple[str, ...]) -> tuple[list[Check], list[str]]:
    """Compare ``model``'s runs with its card's recorded figures: the checks, and the problems
    that are failures without a figure (no recording, a missing measurement, ...)."""
    problems: list[str] = []
    who = f"{model.alg} ({model.card})"
    fails = [r for r in records if r["alg"] == model.alg and "error" in r]
    for f in fails:
        problems.append(f"{model.alg}: run {f['run_id']} failed: {f['error']}")
    try:
        sec = json.loads(model.card.read_text()).get("evaluation", {}).get("guard")
    except (OSError, ValueError) as e:
        return [], [f"{who}: cannot read: {e}"]
    if not isinstance(sec, dict) or not sec.get("groups"):
        return [], problems + [f"{who}: no recorded figures (evaluation.guard): record them "
                               "with `python -m ccp_train.harness.guard --record --algs "
                               f"{model.alg}`"]
    rec_seeds = list(sec.get("seeds", []))
    missing = [s for s in seeds if s not in rec_seeds]
    if missing:
        return [], problems + [f"{who}: seeds {missing} were not recorded (recorded: "
                               f"{rec_seeds}): check with fewer seeds or record again"]
    if model.sha256 and sec.get("model_sha256") not in (None, model.sha256):
        print(f"note: {who}: figures recorded for model {sec['model_sha256'][:12]}…, checking "
              f"{model.sha256[:12]}…", file=sys.stderr)
    got = per_seed(records, model.alg)
    out: list[Check] = []
    for g, rg in sorted(sec["groups"].items()):
        suite = g.split("/")[0]
        if suite not in suites:
            continue
        d = got.get(g)
        if d is None:
            problems.append(f"{model.alg} {g}: recorded, but no run measured it")
            continue
        if d["scenarios"] != rg["scenarios"]:
            problems.append(f"{model.alg} {g}: ran scenarios {d['scenarios']}, the figures "
                            f"are of {rg['scenarios']}: the matrix changed, record again")
            continue
        for metric, better in METRICS[suite]:
            rm = rg["metrics"].get(metric)
            if rm is None:
                problems.append(f"{model.alg} {g} {metric}: guarded but not recorded: "
                                "record again")
                continue
            ref = [rm["per_seed"][rec_seeds.index(s)] for s in seeds]
            vals = [d.get(metric, {}).get(s, math.nan) for s in seeds]
            fig = sum(vals) / len(vals)
            recorded = sum(ref) / len(ref)
            sd = float(rm["sd"])
            margin = max(K * sd, REL * abs(recorded), ABS[metric])
            out.append(Check(model.alg, g, metric, better, fig, recorded, margin, sd,
                             tuple(seeds), len(d["scenarios"])))
    for g in sorted(set(got) - set(sec["groups"])):
        if g.split("/")[0] in suites:
            problems.append(f"{model.alg} {g}: measured, but no figures recorded: record again")
    return out, problems



def run(out: Path, models: list[Guarded], seeds: list[int], suites: tuple[str, ...],
        *, matrix_dir: Path, agent: str, models_dir: Path, jobs: int) -> list[dict]:
    """Every model's runs in its suites (one sweep); writes ``out/results.jsonl``."""
    specs = []
    for m in models:
        ss = tuple(s for s in m.suites if s in suites)
        if ss:
            specs += expand(scenarios(matrix_dir, ss), [m.alg], seeds, agent=agent,
                            models=str(models_dir))
    out.mkdir(parents=True, exist_ok=True)
    records = run_local(specs, str(out), jobs)
    records.sort(key=lambda r: r["run_id"])
    with (out / "results.jsonl").open("w") as fh:
        for r in records:
            fh.write(json.dumps(r, allow_nan=True) + "\n")
    return records


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m ccp_train.harness.guard",
        description="Check each shipped model against the figures recorded in its card "
                    "(evaluation.guard), on the tune split; --record writes them.")
    p.add_argument("--out", type=Path, required=True, help="output folder (created)")
    p.add_argument("--record", action="store_true",
                   help="record the figures into the cards instead of checking them")
    p.add_argument("--models", type=Path, default=ROOT / "models", help="models folder")
    p.add_argument("--algs", type=comma_list, default=None,
                   help="only these of the folder's models (default: all; `auto`: "
                        "portfolio.json)")
    p.add_argument("--suites", type=comma_list, default=None,
                   help=f"check only these suites (default: {','.join(SUITES)})")
    p.add_argument("--seeds", type=int, default=None,
                   help=f"seeds 1..N (default {CHECK_SEEDS}; {RECORD_SEEDS} with --record)")
    p.add_argument("--jobs", type=int, default=None, help="parallel runs (default: all cores)")
    p.add_argument("--matrix", type=Path, default=DEFAULT_DIR, help="suite files (ops/eval)")
    p.add_argument("--agent", default=str(ROOT / "target" / "release" / "ccp-agent"),
                   help="ccp-agent binary")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    n = args.seeds if args.seeds is not None else (RECORD_SEEDS if args.record else CHECK_SEEDS)
    suites = tuple(args.suites) if args.suites else SUITES
    bad = [s for s in suites if s not in SUITES]
    if bad or not 1 <= n <= 100 or (args.record and (n < 2 or args.suites)):
        print(f"error: --suites from {','.join(SUITES)}, --seeds 1..100; --record needs "
              "every suite and at least 2 seeds (a spread)", file=sys.stderr)
        return 2
    if not Path(args.agent).is_file():
        print(f"error: no agent binary at {args.agent}: build it with `cargo build --release "
              "-p ccp-agent` (or pass --agent)", file=sys.stderr)
        return 2
    try:
        models = guarded_models(args.models)
    except GuardError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.algs:
        unknown = sorted(set(args.algs) - {m.alg for m in models})
        if unknown:
            print(f"error: no shipped model for {', '.join(unknown)} in {args.models}",
                  file=sys.stderr)
            return 2
        models = [m for m in models if m.alg in args.algs]
    if not models:
        print(f"FAIL: no model to guard in {args.models}", file=sys.stderr)
        return 1
    seeds = list(range(1, n + 1))
    t0 = time.monotonic()
    try:
        records = run(args.out, models, seeds, suites, matrix_dir=args.matrix, agent=args.agent,
                      models_dir=args.models, jobs=args.jobs or os.cpu_count() or 1)
    except MatrixError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    wall = time.monotonic() - t0
    print(f"{len(records)} runs of {', '.join(m.alg for m in models)} on seeds {seeds} in "
          f"{wall:.1f} s")
    if args.record:
        cmd = "python -m ccp_train.harness.guard " + shlex.join(
            sys.argv[1:] if argv is None else argv)
        try:
            secs = {m: record_section(records, m.alg, seeds, {
                "split": "tune", "command": cmd, "commit": git_rev(),
                "recorded": time.strftime("%Y-%m-%d", time.gmtime()),
                **({"model_sha256": m.sha256} if m.sha256 else {})}) for m in models}
        except GuardError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        for m, sec in secs.items():
            write_section(m.card, sec)
            print(f"recorded {len(sec['groups'])} groups of {m.alg} into {m.card}")
        return 0
    lines, problems = [], []
    for m in models:
        cs, ps = check(records, m, seeds, suites)
        lines += [c.line() for c in cs]
        problems += ps
        if not cs and not ps:
            problems.append(f"{m.alg}: no recorded figure in suites {', '.join(suites)}")
    failed = [ln for ln in lines if ln.startswith("FAIL")]
    report = "\n".join(lines + [f"FAIL {p}" for p in problems]) + "\n"
    (args.out / "guard.txt").write_text(report)
    print(report, end="")
    nf = len(failed) + len(problems)
    print(f"guard: {len(lines) - len(failed)} of {len(lines)} checks passed, {nf} failures "
          f"({args.out / 'guard.txt'})")
    return 1 if nf else 0


if __name__ == "__main__":
    raise SystemExit(main())
