"""The path classifier of ``ccp_auto``: fitted on what the agent itself measures.

```
python -m ccp_train.pathclass fit --table models/portfolio.json --jobs 2      # collect + fit
python -m ccp_train.pathclass fit --results /tmp/pathclass --table FILE      # from a collection
```

A ``ccp_auto`` flow is first given the default class's choice; after ``min_s`` seconds the
agent computes four features of its own reports (``portus-agent/runtime/src/flows/pathclass.rs``:
the quartile spread of its delivery rate and RTT per 200 ms bin, its RTT inflation and loss
over a 3 s window) and puts the flow in a class with a linear rule, ``score = bias + weights ·
features``, ``above`` if the score is positive. This module fits that rule.

- **What is measured.** Every feature comes from the agent: the collection runs ``ccp-agent
  --sim`` with ``auto`` flows and a *probe* table (one algorithm in every class, so no flow
  switches, and a classifier whose score is always negative), and reads the features the
  agent decided on from its ``--json`` record. The features depend on the algorithm the flow
  runs (BBR probes, MOCC paces, Iris keeps the queue short), so every path is run once under
  each algorithm the table can give a flow, and each gets its own rule: a flow is classified
  first under its first choice and, after a switch, again under the new algorithm.
- **On what.** ``above`` (``cellular``: any recorded path, every kind of the corpus) from the
  corpus's ``train`` recordings; ``below`` (``links``: constant rate) from drawn links (rate
  1-500 Mbit/s log-uniform, half of them with random loss 1e-4-1e-2). Every path gets a
  drawn RTT (20-200 ms, log-uniform) and buffer (0.5-4 BDP). Accuracy is reported on the
  corpus's ``tune`` recordings and links drawn with another seed, never on ``eval``.
- **How.** L2-regularised logistic regression on the compressed features ``ln(1 + 10 x)``,
  standardised (Newton's method),
  one rule per algorithm and a pooled one for any other. The bin, window, ``min_s``
  and ``hold_s`` are ``KNOBS`` (two settings compared on ``tune``, see there).

The table keeps the classifier and its provenance (``classifier_source``: command, commit,
counts and accuracies).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import shlex
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

from . import corpus
from .harness.matrix import Scenario
from .harness.runner import ROOT, RunSpec, git_rev, run_local

#: the classifier's knobs: 200 ms bins (several RTTs of most paths, short enough to see a
#: cellular link's capacity change), a 6 s window (30 bins), the first decision at 10 s, and
#: 3 s of agreeing bins before a later change. Two settings were compared on ``tune``
#: (docs/portfolio.md): a 3 s window at 4 s (0.72 correct) and this one (0.81; 0.88 with the
#: compression and 0.84-0.91 with a rule per first algorithm): the first seconds of a flow
#: are its own start-up, whatever the path
KNOBS = {"bin_ms": 200.0, "window_s": 6.0, "min_s": 10.0, "hold_s": 3.0}
FEATURES = ["rate_iqr", "rtt_iqr", "inflation", "loss", "busy_rate_iqr", "busy_frac"]
ABOVE, BELOW = "cellular", "links"

class PathClassError(Exception):
    """Inputs that cannot give a classifier, with what to do."""


def probe_table(tab: dict, alg: str) -> dict:
    """``tab`` reduced to ``alg``'s entries in every class, with a classifier that always says
    ``below``: an ``auto`` flow runs ``alg`` and is classified (its features recorded), and
    never switches."""
    mine = [e for e in tab["classes"][tab["default_class"]] if e["alg"] == alg]
    if not mine:
        raise PathClassError(f"the table has no entry for {alg!r}")
    t = {k: v for k, v in tab.items()
         if k not in ("classifier", "classifier_source", "evaluation")}
    t["classes"] = {tab["default_class"]: mine, ABOVE: mine, BELOW: mine}
    t["classifier"] = {**KNOBS, "features": FEATURES, "weights": [0.0] * len(FEATURES),
                       "bias": -1.0, "above": ABOVE, "below": BELOW}
    return t


def table_algorithms(tab: dict) -> list[str]:
    """Every algorithm the table can give a flow: a flow may be classified (again) under any
    of them, so each gets its rule."""
    return sorted({e["alg"] for entries in tab["classes"].values() for e in entries})


def _log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def paths(split: str, n_links: int, seed: int, duration_s: float) -> list[Scenario]:
    """The corpus's ``split`` recordings and ``n_links`` constant links, each with a drawn RTT
    and buffer (seeded: the same paths for the same arguments)."""
    rng = random.Random(f"pathclass|{split}|{seed}")
    out = []
    recs = [t for t in corpus.load() if t.split == split]
    if not recs:
        raise PathClassError(f"the corpus has no {split!r} recordings")
    for t in recs:
        rtt, buf = _log_uniform(rng, 20, 200), rng.uniform(0.5, 4.0)
        out.append(Scenario("pathclass", f"{t.report_kind}-{t.name}", split, duration_s,
                            {"trace": str(t.file), "buffer_bdp": buf}, [{"rtt_ms": rtt}]))
    for i in range(n_links):
        rtt, buf = _log_uniform(rng, 20, 200), rng.uniform(0.5, 4.0)
        link: dict = {"rate_mbps": _log_uniform(rng, 1, 500), "buffer_bdp": buf}
        if rng.random() < 0.5:
            link["loss"] = _log_uniform(rng, 1e-4, 1e-2)
        out.append(Scenario("pathclass", f"link-{i}", split, duration_s, link,
                            [{"rtt_ms": rtt}]))
    return out


def collect(table: Path, split: str, n_links: int, seed: int, jobs: int, out: Path,
            agent: str) -> list[dict]:
    """Run ``auto`` flows under the probe table over the paths of ``split``; one row per run:
    the features, the label, the path's kind and the flow's first algorithm."""
    tab = json.loads(table.read_text())
    # inside the repository, so the agent finds onnxruntime in .venv above it as it does for
    # models/
    (ROOT / "target").mkdir(exist_ok=True)
    dirs = []
    try:
        specs = []
        # a flow at 200 ms RTT reports every RTT: its first decision can come a second late
        dur = KNOBS["min_s"] + 3.0
        scen = paths(split, n_links, seed, dur)
        for alg in table_algorithms(tab):
            models = Path(tempfile.mkdtemp(prefix=f"pathclass-{alg}-", dir=ROOT / "target"))
            dirs.append(models)
            for f in table.parent.iterdir():
                if f.is_file() and f.name != table.name:
                    shutil.copy2(f, models / f.name)
            (models / table.name).write_text(json.dumps(probe_table(tab, alg)))
            # the agent's default w: every algorithm runs at it (MOCC at its nearest landmark)
            specs += [RunSpec(dataclasses.replace(sc, name=f"{sc.name}@{alg}"), "auto", 1,
                              (0.4, 0.5, 0.1), agent=agent, models=str(models))
                      for sc in scen]
        recs = run_local(specs, str(out), jobs)
    finally:
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
    rows = []
    for r in recs:
        if "error" in r:
            raise PathClassError(f"run {r['run_id']} failed: {r['error']}")
        f = r["flows"][0]
        c = f.get("class")
        if not c:
            # the flow got too few reports to be classified (a recording that starts in an
            # outage): it keeps its first choice in the agent too, so it teaches nothing
            print(f"not classified (too few reports): {r['run_id']}", file=sys.stderr)
            continue
        kind = r["scenario"].split("-", 1)[0]
        rows.append({"run_id": r["run_id"], "split": split, "kind": kind,
                     "label": BELOW if kind == "link" else ABOVE, "first": f["alg"],
                     "features": [float(c["features"][k]) for k in FEATURES]})
    return rows


def squash(x: float) -> float:
    """The agent's compression of a feature before its weight (``pathclass.rs``'s ``squash``)."""
    return math.log1p(10.0 * max(x, 0.0))


def fit(rows: list[dict], l2: float = 1e-2, iters: int = 50) -> tuple[list[float], float]:
    """Logistic regression of ``label == ABOVE`` on the compressed features (standardised, L2
    ``l2``), returned as weights and bias on the compressed features."""
    if not rows:
        raise PathClassError("no rows to fit")
    x = np.array([[squash(v) for v in r["features"]] for r in rows], dtype=float)
    y = np.array([1.0 if r["label"] == ABOVE else 0.0 for r in rows])
    if y.min() == y.max():
        raise PathClassError("the rows hold one class only: collect both")
    mu, sd = x.mean(axis=0), x.std(axis=0)
    sd[sd == 0] = 1.0
    z = np.hstack([(x - mu) / sd, np.ones((len(x), 1))])
    beta = np.zeros(z.shape[1])
    reg = l2 * np.eye(z.shape[1])
    reg[-1, -1] = 0.0
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-z @ beta))
        grad = z.T @ (p - y) + reg @ beta
        hess = (z * (p * (1 - p))[:, None]).T @ z + reg
        step = np.linalg.solve(hess, grad)
        beta -= step
        if np.abs(step).max() < 1e-9:
            break
    w = beta[:-1] / sd
    b = float(beta[-1] - (beta[:-1] * mu / sd).sum())
    return [float(v) for v in w], b


def score(clf: dict, features: list[float], alg: str) -> float:
    """The agent's score of a flow running ``alg`` (``Classifier::score``)."""
    rule = clf.get("by_alg", {}).get(alg, clf)
    return rule["bias"] + sum(w * squash(f) for w, f in zip(rule["weights"], features,
                                                            strict=True))


def fit_classifier(rows: list[dict], l2: float) -> dict:
    """The classifier: a pooled rule and one per first algorithm."""
    weights, bias = fit(rows, l2)
    by_alg = {}
    for alg in sorted({r["first"] for r in rows}):
        mine = [r for r in rows if r["first"] == alg]
        w, b = fit(mine, l2)
        by_alg[alg] = {"weights": w, "bias": b}
    return {**KNOBS, "features": FEATURES, "weights": weights, "bias": bias,
            "by_alg": by_alg, "above": ABOVE, "below": BELOW}


def accuracy(rows: list[dict], clf: dict) -> dict:
    """Share of rows classified as labelled: overall, per kind and per first algorithm."""
    by: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        s = score(clf, r["features"], r["first"])
        ok = (s > 0) == (r["label"] == ABOVE)
        for k in ("all", f"kind:{r['kind']}", f"first:{r['first']}"):
            by[k][0] += int(ok)
            by[k][1] += 1
    return {k: {"correct": c, "n": n, "accuracy": round(c / n, 4)}
            for k, (c, n) in sorted(by.items())}



def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ccp_train.pathclass", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fit", help="collect features (train and tune), fit, write the table")
    f.add_argument("--table", type=Path, default=ROOT / "models" / "portfolio.json",
                   help="the portfolio table the classifier is written into")
    f.add_argument("--results", type=Path, default=Path("/tmp/ccp-pathclass"),
                   help="where the runs and rows.json go (rows.json there is reused)")
    f.add_argument("--links", type=int, default=380,
                   help="constant links per split for train (tune gets a quarter)")
    f.add_argument("--seed", type=int, default=1)
    f.add_argument("--l2", type=float, default=1e-2)
    f.add_argument("--jobs", type=int, default=2)
    f.add_argument("--agent", default=str(ROOT / "target" / "release" / "ccp-agent"))
    f.add_argument("--dry-run", action="store_true",
                   help="print the fit and accuracies, do not write the table")
    a = p.parse_args(argv)
    try:
        rows_file = a.results / "rows.json"
        if rows_file.exists():
            rows = json.loads(rows_file.read_text())
        else:
            a.results.mkdir(parents=True, exist_ok=True)
            rows = (collect(a.table, "train", a.links, a.seed, a.jobs, a.results, a.agent)
                    + collect(a.table, "tune", max(1, a.links // 4), a.seed + 1, a.jobs,
                              a.results, a.agent))
            rows_file.write_text(json.dumps(rows))
        train = [r for r in rows if r["split"] == "train"]
        tune = [r for r in rows if r["split"] == "tune"]
        clf = fit_classifier(train, a.l2)
        acc = {"train": accuracy(train, clf), "tune": accuracy(tune, clf)}
    except (PathClassError, corpus.CorpusError, OSError, ValueError) as e:
        print(f"pathclass: {e}", file=sys.stderr)
        return 2
    for name, rule in [("pooled", clf), *clf["by_alg"].items()]:
        print(f"{name}: " + ", ".join(f"{n} {w:+.3g}" for n, w in zip(
            FEATURES, rule["weights"], strict=True)) + f"; bias {rule['bias']:+.3g}")
    for split, by in acc.items():
        print(f"{split}: " + ", ".join(f"{k} {v['accuracy']:.3f} ({v['n']})"
                                       for k, v in by.items()))
    if a.dry_run:
        return 0
    tab = json.loads(a.table.read_text())
    tab["classifier"] = clf
    tab["classifier_source"] = {
        "command": "python -m ccp_train.pathclass " + shlex.join(sys.argv[1:] if argv is None
                                                                 else argv),
        "commit": git_rev(), "rows": {"train": len(train), "tune": len(tune)},
        "accuracy": {s: {k: v["accuracy"] for k, v in by.items()} for s, by in acc.items()},
    }
    a.table.write_text(json.dumps(tab, indent=1) + "\n")
    print(f"wrote the classifier into {a.table}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
