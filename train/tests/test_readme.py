"""The README's commands run as written (issue 44).

Every command line of the README's ``sh`` blocks is classified here: the quick ones run
exactly as the README prints them (from the repository root, as a fresh clone would), and
their output is checked; the long ones (training, the harness, reproducing a model) are not
run, but their entry points are, with ``--help``, and every flag the README gives them must
be one they accept. A command added to the README without a class here fails
``test_every_readme_command_is_classified``.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def readme_commands() -> list[str]:
    """The command lines of the README's sh blocks (comments and continuation lines off)."""
    text = README.read_text(encoding="utf-8")
    out: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue  # a comment continuing the line above
            out.append(re.sub(r"\s+#.*$", "", line).strip())
    return out


def readme_text() -> str:
    return README.read_text(encoding="utf-8")


def run(cmd: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", cmd],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def rows(stdout: str) -> dict[int, list[str]]:
    """The agent's table: flow id -> the row's fields."""
    out = {}
    for line in stdout.splitlines():
        f = line.split()
        if f and f[0].isdigit():
            out[int(f[0])] = f
    return out


# --- the quick commands: run as written ---------------------------------------------------


def check_portfolio(p: subprocess.CompletedProcess[str]) -> None:
    r = rows(p.stdout)
    assert len(r) == 8, p.stdout
    algs = [r[i][1] for i in range(8)]
    assert algs[:5] == ["cubic*", "bbr", "mocc", "owl", "iris"], p.stdout
    # the auto flows were chosen by their preference, each for one of the algorithms that ran
    assert all(a.startswith("auto→") for a in algs[5:]), p.stdout
    assert algs[5] != algs[6], f"two preferences, one choice: {p.stdout}"
    # the third one switched once it knew the path (the README says so)
    assert algs[7].count("→") == 2 and algs[7].split("→")[1] != algs[7].split("→")[2], p.stdout
    for i in range(8):
        mbps, util = float(r[i][3]), float(r[i][4])
        assert mbps > 1.0 and 0.1 < util <= 1.0, r[i]
    # the learned models loaded: no fallback to the default algorithm
    assert "not available" not in p.stderr and "using the default" not in p.stderr, p.stderr


def check_flags_applied(p: subprocess.CompletedProcess[str]) -> None:
    r = rows(p.stdout)
    assert r[0][1] == "mocc*" and r[0][2] == "0.10,0.80,0.10*", p.stdout
    assert r[1][1] == "bbr" and r[1][2] == "0.10,0.80,0.10*", p.stdout
    assert r[6][2] == "0.80,0.10,0.10", p.stdout  # the scenario's own w
    assert "note: --alg mocc runs flow 0; flows 1-7" in p.stderr, p.stderr
    assert "note: --w 0.1,0.8,0.1 applies to flows 0-4; flows 5-7" in p.stderr, p.stderr


def check_plot(path: str):
    def check(p: subprocess.CompletedProcess[str]) -> None:
        svg = Path(path).read_text(encoding="utf-8")
        assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>"), svg[:200]
        for title in ("throughput", "queueing delay", "congestion window", "pacing rate"):
            assert title in svg, title
        assert svg.count("<path ") >= 3 * len(rows(p.stdout)), "a line per flow and panel"

    return check


def check_rtt_unfair(p: subprocess.CompletedProcess[str]) -> None:
    r = rows(p.stdout)
    assert [f[1] for f in r.values()] == ["bbr*"] * 3, p.stdout
    assert "note:" not in p.stderr, p.stderr  # the scenario names no alg and no w
    check_plot("/tmp/rtt.svg")(p)


def check_list(p: subprocess.CompletedProcess[str]) -> None:
    algs = next(line for line in p.stdout.splitlines() if line.startswith("algorithms:"))
    for name in ("cubic", "bbr", "reno", "iris", "mocc", "owl"):
        assert name in algs, p.stdout


def check_corpus(p: subprocess.CompletedProcess[str]) -> None:
    for split in ("train", "tune", "eval"):
        assert split in p.stdout, p.stdout


def check_capgen(p: subprocess.CompletedProcess[str]) -> None:
    lines = Path("/tmp/x.tput").read_text(encoding="utf-8").split("\n")
    samples = [ln for ln in lines if ln.strip() and not ln.startswith("#")]
    assert len(samples) >= 60, len(samples)


PY = ".venv/bin/python -m ccp_train."
AGENT = "target/release/ccp-agent"

QUICK = {
    "bash ops/run.sh": check_portfolio,
    "bash ops/run.sh --alg mocc --w 0.1,0.8,0.1": check_flags_applied,
    "bash ops/run.sh --plot /tmp/portfolio.svg": check_plot("/tmp/portfolio.svg"),
    f"{AGENT} --sim datapath/sim/scenarios/rtt-unfair.toml --alg bbr --plot /tmp/rtt.svg": (
        check_rtt_unfair
    ),
    f"{AGENT} --list": check_list,
    f"{PY}corpus summary": check_corpus,
    f"{PY}capgen sample --kind 5g --duration-s 60 --seed 1 --out /tmp/x.tput": check_capgen,
}

# --- the long ones: the entry point answers --help and knows every flag the README gives ---

SLOW = {
    f"{PY}portfolio build": f"{PY}portfolio build --help",
    f"{PY}pathclass fit": f"{PY}pathclass fit --help",
    "bash ops/eval.sh --split tune --algs mocc,cubic,bbr --suites cellular --out /tmp/t": (
        f"{PY}harness --help"
    ),
    f"{PY}mocc train --out /tmp/m --seed 1": f"{PY}mocc train --help",
    f"{PY}jury train --out /tmp/j --seed 1": f"{PY}jury train --help",
    f"{PY}owl train --out /tmp/o --seed 1": f"{PY}owl train --help",
    f"{PY}nuwa train --out /tmp/n --seed 1": f"{PY}nuwa train --help",
    "bash ops/reproduce.sh models/owl.json": f"{PY}reproduce --help",
}

# --- not run here: the test suite itself, and the kernel datapath (root, a module) -------

ELSEWHERE = {
    "bash ops/test.sh": "this is the test suite",
    "make -C datapath/kernel && sudo insmod datapath/kernel/ccp-kernel.ko"
    f" && sudo {AGENT} --alg mocc --w 0.4,0.5,0.1": "root and a kernel module (the QEMU suite)",
    "make -C datapath/bpf && sudo datapath/bpf/build/ccp-bpf load"
    f" && sudo {AGENT} --alg mocc": "root and BPF struct_ops (the QEMU suite's bpf.sh)",
}


def test_every_readme_command_is_classified() -> None:
    cmds = readme_commands()
    assert "bash ops/run.sh" in cmds and "bash ops/test.sh" in cmds, cmds
    known = QUICK.keys() | SLOW.keys() | ELSEWHERE.keys()
    unknown = [c for c in cmds if c not in known]
    assert not unknown, f"README commands this test does not know: {unknown}"


@pytest.mark.parametrize("cmd", list(QUICK))
def test_quick_readme_command_runs(cmd: str) -> None:
    assert cmd in readme_text(), f"not in the README as written: {cmd}"
    p = run(cmd)
    assert p.returncode == 0, f"{cmd}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    QUICK[cmd](p)


@pytest.mark.parametrize("cmd", list(SLOW))
def test_long_readme_command_accepts_its_flags(cmd: str) -> None:
    assert cmd in readme_text(), f"not in the README as written: {cmd}"
    p = run(SLOW[cmd], timeout=120)
    assert p.returncode == 0, f"{SLOW[cmd]}: exit {p.returncode}\n{p.stderr}"
    for flag in (a.split("=")[0] for a in shlex.split(cmd) if a.startswith("--")):
        assert flag in p.stdout, f"{cmd}: {flag} is not in `{SLOW[cmd]}`:\n{p.stdout}"
    for arg in shlex.split(cmd):
        if arg.startswith(("models/", "datapath/", "ops/")):
            assert (ROOT / arg).exists(), arg


def test_no_pointer_outside_the_clone() -> None:
    """Nothing tracked points at files a clone does not have (the papers are cited by title,
    venue and DOI: docs/papers.md)."""
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    bad = []
    # the folder beside the repository that a clone lacks (spelled in parts, so that this
    # file is not itself a pointer to it)
    beside = "sha" + "red"
    pattern = re.compile(rf"{beside}/papers|\.\./{beside}\b")
    for name in tracked:
        path = ROOT / name
        if path.suffix not in {".md", ".rs", ".py", ".sh", ".toml", ".txt", ".json", ""}:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if pattern.search(text):
            bad.append(name)
    assert not bad, bad
