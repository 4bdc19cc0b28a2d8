"""Timing that holds on a shared machine (resomap.profiling.timing): interleaved rounds, intervals, interference."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from torch import nn

from resomap.profiling import profile
from resomap.profiling.timing import LatencyStats, NoisePolicy, measure, time_rounds
from resomap.runtime import CpuLoad, auto_threads, free_cores
from resomap.stats import MedianInterval, median_interval, ratio_interval

CPU = torch.device("cpu")


def small_cnn() -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 4),
    )


def test_median_interval_is_the_order_statistic_interval():
    # n = 20: P(Binom(20, .5) <= 5) = 0.0207 <= 0.025 < P(<= 6) = 0.0577, so the 95% interval is [x_(6), x_(15)]
    values = list(range(1, 21))
    med, lo, hi = median_interval(values, 0.95)
    assert (med, lo, hi) == (10.5, 6.0, 15.0)
    assert median_interval([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)  # too few values for 95%: [min, max]


def test_time_rounds_interleaves_the_variants_and_rotates_their_order():
    seen: list[str] = []
    variants = {n: (lambda n=n: seen.append(n)) for n in "abc"}
    done = time_rounds(variants, CPU, iters=6, warmup=1, rounds=3)
    assert seen[:3] == ["a", "b", "c"]  # warm-up, one call each
    timed = seen[3:]
    assert timed == ["a", "a", "b", "b", "c", "c", "b", "b", "c", "c", "a", "a", "c", "c", "a", "a", "b", "b"]
    assert all(len(done.calls[n]) == 3 and len(done.samples(n)) == 6 for n in "abc")


def test_a_failing_variant_is_reported_and_the_others_keep_running():
    def broken():
        raise RuntimeError("no kernel")

    done = time_rounds({"ok": lambda: None, "bad": broken}, CPU, iters=4, warmup=0, rounds=2)
    assert "bad" in done.errors and "bad" not in done.calls and len(done.samples("ok")) == 4


def test_ratio_of_two_identical_variants_has_an_interval_containing_one():
    model = small_cnn().eval()
    x = torch.randn(2, 3, 32, 32)

    def call():
        with torch.inference_mode():
            model(x)

    done = time_rounds({"a": call, "b": call}, CPU, iters=60, warmup=3, rounds=20)
    ratio = ratio_interval(done.round_medians("a"), done.round_medians("b"), level=0.99)
    assert ratio.n == 20 and ratio.low <= ratio.value <= ratio.high
    assert ratio.contains(1.0), ratio.text()


def test_ratio_of_different_variants_excludes_one():
    a = lambda: time.sleep(0.002)  # noqa: E731
    b = lambda: time.sleep(0.02)  # noqa: E731
    done = time_rounds({"a": a, "b": b}, CPU, iters=12, warmup=0, rounds=6)
    ratio = ratio_interval(done.round_medians("b"), done.round_medians("a"))
    assert ratio.low > 2.0 and not ratio.contains(1.0), ratio.text()


def test_latency_stats_keep_the_spread_and_the_median_interval():
    stats = LatencyStats.from_seconds([0.001] * 10 + [0.002] * 10)
    assert stats.iqr_ms == pytest.approx(1.0) and stats.spread == pytest.approx(1.0 / 1.5)
    assert stats.median_low_ms <= stats.median_ms <= stats.median_high_ms
    assert MedianInterval.of([1.0, 2.0, 3.0]).text() == "2.00 [1.00, 3.00]"


def test_a_disturbed_measurement_is_remeasured_then_marked_noisy():
    delays = itertools.cycle([0.0005, 0.005])
    jittery = lambda: time.sleep(next(delays))  # noqa: E731  (IQR/median ~ 1.6)
    result = measure({"j": jittery}, CPU, iters=12, warmup=0, rounds=3, policy=NoisePolicy(0.5, retries=1))
    assert result.noisy and result.attempts == 2
    assert any("spread" in r for r in result.reasons)
    steady = measure({"s": lambda: time.sleep(0.002)}, CPU, iters=8, warmup=0, rounds=2, policy=NoisePolicy(0.5))
    assert not any("spread" in r for r in steady.reasons)


def test_cpu_load_sees_another_process_and_free_cores_leave_room_for_it():
    burner = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time() + 3\nwhile time.time() < t: pass"])
    try:
        time.sleep(0.3)
        with CpuLoad() as load:
            time.sleep(0.5)
    finally:
        burner.kill()
        burner.wait()
    assert load.others_cores > 0.6  # the burner alone keeps a core busy
    assert free_cores(load.others_cores, 2) == 1 and free_cores(0.0, 2) == 2 and free_cores(5.0, 2) == 1
    assert auto_threads(others_cores=0.0) >= 1 and auto_threads(others_cores=64.0) == 1


def test_profile_under_a_busy_competing_process_is_close_to_quiet_or_marked_noisy():
    """A bounded CPU burner (one core, killed after the test) runs while the profile is taken: the median must
    stay within 2x of the quiet figure, or the profile must say it is noisy."""
    model = small_cnn()
    args = dict(in_channels=3, device="cpu", batch_size=1, warmup=3, iters=30, train_iters=6, rounds=5)
    quiet = profile(model, 32, **args)
    code = "import time\nt = time.time() + 60\nwhile time.time() < t: pass"
    burner = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(0.3)
        busy = profile(model, 32, **args)
    finally:
        burner.kill()
        burner.wait()
    assert busy.threads >= 1 and busy.attempts >= 1
    ratio = busy.latency.median_ms / quiet.latency.median_ms
    assert ratio <= 2.0 or busy.noisy, (ratio, busy.noise_reasons)
    if busy.noisy:
        assert busy.noise_reasons and busy.as_metrics()["profile/noisy"] == 1.0


def _trial(seed: int, noisy: bool | None) -> dict:
    profile_dict = {"params_m": 1.0, "gmacs": 0.1, "gflops": 0.2, "latency_median_ms": 2.0, "latency_p90_ms": 3.0}
    if noisy is not None:
        profile_dict["noisy"] = noisy
    return {"model": "m", "resolution": 32, "seed": seed, "status": "FINISHED",
            "test": {"test/accuracy": 0.9, "test/macro_f1": 0.8}, "profile": profile_dict}  # fmt: skip


def test_a_noisy_profile_is_marked_in_the_summary_and_the_pareto_figure():
    from resomap.reports.figures import pareto_figure
    from resomap.summary.build import summary_rows

    rows = summary_rows([_trial(1, True), _trial(2, False)])
    assert rows[0].profile_noisy is True and "noisy (1 of 2 profiles disturbed" in rows[0].note
    quiet = summary_rows([_trial(1, False), _trial(2, None)])  # None: a result.json from before the flag
    assert quiet[0].profile_noisy is False and "noisy" not in quiet[0].note
    fig = pareto_figure(rows)
    texts = [t.get_text() for t in fig.axes[0].texts]  # each point's label; the caption is under the axes
    assert "32?" in texts and "disturbed machine" in fig.get_supxlabel()
    assert "32" in [t.get_text() for t in pareto_figure(quiet).axes[0].texts]


def test_profile_summary_and_metrics_carry_the_noisy_flag():
    import dataclasses

    from resomap.profiling.profiler import ModelProfile
    from resomap.stages import ProfileSummary

    prof = profile(small_cnn(), 16, in_channels=3, device="cpu", warmup=1, iters=4, train_iters=2, rounds=2)
    noisy = dataclasses.replace(prof, noisy=True, noise_reasons=["inference: spread (IQR/median) 0.90 > 0.50"])
    quiet = dataclasses.replace(prof, noisy=False, noise_reasons=[])
    assert ProfileSummary.from_profile(noisy).noisy is True and ProfileSummary.from_profile(quiet).noisy is False
    assert noisy.as_metrics()["profile/noisy"] == 1.0
    old = prof.as_dict()
    for key in ("noisy", "noise_reasons", "attempts", "rounds", "threads", "others_cpu_cores"):
        old.pop(key)
    for key in ("iqr_ms", "median_low_ms", "median_high_ms"):
        old["latency"].pop(key)
    back = ModelProfile.from_dict(old)  # a profile.json written before these fields existed
    assert back.noisy is False and back.as_metrics()["profile/noisy"] == 0.0


def test_trainer_vs_bare_runs_interleaved_rounds_and_reports_the_ratio_interval():
    from resomap.profiling.bare import benchmark_vs_bare

    res = benchmark_vs_bare(model="tiny_cnn", resolution=16, num_images=64, batch_size=16, epochs=1, rounds=5)
    assert len(res.ratios) == len(res.bare_runs) == len(res.trainer_runs) == 5
    assert res.ratios == pytest.approx([t / b for t, b in zip(res.trainer_runs, res.bare_runs)])
    assert res.ratio_low <= res.ratio <= res.ratio_high and res.ratio == pytest.approx(np.median(res.ratios))
    assert res.settings["threads"] >= 1 and res.settings["rounds"] == 5


def test_bench_options_report_per_round_ratio_intervals():
    from resomap.profiling import run_benchmark

    report = run_benchmark(small_cnn(), 16, in_channels=3, num_classes=4, options=["fused_adamw"], batch_sizes=[2],
                           iters=6, warmup=1, rounds=3)  # fmt: skip
    entry = report.get("options", "cpu", "fused_adamw", 2)
    assert entry.status == "ok" and report.rounds == 3
    for key in ("infer_x", "train_x"):
        med, lo, hi = entry.ratio_intervals[key]
        assert 0 < lo <= med <= hi
    assert f"{entry.ratio_intervals['infer_x'][0]:.2f}x [" in report.table()


def test_training_restores_torch_default_threads_after_a_profile_lowered_them():
    """A profile lowers the thread count to the free cores; a training run later in the same process must use
    torch's default again, or its reduction order (and, with bf16, its predictions) depends on what ran before."""
    from resomap.config.schema import SystemConfig
    from resomap.runtime import _DEFAULT_THREADS, apply_system

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(max(1, _DEFAULT_THREADS - 1) if _DEFAULT_THREADS > 1 else 2)
        apply_system(SystemConfig(threads=0), torch.device("cpu"))
        assert torch.get_num_threads() == _DEFAULT_THREADS
        apply_system(SystemConfig(threads=1), torch.device("cpu"))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
