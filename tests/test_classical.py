"""The classical baseline (resomap.models.classical): logistic regression on raw pixels fitted by scikit-learn,
folded into a torch module the whole pipeline treats like any model; and its column in the summary."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from conftest import REPO, smoke_sweep_at_16, tiny_sweep_config, trial_summary
from resomap.cli import main
from resomap.config.schema import ModelsConfig
from resomap.explain.methods.probe import load_maps
from resomap.models import build_model
from resomap.models.classical import PixelLogistic
from resomap.stats import bootstrap_scores, sign_flip
from resomap.training import load_checkpoint


def _images(n: int, classes: int, side: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, size=n)
    x = rng.normal(size=(n, 1, side, side)) + 0.8 * y[:, None, None, None] * (np.arange(side) < side // 2)
    return x.astype(np.float32), y


@pytest.mark.parametrize("classes", [2, 3])
def test_the_fit_is_scikit_learns_with_the_standardisation_folded_into_the_linear_layer(classes):
    x, y = _images(120, classes, 8)
    flat = x.reshape(len(x), -1)
    model = PixelLogistic(1, classes)
    model.prepare_fit(8)
    found = model.fit_arrays(flat, y, penalty=0.1)
    scaler = StandardScaler().fit(flat)
    clf = LogisticRegression(C=0.1, max_iter=500).fit(scaler.transform(flat), y)
    with torch.no_grad():
        proba = torch.softmax(model(torch.from_numpy(x)).double(), dim=1).numpy()
    assert np.allclose(proba, clf.predict_proba(scaler.transform(flat)), atol=1e-4)
    assert (proba.argmax(1) == clf.predict(scaler.transform(flat))).all()
    assert found["train/accuracy"] == pytest.approx(clf.score(scaler.transform(flat), y))
    assert found["train/solver_converged"] == 1.0
    assert (model.linear.weight.abs().sum(dim=1) > 0).all()  # every class's logit depends on the pixels


def test_a_saved_fit_loads_into_a_fresh_model_and_other_sizes_are_resized_to_the_trained_one(tmp_path):
    x, y = _images(80, 2, 8)
    model = build_model("pixel_logreg", 2, 1, ModelsConfig())[0]
    model.prepare_fit(8)
    model.fit_arrays(x.reshape(len(x), -1), y, penalty=1.0)
    torch.save({"model": model.state_dict()}, tmp_path / "m.pt")
    fresh = build_model("pixel_logreg", 2, 1, ModelsConfig())[0]  # unfitted: sized by the checkpoint it loads
    fresh.load_state_dict(torch.load(tmp_path / "m.pt", weights_only=True)["model"])
    images = torch.from_numpy(x[:5])
    with torch.no_grad():
        assert torch.equal(fresh(images), model(images)) and fresh.side == 8
        big = torch.nn.functional.interpolate(images, size=(16, 16), mode="nearest")
        assert fresh(big).shape == (5, 2)  # a 16 px input is resized to the 8 px the model was fitted on


def test_the_probe_prices_the_penalty_grid_on_the_line_between_its_timed_ends(monkeypatch):
    # a fake clock: each fit takes 1 s at the strongest penalty and twice as long per step to 16 s at the weakest
    import time

    model = PixelLogistic(1, 2)
    clock = [0.0]
    fitted = []

    def fit(x, y, penalty, sample_weight=None):
        fitted.append(penalty)
        clock[0] += 2.0 ** model.penalties.index(penalty)

    monkeypatch.setattr(model, "fit_arrays", fit)
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    x, y = _images(10, 2, 4)
    assert model.probe_fit_seconds(x.reshape(10, -1), y) == pytest.approx(1 + 2 + 4 + 8 + 16)
    assert fitted == [model.penalties[0], model.penalties[-1]]  # only the two ends are fitted


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_a_sweep_fits_the_baseline_over_its_penalty_grid_and_the_summary_puts_each_model_above_it(tmp_path):
    out = tmp_path / "model_summaries"
    assert smoke_sweep_at_16(tmp_path, "tiny_cnn,pixel_logreg") == 0
    result = json.loads((trial_summary(tmp_path, "pixel_logreg", 16) / "result.json").read_text())
    assert result["family"] == "classical" and result["status"] == "FINISHED"
    penalties = [h["train/penalty_C"] for h in result["history"]]
    assert penalties == [1e-4, 1e-3, 1e-2, 1e-1, 1.0]  # one fit per penalty, each scored on validation
    conv = result["convergence"]
    best = max(range(5), key=lambda i: (result["history"][i]["val/macro_f1"], -i))  # the earliest of ties
    assert conv["best_epoch"] == best and "closed form" in conv["stop_detail"]
    assert load_checkpoint(Path(result["best_checkpoint"]))["model"]["linear.weight"].shape[1] == 16 * 16

    # the summary: tiny_cnn's accuracy above pixel_logreg's on the same test images, with its interval
    def correct(model: str) -> dict[int, bool]:
        rows = _read(trial_summary(tmp_path, model, 16) / "predictions.csv")
        return {int(r["index"]): r["label"] == r["prediction"] for r in rows if int(r["test_resolution"]) == 16}

    mine, base = correct("tiny_cnn"), correct("pixel_logreg")
    index = sorted(mine)
    diff = np.array([float(mine[i]) - float(base[i]) for i in index])
    want = bootstrap_scores(diff, resamples=300, seed=0)
    rows = {r["model"]: r for r in json.loads((out / "_sweep/resomap-smoke/summary.json").read_text())["rows"]}
    tiny, logreg = rows["tiny_cnn"], rows["pixel_logreg"]
    assert tiny["baseline_model"] == "pixel_logreg" and logreg["over_baseline"] is None
    assert tiny["over_baseline"] == pytest.approx(diff.mean())
    assert (tiny["over_baseline_ci_low"], tiny["over_baseline_ci_high"]) == pytest.approx((want.low, want.high))
    assert tiny["baseline_score"] == pytest.approx(np.mean([base[i] for i in index]))
    assert "above pixel_logreg [95% CI]" in (out / "_sweep/resomap-smoke/summary.md").read_text()
    recs = {
        r["model"]: r for r in json.loads((out / "_sweep/resomap-smoke/summary.json").read_text())["recommendations"]
    }
    assert tiny["over_baseline_p"] == sign_flip(diff, alternative="greater").p_value  # exact on 0/1 outcomes
    if tiny["over_baseline_p"] > 0.05:  # the decision sentence says what the test beside the interval says
        assert "not shown above the classical baseline pixel_logreg at any resolution" in recs["tiny_cnn"]["sentence"]
    assert "classical baseline" not in recs["pixel_logreg"]["sentence"]


def test_the_decision_is_read_with_the_resolutions_not_shown_above_the_baselines():
    from resomap.summary.build import baseline_caveat
    from resomap.summary.rows import SummaryRow

    def row(res: int, majority_low: float, baseline_low: float) -> SummaryRow:
        r = SummaryRow("m", "cnn", res, 2, over_trivial_ci_low=majority_low, over_baseline_ci_low=baseline_low)
        r.baseline_model, r.words = "pixel_logreg", {"trivial": "the majority class"}
        return r

    rows = [row(32, 0.05, -0.01), row(64, -0.02, 0.01), row(128, 0.03, -0.04)]
    assert baseline_caveat(rows) == (
        "Read with care: not shown above the majority class at 64 px; not shown above the classical baseline "
        "pixel_logreg at 32 px, 128 px."
    )
    assert baseline_caveat([row(32, 0.05, 0.02)]) == ""
    # since issue 31 the rows carry the one-sided sign-flip p, and it decides where it and the interval disagree
    tested = row(32, 0.05, -0.01)
    tested.over_trivial_p, tested.over_baseline_p = 0.07, 0.02  # shown at p <= (1 - level) / 2 = 0.025
    assert baseline_caveat([tested]) == "Read with care: not shown above the majority class at any resolution."
    assert baseline_caveat([SummaryRow("m", "cnn", 32, 1)]) == ""  # nothing to compare with: nothing said


def test_a_classical_baseline_on_a_segmentation_sweep_is_refused_at_load(capsys, tmp_path):
    code = main(
        [
            "sweep",
            "--dry-run",
            "--preset",
            "seg_quickstart",
            "sweep.models=[pixel_logreg]",
            f"experiment.output_dir={tmp_path}",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and "pixel_logreg" in err and "\n" not in err and "Traceback" not in err, err


def test_a_closed_form_baselines_seeds_are_one_replicate_in_a_real_sweep(tmp_path):
    """A tiny sweep of tiny_cnn and pixel_logreg at two resolutions with two seeds: pixel_logreg's seeds are the
    same fit (closed form, the seed changes nothing it sees), so its rows and decision are deterministic, its line
    in the answer says once that the 2 seeds are one replicate (summary, report, MLflow description), its maps
    are compared with no seed floor and no relabelling test; tiny_cnn's seeds differ and keep theirs."""
    from resomap.summary import SweepSummary
    from resomap.sweep.sweep import run_sweep
    from resomap.tracking.note import parent_note

    cfg = tiny_sweep_config(tmp_path, ["tiny_cnn", "pixel_logreg"], [16, 24], ["saliency"], 2, "sweep.seeds=[42,43]")
    outcome = run_sweep(cfg)
    assert all(r.status == "FINISHED" for r in outcome.results)
    folder = tmp_path / "model_summaries" / "_sweep" / "resomap-smoke"
    data = json.loads((folder / "summary.json").read_text())
    rows = {(r["model"], r["resolution"]): r for r in data["rows"]}
    recs = {r["model"]: r for r in data["recommendations"]}
    for res in (16, 24):  # the per-image predictions of the two seeds, as written by the trials
        a, b = (_read(trial_summary(tmp_path, "pixel_logreg", res, s) / "predictions.csv") for s in (42, 43))
        assert [r["prediction"] for r in a] == [r["prediction"] for r in b]
        assert rows[("pixel_logreg", res)]["deterministic"] is True
        assert rows[("tiny_cnn", res)]["deterministic"] is False
        for model in ("pixel_logreg", "tiny_cnn"):  # two seeds: no interval over test images and training seeds
            assert rows[(model, res)]["twoway_ci_low"] is None
        # the deterministic fit's second seed took the first seed's maps (the same fit: the same predictions) and
        # spent no time explaining; tiny_cnn's seeds are two fits, each explained
        first, second = (trial_summary(tmp_path, "pixel_logreg", res, s) for s in (42, 43))
        record = json.loads((second / "result.json").read_text())["explain"]
        assert record["reused_from"] == 42 and record["seconds"] == 0.0
        assert record["metrics"] == json.loads((first / "result.json").read_text())["explain"]["metrics"]
        (a_maps, _), (b_maps, b_meta) = (load_maps(f / "explanations.npz") for f in (first, second))
        assert b_meta["seed"] == 43 and b_meta["reused_from"] == 42
        assert set(a_maps) == set(b_maps) and all(np.array_equal(a_maps[k], b_maps[k]) for k in a_maps)
        tiny = json.loads((trial_summary(tmp_path, "tiny_cnn", res, 43) / "result.json").read_text())["explain"]
        assert tiny.get("reused_from") is None and tiny["seconds"] > 0
    said = "deterministic: its 2 seeds are one replicate."  # in the answer's line for the model, once
    assert recs["pixel_logreg"]["deterministic"] is True and "one replicate" not in recs["pixel_logreg"]["sentence"]
    assert recs["tiny_cnn"]["deterministic"] is False and "one replicate" not in recs["tiny_cnn"]["sentence"]
    md = " ".join((folder / "summary.md").read_text().split())  # lines wrapped
    assert md.count(said) == 1 and md.lower().count("deterministic") == 1
    assert (folder / "report.html").read_text().count(said) == 1
    findings = (folder / "explanations" / "findings.txt").read_text().splitlines()
    logreg = [x for x in findings if x.startswith("pixel_logreg /")]
    tiny = [x for x in findings if x.startswith("tiny_cnn /")]
    one_fit = "no seed floor and no relabelling test: its 2 seeds are one fit"
    # the comparison's words, then where it looks decided: the closed-form fit against its shift floor, as one fit;
    # the trained model against its cross-seed floor
    assert logreg and all(x.split(" Where it looks (")[0].endswith(f"{one_fit}.") for x in logreg)
    assert all("against its 1-pixel-shift floor" in x and "; this fit on these" in x for x in logreg)
    assert tiny and all("cross-seed floor" in x and "one fit" not in x for x in tiny)
    assert all("against its cross-seed floor" in x.split(" Where it looks (")[1] for x in tiny)
    with (folder / "explanations" / "agreement.csv").open(newline="") as fh:
        seed_rows = {r["model"] for r in csv.DictReader(fh) if r["kind"] == "seed"}
    assert seed_rows == {"tiny_cnn"}  # no cross-seed floor for pixel_logreg
    note = parent_note(SweepSummary.from_dict(data), None, [])
    assert note.count(said.rstrip(".")) == 1 and one_fit in note


def _trial(tmp_path: Path, seed: int):
    """A pixel_logreg trial of the smoke preset at 16 px: (its config, its prepared data and model)."""
    from resomap.config import load
    from resomap.sweep import plan
    from resomap.sweep.trial import prepare_trial

    overrides = ["sweep.models=[pixel_logreg]", "sweep.resolutions=[16]", f"sweep.seeds=[{seed}]"]
    overrides += [f"experiment.output_dir={tmp_path}", "mlflow.enabled=false"]
    trial = plan(load(str(REPO / "configs"), "smoke", overrides))[0]
    return trial.cfg, prepare_trial(trial, trial.cfg, torch.device("cpu"))


def _fitted(tmp_path: Path, seed: int):
    """That trial's model fitted by the Trainer: (the model, its fit)."""
    from resomap.training import Trainer

    cfg, prepared = _trial(tmp_path, seed)
    return prepared.model, Trainer(cfg, "cpu", spec=prepared.spec).fit(prepared.model, prepared.bundle)


def _count_fits(monkeypatch) -> list[float]:
    calls = []
    real = PixelLogistic.fit_arrays

    def counted(self, x, y, penalty, sample_weight=None):
        calls.append(penalty)
        return real(self, x, y, penalty, sample_weight)

    monkeypatch.setattr(PixelLogistic, "fit_arrays", counted)
    return calls


def test_a_later_seed_reads_each_deterministic_fit_back_instead_of_solving_again(tmp_path, monkeypatch):
    calls = _count_fits(monkeypatch)
    first, fit1 = _fitted(tmp_path, 1)
    assert calls == list(PixelLogistic.penalties)
    kept = sorted((tmp_path / ".cache/resomap/fits").glob("*.pt"))
    assert len(kept) == len(PixelLogistic.penalties)  # one per penalty
    calls.clear()
    second, fit2 = _fitted(tmp_path, 2)
    assert calls == []  # the same rows, labels and penalties: read back
    assert torch.equal(first.linear.weight, second.linear.weight)  # the last penalty's layer, as solved
    for a, b in zip(fit1.history, fit2.history, strict=True):  # the same training and validation figures
        assert {k: v for k, v in a.items() if "time" not in k and "per_s" not in k and "memory" not in k} == {
            k: v for k, v in b.items() if "time" not in k and "per_s" not in k and "memory" not in k
        }
    kept[0].write_bytes(b"damaged")  # a damaged kept fit is solved again, not trusted
    _fitted(tmp_path, 3)
    assert len(calls) == 1 and torch.load(kept[0], weights_only=True)["format"] == "resomap-fit-1"


def test_the_fits_the_cost_probe_times_are_kept_for_the_trial(tmp_path, monkeypatch):
    from resomap.training import Trainer

    calls = _count_fits(monkeypatch)
    cfg, prepared = _trial(tmp_path, 1)
    Trainer(cfg, "cpu", spec=prepared.spec).probe_seconds(prepared.model, prepared.bundle)
    ends = [PixelLogistic.penalties[0], PixelLogistic.penalties[-1]]
    assert calls == ends and "fit_arrays" not in vars(prepared.model)  # the two ends timed; the method put back
    calls.clear()
    _fitted(tmp_path, 1)
    assert calls == list(PixelLogistic.penalties[1:-1])  # the trial solves only the penalties the probe did not
