"""The trace corpus: its split follows the written rule, every recording reads in the simulator
as the catalogue's format says, and the harness's corpus suite is built from tune and eval only."""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter
from pathlib import Path

import pytest

from ccp_train import corpus
from ccp_train.harness.matrix import DEFAULT_DIR, MatrixError, load_suite, select


def _time_weighted_mean_mbps(path: Path, fmt: str) -> float:
    """An independent reading of the two formats (corpus README): mahimahi = packets over the
    last timestamp; a log = each rate held until the next sample, the last for the median
    interval (1 s alone), a later sample at the same time replacing the earlier."""
    lines = [s.strip() for s in path.read_text().splitlines()]
    lines = [s for s in lines if s and not s.startswith("#")]
    if fmt == "mahimahi":
        ts = [int(s) for s in lines]
        return len(ts) * 1500 * 8 / (ts[-1] / 1e3) / 1e6
    samples: list[tuple[float, float]] = []
    for s in lines:
        t, r = (float(x) for x in s.split())
        if samples and samples[-1][0] == t:
            samples[-1] = (t, r)
        else:
            samples.append((t, r))
    gaps = sorted(b[0] - a[0] for a, b in zip(samples, samples[1:], strict=False))
    hold = gaps[len(gaps) // 2] if gaps else 1.0
    ends = [b[0] for b in samples[1:]] + [samples[-1][0] + hold]
    bits = sum(r * (e - t) for (t, r), e in zip(samples, ends, strict=True))
    return bits / (ends[-1] - samples[0][0])


def test_the_split_file_is_the_rule_applied_to_the_catalogue() -> None:
    want = corpus.compute_split(corpus.read_catalogue())
    got = {t.path: t.split for t in corpus.load()}
    assert got == want, "split.csv differs from the rule: `python -m ccp_train.corpus split`"
    assert len(got) == 584


def test_the_rule_holds_collections_out_keeps_groups_together_and_stratifies() -> None:
    ts = corpus.load()
    for t in ts:
        if t.collection in corpus.HELD_OUT:
            assert t.split == "eval", t.path
    for p in corpus.TRAINED_ON:
        assert next(t for t in ts if t.path == p).split == "train"
    # every kind but the synthetic one has recordings in all three splits, and a held-out
    # collection where the corpus has more than one collection of that kind
    for kind in corpus.KINDS:
        c = Counter(t.split for t in ts if t.kind == kind)
        if kind == "synthetic":
            assert set(c) == {"train"}
            continue
        assert all(c[s] > 0 for s in corpus.SPLITS), (kind, c)
        n = sum(c.values())
        assert c["eval"] / n >= corpus.EVAL_SHARE - 0.02, (kind, c)
        cols = {t.collection for t in ts if t.kind == kind}
        if len(cols) > 1:
            assert cols & set(corpus.HELD_OUT), kind
    # a group (one run's up- and downlink, one walk's WiFi and cellular) shares one split,
    # except where a trained-on recording forces train
    by_group: dict[str, set[str]] = {}
    for t in ts:
        if t.path not in corpus.TRAINED_ON:
            by_group.setdefault(corpus.group_of(t.path), set()).add(t.split)
    assert all(len(s) == 1 for s in by_group.values()), \
        {g: s for g, s in by_group.items() if len(s) > 1}


def test_every_recording_reads_in_the_simulator_at_its_mean_rate() -> None:
    native = pytest.importorskip("ccp_train._native")
    for t in corpus.load():
        want = _time_weighted_mean_mbps(t.file, t.format)
        got = native.trace_mean_mbps(str(t.file))
        assert math.isclose(got, want, rel_tol=1e-6), (t.path, got, want)


def test_the_catalogue_agrees_with_the_files_but_for_a_few_documented_rows() -> None:
    """The catalogue's mean is computed from the files; docs/corpus.md lists the rows where
    it is not (a derived log's statistics taken before its last edit)."""
    off = [t.path for t in corpus.load()
           if abs(_time_weighted_mean_mbps(t.file, t.format) - t.mean_mbps)
           > 0.02 * t.mean_mbps + 0.01]
    doc = (corpus.repo_root() / "docs" / "corpus.md").read_text()
    assert len(off) <= 12
    for p in off:
        assert Path(p).name in doc, f"{p}: the catalogue's mean is off; list it in docs/corpus.md"


def test_broken_selections_and_weights_are_refused() -> None:
    with pytest.raises(corpus.CorpusError, match="split"):
        corpus.select("test")
    with pytest.raises(corpus.CorpusError, match="unknown kind"):
        corpus.select("train", ["5G"])
    for bad in ("5g", "5g=x", "5g=-1", "5g=nan", "lte=1", "5g=0"):
        with pytest.raises(corpus.CorpusError):
            corpus.parse_kind_weights(bad)
    assert corpus.parse_kind_weights("5g=2, wifi=0.5") == {"5g": 2.0, "wifi": 0.5}


def test_the_draw_gives_train_recordings_by_kind_weight() -> None:
    d = corpus.TraceDraw.from_train_split({"5g": 1.0, "wifi": 3.0})
    train = {str(t.file) for t in corpus.select("train")}
    kind_of = {str(t.file): t.kind for t in corpus.load()}
    rng = random.Random(1)
    got = [d.draw(rng) for _ in range(4000)]
    assert set(got) <= train
    share = Counter(kind_of[g] for g in got)["wifi"] / len(got)
    assert abs(share - 0.75) < 0.03, share
    with pytest.raises(corpus.CorpusError, match="tune|eval"):
        corpus.check_training_traces([str(corpus.select("eval")[0].file)])
    corpus.check_training_traces(got[:10])


def test_the_corpus_suite_runs_tune_and_eval_recordings_by_kind() -> None:
    sc = load_suite(DEFAULT_DIR / "corpus.toml")
    by_split = {s: {x.link["trace"] for x in sc if x.split == s} for s in ("tune", "eval")}
    for s in ("tune", "eval"):
        want = {str(t.file) for t in corpus.select(s)}
        assert by_split[s] == want
    assert not {str(t.file) for t in corpus.select("train")} & (by_split["tune"] | by_split["eval"])
    kinds = {x.name.split("-")[0] for x in sc}
    assert kinds == {"cellular", "5g", "wifi", "leo", "broadband"}
    # 2 RTTs x 2 buffers each; quick: one recording per kind and split, at most 100 Mbit/s
    assert len(sc) == 4 * len(by_split["tune"] | by_split["eval"])
    q = select(sc, "eval", quick=True)
    assert sorted(x.name.split("-")[0] for x in q) == sorted(kinds)
    mean_of = {str(t.file): t.mean_mbps for t in corpus.load()}
    assert all(mean_of[x.link["trace"]] <= 100 for x in q)
    assert statistics.mean(x.duration_s for x in sc) == 30


def test_a_corpus_suite_can_keep_only_some_kinds(tmp_path) -> None:
    text = (DEFAULT_DIR / "corpus.toml").read_text().replace(
        'corpus_dir = "../../', f'corpus_dir = "{DEFAULT_DIR.parent.parent}/')
    (tmp_path / "corpus.toml").write_text(text + 'kinds = ["cellular", "5g"]\n')
    sc = load_suite(tmp_path / "corpus.toml")
    assert {x.name.split("-")[0] for x in sc} == {"cellular", "5g"}
    full = load_suite(DEFAULT_DIR / "corpus.toml")
    assert len(sc) == sum(x.name.split("-")[0] in ("cellular", "5g") for x in full)
    (tmp_path / "corpus.toml").write_text(text + 'kinds = ["cellular", "lte"]\n')
    with pytest.raises(MatrixError, match="kinds.*report kinds"):
        load_suite(tmp_path / "corpus.toml")
