"""Every results table in README.md and docs/ names the command that measured it (issue 49).

``ops/doc_provenance.py`` is the check; these tests run it on the repository and show that it
tells a sourced table from an unsourced one.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKER = ROOT / "ops" / "doc_provenance.py"

TABLE = """\
| alg | util | qdel p95 |
|---|---:|---:|
| cubic | 0.61 | 126 ms |
| bbr | 0.91 | 71.6 ms |
"""


def check(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CHECKER), *map(str, paths)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_every_results_table_of_the_repository_names_its_command():
    p = check()
    assert p.returncode == 0, p.stdout + p.stderr


def test_a_table_of_figures_without_a_command_fails(tmp_path):
    doc = tmp_path / "bare.md"
    doc.write_text("# Results\n\nSome figures:\n\n" + TABLE)
    p = check(doc)
    assert p.returncode == 1, p.stdout
    assert f"{doc}:5:" in p.stdout


def test_a_table_with_its_command_above_passes(tmp_path):
    doc = tmp_path / "sourced.md"
    doc.write_text("# Results\n\nMeasured with `python -m ccp_train.harness --out x --split "
                   "tune\n--seeds 2` (2 seeds):\n\n" + TABLE)
    assert check(doc).returncode == 0
    # a command too far above does not count
    far = tmp_path / "far.md"
    far.write_text("`python -m ccp_train.harness --out x`\n" + "\ntext\n" * 10 + "\n" + TABLE)
    assert check(far).returncode == 1


def test_a_table_without_figures_is_not_a_results_table(tmp_path):
    doc = tmp_path / "defs.md"
    doc.write_text("| key | definition |\n|---|---|\n| `cv` | standard deviation / mean |\n"
                   "| `acf_1s` | autocorrelation at lag 10 bins |\n| `DOI` | 10.1145/3689031 |\n")
    assert check(doc).returncode == 0
