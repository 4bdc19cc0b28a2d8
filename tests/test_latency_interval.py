"""Intervals that respect their quantity (issue 58, item 5): a latency's interval comes from each trial's timed calls
(stats.timing_interval: the seeds' order-statistic intervals of their median call, from the lowest to the highest),
never below zero, where the front showed a Student-t interval over two seeds' medians ('14.1 [-35.4, 63.6] ms', the
trade-off figure's axis running to -40 ms). A seeded simulation on log-normal calls shows it holds its level; the
profile keeps the calls, and the summary's rows, the front (its table, its words), the headline table and the
figures carry the interval."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from conftest import summary_lower_bounds
from resomap import stats
from resomap.config.schema import StatsConfig

LEVEL = 0.95
CALLS = 50  # profiling.iters' default


def _calls(rng: np.random.Generator, median: float, n: int = CALLS, sigma: float = 0.3) -> np.ndarray:
    """`n` timed calls (ms), log-normal around `median`: skewed to the right, as timings are."""
    return median * np.exp(sigma * rng.standard_normal(n))


def test_two_seeds_far_apart_give_a_positive_interval_that_holds_both():
    rng = np.random.default_rng(0)
    fast, slow = _calls(rng, 1.0), _calls(rng, 27.0)
    medians = [float(np.median(fast)), float(np.median(slow))]
    found = stats.timing_interval([fast, slow], LEVEL)
    assert found.available and found.n == 2 and found.estimate == pytest.approx(np.mean(medians))
    assert 0 < found.low <= min(medians) and max(medians) <= found.high
    assert found.low >= min(fast.min(), slow.min())  # its bounds are timed calls
    # the Student-t interval over the two medians that the front showed before (1 degree of freedom) runs below zero
    from scipy.stats import t

    half = t.ppf(0.5 + LEVEL / 2, 1) * np.std(medians, ddof=1) / math.sqrt(2)
    assert np.mean(medians) - half < 0
    # one seed: its own order-statistic interval of the median
    assert stats.timing_interval([fast], LEVEL).low == stats.median_interval(fast, LEVEL)[1]


def test_an_interval_needs_enough_calls_for_its_level_and_positive_calls():
    # [min, max] of n calls holds the median with probability 1 - 2^(1 - n): the fewest n reaching each level
    assert [stats.calls_needed(level) for level in (0.5, 0.75, 0.9, 0.95, 0.99)] == [2, 3, 5, 6, 8]
    few = stats.timing_interval([[1.0, 2.0, 3.0, 4.0, 5.0], np.arange(1.0, 51.0)], LEVEL)
    assert not few.available and few.low is None and few.estimate == pytest.approx((3.0 + 25.5) / 2)
    assert few.reason == "5 timed calls: an interval of the median at 95% needs at least 6"
    assert stats.timing_interval([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]], LEVEL).low == 1.0  # 6 calls: [min, max]
    assert stats.timing_interval([[1.0] * 10 + [0.0]], LEVEL).reason == "a timed call is not a positive number"
    assert stats.timing_interval([[1.0] * 10, []], LEVEL).reason == "no timed calls kept"
    assert not stats.timing_interval([], LEVEL).available


def _coverage(rng: np.random.Generator, trials: int, spread: float, sweeps: int) -> dict[str, float]:
    """Share of `sweeps` simulated model x resolutions, each of `trials` trials of CALLS log-normal calls whose
    medians differ by a factor exp(N(0, spread)) (a process effect), whose interval holds the mean of the trials'
    true medians, the smallest and the largest of them."""
    held = {"mean": 0, "smallest": 0, "largest": 0}
    for _ in range(sweeps):
        medians = 10.0 * np.exp(spread * rng.standard_normal(trials))
        found = stats.timing_interval([_calls(rng, m) for m in medians], LEVEL)
        for name, value in (("mean", medians.mean()), ("smallest", medians.min()), ("largest", medians.max())):
            held[name] += found.low <= value <= found.high
    return {name: count / sweeps for name, count in held.items()}


def test_the_interval_holds_its_level_on_log_normal_calls():
    """Seeded simulation, 2000 sweeps per case (Monte-Carlo SE at 0.95: 0.005), 50 calls per trial (sigma 0.3 on
    the log scale). One trial: the interval holds its median as often as the order statistics promise, 1 - 2 P(Binom
    (50, 1/2) <= k - 1) = 0.967 at 95% (measured 0.963), within 3 SE. Two and three trials whose medians differ by a
    factor exp(N(0, 1)) (the trials' processes apart, far more than their calls' noise): it holds the mean of their
    true medians, the smallest and the largest at least 95% of the time less 3 SE (measured: 2 trials 1.000, 0.983,
    0.987; 3 trials 1.000, 0.987, 0.986: an extreme is missed only when its own trial's bound is); two trials of one
    median hold it 0.9995 of the time."""
    from scipy.stats import binom

    sweeps = 2000
    se = math.sqrt(LEVEL * (1 - LEVEL) / sweeps)
    rng = np.random.default_rng(58)
    k = int(binom.ppf((1 - LEVEL) / 2, CALLS, 0.5))  # median_interval's order statistic
    promised = 1 - 2 * binom.cdf(k - 1, CALLS, 0.5)
    one = _coverage(rng, 1, 0.0, sweeps)["mean"]
    assert promised >= LEVEL and abs(one - promised) <= 3 * math.sqrt(promised * (1 - promised) / sweeps), one
    for trials in (2, 3):
        found = _coverage(rng, trials, 1.0, sweeps)
        assert min(found.values()) >= LEVEL - 3 * se, (trials, found)
    assert _coverage(rng, 2, 0.0, sweeps)["mean"] >= LEVEL - 3 * se


def test_the_profile_keeps_every_timed_call_and_the_result_carries_them(tmp_path: Path):
    from torch import nn

    from resomap.profiling import load_profile, profile, save_profile
    from resomap.stages import ProfileSummary

    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2))
    prof = profile(model, 16, in_channels=3, device="cpu", warmup=1, iters=7, train_iters=2, rounds=2)
    calls = prof.latency.calls_ms
    assert len(calls) == 7 and np.median(calls) == pytest.approx(prof.latency.median_ms)
    assert ProfileSummary.from_profile(prof).latency_calls_ms == calls
    _, js = save_profile(prof, tmp_path)
    assert load_profile(js).latency.calls_ms == calls  # profile.json keeps them
    assert not any("calls" in key for key in prof.as_metrics())  # a list is no MLflow metric


def _result(res: int, seed: int, calls: np.ndarray, accuracy: float, keep: bool = True) -> dict:
    profile = {"params_m": 0.1, "gmacs": 0.001 * res, "gflops": 0.002, "latency_median_ms": float(np.median(calls)),
               "latency_p90_ms": float(np.percentile(calls, 90)), "batch_size": 1,
               "throughput_inference_ips": 1000.0 / float(np.median(calls))}  # fmt: skip
    if keep:  # else a result written before the calls were kept
        profile["latency_calls_ms"] = [float(c) for c in calls]
    return {"model": "m", "family": "cnn", "resolution": res, "seed": seed, "status": "FINISHED",
            "test": {"test/accuracy": accuracy, "test/macro_f1": accuracy}, "profile": profile}  # fmt: skip


def _sweep(rng: np.random.Generator, medians: dict[int, tuple[float, float]], n: int = CALLS, keep: bool = True):
    """Results of model m at each resolution: two seeds, each with its calls around its own median."""
    calls = {(res, s): _calls(rng, m, n) for res, ms in medians.items() for s, m in zip((42, 43), ms, strict=True)}
    results = [_result(res, s, c, 0.7 + res / 1000, keep) for (res, s), c in calls.items()]
    return results, calls


def test_the_summary_and_the_front_show_the_interval_from_the_calls(tmp_path: Path):
    """The issue's case: two seeds at 32 px 27-fold apart (one process slowed down). The row's interval, the front's
    cost coordinate, its table cell and its words, the headline table and summary.json / the CSVs: from the calls,
    above zero; the Welch test still decides."""
    from resomap.summary import build_summary, write_summary
    from resomap.summary.front import LATENCY_INTERVAL, Measured, tradeoff_cells, tradeoff_lines, tradeoffs
    from resomap.summary.text import headline_cells

    rng = np.random.default_rng(1)
    results, calls = _sweep(rng, {32: (1.0, 27.0), 64: (30.0, 31.0)})
    summary = build_summary(results, None, StatsConfig(resamples=200))
    rows = {r.resolution: r for r in summary.rows}
    for res, row in rows.items():
        expected = stats.timing_interval([calls[(res, 42)], calls[(res, 43)]], LEVEL)
        assert (row.latency_ms_ci_low, row.latency_ms_ci_high) == (expected.low, expected.high)
        assert 0 < row.latency_ms_ci_low <= row.latency_ms <= row.latency_ms_ci_high
        assert 0 < row.throughput_ips_ci_low <= row.throughput_ips <= row.throughput_ips_ci_high
    (entry,) = tradeoffs(summary.rows, (), Measured(summary.paired_tests, summary.trials))
    cost = next(a for a in entry["axes"] if a["name"] == "cost")
    assert cost["interval"] == LATENCY_INTERVAL and cost["test"] == "Welch's t-test over seeds"
    point = next(p for p in entry["points"] if p["resolution"] == 32)
    assert point["cost"] == [rows[32].latency_ms, rows[32].latency_ms_ci_low, rows[32].latency_ms_ci_high]
    _, body = tradeoff_cells([entry])
    low, high = rows[32].latency_ms_ci_low, rows[32].latency_ms_ci_high
    assert body[0][0][3] == f"{rows[32].latency_ms:#.3g} [{low:#.3g}, {high:#.3g}]"
    assert f"latency, batch 1 (ms) ({LATENCY_INTERVAL}; Welch's t-test over seeds)" in tradeoff_lines([entry])[1]
    header, cells = headline_cells(summary.rows)
    at = header.index("latency ms [95% CI]")
    assert cells[0][at] == f"{rows[32].latency_ms:.3f} [{low:.3f}, {high:.3f}]"
    from resomap.summary.build import assemble

    write_summary(assemble(**{**summary.parts(), "front3": [entry]}), tmp_path)  # the summary with its front
    found = summary_lower_bounds(tmp_path)
    assert any(w.endswith("/latency_ms_ci_low") for w, _, _ in found["summary.csv"])
    assert any(w.endswith("/cost") for w, _, _ in found["summary.json"])
    assert not [(s, w, v) for s, bounds in found.items() for w, v, nonnegative in bounds if nonnegative and v < 0]


def test_too_few_calls_or_none_give_no_interval_and_say_why():
    from resomap.summary import build_summary
    from resomap.summary.front import Measured, tradeoffs

    rng = np.random.default_rng(2)
    few, _ = _sweep(rng, {32: (1.0, 1.1), 64: (2.0, 2.1)}, n=5)
    summary = build_summary(few, None, StatsConfig(resamples=200))
    for row in summary.rows:
        assert row.latency_ms_ci_low is None and row.throughput_ips_ci_high is None
        assert "latency interval not available: 5 timed calls: an interval of the median at 95% needs at least 6" in (
            row.note
        )
    (entry,) = tradeoffs(summary.rows, (), Measured(summary.paired_tests, summary.trials))
    cost = next(a for a in entry["axes"] if a["name"] == "cost")
    assert cost["interval"].startswith("no interval") and all(p["cost"][1] is None for p in entry["points"])
    old, _ = _sweep(rng, {32: (1.0, 1.1)}, keep=False)  # results written before the calls were kept
    (row,) = build_summary(old, None, StatsConfig(resamples=200)).rows
    assert row.latency_ms_ci_low is None and "latency interval" not in row.note


def test_the_figures_of_a_cost_stay_at_or_above_zero():
    """The trade-off figure (its axis ran to -40 ms), the score x latency figure and the cost figure: error bars
    from the calls' interval and axes that start at zero where the margins would take them below."""
    from matplotlib.collections import LineCollection

    from resomap.reports.figures import metric_vs_resolution, pareto_figure
    from resomap.reports.tradeoff import tradeoff_figure
    from resomap.summary import build_summary
    from resomap.summary.front import Measured, tradeoffs

    rng = np.random.default_rng(3)
    results, _ = _sweep(rng, {32: (1.0, 27.0), 64: (30.0, 31.0)})
    summary = build_summary(results, None, StatsConfig(resamples=200))
    front3 = tradeoffs(summary.rows, (), Measured(summary.paired_tests, summary.trials))
    figures = {
        "tradeoff": tradeoff_figure(front3),
        "pareto": pareto_figure(summary.rows),
        "cost": metric_vs_resolution(summary.rows, [("latency_ms", "latency"), ("throughput_ips", "images/s")], "c"),
    }
    for name, fig in figures.items():
        axes = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
        for ax in axes:
            limits = [ax.get_ylim()] + ([] if name == "cost" else [ax.get_xlim()])  # the cost figure: x is px
            assert all(low >= 0 for low, _ in limits), (name, limits)
            for bars in ax.findobj(LineCollection):  # error bars: no segment below zero
                assert all(np.min(segment) >= 0 for segment in bars.get_segments()), name
    pareto_caption = figures["pareto"].get_supxlabel()
    assert "latency: 95% CI of the median call (the seeds' intervals, lowest to highest)" in pareto_caption
