"""The HOG + linear SVM baseline (resomap.models.hog): its torch HOG is scikit-image's, its fit is scikit-learn's
LinearSVC folded into a linear layer, it learns what HOG describes, and a sweep with two classical baselines puts
every other model above each of them in the summary."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from skimage.feature import hog
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC

from conftest import smoke_sweep_at_16, trial_summary
from resomap.cli import main
from resomap.config import load, with_overrides
from resomap.config.schema import ExplainabilityConfig, HogConfig, ModelsConfig
from resomap.explain import get_explainer
from resomap.models import build_model
from resomap.models.hog import MAX_ITER, PENALTIES, HogSvm, hog_features
from resomap.stats import bootstrap_scores, sign_flip
from resomap.training import load_checkpoint
from test_classical import _read


def _structured(side: int) -> np.ndarray:
    """Edges of every direction (rising and falling steps along both axes: angles of 0, 90 and 180 degrees), a
    disc (every angle) and a diagonal ramp."""
    yy, xx = np.mgrid[:side, :side].astype(np.float64)
    img = np.zeros((side, side))
    img[side // 4 : side // 2, :] = 1.0
    img[:, side // 3 :] += 2.0
    img[side // 2 :, side // 2 :] -= 1.5
    img += ((xx - side / 2) ** 2 + (yy - side / 2) ** 2 < (side / 4) ** 2) * 0.7
    return img + 0.05 * (xx + yy) * (xx > yy)


@pytest.mark.parametrize(("side", "cell", "orientations"), [(32, 4, 9), (75, 9, 9), (20, 2, 9), (48, 6, 6)])
@pytest.mark.parametrize("kind", ["random", "structured"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_torch_hog_is_scikit_images(side, cell, orientations, kind, dtype):
    rng = np.random.default_rng(side)
    img = (rng.normal(size=(side, side)) if kind == "random" else _structured(side)).astype(dtype)
    want = hog(img, orientations, pixels_per_cell=(cell, cell), cells_per_block=(2, 2), block_norm="L2-Hys")
    got = hog_features(torch.from_numpy(img)[None], cell, orientations)[0].numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_the_model_takes_the_channels_mean_and_its_cells_are_a_share_of_the_side():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 3, 40, 40)).astype(np.float32)
    model = HogSvm(3, 2, cells_per_side=8)
    model.prepare_fit(40)
    assert (model.side, model.pixels_per_cell) == (40, 5) and model.geometry.tolist() == [40, 5, 9]
    with torch.no_grad():
        got = model.features(torch.from_numpy(x)).numpy()
    for image, row in zip(x, got, strict=True):
        want = hog(image.mean(axis=0), 9, pixels_per_cell=(5, 5), cells_per_block=(2, 2), block_norm="L2-Hys")
        np.testing.assert_allclose(row, want, rtol=1e-5, atol=1e-6)
    for side in (64, 75, 128, 300):  # 8 cells of side // 8 px: the same features at every such resolution
        model.prepare_fit(side)
        assert model.linear.in_features == 7 * 7 * 4 * 9


def _stripes(n: int, side: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Class 0: vertical stripes, class 1: horizontal ones, each of random phase and period, in noise; the mean
    image of each class is flat, so only the gradients' direction tells them apart."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, size=n)
    yy, xx = np.mgrid[:side, :side]
    period = rng.uniform(4, 8, size=(n, 1, 1))
    phase = rng.uniform(0, 2 * np.pi, size=(n, 1, 1))
    across = np.where(y[:, None, None] == 0, xx, yy)
    x = np.sin(2 * np.pi * across / period + phase) + rng.normal(scale=0.7, size=(n, side, side))
    return x[:, None].astype(np.float32), y


@pytest.mark.parametrize("classes", [2, 3])
def test_the_fit_is_linear_svcs_decision_function_on_the_standardised_features(classes):
    rng = np.random.default_rng(0)
    x, _ = _stripes(150, 24, seed=2)
    y = rng.integers(0, classes, size=len(x))
    x[y == 2] *= 0.3  # a third class of fainter images
    weights = rng.uniform(0.5, 1.5, size=len(x))
    model = HogSvm(1, classes, cells_per_side=4)
    model.prepare_fit(24)
    found = model.fit_arrays(x.reshape(len(x), -1), y, penalty=0.01, sample_weight=weights)
    with torch.no_grad():
        features = model.features(torch.from_numpy(x)).double().numpy()
        logits = model(torch.from_numpy(x)).double().numpy()
    z = StandardScaler().fit_transform(features)
    clf = LinearSVC(C=0.01, max_iter=MAX_ITER, random_state=0).fit(z, y, sample_weight=weights)
    decision = clf.decision_function(z)
    if classes == 2:  # one row z split as +z/2 (class 1), -z/2 (class 0)
        assert np.allclose(logits[:, 1] - logits[:, 0], decision, atol=1e-4)
        assert np.allclose(logits.sum(axis=1), 0, atol=1e-4)
    else:  # one-vs-rest rows
        assert np.allclose(logits, decision, atol=1e-4)
    assert (logits.argmax(1) == clf.predict(z)).all()
    assert found["train/accuracy"] == pytest.approx(clf.score(z, y))
    assert found["train/solver_converged"] == 1.0 and found["train/loss"] > 0


def test_the_grid_computes_the_features_once_and_the_cost_probe_counts_them():
    x, y = _stripes(60, 24, seed=6)
    flat = x.reshape(len(x), -1)
    model = HogSvm(1, 2, cells_per_side=4)
    model.prepare_fit(24)
    assert model.probe_fit_seconds(flat, y) > 0  # features + one fit x the grid (the sweep's ETA)
    features = model._train_features(flat)
    assert model._train_features(flat) is features  # every penalty of the grid fits the same features
    assert model._train_features(flat.copy()) is not features


def test_hog_svm_tells_stripes_apart_where_the_mean_image_cannot():
    x, y = _stripes(240, 32, seed=3)
    model = build_model("hog_svm", 2, 1, ModelsConfig())[0]
    model.prepare_fit(32)
    model.fit_arrays(x[:160].reshape(160, -1), y[:160], penalty=PENALTIES[2])
    with torch.no_grad():
        predicted = model(torch.from_numpy(x[160:])).argmax(1).numpy()
    assert (predicted == y[160:]).mean() >= 0.9  # chance: 0.5


def test_a_saved_fit_loads_with_its_geometry_and_other_sizes_are_resized(tmp_path):
    x, y = _stripes(60, 24, seed=4)
    model = build_model("hog_svm", 2, 1, ModelsConfig(hog=HogConfig(cells_per_side=4, orientations=6)))[0]
    model.prepare_fit(24)
    model.fit_arrays(x.reshape(len(x), -1), y, penalty=0.1)
    torch.save({"model": model.state_dict()}, tmp_path / "m.pt")
    fresh = build_model("hog_svm", 2, 1, ModelsConfig())[0]  # unfitted, other options: the checkpoint decides
    fresh.load_state_dict(torch.load(tmp_path / "m.pt", weights_only=True)["model"])
    assert (fresh.side, fresh.pixels_per_cell, fresh.orientations) == (24, 6, 6)
    images = torch.from_numpy(x[:5])
    with torch.no_grad():
        assert torch.equal(fresh(images), model(images))
        big = torch.nn.functional.interpolate(images, size=(48, 48), mode="nearest")
        assert fresh(big).shape == (5, 2)  # resized to the 24 px it was fitted on


@pytest.mark.parametrize("method", ["saliency", "gradcam"])
def test_explanations_flow_through_the_gradient_magnitudes(method):
    x, y = _stripes(80, 32, seed=5)
    model, spec = build_model("hog_svm", 2, 1, ModelsConfig())
    model.prepare_fit(32)
    model.fit_arrays(x.reshape(len(x), -1), y, penalty=0.1)
    images = torch.from_numpy(x[:2])
    images[1] = 0.0  # a flat image: no gradient anywhere, finite maps all the same
    cfg = ExplainabilityConfig(batch_size=2)
    maps = get_explainer(method)(model, images, torch.tensor([0, 1]), spec=spec, resolution=32, cfg=cfg)
    assert maps.shape == (2, 32, 32) and torch.isfinite(maps).all()
    assert maps[0].abs().sum() > 0
    assert maps[1].abs().sum() == 0  # a flat image has empty cell histograms: nothing to weigh


def test_gradcam_weighs_the_cell_histograms_since_the_pixels_carry_no_channel_weight():
    """Every HOG feature is a difference of pixels, so shifting all pixels together changes no logit: the mean
    gradient over the image (Grad-CAM's one weight on the `pixels` layer) is zero but for rounding, and a map made
    from it is rounding noise (zero or not by CPU). Grad-CAM's layer is the cells' histograms."""
    x, y = _stripes(80, 32, seed=5)
    model, spec = build_model("hog_svm", 2, 1, ModelsConfig())
    model.prepare_fit(32)
    model.fit_arrays(x.reshape(len(x), -1), y, penalty=0.1)
    assert spec.cam_layers[0] == "cells"
    image = torch.from_numpy(x[:1]).clone().requires_grad_(True)
    model(image)[0, 1].backward()
    assert abs(image.grad.mean().item()) < 1e-6 * image.grad.abs().mean().item()


def _run(args: list[str], capsys) -> tuple[int, str]:
    code = main(args)
    return code, capsys.readouterr().err.strip()


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["sweep.models=[tiny_cnn,hog_svm]", "sweep.resolutions=[12,32]"], "smallest resolution 12 px"),
        (["sweep.include=[[hog_svm,8]]"], "smallest resolution 8 px"),
        (["sweep.models=[hog_svm]", "models.hog.cells_per_side=1"], "an integer >= 2"),
    ],
)
def test_a_cell_too_small_for_the_sweep_is_refused_at_load_in_one_line(capsys, tmp_path, overrides, needle):
    args = ["sweep", "--dry-run", "--preset", "smoke", *overrides, f"experiment.output_dir={tmp_path}"]
    code, err = _run(args, capsys)
    assert code == 2 and "\n" not in err and "Traceback" not in err, err
    assert "models.hog.cells_per_side" in err and needle in err, err
    code, err = _run(
        ["sweep", "--dry-run", "--preset", "smoke", "sweep.models=[tiny_cnn]", "sweep.resolutions=[8]"], capsys
    )
    assert code == 0, err  # no hog_svm in the sweep: its cells are not checked against its resolutions


def test_hog_options_are_in_hog_svms_trial_keys_only():
    from resomap.sweep.identity import sweep_identity, trial_key

    cfg = load(None, "smoke")
    other = with_overrides(cfg, {"models.hog.cells_per_side": 4})
    assert trial_key(cfg, "hog_svm", 32, 42) != trial_key(other, "hog_svm", 32, 42)
    for model in ("tiny_cnn", "pixel_logreg"):  # their keys are what they were before models.hog existed
        assert trial_key(cfg, model, 32, 42) == trial_key(other, model, 32, 42)
    assert sweep_identity(cfg) == sweep_identity(other)


def _correct(out: Path, model: str) -> dict[int, bool]:
    rows = _read(trial_summary(out.parent, model, 16) / "predictions.csv")
    return {int(r["index"]): r["label"] == r["prediction"] for r in rows if int(r["test_resolution"]) == 16}


def test_a_sweep_with_two_classical_baselines_puts_the_deep_model_above_each(tmp_path):
    out = tmp_path / "model_summaries"
    assert smoke_sweep_at_16(tmp_path, "tiny_cnn,pixel_logreg,hog_svm") == 0
    result = json.loads((trial_summary(tmp_path, "hog_svm", 16) / "result.json").read_text())
    assert result["family"] == "classical" and result["status"] == "FINISHED"
    counts = result["data"]["train_counts"]  # the trivial predictor answers their most frequent class
    assert len(counts) == len(result["data"]["classes"]) and sum(counts) == result["data"]["splits"]["train"]
    assert [h["train/penalty_C"] for h in result["history"]] == list(PENALTIES)  # one fit per C, scored on val
    assert "closed form" in result["convergence"]["stop_detail"]
    state = load_checkpoint(Path(result["best_checkpoint"]))["model"]
    assert state["geometry"].tolist() == [16, 2, 9] and state["linear.weight"].shape[1] == 7 * 7 * 4 * 9

    sweep = out / "_sweep/resomap-smoke"
    rows = {r["model"]: r for r in json.loads((sweep / "summary.json").read_text())["rows"]}
    tiny = rows["tiny_cnn"]
    mine = _correct(out, "tiny_cnn")
    for name in ("hog_svm", "pixel_logreg"):  # each baseline: the paired per-image difference and its interval
        base = _correct(out, name)
        diff = np.array([float(mine[i]) - float(base[i]) for i in sorted(mine)])
        want = bootstrap_scores(diff, resamples=300, seed=0)
        found = tiny["baselines"][name]
        assert found["over"] == pytest.approx(diff.mean())
        assert (found["ci_low"], found["ci_high"]) == pytest.approx((want.low, want.high))
        assert found["score"] == pytest.approx(np.mean([base[i] for i in sorted(mine)]))
        assert found["p"] == sign_flip(diff, alternative="greater").p_value  # exact: one seed, 0/1 outcomes
        assert rows[name]["baselines"] == {} and rows[name]["over_baseline"] is None
    first = tiny["baselines"]["hog_svm"]  # the first by name keeps the first-baseline columns
    assert tiny["baseline_model"] == "hog_svm" and tiny["over_baseline"] == first["over"]
    assert (tiny["over_baseline_ci_low"], tiny["baseline_score"]) == (first["ci_low"], first["score"])

    table = _read(sweep / "summary.csv")
    columns = list(table[0])
    at = columns.index("over_baseline_p")
    assert columns[at + 1 : at + 9] == [
        f"over_{name}{end}" for name in ("hog_svm", "pixel_logreg") for end in ("", "_ci_low", "_ci_high", "_p")
    ]
    by_model = {r["model"]: r for r in table}
    assert float(by_model["tiny_cnn"]["over_pixel_logreg"]) == pytest.approx(tiny["baselines"]["pixel_logreg"]["over"])
    assert by_model["hog_svm"]["over_pixel_logreg"] == ""
    for page in ("summary.md", "report.html"):
        text = (sweep / page).read_text()
        assert "above hog_svm [95% CI]" in text and "above pixel_logreg [95% CI]" in text, page
    recs = {r["model"]: r for r in json.loads((sweep / "summary.json").read_text())["recommendations"]}
    for name in ("hog_svm", "pixel_logreg"):
        shown = f"not shown above the classical baseline {name} at any resolution" in recs["tiny_cnn"]["sentence"]
        assert shown == (tiny["baselines"][name]["p"] > 0.05)  # the one-sided sign-flip test decides (issue 31)


def test_a_row_with_two_baselines_reads_back_and_logs_each_to_the_parent_run():
    from resomap.summary.rows import SummaryRow, baseline_names

    found = {
        "hog_svm": {"score": 0.70, "over": 0.05, "ci_low": -0.01, "ci_high": 0.11, "p": 0.04},
        "pixel_logreg": {"score": 0.72, "over": 0.03, "ci_low": -0.02, "ci_high": 0.08, "p": 0.2},
    }
    row = SummaryRow("tiny_cnn", "cnn", 32, 1, baseline_model="hog_svm", baseline_score=0.70, over_baseline=0.05)
    row.over_baseline_ci_low, row.over_baseline_ci_high, row.over_baseline_p = -0.01, 0.11, 0.04
    row.baselines = found
    data = json.loads(json.dumps(row.to_dict()))
    assert data["baselines"] == found and SummaryRow.from_dict(data).to_dict() == data
    flat = row.to_dict(csv=True)
    assert "baselines" not in flat and flat["over_pixel_logreg_ci_high"] == 0.08 and flat["over_pixel_logreg_p"] == 0.2
    assert row.value("over_pixel_logreg_ci_low") == -0.02 and row.value("over_no_such_model") is None
    assert {"over_baseline", "over_hog_svm", "over_pixel_logreg"} <= set(row.parent_metrics())
    old = {k: v for k, v in data.items() if k != "baselines"}  # a summary.json from before `baselines`
    assert SummaryRow.from_dict(old).compared_baselines() == {"hog_svm": found["hog_svm"]}
    assert baseline_names([row, SummaryRow.from_dict(old)]) == ["hog_svm", "pixel_logreg"]
