"""The recipe, not the draw: train a shipped model's recipe with several seeds, measure every
model with the evaluation harness, and pick the seed to ship by a rule fixed in advance.

    python -m ccp_train.seeds models/mocc.json --seeds 1,2,3 --out /tmp/spread [--jobs 2] [--ship]
    python -m ccp_train.seeds models/mocc.json --out /tmp/spread --ship-only

For each seed the card's training command (a chain is replayed part by part, as
``ccp_train.reproduce`` does) runs with every ``--seed`` replaced by that seed. Each model is then
evaluated by the harness on the ``tune`` split (for the choice) and on the ``eval`` split (for the
report), ``--harness-seeds`` seeds each.

**Selection rule (fixed before any model is seen):** the shipped seed is the one whose *tune*
score is the median of the seeds' (the lower median for an even count; ties: the smaller seed).
The tune score is the mean, over every tune run, of MOCC's eq. 2 utility under each flow's own
``w`` (``utility_by_w``), so it weighs throughput, delay and loss the way the flow asked. Eval
figures never enter the choice: they are the spread the card and README report.

Outputs in ``--out``: ``seed<N>/`` (the training parts and the harness folders), ``spread.json``
and ``spread.md`` (per seed: tune score, eval headline per suite; mean and sd over seeds; the
chosen seed). ``--ship`` copies the chosen model, card and curves into the card's folder and
records the spread in the card's ``evaluation.seeds``.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ccp_train.harness import evaluate
from ccp_train.harness.report import suite_table
from ccp_train.reproduce import ReplayError, plan
from ccp_train.rl.evaluate import agent_config, tune_score

__all__ = ["choose", "main", "tune_score", "with_seed"]

#: eval figures reported per seed: (suite, group, metric)
REPORTED = (("links", "", "utilization"), ("links", "", "queue_delay_p95_ms"),
            ("cellular", "", "throughput_mbps"), ("cellular", "", "queue_delay_p95_ms"),
            ("fairness", "", "jain_mean"), ("preferences", "", "utility"))


def with_seed(command: str, seed: int) -> str:
    """The command with every ``--seed N`` replaced (added to parts that have none)."""
    parts = []
    for part in command.split("&&"):
        argv = shlex.split(part)
        if "--seed" in argv:
            argv[argv.index("--seed") + 1] = str(seed)
        else:
            argv += ["--seed", str(seed)]
        parts.append(shlex.join(argv))
    return " && ".join(parts)


def choose(scores: dict[int, float]) -> int:
    """The seed with the median score (lower median for an even count; ties: smaller seed)."""
    ranked = sorted(scores, key=lambda s: (scores[s], s))
    return ranked[(len(ranked) - 1) // 2]


def _mean_sd(xs: list[float]) -> tuple[float, float]:
    v = [x for x in xs if math.isfinite(x)]
    if not v:
        return math.nan, math.nan
    m = sum(v) / len(v)
    sd = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else math.nan
    return m, sd


def ship(report: dict, card_path: Path) -> None:
    """Copy the chosen seed's model, card and curves into the card's folder and record the
    spread in the card's ``evaluation.seeds``."""
    alg = report["algorithm"]
    per = {str(k): v for k, v in report["per_seed"].items()}  # int keys, or str from JSON
    src = Path(per[str(report["chosen_seed"])]["model"])
    dst = card_path.parent
    for f in (f"{alg}.onnx", f"{alg}.json", f"{alg}.pt", f"{alg}.curves.csv",
              f"{alg}.curves.png"):
        if (src / f).exists():
            shutil.copy2(src / f, dst / f)
    shipped = json.loads((dst / f"{alg}.json").read_text())
    shipped.setdefault("evaluation", {})["seeds"] = {
        k: report[k] for k in ("seeds", "chosen_seed", "rule", "eval_spread")}
    shipped["evaluation"]["seeds"]["per_seed"] = {
        str(s): {"sha256": v["sha256"], "tune_score": v["tune_score"], "eval": v["eval"]}
        for s, v in per.items()}
    (dst / f"{alg}.json").write_text(json.dumps(shipped, indent=2) + "\n")
    print(f"shipped seed {report['chosen_seed']} into {dst}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ccp_train.seeds", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("card", type=Path, help="the shipped model's card")
    p.add_argument("--seeds", default="1,2,3", help="training seeds (comma-separated, >= 3)")
    p.add_argument("--out", type=Path, required=True, help="work and report folder")
    p.add_argument("--harness-seeds", type=int, default=3, help="harness seeds per scenario")
    p.add_argument("--suites", default=None, help="harness suites (default: all)")
    p.add_argument("--ship", action="store_true",
                   help="copy the chosen seed's model into the card's folder")
    p.add_argument("--ship-only", action="store_true",
                   help="ship from an earlier run's OUT/spread.json without training again")
    p.add_argument("--jobs", type=int, default=1,
                   help="seeds trained at once (each is single-threaded and deterministic, so "
                        "the models do not depend on this)")
    p.add_argument("--min-seeds", type=int, default=3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.ship_only:
        try:
            ship(json.loads((args.out / "spread.json").read_text()), args.card)
        except (OSError, ValueError, KeyError) as e:
            print(f"error: {args.out / 'spread.json'}: {e}", file=sys.stderr)
            return 2
        return 0
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        print(f"error: --seeds {args.seeds!r}: give integers, e.g. 1,2,3", file=sys.stderr)
        return 2
    if len(set(seeds)) < args.min_seeds:
        print(f"error: --seeds: at least {args.min_seeds} different seeds", file=sys.stderr)
        return 2
    try:
        card = json.loads(args.card.read_text())
        alg, command = card["algorithm"], card["training"]["command"]
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {args.card}: not a model card ({e})", file=sys.stderr)
        return 2
    suites = args.suites.split(",") if args.suites else None
    hseeds = list(range(1, args.harness_seeds + 1))
    per: dict[int, dict] = {}
    finals: dict[int, Path] = {}
    chains: dict[int, list[list[str]]] = {}
    for s in seeds:
        try:
            # a pre-corpus card's recipe keeps its own traces (reproduce.legacy_traces)
            chains[s], finals[s] = plan(with_seed(command, s), (args.out / f"seed{s}").resolve(),
                                        card["training"].get("scenario_ranges"))
        except ReplayError as e:
            print(f"error: {args.card}: {e}", file=sys.stderr)
            return 2

    def train(s: int) -> bool:
        for i, a in enumerate(chains[s]):
            print(f"[seed {s}, {i + 1}/{len(chains[s])}] python {shlex.join(a)}", flush=True)
            if subprocess.run([sys.executable, *a], stdout=subprocess.DEVNULL,
                              check=False).returncode != 0:
                print(f"error: seed {s} part {i + 1} failed", file=sys.stderr)
                return False
        return True

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        if not all(pool.map(train, seeds)):
            return 1
    for s in seeds:
        work, final = (args.out / f"seed{s}").resolve(), finals[s]
        # the agent serves each model under the dynamics its card records
        config = work / "agent.toml"
        config.write_text(agent_config(json.loads((final / f"{alg}.json").read_text())))
        tune = evaluate(work / "tune", split="tune", algs=[alg], seeds=hseeds, suites=suites,
                        models=str(final), config=str(config), plots=False, purpose="selection")
        ev = evaluate(work / "eval", split="eval", algs=[alg], seeds=hseeds, suites=suites,
                      models=str(final), config=str(config), plots=False, purpose="report")
        figs = {}
        for suite, g, metric in REPORTED:
            tab = suite_table(ev["rows"], suite).get((g, alg))
            figs[f"{suite}.{metric}"] = tab[metric][0] if tab else math.nan
        per[s] = {"model": str(final), "sha256": json.loads((final / f"{alg}.json").read_text())
                  ["sha256"], "tune_score": tune_score(tune["records"]), "eval": figs,
                  "failed_runs": len(tune["failures"]) + len(ev["failures"])}
    chosen = choose({s: v["tune_score"] for s, v in per.items()})
    keys = list(next(iter(per.values()))["eval"])
    spread = {k: dict(zip(("mean", "sd"), _mean_sd([v["eval"][k] for v in per.values()]),
                          strict=True)) for k in keys}
    report = {"algorithm": alg, "seeds": seeds, "chosen_seed": chosen,
              "rule": "median tune score (mean eq. 2 utility under each flow's w), ties: smaller "
                      "seed; eval figures are not used",
              "harness_seeds": hseeds, "per_seed": per, "eval_spread": spread}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "spread.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [f"# {alg}: {len(seeds)} training seeds of one recipe", "",
             f"Rule: {report['rule']}. Chosen: seed {chosen}.", "",
             "| seed | tune score | " + " | ".join(keys) + " |",
             "|---|---:|" + "---:|" * len(keys)]
    for s, v in per.items():
        mark = " (chosen)" if s == chosen else ""
        lines.append(f"| {s}{mark} | {v['tune_score']:.4f} | "
                     + " | ".join(f"{v['eval'][k]:.4g}" for k in keys) + " |")
    lines.append("| mean ± sd | | " + " | ".join(
        f"{spread[k]['mean']:.4g} ± {spread[k]['sd']:.2g}" for k in keys) + " |")
    (args.out / "spread.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if args.ship:
        ship(report, args.card)
    return 0


if __name__ == "__main__":
    sys.exit(main())
