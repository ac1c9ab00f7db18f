"""Model cards: ``<alg>.json`` next to ``<alg>.onnx``.

The Rust runtime (``portus-agent/runtime/src/policy/card.rs``) parses the same schema with unknown
fields refused, checks it against the algorithm's ``PolicySpec`` and against the model's real
inputs/outputs, and refuses a card whose ``sha256`` is not the file's.

Schema (``card_version`` 1)::

    card_version      1
    algorithm         registry name ("mocc", "owl", "nuwa", "jury")
    feature_version   observation-layout version the model was trained on
    model_file        "<algorithm>.onnx" (the file next to the card)
    sha256            sha256 of model_file (lowercase hex)
    created           UTC, RFC 3339 ("2025-01-31T12:00:00Z")
    output_kind       "continuous" (action = deterministic action, clamped by the runtime
                      into [action_low, action_high]) | "q_values" (action = one score per
                      discrete action: DQN Q-values or PPO logits; the runtime returns the
                      argmax index; act_dim 1, bounds [0, n_actions-1])
    obs_dim, act_dim  vector lengths; n_actions (q_values only, else null)
    action_low/high   act_dim floats each (the training action space's bounds)
    masked            model takes a "mask" input ([B, obs_dim], 1 = present)
    recurrent         null | {"kind": "lstm", "num_layers": L, "hidden_size": H}
    inputs, outputs   [{"name", "shape" (-1 = dynamic batch), "dtype": "float32"}], read
                      from the ONNX file itself
    normalization     null | {"kind": "baked_into_graph", "obs_mean", "obs_std", "clip_obs"}
                      (VecNormalize statistics; the exporter bakes them into the graph, the
                      runtime feeds raw observations — recorded for provenance only)
    dynamics          {knob: value}: every knob that shapes what the policy observes or how its
                      action is applied, as the trainer ran them (``_native.dynamics(alg,
                      algs_toml)``, the algorithm's ``LearnedAlgorithm::dynamics()``). The
                      agent refuses the model unless its own configured dynamics are the same
                      (train what you serve). ``{}`` for an algorithm the bindings do not
                      implement (test fixtures, reserved names).
    training          {"command", "library", "seed", "steps", "scenario_ranges", "notes"}, and
                      optionally "wall_s" and "determinism" (ccp_train.rl.determinism.record)
    evaluation        free-form {name: figure}

I/O convention: inputs ``obs`` [B, obs_dim], ``mask`` [B, obs_dim] iff masked, ``h_in``/``c_in``
[L, B, H] iff recurrent; outputs ``action`` [B, act_dim] ([B, n_actions] for q_values),
``h_out``/``c_out`` [L, B, H] iff recurrent. B is 1 or -1 (dynamic).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CARD_VERSION = 1
OUTPUT_KINDS = ("continuous", "q_values")

INPUT_NAMES = ("obs", "mask", "h_in", "c_in")
OUTPUT_NAMES = ("action", "h_out", "c_out")


def sha256_file(path: str | Path) -> str:
    """Lowercase hex sha256 of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _f32(x: float) -> float:
    """The float32 value of ``x`` as a Python float, so Rust parses exactly the same f32."""
    import numpy as np

    v = float(np.float32(x))
    if not math.isfinite(v):
        raise ValueError(f"action bound {x!r} is not finite (as float32)")
    return v


def onnx_io(path: str | Path) -> tuple[list[dict], list[dict]]:
    """(inputs, outputs) of an ONNX file as card entries; symbolic dims become -1."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    init_names = {i.name for i in model.graph.initializer}

    def entries(values: Any) -> list[dict]:
        out = []
        for v in values:
            if v.name in init_names:
                continue
            t = v.type.tensor_type
            dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name
            shape = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
            out.append({"name": v.name, "shape": shape, "dtype": dtype})
        return out

    return entries(model.graph.input), entries(model.graph.output)


def utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def make_card(
    onnx_path: str | Path,
    *,
    algorithm: str,
    feature_version: int,
    output_kind: str,
    obs_dim: int,
    act_dim: int,
    action_low: Sequence[float],
    action_high: Sequence[float],
    n_actions: int | None = None,
    masked: bool = False,
    recurrent: dict | None = None,
    normalization: dict | None = None,
    training: dict | None = None,
    evaluation: dict | None = None,
    created: str | None = None,
    algs_toml: str | None = None,
    dynamics: dict | None = None,
) -> dict:
    """Build the card for ``onnx_path`` (I/O and sha256 read from the file) and validate it.

    ``algs_toml``: the ``[algs.*]`` tables the trainer ran (None: the agent's defaults); the
    card's ``dynamics`` are computed from them by the bindings, exactly as the agent computes
    its own (:func:`dynamics_of`). ``dynamics`` given explicitly wins (re-writing a card)."""
    onnx_path = Path(onnx_path)
    inputs, outputs = onnx_io(onnx_path)
    t = dict(training or {})
    training_full = {
        "command": str(t.pop("command", "")),
        "library": t.pop("library", None),
        "seed": t.pop("seed", None),
        "steps": t.pop("steps", None),
        "scenario_ranges": dict(t.pop("scenario_ranges", {}) or {}),
        "notes": t.pop("notes", None),
    }
    # optional: training wall time (s) and what determinism depends on (ccp_train.rl.determinism)
    for key in ("wall_s", "determinism"):
        if key in t:
            training_full[key] = t.pop(key)
    if t:
        raise ValueError(f"unknown training fields: {sorted(t)}")
    card = {
        "card_version": CARD_VERSION,
        "algorithm": algorithm,
        "feature_version": int(feature_version),
        "model_file": onnx_path.name,
        "sha256": sha256_file(onnx_path),
        "created": created or utc_now(),
        "output_kind": output_kind,
        "obs_dim": int(obs_dim),
        "act_dim": int(act_dim),
        "n_actions": None if n_actions is None else int(n_actions),
        "action_low": [_f32(x) for x in action_low],
        "action_high": [_f32(x) for x in action_high],
        "masked": bool(masked),
        "recurrent": recurrent,
        "inputs": inputs,
        "outputs": outputs,
        "normalization": normalization,
        "dynamics": dict(dynamics) if dynamics is not None else dynamics_of(algorithm, algs_toml),
        "training": training_full,
        "evaluation": dict(evaluation or {}),
    }
    problems = validate(card)
    if problems:
        raise ValueError(f"{onnx_path}: invalid model card: " + "; ".join(problems))
    return card


def dynamics_of(algorithm: str, algs_toml: str | None = None) -> dict:
    """The dynamics ``algorithm`` runs its policy under when configured by ``algs_toml``
    (``LearnedAlgorithm::dynamics()`` through the bindings); ``{}`` for an algorithm the bindings
    do not implement as a learned one."""
    from ccp_train import _native

    if algorithm not in _native.learned_algorithms():
        if algs_toml:
            raise ValueError(f"{algorithm!r} has no dynamics: algs_toml does not apply to it")
        return {}
    return dict(_native.dynamics(algorithm, algs_toml))


def write_card(onnx_path: str | Path, **kwargs: Any) -> Path:
    """Write ``<model>.json`` next to ``onnx_path`` (see :func:`make_card`); returns its path."""
    onnx_path = Path(onnx_path)
    card = make_card(onnx_path, **kwargs)
    card_path = onnx_path.with_suffix(".json")
    card_path.write_text(json.dumps(card, indent=2, allow_nan=False) + "\n")
    return card_path


def read_card(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())


def _expected_io(card: dict) -> tuple[dict, dict]:
    d = card["obs_dim"]
    width = card["n_actions"] if card["output_kind"] == "q_values" else card["act_dim"]
    ins = {"obs": [None, d]}
    outs = {"action": [None, width]}
    if card.get("masked"):
        ins["mask"] = [None, d]
    r = card.get("recurrent")
    if r:
        s = [r["num_layers"], None, r["hidden_size"]]
        ins.update(h_in=s, c_in=s)
        outs.update(h_out=s, c_out=s)
    return ins, outs


def validate(card: dict) -> list[str]:
    """What is wrong with a card (empty when nothing): schema and I/O convention."""
    p: list[str] = []
    if card.get("card_version") != CARD_VERSION:
        p.append(f"card_version: expected {CARD_VERSION}, found {card.get('card_version')!r}")
    if card.get("output_kind") not in OUTPUT_KINDS:
        p.append(f"output_kind: expected one of {OUTPUT_KINDS}, found {card.get('output_kind')!r}")
        return p
    act_dim = card["act_dim"]
    lo, hi = card["action_low"], card["action_high"]
    if len(lo) != act_dim or len(hi) != act_dim:
        p.append(f"action_low/action_high: expected {act_dim} values each")
    elif any(a > b for a, b in zip(lo, hi, strict=True)):
        p.append("action bounds: low > high")
    if card["output_kind"] == "q_values":
        n = card.get("n_actions") or 0
        if n <= 0 or act_dim != 1 or lo != [0.0] or hi != [float(n - 1)]:
            p.append("q_values: expected n_actions > 0, act_dim 1, bounds [0] / [n_actions-1]")
    elif card.get("n_actions") is not None:
        p.append("n_actions: only for output_kind q_values")
    r = card.get("recurrent")
    if r is not None and (
        r.get("kind") != "lstm" or r.get("num_layers", 0) < 1 or r.get("hidden_size", 0) < 1
    ):
        p.append(f"recurrent: expected {{kind: lstm, num_layers, hidden_size}}, found {r!r}")
    d = card.get("dynamics")
    if not isinstance(d, dict) or not all(isinstance(k, str) for k in d):
        p.append("dynamics: expected an object {knob: value}")
    n = card.get("normalization")
    if n is not None:
        if n.get("kind") != "baked_into_graph":
            p.append("normalization.kind: expected 'baked_into_graph'")
        if (
            len(n.get("obs_mean", [])) != card["obs_dim"]
            or len(n.get("obs_std", [])) != card["obs_dim"]
        ):
            p.append("normalization: obs_mean/obs_std must have obs_dim values")
    if p:
        return p
    want_in, want_out = _expected_io(card)
    for kind, want, have in (
        ("inputs", want_in, card["inputs"]),
        ("outputs", want_out, card["outputs"]),
    ):
        names = [t["name"] for t in have]
        if sorted(names) != sorted(want):
            p.append(f"{kind}: expected names {sorted(want)}, found {names}")
            continue
        for t in have:
            w = want[t["name"]]
            ok = len(t["shape"]) == len(w) and all(
                (x in (1, -1)) if y is None else x == y for x, y in zip(t["shape"], w, strict=True)
            )
            if not ok:
                name = t["name"]
                p.append(f"{kind}[{name}].shape: expected {w} (None = batch), found {t['shape']}")
            if t.get("dtype", "float32") != "float32":
                p.append(f"{kind}[{t['name']}].dtype: expected float32, found {t['dtype']}")
    return p


def check_card(card_path: str | Path) -> dict:
    """Read a card and check it against the model file next to it (sha256 and I/O), as the
    Rust runtime does; returns the card or raises ``ValueError``."""
    card_path = Path(card_path)
    card = read_card(card_path)
    problems = validate(card)
    model = card_path.parent / card["model_file"]
    sha = sha256_file(model)
    if sha != card["sha256"]:
        problems.append(f"sha256: the file's is {sha}, the card says {card['sha256']}")
        raise ValueError(f"{card_path}: " + "; ".join(problems))
    try:
        ins, outs = onnx_io(model)
    except Exception as e:
        raise ValueError(f"{model}: not a loadable ONNX model: {e}") from e
    if ins != card["inputs"]:
        problems.append(f"inputs: the model has {ins}, the card says {card['inputs']}")
    if outs != card["outputs"]:
        problems.append(f"outputs: the model has {outs}, the card says {card['outputs']}")
    if problems:
        raise ValueError(f"{card_path}: " + "; ".join(problems))
    return card
