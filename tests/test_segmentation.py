"""Segmentation (experiment.task=segmentation): models, losses and metrics against known answers, data with masks
and paired augmentation, the task checks and bad inputs, and a small sweep end to end."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import trial_checkpoints, trial_summary
from resomap.cli import main
from resomap.config import load
from resomap.config.schema import Config, LossConfig, ModelsConfig, SegmentationConfig
from resomap.errors import ConfigError, DataError
from resomap.models import MODELS, build_model, model_task
from resomap.tasks import seg_metrics
from resomap.tasks.losses import build_loss, build_term, pixel_class_weights

REPO = Path(__file__).resolve().parents[1]
SEG_EXPERIMENT = "resomap-seg-quickstart"  # experiment.name of the seg_quickstart preset
SEG_MODELS = [n for n in MODELS.names() if model_task(n) == "segmentation"]
SEG = [
    "experiment.task=segmentation",
    "data.dataset=synthetic_seg",
    "sweep.models=[tiny_segnet]",
    "explainability.methods=[gradcam,saliency]",
    "explainability.sanity_methods=[gradcam]",
    "explainability.probe_size=4",  # the small generated sets below hold 6 test images
]


def seg_cfg(tmp_path: Path, *extra: str):
    return load(REPO / "configs", overrides=[*SEG, f"experiment.output_dir={tmp_path}", *extra])


# ---------------------------------------------------------------- models


def test_registry_has_the_segmentation_models():
    assert {"tiny_segnet", "unet_resnet18", "fcn_resnet50", "fcn_resnet101", "deeplabv3_resnet50"} <= set(SEG_MODELS)
    assert model_task("resnet18") == "classification" and model_task("timm:resnet10t") == "classification"


@pytest.mark.parametrize("name", SEG_MODELS)
def test_segmentation_model_forward_backward_at_two_resolutions(name):
    torch.manual_seed(0)
    model, spec = build_model(name, 3, 1, ModelsConfig())
    assert spec.family and spec.cam_layers
    for r in (32, 48):  # 48: not a multiple of 32 (smp's Unet pads and crops)
        x = torch.randn(2, 1, r, r)
        out = model(x)
        assert out.shape == (2, 3, r, r)
        out.float().logsumexp(1).mean().backward()
        grads = [p.grad for p in model.parameters() if p.requires_grad]
        assert all(g is not None for g in grads) and any(g.abs().sum() > 0 for g in grads)
        model.zero_grad()
        layer = spec.cam_layer(model, r, 2)  # the CAM layer follows the resolution, as for classifiers
        assert layer.feature_size >= 2


# ---------------------------------------------------------------- losses


def _case():
    """1 image, 2 classes, 2x2 pixels: logits and target chosen so softmax probabilities are simple."""
    p1 = torch.tensor([[0.9, 0.2], [0.6, 0.1]])  # P(class 1) per pixel
    logits = torch.stack([torch.zeros(2, 2), torch.log(p1 / (1 - p1))])[None]  # softmax gives p1 for class 1
    target = torch.tensor([[[1, 0], [1, 0]]])
    return logits, target, p1


def test_dice_loss_matches_hand_computation():
    logits, target, p1 = _case()
    probs = [1 - p1, p1]
    dice = []
    for k in (0, 1):
        t = (target[0] == k).float()
        dice.append(2 * (probs[k] * t).sum() / (probs[k].sum() + t.sum()))
    expected = 1 - (dice[0] + dice[1]) / 2
    got = build_term("dice", 2)(logits, target)
    assert got.item() == pytest.approx(expected.item(), abs=1e-5)


def test_focal_tversky_matches_hand_computation_and_smp_at_gamma_one():
    from segmentation_models_pytorch.losses import TverskyLoss

    logits, target, p1 = _case()
    cfg = Config(loss=LossConfig(options={"focal_tversky": {"alpha": 0.3, "beta": 0.7, "gamma": 0.75}}))
    probs = [1 - p1, p1]
    terms = []
    for k in (0, 1):
        t = (target[0] == k).float()
        tp, fp, fn = (probs[k] * t).sum(), (probs[k] * (1 - t)).sum(), ((1 - probs[k]) * t).sum()
        terms.append((1 - tp / (tp + 0.3 * fp + 0.7 * fn)) ** 0.75)  # per class, then averaged
    got = build_term("focal_tversky", 2, cfg)(logits, target)
    assert got.item() == pytest.approx(((terms[0] + terms[1]) / 2).item(), abs=1e-5)
    plain = Config(loss=LossConfig(options={"focal_tversky": {"gamma": 1.0}}))
    library = TverskyLoss("multiclass", alpha=0.3, beta=0.7, gamma=1.0)  # the defaults of alpha and beta
    assert build_term("focal_tversky", 2, plain)(logits, target).item() == pytest.approx(
        library(logits, target).item(), abs=1e-6
    )


def test_combined_loss_sums_weighted_terms_and_class_weights():
    logits, target, _ = _case()
    cfg = Config(segmentation=SegmentationConfig(loss=["ce", "dice"], loss_weights=[2.0, 0.5]))
    ce = torch.nn.functional.cross_entropy(logits, target)
    dice = build_term("dice", 2, cfg)(logits, target)
    assert build_loss(cfg, 2)(logits, target).item() == pytest.approx((2 * ce + 0.5 * dice).item(), abs=1e-5)
    w = pixel_class_weights(np.array([300, 100, 0]))
    assert w.tolist() == pytest.approx([400 / (2 * 300), 400 / (2 * 100), 1.0])


# ---------------------------------------------------------------- metrics


def test_iou_dice_pixel_accuracy_against_hand_counts_and_sklearn():
    from sklearn.metrics import f1_score, jaccard_score

    target = torch.tensor([[[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 2, 2], [0, 0, 0, 0]]])
    pred = torch.tensor([[[0, 1, 1, 1], [0, 0, 1, 1], [2, 2, 0, 0], [0, 0, 0, 2]]])
    acc = seg_metrics.SegAccumulator(3, 0.01)
    acc.update(torch.nn.functional.one_hot(pred, 3).permute(0, 3, 1, 2).float(), target)
    scores = acc.scores()
    # class 0: tp 6, fp 2, fn 2 -> IoU 6/10; class 1: tp 4, fp 1, fn 0 -> 4/5; class 2: tp 2, fp 1, fn 2 -> 2/5
    assert scores.per_class_iou.tolist() == pytest.approx([0.6, 0.8, 0.4])
    assert scores.per_class_dice.tolist() == pytest.approx([12 / 16, 8 / 9, 4 / 7])
    assert scores.pixel_accuracy == pytest.approx(12 / 16)
    yt, yp = target.ravel().numpy(), pred.ravel().numpy()
    assert scores.per_class_iou.tolist() == pytest.approx(jaccard_score(yt, yp, average=None).tolist())
    m = scores.metrics("test")
    assert m["test/miou"] == pytest.approx(np.mean([0.6, 0.8, 0.4]))
    assert m["test/macro_f1"] == pytest.approx(f1_score(yt, yp, average="macro"))
    assert scores.confusion.tolist() == [[6, 1, 1], [0, 4, 0], [2, 0, 2]]


def test_the_all_background_baseline_is_the_miou_of_predicting_background_everywhere():
    """seg_metrics.background_miou from the mask's class counts equals the per-image mIoU the metric code gives an
    actual all-background prediction (and a hand count: background's share over the classes present)."""
    target = torch.tensor(
        [
            [[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 2, 2], [0, 0, 0, 0]],  # 8 bg, 4 c1, 4 c2 (16 px, 3 classes)
            [[0] * 4] * 4,  # background only: 1.0
            [[1, 1, 2, 2]] * 4,  # no background: 0.0
        ]
    )
    acc = seg_metrics.SegAccumulator(3, 0.01)
    model_scores = acc.update(torch.randn(3, 3, 4, 4), target)
    assert model_scores.shape == (3, 4, 4)
    counts = acc.scores().stats[..., 0] + acc.scores().stats[..., 2]  # tp + fn: the mask's pixels per class
    found = seg_metrics.background_miou(counts)
    everywhere = seg_metrics.SegAccumulator(3, 0.01)
    logits = torch.zeros(3, 3, 4, 4)
    logits[:, 0] = 1.0
    everywhere.update(logits, target)
    assert found.tolist() == pytest.approx(everywhere.scores().per_image()["miou"].tolist())
    assert found.tolist() == pytest.approx([(8 / 16) / 3, 1.0, 0.0])
    assert acc.scores().per_image()["background_miou"].tolist() == pytest.approx(found.tolist())


def test_metrics_resample_logits_to_the_reference_masks():
    target = torch.zeros(1, 8, 8, dtype=torch.long)
    target[:, :, 4:] = 1
    small = torch.zeros(1, 2, 2, 2)
    small[:, 0, :, 0] = 5.0  # left half class 0, right half class 1 at 2x2: the bilinear boundary is midway
    small[:, 1, :, 1] = 5.0
    acc = seg_metrics.SegAccumulator(2, 0.01)
    pred = acc.update(small, target)
    assert pred.shape == (1, 8, 8) and torch.equal(pred, target)
    assert acc.scores().metrics("t")["t/miou"] == pytest.approx(1.0)


def test_boundary_f1_tolerance():
    target = torch.zeros(1, 32, 32, dtype=torch.long)
    target[:, 8:24, 8:24] = 1
    shifted = torch.roll(target, 1, dims=2)
    far = torch.roll(target, 4, dims=2)
    k = 2
    same = seg_metrics.boundary_counts(target, target, k, 1).sum(0)
    assert torch.equal(same[:, 0], same[:, 1]) and torch.equal(same[:, 2], same[:, 3])  # perfect: F1 = 1
    near = seg_metrics.boundary_counts(shifted, target, k, 1).sum(0)
    assert torch.equal(near[1, 0], near[1, 1])  # 1 px off, 1 px tolerance: every boundary pixel matches
    off = seg_metrics.boundary_counts(far, target, k, 1).sum(0)
    assert off[1, 0] < off[1, 1]  # 4 px off: the left and right edges no longer match
    assert seg_metrics.tolerance_px(128, 0.01) == 1 and seg_metrics.tolerance_px(512, 0.01) == 5


# ---------------------------------------------------------------- config and task checks


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["sweep.models=[tiny_cnn]"], "tiny_cnn (classification model)"),
        (["data.dataset=synthetic"], "synthetic (classification)"),
        (["segmentation.loss=[dice,lovasz]"], "no loss term 'lovasz'"),
        (["segmentation.loss=[ce,dice]", "segmentation.loss_weights=[1.0]"], "one weight per loss term"),
        (["explainability.methods=[lime]"], "explainers of region targets"),
    ],
)
def test_task_mismatches_are_config_errors(tmp_path, extra, needle):
    with pytest.raises(ConfigError, match="expected") as info:
        seg_cfg(tmp_path, *extra)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_segmentation_model_in_a_classification_sweep_is_a_config_error():
    with pytest.raises(ConfigError, match=r"tiny_segnet \(segmentation model\)"):
        load(REPO / "configs", overrides=["sweep.models=[tiny_segnet]"])


def test_cli_task_mismatch_exits_2_with_one_line(tmp_path, capsys):
    for model, needle in (("tiny_cnn", "classification model"), ("tiny_segnet", "segmentation model")):
        task = [a for a in SEG if not a.startswith("sweep.models")] if model == "tiny_cnn" else []
        args = ["train", "--config-dir", str(REPO / "configs"), "--model", model, "--resolution", "32", *task]
        rc = main([*args, f"experiment.output_dir={tmp_path}", "mlflow.enabled=false"])
        err = capsys.readouterr().err
        assert rc == 2
        lines = [line for line in err.splitlines() if line.startswith("resomap: error:")]
        assert len(lines) == 1 and needle in lines[0] and "Traceback" not in err
    assert not (tmp_path / "checkpoints").exists()  # nothing trained


# ---------------------------------------------------------------- data


def test_synthetic_bundle_yields_masks_and_reference_targets(tmp_path):
    from resomap import data

    cfg = seg_cfg(tmp_path, "data.synthetic_seg.num_images=30", "training.batch_size=8", "data.cache.disk=false")
    bundle = data.build(cfg, 32, 42)
    assert bundle.task == "segmentation" and bundle.reference_resolution == 128
    x, y = next(iter(bundle.train))
    assert x.shape == (8, 1, 32, 32) and y.shape == (8, 32, 32) and y.dtype == torch.int64
    assert set(y.unique().tolist()) <= {0, 1, 2}
    xt, yt = next(iter(bundle.test))
    assert xt.shape[-1] == 32 and yt.shape[-1] == 128  # metrics on the reference masks
    assert bundle.train_pixel_counts.sum() == len(bundle.splits["train"]) * 32 * 32


def test_thin_lines_vanish_at_low_resolution():
    """The data property the quickstart measures: the best a 32 px model can output (the mask itself at 32 px,
    upsampled to the 128 px reference) loses most of the lines' IoU and boundary F1, a 128 px one loses nothing."""
    from resomap.data.cache import resize_targets
    from resomap.data.masks import SegSyntheticDataset

    ds = SegSyntheticDataset(20, 128, 2, 3, seed=0)
    full = torch.from_numpy(np.stack([ds.seg_mask(i) for i in range(20)])).long()
    scores = {}
    for r in (32, 64, 128):
        small = torch.from_numpy(np.stack([resize_targets(ds.seg_mask(i), r) for i in range(20)])).long()
        acc = seg_metrics.SegAccumulator(3, 0.01)
        acc.update(torch.nn.functional.one_hot(small, 3).permute(0, 3, 1, 2).float(), full)
        scores[r] = acc.scores()
    assert scores[128].per_class_iou[2] == pytest.approx(1.0)
    assert scores[32].per_class_iou[2] < 0.6 * scores[128].per_class_iou[2]
    assert scores[32].per_class_boundary_f1[2] < scores[64].per_class_boundary_f1[2] < 1.0


def test_paired_augmentation_moves_mask_with_image():
    from resomap.config.schema import AugmentationConfig
    from resomap.data.augment import BatchAugment

    aug = BatchAugment(AugmentationConfig(brightness=0, contrast=0, hflip=0.5, vflip=0.5, blur_prob=0), 64)
    mask = torch.zeros(8, 64, 64, dtype=torch.long)
    mask[:, 10:40, 5:30] = 1
    mask[:, 45:60, 40:62] = 2
    x = (mask.float() / 2)[:, None]  # the image is its mask
    gen = torch.Generator().manual_seed(3)
    xa, ya = aug.pair(x.clone(), mask.clone(), gen)
    assert ya.dtype == torch.long and set(ya.unique().tolist()) <= {0, 1, 2}
    agree = (torch.round(xa[:, 0] * 2).long() == ya).float().mean()
    assert agree > 0.97  # only boundary pixels (bilinear vs nearest) may differ
    assert not torch.equal(ya, mask)  # something moved
    x2 = aug(x.clone(), torch.Generator().manual_seed(3))
    assert torch.allclose(x2, xa)  # the same draws as the image-only augmentation


def _write_pairs(root: Path, n: int, mask_size=(16, 16), top=2, drop_mask: int | None = None) -> None:
    from PIL import Image

    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    rng = np.random.default_rng(0)
    for i in range(n):
        Image.fromarray(rng.integers(0, 255, (16, 16), dtype=np.uint8)).save(root / "images" / f"im{i}.png")
        if i == drop_mask:
            continue
        h, w = mask_size if i == 0 else (16, 16)
        Image.fromarray(rng.integers(0, top, (w, h), dtype=np.uint8)).save(root / "masks" / f"im{i}.png")


def _folder_cfg(tmp_path, root, *extra):
    return seg_cfg(
        tmp_path,
        "data.dataset=segfolder",
        f"data.segfolder.root={root}",
        "data.segfolder.classes=[background,crack]",
        "segmentation.reference_resolution=16",
        *extra,
    )


def test_segfolder_and_segcsv_read_pairs(tmp_path):
    from resomap import data

    root = tmp_path / "pairs"
    _write_pairs(root, 12)
    bundle = data.build(_folder_cfg(tmp_path, root), 8, 0)
    assert bundle.class_names == ["background", "crack"] and bundle.targets("test").shape[-1] == 16
    (root / "m.csv").write_text("image,mask\n" + "".join(f"images/im{i}.png,masks/im{i}.png\n" for i in range(12)))
    cfg = seg_cfg(
        tmp_path,
        "data.dataset=segcsv",
        f"data.segcsv.manifest={root / 'm.csv'}",
        "data.segcsv.classes=[background,crack]",
    )
    assert data.build(cfg, 8, 0).num_classes == 2


def test_mask_size_mismatch_is_a_data_error(tmp_path):
    from resomap import data

    root = tmp_path / "pairs"
    _write_pairs(root, 12, mask_size=(16, 12))
    with pytest.raises(DataError, match=r"is 16x12 but its image .* is 16x16"):
        data.build(_folder_cfg(tmp_path, root), 8, 0)


def test_image_without_mask_is_a_data_error(tmp_path):
    from resomap import data

    root = tmp_path / "pairs"
    _write_pairs(root, 12, drop_mask=3)
    with pytest.raises(DataError, match=r"1 of 12 images have no mask .*im3\.png"):
        data.build(_folder_cfg(tmp_path, root), 8, 0)


def test_unknown_class_index_is_skipped_with_a_count_then_an_error(tmp_path, caplog):
    from PIL import Image

    from resomap import data

    root = tmp_path / "pairs"
    _write_pairs(root, 40)
    Image.fromarray(np.full((16, 16), 7, np.uint8)).save(root / "masks" / "im5.png")
    with caplog.at_level("WARNING"):
        bundle = data.build(_folder_cfg(tmp_path, root, "data.max_bad_fraction=0.05"), 8, 0)
    assert sum(len(v) for v in bundle.splits.values()) == 39
    warned = [r.getMessage() for r in caplog.records if "invalid mask" in r.getMessage()]
    assert warned and "1 of 40 images have an invalid mask" in warned[0], warned  # not "could not be read"
    assert "im5.png holds class index 7" in warned[0] and "could not be read" not in warned[0]
    for i in range(1, 4):
        Image.fromarray(np.full((16, 16), 9, np.uint8)).save(root / "masks" / f"im{i}.png")
    with pytest.raises(DataError, match=r"4 of 40 images have an invalid mask \(mask .*im\d\.png holds class index"):
        data.build(_folder_cfg(tmp_path, root, "data.max_bad_fraction=0.05", "data.cache.disk=false"), 12, 0)


def test_cli_bad_mask_exits_2(tmp_path, capsys):
    root = tmp_path / "pairs"
    _write_pairs(root, 12, mask_size=(16, 12))
    args = ["train", "--config-dir", str(REPO / "configs"), "--model", "tiny_segnet", "--resolution", "8", *SEG]
    args += [
        f"experiment.output_dir={tmp_path}",
        "data.dataset=segfolder",
        f"data.segfolder.root={root}",
        "data.segfolder.classes=[background,crack]",
        "mlflow.enabled=false",
    ]
    rc = main(args)
    err = capsys.readouterr().err
    assert rc == 2 and "masks must have their image's size" in err and "Traceback" not in err


# ---------------------------------------------------------------- training


def test_trainer_fits_a_segmenter_with_bf16_and_channels_last(tmp_path):
    """The gpu_optimized settings that also run on the CPU (bf16 autocast, channels_last); the loss falls."""
    from resomap import data
    from resomap.training import Trainer

    cfg = seg_cfg(
        tmp_path,
        "data.synthetic_seg.num_images=40",
        "data.synthetic_seg.size=32",
        "training.epochs=3",
        "training.batch_size=8",
        "training.optimizer.lr=0.01",
        "system.precision=bf16",
        "system.channels_last=true",
        "training.progress=log",
        "data.cache.disk=false",
    )
    bundle = data.build(cfg, 32, 42)
    model, _ = build_model("tiny_segnet", bundle.num_classes, bundle.channels, cfg.models)
    trainer = Trainer(cfg, "cpu")
    fit = trainer.fit(model, bundle)
    losses = [h["train/loss"] for h in fit.history]
    assert losses[-1] < losses[0] and all(math.isfinite(v) for v in losses)
    assert 0 <= fit.history[-1]["train/accuracy"] <= 1  # pixel accuracy, not a count
    metrics, records, conf = trainer.evaluate(model, bundle.test, prefix="test")
    assert records.dtype.names == seg_metrics.RECORD_COLUMNS and len(records) == len(bundle.splits["test"])
    assert conf.sum() == len(bundle.splits["test"]) * 32 * 32  # reference side = the data's 32 px
    assert metrics["test/accuracy"] == pytest.approx(np.trace(conf) / conf.sum())


# ---------------------------------------------------------------- profiling and bench


def test_profile_of_a_segmenter_at_two_resolutions():
    """The profiler reads the task from the logits: per-pixel labels and the segmentation loss in the training step,
    finite latency, memory and MACs that grow with the pixels (a U-Net is all convolutions)."""
    from resomap.profiling import print_profiling_report, profile

    model, _ = build_model("tiny_segnet", 3, 1, ModelsConfig())
    kw = {"in_channels": 1, "device": "cpu", "warmup": 1, "iters": 4, "train_batch_size": 2, "train_iters": 2}
    found = {r: profile(model, r, rounds=2, **kw) for r in (16, 32)}
    for prof in found.values():
        assert prof.task == "segmentation" and prof.params_total == sum(p.numel() for p in model.parameters())
        for value in (prof.latency.median_ms, prof.memory.peak_mb, prof.macs, prof.train_images_per_s):
            assert math.isfinite(value) and value > 0
    assert found[32].macs / found[16].macs == pytest.approx(4.0, rel=0.05)
    assert "segmentation loss on per-pixel labels" in print_profiling_report(found[32])


def test_the_training_step_uses_per_pixel_labels_and_the_configured_loss():
    from resomap.profiling.profiler import step_task
    from resomap.profiling.timing import training_step
    from resomap.tasks.losses import CombinedLoss

    torch.manual_seed(0)
    model, _ = build_model("tiny_segnet", 3, 1, ModelsConfig())
    x = torch.randn(2, 1, 24, 24)
    task = step_task(model.train(), x, Config(segmentation=SegmentationConfig(loss=["focal_tversky"])))
    assert model.training  # the probe forward restores the mode
    assert task.task == "segmentation" and task.targets.shape == (2, 24, 24) and task.targets.dtype == torch.int64
    assert set(task.targets.unique().tolist()) <= {0, 1, 2}
    assert isinstance(task.loss, CombinedLoss) and list(task.loss.terms) == ["focal_tversky"]
    before = [p.detach().clone() for p in model.parameters()]
    training_step(model, x, task.targets, amp_dtype=None, loss_fn=task.loss)()
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))  # a real step, weights moved
    assert step_task(torch.nn.Flatten(), x).targets.shape == (2,)  # [B, C] logits: one label per image
    with pytest.raises(ConfigError, match=r"output has shape \[1, 24, 24\]"):
        step_task(_Squeeze(), x)


class _Squeeze(torch.nn.Module):
    """Logits of rank 3: neither a classifier's nor a segmenter's."""

    def forward(self, x):
        return x[:, 0]


def test_bench_command_of_a_segmenter_at_two_resolutions(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no configs/ here: the defaults apply
    for r in (16, 32):
        argv = ["bench", "--model", "tiny_segnet", "--resolution", str(r), "--in-channels", "1", "--batch-sizes",
                "1", "2", "--devices", "cpu", "--iters", "2", "--warmup", "1", "--rounds", "2", "--json",
                "--compare-opts", "amp_bf16"]  # fmt: skip
        assert main(argv) == 0
        out = capsys.readouterr().out
        data = json.loads(out[: out.rindex("}") + 1])
        assert data["task"] == "segmentation" and data["resolution"] == r
        sizes = [e for e in data["entries"] if e["section"] == "batch_sizes"]
        assert [e["batch_size"] for e in sizes] == [1, 2]
        for e in sizes:
            assert e["status"] == "ok", e["reason"]
            for key in ("infer_images_per_s", "train_images_per_s", "infer_peak_mb", "train_peak_mb"):
                assert math.isfinite(e[key]) and e[key] >= 0, key
            assert e["infer_images_per_s"] > 0 and e["train_images_per_s"] > 0
        options = {e["option"]: e for e in data["entries"] if e["section"] == "options"}
        assert set(options) == {"baseline", "amp_bf16"} and options["baseline"]["batch_size"] == 2
        if options["amp_bf16"]["status"] != "skipped":  # bf16 autocast vs fp32, per-pixel loss included
            assert options["amp_bf16"]["status"] == "ok", options["amp_bf16"]["reason"]
            assert options["amp_bf16"]["ratios"]["train_x"] > 0


# ---------------------------------------------------------------- sweep


def test_segmentation_sweep_end_to_end(tmp_path, monkeypatch):
    """Two seeds x two resolutions: the segmenter's maps go through the same explanation path as a classifier's
    (explain_trial, quality beside its baselines, evaluation.crossres) and get the same cross-seed floor, chance level,
    references and MLflow by_resolution agreement metrics."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    args = [
        "sweep",
        "--config-dir",
        str(REPO / "configs"),
        "--preset",
        "seg_quickstart",
        f"experiment.output_dir={tmp_path}",
        "sweep.resolutions=[16,32]",
        "sweep.seeds=[42,43]",
        "training.epochs=2",
        "data.synthetic_seg.num_images=48",
        "data.synthetic_seg.size=32",
        "profiling.iters=2",
        "profiling.warmup=1",
        "explainability.probe_size=4",
        "mlflow.log_model=false",
    ]
    assert main(args) == 0
    for r in (16, 32):
        folder = trial_summary(tmp_path, "tiny_segnet", r, experiment=SEG_EXPERIMENT)
        result = json.loads((folder / "result.json").read_text())
        assert result["status"] == "FINISHED", result.get("error")
        assert result["test"]["test/reference_resolution"] == 32
        assert 0 <= result["test"]["test/miou"] <= 1 and "test/boundary_f1" in result["test"]
        assert set(result["cross_resolution"]) == {"16", "32"}
        assert result["profile"]["gmacs"] > 0
        assert json.loads((folder / "profile.json").read_text())["task"] == "segmentation"  # the model itself
        metrics = result["explain"]["metrics"]
        assert metrics["explain/gradcam/deletion_auc_random"] >= 0  # quality beside the same baselines
        assert "explain/saliency/pointing_game_vs_random" in metrics  # the explained region is the object mask
        rows = (folder / "seg_predictions.csv").read_text().splitlines()
        assert rows[0].startswith("test_resolution,index,pixel_accuracy,miou")
        n_test = sum(1 for line in rows[1:] if line.startswith(f"{r},"))
        assert n_test > 0 and len(rows) == 1 + 2 * n_test  # every test image at both test resolutions
        assert (folder / "confusion_matrix.png").is_file() and (folder / "explanations.npz").is_file()
        assert (folder / "seg_overlays.png").is_file()
    out = tmp_path / "model_summaries" / "_sweep" / "resomap-seg-quickstart"
    assert (out / "summary.csv").is_file() and not list(out.glob("seg_*"))  # the one summary of every task
    import pandas as pd

    agreement = pd.read_csv(out / "explanations" / "agreement.csv")
    gradcam = agreement[(agreement["model"] == "tiny_segnet") & (agreement["method"] == "gradcam")]
    kinds = set(gradcam["kind"])
    assert {"resolution", "seed", "chance", "model_free"} <= kinds, kinds  # floor, chance and references
    assert (out / "figures" / "accuracy_vs_resolution.png").is_file()
    summary = pd.read_csv(out / "summary.csv")
    assert summary["image_miou_pooled"].notna().all() and (summary["n_seeds"] == 2).all()
    assert summary["test_miou"].notna().all()  # the seeds' mean of test/miou
    from resomap.results import load_sweep

    per_image = load_sweep(out).predictions  # the notebook API reads the task's per-image table
    assert {"model", "resolution", "seed", "test_resolution", "index", "miou", "boundary_f1"} <= set(per_image.columns)
    assert len(per_image) == sum(
        len(
            (trial_summary(tmp_path, "tiny_segnet", r, s, experiment=SEG_EXPERIMENT) / "seg_predictions.csv")
            .read_text()
            .splitlines()
        )
        - 1
        for r in (16, 32)
        for s in (42, 43)
    )
    assert set(per_image["seed"]) == {42, 43} and per_image["miou"].between(0, 1).all()
    # 8 test images: too few for a bootstrap interval, and the summary says so (intervals: tests/test_reports.py)
    assert summary["image_miou_ci_low"].isna().all() and summary["note"].str.contains("only 8 test images").all()
    paired = pd.read_csv(out / "paired_tests.csv")
    assert set(paired["metric"]) == {"miou", "boundary_f1"} and (paired["n_seeds"] == 2).all()
    assert (paired["method"].str.startswith("paired bootstrap")).all()  # per-image IoU is not 0/1: no McNemar
    recommendation = pd.read_csv(out / "recommendation.csv")
    assert list(recommendation["metric"]) == ["miou"] and list(recommendation["reference"]) == [32]
    verdict = summary.set_index("resolution").loc[16, "verdict"]  # the decision, said the same way in words
    words = {"inferior": "shown inferior", "undecided": "detects margins of", "non-inferior": "shown non-inferior"}
    assert words[verdict] in recommendation["reason"][0], (verdict, recommendation["reason"][0])
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("resomap-seg-quickstart").experiment_id
    children = client.search_runs([exp], "tags.`resomap.trial_key` != ''")
    parents = client.search_runs([exp], "tags.`resomap.kind` = 'sweep'")
    assert len(children) == 4 and len(parents) == 1
    for run in children:
        assert run.data.metrics["test/miou"] >= 0
        figures = [a.path for a in client.list_artifacts(run.info.run_id, "figures")]
        assert "figures/seg_overlays.png" in figures  # the prediction overlays
    parent = parents[0].data.metrics
    # the parent's one "best" is the answer's (one model: its smallest sufficient resolution, where shown), scored
    # by the task's headline (mIoU pooled over the seeds, 3 decimals), never the highest raw score; without one it
    # holds no score
    best = parents[0].data.tags.get("resomap.best")
    assert parents[0].data.tags["recommended"].startswith("one model, tiny_segnet: ")
    if best is None:
        assert "score" not in parent
    else:
        model, res = best.split("@")
        chosen = summary[(summary["model"] == model) & (summary["resolution"] == int(res))].iloc[0]
        assert parent["score"] == pytest.approx(round(chosen["test_miou_pooled"], 3), abs=1e-9)
    assert not any(k.startswith("best_test_") for k in parent)
    assert (
        "agreement/tiny_segnet/gradcam/spearman" in parent and "agreement_floor/tiny_segnet/gradcam/spearman" in parent
    )
    history = client.get_metric_history(parents[0].info.run_id, "by_resolution/tiny_segnet/agreement_gradcam")
    assert {m.step for m in history} == {16, 32}


# ---------------------------------------------------------------- slow: kill/resume, the resolution effect

SWEEP_ARGS = [
    "--preset",
    "seg_quickstart",
    "sweep.resolutions=[16,32]",
    "training.epochs=4",
    "data.synthetic_seg.num_images=60",
    "data.synthetic_seg.size=32",
    "profiling.enabled=false",
    "explainability.enabled=false",
    "mlflow.log_model=false",
    "mlflow.log_checkpoint=false",
    "system.threads=1",  # fixed: a count measured per fit may differ between the killed and the clean sweep
]


def _seg_sweep(root: Path) -> subprocess.Popen:
    import os

    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    cmd = [sys.executable, "-m", "resomap.cli", "sweep", "--config-dir", str(REPO / "configs"), *SWEEP_ARGS]
    cmd.append(f"experiment.output_dir={root}")
    log = open(root / "sweep.log", "ab")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    return proc


@pytest.mark.slow
def test_segmentation_sweep_killed_mid_training_resumes_to_the_same_metrics(tmp_path):
    import os
    import signal
    import time

    killed, clean = tmp_path / "killed", tmp_path / "clean"
    killed.mkdir()
    clean.mkdir()
    proc = _seg_sweep(killed)
    last = trial_checkpoints(killed, "tiny_segnet", 32, experiment=SEG_EXPERIMENT, family="segnet") / "last.pt"
    result = trial_summary(killed, "tiny_segnet", 32, experiment=SEG_EXPERIMENT) / "result.json"
    try:
        deadline = time.monotonic() + 600
        while not (last.exists() and not result.exists()):  # the second trial has saved an epoch, not finished
            assert proc.poll() is None and time.monotonic() < deadline, (killed / "sweep.log").read_text()[-2000:]
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert not result.exists()
    assert _seg_sweep(killed).wait(timeout=900) == 0
    assert _seg_sweep(clean).wait(timeout=900) == 0
    for res in (16, 32):
        a, b = (
            json.loads((trial_summary(root, "tiny_segnet", res, experiment=SEG_EXPERIMENT) / "result.json").read_text())
            for root in (killed, clean)
        )
        assert a["status"] == b["status"] == "FINISHED"
        for key in ("test/miou", "test/boundary_f1", "test/accuracy"):
            assert a["test"][key] == pytest.approx(b["test"][key], abs=1e-6), key
    notes = json.loads(result.read_text()).get("notes", [])
    assert any("resumed from last.pt" in n for n in notes)


@pytest.mark.slow
def test_trained_segmenter_loses_thin_structures_at_low_resolution(tmp_path):
    """The quickstart's finding, trained: the 32 px model's line IoU and boundary F1 on the 128 px reference masks
    are far below the 128 px model's."""
    args = [
        "sweep",
        "--config-dir",
        str(REPO / "configs"),
        "--preset",
        "seg_quickstart",
        "sweep.resolutions=[32,128]",
        f"experiment.output_dir={tmp_path}",
        "profiling.enabled=false",
        "explainability.enabled=false",
        "mlflow.enabled=false",
        "training.class_weights=balanced",
    ]
    assert main(args) == 0
    found = {}
    for r in (32, 128):
        path = trial_summary(tmp_path, "tiny_segnet", r, experiment=SEG_EXPERIMENT) / "result.json"
        found[r] = json.loads(path.read_text())["test"]
    assert found[32]["test/boundary_f1"] < found[128]["test/boundary_f1"] - 0.1
    assert found[32].get("test/iou_c2", 0.0) < found[128]["test/iou_c2"] - 0.1
