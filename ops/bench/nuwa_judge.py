"""Nuwa-RL's acceptance criteria (issue 39) from harness results, for one or more candidates
against Cubic (and BBR beside it), the selection rule of docs/algorithms/nuwa.md:

    .venv/bin/python ops/bench/nuwa_judge.py --base DIR [--td-ms 20] NAME=DIR ...

``--base``: a harness ``--out`` folder with ``cubic`` (and ``bbr``) runs of the same suites,
split and seeds; each ``NAME=DIR`` a folder with ``nuwa`` runs (one candidate model each).
Criteria, per candidate:
(a) cellular: for each corpus report kind, cellular (3G and LTE) and 5g, the geometric mean
    over recordings x path settings of throughput / Cubic's >= 0.9 and of p95 queueing delay
    / Cubic's <= 0.5
    (seed means first; a Cubic p95 under 1 ms counts as 1 ms);
(b) links: the median queueing delay (seed mean) within +-30 % of ``--td-ms`` on >= 4 of 5;
(c) fairness: mean Jain over the fairness suite's scenarios >= Cubic's.
``all thr``/``all p95``: the same ratios over every recording of those kinds together (the
selection rule's comparison with the constant gain).
Prints one table; reads only the figures, chooses nothing.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path

#: the corpus suite's report kinds of cellular paths (``cellular`` = 3G and LTE)
CELLULAR = ("cellular", "5g")


def load(folder: Path) -> dict[tuple[str, str, str], list[dict]]:
    """(suite, scenario, alg) -> the runs' metrics."""
    out: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    with open(folder / "results.jsonl") as f:
        for line in f:
            r = json.loads(line)
            out[(r["suite"], r["scenario"], r["alg"])].append(r["metrics"])
    return out


def mean(rows: list[dict], key: str) -> float:
    vals = [float(m[key]) for m in rows if m.get(key) is not None]
    return sum(vals) / len(vals) if vals else math.nan


def geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else math.nan


def judge(base: dict, cand: dict, alg: str, td_ms: float) -> dict[str, object]:
    res: dict[str, object] = {}
    ok_a = True
    all_thr: list[float] = []
    all_p95: list[float] = []
    for kind in CELLULAR:
        thr, p95 = [], []
        for (suite, scen, a), rows in cand.items():
            if suite != "corpus" or a != alg or not scen.startswith(kind + "-"):
                continue
            ref = base.get((suite, scen, "cubic"))
            if not ref:
                continue
            thr.append(mean(rows, "throughput_mbps") / mean(ref, "throughput_mbps"))
            p95.append(mean(rows, "queue_delay_p95_ms")
                       / max(mean(ref, "queue_delay_p95_ms"), 1.0))
        t, q = geomean(thr), geomean(p95)
        all_thr += thr
        all_p95 += p95
        res[f"{kind} thr"] = t
        res[f"{kind} p95"] = q
        ok_a = ok_a and t >= 0.9 and q <= 0.5
    res["(a)"] = ok_a
    # the selection rule's one cellular figure: every recording of those kinds together
    res["all thr"] = geomean(all_thr)
    res["all p95"] = geomean(all_p95)
    in_band = total = 0
    for (suite, _scen, a), rows in sorted(cand.items()):
        if suite == "links" and a == alg:
            total += 1
            p50 = mean(rows, "queue_delay_p50_ms")
            in_band += int(abs(p50 - td_ms) <= 0.3 * td_ms)
    res["links in band"] = f"{in_band}/{total}"
    res["(b)"] = total > 0 and in_band >= 4
    jain = [mean(rows, "jain_mean") for (s, _, a), rows in cand.items()
            if s == "fairness" and a == alg]
    cj = [mean(rows, "jain_mean") for (s, _, a), rows in base.items()
          if s == "fairness" and a == "cubic"]
    res["jain"] = sum(jain) / len(jain) if jain else math.nan
    res["cubic jain"] = sum(cj) / len(cj) if cj else math.nan
    res["(c)"] = bool(jain and cj and res["jain"] >= res["cubic jain"])
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, required=True, help="harness out with cubic (and bbr)")
    ap.add_argument("--td-ms", type=float, default=20.0, help="the runs' T_d")
    ap.add_argument("candidates", nargs="+", help="NAME=DIR, a harness out with nuwa runs")
    a = ap.parse_args()
    base = load(a.base)
    rows = [("bbr", judge(base, base, "bbr", a.td_ms))]
    for c in a.candidates:
        name, _, folder = c.partition("=")
        if not folder:
            raise SystemExit(f"{c!r}: expected NAME=DIR")
        rows.append((name, judge(base, load(Path(folder)), "nuwa", a.td_ms)))
    keys = list(rows[0][1])
    print("| candidate | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for name, r in rows:
        cells = [f"{v:.3f}" if isinstance(v, float) else str(v) for v in r.values()]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
