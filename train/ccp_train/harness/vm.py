"""Kernel mode of the harness: the constant-link scenarios in the QEMU guest (``ops/vm``).

Each scenario of the ``links`` suite becomes a link in the guest (tbf rate, netem base RTT, a
queue of ``buffer_bdp`` BDPs, per-packet random loss) on which Linux's native ``cubic`` and
``bbr`` and ``ccp_<alg>`` under the agent (learned algorithms with the shipped models in
``models/``) each run one iperf3 transfer. The guest is emulated (TCG), so absolute speeds are
low and depend on the host's load: the report gives each algorithm's throughput and RTT as
ratios to native cubic and native bbr on the same link, next to whether the flow was under
agent control.

```
python -m ccp_train.harness.vm --out /tmp/vm --quick            # the quick eval scenarios
python -m ccp_train.harness.vm --out /tmp/vm --algs mocc,bbr --seconds 20
python -m ccp_train.harness.vm --out /tmp/vm --algs owl --models DIR --netstats
python -m ccp_train.harness.vm --out /tmp/vm --suites corpus --seconds 20   # recorded paths
```
``--suites corpus`` runs recorded paths instead: a few of the corpus suite's ``eval``
recordings (``--traces``, default :data:`VM_TRACES`: mean rates the emulated guest carries) at
one RTT and buffer (``--rtt``, ``--buffer``), each on the guest's trace-driven bottleneck
(``ops/vm/ccplink.c``: mahimahi's delivery opportunities, a drop-tail queue, half the base RTT
each way), and the same scenarios in the simulator (seed 1: the trace from its start, as in the
guest; the transfer's length), and writes the sim-to-real table: per algorithm and trace,
throughput and p95 queueing delay as ratios to Cubic (native Cubic in the guest, the
simulator's Cubic there) side by side, marking where they differ by more than
:data:`AGREE_TOL`.
``--models DIR`` runs the agent on a candidate's models and cards instead of ``models/``;
``--netstats`` runs each ``ccp_<alg>`` twice, without and with ``ccp-netstats-exporter``
serving the guest router's PNC/PNA to the agent (Owl's in-network statistics; ``off`` is the
masked case), and the report compares the two.
Exit codes: 0 every run measured and every ccp flow attached to the algorithm it asked for,
1 otherwise (the report says which), 2 bad input.

Pieces: :func:`vm_scenarios` (which scenarios the guest can run, and why not the others),
:func:`write_list` (the guest's scenario list), :func:`run_guest` (``ops/vm/test.sh --eval``),
:func:`with_ratios` and :func:`markdown` (the analysis), :func:`run_vm` (all of it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from .matrix import (
    SPLITS,
    MatrixError,
    Scenario,
    comma_list,
    default_algs,
    load_matrix,
    repo_root,
    select,
)

#: the repository (ops/vm/test.sh, models/)
ROOT = repo_root()
#: the guest harness's host entry
TEST_SH = ROOT / "ops" / "vm" / "test.sh"
#: the fastest link the TCG guest emulates faithfully (veth + tbf top out near 185 Mbit/s)
MAX_RATE_MBPS = 200.0
#: Linux's own algorithms every ccp_<alg> is compared with
NATIVE = ("cubic", "bbr")
#: the agent's algorithms run by default
#: the simulator's packet size (a ``buffer_pkts`` link's queue in bytes)
PACKET_BYTES = 1500
#: guest names travel in a whitespace-separated file and in file names
_NAME = re.compile(r"^[A-Za-z0-9._+:-]+$")
#: trace paths travel in that file too (and the guest sees the host's tree at the same path)
_PATH = re.compile(r"^/[A-Za-z0-9._+/:-]+$")
#: suites the kernel mode runs: constant links, or recorded paths on the trace-driven link
VM_SUITES = ("links", "corpus")
#: the highest mean rate (Mbit/s) of a trace the guest runs (TCG: a few 10s of Mbit/s)
MAX_TRACE_MEAN_MBPS = 50.0
#: the corpus's eval recordings run by default (file names): three kinds, mean rates the TCG
#: guest carries with room to spare, no outage in their first 30 s (the transfers meet the
#: trace from its start): T-Mobile LTE (mahimahi, 16.7 Mbit/s), a Starlink uplink log (9.7),
#: New York 3G (mahimahi, 3.3)
VM_TRACES = ("TMobile-LTE-short.down", "seg16_20240419T171134.up.tput",
             "downlink-3g-no-cross-times-2")
#: a guest ratio and the simulator's agree when guest/sim is within 1 ± this
AGREE_TOL = 0.20
#: a trace-link run whose packets left more than this late (p99, ms) did not follow its trace
#: (the link's process was short of CPU): a problem. Half the scenarios' 40 ms base RTT.
MAX_LINK_LATE_MS = 20.0


@dataclass(frozen=True)
class VmScenario:
    """One line of the guest's list: a constant link and one flow."""

    name: str
    rate_mbps: float
    rtt_ms: float
    buffer_bdp: float
    loss: float
    #: a trace-driven link: the trace file (rate_mbps is then its mean)
    trace: str | None = None

    def line(self) -> str:
        rate = f"trace={self.trace}" if self.trace else f"{self.rate_mbps:g}"
        return f"{self.name} {rate} {self.rtt_ms:g} {self.buffer_bdp:g} {self.loss:g}"


def trace_mean_mbps(path: Path) -> float:
    """A trace's long-run mean rate as the simulator serves it: a mahimahi file's 1500-byte
    opportunities over its period (the last timestamp), a throughput log's rates held to the
    next sample (the last for the median interval) over its period."""
    from .runner import _log_samples, is_log

    if is_log(path):
        samples, period = _log_samples(str(path.resolve()))
        bits = 0.0
        for i, (t, r) in enumerate(samples):
            end = samples[i + 1][0] if i + 1 < len(samples) else period
            bits += (end - t) * float(r)
        return bits / period
    times = [int(x) for x in path.read_text().split()]
    if not times or times[-1] <= 0:
        raise MatrixError(f"trace {path}: no period (empty, or its last timestamp is 0)")
    return len(times) * PACKET_BYTES * 8 / (times[-1] / 1e3) / 1e6


def trace_scenarios(scenarios: Iterable[Scenario], traces: Sequence[str], rtt_ms: float,
                    buffer_bdp: float) -> tuple[list[VmScenario], list[tuple[str, str]]]:
    """The corpus suite's scenarios the guest runs on its trace-driven link: those whose
    recording's file name is one of ``traces``, at ``rtt_ms`` and ``buffer_bdp``; and
    ``(key, reason)`` for each of those it cannot run (a mean rate above
    :data:`MAX_TRACE_MEAN_MBPS`, a path or name the list cannot carry). A name in ``traces``
    that matches no scenario is bad input (:class:`MatrixError`)."""
    out: list[VmScenario] = []
    skipped: list[tuple[str, str]] = []
    found: set[str] = set()
    for sc in scenarios:
        link = sc.link
        if "trace" not in link:
            continue
        path = Path(str(link["trace"]))
        flows = sc.expanded_flows()
        if path.name not in traces or len(flows) != 1 or "alg" in flows[0]:
            continue
        if float(flows[0]["rtt_ms"]) != rtt_ms or float(link.get("buffer_bdp", 1.0)) != buffer_bdp:
            continue
        found.add(path.name)
        mean = trace_mean_mbps(path)
        if mean > MAX_TRACE_MEAN_MBPS:
            skipped.append((sc.key, f"mean rate {mean:.1f} Mbit/s is above the "
                                    f"{MAX_TRACE_MEAN_MBPS:g} Mbit/s the emulated guest carries"))
        elif not _NAME.match(sc.name) or not _PATH.match(str(path)):
            skipped.append((sc.key, "name or path has characters the guest's list cannot carry"))
        elif "trace_scale" in link or float(link.get("loss", 0.0)) > 0:
            skipped.append((sc.key, "a scaled trace or random loss: the trace link has neither"))
        else:
            out.append(VmScenario(sc.name, mean, rtt_ms, buffer_bdp, 0.0, str(path)))
    missing = [t for t in traces if t not in found]
    if missing:
        raise MatrixError(f"--traces {','.join(missing)}: no such recording at {rtt_ms:g} ms and "
                          f"{buffer_bdp:g} BDP in the selected split of the corpus suite (give "
                          "file names of its recordings, e.g. " + ", ".join(VM_TRACES) + ")")
    return out, skipped


def vm_scenarios(scenarios: Iterable[Scenario]) -> tuple[list[VmScenario], list[tuple[str, str]]]:
    """The scenarios the guest runs, and ``(key, reason)`` for each it skips: a link that is
    not a constant rate, anything but one flow under test, a rate above
    :data:`MAX_RATE_MBPS`, a name the list cannot carry."""
    out: list[VmScenario] = []
    skipped: list[tuple[str, str]] = []
    for sc in scenarios:
        link = sc.link
        flows = sc.expanded_flows()
        if "rate_mbps" not in link or "trace" in link or "rate_schedule" in link:
            skipped.append((sc.key, "not a constant-rate link"))
            continue
        if len(flows) != 1 or "alg" in flows[0]:
            skipped.append((sc.key, "the guest runs one flow under test and no competitors"))
            continue
        rate = float(link["rate_mbps"])
        if rate > MAX_RATE_MBPS:
            skipped.append((sc.key, f"{rate:g} Mbit/s is above the {MAX_RATE_MBPS:g} Mbit/s an "
                                    "emulated (TCG) guest carries"))
            continue
        if not _NAME.match(sc.name):
            skipped.append((sc.key, "name has characters other than letters, digits and ._+:-"))
            continue
        rtt = float(flows[0]["rtt_ms"])
        if "buffer_pkts" in link:
            bdp_bytes = rate * 1e6 / 8 * rtt / 1000
            buf = float(link["buffer_pkts"]) * PACKET_BYTES / bdp_bytes
        else:
            buf = float(link.get("buffer_bdp", 1.0))
        out.append(VmScenario(sc.name, rate, rtt, buf, float(link.get("loss", 0.0))))
    return out, skipped


def write_list(path: Path, scenarios: Iterable[VmScenario]) -> None:
    """The guest's scenario list (``ops/vm/guest/eval.sh``): one scenario a line."""
    lines = ["# name rate_mbps rtt_ms buffer_bdp loss (ops/vm/guest/eval.sh)"]
    lines += [s.line() for s in scenarios]
    path.write_text("\n".join(lines) + "\n")


def run_guest(list_path: Path, seconds: int, algs: list[str], log: Path,
              test_sh: Path = TEST_SH, timeout_s: float | None = None, *,
              models: Path | None = None, netstats: bool = False) -> Path:
    """Boot the guest on ``list_path`` (``test.sh --eval``), its output into ``log``; returns
    the results file the guest wrote. Raises RuntimeError when the guest gave none.
    ``models``: the agent's models folder (default ``models/``); ``netstats``: each ccp run
    without and with the router's statistics exporter."""
    cmd = ["bash", str(test_sh), "--eval", str(list_path), str(seconds), ",".join(algs)]
    env = dict(os.environ)
    env.pop("CCP_VM_EVAL_MODELS", None)
    if models is not None:
        env["CCP_VM_EVAL_MODELS"] = str(models.resolve())
    env["CCP_VM_EVAL_NETSTATS"] = "1" if netstats else "0"
    with log.open("w") as fh:
        fh.write("$ " + shlex.join(cmd) + "\n")
        fh.flush()
        p = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout_s,
                           check=False, env=env)
    text = log.read_text()
    found = re.findall(r"^EVAL_RESULTS (\S+)$", text, re.MULTILINE)
    if not found or not Path(found[-1]).is_file():
        tail = "\n".join(text.splitlines()[-15:])
        raise RuntimeError(f"{test_sh} --eval exited {p.returncode} without results "
                           f"(log: {log}):\n{tail}")
    return Path(found[-1])


def read_results(path: Path) -> list[dict]:
    """The guest's JSON lines (a line that is not JSON becomes an error record)."""
    out = []
    for i, line in enumerate(path.read_text().splitlines()):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            out.append({"error": f"line {i + 1} of {path} is not JSON: {line[:200]}"})
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)) or b <= 0:
        return None
    return a / b


def problem(rec: dict) -> str | None:
    """What is wrong with a run, or None: it must be measured, and a ccp run attached, with
    the agent running the algorithm it asked for (not the default a missing model falls
    back to)."""
    if "error" in rec:
        return str(rec["error"])
    if rec.get("throughput_mbps") is None or rec.get("rtt_mean_ms") is None:
        return "no throughput or RTT measured"
    if "trace" in rec:
        if rec.get("link_queue_p95_ms") is None:
            return "the trace link measured no queueing delay (it carried no data)"
        if rec.get("link_write_errors"):
            return f"the trace link failed {rec['link_write_errors']} writes"
        late = rec.get("link_late_p99_ms")
        if isinstance(late, int | float) and late > MAX_LINK_LATE_MS:
            return (f"the trace link ran behind its trace (1 % of the packets left over "
                    f"{late:g} ms late; the guest was short of CPU)")
    if rec.get("kind") == "ccp":
        if not rec.get("attached"):
            k, n = (rec.get("attach_samples") or [0, 0])[:2]
            return f"not under agent control ({k} of {n} snapshots)"
        if rec.get("agent_algs") != [rec.get("alg")]:
            return f"the agent ran {rec.get('agent_algs')} for {rec.get('cc')}"
        fresh = rec.get("fresh_paths")
        if rec.get("netstats") == "on" and not (isinstance(fresh, int) and fresh >= 1):
            return f"the exporter ran but the agent held no fresh path (fresh_paths {fresh})"
        if rec.get("netstats") == "off" and fresh not in (0, None):
            return f"no exporter ran but the agent held {fresh} fresh paths"
    return None


def run_ok(rec: dict) -> bool:
    return problem(rec) is None


def with_ratios(records: list[dict]) -> list[dict]:
    """Every record with its throughput and mean/p95 RTT as ratios to native cubic's and
    native bbr's on the same scenario (``thr_vs_cubic``, ``rtt_vs_bbr``, ``rtt_p95_vs_cubic``,
    …; None where either side is missing) and ``ok`` (:func:`run_ok`)."""
    native: dict[tuple[str, str], dict] = {}
    for r in records:
        if r.get("kind") == "native" and r.get("cc") in NATIVE and "error" not in r:
            native[(str(r.get("scenario")), str(r["cc"]))] = r
    out = []
    for r in records:
        g = dict(r)
        for n in NATIVE:
            ref = native.get((str(r.get("scenario")), n), {})
            g[f"thr_vs_{n}"] = _ratio(r.get("throughput_mbps"), ref.get("throughput_mbps"))
            g[f"rtt_vs_{n}"] = _ratio(r.get("rtt_mean_ms"), ref.get("rtt_mean_ms"))
            g[f"rtt_p95_vs_{n}"] = _ratio(r.get("rtt_p95_ms"), ref.get("rtt_p95_ms"))
            if "trace" in r:
                g[f"q95_vs_{n}"] = _ratio(r.get("link_queue_p95_ms"),
                                          ref.get("link_queue_p95_ms"))
        g["ok"] = run_ok(r)
        out.append(g)
    return out


def _f(x: float | None, fmt: str) -> str:
    return "–" if x is None else format(x, fmt)


def _label(r: dict) -> str:
    if r.get("kind") == "native":
        return f"native {r.get('cc')}"
    ns = r.get("netstats")
    return f"{r.get('cc')} (stats {ns})" if ns else str(r.get("cc"))


def _attach(r: dict) -> str:
    if r.get("kind") != "ccp":
        return ""
    k, n = (r.get("attach_samples") or [0, 0])[:2]
    algs = r.get("agent_algs") or []
    state = "yes" if r.get("attached") else "**no**"
    ran = ",".join(algs) if algs else "none"
    if algs != [r.get("alg")]:
        ran = f"**{ran}**"
    return f"{state} ({k}/{n}), ran {ran}"


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def markdown(rows: list[dict], skipped: list[tuple[str, str]], meta: dict,
             sim: list[dict] | None = None) -> str:
    """The report: per scenario and run, absolute figures and ratios; then per algorithm the
    geometric mean of each ratio over the scenarios."""
    suites = meta.get("suites") or ["links"]
    out = [f"# Kernel mode: the {' and '.join(suites)} scenarios in the QEMU guest", ""]
    if meta.get("command"):
        out += [f"Command: `{meta['command']}`", ""]
    out.append(f"{meta.get('scenarios', 0)} scenarios ({meta.get('split')} split"
               f"{', quick' if meta.get('quick') else ''}), {meta.get('seconds')} s per "
               f"transfer, algorithms {', '.join(meta.get('algs', []))}; "
               f"{meta.get('runs', 0)} runs in {meta.get('wall_s', 0.0):.0f} s wall, "
               f"guest kernel {meta.get('kernel') or '?'}; models {meta.get('models', 'models/')}"
               + ("; each ccp run without (stats off: masked) and with (stats on) "
                  "ccp-netstats-exporter in the router namespace" if meta.get("netstats") else "")
               + ".")
    out.append("")
    out.append("The guest is emulated: absolute speeds are low and follow the host's load, so "
               "compare the ratios, each to a native run on the same link minutes apart. "
               "Throughput: iperf3 receiver; RTT: the sender's smoothed RTT every 100 ms "
               "(TCP_INFO), mean and p95; attached: snapshots of /proc/net/ccp_flows (every "
               "0.5 s) that showed the flow under agent control, and the algorithm the agent "
               "created for it.")
    out.append("")
    if skipped:
        out.append("Skipped: " + "; ".join(f"`{k}` ({why})" for k, why in skipped) + ".")
        out.append("")
    head = ("| run | Mbit/s | thr/cubic | thr/bbr | RTT ms | RTT/cubic | RTT/bbr | p95 RTT ms "
            "| p95/cubic | p95/bbr | retrans | attached |")
    sep = "|---|" + "---:|" * 10 + "---|"
    scen: dict[str, list[dict]] = {}
    for r in rows:
        scen.setdefault(str(r.get("scenario", "?")), []).append(r)
    for name, rs in scen.items():
        r0 = rs[0]
        out.append(f"## {name}")
        out.append("")
        trace = "trace" in r0
        if trace:
            out.append(f"trace `{_repo_rel(str(r0['trace']))}`, {r0.get('rtt_ms'):g} ms, "
                       f"{r0.get('buffer_bdp'):g} BDP at its mean rate "
                       f"({r0.get('link_buffer_pkts')} packets); queue: the trace link's sojourn "
                       "of each data packet (ccplink), link util.: delivered / the trace's "
                       "capacity over the link's life (from the transfer's first full "
                       "segment until the link stopped, a second or two after the transfer)")
            out.append("")
        elif "rate_mbps" in r0:
            out.append(f"{r0.get('rate_mbps'):g} Mbit/s, {r0.get('rtt_ms'):g} ms, "
                       f"{r0.get('buffer_bdp'):g} BDP ({r0.get('buffer_bytes')} bytes), "
                       f"loss {100 * float(r0.get('loss', 0)):g} %")
            out.append("")
        out.append(head + (" queue p95 ms | queue p95/cubic | link util. |" if trace else ""))
        out.append(sep + ("---:|---:|---:|" if trace else ""))
        for r in rs:
            if "error" in r:
                out.append(f"| {_label(r)} | error: {r['error']} |" + " |" * (13 if trace else 10))
                continue
            extra = ""
            if trace:
                extra = (f" {_f(r.get('link_queue_p95_ms'), '.1f')} | "
                         f"{_f(r.get('q95_vs_cubic'), '.2f')} | "
                         f"{_f(r.get('link_utilization'), '.2f')} |")
            out.append(
                f"| {_label(r)} | {_f(r.get('throughput_mbps'), '.1f')} "
                f"| {_f(r.get('thr_vs_cubic'), '.2f')} | {_f(r.get('thr_vs_bbr'), '.2f')} "
                f"| {_f(r.get('rtt_mean_ms'), '.1f')} | {_f(r.get('rtt_vs_cubic'), '.2f')} "
                f"| {_f(r.get('rtt_vs_bbr'), '.2f')} | {_f(r.get('rtt_p95_ms'), '.1f')} "
                f"| {_f(r.get('rtt_p95_vs_cubic'), '.2f')} | {_f(r.get('rtt_p95_vs_bbr'), '.2f')} "
                f"| {r.get('retransmits', '–')} | {_attach(r)} |" + extra)
        out.append("")
    ccp = [r for r in rows if r.get("kind") == "ccp" and "error" not in r]
    if ccp:
        out.append("## Over the scenarios (geometric mean of the ratios)")
        out.append("")
        out.append("| algorithm | scenarios | thr/cubic | thr/bbr | RTT/cubic | RTT/bbr "
                   "| p95/cubic | p95/bbr | attached |")
        out.append("|---|---:|" + "---:|" * 6 + "---|")
        by: dict[str, list[dict]] = {}
        for r in ccp:
            by.setdefault(_label(r), []).append(r)
        for cc, rs in by.items():
            cols = [_f(_geomean([r.get(k) for r in rs]), ".2f")
                    for k in ("thr_vs_cubic", "thr_vs_bbr", "rtt_vs_cubic", "rtt_vs_bbr",
                              "rtt_p95_vs_cubic", "rtt_p95_vs_bbr")]
            att = sum(1 for r in rs if r.get("ok"))
            out.append(f"| {cc} | {len(rs)} | " + " | ".join(cols) + f" | {att}/{len(rs)} |")
        out.append("")
    if sim is not None:
        out += sim_to_real_markdown(sim)
    bad = [r for r in rows if not r.get("ok")]
    sim_bad = [r for r in (sim or []) if r.get("problem")]
    if bad or sim_bad:
        out.append("## Problems")
        out.append("")
        for r in bad:
            out.append(f"- `{r.get('scenario')}` {_label(r)}: {problem(r)}")
        for r in sim_bad:
            out.append(f"- `{r['scenario']}` {r['run']} (sim-to-real): {r['problem']}")
        out.append("")
    return "\n".join(out)


def _repo_rel(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return path


# --- the simulator beside the guest -----------------------------------------------------


def sim_alg(r: dict) -> str:
    """The simulator's algorithm for a guest run: native ``cubic``/``bbr`` become the agent's
    ``cubic``/``bbr`` (the simulator has no kernel), ``ccp_<alg>`` becomes ``<alg>``."""
    return str(r.get("alg"))


def run_sim(scenarios: Sequence[Scenario], algs: Sequence[str], seconds: int, out: Path,
            jobs: int = 2, agent: str | None = None) -> list[dict]:
    """The trace scenarios in the simulator: each of ``algs`` plus ``cubic`` and ``bbr`` (the
    natives' stand-ins), seed 1 (the trace from its start, as the guest's link starts it),
    ``seconds`` long (the guest's transfer). The harness's run records (``metrics``)."""
    from .runner import RunSpec, run_local

    names = list(dict.fromkeys([*NATIVE, *algs]))
    kw = {"agent": agent} if agent else {}
    specs = [RunSpec(replace(sc, duration_s=float(seconds)), a, 1, **kw)  # type: ignore[arg-type]
             for sc in scenarios for a in names]
    return run_local(specs, str(out), jobs)


def sim_to_real(rows: Sequence[dict], sim: Sequence[dict], tol: float = AGREE_TOL) -> list[dict]:
    """Per trace scenario and guest run (native ``bbr`` and every ``ccp_<alg>``): throughput
    and p95 queueing delay as ratios to Cubic in the guest (native Cubic on the same link;
    the queue is the trace link's sojourn) and in the simulator (its Cubic; its queue delay),
    ``thr_agree``/``q95_agree`` = guest ratio / simulator ratio, and ``verdict``: ``agree``
    when both are within 1 ± ``tol``, else which differ. ``problem`` when a figure is
    missing on either side."""
    simrec: dict[tuple[str, str], dict] = {}
    for r in sim:
        simrec[(str(r.get("scenario")), str(r.get("alg")))] = r
    ref: dict[str, dict] = {}
    for r in rows:
        if "trace" in r and r.get("kind") == "native" and r.get("cc") == "cubic":
            ref[str(r.get("scenario"))] = r
    out = []
    for r in rows:
        if "trace" not in r or (r.get("kind") == "native" and r.get("cc") == "cubic"):
            continue
        sc = str(r.get("scenario"))
        g_ref = ref.get(sc, {})
        s = simrec.get((sc, sim_alg(r)), {})
        s_ref = simrec.get((sc, "cubic"), {})
        sm, srm = s.get("metrics") or {}, s_ref.get("metrics") or {}
        e = {"scenario": sc, "run": _label(r), "sim_alg": sim_alg(r),
             "guest_mbps": r.get("throughput_mbps"), "sim_mbps": sm.get("throughput_mbps"),
             "guest_q95_ms": r.get("link_queue_p95_ms"),
             "sim_q95_ms": sm.get("queue_delay_p95_ms"),
             "guest_thr": _ratio(r.get("throughput_mbps"), g_ref.get("throughput_mbps")),
             "sim_thr": _ratio(sm.get("throughput_mbps"), srm.get("throughput_mbps")),
             "guest_q95": _ratio(r.get("link_queue_p95_ms"), g_ref.get("link_queue_p95_ms")),
             "sim_q95": _ratio(sm.get("queue_delay_p95_ms"), srm.get("queue_delay_p95_ms"))}
        e["thr_agree"] = _ratio(e["guest_thr"], e["sim_thr"])
        e["q95_agree"] = _ratio(e["guest_q95"], e["sim_q95"])
        why = [f"{side}: {rr['error']}" for side, rr in (("simulator", s), ("simulator cubic",
               s_ref), ("guest", r), ("guest native cubic", g_ref)) if rr.get("error")]
        if not s or not s_ref:
            why.append("no simulator run")
        if not g_ref:
            why.append("no native cubic run in the guest")
        if e["thr_agree"] is None or e["q95_agree"] is None:
            why.append("a ratio is missing")
        e["problem"] = "; ".join(why) or None
        bad = [k for k, x in (("throughput", e["thr_agree"]), ("p95 queue", e["q95_agree"]))
               if x is not None and abs(x - 1.0) > tol]
        e["verdict"] = ("–" if e["problem"] else
                        "agree" if not bad else "differ: " + ", ".join(bad))
        out.append(e)
    return out


def sim_to_real_markdown(entries: Sequence[dict]) -> list[str]:
    out = ["## Sim to real (ratios to Cubic: native in the guest, the simulator's in the "
           "simulator)", "",
           "Per trace and run: throughput and p95 queueing delay (the bottleneck's sojourn: "
           "ccplink's in the guest, the simulator's queue delay) as ratios to Cubic on the "
           "same path, in the guest and in the simulator (seed 1, the trace from its start, "
           f"the same length); guest÷sim beyond 1 ± {AGREE_TOL:g} is marked.", "",
           "| trace | run | guest Mbit/s | sim Mbit/s | thr/cubic guest | thr/cubic sim "
           "| guest÷sim | p95 queue ms guest | sim | p95 queue/cubic guest | sim | guest÷sim "
           "| verdict |",
           "|---|---|" + "---:|" * 10 + "---|"]
    for e in entries:
        out.append(
            f"| {e['scenario']} | {e['run']} | {_f(e['guest_mbps'], '.1f')} "
            f"| {_f(e['sim_mbps'], '.1f')} | {_f(e['guest_thr'], '.2f')} "
            f"| {_f(e['sim_thr'], '.2f')} | {_f(e['thr_agree'], '.2f')} "
            f"| {_f(e['guest_q95_ms'], '.1f')} | {_f(e['sim_q95_ms'], '.1f')} "
            f"| {_f(e['guest_q95'], '.2f')} | {_f(e['sim_q95'], '.2f')} "
            f"| {_f(e['q95_agree'], '.2f')} | {e['verdict']} |")
    n = len(entries)
    agree = sum(1 for e in entries if e["verdict"] == "agree")
    out += ["", f"{agree} of {n} runs agree within ±{100 * AGREE_TOL:g} % on both ratios.", ""]
    return out


def run_vm(out: Path, scenarios: Iterable[Scenario], seconds: int, algs: list[str], *,
           split: str = "eval", quick: bool = False, test_sh: Path = TEST_SH,
           models: Path | None = None, netstats: bool = False,
           traces: Sequence[str] = (), rtt_ms: float = 40.0, buffer_bdp: float = 1.0,
           sim: bool = True, jobs: int = 2, agent: str | None = None,
           command: str | None = None) -> list[dict]:
    """Run ``scenarios`` in the guest and write ``OUT/vm_list.txt`` (what the guest got),
    ``OUT/vm_test.log`` (test.sh's output), ``OUT/vm_results.jsonl`` (one line per run, with
    its ratios) and ``OUT/vm_report.md``. Constant links (the ``links`` suite) run on tbf +
    netem; with ``traces`` (file names), the corpus scenarios of those recordings at
    ``rtt_ms`` and ``buffer_bdp`` run on the trace-driven link (:func:`trace_scenarios`), and,
    with ``sim``, in the simulator too: ``OUT/sim/`` holds its runs, ``OUT/vm_sim.jsonl`` their
    records, ``OUT/vm_sim_to_real.jsonl`` the comparison (:func:`sim_to_real`), which the
    report ends with. Returns the records of ``vm_results.jsonl``."""
    scenarios = list(scenarios)
    const = [sc for sc in scenarios if "trace" not in sc.link]
    traced = [sc for sc in scenarios if "trace" in sc.link]
    vms, skipped = vm_scenarios(const)
    tvms: list[VmScenario] = []
    if traces:
        tvms, tskipped = trace_scenarios(traced, traces, rtt_ms, buffer_bdp)
        skipped += tskipped
    else:
        skipped += vm_scenarios(traced)[1]
    vms += tvms
    for key, why in skipped:
        print(f"skipping {key}: {why}", file=sys.stderr)
    if not vms:
        raise MatrixError("no scenario the guest can run (constant links up to "
                          f"{MAX_RATE_MBPS:g} Mbit/s, one flow; or --traces of the corpus "
                          f"suite with a mean rate up to {MAX_TRACE_MEAN_MBPS:g} Mbit/s)")
    out.mkdir(parents=True, exist_ok=True)
    lst = out / "vm_list.txt"
    write_list(lst, vms)
    t0 = time.monotonic()
    res = run_guest(lst, seconds, algs, out / "vm_test.log", test_sh, models=models,
                    netstats=netstats)
    wall = time.monotonic() - t0
    kv = re.findall(r"kernels: (\S+) and", (out / "vm_test.log").read_text())
    rows = with_ratios(read_results(res))
    with (out / "vm_results.jsonl").open("w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    comparison = None
    if tvms and sim:
        byname = {sc.name: sc for sc in traced}
        recs = run_sim([byname[v.name] for v in tvms], algs, seconds, out / "sim", jobs, agent)
        with (out / "vm_sim.jsonl").open("w") as fh:
            for r in recs:
                fh.write(json.dumps({k: v for k, v in r.items() if k != "flows"}) + "\n")
        comparison = sim_to_real(rows, recs)
        with (out / "vm_sim_to_real.jsonl").open("w") as fh:
            for e in comparison:
                fh.write(json.dumps(e) + "\n")
    meta = {"split": split, "quick": quick, "seconds": seconds, "algs": algs,
            "scenarios": len(vms), "runs": len(rows), "wall_s": wall,
            "models": str(models) if models is not None else "models/", "netstats": netstats,
            "kernel": kv[0] if kv else None, "command": command,
            "suites": (["links"] if const else []) + (["corpus"] if tvms else []),
            "skipped": [list(s) for s in skipped]}
    (out / "vm_report.md").write_text(markdown(rows, skipped, meta, comparison))
    (out / "vm_meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    if comparison is not None:
        for r in rows:
            r["sim_to_real_problems"] = [e["problem"] for e in comparison
                                         if e["problem"] and e["scenario"] == r.get("scenario")
                                         and e["run"] == _label(r)]
    return rows


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m ccp_train.harness.vm",
        description="Kernel mode: the links suite's constant-link scenarios in the QEMU guest "
                    "(ops/vm/test.sh --eval): native cubic and bbr against ccp_<alg> under the "
                    "agent; throughput and RTT as ratios to the native runs. Writes "
                    "vm_results.jsonl and vm_report.md into --out.")
    p.add_argument("--out", type=Path, required=True, help="output folder (created)")
    p.add_argument("--split", choices=SPLITS, default="eval",
                   help="which links scenarios (default eval; this is a report)")
    p.add_argument("--quick", action="store_true", help="only the scenarios marked quick")
    p.add_argument("--seconds", type=int, default=10,
                   help="length of each transfer (default 10)")
    p.add_argument("--algs", type=comma_list, default=list(default_algs()),
                   help=f"the agent's algorithms (default: {','.join(default_algs())})")
    p.add_argument("--models", type=Path, default=None,
                   help="the agent's models and cards (default: the repository's models/)")
    p.add_argument("--suites", type=comma_list, default=["links"],
                   help="links (constant links, default) and/or corpus (recorded paths on the "
                        "guest's trace-driven link, with the simulator beside it)")
    p.add_argument("--traces", type=comma_list, default=list(VM_TRACES),
                   help="with --suites corpus: the recordings (file names) to run (default: "
                        f"{','.join(VM_TRACES)})")
    p.add_argument("--rtt", type=float, default=40.0,
                   help="with --suites corpus: the base RTT (ms) of the corpus suite to run "
                        "(default 40)")
    p.add_argument("--buffer", type=float, default=1.0,
                   help="with --suites corpus: the buffer (BDPs) of the corpus suite to run "
                        "(default 1)")
    p.add_argument("--no-sim", action="store_true",
                   help="with --suites corpus: no simulator runs and no sim-to-real table")
    p.add_argument("--jobs", type=int, default=2, help="simulator runs at once (default 2)")
    p.add_argument("--netstats", action="store_true",
                   help="run each ccp_<alg> without and with ccp-netstats-exporter in the "
                        "guest's router namespace (Owl's in-network statistics)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not 1 <= args.seconds <= 600:
        print(f"error: --seconds is {args.seconds}: use 1 to 600", file=sys.stderr)
        return 2
    bad = [a for a in args.algs if not re.fullmatch(r"[a-z0-9_]+", a)]
    if bad or not args.algs:
        print(f"error: --algs {','.join(args.algs)!r}: give algorithm names such as "
              f"{','.join(default_algs())}", file=sys.stderr)
        return 2
    bad_suites = [x for x in args.suites if x not in VM_SUITES]
    if bad_suites or not args.suites:
        print(f"error: --suites {','.join(args.suites)!r}: the kernel mode runs "
              f"{' and '.join(VM_SUITES)}", file=sys.stderr)
        return 2
    if args.jobs < 1:
        print(f"error: --jobs is {args.jobs}: use at least 1", file=sys.stderr)
        return 2
    traces = args.traces if "corpus" in args.suites else []
    try:
        scen = select(load_matrix(suites=list(args.suites)), args.split, quick=args.quick,
                      purpose="report")
        if args.models is not None and not sorted(args.models.glob("*.json")):
            print(f"error: --models {args.models}: no model cards (*.json) there; give the "
                  "folder a training run wrote (owl.onnx + owl.json)", file=sys.stderr)
            return 2
        cmd = "python -m ccp_train.harness.vm " + shlex.join(sys.argv[1:] if argv is None
                                                             else argv)
        rows = run_vm(args.out, scen, args.seconds, args.algs, split=args.split,
                      quick=args.quick, models=args.models, netstats=args.netstats,
                      traces=traces, rtt_ms=args.rtt, buffer_bdp=args.buffer,
                      sim=not args.no_sim, jobs=args.jobs, command=cmd)
    except MatrixError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print((args.out / "vm_report.md").read_text(), end="")
    bad_runs = [r for r in rows if not r.get("ok") or r.get("sim_to_real_problems")]
    print(f"{len(rows)} runs, {len(bad_runs)} with a problem; report: "
          f"{args.out / 'vm_report.md'}")
    return 1 if bad_runs else 0


if __name__ == "__main__":
    sys.exit(main())
