"""Evaluation hooks into the harness (:mod:`ccp_train.harness`) for trainers and seed sweeps.

Model selection uses the ``tune`` split only: :func:`harness_tune` calls the harness with
``purpose="selection"``, which refuses ``eval`` scenarios. The score is :func:`tune_score`, the
mean eq. 2 utility under each flow's own ``w`` over every tune run. The agent serves a model
only under the dynamics its card records, so the harness gets them as ``--config``
(:func:`agent_config`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ccp_train.rl.spec import toml_value


def tune_score(records: Sequence[Mapping[str, Any]]) -> float:
    """Mean eq. 2 utility under each flow's own ``w`` over the tune runs."""
    vals = [u for r in records if "metrics" in r and r["split"] == "tune"
            for u in r["metrics"].get("utility_by_w", {}).values() if math.isfinite(u)]
    return sum(vals) / len(vals) if vals else math.nan


def agent_config(card: Mapping[str, Any]) -> str:
    """An agent ``--config`` under which the card's model is served: every knob of its
    ``dynamics`` under ``[algs.<algorithm>]``."""
    dyn = card.get("dynamics") or {}
    return f"[algs.{card['algorithm']}]\n" + "".join(
        f"{k} = {toml_value(v)}\n" for k, v in sorted(dyn.items()))


def harness_tune(model_dir: Path, out: Path, *, suites: Sequence[str] | None = None,
                 seeds: int = 1, agent: str | None = None) -> dict[str, Any]:
    """Evaluate the model in `model_dir` (``<alg>.onnx`` + card) with the harness on the
    tune split, its card's dynamics as the agent's config; results in `out`. Returns
    ``{"tune_score", "runs", "failed", "suites", "seeds"}``."""
    from ccp_train import card as _card
    from ccp_train.harness import evaluate

    cards = sorted(Path(model_dir).glob("*.json"))
    card = next((c for c in map(_card.read_card, cards) if "algorithm" in c), None)
    if card is None:
        raise ValueError(f"{model_dir}: no model card")
    out.mkdir(parents=True, exist_ok=True)
    config = out / "agent.toml"
    config.write_text(agent_config(card))
    res = evaluate(out, split="tune", algs=[card["algorithm"]], seeds=list(range(1, seeds + 1)),
                   suites=list(suites) if suites else None, models=str(model_dir),
                   config=str(config), agent=agent, plots=False, purpose="selection")
    return {"tune_score": tune_score(res["records"]), "runs": len(res["records"]),
            "failed": len(res["failures"]), "suites": list(suites or []), "seeds": seeds}
