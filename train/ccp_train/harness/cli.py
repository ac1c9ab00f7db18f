"""The harness's command line and its library entry point :func:`evaluate`.

```
python -m ccp_train.harness --out results/eval                     # eval split, all suites
python -m ccp_train.harness --quick --out /tmp/q                   # the CI subset (2 seeds)
python -m ccp_train.harness --split tune --suites links,cellular --algs mocc,cubic,bbr
python -m ccp_train.harness --traces ~/my-traces --suites cellular  # a user's own traces
python -m ccp_train.harness --ray auto --out /shared/eval           # over a Ray cluster
python -m ccp_train.harness --vm --quick --out /tmp/vm              # kernel mode (QEMU guest)
```
Exit codes: 0 every run succeeded, 1 some run failed (the report lists them), 2 bad input.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import sys
import time
from pathlib import Path

from . import plots as plotting
from .matrix import (
    DEFAULT_DIR,
    SPLITS,
    SUITES,
    MatrixError,
    comma_list,
    default_algs,
    load_matrix,
    select,
)
from .report import card_summary, corpus_headline, headline, markdown, rows, write_summary_csv
from .runner import ROOT, RunSpec, check_alg_variant, expand, git_rev, run_local, run_ray


def agent_provenance(agent: str) -> dict:
    """Which agent binary ran the sweep: its path and sha256 (None where it is not on this
    machine, e.g. a Ray cluster's), so that two sweeps can be checked to share one."""
    p = Path(agent)
    digest = None
    if p.is_file():
        h = hashlib.sha256()
        with p.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        digest = h.hexdigest()
    return {"agent": str(p), "agent_sha256": digest}


def evaluate(out: Path, *, split: str, algs: list[str], seeds: list[int],
             suites: list[str] | None = None, quick: bool = False, jobs: int | None = None,
             ray: str | None = None, matrix_dir: Path = DEFAULT_DIR,
             traces: Path | None = None, traces_split: str = "eval",
             purpose: str = "selection", agent: str | None = None,
             models: str | None = None, config: str | None = None, plots: bool = True,
             command: str = "", landmarks: list[tuple[float, float, float]] | None = None
             ) -> dict:
    """Run a sweep and write every artifact into ``out``; returns ``{"records", "rows",
    "failures", "meta"}``. The default ``purpose="selection"`` accepts only ``split="tune"``."""
    for a in algs:
        check_alg_variant(a)
    scen = select(load_matrix(matrix_dir, suites, traces, traces_split), split, quick=quick,
                  purpose=purpose)
    if not scen:
        raise MatrixError(f"no {split} scenarios in suites {suites or list(SUITES)}"
                          + (" marked quick" if quick else ""))
    kw: dict = {}
    if agent:
        kw["agent"] = agent
    if models:
        kw["models"] = models
    if config:
        kw["config"] = config
    # --w: the algorithms that take a preference (the preferences suite's list) run once
    # per landmark in every other suite too
    w_algs = sorted({a for sc in load_matrix(matrix_dir, ["preferences"])
                     for a in sc.preference_algs}) if landmarks else []
    specs = expand(scen, algs, seeds, landmarks=landmarks or (), w_algs=w_algs, **kw)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    if ray:
        records = run_ray(specs, str(out), ray)
    else:
        records = run_local(specs, str(out), jobs or os.cpu_count() or 1)
    wall = time.monotonic() - t0
    records.sort(key=lambda r: r["run_id"])
    with (out / "results.jsonl").open("w") as fh:
        for r in records:
            fh.write(json.dumps(r, allow_nan=True) + "\n")
    failures = [r for r in records if "error" in r]
    rs = rows(records)
    pkts = sum(r.get("sim_packets", 0) for r in records)
    meta = {"split": split, "seeds": seeds, "algs": algs, "suites": suites or list(SUITES),
            "quick": quick, "landmarks": [list(w) for w in landmarks or []],
            "runs": len(records), "failed": len(failures), "wall_s": wall,
            "sim_packets": pkts, "packets_per_s": pkts / wall if wall > 0 else 0.0,
            "command": command, "commit": git_rev(), **agent_provenance(agent or RunSpec.agent)}
    write_summary_csv(rs, out / "summary.csv")
    (out / "report.md").write_text(markdown(rs, failures, meta))
    (out / "headline.md").write_text(headline(rs))
    by_kind = corpus_headline(rs)
    if by_kind:
        (out / "corpus.md").write_text(by_kind)
    elif (out / "corpus.md").exists():
        (out / "corpus.md").unlink()
    made = plotting.all_plots(records, rs, out) if plots else []
    meta["plots"] = [str(p.relative_to(out)) for p in made]
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return {"records": records, "rows": rs, "failures": failures, "meta": meta}


def write_card_section(card: Path, rs: list[dict], meta: dict) -> None:
    """Put the sweep's figures for the card's algorithm into ``evaluation.harness``."""
    if meta["split"] != "eval":
        raise ValueError("a model card records eval figures: run with --split eval")
    data = json.loads(card.read_text())
    alg = data["algorithm"]
    if alg not in meta["algs"]:
        raise ValueError(f"the sweep did not run {alg!r}: add it to --algs")
    data.setdefault("evaluation", {})["harness"] = card_summary(rs, alg, meta)
    tmp = card.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(card)


def preference(text: str) -> tuple[float, float, float]:
    """``THR,LAT,LOSS``: three numbers in [0, 1] summing to 1."""
    try:
        w = tuple(float(x) for x in text.split(","))
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: give three numbers, e.g. 0.8,0.1,0.1") from e
    if len(w) != 3 or not all(0.0 <= x <= 1.0 for x in w) or abs(sum(w) - 1.0) > 1e-6:
        raise argparse.ArgumentTypeError(f"{text!r}: give three numbers in [0, 1] summing "
                                         "to 1, e.g. 0.8,0.1,0.1")
    return (w[0], w[1], w[2])


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m ccp_train.harness",
        description="Evaluate congestion-control algorithms on the scenario matrix "
                    "(ops/eval/*.toml) in the simulator: several seeds, mean and 95 % CI, "
                    "results.jsonl, summary.csv, report.md and plots in --out.")
    p.add_argument("--out", type=Path, required=True, help="output folder (created)")
    p.add_argument("--split", choices=SPLITS, default="eval",
                   help="which scenarios: eval (reports; default) or tune (training, "
                        "selection and knob tuning use tune only)")
    p.add_argument("--suites", type=comma_list, default=None,
                   help=f"comma-separated subset of {','.join(SUITES)} (default: all)")
    p.add_argument("--algs", type=comma_list, default=list(default_algs()),
                   help="algorithms to compare (default: every built-in algorithm of the "
                        f"registry and every learned one with a model: {','.join(default_algs())})")
    p.add_argument("--seeds", type=int, default=None,
                   help="seeds per scenario, 1..N (default 5; 2 with --quick)")
    p.add_argument("--quick", action="store_true",
                   help="only the scenarios marked quick (the CI subset)")
    p.add_argument("--jobs", type=int, default=None,
                   help="parallel runs on this machine (default: all cores)")
    p.add_argument("--ray", metavar="ADDRESS", default=None,
                   help="run on a Ray cluster (`auto`, `ray://host:10001`, or `local`)")
    p.add_argument("--matrix", type=Path, default=DEFAULT_DIR,
                   help="folder of suite files (default: ops/eval)")
    p.add_argument("--traces", type=Path, default=None,
                   help="cellular suite over the traces in this folder instead (mahimahi "
                        "files or throughput logs)")
    p.add_argument("--traces-split", choices=SPLITS, default="eval",
                   help="split of the traces given with --traces (default eval)")
    p.add_argument("--agent", default=str(ROOT / "target" / "release" / "ccp-agent"),
                   help="ccp-agent binary (default: target/release/ccp-agent)")
    p.add_argument("--models", default=str(ROOT / "models"), help="models folder")
    p.add_argument("--config", default=None, help="algorithm knobs (TOML) for every run")
    p.add_argument("--w", type=preference, action="append", default=[], metavar="THR,LAT,LOSS",
                   help="repeatable: the algorithms that take a preference (the preferences "
                        "suite's preference_algs, e.g. mocc, auto) run once per w in every "
                        "suite, as `<alg>@<w>` in the tables (default: the agent's --w)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--vm", action="store_true",
                   help="kernel mode: the links suite's constant links (or, with --suites "
                        "corpus, recorded paths on a trace-driven link beside the simulator) in "
                        "the QEMU guest, native cubic/bbr against ccp_<alg> "
                        "(ccp_train.harness.vm; uses --out, --split, --quick, --algs, --seconds, "
                        "--suites)")
    p.add_argument("--seconds", type=int, default=10,
                   help="with --vm: length of each transfer (default 10)")
    p.add_argument("--card", type=Path, action="append", default=[],
                   help="model card (<alg>.json) whose evaluation.harness section gets this "
                        "sweep's figures for its algorithm (eval split only; repeatable)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.vm:
        from . import vm

        return vm.main(["--out", str(args.out), "--split", args.split, "--seconds",
                        str(args.seconds), "--algs", ",".join(args.algs)]
                       + (["--quick"] if args.quick else [])
                       + (["--suites", ",".join(args.suites)] if args.suites else []))
    n = args.seeds if args.seeds is not None else (2 if args.quick else 5)
    if not 1 <= n <= 100:
        print(f"error: --seeds is {n}: use 1 to 100", file=sys.stderr)
        return 2
    if args.jobs is not None and args.jobs < 1:
        print(f"error: --jobs is {args.jobs}: use at least 1", file=sys.stderr)
        return 2
    if not args.ray and not Path(args.agent).is_file():
        print(f"error: no agent binary at {args.agent}: build it with `cargo build --release "
              "-p ccp-agent` (or pass --agent)", file=sys.stderr)
        return 2
    cmd = "python -m ccp_train.harness " + shlex.join(sys.argv[1:] if argv is None else argv)
    try:
        res = evaluate(args.out, split=args.split, algs=args.algs, seeds=list(range(1, n + 1)),
                       suites=args.suites, quick=args.quick, jobs=args.jobs, ray=args.ray,
                       matrix_dir=args.matrix, traces=args.traces,
                       traces_split=args.traces_split, purpose="report", agent=args.agent,
                       models=args.models, config=args.config, plots=not args.no_plots,
                       command=cmd, landmarks=args.w)
    except MatrixError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    meta = res["meta"]
    for card in args.card:
        try:
            write_card_section(card, res["rows"], meta)
        except (OSError, ValueError, KeyError) as e:
            print(f"error: --card {card}: {e}", file=sys.stderr)
            return 2
        print(f"wrote the eval figures into {card}")
    print(f"{meta['runs']} runs ({meta['failed']} failed) in {meta['wall_s']:.1f} s, "
          f"{meta['packets_per_s'] / 1e6:.2f} M simulated packets/s; report: "
          f"{args.out / 'report.md'}")
    print((args.out / "headline.md").read_text(), end="")
    if (args.out / "corpus.md").is_file():
        print("\nThe corpus by kind:")
        print((args.out / "corpus.md").read_text(), end="")
    for f in res["failures"][:10]:
        print(f"FAILED {f['run_id']}: {f['error']}", file=sys.stderr)
    return 1 if res["failures"] else 0
