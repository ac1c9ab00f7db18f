#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Per-socket preferences in the guest (tests.sh, test pref_two_sockets).

prefflow.py sink PORT OUT.json              accept one TCP connection, count the bytes
                                            received every 100 ms until EOF (by the
                                            kernel's receive time of each read: sink())
prefflow.py send HOST PORT SECONDS OUT.json [--cc NAME] [--bind-port P]
             [--pref THR,LAT,LOSS --control PATH]
                                            a sender socket with TCP_CONGESTION NAME
                                            (default ccp_mocc); with --pref it sets its own
                                            preference through the agent's control socket
                                            right after connect (ccp_train.pref, the helper
                                            an application would use); sends for SECONDS and
                                            samples its srtt (TCP_INFO) every 100 ms
prefflow.py thr SINK.json T0 T1             received Mbit/s in [T0, T1) s
prefflow.py flowlog FLOWLOG LOCAL           "w w_source" of the socket LOCAL ("ip:port") in
                                            the agent's flow log: its create, or the last
                                            pref event after it ("none none" if absent)
prefflow.py created FLOWLOG LOCAL           "requested alg" of LOCAL's create line
prefflow.py choose TABLE THR,LAT,LOSS       the algorithm models/portfolio.json names for w
                                            (an oracle written apart from the agent's and
                                            ccp_train.portfolio's: arg max of w.o over the
                                            'all' class, MOCC's entry the nearest landmark)
prefflow.py switch-table                    a portfolio table for test auto_switch: Cubic
                                            first, BBR on "links", Cubic on "cellular"; a
                                            hand-set classifier (mean RTT over 2.2x the
                                            flow's minimum is "cellular"), first decision
                                            at 5 s
prefflow.py switches FLOWLOG LOCAL          LOCAL's switches in the flow log, as
                                            "from>to:class@flow_s" words
prefflow.py around SINK SEND FLOWLOG LOCAL BASE_MS
                                            "ok ..." if around every switch of LOCAL no
                                            100 ms interval of the 2 s after it received
                                            less than half the mean rate of the second
                                            before, and no srtt sample rose more than
                                            BASE_MS above that second's mean; else "FAIL ..."
"""

import json
import os
import socket
import struct
import sys
import time

REPO = os.environ.get("REPO", os.path.dirname(os.path.abspath(__file__)) + "/../../..")


# SO_TIMESTAMPNS (SO_TIMESTAMPNS_OLD: 35 on x86 and asm-generic; Python names it from 3.14)
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
READ_CHUNK = 64 * 1024


def sink(port, out):
    """Count the bytes received in each 100 ms slot since accept.

    A byte counts when the kernel received it, not when this reader got the CPU: with
    SO_TIMESTAMPNS each read carries the receive time of the last segment it returned, and
    reads are at most 64 KiB (about 11 ms at 50 Mbit/s). By the reader's clock, a TCG guest
    that keeps the reader off the CPU for 100 ms shows a slot at a third of the link's rate
    followed by one at 1.7 times it (seen: 15.4 then 80.2 Mbit/s on a 50 Mbit/s link), which
    reads as a stall of the flow that never happened on the wire. Reads without a timestamp
    fall back to the reader's clock; the output says how many bytes each clock counted.
    """
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(1)
    with open(out + ".ready", "w"):
        pass
    srv.settimeout(120)
    c, peer = srv.accept()
    t0_real = time.clock_gettime(time.CLOCK_REALTIME)  # the timestamps' clock
    t0 = time.monotonic()
    try:
        c.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        pass
    c.settimeout(30)
    buf = bytearray(READ_CHUNK)
    anc = socket.CMSG_SPACE(16)
    slots: dict[int, int] = {}
    total = 0
    by_clock = {"kernel": 0, "reader": 0}
    while True:
        try:
            n, cmsgs, _flags, _addr = c.recvmsg_into([buf], anc)
        except OSError:
            break
        if n == 0:
            break
        total += n
        at = None
        for level, kind, data in cmsgs:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
                sec, nsec = struct.unpack_from("qq", data)
                at = sec + nsec * 1e-9 - t0_real
        if at is None:
            at = time.monotonic() - t0
            by_clock["reader"] += n
        else:
            by_clock["kernel"] += n
        k = max(int(at * 10), 0)  # segments that arrived before accept count in slot 0
        slots[k] = slots.get(k, 0) + n
    with open(out, "w") as f:
        json.dump({"peer": f"{peer[0]}:{peer[1]}", "bytes": total, "bytes_by_clock": by_clock,
                   "intervals": sorted(slots.items())}, f)


def send(host, port, secs, out, cc="ccp_mocc", bind_port=None, w=None, control=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
    if bind_port:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", bind_port))
    s.connect((host, port))
    res = {"local": "%s:%d" % s.getsockname()[:2]}
    if w is not None:
        sys.path.insert(0, os.path.join(REPO, "train", "ccp_train"))
        import pref  # ccp_train/pref.py: the standard library only

        try:
            res["reply"] = pref.set_preference(s, w, control=control)
        except (pref.PreferenceError, pref.ControlError) as e:
            res["error"] = str(e)
    s.settimeout(1.0)
    buf = bytes(256 * 1024)
    srtt = []
    t0 = time.monotonic()
    nxt = t0 + 0.1
    sent = 0
    while True:
        now = time.monotonic()
        if now - t0 >= secs:
            break
        if now >= nxt:
            info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
            srtt.append(struct.unpack_from("I", info, 68)[0] / 1000.0)  # tcpi_rtt, µs
            nxt += 0.1
        try:
            sent += s.send(buf)
        except TimeoutError:
            pass
    s.close()
    res.update({"sent": sent, "srtt_ms": srtt})
    with open(out, "w") as f:
        json.dump(res, f)


def thr(path, t0, t1):
    d = json.load(open(path))
    b = sum(n for k, n in d["intervals"] if t0 <= k / 10 < t1)
    return b * 8 / (t1 - t0) / 1e6


def events(path):
    """The flow log's events (JSON lines; a torn line is skipped)."""
    for line in open(path):
        try:
            yield json.loads(line)
        except ValueError:
            continue


def flowlog(path, local):
    w = src = "none"
    sid = None
    for e in events(path):
        if e.get("event") == "create" and e.get("src") == local:
            sid = e.get("sid")
            w, src = ",".join(str(x) for x in e["w"]), e.get("w_source")
        elif e.get("event") == "pref" and sid is not None and e.get("sid") == sid:
            w, src = ",".join(str(x) for x in e["w"]), e.get("w_source")
    return f"{w} {src}"


def created(path, local):
    for e in events(path):
        if e.get("event") == "create" and e.get("src") == local:
            return f"{e.get('requested')} {e.get('alg')}"
    return "none none"


def choose(table, w):
    # The guest test's own reading of the table's rule (the "all" class, nearest landmark
    # per algorithm, arg max of w . o): an independent oracle for what the agent under test
    # must pick. Everything else (reports, the table builder) uses the agent's own rule,
    # train/ccp_train/portfolio.choose through the bindings.
    best = {}
    for e in json.load(open(table))["classes"]["all"]:
        d = 0.0 if e["w"] is None else sum(abs(a - b) for a, b in zip(e["w"], w))
        u = sum(a * b for a, b in zip(w, e["o"]))
        if e["alg"] not in best or d < best[e["alg"]][0]:
            best[e["alg"]] = (d, u)
    return max(sorted(best), key=lambda a: best[a][1])


SWITCH_TABLE = {
    "version": 1, "default_class": "all",
    "classes": {
        "all": [{"alg": "cubic", "w": None, "o": [0.9, 0.6, 0.99]},
                {"alg": "bbr", "w": None, "o": [0.8, 0.6, 0.99]}],
        "links": [{"alg": "cubic", "w": None, "o": [0.8, 0.6, 0.99]},
                  {"alg": "bbr", "w": None, "o": [0.9, 0.6, 0.99]}],
        "cellular": [{"alg": "cubic", "w": None, "o": [0.9, 0.6, 0.99]},
                     {"alg": "bbr", "w": None, "o": [0.8, 0.6, 0.99]}],
    },
    "classifier": {
        "bin_ms": 200, "window_s": 3, "min_s": 5, "hold_s": 2,
        "features": ["rate_iqr", "rtt_iqr", "inflation", "loss", "busy_rate_iqr",
                     "busy_frac"],
        # score = ln(1 + 10 inflation) - ln 13 > 0: a mean RTT above 2.2x the minimum
        "weights": [0, 0, 1, 0, 0, 0], "bias": -2.5649493574615367,
        "above": "cellular", "below": "links",
    },
}


def switch_events(path, local):
    """LOCAL's switch lines of the flow log."""
    sid = None
    out = []
    for e in events(path):
        if e.get("event") == "create":
            if e.get("src") == local:
                sid = e.get("sid")
            elif e.get("sid") == sid:
                sid = None  # the socket id went to another flow
        elif e.get("event") == "switch" and sid is not None and e.get("sid") == sid:
            out.append(e)
    return out


def switches(path, local):
    """(from, to, class, flow_s) of LOCAL's switches."""
    return [(e.get("from"), e.get("alg"), e.get("class"), float(e.get("flow_s", 0)))
            for e in switch_events(path, local)]


def around(sink_path, send_path, flowlog_path, local, base_ms):
    d = json.load(open(sink_path))
    rx = dict(d["intervals"])  # 100 ms slot -> bytes
    srtt = json.load(open(send_path))["srtt_ms"]  # one sample per 100 ms from the start
    sw = switch_events(flowlog_path, local)
    if not sw:
        return "FAIL no switch"
    notes = []
    for e in sw:
        a, b, at = e.get("from"), e.get("alg"), float(e.get("flow_s", 0))
        k = int(at * 10)
        before = [rx.get(i, 0) for i in range(k - 10, k)]
        rate = sum(before) / len(before)
        rb = [x for x in srtt[max(k - 10, 0):k] if x > 0]
        rtt = sum(rb) / len(rb) if rb else 0.0
        # what a failure needs to be read: the window and rate handed over, and what the
        # sender kept in flight over the second before (rate x srtt)
        handed = (f" (handed {e.get('cwnd_bytes')} B at "
                  f"{(e.get('delivery_rate_bps') or 0) * 8e-6:.1f} Mbit/s; in flight before "
                  f"about {rate * 10 * rtt / 1e3:.0f} B)")
        for i in range(k, k + 20):
            if rx.get(i, 0) < 0.5 * rate:
                return (f"FAIL {a}>{b}@{at:.2f}: {rx.get(i, 0) * 8e-5:.1f} Mbit/s at "
                        f"{i / 10:.1f} s, below half of {rate * 8e-5:.1f} before{handed}")
            if i < len(srtt) and rb and srtt[i] > rtt + base_ms:
                return (f"FAIL {a}>{b}@{at:.2f}: srtt {srtt[i]:.1f} ms at {i / 10:.1f} s, "
                        f"more than {base_ms:g} ms above {rtt:.1f} before{handed}")
        notes.append(f"{a}>{b}@{at:.1f}s rate {rate * 8e-5:.1f} Mbit/s srtt {rtt:.1f} ms")
    return "ok " + "; ".join(notes)


def main(a):
    if a[0] == "sink":
        sink(int(a[1]), a[2])
    elif a[0] == "send":
        host, port, secs, out = a[1], int(a[2]), float(a[3]), a[4]
        opts = dict(zip(a[5::2], a[6::2], strict=False))
        w = opts.get("--pref")
        send(host, port, secs, out, cc=opts.get("--cc", "ccp_mocc"),
             bind_port=int(opts["--bind-port"]) if "--bind-port" in opts else None,
             w=[float(x) for x in w.split(",")] if w else None,
             control=opts.get("--control"))
    elif a[0] == "thr":
        print(f"{thr(a[1], float(a[2]), float(a[3])):.2f}")
    elif a[0] == "flowlog":
        print(flowlog(a[1], a[2]))
    elif a[0] == "created":
        print(created(a[1], a[2]))
    elif a[0] == "choose":
        print(choose(a[1], [float(x) for x in a[2].split(",")]))
    elif a[0] == "switch-table":
        print(json.dumps(SWITCH_TABLE))
    elif a[0] == "switches":
        print(" ".join(f"{x}>{y}:{c}@{t:.2f}" for x, y, c, t in switches(a[1], a[2])))
    elif a[0] == "around":
        print(around(a[1], a[2], a[3], a[4], float(a[5])))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
