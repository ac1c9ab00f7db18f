"""The preference portfolio: which algorithm serves a preference ``w`` best, from ``tune`` runs.

```
python -m ccp_train.portfolio build --out models/portfolio.json            # sweep + table
python -m ccp_train.portfolio table --results /tmp/pf/tune --out FILE      # from a sweep
python -m ccp_train.harness --split eval --suites preferences \\
    --algs auto,reno,cubic,bbr,iris,mocc --seeds 5 --out /tmp/pf-eval          # judge it
python -m ccp_train.portfolio compare --results /tmp/pf-eval                # paired
```

A flow that asks for ``ccp_auto`` (or ``auto`` in the simulator) carries a preference
``w = <throughput, latency, loss>``; the agent gives it the algorithm whose *operating point*
scores highest under MOCC's eq. 2, ``U = w · o`` with ``o = (utilization, RTT_base/RTT_mean,
1 - loss)`` (:func:`ccp_train.harness.metrics.objectives`). This module measures those points.

- **Where.** The harness's ``preferences`` suite, ``tune`` scenarios only (constant links and a
  cellular trace, one flow each): the table must never see an ``eval`` figure, since the
  ``eval`` scenarios are where ``auto`` is judged against every fixed algorithm.
- **What.** Per algorithm, the mean over seeds of the mean over scenarios of ``o``. Because
  ``U`` is linear in ``o``, ``w · mean(o)`` is the algorithm's mean tune utility for ``w``:
  choosing the arg max is choosing the algorithm that did best on tune for that preference.
- **Preference algorithms** (MOCC: its operating point moves with ``w``) get one point per
  landmark ``w`` of the suite; the agent scores the landmark nearest the flow's ``w`` (L1).
- **Candidates.** By default the registry's: the harness's default algorithms
  (:func:`candidates`: every built-in algorithm and every learned one with a model), so a new
  algorithm is a candidate of the next table without a line here. The shipped table's are
  its entries' (:func:`table_algs`; ``models/portfolio.json`` was built from reno, cubic, bbr,
  iris and mocc, before Owl had a model): rebuilding it as shipped takes ``--algs``.
- **Classes.** ``all`` (what the agent uses by default: it does not know a path's kind when a
  flow starts), ``links`` and ``cellular``. Each class must hold every (algorithm, w) on every
  one of its scenarios and seeds; a gap is an error, since a missing run would bias a mean.

The table is JSON (``version`` 1); the agent (``portus-agent/runtime/src/flows/portfolio.rs``)
validates it at start-up and on SIGHUP.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from collections import defaultdict
from pathlib import Path

from .harness.matrix import (
    DEFAULT_DIR,
    MatrixError,
    comma_list,
    default_algs,
    load_matrix,
    select,
)
from .harness.runner import ROOT, git_rev

VERSION = 1
SUITE = "preferences"


def candidates(models: Path | None = None) -> tuple[str, ...]:
    """The algorithms a table is built from by default, in registry order: the registry's, as
    the harness compares them by default (every built-in one and every learned one with a model
    in ``models``, default the repository's ``models/``)."""
    return default_algs(models)


def table_algs(tab: dict) -> tuple[str, ...]:
    """The algorithms a table was built from (its entries'), in name order."""
    return tuple(sorted({e["alg"] for entries in tab["classes"].values() for e in entries}))


class PortfolioError(Exception):
    """Results that cannot make a table, with what to do about it."""


def _key(w: list[float] | None) -> tuple[float, ...] | None:
    return None if w is None else tuple(float(x) for x in w)


def _class_of(link: dict) -> str:
    return "cellular" if "trace" in link else "links"


#: a suite whose tune runs, when given, are the whole of a class: the corpus's recordings (every
#: kind) are the ``cellular`` class, the population ``ccp_train.pathclass`` fits the
#: classifier's ``above`` side on; they do not enter the default class (``all``), which is
#: what a flow gets before it is classified
CLASS_SUITES = {"corpus": "cellular"}


def table(records: list[dict], *, matrix_dir: Path = DEFAULT_DIR, source: dict | None = None
          ) -> dict:
    """The portfolio table from harness records of the ``preferences`` suite's tune split."""
    scen = {s.name: s for s in load_matrix(matrix_dir, [SUITE])}
    whole = {CLASS_SUITES[r["suite"]] for r in records if r.get("suite") in CLASS_SUITES}
    for suite in {r["suite"] for r in records if r.get("suite") in CLASS_SUITES}:
        scen.update({f"{suite}/{s.name}": s for s in load_matrix(matrix_dir, [suite])})
    recs = [r for r in records if r.get("suite") == SUITE or r.get("suite") in CLASS_SUITES]
    if not any(r.get("suite") == SUITE for r in recs):
        raise PortfolioError(f"no {SUITE!r} runs in the results: run the harness with "
                             f"--suites {SUITE} --split tune")
    bad = sorted({r["scenario"] for r in recs if r.get("split") != "tune"})
    if bad:
        raise PortfolioError(f"results include non-tune scenarios ({', '.join(bad)}): the "
                             "portfolio is built from tune runs only, since eval is where "
                             "`auto` is judged")
    failed = [r["run_id"] for r in recs if "error" in r]
    if failed:
        raise PortfolioError(f"{len(failed)} failed run(s), e.g. {failed[0]}: fix and rerun")
    if any(r["alg"] == "auto" for r in recs):
        raise PortfolioError("results include `auto` runs: the table measures fixed "
                             "algorithms only")
    # (class, alg, w) -> seed -> scenario -> objectives
    got: dict[tuple, dict[int, dict[str, list[float]]]] = defaultdict(lambda: defaultdict(dict))
    for r in recs:
        other = r["suite"] != SUITE
        sc = scen.get(f"{r['suite']}/{r['scenario']}" if other else r["scenario"])
        if sc is None:
            raise PortfolioError(f"scenario {r['scenario']!r} is not in {matrix_dir}/"
                                 f"{r['suite']}.toml: build from results of this matrix")
        o = r["metrics"].get("objectives")
        if not (isinstance(o, list) and len(o) == 3 and all(math.isfinite(x) for x in o)):
            raise PortfolioError(f"run {r['run_id']} has no finite objectives: rerun the sweep "
                                 "with this version of the harness")
        if other:
            classes_of = [CLASS_SUITES[r["suite"]]]
        else:
            # the default class, and the path's own unless another suite is all of it
            classes_of = ["all"] + [c for c in [_class_of(sc.link)] if c not in whole]
        for cls in classes_of:
            got[(cls, r["alg"], _key(r.get("w")))][r["seed"]][r["scenario"]] = o
    classes: dict[str, list[dict]] = {}
    for cls in ("all", "links", "cellular"):
        keys = sorted((k for k in got if k[0] == cls), key=lambda k: (k[1], k[2] or ()))
        if not keys:
            continue
        want_scen = {s for k in keys for per in got[k].values() for s in per}
        want_seeds = {sd for k in keys for sd in got[k]}
        entries = []
        for k in keys:
            per_seed = got[k]
            missing = [(sd, s) for sd in sorted(want_seeds) for s in sorted(want_scen)
                       if s not in per_seed.get(sd, {})]
            if missing:
                sd, s = missing[0]
                raise PortfolioError(f"{k[1]} (w={k[2]}) has no run of {s} seed {sd} "
                                     f"({len(missing)} missing in class {cls}): every "
                                     "algorithm needs every scenario and seed")
            means = [[sum(o[i] for o in per_seed[sd].values()) / len(per_seed[sd])
                      for i in range(3)] for sd in sorted(per_seed)]
            o = [round(sum(m[i] for m in means) / len(means), 6) for i in range(3)]
            entries.append({"alg": k[1], "w": None if k[2] is None else list(k[2]), "o": o,
                            "runs": sum(len(v) for v in per_seed.values())})
        classes[cls] = entries
    return {
        "version": VERSION,
        "objectives": ["throughput", "latency", "loss"],
        "definition": "o = (utilization, min(RTT_base / RTT_mean, 1), 1 - loss rate), the "
                      "mean over the tune scenarios of the preferences suite and over seeds "
                      "(the cellular class: of the corpus suite's tune recordings, when its "
                      "runs are given); a flow's algorithm is the arg max of w . o (for "
                      "entries with a w, the one nearest the flow's w in L1)",
        "default_class": "all",
        "source": source or {},
        "classes": classes,
    }


def choose(tab: dict, w: list[float], cls: str | None = None) -> tuple[str, float]:
    """The table's choice for ``w`` on path class ``cls`` (None: the default class) and its
    score ``w . o``: the agent's own rule, through the bindings (one implementation, in
    ``portus-agent/runtime/src/flows/portfolio.rs``). A table the agent would refuse raises
    ``PortfolioError``."""
    from ccp_train import _native

    try:
        return _native.portfolio_choose(json.dumps(tab), [float(x) for x in w], cls)
    except ValueError as e:
        raise PortfolioError(f"the agent would refuse this table: {e}") from e


def compare(records: list[dict]) -> str:
    """``auto`` against each fixed algorithm on a preferences sweep: eq. 2 utility per ``w``
    (mean over scenarios and seeds), and per seed the difference of the means over scenarios
    and ``w`` (paired: same scenarios, seeds and traces)."""
    u: dict[tuple[str, int, str], list[float]] = defaultdict(list)
    for r in records:
        if r.get("suite") != SUITE or "metrics" not in r:
            continue
        own = None if r.get("w") is None else ",".join(f"{x:g}" for x in r["w"])
        for wk, x in r["metrics"]["utility_by_w"].items():
            if own is None or wk == own:
                u[(r["alg"], r["seed"], wk)].append(x)
    algs = sorted({k[0] for k in u})
    if "auto" not in algs:
        raise PortfolioError("no `auto` runs: sweep with --algs auto,<fixed algorithms>")
    ws = sorted({k[2] for k in u})
    seeds = sorted({k[1] for k in u})
    missing = [(a, s, w) for a in algs for s in seeds for w in ws if not u.get((a, s, w))]
    if missing:
        raise PortfolioError(f"no utility for {missing[0]}: every algorithm needs every seed "
                             "and w")

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    lines = [f"{'w':<14}" + "".join(f"{a:>8}" for a in algs)]
    for w in ws:
        lines.append(f"{w:<14}" + "".join(
            f"{mean([mean(u[(a, s, w)]) for s in seeds]):8.3f}" for a in algs))

    def per_seed(a: str, s: int) -> float:
        return mean([mean(u[(a, s, w)]) for w in ws])

    lines.append(f"{'mean':<14}" + "".join(
        f"{mean([per_seed(a, s) for s in seeds]):8.3f}" for a in algs))
    for a in algs:
        if a == "auto":
            continue
        d = [per_seed("auto", s) - per_seed(a, s) for s in seeds]
        lines.append(f"auto - {a}: {mean(d):+.4f} (per seed {min(d):+.4f} to {max(d):+.4f}, "
                     f"{sum(x > 0 for x in d)}/{len(d)} seeds above 0)")
    return "\n".join(lines)


def accept(records: list[dict], table_: dict | None = None) -> str:
    """Issue 43's acceptance on a harness sweep with ``auto`` and fixed algorithms (``--w``
    landmarks for the algorithms that take one): per landmark ``w``, each algorithm's mean
    eq. 2 utility ``w · o`` over (scenario, seed); the share of (scenario, seed, ``w``) cases
    where ``auto`` is at least Cubic's and at least BBR's; and, with ``table_``, the first
    choice alone (the default class's algorithm for ``w``, what ``ccp_auto`` ran before it
    classified paths), from the same runs."""
    runs: dict[tuple[str, int, str, tuple | None], list[float]] = {}
    for r in records:
        if "metrics" not in r or "error" in r:
            continue
        o = r["metrics"].get("objectives")
        if not o:
            continue
        runs[(r["scenario"], r["seed"], r["alg"], _key(r.get("w")))] = o
    lands = sorted({k[3] for k in runs if k[3] is not None})
    if not lands or not any(k[2] == "auto" for k in runs):
        raise PortfolioError("no `auto` runs with --w landmarks: sweep with --algs auto,<fixed "
                             "algorithms> and --w")
    algs = sorted({k[2] for k in runs})
    cases = sorted({(k[0], k[1]) for k in runs})

    def u(scen: str, seed: int, alg: str, w: tuple) -> float | None:
        o = runs.get((scen, seed, alg, w)) or runs.get((scen, seed, alg, None))
        return None if o is None else sum(a * b for a, b in zip(w, o, strict=True))

    def kind(scen: str) -> str:
        head = scen.split("-", 1)[0]
        return head if head in ("cellular", "5g", "wifi", "leo", "broadband") else "links"

    firsts = {w: choose(table_, list(w))[0] for w in lands} if table_ else {}
    cols = algs + (["first"] if firsts else [])
    lines = [f"{'w':<14}" + "".join(f"{a:>8}" for a in cols) + "   auto above all"]
    n_ok = {"cubic": 0, "bbr": 0}
    n = 0
    by_kind: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for w in lands:
        vals: dict[str, list[float]] = defaultdict(list)
        for scen, seed in cases:
            got = {a: u(scen, seed, a, w) for a in algs}
            if any(v is None for v in got.values()):
                raise PortfolioError(f"{scen} seed {seed}: missing runs for w={w} "
                                     f"({[a for a, v in got.items() if v is None]})")
            if firsts:
                first = u(scen, seed, firsts[w], w)
                if first is None:
                    raise PortfolioError(
                        f"{scen} seed {seed}: the first-choice column needs {firsts[w]}'s run "
                        f"for w={w} (the table's first choice): sweep with --algs "
                        f"...,{firsts[w]}, or leave the column out with --no-first")
                got["first"] = first
            for a, v in got.items():
                vals[a].append(v)
                by_kind[kind(scen)][a].append(v)
            n += 1
            for ref in n_ok:
                n_ok[ref] += got["auto"] >= got[ref] - 1e-12
        means = {a: sum(v) / len(v) for a, v in vals.items()}
        above = all(means["auto"] > means[a] for a in algs if a != "auto")
        wl = ",".join(f"{x:g}" for x in w)
        lines.append(f"{wl:<14}" + "".join(f"{means[a]:8.3f}" for a in cols)
                     + f"   {'yes' if above else 'no'}")
    lines.append(f"auto >= cubic in {n_ok['cubic']}/{n} cases ({n_ok['cubic'] / n:.1%}), "
                 f">= bbr in {n_ok['bbr']}/{n} ({n_ok['bbr'] / n:.1%})")
    lines.append("by kind (mean over the landmarks): " + "; ".join(
        f"{k} auto {sum(v['auto']) / len(v['auto']):.3f} best fixed "
        + max((a for a in algs if a != "auto"), key=lambda a: sum(v[a]))
        + f" {max(sum(v[a]) / len(v[a]) for a in algs if a != 'auto'):.3f}"
        + (f" first {sum(v['first']) / len(v['first']):.3f}" if firsts else "")
        for k, v in sorted(by_kind.items())))
    return "\n".join(lines)



def _write(tab: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(json.dumps(tab, indent=2) + "\n")
    tmp.replace(out)


def _summary(tab: dict) -> str:
    lines = []
    for w in ([0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8], [0.4, 0.5, 0.1],
              [0.3, 0.3, 0.4]):
        alg, u = choose(tab, w)
        lines.append(f"  w={','.join(f'{x:g}' for x in w)} -> {alg} (tune U {u:.3f})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ccp_train.portfolio", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="run the tune sweep, then write the table")
    b.add_argument("--out", type=Path, default=ROOT / "models" / "portfolio.json")
    b.add_argument("--work", type=Path, default=Path("/tmp/ccp-portfolio"),
                   help="where the sweep's results go (default /tmp/ccp-portfolio)")
    b.add_argument("--algs", type=comma_list, default=None,
                   help="the candidates (default: the registry's, every built-in algorithm and "
                        "every learned one with a model in --models; the shipped table's were "
                        "reno,cubic,bbr,iris,mocc,owl)")
    b.add_argument("--seeds", type=int, default=3)
    b.add_argument("--jobs", type=int, default=None)
    b.add_argument("--models", default=str(ROOT / "models"))
    b.add_argument("--agent", default=str(ROOT / "target" / "release" / "ccp-agent"))
    t = sub.add_parser("table", help="write the table from an existing tune sweep")
    t.add_argument("--results", type=Path, action="append", required=True,
                   help="a harness --out folder (results.jsonl); repeatable")
    t.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("compare", help="auto against each fixed algorithm on a harness "
                       "sweep of the preferences suite (e.g. --split eval)")
    c.add_argument("--results", type=Path, required=True, help="the sweep's --out folder")
    a = sub.add_parser("accept", help="issue 43's acceptance: auto against each fixed "
                       "algorithm per landmark w on a sweep with --w (e.g. corpus,links eval)")
    a.add_argument("--results", type=Path, action="append", required=True,
                   help="a sweep's --out folder; repeatable (e.g. one per seed)")
    a.add_argument("--table", type=Path, default=ROOT / "models" / "portfolio.json",
                   help="the table the sweep ran (for the first-choice column)")
    a.add_argument("--no-first", action="store_true",
                   help="no first-choice column (a sweep without the first choices' runs)")
    args = p.parse_args(argv)
    if args.cmd == "accept":
        try:
            recs = []
            for d in args.results:
                f = d / "results.jsonl"
                recs += [json.loads(line) for line in f.read_text().splitlines() if line]
            print(accept(recs, None if args.no_first else json.loads(args.table.read_text())))
        except (PortfolioError, OSError, ValueError, KeyError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        return 0
    if args.cmd == "compare":
        try:
            f = args.results / "results.jsonl"
            recs = [json.loads(line) for line in f.read_text().splitlines() if line]
            print(compare(recs))
        except (PortfolioError, OSError, ValueError, KeyError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        return 0
    cmd = "python -m ccp_train.portfolio " + shlex.join(sys.argv[1:] if argv is None else argv)
    try:
        if args.cmd == "build":
            from .harness.cli import evaluate

            if args.algs is None:
                args.algs = list(candidates(Path(args.models)))
            if "auto" in args.algs:
                raise PortfolioError("--algs: `auto` is what the table is for, not a member")
            if not 1 <= args.seeds <= 100:
                raise PortfolioError(f"--seeds is {args.seeds}: use 1 to 100")
            if not select(load_matrix(DEFAULT_DIR, [SUITE]), "tune"):
                raise PortfolioError(f"no tune scenarios in {SUITE}.toml")
            res = evaluate(args.work, split="tune", algs=args.algs,
                           seeds=list(range(1, args.seeds + 1)), suites=[SUITE],
                           jobs=args.jobs, models=args.models, agent=args.agent, plots=False,
                           command=cmd)
            records = res["records"]
            results = [str(args.work)]
        else:
            records = []
            for d in args.results:
                f = d / "results.jsonl"
                if not f.is_file():
                    raise PortfolioError(f"no {f}: give a harness --out folder")
                records += [json.loads(line) for line in f.read_text().splitlines() if line]
            results = [str(d) for d in args.results]
        seeds = sorted({r["seed"] for r in records})
        tab = table(records, source={"command": cmd, "results": results, "split": "tune",
                                     "suite": SUITE, "seeds": seeds, "commit": git_rev()})
    except (PortfolioError, MatrixError, OSError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    _write(tab, args.out)
    print(f"wrote {args.out}: {sum(len(v) for v in tab['classes'].values())} entries in "
          f"{len(tab['classes'])} classes; choices on the suite's landmarks:\n{_summary(tab)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
