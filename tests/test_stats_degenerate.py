"""The statistics on degenerate input (issue 34): tables of 1-40 test images and 1-3 seeds, drawn by hypothesis,
including all-equal outcomes, no or one discordant image, one seed and constant scores. Every call returns a result
(never raises, never NaN); what cannot be computed is unavailable or None with a reason."""

from __future__ import annotations

import math

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from resomap import stats  # noqa: E402
from resomap.stats import per_image  # noqa: E402

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
RESAMPLES = 200  # small: the bootstrap's size is not what these tests check


@st.composite
def tables(draw, binary: bool = True, resolutions: int = 2):
    """{resolution: [S, N]} outcomes on shared images: 0/1 (bool) or scores in [0, 1]; often near-degenerate (one
    resolution a copy of another with at most one image changed, or constant)."""
    seeds = draw(st.integers(1, 3))
    n = draw(st.integers(1, 40))
    kind = draw(st.sampled_from(["random", "copy", "one_changed", "constant"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))

    def fresh() -> np.ndarray:
        if kind == "constant":
            value = draw(st.sampled_from([0.0, 1.0] if binary else [0.0, 0.5, 1.0]))
            return np.full((seeds, n), value)
        return rng.integers(0, 2, (seeds, n)).astype(float) if binary else rng.random((seeds, n))

    first = fresh()
    out = {16: first}
    for i in range(1, resolutions):
        if kind in ("copy", "one_changed", "constant"):
            other = first.copy()
            if kind == "one_changed":
                j = int(rng.integers(0, n))
                other[:, j] = 1.0 - other[:, j]
        else:
            other = fresh()
        out[16 * 2**i] = other
    return {r: (v.astype(bool) if binary else v) for r, v in out.items()}


def _no_nan(obj) -> None:
    """Every number of a result's to_dict() is finite or None (inf is allowed only where the doc says: needs)."""
    if isinstance(obj, dict):
        for v in obj.values():
            _no_nan(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _no_nan(v)
    elif isinstance(obj, (float, np.floating)):
        assert not math.isnan(float(obj)), obj


@SETTINGS
@given(tables(binary=True, resolutions=3), st.sampled_from(["model", "checkpoint"]))
def test_noninferiority_on_01_outcomes_never_crashes_and_says_why_when_untestable(table, scope):
    decision = stats.noninferiority(table, margin=0.02, scope=scope, binary=True)
    _no_nan(decision.to_dict())
    for verdict in decision.verdicts:
        assert verdict.verdict in stats.VERDICTS
        if verdict.p_value is None:
            assert verdict.reason, verdict  # an untested step says why
        else:
            assert 0.0 <= verdict.p_value <= 1.0
        if verdict.detectable is not None:
            assert verdict.detectable > 0, verdict  # no design shows every margin
    seeds = next(iter(table.values())).shape[0]
    if scope == "model" and seeds < 2:
        assert all(v.verdict != "non-inferior" for v in decision.verdicts)


@SETTINGS
@given(tables(binary=False, resolutions=2), st.sampled_from(["model", "checkpoint"]))
def test_noninferiority_on_scores_never_crashes(table, scope):
    decision = stats.noninferiority(table, margin=0.02, scope=scope, binary=False)
    _no_nan(decision.to_dict())
    for verdict in decision.verdicts:
        assert verdict.p_value is None or 0.0 <= verdict.p_value <= 1.0
        if verdict.detectable is not None:
            assert verdict.detectable > 0, verdict


@SETTINGS
@given(tables(binary=True, resolutions=3), st.sampled_from(["mcnemar", "bootstrap"]))
def test_pairwise_comparisons_never_crash(table, method):
    rows = stats.compare_resolutions(table, method=method, resamples=RESAMPLES)
    assert len(rows) == 3
    for row in rows:
        t = row.test
        _no_nan(t.to_dict())
        if t.available:
            assert t.p_value is not None and 0.0 <= t.p_value <= 1.0
            assert t.low is not None and t.low <= t.effect + 1e-12 <= t.high + 2e-12
        else:
            assert t.reason


@SETTINGS
@given(tables(binary=False, resolutions=2))
def test_paired_score_test_never_crashes(table):
    a, b = table.values()
    t = stats.paired_score_test(a, b, resamples=RESAMPLES)
    _no_nan(t.to_dict())
    assert t.available or t.reason


@SETTINGS
@given(tables(binary=True, resolutions=1))
def test_intervals_never_crash(table):
    (runs,) = table.values()
    for interval in (
        stats.bootstrap_accuracy(runs, resamples=RESAMPLES),
        stats.bootstrap_scores(runs.astype(float), resamples=RESAMPLES),
        stats.twoway_bootstrap(runs.astype(float), resamples=RESAMPLES),
        stats.seed_interval(runs.mean(axis=1)),
    ):
        _no_nan(interval.to_dict())
        if interval.available:
            assert interval.low <= interval.estimate + 1e-12 <= interval.high + 2e-12
        else:
            assert interval.reason


@SETTINGS
@given(
    st.integers(1, 3),
    st.integers(1, 40),
    st.integers(0, 2**32 - 1),
    st.sampled_from(["accuracy", "balanced_accuracy", "macro_f1", "auroc", "recall:defective"]),
)
def test_per_image_metric_values_are_finite_or_refused(seeds, n, seed, name):
    """Each metric's per-image values on any small table: finite numbers whose mean is the metric, or a one-line
    ConfigError (a recall of a class with under 2 images)."""
    from resomap.errors import ConfigError

    rng = np.random.default_rng(seed)
    label = rng.integers(0, 2, n)
    prediction = rng.integers(0, 2, (seeds, n))
    score = rng.random((seeds, n))
    metric = per_image.parse_metric(name)
    try:
        v = per_image.values(metric, label, prediction, score, ["functional", "defective"])
    except ConfigError as exc:
        assert "\n" not in str(exc)
        return
    assert np.isfinite(np.asarray(v, dtype=float)).all()
    for dim in (0, 1):
        table = {16: np.asarray(v, dtype=float), 32: np.asarray(v, dtype=float)[:, ::-1]}
        decision = stats.noninferiority(table, margin=0.02, binary=metric.binary, scope=("model", "checkpoint")[dim])
        _no_nan(decision.to_dict())


@SETTINGS
@given(tables(binary=True, resolutions=2))
def test_above_a_baseline_never_crashes(table):
    from resomap.summary.uncertainty import above_p

    a, b = table.values()
    d = b.mean(axis=0) - a.mean(axis=0)
    p = above_p(d, RESAMPLES, lattice=a.shape[0])
    assert p is not None and 0.0 <= p <= 1.0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(
    st.integers(1, 3),
    st.integers(1, 4),
    st.sampled_from(["zeros", "ones", "random", "one_hot"]),
    st.integers(0, 2**32 - 1),
)
def test_explanation_comparison_on_constant_maps_never_crashes(seeds, n, kind, seed):
    """Constant maps (a model that explains nothing), one probe image, one seed: the comparison of explanations
    across resolutions returns rows and sentences, never an exception."""
    from resomap.config.schema import ExplainabilityConfig
    from resomap.explain.evaluation.compare import study

    rng = np.random.default_rng(seed)

    def make(side: int) -> np.ndarray:
        if kind == "zeros":
            return np.zeros((n, side, side), np.float32)
        if kind == "ones":
            return np.ones((n, side, side), np.float32)
        if kind == "one_hot":
            m = np.zeros((n, side, side), np.float32)
            m[:, 0, 0] = 1.0
            return m
        return rng.random((n, side, side)).astype(np.float32)

    resolutions = (16, 32)
    maps = {"m": {s: {r: {"saliency": make(r)} for r in resolutions} for s in range(seeds)}}
    probe = {r: rng.integers(0, 256, (n, 3, r, r), dtype=np.uint8) for r in resolutions}
    images = {"m": {s: dict(probe) for s in range(seeds)}}
    found = study(maps, images, ExplainabilityConfig(common_grid=8, top_k_percent=10.0))
    assert found.statements, "the comparison says something for every model x method"


def test_a_sweep_of_models_that_learned_nothing_says_what_it_could_not_test(project, capsys):
    """A plain 2-seed, 200-image, 1-epoch synthetic sweep: every trial answers one class, so no test image differs
    between the resolutions. The summary is written and its decision says what the design could show (no
    'detects margins of 0.000': with no discordant image the score test still cannot show a small margin on 30
    images)."""
    import json

    from conftest import run_cli

    args = ["sweep", "--preset", "smoke", "sweep.resolutions=[16,32]", "sweep.seeds=[42,43]"]
    args += ["data.synthetic.num_images=200", "mlflow.enabled=false", "explainability.enabled=false"]
    args += ["system.threads=1", "profiling.enabled=false"]
    code, _out, err = run_cli(args, capsys)
    assert code == 0, err[-2000:]
    folder = project / "model_summaries" / "_sweep" / "resomap-smoke"
    summary = json.loads((folder / "summary.json").read_text())
    text = (folder / "summary.md").read_text()
    decision = next(r for r in summary["recommendations"] if r["model"] == "tiny_cnn")
    step = next(v for v in decision["verdicts"] if v["resolution"] == 16)
    assert step["verdict"] == "undecided"
    assert step["detectable"] is not None and step["detectable"] > 0.1, step  # 30 test images: about 0.17
    assert "detects margins of 0.000" not in text
    assert f"detects margins of {step['detectable']:.3f}" in text
