"""Tests of resomap.data: registry, datasets, splits, resolution cache, loaders, augmentation, errors."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from resomap.config import build as build_config
from resomap.config.schema import AugmentationConfig, DataConfig
from resomap.data import (
    BatchAugment,
    build,
    clear_memory_cache,
    get_dataset,
    list_datasets,
    memory_cache_keys,
    split_indices,
)
from resomap.data.folders import ImageFolderOptions
from resomap.data.sources import ElpvOptions
from resomap.data.synthetic import SyntheticDataset
from resomap.errors import DataError, UnknownNameError

# ---------------------------------------------------------------- shared fixtures


pytestmark = pytest.mark.usefixtures("fresh_memory_cache")


def make_cfg(tmp_path: Path, data: dict | None = None, **sections):
    data = {"dataset": "synthetic", "synthetic": {"num_images": 60, "size": 64}, **(data or {})}
    sections.setdefault("explainability", {"probe_size": 4})  # 60 images hold 9 test images
    return build_config({"data": data, "experiment": {"output_dir": str(tmp_path)}, **sections})


def count_loads(monkeypatch, cls) -> dict[str, int]:
    """Counts `cls.load` calls (decodes, reads) in {"n": ...}."""
    calls = {"n": 0}
    original = cls.load

    def counting(self, i):
        calls["n"] += 1
        return original(self, i)

    monkeypatch.setattr(cls, "load", counting)
    return calls


@pytest.fixture
def load_counter(monkeypatch):
    """Counts SyntheticDataset.load calls (decodes)."""
    return count_loads(monkeypatch, SyntheticDataset)


def write_images(folder: Path, n: int, mode: str = "L", size=(20, 24), start: int = 0) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(start)
    paths = []
    for i in range(n):
        shape = (size[1], size[0]) if mode == "L" else (size[1], size[0], 3)
        path = folder / f"img{start + i:03d}.png"
        Image.fromarray(rng.integers(0, 255, shape, dtype=np.uint8), mode=mode).save(path)
        paths.append(path)
    return paths


def image_folder(tmp_path: Path, per_class: int = 8) -> Path:
    root = tmp_path / "images"
    for k, name in enumerate(["cat", "dog"]):
        write_images(root / name, per_class, start=100 * k)
    return root


# ---------------------------------------------------------------- registry and ELPV


def test_registry_lists_builtins_and_suggests_close_names():
    assert {"elpv", "synthetic", "imagefolder", "csv"} <= set(list_datasets())
    with pytest.raises(UnknownNameError, match="did you mean synthetic"):
        get_dataset("synthetc")


@pytest.mark.parametrize(("task", "num_classes"), [("defect", 2), ("defect4", 4), ("type", 2)])
def test_elpv_tasks(task, num_classes):
    raw = get_dataset("elpv")(DataConfig(), options=ElpvOptions(task=task))
    assert len(raw) == 2624 and raw.channels == 1 and not raw.has_masks
    assert len(raw.class_names) == num_classes
    counts = np.bincount(raw.labels, minlength=num_classes)
    assert len(counts) == num_classes and counts.min() > 0 and counts.sum() == 2624


def test_elpv_build_with_limit(tmp_path):
    cfg = make_cfg(tmp_path, {"dataset": "elpv", "elpv": {"task": "defect4"}, "limit": 120})
    bundle = build(cfg, 16, seed=0, device="cpu")
    assert bundle.num_classes == 4 and bundle.channels == 1
    assert sum(len(v) for v in bundle.splits.values()) == 120
    assert set(np.unique(bundle.train_labels)) == {0, 1, 2, 3}
    assert bundle.images("test").shape == (len(bundle.splits["test"]), 1, 16, 16)
    assert "elpv (task=defect4, stratify=label)" in bundle.describe()


# ---------------------------------------------------------------- splits


def test_split_is_stratified_disjoint_complete_and_stable(tmp_path):
    cfg = make_cfg(tmp_path)
    a = build(cfg, 16, seed=3, device="cpu")
    b = build(cfg, 32, seed=3, device="cpu")
    c = build(cfg, 16, seed=3, device="cpu")
    parts = [set(a.splits[s].tolist()) for s in ("train", "val", "test")]
    assert set().union(*parts) == set(range(60)) and sum(map(len, parts)) == 60
    for s in ("train", "val", "test"):
        assert np.array_equal(a.splits[s], b.splits[s]) and np.array_equal(a.splits[s], c.splits[s])
        counts = np.bincount(a.labels(s).numpy(), minlength=2)
        assert abs(int(counts[0]) - int(counts[1])) <= 1  # balanced classes stay balanced
    assert np.array_equal(a.train_labels, a.labels("train").numpy())


def test_split_differs_with_seed():
    labels = np.arange(100) % 2
    one = split_indices(np.arange(100), labels, ["a", "b"], 0.2, 0.2, seed=1)
    two = split_indices(np.arange(100), labels, ["a", "b"], 0.2, 0.2, seed=2)
    assert not np.array_equal(one["test"], two["test"])


def test_split_with_too_few_images_per_class_says_so():
    with pytest.raises(DataError, match="'b' has 2"):
        split_indices(np.arange(10), np.array([0] * 8 + [1] * 2), ["a", "b"], 0.2, 0.2, seed=0)


# ---------------------------------------------------------------- resolution cache


def test_second_build_does_not_decode_and_disk_cache_is_reused(tmp_path, load_counter):
    cfg = make_cfg(tmp_path)
    first = build(cfg, 32, seed=0, device="cpu")
    assert load_counter["n"] == 60
    second = build(cfg, 32, seed=0, device="cpu")
    assert load_counter["n"] == 60  # memory hit
    assert torch.equal(first.images("train"), second.images("train"))
    clear_memory_cache()
    third = build(cfg, 32, seed=0, device="cpu")
    assert load_counter["n"] == 60  # disk hit in a fresh in-memory state
    assert torch.equal(first.masks("val"), third.masks("val"))
    build(cfg, 16, seed=0, device="cpu")
    assert load_counter["n"] == 120  # a new resolution decodes
    files = list((tmp_path / ".cache" / "resomap").rglob("*"))
    assert {f.name for f in files if f.is_file()} >= {"32.npy", "32.masks.npy", "32.json", "16.npy"}
    assert not [f for f in files if f.name.endswith(".tmp")]  # atomic writes leave no temp file


def test_zero_memory_budget_serves_a_memory_map(tmp_path, load_counter):
    for disk in (True, False):
        cfg = make_cfg(tmp_path / str(disk), {"cache": {"memory_budget_mb": 0, "disk": disk}})
        bundle = build(cfg, 32, seed=0, device="cpu")
        assert bundle.cache_location.endswith("32.npy") and not memory_cache_keys()
        x, _ = next(iter(bundle.train))
        assert x.shape == (min(32, bundle.train.num_samples), 1, 32, 32) and x.dtype == torch.float32
        before = load_counter["n"]
        again = build(cfg, 32, seed=0, device="cpu")
        assert load_counter["n"] == before  # reopened from disk, not decoded
        assert torch.equal(bundle.images("test"), again.images("test"))


# ---------------------------------------------------------------- loaders and augmentation


def test_loaders_yield_normalised_batches(tmp_path):
    cfg = make_cfg(tmp_path, training={"batch_size": 8, "eval_batch_size": 5})
    bundle = build(cfg, 16, seed=0, device="cpu")
    for split, loader in (("train", bundle.train), ("val", bundle.val), ("test", bundle.test)):
        batches = list(loader)
        assert len(batches) == len(loader) and loader.num_samples == len(bundle.splits[split])
        x, y = batches[0]
        assert x.dtype == torch.float32 and y.dtype == torch.int64 and x.shape[1:] == (1, 16, 16)
    train = bundle.normalize(bundle.images("train"))
    assert abs(train.mean().item()) < 1e-3 and abs(train.std().item() - 1) < 1e-2


def test_the_normaliser_is_computed_once_per_cache_entry_and_split(tmp_path):
    """A second bundle of the same images and split (the next trial, a checkpoint the summary loads) takes the
    normaliser computed for the first, the same statistics as computed afresh; another split gets its own."""
    from resomap.data.loader import Normalizer

    cfg = make_cfg(tmp_path)
    first, again = build(cfg, 16, seed=0, device="cpu"), build(cfg, 16, seed=1, device="cpu")
    assert again.normalizer is first.normalizer
    fresh = Normalizer.from_images(first._entry.images, torch.from_numpy(first._positions["train"]))
    assert torch.equal(fresh.mean, first.normalizer.mean) and torch.equal(fresh.std, first.normalizer.std)
    other = build(make_cfg(tmp_path, {"split": {"val": 0.3, "test": 0.3}}), 16, seed=0, device="cpu")
    assert other._entry is first._entry and other.normalizer is not first.normalizer
    fresh = Normalizer.from_images(other._entry.images, torch.from_numpy(other._positions["train"]))
    assert torch.equal(fresh.mean, other.normalizer.mean)


def test_train_never_ends_in_a_batch_of_one(tmp_path):
    n_train = build(make_cfg(tmp_path), 16, seed=0, device="cpu").train.num_samples
    cfg = make_cfg(tmp_path, training={"batch_size": n_train - 1})
    bundle = build(cfg, 16, seed=0, device="cpu")
    assert len(bundle.train) == 1 and all(len(y) == n_train - 1 for _, y in bundle.train)


def _collect(loader, epoch):
    loader.set_epoch(epoch)
    xs, ys = zip(*loader)
    return torch.cat(xs), torch.cat(ys)


def test_set_epoch_determinism(tmp_path):
    bundle = build(make_cfg(tmp_path, training={"batch_size": 8}), 16, seed=0, device="cpu")
    x0, y0 = _collect(bundle.train, 0)
    x0b, y0b = _collect(bundle.train, 0)
    x1, _ = _collect(bundle.train, 1)
    assert torch.equal(x0, x0b) and torch.equal(y0, y0b)
    assert x0.shape == x1.shape and not torch.equal(x0, x1)
    other = build(make_cfg(tmp_path, training={"batch_size": 8}), 16, seed=0, device="cpu")
    assert torch.equal(_collect(other.train, 1)[0], x1)  # a resumed run sees the same batches


def test_augmentation_changes_train_batches_only(tmp_path):
    bundle = build(make_cfg(tmp_path, training={"batch_size": 8, "eval_batch_size": 8}), 32, seed=0, device="cpu")
    bundle.train.set_epoch(0)
    rows = bundle.train.batch_positions()[0]
    x, _ = next(iter(bundle.train))
    plain = bundle.normalize(bundle.images("train")[rows])
    assert x.shape == plain.shape and not torch.allclose(x, plain, atol=1e-3)
    for split, loader in (("val", bundle.val), ("test", bundle.test)):
        xv, yv = next(iter(loader))
        assert torch.allclose(xv, bundle.normalize(bundle.images(split)[:8]))
        assert torch.equal(yv, bundle.labels(split)[:8])
    off = build(make_cfg(tmp_path, {"augmentation": {"enabled": False}}, training={"batch_size": 8}), 32, 0, "cpu")
    off.train.set_epoch(0)
    assert torch.allclose(next(iter(off.train))[0], off.normalize(off.images("train")[rows]))


def test_one_recipe_at_every_resolution_by_default_and_resolution_aware_only_when_asked():
    plain = AugmentationConfig()
    recipes = [BatchAugment(plain, r) for r in (16, 32, 64, 128, 224)]
    assert {a.scale_min for a in recipes} == {plain.crop_scale_min} and all(a.blur_active for a in recipes)
    described = [a.describe() for a in recipes]
    assert {d["recipe"] for d in described} == {"one recipe at every resolution"}
    assert [d["blur_sigma_max_px"] for d in described] == [round(1.5 * r / 224, 4) for r in (16, 32, 64, 128, 224)]
    aware = AugmentationConfig(resolution_aware=True, high_resolution=64, crop_scale_min=0.9, crop_scale_min_high=0.3)
    low, high = BatchAugment(aware, 32), BatchAugment(aware, 64)
    assert (low.scale_min, low.blur_active) == (0.9, False) and (high.scale_min, high.blur_active) == (0.3, True)
    assert low.describe()["resolution_aware"] and "varies with resolution" in high.describe()["recipe"]


def test_blur_blurs_at_every_resolution_by_default():
    cfg = AugmentationConfig(crop_scale_min=1.0, hflip=0, vflip=0, brightness=0, contrast=0, blur_prob=1.0)
    for r in (32, 64):
        aug = BatchAugment(dataclasses.replace(cfg, blur_sigma_max=20.0 * 224 / r), r)  # sigma up to 20 px
        x = torch.rand(4, 1, r, r, generator=torch.Generator().manual_seed(0))
        out = aug(x.clone(), torch.Generator().manual_seed(1))
        assert out.shape == x.shape and (out.diff(dim=-1).abs().mean() < 0.8 * x.diff(dim=-1).abs().mean()).item()


NATIVE = 256  # side of the test pattern before any resize


def _grating(cycles: float) -> np.ndarray:
    """uint8 [NATIVE, NATIVE]: a vertical sine grating of `cycles` periods across the image, amplitude 100."""
    x = (np.arange(NATIVE) + 0.5) / NATIVE
    g = np.sin(2 * np.pi * cycles * x + 0.3)[None, :].repeat(NATIVE, axis=0)
    return np.clip(np.rint(128 + 100 * g), 0, 255).astype(np.uint8)


def _energy_ratio(out: np.ndarray, ref: np.ndarray) -> float:
    return float(np.var(np.asarray(out, dtype=np.float64)) / np.var(np.asarray(ref, dtype=np.float64)))


@pytest.mark.parametrize("resolution", [16, 32, 64, 128])
def test_resize_and_random_resized_crop_are_antialiased_at_every_resolution(resolution: int):
    """Bounds (the same at every resolution: one operation relative to the image): a grating at 1.5x the target's
    Nyquist frequency keeps <= 2% of its energy after the resize the cache and test time use (aliased nearest-
    neighbour sampling keeps ~100%, folded to a false low frequency), and the random resized crop does not bring it
    back; a grating at a quarter of Nyquist keeps >= 85% through the resize and >= 85% of that through the crop,
    one at half of Nyquist >= 55% and >= 70%."""
    from resomap.data.cache import resize_image

    r = resolution
    crop_only = AugmentationConfig(hflip=0, vflip=0, brightness=0, contrast=0, blur_prob=0)
    aug = BatchAugment(crop_only, r)
    for fraction, kept_resize, kept_crop in ((1.5, None, None), (0.5, 0.55, 0.70), (0.25, 0.85, 0.85)):
        pattern = _grating(fraction * r / 2)
        small = resize_image(pattern, r, 1)[0]
        batch = torch.from_numpy(small / 255.0).float()[None, None].repeat(16, 1, 1, 1)
        cropped = aug(batch.clone(), torch.Generator().manual_seed(r)).numpy()
        resized, through_crop = _energy_ratio(small, pattern), _energy_ratio(cropped * 255.0, pattern)
        if kept_resize is None:  # above Nyquist: averaged away, never aliased back
            nearest = pattern[:, (np.arange(r) * NATIVE) // r][(np.arange(r) * NATIVE) // r]
            assert _energy_ratio(nearest, pattern) > 0.9  # what an aliasing resample keeps
            assert resized <= 0.02 and through_crop <= 0.02, (resized, through_crop)
        else:
            assert resized >= kept_resize and through_crop >= kept_crop * resized, (fraction, resized, through_crop)
            assert through_crop <= resized * 1.02  # a crop never adds energy


def test_crop_is_torchvisions_antialiased_resized_crop():
    from torchvision.transforms.v2 import functional as TF

    aug = BatchAugment(AugmentationConfig(crop_scale_min=0.5, hflip=0, brightness=0, contrast=0, blur_prob=0), 32)
    x = torch.rand(6, 1, 32, 32, generator=torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(5)
    out = aug(x.clone(), gen)
    boxes = aug.crop_boxes(torch.rand(6, 6, generator=torch.Generator().manual_seed(5)), 32, 32)
    for i, (top, left, h, w) in enumerate(boxes):
        expected = TF.resized_crop(x[i], top, left, h, w, [32, 32], antialias=True).clamp(0, 1)
        assert torch.allclose(out[i], expected, atol=1e-6)
        assert 0.5 * 32 * 32 * 0.9 <= h * w <= 32 * 32 and h <= 32 and w <= 32


def test_crop_keeps_the_aspect_it_can_fit():
    """A crop's aspect ratio stays where its box fits the image: at full area the crop is the whole image (never a
    squeezed strip resized back), and near-full areas keep near-square boxes; torchvision's 3/4-4/3 range holds."""
    u = torch.rand(2000, 6, generator=torch.Generator().manual_seed(1))
    for scale_min in (1.0, 0.96, 0.5):
        aug = BatchAugment(AugmentationConfig(crop_scale_min=scale_min), 300)
        boxes = aug.crop_boxes(u, 300, 300)
        if scale_min == 1.0:
            assert set(boxes) == {(0, 0, 300, 300)}
            continue
        ratios = torch.tensor([w / h for _, _, h, w in boxes])
        areas = torch.tensor([h * w / 300**2 for _, _, h, w in boxes])
        assert ratios.min() >= 3 / 4 - 0.01 and ratios.max() <= 4 / 3 + 0.01
        assert (ratios >= areas - 0.01).all() and (ratios <= 1 / areas + 0.01).all()  # the box fits: no side clamped
        assert areas.min() >= scale_min - 0.01
        if scale_min == 0.96:
            assert ratios.min() > 0.95 and ratios.max() < 1.05, (ratios.min(), ratios.max())


def test_probe_set_larger_than_the_test_set_is_a_config_error(tmp_path):
    from resomap.errors import ConfigError

    with pytest.raises(ConfigError, match=r"explainability.probe_size: expected at most the 9 test images"):
        make_cfg(tmp_path, explainability={"probe_size": 10})  # 60 synthetic images x 0.15 -> 9 test images
    assert make_cfg(tmp_path, explainability={"probe_size": 9}).explainability.probe_size == 9
    assert make_cfg(tmp_path, explainability={"probe_size": 10, "enabled": False})  # no probe set: no check
    with pytest.raises(ConfigError, match=r"explainability.probe_size: expected at most the 394 test images"):
        build_config({"explainability": {"probe_size": 400}})  # ELPV: 2,624 images x 0.15
    with pytest.raises(ConfigError, match=r"data.augmentation.crop_scale_min: expected an area fraction in \(0, 1\]"):
        make_cfg(tmp_path, {"augmentation": {"crop_scale_min": 1.5}})


def test_worker_loader_matches_fast_path(tmp_path):
    fast = build(make_cfg(tmp_path, training={"batch_size": 8}), 16, seed=0, device="cpu")
    pooled = build(make_cfg(tmp_path, training={"batch_size": 8}, system={"num_workers": 1}), 16, 0, "cpu")
    for epoch in (0, 1):
        xa, ya = _collect(fast.train, epoch)
        xb, yb = _collect(pooled.train, epoch)
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


# ---------------------------------------------------------------- synthetic


def test_synthetic_masks_balance_and_determinism(tmp_path):
    bundle = build(make_cfg(tmp_path), 32, seed=0, device="cpu")
    masks = bundle.masks("train")
    assert masks.dtype == torch.bool and masks.shape == (bundle.train.num_samples, 32, 32)
    assert 0.05 < masks.float().mean().item() < 0.5  # one object per image, never the whole frame
    raw = SyntheticDataset(60, 64, 3, seed=0)
    assert np.bincount(raw.labels).tolist() == [30, 30]
    assert np.array_equal(raw.load(5), SyntheticDataset(60, 64, 3, seed=0).load(5))
    assert not np.array_equal(raw.load(5), SyntheticDataset(60, 64, 3, seed=1).load(5))


def _texture_gap(bundle) -> float:
    """Difference between classes of the mean within-object std, in units of the image noise."""
    x, m, y = bundle.images("train").float()[:, 0], bundle.masks("train"), bundle.labels("train")
    stds = torch.stack([x[i][m[i]].std() for i in range(len(x))])
    return (stds[y == 1].mean() - stds[y == 0].mean()).abs().item()


def test_synthetic_class_detail_vanishes_at_low_resolution(tmp_path):
    cfg = make_cfg(tmp_path, {"synthetic": {"num_images": 80, "size": 128, "detail_size": 3}})
    high = _texture_gap(build(cfg, 128, seed=0, device="cpu"))
    low = _texture_gap(build(cfg, 16, seed=0, device="cpu"))
    assert high > 30 and low < 5 and low < 0.1 * high


@pytest.mark.slow
def test_tiny_cnn_learns_synthetic_at_full_resolution(tmp_path):
    torch.manual_seed(0)
    cfg = make_cfg(tmp_path, {"synthetic": {"num_images": 300, "size": 128}}, training={"batch_size": 32})
    bundle = build(cfg, 128, seed=0, device="cpu")
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveMaxPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 2),
    )  # fmt: skip
    opt = torch.optim.Adam(net.parameters(), 3e-3)
    # 30 epochs (7 steps each): the class is a regular checkerboard among random cells of the same contrast and
    # mean, no longer a bright object; this 2-layer net needs ~25 epochs to find it
    for epoch in range(30):
        bundle.train.set_epoch(epoch)
        for x, y in bundle.train:
            loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        correct = sum((net(x).argmax(1) == y).sum().item() for x, y in bundle.test)
    assert correct / bundle.test.num_samples > 0.85


# ---------------------------------------------------------------- imagefolder and csv


def test_imagefolder_happy_path(tmp_path):
    root = image_folder(tmp_path)
    bundle = build(
        make_cfg(tmp_path, {"dataset": "imagefolder", "imagefolder": {"root": str(root)}}), 16, seed=0, device="cpu"
    )
    assert bundle.class_names == ["cat", "dog"] and bundle.channels == 1
    assert bundle.images("train").shape[1:] == (1, 16, 16) and bundle.masks("train") is None
    write_images(root / "dog", 1, mode="RGB", start=500)
    rgb = build(
        make_cfg(tmp_path, {"dataset": "imagefolder", "imagefolder": {"root": str(root)}}), 16, seed=0, device="cpu"
    )
    assert rgb.channels == 3 and next(iter(rgb.test))[0].shape[1] == 3


def test_csv_happy_path(tmp_path):
    paths = write_images(tmp_path / "imgs", 12)
    manifest = tmp_path / "labels.csv"
    lines = [f"imgs/{p.name},{'b' if i % 2 else 'a'}" for i, p in enumerate(paths)]
    manifest.write_text("path,label\n" + "\n".join(lines) + "\n")
    bundle = build(make_cfg(tmp_path, {"dataset": "csv", "csv": {"manifest": str(manifest)}}), 8, seed=0, device="cpu")
    assert bundle.class_names == ["a", "b"] and sum(len(v) for v in bundle.splits.values()) == 12


# ---------------------------------------------------------------- bad inputs


def _folder_cfg(tmp_path, root, **data):
    return make_cfg(
        tmp_path, {"dataset": "imagefolder", "imagefolder": {"root": None if root is None else str(root)}, **data}
    )


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda tmp: None, "data.imagefolder.root is not set"),
        (lambda tmp: tmp / "nope", "does not exist"),
        (lambda tmp: (tmp / "empty").mkdir() or tmp / "empty", "no class folders"),
        (lambda tmp: (image_folder(tmp) / "bird").mkdir() or tmp / "images", "bird has no images"),
    ],
    ids=["unset", "missing", "empty-root", "empty-class"],
)
def test_imagefolder_errors(tmp_path, setup, message):
    with pytest.raises(DataError, match=message):
        build(_folder_cfg(tmp_path, setup(tmp_path)), 16, seed=0, device="cpu")


def test_corrupt_files_are_skipped_under_the_threshold(tmp_path, caplog):
    root = image_folder(tmp_path, per_class=10)
    (root / "cat" / "img000.png").write_bytes(b"not a png")
    with caplog.at_level(logging.WARNING, logger="resomap.data"):
        bundle = build(_folder_cfg(tmp_path, root, max_bad_fraction=0.1), 16, seed=0, device="cpu")
    assert "1 of 20 images could not be read" in caplog.text and "img000.png" in caplog.text
    assert sum(len(v) for v in bundle.splits.values()) == 19 and 0 not in np.concatenate(list(bundle.splits.values()))


def test_a_skipped_image_is_said_once_per_sweep_and_by_its_dry_run(project, capsys, caplog):
    """An unreadable image under data.max_bad_fraction: the dry run lists it; the sweep says it once, ahead of its
    trials (each trial reads the data again: an 8-trial sweep said it 24 times before), and a later run of the sweep
    (its data check passed and recorded) says it again, once."""
    from conftest import run_cli

    root = image_folder(project, per_class=10)
    (root / "cat" / "img000.png").write_bytes(b"not a png")
    args = ["sweep", "--preset", "smoke", "sweep.models=[pixel_logreg]", "sweep.resolutions=[16,24]"]
    args += ["data.dataset=imagefolder", f"data.imagefolder.root={root}", "data.max_bad_fraction=0.1"]
    args += ["mlflow.enabled=false", "profiling.enabled=false", "explainability.enabled=false", "stats.resamples=200"]
    line = "data: 1 of 20 images could not be read ("

    def said(out: str, err: str) -> int:
        logged = sum("could not be read" in r.getMessage() for r in caplog.records)
        caplog.clear()
        return sum("could not be read" in text for text in (out + err).splitlines()) + logged

    code, out, err = run_cli(["sweep", "--dry-run", *args[1:]], capsys)
    assert code == 0 and line in out and "img000.png); every trial skips them" in out, err
    assert said(out, err) == 1 and not (project / "model_summaries").exists()
    for run in range(2):
        with caplog.at_level(logging.WARNING, logger="resomap"):
            code, out, err = run_cli([*args, f"sweep.seeds=[{run}]"], capsys)
        assert code == 0 and line in out, err
        assert said(out, err) == 1, (out, err)


def test_corrupt_files_over_the_threshold_raise(tmp_path):
    root = image_folder(tmp_path, per_class=10)
    for name in ("img000.png", "img001.png", "img002.png"):
        (root / "cat" / name).write_bytes(b"\x89PNG truncated")
    with pytest.raises(DataError, match=r"3 of 20 images could not be read .*max_bad_fraction"):
        build(_folder_cfg(tmp_path, root, max_bad_fraction=0.1), 16, seed=0, device="cpu")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("file,label\na.png,x\n", "missing column"),
        ("path,label\n", "no rows"),
        (None, "does not exist"),
    ],
)
def test_csv_errors(tmp_path, text, message):
    manifest = tmp_path / "m.csv"
    if text is not None:
        manifest.write_text(text)
    with pytest.raises(DataError, match=message):
        build(make_cfg(tmp_path, {"dataset": "csv", "csv": {"manifest": str(manifest)}}), 16, seed=0, device="cpu")


def test_csv_missing_image_files_count_as_unreadable(tmp_path):
    paths = write_images(tmp_path, 10)
    rows = [f"{p.name},{i % 2}" for i, p in enumerate(paths)] + ["gone.png,0", "gone2.png,1"]
    (tmp_path / "m.csv").write_text("path,label\n" + "\n".join(rows))
    with pytest.raises(DataError, match=r"2 of 12 images could not be read \(.*gone\.png"):
        build(
            make_cfg(tmp_path, {"dataset": "csv", "csv": {"manifest": str(tmp_path / "m.csv")}}),
            16,
            seed=0,
            device="cpu",
        )


def test_the_data_check_reads_unchanged_files_once_and_a_changed_file_again(tmp_path, monkeypatch):
    """data.verify.check (the sweep's load-time check): its pass is recorded with the resolution cache, keyed on
    the files' sizes and mtimes; unchanged files are not read again, a changed one is (and refused here)."""
    from resomap.data.folders import FileDataset
    from resomap.data.verify import check

    reads = count_loads(monkeypatch, FileDataset)
    root = image_folder(tmp_path, per_class=10)
    cfg = _folder_cfg(tmp_path, root)
    check(cfg, 0, record=False)
    assert reads["n"] == 20 and not (tmp_path / ".cache").exists()  # record=False (a dry run) writes nothing
    check(cfg, 0)
    assert reads["n"] == 40 and len(list((tmp_path / ".cache").rglob("checked-*.json"))) == 1
    check(cfg, 0)
    assert reads["n"] == 40  # recorded: not read again
    (root / "cat" / "img003.png").write_bytes(b"\x89PNG truncated")  # another size and mtime: another key
    (root / "dog" / "img104.png").write_bytes(b"\x89PNG truncated")
    with pytest.raises(DataError, match=r"2 of 20 images could not be read \(.*img003\.png"):
        check(cfg, 0)
    assert reads["n"] == 60 and len(list((tmp_path / ".cache").rglob("checked-*.json"))) == 1
    check(_folder_cfg(tmp_path, root, max_bad_fraction=0.2), 0)
    assert reads["n"] == 80  # another setting the check reads: read again, and passed


@pytest.mark.gpu
def test_cuda_loader_matches_cpu(tmp_path):
    cfg = make_cfg(tmp_path, training={"batch_size": 8}, system={"pin_memory": "auto"})
    cpu = build(cfg, 32, seed=0, device="cpu")
    gpu = build(cfg, 32, seed=0, device="cuda")
    assert gpu.train.pin_memory and not cpu.train.pin_memory
    xc, yc = _collect(cpu.train, 2)
    xg, yg = _collect(gpu.train, 2)
    assert xg.device.type == "cuda" and torch.equal(yc, yg.cpu())
    assert torch.allclose(xc, xg.cpu(), atol=1e-4)


# ---------------------------------------------------------------- seeds and the user's own splits


def test_trial_seeds_share_the_split_and_images_by_default(tmp_path):
    cfg = make_cfg(tmp_path)
    a, b = build(cfg, 16, seed=1, device="cpu"), build(cfg, 16, seed=2, device="cpu")
    assert a.data_seed == b.data_seed == cfg.experiment.seed
    for split in ("train", "val", "test"):
        assert np.array_equal(a.splits[split], b.splits[split])
        assert torch.equal(a.images(split), b.images(split))
    a.train.set_epoch(0)
    b.train.set_epoch(0)
    (xa, ya), (xb, yb) = next(iter(a.train)), next(iter(b.train))
    assert not torch.equal(ya, yb) or not torch.equal(xa, xb)  # the trial seed still orders and augments


def test_data_seed_trial_varies_the_split_and_an_integer_fixes_it(tmp_path):
    per_trial = make_cfg(tmp_path, {"seed": "trial"})
    one, two = build(per_trial, 16, seed=1, device="cpu"), build(per_trial, 16, seed=2, device="cpu")
    assert one.data_seed == 1 and two.data_seed == 2
    assert not np.array_equal(one.splits["test"], two.splits["test"])
    fixed = make_cfg(tmp_path, {"seed": 7})
    assert build(fixed, 16, seed=1, device="cpu").data_seed == 7


def _split_folder(tmp_path: Path, splits=("train", "val", "test"), per_class=(12, 4, 4)) -> Path:
    root = tmp_path / "split_images"
    for s, (split, n) in enumerate(zip(splits, per_class)):
        for k, name in enumerate(["cat", "dog"]):
            write_images(root / split / name, n, start=1000 * s + 100 * k)
    return root


def test_imagefolder_with_train_val_test_folders_uses_them(tmp_path):
    root = _split_folder(tmp_path)
    bundle = build(make_cfg(tmp_path, {"dataset": "imagefolder", "imagefolder": {"root": str(root)}}), 16, 0, "cpu")
    assert bundle.class_names == ["cat", "dog"]
    assert {s: len(v) for s, v in bundle.splits.items()} == {"train": 24, "val": 8, "test": 8}
    raw = get_dataset("imagefolder")(DataConfig(), options=ImageFolderOptions(root=str(root)))
    for split in ("train", "val", "test"):
        names = {Path(raw.name(int(i))).parts[-3] for i in bundle.splits[split]}
        assert names == {split}


def test_imagefolder_without_a_val_folder_carves_it_from_train(tmp_path):
    root = _split_folder(tmp_path, splits=("train", "test"), per_class=(20, 5))
    cfg = make_cfg(tmp_path, {"dataset": "imagefolder", "imagefolder": {"root": str(root)}})
    bundle = build(cfg, 16, 0, "cpu")
    sizes = {s: len(v) for s, v in bundle.splits.items()}
    assert sizes["test"] == 10 and sizes["train"] + sizes["val"] == 40 and sizes["val"] >= 2


def test_csv_split_column_is_honoured_and_checked(tmp_path):
    paths = write_images(tmp_path / "imgs", 24)
    manifest = tmp_path / "labels.csv"
    rows = [f"imgs/{p.name},{'b' if i % 2 else 'a'},{('train', 'val', 'test')[i % 3]}" for i, p in enumerate(paths)]
    manifest.write_text("path,label,split\n" + "\n".join(rows) + "\n")
    bundle = build(make_cfg(tmp_path, {"dataset": "csv", "csv": {"manifest": str(manifest)}}), 8, 0, "cpu")
    assert {s: len(v) for s, v in bundle.splits.items()} == {"train": 8, "val": 8, "test": 8}
    assert all(i % 3 == 2 for i in bundle.splits["test"])
    manifest.write_text("path,label,split\n" + "\n".join([*rows[:-1], rows[-1].rsplit(",", 1)[0] + ",holdout"]))
    with pytest.raises(DataError, match="split 'holdout' is not train, val or test"):
        build(make_cfg(tmp_path, {"dataset": "csv", "csv": {"manifest": str(manifest)}}), 8, 0, "cpu")


def test_cli_probe_set_larger_than_the_test_set_exits_2_in_one_line(tmp_path, capsys):
    from resomap.cli import main

    args = ["train", "--model", "tiny_cnn", "--resolution", "16", f"experiment.output_dir={tmp_path}"]
    args += ["data.dataset=synthetic", "data.synthetic.num_images=60", "explainability.probe_size=10"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "explainability.probe_size: expected at most the 9 test images" in err
    assert not (tmp_path / "checkpoints").exists()  # stopped before training


def _bad_csv(root: Path) -> list[str]:
    (root / "m.csv").write_text("path,label\ngone.png,a\ngone2.png,b\n")
    return ["data.dataset=csv", "data.csv.manifest=m.csv"]


def _corrupt_folder(root: Path) -> list[str]:
    for k, name in enumerate(("cat", "dog")):
        write_images(root / "images" / name, 4, start=10 * k)
        (root / "images" / name / "img999.png").write_bytes(b"not a png")
    return ["data.dataset=imagefolder", "data.imagefolder.root=images"]


def _too_few_per_class(root: Path) -> list[str]:
    paths = write_images(root / "imgs", 4)
    (root / "m.csv").write_text("path,label\n" + "".join(f"imgs/{p.name},{'ab'[i % 2]}\n" for i, p in enumerate(paths)))
    return ["data.dataset=csv", "data.csv.manifest=m.csv"]


def _probe_set_too_large(root: Path) -> list[str]:
    """12 images hold 2 test images: fewer than the smoke preset's 4 probe images (known only once the data is read)."""
    paths = write_images(root / "imgs", 12)
    (root / "m.csv").write_text("path,label\n" + "".join(f"imgs/{p.name},{'ab'[i % 2]}\n" for i, p in enumerate(paths)))
    return ["data.dataset=csv", "data.csv.manifest=m.csv"]


def _one_class_folder(root: Path) -> list[str]:
    write_images(root / "images" / "cat", 8)
    return ["data.dataset=imagefolder", "data.imagefolder.root=images"]


def _one_label_csv(root: Path) -> list[str]:
    paths = write_images(root / "imgs", 8)
    (root / "m.csv").write_text("path,label\n" + "".join(f"imgs/{p.name},a\n" for p in paths))
    return ["data.dataset=csv", "data.csv.manifest=m.csv"]


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (_one_class_folder, "data.imagefolder.root images holds one class (cat); a classifier needs at least two"),
        (_one_label_csv, "data.csv.manifest m.csv labels one class (a); a classifier needs at least two"),
        (_bad_csv, "2 of 2 images could not be read (gone.png, gone2.png)"),
        (_corrupt_folder, "2 of 10 images could not be read"),
        (_too_few_per_class, "too few images for a stratified train/val/test split"),
        (_probe_set_too_large, "explainability.probe_size: expected at most the 2 test images of csv, got 4"),
    ],
    ids=[
        "one-class-folder",
        "one-label-csv",
        "unreadable-csv",
        "corrupt-imagefolder",
        "too-few-per-class",
        "probe-set",
    ],
)
def test_train_on_bad_data_says_one_line_and_leaves_nothing(project: Path, capsys, setup, message):
    """`resomap train` on data that fails its checks: the one-line error is the only output (no device, precision
    or MLflow line before it), exit 2, and nothing is left behind (no .cache/ of decoded images, no store)."""
    from resomap.cli import main

    extra = setup(project)
    before = sorted(p.relative_to(project) for p in project.rglob("*"))
    args = ["train", "--model", "tiny_cnn", "--resolution", "16", "--preset", "smoke", "system.threads=1", *extra]
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("resomap: error: ") and message in err, (out, err)
    assert sorted(p.relative_to(project) for p in project.rglob("*")) == before


def _missing_in_manifest(root: Path) -> list[str]:
    """A manifest naming a file that does not exist: 1 of 10 images (over data.max_bad_fraction=0.05)."""
    paths = write_images(root / "imgs", 9)
    rows = [f"imgs/{p.name},{'ab'[i % 2]}" for i, p in enumerate(paths)] + ["imgs/gone.png,a"]
    (root / "m.csv").write_text("path,label\n" + "\n".join(rows) + "\n")
    return ["data.dataset=csv", "data.csv.manifest=m.csv"]


def _class_without_images(root: Path) -> list[str]:
    write_images(root / "images" / "cat", 4)
    (root / "images" / "dog").mkdir()
    return ["data.dataset=imagefolder", "data.imagefolder.root=images"]


def _fixed(root: Path) -> None:
    """Each bad input above made whole: the corrupt and missing files written as images, the empty class filled."""
    write_images(root / "images" / "dog", 4, start=10)
    for name in ("cat", "dog"):
        if (root / "images" / name / "img999.png").exists():
            write_images(root / "images" / name, 1, start=999)
    if (root / "imgs").exists():
        Image.fromarray(np.zeros((24, 20), dtype=np.uint8), mode="L").save(root / "imgs" / "gone.png")


SWEEP_BAD_DATA = [
    (_corrupt_folder, "2 of 10 images could not be read (images/cat/img999.png, images/dog/img999.png)"),
    (_missing_in_manifest, "1 of 10 images could not be read (imgs/gone.png)"),
    (_class_without_images, "class folder images/dog has no images"),
]


@pytest.mark.parametrize(("setup", "message"), SWEEP_BAD_DATA, ids=["corrupt", "missing-file", "empty-class"])
def test_sweep_on_bad_data_refuses_at_load_like_train(project: Path, capsys, setup, message):
    """`resomap sweep` and its dry run run train's data checks at load: the one-line error alone, exit 2, nothing
    created (no mlflow.db, summary, sweep folder or cache); once the data is fixed the plain sweep has its trial
    pending (no --rerun-failed needed: the refusal recorded no failed trial)."""
    from resomap.cli import main

    args = ["sweep", "--preset", "smoke", "system.threads=1", "explainability.probe_size=1", *setup(project)]
    before = sorted(p.relative_to(project) for p in project.rglob("*"))
    for dry in (["--dry-run"], []):
        assert main([*args, *dry]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and err.startswith("resomap: error: ") and message in err, err
        assert sorted(p.relative_to(project) for p in project.rglob("*")) == before
    assert not (project / "mlflow.db").exists() and not (project / "model_summaries").exists()
    _fixed(project)
    assert main([*args, "--dry-run"]) == 0
    assert "0 failed, 0 partial, 1 pending" in capsys.readouterr().out


@pytest.mark.parametrize(("setup", "message"), SWEEP_BAD_DATA, ids=["corrupt", "missing-file", "empty-class"])
def test_a_sweep_refuses_bad_data_before_torch_is_imported(project: Path, setup, message):
    """In a fresh interpreter (as a user runs it): the refusal comes before torch is imported (resomap.data.verify,
    from resomap.cli.args), the dry run's and the real run's alike, stderr's one line."""
    import subprocess
    import sys

    code = (
        "import sys; from resomap.cli import main; rc = main(sys.argv[1:]); print('torch' in sys.modules); sys.exit(rc)"
    )
    args = ["sweep", "--preset", "smoke", "explainability.probe_size=1", *setup(project)]
    for dry in (["--dry-run"], []):
        done = subprocess.run(
            [sys.executable, "-c", code, *args, *dry], cwd=project, capture_output=True, text=True, timeout=120
        )
        err = done.stderr.strip().splitlines()
        assert done.returncode == 2 and done.stdout.strip() == "False", (dry, done.stdout, done.stderr)
        assert len(err) == 1 and message in err[0], (dry, err)
    assert not (project / "mlflow.db").exists() and not (project / "model_summaries").exists()


def test_a_sweep_refused_for_bad_data_runs_once_the_data_is_fixed(project: Path, capsys):
    """The plain sweep after the fix trains (nothing of the refused one is in its way); the check's pass is
    recorded beside the resolution cache."""
    from resomap.cli import main

    args = ["sweep", "--preset", "smoke", "system.threads=1", "explainability.probe_size=1", *_corrupt_folder(project)]
    args += ["mlflow.enabled=false", "explainability.enabled=false", "profiling.enabled=false"]
    assert main(args) == 2
    capsys.readouterr()
    _fixed(project)
    assert main(args) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "1 done, 0 failed, 0 remaining" in out and "FAILED" not in out, out
    assert list((project / ".cache").rglob("checked-*.json"))


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (
            ["data.limit=7"],
            "data.split.val: expected a split whose val part holds at least 2 images, one per class (7 ",
        ),
        (["data.split.test=0.01"], "data.split.test: expected a split whose test part holds at least 2 images"),
        (["data.limit=8", "data.split.test=0.45", "data.split.val=0.4"], "train part holds at least 2 images"),
    ],
)
def test_a_split_part_without_every_class_exits_2_in_one_line_before_anything_is_made(
    overrides, words, tmp_path, capsys
):
    """A test set of one image (or any part missing a class) is refused at load, as a stratified split would fail
    it later: nothing written, no MLflow store."""
    from resomap.cli import main

    args = ["sweep", "--preset", "smoke", f"experiment.output_dir={tmp_path}", "explainability.probe_size=1"]
    args += ["data.synthetic.num_images=60", *overrides]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and words in err, err
    assert not list(tmp_path.iterdir())
