#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Small analyses for the guest tests (iperf3 JSON, agent flow logs, ss).

check.py thr SRV.json                  received Mbit/s over the whole test
check.py rtt CLI.json                  mean and p95 of the sender's smoothed RTT (ms) over
                                       its iperf3 intervals, and the number of samples
check.py retrans CLI.json              the sender's retransmitted segments
check.py window SRV.json T0 T1         received Mbit/s in [T0, T1) (seconds)
check.py gap SRV.json [T0 T1]          longest stretch without delivered data (s)
check.py creates FLOWLOG               "sid requested alg" per create event
check.py reports FLOWLOG SID           number of report events of a flow
check.py decisions FLOWLOG NAME [SID]  "sid alg decisions" of the flow that requested NAME
                                       (e.g. ccp_mocc; only socket id SID if given) with the
                                       most decisions: reports its controller decided on since
                                       its last create ("none none 0" if there is no such flow)
check.py backoff SAMPLES NAME          sid, median cwnd backoff, #samples of NAME's busiest flow
check.py pct FILE COL P...             percentiles of column COL (0-based) of FILE
check.py cpustat BEFORE AFTER          busy CPU seconds between two /proc/stat copies
check.py create_addrs FLOWLOG          per create event of an agent flow log, the addresses
                                       the datapath's CREATE told the agent: "sid alg src_ip
                                       src_port dst_ip dst_port"
check.py evalrun SRV.json CLI.json SAMPLES FLOWLOG SKIP CC [key=value...]
                                       one JSON line for the eval mode (guest/eval.sh): the
                                       key=value fields, throughput, RTT, retransmissions and,
                                       for CC ccp_*, attach status and the agent's algorithm
                                       (flow-log lines after the first SKIP)
check.py linkrate TRACE LINK.json RX [TOL]
                                       the trace link's delivered rate against its trace
                                       (guest/trace_link.sh): RX holds "t_before t_after
                                       rx_bytes rx_packets" samples of the receiver's veth
                                       (realtime; a read over 2 ms is dropped; or "uptime
                                       rx_bytes rx_packets"); per window of
                                       >= 1 s between samples, the IP bytes received against the
                                       trace's capacity over the same window shifted back by the
                                       link's forward delay (capacity read from TRACE here, apart
                                       from ccplink's own reading); only windows in which the link
                                       wasted < 1 % of the capacity on an empty queue count
                                       (saturated).  Prints "windows within_TOL(fraction)
                                       total_ratio median_abs_err max_abs_err" (TOL default
                                       0.10)
check.py tracecap TRACE SECONDS        the trace's capacity per second, "second Mbit/s"

A figure that cannot be measured is "none", never empty or 0: a missing,
empty or truncated file, a JSON without data (thr: no summary and no
intervals; window, gap: no interval in the window), any other error (the
error goes to stderr, the exit status is 1).  Commands that print several
fields print "none" in each (the guest tests read them with `read`).
"""
import bisect
import json
import math
import statistics
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def intervals(path):
    d = load(path)
    out = []
    for it in d.get("intervals", []):
        s = it["sum"]
        out.append((float(s["start"]), float(s["end"]), int(s["bytes"])))
    return out


class NoData(ValueError):
    """The file holds no measurement of what was asked."""


def thr(path):
    d = load(path)
    end = d.get("end", {})
    s = end.get("sum_received") or end.get("sum") or {}
    bps = s.get("bits_per_second")
    if bps is None:
        iv = intervals(path)
        dur = iv[-1][1] - iv[0][0] if iv else 0
        if not dur:
            raise NoData(f"{path}: no summary and no intervals (no transfer)")
        bps = sum(b for _, _, b in iv) * 8 / dur
    return bps / 1e6


def client(path):
    """An iperf3 client's JSON (the file may carry stray stderr lines around it)."""
    with open(path) as f:
        text = f.read()
    i = text.find("{")
    if i < 0:
        raise ValueError(f"{path}: no JSON object")
    return json.JSONDecoder().raw_decode(text[i:])[0]


def rtt(path):
    """Mean and p95 (ms) of the sender's srtt (TCP_INFO) at each interval's end,
    and the number of samples; zero samples (a flow that never got an ACK) are
    left out."""
    vals = []
    for it in client(path).get("intervals", []):
        for st in it.get("streams", []):
            r = st.get("rtt")
            if isinstance(r, (int, float)) and r > 0:
                vals.append(r / 1000.0)
    if not vals:
        return None, None, 0
    vals.sort()
    k = min(len(vals) - 1, max(0, int(round(0.95 * (len(vals) - 1)))))
    return sum(vals) / len(vals), vals[k], len(vals)


def retrans(path):
    s = client(path).get("end", {}).get("sum_sent")
    if not s or "retransmits" not in s:
        raise NoData(f"{path}: no sender summary")
    return int(s["retransmits"])


def window(path, t0, t1):
    by = 0
    dur = 0.0
    for s, e, b in intervals(path):
        lo, hi = max(s, t0), min(e, t1)
        if hi > lo and e > s:
            by += b * (hi - lo) / (e - s)
            dur += hi - lo
    if not dur:
        raise NoData(f"{path}: no interval in [{t0}, {t1})")
    return by * 8 / dur / 1e6


def gap(path, t0=None, t1=None):
    """The longest stretch without delivered data: intervals with no bytes and, in a
    window [T0, T1), time the intervals do not cover (a transfer that ended early, or
    started late, left the rest of the window without data)."""
    iv = intervals(path)
    if t0 is not None:
        iv = [x for x in iv if x[1] > t0 and x[0] < t1]
    if not iv:
        raise NoData(f"{path}: no interval" + ("" if t0 is None else f" in [{t0}, {t1})"))
    longest = cur = 0.0
    upto = iv[0][0] if t0 is None else t0    # covered (or counted) up to here
    for s, e, b in iv:
        if s > upto:    # not covered by any interval
            cur += s - upto
            longest = max(longest, cur)
        if b == 0:
            cur += e - max(s, upto)
            longest = max(longest, cur)
        else:
            cur = 0.0
        upto = max(upto, e)
    if t1 is not None and t1 > upto:
        longest = max(longest, cur + t1 - upto)
    return longest


def flowlog(path, skip=0):
    """The events of an agent flow log, after its first SKIP lines."""
    ev = []
    with open(path) as f:
        for i, line in enumerate(f):
            if i < skip:
                continue
            line = line.strip()
            if not line:
                continue
            try:
                ev.append(json.loads(line))
            except ValueError:
                pass
    return ev


def decisions(path, name, only=None):
    """Per flow that requested NAME: the reports its controller decided on (the
    "reports" of its report and close events) since its last create; the flow
    with the most."""
    alg, dec = {}, {}
    for e in flowlog(path):
        sid, ev = e.get("sid"), e.get("event")
        if ev == "create":
            if e.get("requested") == name and only in (None, sid):
                alg[sid], dec[sid] = e.get("alg"), 0
            else:
                alg.pop(sid, None)
                dec.pop(sid, None)
        elif ev in ("report", "close") and sid in dec:
            try:
                dec[sid] = max(dec[sid], int(e.get("reports") or 0))
            except (TypeError, ValueError):
                pass
    if not dec:
        return None, None, 0
    sid = max(dec, key=lambda s: dec[s])
    return sid, alg[sid], dec[sid]


def backoff(path, name):
    """The busiest flow of congestion control NAME in sample_flows output
    ("uptime sid alg mode cwnd ..." lines): its sid, the median ratio
    cwnd_after/cwnd_before over its window reductions (> 15%, while under
    agent control), and its number of samples."""
    series = {}
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) < 5 or p[2] != name or p[3] != "ccp":
                continue
            try:
                series.setdefault(int(p[1]), []).append(int(p[4]))
            except ValueError:
                pass
    if not series:
        return None, None, 0
    sid, s = max(series.items(), key=lambda kv: (max(kv[1]), len(kv[1])))
    ratios = []
    for prev, cur in zip(s, s[1:]):
        if cur < 0.85 * prev and prev >= 10:
            ratios.append(cur / prev)
    return sid, (statistics.median(ratios) if ratios else None), len(s)


def pct(path, col, ps):
    vals = []
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                continue
            parts = line.split()
            if len(parts) > col:
                vals.append(float(parts[col]))
    vals.sort()
    if not vals:
        raise NoData(f"{path}: no values in column {col}")
    out = []
    for p in ps:
        k = min(len(vals) - 1, max(0, int(round(p / 100.0 * (len(vals) - 1)))))
        out.append(vals[k])
    return out


def attach(samples, cc):
    """Snapshots of sample lines ("uptime sid alg mode cwnd ...") in which a flow
    named CC shows, and in how many of them its data flow (the largest cwnd) was
    under agent control (mode ccp)."""
    snaps = {}
    try:
        with open(samples) as f:
            for line in f:
                p = line.split()
                if len(p) < 5 or p[2] != cc:
                    continue
                try:
                    snaps.setdefault(p[0], []).append((int(p[4]), p[3]))
                except ValueError:
                    pass
    except OSError:
        return 0, 0
    ccp = sum(1 for flows in snaps.values() if max(flows)[1] == "ccp")
    return ccp, len(snaps)


def evalrun(srv, cli, samples, flowlog_path, skip, cc, fields):
    rec = {}
    for kv in fields:
        k, _, v = kv.partition("=")
        if k == "error" and not v:
            continue
        try:
            rec[k] = int(v)
        except ValueError:
            try:
                rec[k] = float(v)
            except ValueError:
                rec[k] = v
    rec["cc"] = cc
    errs = [rec.pop("error")] if "error" in rec else []
    if "linkstats" in rec:
        try:
            rec.update(link_fields(str(rec.pop("linkstats"))))
        except (OSError, ValueError, KeyError, TypeError) as e:
            errs.append(f"trace link statistics: {e}")
    try:
        rec["throughput_mbps"] = round(thr(srv), 3)
    except (OSError, ValueError, KeyError, TypeError) as e:
        rec["throughput_mbps"] = None
        errs.append(f"receiver JSON: {e}")
    try:
        m, p95, n = rtt(cli)
        rec["rtt_mean_ms"] = None if m is None else round(m, 3)
        rec["rtt_p95_ms"] = None if p95 is None else round(p95, 3)
        rec["rtt_samples"] = n
        rec["retransmits"] = retrans(cli)
    except (OSError, ValueError, KeyError, TypeError) as e:
        rec["rtt_mean_ms"] = rec["rtt_p95_ms"] = rec["retransmits"] = None
        rec["rtt_samples"] = 0
        errs.append(f"sender JSON: {e}")
    if cc.startswith("ccp_"):
        k, n = attach(samples, cc)
        rec["attach_samples"] = [k, n]
        # under agent control in at least 90 % of the snapshots that saw it
        rec["attached"] = n > 0 and k >= 0.9 * n
        algs = set()
        try:
            for e in flowlog(flowlog_path, int(skip)):
                if e.get("event") == "create" and e.get("requested") == cc:
                    algs.add(str(e.get("alg")))
        except (OSError, ValueError):
            pass
        rec["agent_algs"] = sorted(algs)
    else:
        rec["attached"] = None
    if errs:
        rec["error"] = "; ".join(errs)
    return rec


# ---------------------------------------------------------------- trace link
OPP_BYTES = 1500


class Trace:
    """A trace's capacity as the simulator reads it (datapath/sim/src/trace.rs): a mahimahi
    file (an opportunity of 1500 bytes per ms line, repeating with period = the last) or a
    throughput log (time_s rate_mbps, each rate held to the next sample, the last for the
    median interval, repeating).  Written apart from ccplink.c, as its oracle."""

    def __init__(self, path):
        rows = []
        with open(path) as f:
            for line in f:
                s = line.strip()
                if s and not s.startswith("#"):
                    rows.append(s.split())
        if not rows:
            raise ValueError(f"{path}: empty trace")
        self.log = path.endswith(".tput") or len(rows[0]) == 2
        if self.log:
            smp = []
            for t, r in ((float(a), float(b)) for a, b in rows):
                if smp and t == smp[-1][0]:
                    smp[-1] = (t, r)
                else:
                    smp.append((t, r))
            t0 = smp[0][0]
            gaps = sorted(b[0] - a[0] for a, b in zip(smp, smp[1:]))
            hold = gaps[len(gaps) // 2] if gaps else 1.0
            self.starts = [t - t0 for t, _ in smp]
            self.rates = [r * 1e6 for _, r in smp]  # bit/s
            self.period = smp[-1][0] - t0 + hold
            self.cum = [0.0]
            for i, r in enumerate(self.rates):
                end = self.starts[i + 1] if i + 1 < len(self.starts) else self.period
                self.cum.append(self.cum[-1] + (end - self.starts[i]) * r)
        else:
            self.ms = [int(r[0]) for r in rows]
            self.period_ms = self.ms[-1]
            if self.period_ms <= 0:
                raise ValueError(f"{path}: period 0")

    def bits_before(self, t):
        """Capacity (bits) over [0, t) seconds of the trace's clock."""
        if t <= 0:
            return 0.0
        if self.log:
            c = math.floor(t / self.period)
            tau = t - c * self.period
            i = max(bisect.bisect_right(self.starts, tau) - 1, 0)
            return (c * self.cum[-1] + self.cum[i]
                    + max(tau - self.starts[i], 0.0) * self.rates[i])
        ms = t * 1000.0
        c = math.floor(ms / self.period_ms)
        tau = ms - c * self.period_ms
        # opportunities at times < t: whole cycles, then this cycle's lines before tau
        n = c * len(self.ms) + bisect.bisect_left(self.ms, tau)
        return n * OPP_BYTES * 8.0

    def bytes_in(self, a, b):
        return (self.bits_before(b) - self.bits_before(a)) / 8.0


#: a counter sample whose read took longer than this has no time to go with it
READ_SLACK_S = 0.002


def linkrate(trace_path, link_path, rx_path, tol=0.10):
    tr = Trace(trace_path)
    with open(link_path) as f:
        ln = json.load(f)
    if not ln.get("started"):
        raise ValueError("the link's clock never started (no data reached it)")
    if ln.get("write_errors"):
        raise ValueError(f"the link failed {ln['write_errors']} writes (ccplink.log says which)")
    fwd = float(ln["fwd_ms"]) / 1e3
    bin_s = float(ln["bin_ms"]) / 1e3
    waste = ln["wasted_bytes_bins"]
    smp = []
    start = None
    with open(rx_path) as f:
        for line in f:
            p = line.split()
            if len(p) == 3:  # uptime bytes packets (CLOCK_BOOTTIME)
                start = float(ln["start_boottime_s"])
                smp.append((float(p[0]), int(p[1]), int(p[2])))
            elif len(p) == 4:  # realtime before and after the read, bytes, packets
                start = float(ln["start_realtime_s"])
                t0, t1 = float(p[0]), float(p[1])
                if t1 - t0 <= READ_SLACK_S:  # else the read was interrupted: no time for it
                    smp.append(((t0 + t1) / 2, int(p[2]), int(p[3])))
    if start is None:
        raise ValueError(f"{rx_path}: no samples")
    errs, got_all, cap_all = [], 0.0, 0.0
    i = 0
    while i < len(smp):
        j = next((k for k in range(i + 1, len(smp)) if smp[k][0] - smp[i][0] >= 1.0), None)
        if j is None:
            break
        (u0, b0, p0), (u1, b1, p1) = smp[i], smp[j]
        i = j
        a, b = u0 - start - fwd, u1 - start - fwd
        if a < 0 or b > len(waste) * bin_s:
            continue
        cap = tr.bytes_in(a, b)
        wasted = sum(waste[int(a / bin_s):int(b / bin_s) + 1])
        if cap <= 0 or wasted > 0.01 * cap:
            continue
        got = (b1 - b0) - 14 * (p1 - p0)  # IP bytes: less the Ethernet header
        errs.append(got / cap - 1.0)
        got_all += got
        cap_all += cap
    if not errs:
        raise ValueError("no saturated window of >= 1 s")
    within = sum(1 for e in errs if abs(e) <= tol) / len(errs)
    return (len(errs), within, got_all / cap_all, statistics.median(abs(e) for e in errs),
            max(abs(e) for e in errs))


def link_fields(path):
    """A ccplink statistics file's figures for an eval record (guest/eval.sh)."""
    with open(path) as f:
        ln = json.load(f)
    soj = ln.get("sojourn_ms") or {}
    cap = sum(ln.get("cap_bytes") or [])
    return {"link_queue_p95_ms": soj.get("p95"), "link_queue_p50_ms": soj.get("p50"),
            "link_queue_mean_ms": None if soj.get("mean") is None else round(soj["mean"], 3),
            "link_drops": ln.get("drops"), "link_in_pkts": ln.get("in_pkts"),
            "link_buffer_pkts": ln.get("buffer_pkts"),
            "link_utilization": (round(ln["deliv_bytes"] / cap, 4) if cap else None),
            "link_elapsed_s": ln.get("elapsed_s"), "link_write_errors": ln.get("write_errors"),
            "link_late_p99_ms": (ln.get("late_ms") or {}).get("p99"),
            "link_late_max_ms": (ln.get("late_ms") or {}).get("max")}


def cpustat(before, after):
    def busy(path):
        with open(path) as f:
            for line in f:
                if line.startswith("cpu "):
                    v = [int(x) for x in line.split()[1:]]
                    # user nice system idle iowait irq softirq steal
                    return v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
        return 0
    return (busy(after) - busy(before)) / 100.0


def create_addrs(path):
    """Per create event of an agent flow log: what the datapath's CREATE told the
    agent, "sid requested src_ip src_port dst_ip dst_port" (the agent writes the
    CREATE's addresses as it read them)."""
    for e in flowlog(path):
        if e.get("event") != "create":
            continue
        ends = []
        for k in ("src", "dst"):
            ip, _, port = str(e.get(k) or "none:none").rpartition(":")
            ends += [ip or "none", port or "none"]
        print(e.get("sid"), e.get("requested"), *ends)


# fields printed per command ("none" each when the figure cannot be measured)
FIELDS = {"rtt": 3, "decisions": 3, "backoff": 3, "linkrate": 5}


def main(a):
    cmd = a[0]
    if cmd == "thr":
        print(f"{thr(a[1]):.2f}")
    elif cmd == "rtt":
        m, p95, n = rtt(a[1])
        print(f"{m:.2f}" if m is not None else "none",
              f"{p95:.2f}" if p95 is not None else "none", n)
    elif cmd == "retrans":
        print(retrans(a[1]))
    elif cmd == "window":
        print(f"{window(a[1], float(a[2]), float(a[3])):.2f}")
    elif cmd == "gap":
        if len(a) > 3:
            print(f"{gap(a[1], float(a[2]), float(a[3])):.2f}")
        else:
            print(f"{gap(a[1]):.2f}")
    elif cmd == "create_addrs":
        create_addrs(a[1])
    elif cmd == "creates":
        for e in flowlog(a[1]):
            if e.get("event") == "create":
                print(e.get("sid"), e.get("requested"), e.get("alg"))
    elif cmd == "reports":
        sid = int(a[2])
        print(sum(1 for e in flowlog(a[1])
                  if e.get("event") == "report" and e.get("sid") == sid))
    elif cmd == "decisions":
        sid, alg, n = decisions(a[1], a[2], int(a[3]) if len(a) > 3 else None)
        print(sid if sid is not None else "none", alg or "none", n)
    elif cmd == "backoff":
        sid, r, n = backoff(a[1], a[2])
        print(sid if sid is not None else "none",
              f"{r:.2f}" if r is not None else "none", n)
    elif cmd == "pct":
        print(" ".join(str(int(x)) if isinstance(x, float) else x
                       for x in pct(a[1], int(a[2]), [float(p) for p in a[3:]])))
    elif cmd == "evalrun":
        print(json.dumps(evalrun(a[1], a[2], a[3], a[4], a[5], a[6], a[7:])))
    elif cmd == "linkrate":
        n, within, ratio, med, mx = linkrate(a[1], a[2], a[3],
                                             float(a[4]) if len(a) > 4 else 0.10)
        print(n, f"{within:.3f}", f"{ratio:.4f}", f"{med:.4f}", f"{mx:.4f}")
    elif cmd == "tracecap":
        tr = Trace(a[1])
        for k in range(int(a[2])):
            print(k, f"{tr.bytes_in(k, k + 1) * 8 / 1e6:.4f}")
    elif cmd == "cpustat":
        print(f"{cpustat(a[1], a[2]):.2f}")
    else:
        print("none")
        print(__doc__, file=sys.stderr)
        return 2
    return 0


def run(a):
    """main, but any error prints "none" (one per field) and exits 1."""
    try:
        return main(a)
    except Exception as e:  # noqa: BLE001 - any failure is "no measurement"
        cmd = a[0] if a else ""
        n = len(a) - 3 if cmd == "pct" else FIELDS.get(cmd, 1)
        print(" ".join(["none"] * max(n, 1)), flush=True)
        print(f"check.py {' '.join(a)}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
