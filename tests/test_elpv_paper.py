"""The pieces of the ELPV paper's protocol (configs/presets/elpv_paper.yaml): a split stratified by defect
probability x cell type, label-confidence sample weights times the class balance in the loss (and in the
classical fit), quarter turns and small rotations/shifts in the augmentation, and the native-size and
sample-weight checks before training."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import run_cli, trial_summary
from resomap.config import build as build_config
from resomap.config.schema import AugmentationConfig, DataConfig
from resomap.data import build
from resomap.data.augment import BatchAugment
from resomap.data.registry import get_dataset
from resomap.data.sources import ElpvOptions
from resomap.data.split import split_indices
from resomap.tasks.losses import SampleWeightedCrossEntropy

pytestmark = pytest.mark.usefixtures("fresh_memory_cache")


def _elpv(stratify: str = "probability_type"):
    return get_dataset("elpv")(DataConfig(), options=ElpvOptions(task="defect", stratify=stratify))


# ---------------------------------------------------------------- split and confidences


def test_the_paper_split_keeps_every_probability_and_cell_type_group_in_proportion():
    raw = _elpv()
    codes, names = raw.strata
    assert len(names) == 8 and len(codes) == 2624
    idx = np.arange(2624)
    parts = split_indices(idx, raw.labels, raw.class_names, 0.1125, 0.25, seed=42, strata=(codes, names))
    assert len(parts["test"]) == 656  # the paper's 25% (1,968 / 656)
    assert len(parts["train"]) + len(parts["val"]) == 1968
    assert sorted(np.concatenate(list(parts.values())).tolist()) == idx.tolist()
    whole = np.bincount(codes, minlength=8)
    test = np.bincount(codes[parts["test"]], minlength=8)
    assert (np.abs(test - whole * 0.25) <= 1).all()  # each of the 8 groups: its share, to one image
    # stratified by the label alone, the groups are only kept in proportion by chance
    by_label = split_indices(idx, raw.labels, raw.class_names, 0.1125, 0.25, seed=42)
    assert (np.abs(np.bincount(codes[by_label["test"]], minlength=8) - whole * 0.25) > 1).any()


def test_elpv_confidence_is_the_probability_of_the_label_given():
    raw = _elpv("label")
    assert raw.strata is None  # the label alone stratifies unless the paper's groups are asked for
    probs = np.genfromtxt(
        Path(__import__("elpv_dataset").__file__).parent / "data" / "labels.csv", usecols=1, dtype=float
    )
    expected = {0.0: 1.0, 1 / 3: 2 / 3, 2 / 3: 2 / 3, 1.0: 1.0}
    for p, c in expected.items():
        rows = np.isclose(probs, p)
        assert rows.any() and np.allclose(raw.confidence[rows], c)
    assert set(np.unique(raw.labels[probs > 0.5])) == {1} and set(np.unique(raw.labels[probs < 0.5])) == {0}


# ---------------------------------------------------------------- sample-weighted loss


def test_the_weighted_loss_is_torchs_with_each_images_weight_multiplied_in():
    gen = torch.Generator().manual_seed(0)
    logits, y = torch.randn(9, 3, generator=gen), torch.tensor([0, 1, 2, 0, 1, 2, 0, 0, 1])
    c = torch.tensor([0.5, 2.0, 1.5])
    for smooth in (0.0, 0.1):
        plain = torch.nn.CrossEntropyLoss(weight=c, label_smoothing=smooth)(logits, y)
        loss = SampleWeightedCrossEntropy(c, smooth)
        assert torch.allclose(loss(logits, y), plain) and torch.allclose(loss(logits, y, torch.ones(9)), plain)
    w = torch.tensor([1.0, 2 / 3, 1.0, 2 / 3, 1.0, 1.0, 0.0, 1.0, 2 / 3])
    per = torch.nn.functional.cross_entropy(logits, y, reduction="none")
    by_hand = (w * c[y] * per).sum() / (w * c[y]).sum()
    assert torch.allclose(SampleWeightedCrossEntropy(c)(logits, y, w), by_hand)
    # an image of weight 0 counts as absent
    keep = w > 0
    assert torch.allclose(
        SampleWeightedCrossEntropy(c)(logits, y, w), SampleWeightedCrossEntropy(c)(logits[keep], y[keep], w[keep])
    )


def test_the_train_loader_yields_each_images_confidence_with_it_and_the_others_do_not(tmp_path):
    cfg = build_config(
        {
            "data": {"dataset": "elpv", "limit": 240, "elpv": {"stratify": "probability_type"}},
            "training": {"sample_weights": "confidence", "batch_size": 32},
            "experiment": {"output_dir": str(tmp_path)},
            "explainability": {"probe_size": 4},
        }
    )
    bundle = build(cfg, 16, seed=1, device="cpu")
    raw = _elpv()
    conf = {int(i): raw.confidence[i] for i in bundle.splits["train"]}
    bundle.train.set_epoch(2)
    seen = 0
    for (_x, y, w), rows in zip(bundle.train, bundle.train.batch_positions(), strict=True):
        ids = bundle.splits["train"][rows.numpy()]
        assert torch.allclose(w, torch.tensor([conf[int(i)] for i in ids], dtype=torch.float32))
        assert torch.equal(y, torch.from_numpy(raw.labels[ids]))
        seen += len(w)
    assert seen == len(bundle.splits["train"]) and set(np.round(list(conf.values()), 4)) == {1.0, 0.6667}
    assert all(len(batch) == 2 for batch in bundle.val)  # evaluation is unweighted


def test_the_classical_fit_takes_the_sample_weights():
    from resomap.models.classical import PixelLogistic

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 80)
    x = (rng.normal(size=(80, 16)) + 0.7 * y[:, None]).astype(np.float32)
    w = np.where(np.arange(80) % 4 == 0, 0.0, 1.0)
    weighted, dropped = PixelLogistic(1, 2), PixelLogistic(1, 2)
    weighted.prepare_fit(4), dropped.prepare_fit(4)
    weighted.fit_arrays(x, y, 0.5, w)
    dropped.fit_arrays(x[w > 0], y[w > 0], 0.5)
    # weight 0 = left out, up to the solver's tolerance (the standardisation still sees every image)
    probe = torch.from_numpy(x.reshape(80, 1, 4, 4))
    with torch.no_grad():
        a, b = weighted(probe).softmax(1), dropped(probe).softmax(1)
    assert (a.argmax(1) == b.argmax(1)).float().mean() > 0.95
    unweighted = PixelLogistic(1, 2)
    unweighted.prepare_fit(4)
    unweighted.fit_arrays(x, y, 0.5)
    assert not torch.allclose(weighted.linear.weight, unweighted.linear.weight)


# ---------------------------------------------------------------- turns


def _turns_only(**kw) -> AugmentationConfig:
    off = {"crop_scale_min": 1.0, "hflip": 0.0, "vflip": 0.0, "brightness": 0.0, "contrast": 0.0, "blur_prob": 0.0}
    return AugmentationConfig(**{**off, **kw})


def test_quarter_turns_are_exact_and_move_the_masks_with_their_images():
    x = torch.rand(40, 1, 12, 12)
    masks = (torch.rand(40, 12, 12) > 0.5).long()
    out, moved = BatchAugment(_turns_only(rot90=1.0), 12).pair(
        x.clone(), masks.clone(), torch.Generator().manual_seed(3)
    )
    found = []
    for i in range(40):
        k = [t for t in (1, 2, 3) if torch.equal(out[i], x[i].rot90(t, dims=(-2, -1)))]
        assert len(k) == 1 and torch.equal(moved[i], masks[i].rot90(k[0], dims=(-2, -1)))
        found.append(k[0])
    assert set(found) == {1, 2, 3}  # each turn drawn


def test_small_rotations_and_shifts_stay_small_and_keep_mask_classes():
    x = torch.rand(16, 1, 64, 64)
    masks = torch.randint(0, 3, (16, 64, 64))
    aug = BatchAugment(_turns_only(rotate_degrees=3.0, translate=0.02), 64)
    out, moved = aug.pair(x.clone(), masks.clone(), torch.Generator().manual_seed(0))
    assert out.shape == x.shape and set(moved.unique().tolist()) <= {0, 1, 2}
    assert not torch.equal(out, x)
    # at most 3 degrees and 2% (1.3 px): the centre of a smooth ramp moves by under 2.5 px
    ramp = torch.linspace(0, 1, 64).repeat(64, 1)[None, None].repeat(16, 1, 1, 1)
    shifted = aug(ramp.clone(), torch.Generator().manual_seed(0))
    centre = shifted[:, 0, 28:36, 28:36].mean(dim=(1, 2))
    assert (centre - ramp[:, 0, 28:36, 28:36].mean(dim=(1, 2))).abs().max() < 2.5 / 63


def test_a_recipe_without_turns_draws_no_extra_random_numbers():
    gen = torch.Generator().manual_seed(5)
    BatchAugment(AugmentationConfig(), 16)._turn(torch.rand(4, 1, 16, 16), gen)
    assert torch.equal(gen.get_state(), torch.Generator().manual_seed(5).get_state())


# ---------------------------------------------------------------- checks before training


def test_a_resolution_above_elpvs_native_side_is_refused_unless_upsampling_is_said(project, capsys):
    code, _, err = run_cli(["sweep", "--dry-run", "sweep.resolutions=[64,448]"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "at most the native 300 px of 'elpv'" in err and "data.upsample=bilinear" in err and "[448]" in err
    code, out, _ = run_cli(["sweep", "--dry-run", "sweep.resolutions=[64,448]", "data.upsample=bilinear"], capsys)
    assert code == 0 and "@448" in out


def test_confidence_weights_from_a_dataset_without_confidences_are_refused(project, capsys):
    code, _, err = run_cli(
        [
            "train",
            "--model",
            "tiny_cnn",
            "--resolution",
            "16",
            "--preset",
            "smoke",
            "training.sample_weights=confidence",
        ],
        capsys,
    )
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "training.sample_weights: expected none: dataset 'synthetic' gives no label confidences" in err
    assert not (project / "checkpoints").exists()


def test_the_elpv_paper_preset_splits_weights_and_augments_as_the_paper(project, capsys, tmp_path):
    from resomap.config import load

    code, out, err = run_cli(["sweep", "--dry-run", "--preset", "elpv_paper"], capsys)
    assert code == 0, err
    assert "16 trials" in out and "about 656 test images" in out
    cfg = load("configs", "elpv_paper", [f"experiment.output_dir={tmp_path}"])
    bundle = build(cfg, 8, seed=42, device="cpu")  # all 2,624 cells at a tiny side
    sizes = {s: len(v) for s, v in bundle.splits.items()}
    assert sizes["test"] == 656 and sizes["train"] + sizes["val"] == 1968 and sizes["val"] == 296
    assert bundle.train.weights is not None and set(np.round(bundle.train.weights.unique().tolist(), 4)) == {
        0.6667,
        1.0,
    }
    recipe = bundle.train.augment.describe()
    assert recipe["rot90"] == 0.75 and recipe["rotate_degrees"] == 3.0 and recipe["translate"] == 0.02
    assert recipe["blur_prob"] == 0.0 and recipe["brightness"] == 0.0 and recipe["vflip"] == 0.5


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("rot90", 1.5, "a probability in [0, 1]"),
        ("rotate_degrees", 90, "an angle in [0, 45]"),
        ("translate", 0.5, "a fraction of the side in [0, 0.5)"),
    ],
)
def test_turn_settings_out_of_range_are_refused_at_load(key, value, expected):
    from resomap.errors import ConfigError

    with pytest.raises(ConfigError, match=re.escape(f"data.augmentation.{key}: expected {expected}")):
        build_config({"data": {"augmentation": {key: value}}})


def test_the_classical_baseline_is_weighted_like_the_deep_models(project, capsys):
    """training.class_weights=balanced (x the confidences, when on) weights the logistic regression's images as the
    deep models' loss does: the fit equals scikit-learn's with each image weighted by its class weight (inverse class
    frequency) times its confidence."""
    import json

    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    from resomap.config import load
    from resomap.models.classical import MAX_ITER
    from resomap.training import load_checkpoint

    overrides = [
        "data.dataset=elpv",
        "data.limit=240",
        "training.class_weights=balanced",
        "training.sample_weights=confidence",
        "explainability.enabled=false",
        "profiling.enabled=false",
        "mlflow.enabled=false",
    ]
    code, _, err = run_cli(
        ["train", "--model", "pixel_logreg", "--resolution", "8", "--preset", "smoke", *overrides], capsys
    )
    assert code == 0, err
    result = json.loads((trial_summary(project, "pixel_logreg", 8) / "result.json").read_text())
    penalty = result["history"][result["convergence"]["best_epoch"]]["train/penalty_C"]
    bundle = build(load("configs", "smoke", overrides), 8, seed=42, device="cpu")
    xs, ys, ws = zip(*[(x.flatten(1).numpy(), y.numpy(), w.numpy()) for x, y, w in bundle.train.plain()], strict=True)
    x, y, w = np.concatenate(xs), np.concatenate(ys), np.concatenate(ws)
    assert np.bincount(y)[0] > 2 * np.bincount(y)[1]  # imbalanced: the class weights matter
    scaler = StandardScaler().fit(x)
    balanced = len(y) / (2 * np.bincount(y))  # the deep models' class weights (inverse class frequency)
    clf = LogisticRegression(C=penalty, max_iter=MAX_ITER).fit(scaler.transform(x), y, w * balanced[y])
    state = load_checkpoint(Path(result["best_checkpoint"]))["model"]
    logits = x @ state["linear.weight"].numpy().T + state["linear.bias"].numpy()
    assert np.allclose(logits[:, 1] - logits[:, 0], clf.decision_function(scaler.transform(x)), atol=1e-3)
    unweighted = LogisticRegression(C=penalty, max_iter=MAX_ITER).fit(scaler.transform(x), y)
    assert not np.allclose(logits[:, 1] - logits[:, 0], unweighted.decision_function(scaler.transform(x)), atol=1e-2)
