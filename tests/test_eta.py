"""The sweep's ETA (resomap.sweep.eta): remaining trials weighed by what a probe measured for each (training
steps, the trial's data and model, its explanations), calibrated on the trials done, on as many workers as the
executor runs at once; the probe changes no result; the sweep records how good each estimate was (eta.csv)."""

from __future__ import annotations

import csv
import json
import logging
import math
import re
from pathlib import Path

import pytest

from conftest import tiny_sweep_config
from resomap.sweep.eta import Eta, Probe, makespan


def test_a_trial_is_priced_by_its_probe_not_by_the_mean_of_those_done():
    # 32 px measured 1 s of training per probe, 128 px 16 s; the 32 px trial took 4 s, 1.2 s of it training
    probes = {("m", 32): Probe(1.0, 1e-4), ("m", 128): Probe(16.0, 16e-4)}
    eta = Eta([("m", 32), ("m", 128)], probes)
    assert eta.seconds_left() is None  # nothing done: no calibration yet
    eta.finished(("m", 32), 4.0, 1.2)
    # training: 16 s x the factor measured / predicted (1.2), shrunk toward 1 with the probe counted as one trial
    # (own: log 1.2, pooled prior: log 1.2 / 2, mean of the two); plus the rest of a trial (2.8 s, the trial done)
    assert eta.seconds_left() == pytest.approx(16 * 1.2**0.75 + 2.8)
    assert eta.seconds_left() > 4.0 * 2  # the old estimate (mean of trials done x trials left) said 4 s
    assert eta.pending == [("m", 128)]


def test_training_factor_is_the_models_own_then_pooled_and_failures_calibrate_nothing():
    probes = {("a", 32): Probe(2.0, 1e-4), ("b", 32): Probe(2.0, 1e-4), ("c", 32): Probe(2.0, 1e-4)}
    eta = Eta([("a", 32), ("b", 32), ("c", 32), ("c", 32)], probes)
    eta.finished(("a", 32), 10.0, 4.0)  # a: twice its prediction
    eta.finished(("b", 32), 10.0, 6.0)  # b: three times
    eta.finished(("c", 32), 30.0, None)  # failed: counts as done, calibrates nothing
    pooled = (math.log(2) + math.log(3)) / 3  # the two trials and the probe's 1
    assert eta._train_factor("c") == pytest.approx(math.exp(pooled))  # no trial of its own: the pooled factor
    assert eta._train_factor("a") == pytest.approx(math.exp((math.log(2) + pooled) / 2))
    assert 1 < eta._train_factor("c") < eta._train_factor("a") < 2
    # one c trial left: 2 s x the pooled factor + the rest (mean of 6 and 4 s: x does not vary)
    assert eta.seconds_left() == pytest.approx(2.0 * math.exp(pooled) + 5.0)


def test_early_stopping_is_priced_by_the_share_of_epochs_trials_ran():
    # a CNN planned for 40 epochs at a predicted 1 s each; a closed-form model planned for 5 fits
    probes = {("cnn", 32): Probe(40.0, 1e-4, 40), ("cnn", 64): Probe(160.0, 4e-4, 40), ("lr", 32): Probe(5.0, 0, 5)}
    eta = Eta([("cnn", 32), ("cnn", 64), ("lr", 32)], probes)
    eta.finished(("cnn", 32), 12.0, 10.0, epochs=10)  # stopped early after 10 epochs, at the predicted 1 s each
    assert eta._epoch_share("cnn", probes[("cnn", 64)]) == pytest.approx(0.25)
    assert eta._train_factor("cnn") == pytest.approx(1.0)  # per epoch it ran as predicted
    assert eta.trial_seconds(("cnn", 64)) == pytest.approx(160.0 * 0.25 + 2.0)
    assert eta._epoch_share("lr", probes[("lr", 32)]) == 1.0  # another budget (5 fits): not priced by the CNN's


def test_early_stopping_share_is_learned_per_model():
    # two models planned for 20 epochs: a stops at 5, b runs all 20; each pending trial is priced by its own model
    probes = {(m, r): Probe(20.0 * r / 32, 1e-4, 20, 6) for m in ("a", "b", "c") for r in (32, 64)}
    eta = Eta([(m, r) for m in ("a", "b", "c") for r in (32, 64)], probes)
    eta.finished(("a", 32), 6.0, 5.0, epochs=5)
    eta.finished(("b", 32), 21.0, 20.0, epochs=20)
    assert eta._epoch_share("a", probes[("a", 64)]) == pytest.approx(0.25)
    assert eta._epoch_share("b", probes[("b", 64)]) == pytest.approx(1.0)
    assert eta._epoch_share("c", probes[("c", 64)]) == pytest.approx(0.625)  # not run yet: the same budget's mean
    fresh = Probe(20.0, 1e-4, 20, 5)
    assert Eta([("d", 32)], {("d", 32): fresh})._epoch_share("d", fresh) == pytest.approx(0.5)  # sqrt(5 / 20)


def test_rest_of_a_trial_is_what_the_probe_measured_plus_what_the_models_trials_spent_besides():
    # the explanations (ROAD, sanity re-explanations) grow with the resolution far faster than the rest of a trial;
    # only the probe can tell it before the model has run there
    probes = {
        ("m", 32): Probe(1.0, 1e-4, prepare_s=0.1, explain_s=4.0),
        ("m", 128): Probe(10.0, 2e-3, prepare_s=0.3, explain_s=80.0),
        ("n", 128): Probe(20.0, 4e-3, prepare_s=0.5, explain_s=90.0),
    }
    eta = Eta([("m", 32), ("m", 128), ("n", 128)], probes)
    eta.finished(("m", 32), 1.0 + 0.1 + 4.0 + 5.0, 1.0)  # 5 s of testing, profiling and MLflow besides
    assert eta.trial_seconds(("m", 128)) == pytest.approx(10.0 + 0.3 + 80.0 + 5.0)
    assert eta.trial_seconds(("n", 128)) == pytest.approx(20.0 + 0.5 + 90.0 + 5.0)  # not run yet: all trials' 5 s
    # the trial's data and model, as the probe timed them, count too: a slower data build costs that much more
    slower = Eta([("m", 128)], probes | {("m", 128): Probe(10.0, 2e-3, prepare_s=3.3, explain_s=80.0)})
    slower.finished(("m", 32), 1.0 + 0.1 + 4.0 + 5.0, 1.0)
    assert slower.trial_seconds(("m", 128)) - eta.trial_seconds(("m", 128)) == pytest.approx(3.0)


def test_a_models_trials_done_price_its_explanations_by_pixels_in_place_of_the_probe():
    # m's first trial measured its explanations (the probe did not: 0); n's are the probe's until a trial of n is done
    probes = {
        ("m", 32): Probe(1.0, 1e-4, prepare_s=0.1),
        ("m", 64): Probe(4.0, 4e-4, prepare_s=0.2),
        ("n", 64): Probe(2.0, 2e-4, prepare_s=0.2, explain_s=30.0),
    }
    eta = Eta([("m", 32), ("m", 64), ("n", 64)], probes)
    eta.finished(("m", 32), 1.0 + 0.1 + 6.0 + 2.0, 1.0, explain_s=6.0)  # 2 s of testing, profiling and MLflow
    assert eta._rest("m") == pytest.approx(2.0)  # its own explanations taken out, not the probe's 0
    assert eta.trial_seconds(("m", 64)) == pytest.approx(4.0 + 0.2 + 6.0 * 4 + 2.0)  # 4x the pixels
    assert eta.trial_seconds(("n", 64)) == pytest.approx(2.0 + 0.2 + 30.0 + 2.0)  # no trial of n yet: the probe's
    eta.finished(("n", 64), 2.0 + 0.2 + 20.0 + 2.0, 2.0, explain_s=20.0)
    assert eta._explain(("n", 64), probes[("n", 64)]) == pytest.approx(20.0)
    failed = Eta([("m", 64)], probes)
    failed.finished(("m", 32), 3.0, None)  # failed: no explanations measured, the probe's still price them
    assert failed._explain(("m", 64), probes[("m", 64)]) == 0.0


def test_rest_leaves_out_the_first_trial_once_two_others_exist():
    probes = {("m", r): Probe(0.0, r * 1e-3, explain_s=r / 8) for r in (16, 32, 64, 128)}
    eta = Eta([("m", 16), ("m", 32), ("m", 64), ("m", 128)], probes)
    eta.finished(("m", 16), 60.0 + 2.0 + 2.0, 0.0)  # the first trial: 60 s of start-up and imports
    eta.finished(("m", 32), 4.0 + 2.0, 0.0)
    assert eta.seconds_left() == pytest.approx(8.0 + 16.0 + 2 * (62.0 + 2.0) / 2)  # one other: still counted
    eta.finished(("m", 64), 8.0 + 2.0, 0.0)
    assert eta.seconds_left() == pytest.approx(16.0 + 2.0)


def test_without_a_probe_a_trial_costs_per_pixel_its_models_or_the_pooled_rate():
    eta = Eta([("a", 32), ("a", 64), ("b", 64)])
    eta.finished(("a", 32), 2.0, 1.0)
    assert eta.trial_seconds(("a", 64)) == pytest.approx(8.0)
    assert eta.trial_seconds(("b", 64)) == pytest.approx(8.0)  # b not run yet: a's rate
    assert eta.seconds_left() == pytest.approx(16.0)


def test_parallel_workers_take_the_pending_trials_in_turn():
    assert makespan([4.0, 4.0, 4.0, 4.0], 1) == 16.0
    assert makespan([4.0, 4.0, 4.0, 4.0], 2) == 8.0
    assert makespan([10.0, 1.0, 1.0], 2) == 10.0  # the long trial decides
    assert makespan([3.0], 4) == 3.0  # fewer trials than workers: the longest, not a quarter of it
    probes = {("m", 32): Probe(2.0, 1e-4)}
    one, four = Eta([("m", 32)] * 5, probes), Eta([("m", 32)] * 5, probes, slots=4)
    for eta in (one, four):
        eta.finished(("m", 32), 3.0, 2.0)
    assert one.seconds_left() == pytest.approx(4 * 3.0) and four.seconds_left() == pytest.approx(3.0)
    per_pixel = Eta([("m", 32)] * 9, slots=4)  # without a probe too
    per_pixel.finished(("m", 32), 5.0, 4.0)
    assert per_pixel.seconds_left() == pytest.approx(2 * 5.0)


def test_ray_slots_are_the_cluster_over_a_trials_request():
    from resomap.sweep.executors import _ray_slots

    assert _ray_slots({"CPU": 16.0}, 2.0, 0) == 8
    assert _ray_slots({"CPU": 16.0, "GPU": 2.0}, 2.0, 1.0) == 2  # the GPUs are fewer
    assert _ray_slots({"CPU": 16.0, "GPU": 4.0}, 1.0, 0.5) == 8
    assert _ray_slots({"CPU": 1.0}, 2.0, 0) == 1  # at least one


def test_a_probe_run_in_a_worker_reaches_the_driver_whole(tmp_path: Path):
    from resomap.sweep.executors import probe_from_specs, probes_from, trial_spec
    from resomap.sweep.plan import plan

    cfg = tiny_sweep_config(tmp_path, ["pixel_logreg", "tiny_cnn"], [16, 32], ["saliency"], 2, "system.threads=1")
    trials = plan(cfg, check=False)
    answer = json.loads(json.dumps(probe_from_specs([trial_spec(t, None) for t in trials])))  # as a worker prints it
    probes = probes_from(answer)
    assert sorted(probes) == [("pixel_logreg", 16), ("pixel_logreg", 32), ("tiny_cnn", 16), ("tiny_cnn", 32)]
    assert all(p.train_s > 0 and p.prepare_s > 0 and p.epochs >= 1 for p in probes.values())
    first, other = trials[0].model, next(t.model for t in trials if t.model != trials[0].model)
    assert all(p.explain_s > 0 for (m, _), p in probes.items() if m == other)  # timed at 16 px, priced at 32
    assert probes[(other, 32)].explain_s == pytest.approx(4 * probes[(other, 16)].explain_s)
    assert all(p.explain_s == 0 for (m, _), p in probes.items() if m == first)  # its first trial times them
    assert len(answer["lines"]) == 1 and "cost probe: 4 model x resolution pair(s)" in answer["lines"][0]


def test_the_probe_times_each_models_explanations_once_and_prices_its_other_resolutions_by_pixels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from resomap.sweep import eta as eta_module
    from resomap.sweep.plan import plan

    calls: list[tuple[str, int, bool]] = []

    def timed(trial, prepared, device, train_s, warm):  # the stage's seconds, as the real one returns them
        calls.append((trial.model, trial.resolution, warm))
        return {"tiny_cnn": 3.0, "pixel_logreg": 0.5}[trial.model]  # simple_cnn: not asked

    monkeypatch.setattr(eta_module, "_explain_seconds", timed)
    models = ["simple_cnn", "tiny_cnn", "pixel_logreg"]
    cfg = tiny_sweep_config(tmp_path, models, [16, 32], ["saliency"], 2, "system.threads=1")
    trials = plan(cfg, check=False)
    assert trials[0].model == "simple_cnn"  # the first trial times its model's explanations: none here
    probes = eta_module.probe(trials, report=lambda line: None)
    assert sorted(probes) == [(m, r) for m in sorted(models) for r in (16, 32)]
    # one stage per other model at its smallest resolution; the cheaper training step first, with the warm-up
    assert probes[("pixel_logreg", 16)].image_s < probes[("tiny_cnn", 16)].image_s
    assert calls == [("pixel_logreg", 16, True), ("tiny_cnn", 16, False)]
    assert probes[("tiny_cnn", 16)].explain_s == 3.0 and probes[("tiny_cnn", 32)].explain_s == 3.0 * 4
    assert probes[("pixel_logreg", 32)].explain_s == 0.5 * 4
    assert probes[("simple_cnn", 16)].explain_s == probes[("simple_cnn", 32)].explain_s == 0
    off = tiny_sweep_config(tmp_path / "off", ["pixel_logreg", "tiny_cnn"], [16, 32], ["saliency"], 2,
                            "explainability.enabled=false")  # fmt: skip
    calls.clear()
    assert all(p.explain_s == 0 for p in eta_module.probe(plan(off, check=False), lambda line: None).values())
    assert calls == []


def test_a_probe_workers_answer_sets_the_probes_and_a_broken_one_leaves_the_eta_per_pixel():
    import io
    from types import SimpleNamespace

    from resomap.sweep.executors import _probe_collected

    answer = {"probes": {"tiny_cnn@32": {"train_s": 2.0, "image_s": 1e-4, "explain_s": 5.0}}, "lines": ["probed"]}
    progress, lines = SimpleNamespace(eta=Eta([("tiny_cnn", 32)])), []
    proc = SimpleNamespace(stdout=io.StringIO("a stray print\n" + json.dumps(answer) + "\n"), returncode=0)
    _probe_collected(proc, progress, lines.append, "GPU 0")
    assert progress.eta.probes == {("tiny_cnn", 32): Probe(2.0, 1e-4, explain_s=5.0)} and lines == ["probed (GPU 0)"]
    broken = SimpleNamespace(eta=Eta([("tiny_cnn", 32)]))
    _probe_collected(SimpleNamespace(stdout=io.StringIO("Traceback ...\n"), returncode=1), broken, lines.append, "x")
    assert broken.eta.probes == {} and len(lines) == 1


def _outputs(root: Path) -> dict[str, tuple]:
    out = {}
    for path in sorted((root / "model_summaries").glob("*/*/*/seed*/result.json")):  # <experiment>/<model>/<res>
        result = json.loads(path.read_text())
        predictions = (path.parent / "predictions.csv").read_text()
        out[result["name"]] = (result["test"], result["best_val"], result["epochs_run"], predictions)
    return out


def test_sweep_probes_each_pair_changes_no_result_and_records_its_estimates(tmp_path: Path, caplog):
    from resomap.sweep import run_sweep

    lines: dict[bool, list[str]] = {True: [], False: []}
    for on in (True, False):
        cfg = tiny_sweep_config(  # threads fixed: a count measured per trial may differ between the two sweeps
            tmp_path / str(on), ["tiny_cnn", "pixel_logreg"], [16, 32], ["saliency"], 2, f"sweep.cost_probe={on}",
            "system.threads=1",
        )  # fmt: skip
        run_sweep(cfg, report=lines[on].append)
    probe_lines = [line for line in lines[True] if "cost probe" in line]
    assert len(probe_lines) == 1 and "4 model x resolution pair(s)" in probe_lines[0], lines[True]
    # its time split into the trials' own work (decoding, pixel_logreg's fits kept for its trials) and its own
    parts = re.search(
        r"in ([\d.]+) s \(the trials' own work: ([\d.]+) s decoding their images, ([\d.]+) s of closed-form fits the "
        r"trials read back; ([\d.]+) s the probe's own\)",
        probe_lines[0],
    )
    assert parts is not None, probe_lines[0]
    total, decode, kept, own = map(float, parts.groups())
    assert kept > 0 and abs(total - decode - kept - own) <= 0.15, probe_lines[0]
    assert not any("cost probe" in line for line in lines[False])
    with_probe, without = _outputs(tmp_path / "True"), _outputs(tmp_path / "False")
    assert len(with_probe) == 4 and with_probe == without  # same metrics, epochs and predictions, image by image

    rows = list(csv.DictReader((tmp_path / "True/model_summaries/_sweep/resomap-smoke/eta.csv").open()))
    assert [int(r["trials_left"]) for r in rows] == [3, 2, 1, 0]
    assert all(float(r["eta_s"]) > 0 and float(r["ratio"]) >= 1 for r in rows[:-1])
    assert rows[-1]["eta_s"] == "" and float(rows[-1]["actual_s"]) == pytest.approx(0.0, abs=0.05)
    # the progress line shows the same ETA the file records
    shown = [line for line in lines[True] if line.startswith("[sweep] 1 done")]
    minutes = float(re.search(r"ETA (\d+\.\d) min", shown[0]).group(1))
    # the line rounds to 0.1 min, the file to 0.1 s: equal up to those two roundings (0.15 min can show as either)
    assert abs(float(rows[0]["eta_s"]) / 60 - minutes) <= 0.05 + 0.05 / 60 + 1e-9, (shown[0], rows[0])
    # a summary rebuilt without training (another stats level) keeps the file: part of the summary folder
    eta_csv = tmp_path / "True/model_summaries/_sweep/resomap-smoke/eta.csv"
    before = eta_csv.read_text()
    rebuilt: list[str] = []
    models = ["tiny_cnn", "pixel_logreg"]
    run_sweep(
        tiny_sweep_config(tmp_path / "True", models, [16, 32], ["saliency"], 2, "stats.level=0.9", "system.threads=1"),
        report=rebuilt.append,
    )
    assert not any("cost probe" in line for line in rebuilt) and eta_csv.read_text() == before
    # cut mid-row (a full disk, a copy): the next run rebuilds the summary with the file's whole rows, said once
    whole = before.splitlines(keepends=True)
    eta_csv.write_text("".join(whole[:3]) + whole[3][:7])
    with caplog.at_level(logging.WARNING, logger="resomap"):
        run_sweep(
            tiny_sweep_config(
                tmp_path / "True", models, [16, 32], ["saliency"], 2, "stats.level=0.9", "system.threads=1"
            ),
            report=rebuilt.append,
        )
    assert eta_csv.read_text() == "".join(whole[:3])  # header and the two whole rows
    said = [r.getMessage() for r in caplog.records if "eta.csv" in r.getMessage()]
    assert any("rebuilt from its 2 whole row(s), 1 cut row(s) left out" in line for line in said), said
