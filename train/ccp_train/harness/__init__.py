"""The evaluation harness: every algorithm against Cubic and BBR on one scenario matrix.

``python -m ccp_train.harness --help`` (or ``bash ops/eval.sh``) runs a sweep; the matrix is in
``ops/eval/*.toml`` (format and metric definitions: ``ops/eval/README.md``). Training, model
selection and knob tuning call :func:`evaluate` with ``split="tune"``, the only split it accepts
for them (``purpose="selection"``).

- :mod:`.matrix`: suite files, scenarios, the tune/eval split;
- :mod:`.runner`: one run through ``ccp-agent --sim``, local threads or Ray;
- :mod:`.metrics`: per-run metrics (Jain, convergence, friendliness, utility);
- :mod:`.report`: ``summary.csv``, ``report.md``; :mod:`.plots`: the PNG plots.
- :mod:`.guard`: the regression guard (CI): each shipped model against its card's recorded
  ``tune`` figures (``python -m ccp_train.harness.guard``).
"""

from .cli import evaluate, main
from .matrix import SPLITS, SUITES, MatrixError, Scenario, load_matrix, select

__all__ = ["SPLITS", "SUITES", "MatrixError", "Scenario", "evaluate", "load_matrix", "main",
           "select"]
