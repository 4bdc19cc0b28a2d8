"""The sweep summary with uncertainty (issue 13): intervals, paired tests, recommendation, figures, load_sweep.

No training: a fake sweep of 1 model x 3 resolutions x 2 seeds is written by hand (result.json + predictions.csv with
known per-image correctness) and summarised by the same code a sweep runs.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from resomap import stats
from resomap.config import load, with_overrides
from resomap.config.schema import StatsConfig
from resomap.errors import ConfigError, ResoMapError
from resomap.layout import Layout
from resomap.records import Predictions, write_predictions
from resomap.reports import sweep_figures
from resomap.summary import SummaryRow, build_summary, write_summary
from resomap.summary.convergence import RECORD_KEYS
from resomap.sweep.plan import plan, summary_folder
from resomap.sweep.summarise import _summarise, trial_folders
from resomap.tracking import NullTracker
from resomap.trial_result import TrialResult

MODEL = "simple_cnn"
RESOLUTIONS = (32, 64, 128)
N_IMAGES, N_CLASSES = 200, 3
FAST = StatsConfig(resamples=400)  # the statistics are exact functions of the arrays; fewer resamples, same test


def _outcomes(seeds: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, dict[tuple[int, int], np.ndarray]]:
    """(image index, labels, {(resolution, seed): predictions}): 128 px ~90% right, 64 px wrong on 3 more images
    and right on 2 others (not significantly worse), 32 px wrong on 60 more (clearly worse); seeds differ a little."""
    rng = np.random.default_rng(7)
    index = np.sort(rng.choice(10_000, N_IMAGES, replace=False))
    labels = rng.integers(0, N_CLASSES, N_IMAGES)
    base = rng.random(N_IMAGES) < 0.9
    preds = {}
    for seed in seeds:
        right = base.copy()
        right[rng.choice(N_IMAGES, 2 + 5 * seed, replace=False)] ^= True  # seed-to-seed noise
        for res, extra_wrong, extra_right in ((128, 0, 0), (64, 3, 2), (32, 60, 0)):
            r = right.copy()
            r[np.flatnonzero(right)[:extra_wrong]] = False
            r[np.flatnonzero(~right)[:extra_right]] = True
            preds[(res, seed)] = np.where(r, labels, (labels + 1) % N_CLASSES)
    return index, labels, preds


def _macro_f1(y: np.ndarray, p: np.ndarray) -> float:
    return float(stats.macro_f1(y, p, N_CLASSES))


def _fake_sweep(root: Path, seeds: tuple[int, ...] = (0, 1), with_predictions: bool = True, one_fit: bool = False):
    """Config + trials of a fake sweep under root, each trial's result.json (and predictions.csv) written; with
    `one_fit`, every seed predicts what the first does (a deterministic fit)."""
    cfg = load(
        "configs",
        None,
        [
            f"experiment.output_dir={root}",
            "experiment.name=fake",
            f"sweep.models=[{MODEL}]",
            f"sweep.resolutions=[{','.join(map(str, RESOLUTIONS))}]",
            f"sweep.seeds=[{','.join(map(str, seeds))}]",
            "mlflow.enabled=false",
            "stats.resamples=400",
        ],
    )
    trials = plan(cfg, check=False)
    index, labels, preds = _outcomes(seeds)
    for i, trial in enumerate(trials):
        p = preds[(trial.resolution, seeds[0] if one_fit else trial.seed)]
        acc = float((p == labels).mean())
        data = {
            "key": trial.key,
            "name": trial.name,
            "model": MODEL,
            "family": "cnn",
            "resolution": trial.resolution,
            "seed": trial.seed,
            "status": "FINISHED",
            "test": {"test/accuracy": acc, "test/macro_f1": _macro_f1(labels, p)},
            "profile": {
                "params_m": 0.1,
                "gmacs": 0.001 * trial.resolution**2 / 64,
                "gflops": 0.002,
                "latency_median_ms": 0.5 + trial.resolution / 64 + 0.05 * i,
                "latency_p90_ms": 1.0,
                "throughput_inference_ips": 1000.0 / trial.resolution,
                "peak_memory_mb": 10.0 + trial.resolution,
            },
            "cross_resolution": {str(r): {"accuracy": acc, "macro_f1": acc} for r in RESOLUTIONS},
            **_fake_training(trial.seed),
        }
        TrialResult.from_dict(data).save(trial.summary_dir)
        if with_predictions:
            write_predictions(trial.summary_dir, {trial.resolution: Predictions(trial.resolution, index, labels, p)})
    return cfg, trials, (index, labels, preds)


def _fake_training(seed: int) -> dict:
    """A history of 3 epochs and its convergence record: seed 0 best at its last epoch (undertrained, the epoch
    budget), seed 1 best at epoch 1 and stopped by a newer stop reason with the LR range test's lr_found (fields
    the summary reads with .get)."""
    f1 = [0.5, 0.7, 0.8] if seed == 0 else [0.5, 0.75, 0.7]
    history = [
        {"epoch": e, "train/loss": 1.0 - 0.2 * e, "val/loss": 1.1 - 0.15 * e, "val/macro_f1": f1[e], "lr": 0.01}
        for e in range(3)
    ]
    best = int(np.argmax(f1))
    conv = {
        "monitor": "val/macro_f1",
        "mode": "max",
        "best_epoch": best,
        "best_value": f1[best],
        "last_epoch": 2,
        "epochs_run": 3,
        "epochs_planned": 3 if seed == 0 else 10,
        "still_improving": best == 2,
        "stop_reason": "epoch_budget" if seed == 0 else "plateau",
        "stop_detail": "the epoch budget ran out" if seed == 0 else "the loss plateaued",
        "undertrained": best == 2,
        "undertrained_reason": "the best epoch is the last one (2)" if best == 2 else None,
    }
    if seed == 1:
        conv["lr_found"] = 0.0031
    return {"history": history, "convergence": conv, "epochs_run": 3}


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    """A fake sweep summarised once by the sweep's own _summarise (MLflow off: NullTracker, no parent run)."""
    root = tmp_path_factory.mktemp("fake")
    cfg, trials, arrays = _fake_sweep(root)
    results = sorted(
        (TrialResult.from_json((t.summary_dir / "result.json").read_text()) for t in trials),
        key=lambda r: (r.model, r.resolution, r.seed),
    )
    out = summary_folder(cfg)
    files = _summarise(results, cfg, out, NullTracker(), None, trials)
    return cfg, trials, arrays, out, files


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_summary_intervals_equal_the_statistics_on_the_same_arrays(fake):
    cfg, _, (_, labels, preds), out, _ = fake
    rows = {r["resolution"]: r for r in json.loads((out / "summary.json").read_text())["rows"]}
    assert sorted(rows) == list(RESOLUTIONS)
    st = cfg.stats
    for res, row in rows.items():
        correct = np.stack([preds[(res, s)] == labels for s in (0, 1)])
        acc = stats.bootstrap_accuracy(correct, level=st.level, resamples=st.resamples, seed=st.seed)
        assert (row["test_accuracy_pooled"], row["test_accuracy_ci_low"], row["test_accuracy_ci_high"]) == (
            acc.estimate,
            acc.low,
            acc.high,
        )
        per_seed = [float(c.mean()) for c in correct]
        seeds = stats.seed_interval(per_seed, level=st.level)
        assert row["n_seeds"] == 2 and row["n_test_images"] == N_IMAGES
        assert row["test_accuracy"] == pytest.approx(seeds.estimate)
        assert row["test_accuracy_std"] == pytest.approx(seeds.std)
        # two seeds: no interval over test images and training seeds (it needs >= 3), the note says so
        assert row["twoway_ci_low"] is None and row["twoway_ci_high"] is None and row["deterministic"] is False
        assert "interval over test images and training seeds not available: needs >= 3 seeds" in row["note"]
        # the majority-class baseline: the test labels' most frequent class, and the accuracy above it per image
        classes, counts = np.unique(labels, return_counts=True)
        baseline = labels == classes[np.argmax(counts)]
        assert row["trivial_score"] == pytest.approx(baseline.mean())
        above = stats.bootstrap_scores(
            correct.astype(float) - baseline, level=st.level, resamples=st.resamples, seed=st.seed
        )
        assert row["over_trivial"] == pytest.approx(correct.mean() - baseline.mean())
        assert (row["over_trivial_ci_low"], row["over_trivial_ci_high"]) == (above.low, above.high)
        assert row["over_trivial_ci_low"] < row["over_trivial"] < row["over_trivial_ci_high"]
        # "shown above" is the one-sided sign-flip test of those differences: exact on the 1/2 lattice of two seeds
        assert (
            row["over_trivial_p"]
            == stats.sign_flip(correct.mean(axis=0) - baseline, alternative="greater", lattice=2).p_value
        )
        pooled_f1 = _macro_f1(np.concatenate([labels, labels]), np.concatenate([preds[(res, 0)], preds[(res, 1)]]))
        assert row["test_macro_f1_pooled"] == pytest.approx(pooled_f1)
        assert row["test_macro_f1_ci_low"] < row["test_macro_f1_pooled"] < row["test_macro_f1_ci_high"]
        assert row["latency_ms_std"] > 0 and row["ci_level"] == 0.95  # cost spread across the two seeds
    csv_rows = {int(r["resolution"]): r for r in _csv(out / "summary.csv")}
    assert float(csv_rows[64]["test_accuracy_ci_low"]) == pytest.approx(rows[64]["test_accuracy_ci_low"], rel=1e-5)
    assert {"test_macro_f1_ci_high", "twoway_ci_low", "n_seeds", "note", "sufficient"} <= set(csv_rows[64])


# summary.csv's columns as users read them (the explanation costs follow, one column per method)
SUMMARY_CSV_COLUMNS = [
    "model",
    "family",
    "resolution",
    "n_seeds",
    "test_accuracy",
    "test_accuracy_std",
    "test_macro_f1",
    "test_macro_f1_std",
    "test_macro_precision",
    "test_macro_precision_std",
    "test_macro_recall",
    "test_macro_recall_std",
    "latency_ms",
    "latency_ms_std",
    "latency_ms_ci_low",
    "latency_ms_ci_high",
    "throughput_ips",
    "throughput_ips_std",
    "throughput_ips_ci_low",
    "throughput_ips_ci_high",
    "train_throughput_ips",
    "train_throughput_ips_std",
    "peak_memory_mb",
    "peak_memory_mb_std",
    "gmacs",
    "gmacs_std",
    "params_m",
    "params_m_std",
    "train_time_s",
    "train_time_s_std",
    "epochs_run",
    "epochs_run_std",
    "undertrained",
    "undertrained_reason",
    *(f"convergence/{key}" for key in RECORD_KEYS),
    "profile_noisy",
    "on_estimate_front",
    "n_test_images",
    "test_accuracy_pooled",
    "test_accuracy_ci_low",
    "test_accuracy_ci_high",
    "test_macro_f1_pooled",
    "test_macro_f1_ci_low",
    "test_macro_f1_ci_high",
    "ci_level",
    "ci_method",
    "trivial_score",
    "over_trivial",
    "over_trivial_ci_low",
    "over_trivial_ci_high",
    "over_trivial_p",  # the one-sided sign-flip p that decides "shown above" (issue 31)
    "baseline_model",
    "baseline_score",
    "over_baseline",
    "over_baseline_ci_low",
    "over_baseline_ci_high",
    "over_baseline_p",
    "twoway_ci_low",
    "twoway_ci_high",
    "deterministic",
    "sufficient",
    "verdict",
    "margin",
    "reference_difference",
    "reference_low",
    "reference_high",
    "verdict_p",
    "detectable_margin",
    "note",
]


def test_summary_columns_keep_their_names_and_order(fake):
    *_, out, _ = fake
    with (out / "summary.csv").open(newline="") as fh:
        assert next(csv.reader(fh)) == SUMMARY_CSV_COLUMNS
    first = json.loads((out / "summary.json").read_text())["rows"][0]
    per_seed = [c for c in SUMMARY_CSV_COLUMNS if c.startswith("convergence/")]  # summary.json: one list of records
    at = SUMMARY_CSV_COLUMNS.index(per_seed[0])
    json_columns = [*SUMMARY_CSV_COLUMNS[:at], "convergence", *SUMMARY_CSV_COLUMNS[at + len(per_seed) :]]
    at = json_columns.index("over_baseline_p") + 1  # then each classical baseline by name (none here)
    json_columns = [*json_columns[:at], "baselines", *json_columns[at:]]
    assert list(first) == [*json_columns, "cross_resolution", "score_columns", "words"]
    assert first["baselines"] == {}
    assert first["score_columns"] == ["test_accuracy"] and first["words"]["test_accuracy"] == "accuracy"


def test_summary_row_reads_back_from_json_and_names_its_parent_run_columns(fake):
    *_, out, _ = fake
    data = json.loads((out / "summary.json").read_text())["rows"]
    costs = {"explain_seconds/gradcam": 1.5, "explain_peak_memory_mb/gradcam": 9.0}
    rows = [SummaryRow.from_dict({**d, **costs}) for d in data]
    assert [r.to_dict() for r in rows] == [{**d, **costs} for d in data]  # a round trip, columns in order
    assert list(rows[0].to_dict(csv=True)) == [*SUMMARY_CSV_COLUMNS, *costs]
    row = rows[0]
    assert row.accuracy == row.value("test_accuracy_pooled") == row.score("test_accuracy")[0]
    assert row.explain_seconds == {"gradcam": 1.5}
    assert row.value("explain_seconds/gradcam") == 1.5 and row.value("latency_ms") == row.latency_ms
    assert row.value("no_such_column") is None
    assert set(row.parent_metrics()) == {
        "test_accuracy_pooled",
        "test_accuracy_ci_low",
        "test_accuracy_ci_high",
        "test_macro_f1_pooled",
        "trivial_score",
        "over_trivial",
    }  # no twoway_ci_low/high: two seeds give no interval over test images and training seeds
    points = row.by_resolution()
    assert points["latency_p50_ms"] == row.latency_ms and points["explain_seconds_gradcam"] == 1.5
    assert points["test_accuracy_ci_low"] == row.score("test_accuracy")[1] is not None

    # on the estimate front: no other row has a higher-or-equal score and a lower-or-equal latency, one strictly
    # (brute force here; the figure's step line reads the flag)
    def beaten(r) -> bool:
        a, c = r.score(r.headline)[0], r.latency_ms
        return any(
            o is not r
            and o.score(o.headline)[0] >= a
            and o.latency_ms <= c
            and (o.score(o.headline)[0], o.latency_ms) != (a, c)
            for o in rows
        )

    assert [r.on_estimate_front for r in rows] == [not beaten(r) for r in rows] and any(
        r.on_estimate_front for r in rows
    )
    old = SummaryRow.from_dict({"model": "m", "resolution": 32})  # a summary.json from before a column existed
    assert old.value("test_accuracy_ci_low") is None and old.accuracy is None and old.n_seeds == 1
    assert old.convergence == [] and old.undertrained is None  # no convergence record: '-' in the tables


def test_pooled_macro_f1_of_identical_seeds_is_the_one_seed_interval():
    _, labels, preds = _outcomes((0,))
    p = preds[(64, 0)]
    one = stats.bootstrap_metric(labels, p, metric="macro_f1", resamples=400, seed=0)
    two = stats.pooled_macro_f1(labels, np.stack([p, p]), resamples=400, seed=0)
    assert (two.estimate, two.low, two.high) == pytest.approx((one.estimate, one.low, one.high))


def test_paired_tests_and_recommendation(fake):
    cfg, _, (_, labels, preds), out, _ = fake
    rows = _csv(out / "paired_tests.csv")
    assert [(int(r["resolution_a"]), int(r["resolution_b"])) for r in rows] == [(32, 64), (32, 128), (64, 128)]
    correct = {res: np.stack([preds[(res, s)] == labels for s in (0, 1)]) for res in RESOLUTIONS}
    kw = {"resamples": cfg.stats.resamples, "seed": cfg.stats.seed}
    expect = stats.compare_resolutions(correct, level=0.95, method="mcnemar", correction="holm", **kw)
    for row, ref in zip(rows, expect):
        assert row["method"].startswith("clustered McNemar (2 seeds")  # two seeds: images are the units
        assert float(row["p_adjusted"]) == pytest.approx(ref.p_adjusted, rel=1e-5)
        assert float(row["p_value"]) == pytest.approx(ref.test.p_value, rel=1e-5)
        assert float(row["p_adjusted"]) >= float(row["p_value"])  # Holm never lowers a p-value
        assert row["correction"] == "holm"
    sig = {(int(r["resolution_a"]), int(r["resolution_b"])): r["significant"] == "True" for r in rows}
    assert sig == {(32, 64): True, (32, 128): True, (64, 128): False}

    # the decision: each resolution against the largest at the margin, from the same arrays (stats.decide). At the
    # default margin 0.02 the 200 images cannot show 64 px non-inferior (5 discordant images): undecided, said so
    (rec,) = _csv(out / "recommendation.csv")
    assert (int(rec["resolution"]), int(rec["reference"]), rec["decided"]) == (128, 128, "False")
    scoped = "undecided at model scope (training seeds as replicates)"
    assert rec["sentence"].startswith(f"{MODEL}: {scoped}: no smaller resolution shown non-inferior to 128 px")
    assert "detects margins of" in rec["sentence"]
    # undecided: no smallest sufficient resolution shown, and the sentence does not say the reason twice
    undecided = f"{scoped}: no smaller resolution shown non-inferior to 128 px at margin 0.02"
    assert (rec["sufficient"], rec["sufficiency"]) == ("False", f"no sufficient resolution shown: {undecided}")
    assert rec["sentence"].count("no smaller resolution shown non-inferior") == 1
    # the fake's seed 0 is undertrained at every resolution, the 128 px reference too: said after it (issue 47)
    assert rec["sentence"].endswith(". Read with care: the reference 128 px is undertrained.")
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["paired_tests"]) == 3
    _check_verdicts(
        summary["rows"], stats.noninferiority(correct, margin=0.02), ["not reached", "undecided", "reference"]
    )
    text = (out / "summary.md").read_text()
    assert (
        "64 px undecided to 128 px at model scope (training seeds as replicates) at margin 0.02" in text
        and "this design detects margins of" in text
    )
    # at a margin the design can decide, 64 px is shown non-inferior and 32 px (60 more errors) inferior
    trials = fake[1]
    results = [TrialResult.from_json((t.summary_dir / "result.json").read_text()) for t in trials]
    wider = build_summary(results, trial_folders(trials), StatsConfig(resamples=400, margin=0.04, scope="checkpoint"))
    (rec,) = wider.recommendations
    assert (rec["resolution"], rec["decided"], rec["scope"]) == (64, True, "checkpoint")
    # decided, but about these trained checkpoints only (the image the unit): 64 px stays the decided resolution,
    # not shown to be the model's smallest sufficient one
    why = "no decision about the model (checkpoint scope only)"
    assert (rec["sufficient"], rec["sufficiency"]) == (False, f"no sufficient resolution shown: {why}")
    assert (
        rec["sentence"]
        == f"{MODEL}: 64 px is the smallest resolution shown non-inferior to 128 px for these trained checkpoints "
        f"(checkpoint scope) (margin 0.04 in accuracy). Not shown to be its smallest sufficient resolution: {why}. "
        "Read with care: the reference 128 px is undertrained."
    )
    rows = [r.to_dict() for r in wider.rows]
    at_checkpoints = stats.noninferiority(correct, margin=0.04, scope="checkpoint")  # the scope `wider` decided at
    _check_verdicts(rows, at_checkpoints, ["inferior", "non-inferior", "reference"])
    assert [r["sufficient"] for r in rows] == [False, False, False]


def _check_verdicts(rows: list[dict], expect: stats.Decision, verdicts: list[str]) -> None:
    found = {v.resolution: v for v in expect.verdicts}
    for row in rows:
        v = found[row["resolution"]]
        assert (row["verdict"], row["reference_low"], row["detectable_margin"]) == (v.verdict, v.low, v.detectable)
    assert [r["verdict"] for r in sorted(rows, key=lambda r: r["resolution"])] == verdicts


def test_one_seed_gives_no_seed_interval_and_valid_json(tmp_path):
    _, trials, _ = _fake_sweep(tmp_path, seeds=(3,))
    results = [TrialResult.from_json((t.summary_dir / "result.json").read_text()) for t in trials]
    out = tmp_path / "out"
    write_summary(build_summary(results, trial_folders(trials), FAST), out)
    text = (out / "summary.json").read_text()
    data = json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in summary.json"))
    for row in data["rows"]:
        assert row["n_seeds"] == 1 and row["twoway_ci_low"] is None
        assert "interval over test images and training seeds not available: needs >= 3 seeds" in row["note"]
        assert row["test_accuracy_ci_low"] is not None  # the image interval is there with one seed
    rec = data["recommendations"][0]  # about the model, one seed decides nothing and says how many it needs
    assert rec["reference"] == 128 and rec["n_seeds"] == 1 and rec["scope"] == "model" and not rec["decided"]
    assert "one seed says nothing of seed-to-seed variation" in rec["reason"] and " seeds" in rec["reason"]
    checkpoints = build_summary(results, trial_folders(trials), dataclasses.replace(FAST, scope="checkpoint"))
    rec = checkpoints.recommendations[0]  # about these checkpoints, the images are the unit: one seed decides
    assert rec["n_seeds"] == 1 and rec["detectable"] > 0 and "for these trained checkpoints" in rec["reason"]
    assert "not available: needs >= 3 seeds" in _csv(out / "summary.csv")[0]["note"]


def test_results_without_predictions_say_why(tmp_path):
    _, trials, _ = _fake_sweep(tmp_path, with_predictions=False)
    results = [TrialResult.from_json((t.summary_dir / "result.json").read_text()) for t in trials]
    summary = build_summary(results, trial_folders(trials), FAST)
    for row in summary.rows:
        assert row.value("test_accuracy_ci_low") is None and "no predictions.csv" in row.note
        assert row.test_accuracy_std is not None  # the seeds' spread needs only result.json
        assert row.twoway_ci_low is None and "interval over test images and training seeds not available" in row.note
    assert summary.paired_tests == [] and summary.recommendations[0]["available"] is False
    assert "no predictions.csv" in summary.recommendations[0]["sentence"]
    figures = sweep_figures(summary.rows, tmp_path / "figures")
    assert (tmp_path / "figures" / "accuracy_vs_resolution.png") in figures


def test_every_row_carries_each_seeds_convergence_record(fake):
    _, trials, _, out, files = fake
    results = {(t.resolution, t.seed): json.loads((t.summary_dir / "result.json").read_text()) for t in trials}
    rows = {r["resolution"]: r for r in json.loads((out / "summary.json").read_text())["rows"]}
    csv_rows = {int(r["resolution"]): r for r in _csv(out / "summary.csv")}
    for res in RESOLUTIONS:
        records = rows[res]["convergence"]
        assert [r["seed"] for r in records] == [0, 1]
        for record, seed in zip(records, (0, 1), strict=True):
            conv = results[(res, seed)]["convergence"]
            assert {k: record[k] for k in conv} == conv  # the whole record, as result.json holds it
        assert records[0]["lr_found"] is None and records[1]["lr_found"] == 0.0031  # absent: None
        assert [r["penalty"] for r in records] == [None, None]  # not a closed-form fit
        assert rows[res]["undertrained"] is True
        assert rows[res]["undertrained_reason"] == "seed 0: the best epoch is the last one (2)"
        for key in RECORD_KEYS:  # summary.csv: each key a JSON list of the seeds' values
            assert json.loads(csv_rows[res][f"convergence/{key}"]) == [r[key] for r in records], key
        assert csv_rows[res]["undertrained"] == "True"
    md = (out / "summary.md").read_text()
    results = md[md.index("## Results per model and resolution") : md.index("## Training")]
    assert "| undertrained | latency ms |" in results and "| best epoch / epochs run (seeds) |" in results
    assert f"| {MODEL} | 64 | " in results and "| 2/3, 1/3 |\n" in results  # the detail table's last column
    assert "| yes | " in results  # the headline table: undertrained
    training = md[md.index("## Training") : md.index("## Paired tests")]
    assert f"- {MODEL} @ 64 px: seed 0: the best epoch is the last one (2)" in training  # who did not learn, first
    assert f"| {MODEL} | 64 | 2/3, 1/3 | epoch_budget, plateau | -, 0.0031 | yes: seed 0: the best epoch" in training
    assert "seed 0: the best epoch is the last one (2)" in (out / "summary.txt").read_text()
    assert {f"learning_curves_{MODEL}.png", f"learning_curves_{MODEL}.pdf"} <= {p.name for p in files}


def test_a_closed_form_model_shows_its_chosen_penalty_and_has_no_curve(tmp_path):
    from resomap.reports.curves import curve_trials

    scores = (0.5, 0.8, 0.7)  # validation macro-F1 at C = 1e-4, 1e-3, 1e-2: 1e-3 chosen
    history = [{"epoch": e, "train/penalty_C": 10.0 ** (e - 4), "val/macro_f1": f} for e, f in enumerate(scores)]
    conv = {"monitor": "val/macro_f1", "best_epoch": 1, "epochs_run": 3, "stop_reason": "epoch_budget"}
    conv |= {"stop_detail": "fitted in closed form; the best on validation is kept", "undertrained": False}
    results = [
        {"key": f"k{s}", "name": "pixel_logreg@32", "model": "pixel_logreg", "family": "classical", "seed": s,
         "resolution": 32, "status": "FINISHED", "test": {"test/accuracy": 0.7}, "history": history,
         "convergence": conv}
        for s in (0, 1)
    ]  # fmt: skip
    summary = build_summary(results, stats=FAST)
    (row,) = summary.rows
    assert [r["penalty"] for r in row.convergence] == [1e-3, 1e-3] and row.undertrained is False
    write_summary(summary, tmp_path)
    md = (tmp_path / "summary.md").read_text()
    assert "| C=0.001, C=0.001 |\n" in md and "| penalty grid, penalty grid | - | no |" in md
    assert "penalty chosen on validation: C = 0.001" in " ".join(md.split())  # beside the decision, not epochs
    assert "best epoch" not in md.split("## Decision per model")[1].split("##")[0]
    assert curve_trials(results) == {}  # no epochs: no learning curve
    figures = sweep_figures(summary.rows, tmp_path / "figures", trials=summary.trials)
    assert figures and not any(p.name.startswith("learning_curves") for p in figures)


def test_figures_are_written(fake):
    *_, out, files = fake
    names = {p.name for p in files}
    for stem in ("accuracy_vs_resolution", "cost_vs_resolution", "pareto_accuracy_latency"):
        assert {f"{stem}.png", f"{stem}.pdf"} <= names
        assert (out / "figures" / f"{stem}.png").stat().st_size > 10_000
    assert f"train_test_resolution_{MODEL}.png" in names


def test_load_sweep(fake, tmp_path):
    from resomap.results import load_sweep

    cfg, _, _, out, _ = fake
    root = Path(cfg.experiment.output_dir) / cfg.experiment.summary_dir
    res = load_sweep("fake", root=root)
    assert res.folder == out
    assert len(res.summary) == 3 and {"test_accuracy_ci_low", "twoway_ci_high", "note"} <= set(res.summary.columns)
    assert len(res.predictions) == 3 * 2 * N_IMAGES
    assert list(res.predictions.columns) == [
        "model",
        "resolution",
        "seed",
        "test_resolution",
        "index",
        "label",
        "prediction",
        "correct",
    ]
    acc = res.predictions.groupby("resolution")["correct"].mean()
    assert acc[64] == pytest.approx(res.summary.set_index("resolution").loc[64, "test_accuracy_pooled"])
    assert len(res.paired_tests) == 3 and "p_adjusted" in res.paired_tests.columns
    assert res.recommendations.loc[0, "resolution"] == 128 and not res.recommendations.loc[0, "decided"]
    assert res.agreement.empty  # no explanations in this fake sweep
    assert load_sweep(out).folder == out  # a folder works too

    (out / "explanations").mkdir(exist_ok=True)
    (out / "explanations" / "agreement.csv").write_text("model,method,metric,value,noise_floor\nm,g,iou,0.5,0.1\n")
    assert list(load_sweep(out).agreement.columns) == ["model", "method", "metric", "value", "noise_floor"]

    copy = tmp_path / "model_summaries"  # the fixture's folders stay as they are
    shutil.copytree(root, copy)
    data = json.loads((out / "summary.json").read_text())
    for trial in data["trials"]:  # trials moved since the summary was written: found in the experiment's folders
        trial["folder"] = f"../../gone/{trial['model']}"
    (copy / "_sweep" / "fake" / "summary.json").write_text(json.dumps(data))
    assert len(load_sweep("fake", root=copy).predictions) == 3 * 2 * N_IMAGES

    old = copy / "_sweep" / "old"  # a summary.json from before trial folders were recorded ...
    old.mkdir()
    for trial in data["trials"]:
        del trial["folder"]
        layout = Layout.of(cfg)  # ... whose trials are in the seed layout of that time, without experiment folders
        here = layout.trial_summary(trial["model"], trial["resolution"], trial["seed"]).relative_to(root)
        there = layout.seed_layout_summary(trial["model"], trial["resolution"], trial["seed"]).relative_to(root)
        shutil.copytree(copy / here, copy / there)
    (old / "summary.json").write_text(json.dumps(data))
    assert len(load_sweep("old", root=copy).predictions) == 3 * 2 * N_IMAGES

    with pytest.raises(ResoMapError, match="known sweeps: fake, old") as err:
        load_sweep("nope", root=copy)
    assert "\n" not in str(err.value)


def test_stats_config_errors_are_one_line():
    cfg = load("configs", None, [])
    assert cfg.stats == StatsConfig()
    bad = [("stats.level", 1.0), ("stats.level", 0), ("stats.resamples", 0), ("stats.paired_test", "t")]
    for key, value in [*bad, ("stats.correction", "bonf"), ("stats.margin", -0.1)]:
        with pytest.raises(ConfigError) as err:
            with_overrides(cfg, {key: value}, "test")
        assert "\n" not in str(err.value) and key in str(err.value)
    assert with_overrides(cfg, {"stats.margin": 0.01}, "test").stats.margin == 0.01
    assert math.isclose(load("configs", None, ["stats.level=0.9"]).stats.level, 0.9)


class _RecordingTracker:
    """The Tracker methods _summarise uses, keeping what a run holds (metric points by step, latest values, tags,
    artifact paths) like MLflow."""

    enabled = True

    def __init__(self):
        self.metrics, self.tags, self.artifacts, self.calls = {}, {}, set(), []
        self.points: dict[str, dict[int, float]] = {}

    def get_run(self, run_id):
        from types import SimpleNamespace

        data = SimpleNamespace(metrics=dict(self.metrics), tags=dict(self.tags))
        return SimpleNamespace(info=SimpleNamespace(run_id=run_id), data=data)

    def metric_history(self, run_id, key):
        from types import SimpleNamespace

        return [SimpleNamespace(step=step, value=v) for step, v in sorted(self.points.get(key, {}).items())]

    def log_metrics(self, run_id, metrics, step=None):
        self.calls.append(("metrics", dict(metrics), step or 0))
        self.metrics.update(metrics)
        for key, value in metrics.items():
            self.points.setdefault(key, {})[step or 0] = value

    def replace_metrics(self, run_id, points):  # as a SQL store: the keys' points deleted, then logged again
        self.calls.append(("replace", {k: dict(v) for k, v in points.items()}))
        for key, steps in points.items():
            self.points.pop(key, None)
            self.metrics.pop(key, None)
            for step, value in sorted(steps.items()):
                self.points.setdefault(key, {})[step] = value
                self.metrics[key] = value
        return True

    def set_tags(self, run_id, tags):
        self.calls.append(("tags", dict(tags)))
        self.tags.update(tags)

    def delete_tag(self, run_id, key):
        self.calls.append(("delete tag", key))
        del self.tags[key]

    def log_artifact(self, run_id, path, artifact_path=None):
        self.calls.append(("artifact", str(path)))
        self.artifacts.add(f"{artifact_path}/{Path(path).name}" if artifact_path else Path(path).name)

    def artifact_paths(self, run_id):
        return set(self.artifacts)

    def experiment_tags(self):  # no sweep view on this experiment: the charts' ranges are not set
        return {}

    def tag_experiment(self, tags):
        self.calls.append(("experiment tags", dict(tags)))

    def log_images(self, run_id, images):
        for key, step, _ in images:
            self.calls.append(("image", key, step))
            self.artifacts.add(f"images/{key.replace('/', '~')}+step+{step}+timestamp+0+x.png")


def test_parent_run_gets_tables_and_headline_numbers_once(fake):
    cfg, trials, _, out, _ = fake
    results = [TrialResult.from_json((t.summary_dir / "result.json").read_text()) for t in trials]
    tracker = _RecordingTracker()
    _summarise(results, cfg, out, tracker, "parent", trials)
    assert {"summary/paired_tests.csv", "summary/recommendation.csv", "summary/summary.md"} <= tracker.artifacts
    assert f"figures/learning_curves_{MODEL}.png" in tracker.artifacts  # the learning curves, beside the others
    note = tracker.tags["mlflow.note.content"]
    assert "**Training**" in note and f"- {MODEL} @ 32 px: seed 0: the best epoch is the last one (2)" in note
    # undecided at 0.02: no smallest sufficient resolution, and one model: no answer across models, so no
    # resomap.best (the reference is in the decision tag's words)
    assert f"sufficient_resolution/{MODEL}" not in tracker.metrics and "resomap.best" not in tracker.tags
    assert f"one model in this sweep ({MODEL}): its own decision is the answer" in note
    said = f"one model, {MODEL}: 128 px until shown otherwise: no smaller resolution shown within 0.02 (64 px undecided"
    assert tracker.tags["recommended"].startswith(said)
    assert tracker.metrics[f"reference_resolution/{MODEL}"] == 128
    assert tracker.metrics[f"test_accuracy_ci_low/{MODEL}/32"] < tracker.metrics[f"test_accuracy_pooled/{MODEL}/32"]
    # the decision in a few words as a tag (MLflow cuts long tags), its sentence in the description
    assert tracker.tags[f"decision.{MODEL}"] == "128 px until shown otherwise"
    assert "undecided at model scope (training seeds as replicates): no smaller resolution shown" in note
    # each resolution's verdict with its margin and the detectable margin, in words and as numbers
    assert tracker.tags[f"verdict.{MODEL}.64"].startswith("undecided (margin 0.02; detectable 0.0")
    assert tracker.tags[f"verdict.{MODEL}.128"] == "reference (margin 0.02)"
    assert 0 < tracker.metrics[f"detectable_margin/{MODEL}/64"] < 0.1
    assert sorted(tracker.points[f"by_resolution/{MODEL}/detectable_margin"]) == [64]
    by_res = tracker.points[f"by_resolution/{MODEL}/test_accuracy"]
    assert sorted(by_res) == sorted({t.resolution for t in trials})  # step = resolution
    logged = [c for c in tracker.calls if c[0] != "artifact"]
    _summarise(results, cfg, out, tracker, "parent", trials)  # publishing again adds no metric point, tag or image
    assert [c for c in tracker.calls if c[0] != "artifact"] == logged


def _evidence_row(**changes) -> SummaryRow:
    """A summary row at 32 px with every piece of evidence for a smallest sufficient resolution: shown above the
    majority class and
    above two classical baselines (lower bounds > 0), no seed undertrained."""
    baselines = {
        "hog_svm": {"score": 0.70, "over": 0.06, "ci_low": 0.02, "ci_high": 0.10},
        "pixel_logreg": {"score": 0.72, "over": 0.04, "ci_low": 0.01, "ci_high": 0.08},
    }
    fields = {
        "over_trivial": 0.1, "over_trivial_ci_low": 0.05, "over_trivial_ci_high": 0.15, "baselines": baselines,
        "undertrained": False, "ci_level": 0.95, "words": {"trivial": "the majority class"},
    }  # fmt: skip
    return SummaryRow(**{"model": MODEL, "family": "cnn", "resolution": 32, "n_seeds": 2, **fields, **changes})


def _decided(**changes) -> dict:
    """A decision row decided at 32 px at model scope."""
    rec = {"model": MODEL, "resolution": 32, "reference": 128, "decided": True, "scope": "model", "available": True}
    return {**rec, "margin": 0.02, "reason": "32 px is the smallest resolution shown non-inferior to 128 px", **changes}


def test_sufficient_only_with_every_piece_of_evidence():
    """The one rule (summary.uncertainty.sufficiency): (a) a decision about the model, (b) shown above the trivial
    predictor, (c) above each classical baseline at that resolution, (d) no trial undertrained. All holding: the
    decided resolution is the model's smallest sufficient one; each failing alone: 'no sufficient resolution shown:
    <its reason>'; several failing: the first."""
    from resomap.summary.uncertainty import Evidence
    from resomap.summary.uncertainty import sufficiency as recommendation

    evidence = (
        "a decision about the model; shown above the majority class and hog_svm and pixel_logreg for these "
        "checkpoints (test images the unit, seeds averaged); not undertrained"
    )
    assert recommendation(_decided(), _evidence_row()) == Evidence(
        True, f"32 px is enough, within 0.02 of 128 px ({evidence})", evidence
    )
    no = "no sufficient resolution shown: "
    rec_alone = [  # (what differs in the recommendation row, the reason)
        # (a) a decision about the model
        ({"scope": "checkpoint"}, "no decision about the model (checkpoint scope only)"),
        ({"scope": None}, "no decision about the model (checkpoint scope only)"),  # a row from before scopes
        ({"decided": False, "reason": "undecided: needs 5 seeds; the plan says why"}, "undecided: needs 5 seeds"),
        (
            {"decided": False, "reason": "128 px: no smaller resolution to test"},
            "undecided at margin 0.02 (128 px: no smaller resolution to test)",
        ),
        ({"available": False, "resolution": None, "reason": "no predictions.csv"}, "no decision (no predictions.csv)"),
    ]
    for changes, why in rec_alone:
        rec = {k: v for k, v in _decided(**changes).items() if v is not None or k != "scope"}
        assert recommendation(rec, _evidence_row()) == Evidence(False, no + why), changes
    lower = "95% CI lower bound"
    row_alone = [  # (what differs in the summary row, the reason)
        # (b) above the trivial predictor: a lower bound at 0 or below, or no interval, is not "shown"
        ({"over_trivial_ci_low": -0.003}, f"32 px is not shown above the majority class ({lower} -0.003)"),
        ({"over_trivial_ci_low": None}, "32 px is not shown above the majority class (no interval)"),
        # (c) above each classical baseline at that resolution
        (
            {"baselines": {**_evidence_row().baselines, "pixel_logreg": {"over": 0.02, "ci_low": 0.0}}},
            f"32 px is not shown above pixel_logreg ({lower} +0.000)",
        ),
        ({"baselines": {"hog_svm": {"over": None, "ci_low": None}}}, "32 px is not shown above hog_svm (no interval)"),
        # (d) no trial undertrained
        (
            {"undertrained": True, "undertrained_reason": "seed 43: the epoch budget ended it while improving"},
            "32 px is undertrained (seed 43: the epoch budget ended it while improving)",
        ),
    ]
    for changes, why in row_alone:
        assert recommendation(_decided(), _evidence_row(**changes)) == Evidence(False, no + why), changes
    # a summary from before `baselines`: its one baseline from the first-baseline columns
    old = _evidence_row(baselines={}, baseline_model="pixel_logreg", over_baseline=0.01, over_baseline_ci_low=-0.02)
    assert recommendation(_decided(), old).reason == f"{no}32 px is not shown above pixel_logreg ({lower} -0.020)"
    # the first that fails is the one said
    worst = _evidence_row(over_trivial_ci_low=-0.1, undertrained=True, baselines={"hog_svm": {"ci_low": -0.1}})
    checkpoints = recommendation(_decided(scope="checkpoint"), worst)
    assert checkpoints.reason == f"{no}no decision about the model (checkpoint scope only)"
    assert recommendation(_decided(), worst).reason.startswith(f"{no}32 px is not shown above the majority class")
    # a classical baseline itself is sufficient by (a), (b) and its convergence: (c) does not apply to it
    classical = _evidence_row(model="pixel_logreg", family="classical", baselines={"hog_svm": {"ci_low": -0.05}})
    evidence = (
        "a decision about the model; shown above the majority class for these checkpoints (test images the unit, "
        "seeds averaged); not undertrained"
    )
    assert recommendation(_decided(), classical) == Evidence(
        True, f"32 px is enough, within 0.02 of 128 px ({evidence})", evidence
    )
    assert not recommendation(_decided(), None).sufficient  # no row at the decided resolution: no evidence
    # a decision whose smaller resolutions are shown inferior: it needs its reference
    needs = recommendation(_decided(resolution=128), _evidence_row(resolution=128))
    assert needs.sufficient and needs.reason.startswith("needs 128 px (a decision about the model")


def test_every_consumer_reads_the_one_sufficiency(fake, monkeypatch, tmp_path):
    """Where the evidence is there (the fake's decision made model scope and its trials not undertrained), the star,
    the green row, the ring and its legend, the table's mark, sufficient_resolution (and, in this one-model sweep,
    resomap.best) follow it; the same sweep at checkpoint scope gets none of them, and an earlier resomap.best is
    taken off the parent."""
    from matplotlib.lines import Line2D

    from resomap.reports.figures import quality_figure
    from resomap.reports.html import write_report
    from resomap.summary import decision
    from resomap.tracking.sweep_run import publish_sweep

    trials = fake[1]
    dicts = [json.loads((t.summary_dir / "result.json").read_text()) for t in trials]
    for d in dicts:
        d["convergence"] = {**d["convergence"], "undertrained": False, "undertrained_reason": None}
    cfg = StatsConfig(resamples=400, margin=0.04, scope="checkpoint")  # 64 px decided non-inferior to 128 px
    at_checkpoints = build_summary(dicts, trial_folders(trials), cfg)
    decide = decision.compare_model

    def model_scope(*args, **kwargs):  # what a model-scope decision would say, same numbers
        rows, rec = decide(*args, **kwargs)
        return rows, {**rec, "scope": "model"}

    monkeypatch.setattr(decision, "compare_model", model_scope)
    at_model = build_summary(dicts, trial_folders(trials), cfg)
    (rec,) = at_model.recommendations
    assert (rec["resolution"], rec["sufficient"]) == (64, True)
    assert rec["sentence"].endswith(
        ". The evidence that it suffices: a decision about the model; shown above the majority class for these "
        "checkpoints (test images the unit, seeds averaged); not undertrained."
    )
    assert [r.sufficient for r in at_model.rows] == [False, True, False]
    (rec,) = at_checkpoints.recommendations
    assert (rec["resolution"], rec["sufficient"]) == (64, False)
    assert not any(r.sufficient for r in at_checkpoints.rows)

    def rings(summary) -> tuple[int, list[str], str]:
        fig = quality_figure(summary.rows, summary.paired_tests, summary.recommendations)
        ringed = [ln for ax in fig.axes for ln in ax.lines if ln.get_markersize() == 11]
        legend = [h.get_label() for h in fig.legends[0].legend_handles if isinstance(h, Line2D)]
        return len(ringed), legend, fig._suptitle.get_text()

    found, legend, title = rings(at_model)
    assert found == 2 and "smallest sufficient" in legend and "no sufficient" not in title  # accuracy and macro-F1
    assert "(decisions at model scope)" in title  # whose decision the ring marks
    found, legend, title = rings(at_checkpoints)
    assert found == 0 and "smallest sufficient" not in legend
    assert "(decisions at checkpoint scope)" in title
    assert f"no sufficient resolution shown: {MODEL}" in title.replace("\n", " ")  # said, not only the ring

    for name, summary, mark in (
        ("model", at_model, "yes"),
        ("checkpoint", at_checkpoints, "not shown"),
    ):
        out = tmp_path / name
        write_summary(summary, out)
        md = (out / "summary.md").read_text()
        assert f"| non-inferior | {mark} |" in md
        assert "Smallest sufficient resolution: a model's decided resolution only where the decision is about" in md
        assert "recommend" not in md.lower()  # "recommended" is the answer across models' word, not a model's
        (rec,) = _csv(out / "recommendation.csv")
        assert (rec["resolution"], rec["sufficient"]) == ("64", str(name == "model"))
        page = write_report(out).read_text(encoding="utf-8")
        green = re.findall(r'<tr class="rec"><td class="l">([^<]*)</td><td>(\d+)</td><td>\d+</td>', page)  # model, px
        assert (green, f"{MODEL} ★" in page) == (([(f"{MODEL} ★", "64")], True) if name == "model" else ([], False))
        assert ("No model's smallest sufficient resolution is shown" in page) == (name == "checkpoint")

    tracker = _RecordingTracker()
    publish_sweep(tracker, "parent", at_model)
    assert tracker.tags["resomap.best"] == f"{MODEL}@64" and tracker.metrics[f"sufficient_resolution/{MODEL}"] == 64
    fresh = _RecordingTracker()
    publish_sweep(fresh, "parent", at_checkpoints)
    assert "resomap.best" not in fresh.tags and f"sufficient_resolution/{MODEL}" not in fresh.metrics
    publish_sweep(tracker, "parent", at_checkpoints)  # the same parent, summarised again without the evidence
    assert "resomap.best" not in tracker.tags and ("delete tag", "resomap.best") in tracker.calls
    note = tracker.tags["mlflow.note.content"]
    missing = "Not shown to be its smallest sufficient resolution: no decision about the model (checkpoint scope only)"
    assert missing in note
    assert f"one model in this sweep ({MODEL}): its own decision is the answer" in note


SEG_BACKGROUND = (0.2, 0.35, 0.5)  # the all-background prediction's mIoU of image i (the masks: the same per seed)


def _seg_trials(root: Path, scores: dict[tuple[int, int], np.ndarray]) -> tuple[list[dict], dict]:
    """Segmentation trials (tiny_segnet at each resolution x seed) whose seg_predictions.csv holds `scores`
    ({(resolution, seed): [2, N] mIoU and boundary F1 per image}), NaN written empty as the task writes them."""
    results, folders = [], {}
    for (res, seed), values in scores.items():
        folder = root / f"{res}" / f"seed{seed}"
        folder.mkdir(parents=True)
        lines = ["test_resolution,index,pixel_accuracy,miou,mdice,boundary_f1,background_miou"]
        for i, (miou, bf1) in enumerate(values.T):
            cell = "" if math.isnan(bf1) else f"{bf1:.6g}"
            lines.append(f"{res},{100 + i},0.9,{miou:.6g},0.5,{cell},{SEG_BACKGROUND[i % len(SEG_BACKGROUND)]}")
        (folder / "seg_predictions.csv").write_text("\n".join(lines) + "\n")
        test = {"test/accuracy": 0.9, "test/miou": float(values[0].mean()), "test/macro_f1": 0.5}
        results.append(
            {"model": "tiny_segnet", "family": "segnet", "resolution": res, "seed": seed, "status": "FINISHED",
             "test": test, "predictions": "seg_predictions.csv", "task": "segmentation" if seed == 0 else ""}
        )  # fmt: skip
        folders[("tiny_segnet", res, seed)] = folder
    return results, folders


def test_segmentation_summary_reads_per_image_scores_through_the_same_statistics(tmp_path):
    """The summary of a segmentation sweep: per-image mIoU / boundary F1 from the task's score tables, pooled over
    seeds with the same bootstrap interval, paired tests and recommendation as a classifier's accuracy gets, on the
    same [seeds, images] arrays (float scores: the paired bootstrap, Holm within each metric)."""
    rng = np.random.default_rng(0)
    n = 30
    base = rng.uniform(0.4, 0.8, n)
    scores = {}
    for res, gain in ((16, 0.0), (32, 0.1)):
        for seed in (0, 1):
            miou = np.clip(base + gain + rng.normal(0, 0.05, n), 0, 1)
            bf1 = np.clip(miou - 0.1 + rng.normal(0, 0.05, n), 0, 1)
            bf1[3] = np.nan  # an image with no boundary: no score
            scores[(res, seed)] = np.round(np.stack([miou, bf1]), 6)
    results, folders = _seg_trials(tmp_path, scores)
    summary = build_summary(results, folders, FAST)
    rows = {r.resolution: r for r in summary.rows}
    settings = {"level": FAST.level, "resamples": FAST.resamples, "seed": FAST.seed}
    for res, row in rows.items():
        assert row.score_columns == ["image_miou", "image_boundary_f1"] and row.headline == "image_miou"
        miou = np.stack([scores[(res, s)][0] for s in (0, 1)])
        expect = stats.bootstrap_scores(miou, **settings)
        assert row.score("image_miou") == (expect.estimate, expect.low, expect.high)
        bf1 = np.stack([scores[(res, s)][1] for s in (0, 1)])
        kept = np.isfinite(bf1).all(axis=0)
        expect = stats.bootstrap_scores(bf1[:, kept], **settings)
        assert row.score("image_boundary_f1") == (expect.estimate, expect.low, expect.high)
        assert "29 of 30 images" in row.note and row.n_test_images == n
        background = np.array([SEG_BACKGROUND[i % 3] for i in range(n)])  # the trivial predictor: all background
        above = stats.bootstrap_scores(miou.mean(axis=0) - background, **settings)
        assert row.trivial_score == pytest.approx(background.mean()) and row.words["trivial"] == "all background"
        assert (row.over_trivial, row.over_trivial_ci_low, row.over_trivial_ci_high) == pytest.approx(
            (above.estimate, above.low, above.high)
        )
        assert row.value("test_miou") == pytest.approx(np.mean([scores[(res, s)][0].mean() for s in (0, 1)]))
    by_metric = {p["metric"]: p for p in summary.paired_tests}
    assert set(by_metric) == {"miou", "boundary_f1"}
    a = np.stack([scores[(16, s)][0] for s in (0, 1)])
    b = np.stack([scores[(32, s)][0] for s in (0, 1)])
    test = stats.paired_score_test(a, b, **settings)
    found = by_metric["miou"]
    assert (found["effect"], found["ci_low"], found["ci_high"], found["p_value"]) == (
        test.effect,
        test.low,
        test.high,
        test.p_value,
    )
    assert found["p_adjusted"] == test.p_value and found["significant"]  # one pair per metric: nothing to adjust
    (rec,) = summary.recommendations
    assert (rec["metric"], rec["resolution"], rec["reference"], rec["decided"]) == ("miou", 32, 32, True)
    assert (
        "16 px is shown inferior at model scope (training seeds as replicates) (more than 0.02 below in mIoU per image)"
        in rec["sentence"]
    )
    decision = stats.noninferiority({r: np.stack([scores[(r, s)][0] for s in (0, 1)]) for r in (16, 32)}, margin=0.02)
    assert rows[16].verdict == "inferior" and rows[16].reference_high == decision.verdicts[1].high
    out = tmp_path / "summary"
    write_summary(summary, out)
    assert "mIoU per image [95% CI]" in (out / "summary.md").read_text()
    assert sweep_figures(summary.rows, out / "figures", summary.paired_tests, summary.recommendations)


def test_no_interval_in_the_summary_leaves_its_metric_range(fake):
    """Every interval of every row lies in [0, 1] (accuracy, macro-F1); with two seeds the interval over test images
    and training seeds is not given, and its cell says why."""
    _, _, _, out, _ = fake
    data = json.loads((out / "summary.json").read_text())
    for row in data["rows"]:
        for low, high in (
            ("test_accuracy_ci_low", "test_accuracy_ci_high"),
            ("test_macro_f1_ci_low", "test_macro_f1_ci_high"),
        ):
            assert 0.0 <= row[low] <= row[high] <= 1.0, (row["resolution"], low)
        assert row["twoway_ci_low"] is None and row["twoway_ci_high"] is None
    md = (out / "summary.md").read_text()
    assert "accuracy over test images and training seeds [95% CI]" in md and "images x seeds" not in md
    assert "| not available: needs >= 3 seeds |" in md and "both sources of variation" not in md


def test_three_seeds_give_the_interval_over_test_images_and_training_seeds(tmp_path):
    """With 3 seeds the row carries stats.twoway_bootstrap on the same arrays, inside [0, 1], wider than the
    image-only interval where the seeds disagree (it carries the seed variation too), named for what it covers."""
    seeds = (0, 1, 2)
    cfg, trials, (_, labels, preds) = _fake_sweep(tmp_path, seeds=seeds)
    results = [TrialResult.from_json((t.summary_dir / "result.json").read_text()) for t in trials]
    summary = build_summary(results, trial_folders(trials), cfg.stats)
    write_summary(summary, tmp_path / "out")
    st, wider = cfg.stats, 0
    for row in summary.rows:
        correct = np.stack([preds[(row.resolution, s)] == labels for s in seeds])
        twoway = stats.twoway_bootstrap(correct, level=st.level, resamples=st.resamples, seed=st.seed)
        assert row.n_seeds == 3 and (row.twoway_ci_low, row.twoway_ci_high) == (twoway.low, twoway.high)
        assert 0.0 <= row.twoway_ci_low <= row.accuracy <= row.twoway_ci_high <= 1.0
        assert "over test images and training seeds" not in row.note and not row.deterministic
        wider += row.twoway_ci_high - row.twoway_ci_low > row.score("test_accuracy")[2] - row.score("test_accuracy")[1]
    assert wider >= 1
    md = (tmp_path / "out" / "summary.md").read_text()
    low, high = summary.rows[0].twoway_ci_low, summary.rows[0].twoway_ci_high
    assert f"| [{low:.3f}, {high:.3f}] |" in md and "a two-way bootstrap over test images and training seeds" in md


def _borderline_records() -> list:
    """tiny_cnn (2 seeds) and the classical pixel_logreg (2 seeds, always the majority class) at 64 px on 180 test
    images, 124 of the majority class: tiny_cnn is right where the majority class is, plus 22 minority images
    under both seeds and 1 under one seed, and wrong on 11 majority images under both: +0.064 above both, the
    bootstrap interval's lower bound near 0 (its sign depends on the resampling seed)."""
    from resomap.records import ScoreTable
    from resomap.summary.aligned import TrialRecord
    from resomap.tasks import get_task

    task = get_task("classification")
    n = 180
    labels = np.zeros(n, dtype=np.int64)
    labels[124:] = 1
    index = np.arange(n, dtype=np.int64)
    mine = np.zeros((2, n), dtype=np.int64)  # predictions: the majority class ...
    mine[:, 124:146] = 1  # ... right on 22 minority images under both seeds
    mine[0, 146] = 1  # and one under seed 0 only
    mine[:, :11] = 1  # wrong on 11 majority images
    records = []
    for model, family, preds in (("tiny_cnn", "cnn", mine), ("pixel_logreg", "classical", np.zeros((2, n), int))):
        for seed in (0, 1):
            table = ScoreTable(64, index, {"accuracy": preds[seed] == labels}, labels, preds[seed])
            result = {"model": model, "family": family, "resolution": 64, "seed": seed, "status": "FINISHED"}
            records.append(TrialRecord(result, None, {64: table}, task))
    return records


def test_shown_above_is_decided_by_a_test_not_by_the_bootstrap_seed():
    """Issue 31: "shown above the majority class" came from the lower bound of a bootstrap interval, so on a
    borderline case the resampling seed decided it. Now the one-sided exact sign-flip test of the per-image
    differences decides (p <= (1 - level) / 2, the one-sided share of the two-sided interval); the interval stays
    beside it, descriptive, and the row says both."""
    from resomap.summary.aligned import group_records
    from resomap.summary.build import baseline_caveat
    from resomap.summary.text import above_baseline, above_trivial
    from resomap.summary.uncertainty import baseline_columns, interval_columns

    groups = group_records(_borderline_records())
    lows, verdicts, cells = set(), set(), set()
    for seed in range(8):
        cfg = StatsConfig(resamples=1000, seed=seed)
        columns = interval_columns(groups[("tiny_cnn", 64)], cfg)
        columns.update(baseline_columns("tiny_cnn", 64, groups, cfg))
        columns.pop("note", None)
        row = SummaryRow("tiny_cnn", "cnn", 64, **columns)
        lows |= {row.over_trivial_ci_low > 0, row.over_baseline_ci_low > 0}
        verdicts.add((row.shown_above(), row.shown_above("pixel_logreg"), baseline_caveat([row])))
        cells.add((above_trivial(row).split(" (")[1], above_baseline(row).split(" (")[1]))
    assert lows == {True, False}  # the interval's lower bound: above 0 under some seeds, not under others
    caveat = (
        "Read with care: not shown above the majority class at any resolution; not shown above the classical "
        "baseline pixel_logreg at any resolution."
    )
    assert verdicts == {(False, False, caveat)}  # the test (p 0.029 > 0.025): not shown, whatever the seed
    d = np.zeros(180)
    d[124:146], d[146], d[:11] = 1.0, 0.5, -1.0  # the per-image differences, seeds averaged
    p = stats.sign_flip(d, alternative="greater").p_value
    assert 0.01 < p < 0.05 and row.over_trivial_p == row.over_baseline_p == row.baselines["pixel_logreg"]["p"] == p
    assert cells == {(f"0.689; p {p:.3g})", f"0.689; p {p:.3g})")}  # the p that decides is in the row's cell
    # the same rule with the level's alpha: at level 0.99 (alpha 0.01) the same p does not show it
    strict = SummaryRow("tiny_cnn", "cnn", 64, 2, ci_level=0.99, over_trivial_p=p, over_trivial_ci_low=0.001)
    assert strict.shown_above() is False
    # a summary from before the test (no p): the interval's lower bound, as it was
    old = SummaryRow("tiny_cnn", "cnn", 64, 2, over_trivial_ci_low=-0.001)
    assert old.shown_above() is False and SummaryRow("m", "cnn", 64, 1).shown_above() is None


def test_the_trivial_predictor_answers_the_training_majority_class():
    """Issue 47: the majority class was taken from the test labels. Trials record their training split's count
    per class (result.json data.train_counts); the trivial predictor answers the most frequent of those, here class 1
    although class 0 is the test images' majority; results from before the record keep the test labels' majority."""
    from resomap.summary.aligned import group_records
    from resomap.summary.uncertainty import interval_columns

    records = [r for r in _borderline_records() if r.result["model"] == "tiny_cnn"]
    labels = np.zeros(180, dtype=np.int64)
    labels[124:] = 1
    old = interval_columns(group_records(records)[("tiny_cnn", 64)], StatsConfig(resamples=1000))
    assert old["trivial_score"] == pytest.approx(124 / 180)  # no record: the test images' majority (class 0)
    for r in records:
        r.result["data"] = {"train_counts": [40, 60]}
    new = interval_columns(group_records(records)[("tiny_cnn", 64)], StatsConfig(resamples=1000))
    assert new["trivial_score"] == pytest.approx(56 / 180)  # the training majority (class 1) on the test images
    mine = np.mean([r.own.scores["accuracy"] for r in records], axis=0)
    d = mine - (labels == 1)
    assert new["over_trivial"] == pytest.approx(d.mean())
    assert new["over_trivial_p"] == stats.sign_flip(d, alternative="greater").p_value


def test_a_trial_records_its_training_split_count_per_class():
    from types import SimpleNamespace

    from resomap.sweep.trial_records import train_counts

    bundle = SimpleNamespace(train_labels=np.array([0, 2, 2, 1, 2]), class_names=["a", "b", "c", "d"])
    assert train_counts(bundle) == [1, 1, 3, 0]
    assert train_counts(SimpleNamespace(train_labels=np.zeros(0), class_names=["a"])) is None  # nothing to count
    assert train_counts(SimpleNamespace(class_names=[])) is None  # no class labels (segmentation)


def _named_baseline_records() -> tuple[list, dict]:
    """tiny_cnn at 32 and 64 px, small_resnet10 at 32 and 64 px (its best: 32) and pixel_logreg at 64 px only, 2
    seeds each, on 200 test images (random outcomes, seeded); returns the records and each trial's correct-or-not."""
    from resomap.records import ScoreTable
    from resomap.summary.aligned import TrialRecord
    from resomap.tasks import get_task

    task, n, rng = get_task("classification"), 200, np.random.default_rng(5)
    labels = (np.arange(n) % 3 == 0).astype(np.int64)
    rates = {("tiny_cnn", 32): 0.8, ("tiny_cnn", 64): 0.86, ("small_resnet10", 32): 0.78}
    rates |= {("small_resnet10", 64): 0.7, ("pixel_logreg", 64): 0.72}
    records, correct = [], {}
    for (model, res), rate in rates.items():
        family = "classical" if model == "pixel_logreg" else "cnn"
        for seed in (0, 1):
            right = rng.random(n) < rate
            correct[(model, res, seed)] = right
            preds = np.where(right, labels, 1 - labels)
            table = ScoreTable(res, np.arange(n), {"accuracy": right}, labels, preds)
            result = {"model": model, "family": family, "resolution": res, "seed": seed, "status": "FINISHED"}
            records.append(TrialRecord(result, None, {res: table}, task))
    return records, correct


def test_a_named_baseline_is_compared_at_its_best_resolution_and_gates_the_sufficient_resolution():
    """stats.baselines: every other model at every resolution compared with the named model at its best resolution
    (highest pooled test score), as with a classical baseline at the same resolution: the paired per-image
    difference (seeds averaged), its interval and the one-sided sign-flip p that decides "shown above"; the words,
    the CSV columns and the smallest sufficient resolution's rule name it with that resolution."""
    from resomap.summary.aligned import group_records
    from resomap.summary.build import baseline_caveat
    from resomap.summary.standing import baseline_words
    from resomap.summary.uncertainty import baseline_columns, best_resolution
    from resomap.summary.uncertainty import sufficiency as recommendation

    records, correct = _named_baseline_records()
    groups = group_records(records)
    cfg = StatsConfig(resamples=1000, baselines=["small_resnet10"])
    assert best_resolution("small_resnet10", groups) == 32 and best_resolution("nothing", groups) is None
    base = (correct[("small_resnet10", 32, 0)] * 1.0 + correct[("small_resnet10", 32, 1)]) / 2
    rows = {}
    for res in (32, 64):
        found = baseline_columns("tiny_cnn", res, groups, cfg)
        mine = (correct[("tiny_cnn", res, 0)] * 1.0 + correct[("tiny_cnn", res, 1)]) / 2
        named = found["baselines"]["small_resnet10"]
        assert named["resolution"] == 32  # its best, at every resolution of tiny_cnn
        assert named["over"] == pytest.approx((mine - base).mean()) and named["score"] == pytest.approx(base.mean())
        assert named["p"] == stats.sign_flip(mine - base, alternative="greater").p_value
        want = stats.bootstrap_scores(mine - base, level=0.95, resamples=1000, seed=0)
        assert (named["ci_low"], named["ci_high"]) == pytest.approx((want.low, want.high))
        # the classical baseline stays at the row's resolution and keeps the first-baseline columns
        assert ("pixel_logreg" in found["baselines"]) == (res == 64) and found.get("baseline_model") == (
            "pixel_logreg" if res == 64 else None
        )
        found.pop("note", None)
        rows[res] = SummaryRow("tiny_cnn", "cnn", res, 2, ci_level=0.95, over_trivial_p=0.001, **found)
    # at 32 px p 0.034 > 0.025 though the interval's lower bound is +0.003: the test decides; at 64 px p < 0.001
    assert [rows[r].shown_above("small_resnet10") for r in (32, 64)] == [False, True]
    assert rows[32].baselines["small_resnet10"]["ci_low"] > 0
    named_row = baseline_columns("small_resnet10", 64, groups, cfg)  # a named baseline: with the classical ones only
    assert list(named_row["baselines"]) == ["pixel_logreg"]
    assert "resolution" not in named_row["baselines"]["pixel_logreg"]
    unnamed = StatsConfig(resamples=1000)  # without stats.baselines: the classical one at the same resolution only
    assert baseline_columns("tiny_cnn", 32, groups, unnamed) == {}
    assert list(baseline_columns("tiny_cnn", 64, groups, unnamed)["baselines"]) == ["pixel_logreg"]
    csv_row = rows[64].to_dict(csv=True)
    assert (
        csv_row["over_small_resnet10_at_px"] == 32
        and csv_row["over_small_resnet10_p"] == rows[64].baselines["small_resnet10"]["p"]
    )
    label = "small_resnet10 (its best, 32 px)"
    ordered = [rows[32], rows[64]]
    assert f"not shown above the baseline {label} at 32 px" in baseline_caveat(ordered)
    words = baseline_words(ordered, ordered)
    assert f"shown above {label} at 64 px" in words and f"not shown above {label} at 32 px" in words
    rec = {"model": "tiny_cnn", "reference": 64, "decided": True, "scope": "model", "available": True}
    assert recommendation({**rec, "resolution": 32}, rows[32]).reason == (
        f"no sufficient resolution shown: 32 px is not shown above {label} (one-sided p "
        f"{rows[32].baselines['small_resnet10']['p']:.3g}; 95% CI lower bound "
        f"{rows[32].baselines['small_resnet10']['ci_low']:+.3f})"
    )
    assert recommendation({**rec, "resolution": 64}, rows[64]).reason == (
        "needs 64 px (a decision about the model; shown above the trivial predictor and pixel_logreg and "
        f"{label} for these checkpoints (test images the unit, seeds averaged); not undertrained)"
    )


# ------------------------------------------------------------------------------------------------ one replicate


def _records(predictions: dict[int, dict[int, np.ndarray]], labels: np.ndarray, own: int = 32) -> list:
    """TrialRecords of one model at `own` px: {seed: {test resolution: predictions}} against `labels`."""
    from resomap.summary.aligned import TrialRecord
    from resomap.tasks import of_result

    index = np.arange(len(labels), dtype=np.int64)
    out = []
    for seed, by_res in predictions.items():
        tables = {res: Predictions(res, index, labels, p).table() for res, p in by_res.items()}
        result = {"model": "m", "resolution": own, "seed": seed, "status": "FINISHED"}
        out.append(TrialRecord(result, None, tables, of_result(result)))
    return out


def test_seeds_are_one_fit_only_when_every_prediction_agrees_and_is_not_one_class():
    from resomap.summary.aligned import deterministic, identical_seeds

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 40)
    p = rng.integers(0, 3, 40)
    other = p.copy()
    other[7] = (other[7] + 1) % 3
    same = {42: {32: p, 64: p}, 43: {32: p.copy(), 64: p.copy()}}
    assert identical_seeds(_records(same, labels))
    assert deterministic({32: _records(same, labels)})
    assert not identical_seeds(_records({42: same[42]}, labels))  # one seed: nothing to tell
    assert not identical_seeds(_records({42: {32: p, 64: p}, 43: {32: p, 64: other}}, labels))  # differs at 64 px
    assert not identical_seeds(_records({42: {32: p}, 43: {32: other}}, labels))
    ones = np.ones(40, dtype=np.int64)  # every image in one class: a collapsed network agrees with itself
    assert not identical_seeds(_records({42: {32: ones}, 43: {32: ones.copy()}}, labels))
    no_records = _records(same, labels)
    no_records[1].tables = {}
    assert not identical_seeds(no_records)
    assert not deterministic({32: _records(same, labels), 64: _records({42: {64: p}, 43: {64: other}}, labels, 64)})


@pytest.mark.parametrize("seeds", [(0, 1), (0, 1, 2)])
def test_a_deterministic_model_is_one_replicate_said_once_with_no_interval_over_seeds(tmp_path, seeds):
    """Every seed predicts what the first does: each row and the decision row are marked deterministic, summary.md
    says once (in the answer's line for the model) that the seeds are one replicate, and no interval over seeds is
    given (3 seeds included: they are one fit)."""
    cfg, trials, _ = _fake_sweep(tmp_path, seeds=seeds, one_fit=True)
    results = [TrialResult.from_json((t.summary_dir / "result.json").read_text()) for t in trials]
    summary = build_summary(results, trial_folders(trials), cfg.stats)
    out = tmp_path / "out"
    write_summary(summary, out)
    said = f"deterministic: its {len(seeds)} seeds are one replicate."
    for row in summary.rows:
        assert row.deterministic and row.twoway_ci_low is None and row.n_seeds == len(seeds)
        assert "interval over test images and training seeds not available: one replicate" in row.note
    (rec,) = summary.recommendations
    assert rec["deterministic"] is True and "one replicate" not in rec["sentence"]  # said in the answer instead
    assert "at model scope (one fit: the training seed changes nothing)" in rec["sentence"]
    assert summary.deterministic_models() == {MODEL: len(seeds)}
    md = (out / "summary.md").read_text()
    assert " ".join(md.split()).count(said) == 1 and "| not available: one replicate (one fit) |" in md
    assert md.lower().count("deterministic") == 1
    assert _csv(out / "recommendation.csv")[0]["deterministic"] == "True"
    assert {r["deterministic"] for r in _csv(out / "summary.csv")} == {"True"}
    assert SummaryRow.from_dict(json.loads((out / "summary.json").read_text())["rows"][0]).deterministic


def test_a_model_whose_seeds_differ_is_not_deterministic(fake):
    *_, out, _ = fake
    data = json.loads((out / "summary.json").read_text())
    assert [r["deterministic"] for r in data["rows"]] == [False] * len(RESOLUTIONS)
    assert data["recommendations"][0]["deterministic"] is False
    assert "one replicate" not in data["recommendations"][0]["sentence"]


def test_segmentation_seeds_are_one_fit_on_equal_scores_unless_they_score_as_all_background():
    from resomap.records import ScoreTable
    from resomap.summary.aligned import TrialRecord, identical_seeds
    from resomap.tasks import get_task

    task = get_task("segmentation")
    rng = np.random.default_rng(1)
    index = np.arange(30, dtype=np.int64)
    background = rng.random(30)

    def records(*by_seed: np.ndarray) -> list[TrialRecord]:
        out = []
        for seed, miou in enumerate(by_seed):
            scores = {"miou": miou, "boundary_f1": miou / 2, "background_miou": background}
            result = {"model": "seg", "resolution": 32, "seed": seed, "status": "FINISHED", "task": "segmentation"}
            out.append(TrialRecord(result, None, {32: ScoreTable(32, index, scores)}, task))
        return out

    fit = rng.random(30)
    assert identical_seeds(records(fit, fit.copy()))
    assert not identical_seeds(records(fit, fit + 1e-9))
    assert not identical_seeds(records(background.copy(), background.copy()))  # all background under both seeds


# ------------------------------------------------------------------------------------------------ three-way front


def _front_row(model: str, res: int, acc: float, **costs) -> SummaryRow:
    scores = {"test_accuracy_pooled": acc, "test_accuracy_ci_low": acc - 0.02, "test_accuracy_ci_high": acc + 0.02}
    return SummaryRow(model, "cnn", res, 1, ci_level=0.95, image_scores=scores, **costs)


def test_the_tradeoff_takes_gmacs_without_a_latency_and_says_which_axes_it_left_out():
    from resomap.summary.front import Measured, tradeoff_cells, tradeoffs

    # a: latency missing at 64 px, so GMACs (a count: compared exactly); 32 px is shown below 64 px on accuracy
    # (the paired test) but costs fewer GMACs: both stay. b: one seed of latency and no count: the cost cannot be
    # tested, so it keeps 32 px. c: one seed of latency, so GMACs; 64 px better and cheaper: 32 px is dropped
    rows = [
        _front_row("a", 32, 0.70, latency_ms=1.0, gmacs=0.1),
        _front_row("a", 64, 0.90, gmacs=0.4),
        _front_row("b", 32, 0.70, latency_ms=2.0),
        _front_row("b", 64, 0.90, latency_ms=1.0),
        _front_row("c", 32, 0.70, latency_ms=2.0, gmacs=0.4),
        _front_row("c", 64, 0.90, latency_ms=1.0, gmacs=0.1),
    ]
    paired = [
        {"model": m, "metric": "accuracy", "resolution_a": 32, "resolution_b": 64, "effect": 0.2, "p_value": 1e-4,
         "method": "clustered McNemar"}
        for m in "abc"
    ]  # fmt: skip
    trials = [
        {"model": m, "resolution": 32, "seed": 0, "status": "FINISHED", "profile": {"latency_median_ms": 2.0}}
        for m in "bc"
    ]  # fmt: skip
    quality = [
        {"model": "a", "resolution": r, "method": m, "score": "deletion_auc_vs_random", "estimate": 0.1, "low": 0.05,
         "high": 0.15}
        for r, m in ((32, "saliency"), (64, "saliency"), (32, "gradcam"))  # gradcam lacks 64 px: saliency is used
    ]  # fmt: skip
    front3 = {e["model"]: e for e in tradeoffs(rows, quality, Measured(paired, trials))}
    a, b, c = front3["a"], front3["b"], front3["c"]
    assert [x["name"] for x in a["axes"]] == ["score", "cost", "quality"]
    assert a["axes"][1]["column"] == "gmacs" and "latency missing at some resolution: GMACs instead" in a["note"]
    assert a["axes"][2]["method"] == "saliency" and "quality of saliency" in a["note"]
    assert [p["on_front"] for p in a["points"]] == [True, True]
    # the quality has intervals but no per-image scores to pair: no test, so it too keeps 32 px
    assert next(t for t in a["tests"] if t["axis"] == "quality")["reason"] == "no per-image scores: no paired test"
    assert [x["name"] for x in b["axes"]] == ["score", "cost"] and "quality left out" in b["note"]
    assert [p["on_front"] for p in b["points"]] == [True, True]
    (cost,) = [t for t in b["tests"] if t["axis"] == "cost"]
    assert cost["p_value"] is None and cost["reason"].startswith("one seed at some resolution: latency cannot be")
    assert c["axes"][1]["column"] == "gmacs" and "latency of one seed at some resolution cannot be tested" in c["note"]
    dropped = c["points"][0]
    assert (dropped["on_front"], dropped["dropped_by"], dropped["better_on"]) == (False, 64, ["score", "cost"])
    assert dropped["exact_on"] == ["cost"]  # GMACs: a count, compared exactly; the score tested (Holm over 1)
    assert dropped["standing"] == (
        "dropped: 64 px is shown better on accuracy (Holm p 0.0001) and GMACs (a count) and worse on none"
    )
    _, body = tradeoff_cells(list(front3.values()))
    assert body[2][0][:3] == ["b", "32", "0.700 [0.680, 0.720]"] and body[2][0][4] == "-" and body[2][1] is True
    assert body[4][0][:2] == ["c", "32"] and body[4][1] is False


def test_a_quality_score_without_an_interval_is_left_out_not_compared_by_its_estimate():
    """Too few probe images to bootstrap: the quality's bare estimates (noise) must not drop a resolution."""
    from resomap.summary.front import Measured, tradeoffs

    rows = [_front_row("c", 32, 0.88, gmacs=0.1), _front_row("c", 64, 0.90, gmacs=0.4)]  # the same score, 64 dearer
    paired = [{"model": "c", "metric": "accuracy", "resolution_a": 32, "resolution_b": 64, "effect": 0.02,
               "p_value": 0.4}]  # fmt: skip
    why = "only 8 test images: a bootstrap interval needs at least 10"
    bare = [
        {"model": "c", "resolution": 32, "method": "saliency", "score": "deletion_auc_vs_random", "estimate": 0.01,
         "reason": why},
        {"model": "c", "resolution": 64, "method": "saliency", "score": "deletion_auc_vs_random", "estimate": 0.05,
         "reason": why},
    ]  # fmt: skip
    (c,) = tradeoffs(rows, bare, Measured(paired))
    assert [x["name"] for x in c["axes"]] == ["score", "cost"], c
    assert f"deletion AUC, random maps - method (saliency) has no interval ({why}): quality left out" in c["note"]
    assert [p["on_front"] for p in c["points"]] == [True, False]  # 32 px: the same score for fewer GMACs
    # with intervals, the quality is an axis; its paired test on 12 probe images shows nothing
    with_bars = [{**q, "low": q["estimate"] - 0.1, "high": q["estimate"] + 0.1} for q in bare]
    scores = np.random.default_rng(0).normal(0.03, 0.1, (2, 12))
    images = {("c", r, "saliency", "deletion_auc_vs_random"): scores[i] for i, r in enumerate((32, 64))}
    (c,) = tradeoffs(rows, with_bars, Measured(paired, quality=images))
    assert [x["name"] for x in c["axes"]] == ["score", "cost", "quality"]
    (quality,) = [t for t in c["tests"] if t["axis"] == "quality"]
    assert quality["p_value"] > 0.05 and quality["shown_better"] is None
    assert [p["on_front"] for p in c["points"]] == [True, False]


def test_a_flawed_reference_is_said_in_the_decision_and_no_sufficient_resolution_rests_on_it(tmp_path, monkeypatch):
    """(issue 47, item 4) A reference resolution that is undertrained, or that a smaller resolution is shown above
    by the paired tests (Holm), is named in the decision's sentence, and no smallest sufficient resolution rests on
    it; a difference not significant, in the other direction, or between two other resolutions is no flaw."""
    import sys

    from resomap.summary.uncertainty import Evidence, reference_flaw
    from resomap.summary.uncertainty import sufficiency as recommendation

    rows = {128: _evidence_row(resolution=128, undertrained=True), 64: _evidence_row(resolution=64)}
    paired = [
        {"resolution_a": 32, "resolution_b": 128, "effect": -0.03, "significant": True, "p_adjusted": 0.027},
        {"resolution_a": 64, "resolution_b": 128, "effect": -0.02, "significant": False, "p_adjusted": 0.2},
        {"resolution_a": 32, "resolution_b": 64, "effect": -0.05, "significant": True, "p_adjusted": 0.01},
    ]
    flaw = reference_flaw(_decided(), rows, paired)
    assert flaw == "the reference 128 px is undertrained and shown below 32 px (Holm p 0.027) by the paired tests"
    assert recommendation(_decided(reference_flaw=flaw), _evidence_row()) == Evidence(
        False,
        f"no sufficient resolution shown: {flaw}: not worse than it by the margin is no evidence of enough pixels",
    )
    # a flaw of the decision itself comes before the gates on the decided resolution: said even where 32 px is
    # also not shown above a baseline (the quickstart's small_resnet10 before issue 45: its reason was the baseline)
    below_baseline = _evidence_row(baselines={"pixel_logreg": {"score": 0.8, "over": 0.01, "ci_low": -0.01, "p": 0.12}})
    shown = recommendation(_decided(reference_flaw=flaw), below_baseline)
    assert shown.reason.startswith(f"no sufficient resolution shown: {flaw}")
    assert "not shown above pixel_logreg" in recommendation(_decided(), below_baseline).reason
    fair = {128: _evidence_row(resolution=128), 64: _evidence_row(resolution=64)}
    assert reference_flaw(_decided(), fair, [{**paired[0], "effect": 0.03}, *paired[1:]]) == ""
    assert recommendation(_decided(reference_flaw=""), _evidence_row()).sufficient

    # end to end: a fake sweep whose 128 px reference is clearly the worst resolution, every 128 px seed undertrained
    outcomes = _outcomes

    def worse_reference(seeds):
        index, labels, preds = outcomes(seeds)
        swapped = {(32 if res == 128 else 128 if res == 32 else res, seed): p for (res, seed), p in preds.items()}
        return index, labels, swapped

    monkeypatch.setattr(sys.modules[__name__], "_outcomes", worse_reference)
    _, trials, _ = _fake_sweep(tmp_path)
    for trial in trials:  # undertrained at 128 px only
        path = trial.summary_dir / "result.json"
        data = json.loads(path.read_text())
        data["convergence"] |= {"undertrained": trial.resolution == 128, "undertrained_reason": "budget ran out"}
        path.write_text(json.dumps(data))
    results = [json.loads((t.summary_dir / "result.json").read_text()) for t in trials]
    summary = build_summary(results, trial_folders(trials), FAST)
    rec = next(r for r in summary.recommendations if r["model"] == MODEL)
    assert rec["reference"] == 128 and rec["decided"] and not rec["sufficient"]
    said = "the reference 128 px is undertrained and shown below 32 px (Holm p "
    assert said in rec["reference_flaw"] and said in rec["sufficiency"] and said in rec["sentence"]
    assert rec["sentence"].count(said) == 1  # said once
    assert "64 px (Holm p" in rec["reference_flaw"]
