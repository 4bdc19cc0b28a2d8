"""`build(cfg, resolution, seed, device) -> DataBundle`: dataset -> subset -> cached resize -> split -> loaders."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from resomap.config.schema import Config, SystemConfig
from resomap.data.augment import BatchAugment
from resomap.data.cache import CacheEntry, get_resized, has_dense_targets
from resomap.data.loader import BatchLoader, Normalizer, widened
from resomap.data.registry import open_dataset
from resomap.data.split import SPLITS
from resomap.data.verify import data_seed, splitter, subset_of
from resomap.errors import DataError

log = logging.getLogger(__name__)


@dataclass
class DataBundle:
    """Everything a trial needs from the data at one resolution. `splits` index the raw dataset."""

    train: BatchLoader
    val: BatchLoader
    test: BatchLoader
    class_names: list[str]
    channels: int
    resolution: int
    train_labels: np.ndarray  # int64
    splits: dict[str, np.ndarray]
    normalizer: Normalizer
    dataset: str
    variant: str | None  # the dataset's options in words (task=defect)
    data_seed: int  # seed of the split, generated images and probe set (see data_seed)
    cache_location: str
    _entry: CacheEntry = field(repr=False)
    _positions: dict[str, np.ndarray] = field(repr=False)  # rows of the cache tensor per split
    _labels: dict[str, np.ndarray] = field(repr=False)
    task: str = "classification"
    reference_resolution: int | None = None  # segmentation: side of the val/test masks the metrics use
    train_pixel_counts: np.ndarray | None = None  # segmentation: pixels per class in the training masks
    _targets: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)  # uint8 masks per split
    # the groups the dataset declares (ELPV: cell_type, defect_probability): name -> (a code per raw-dataset image,
    # the codes' names); the trial records its test images' codes (sweep.trial_records.data_record)
    groups: dict[str, tuple[np.ndarray, list[str]]] = field(default_factory=dict)
    # the image files' bit depth and how they are read, in words (resomap.data.images); None for other datasets
    depth: str | None = None

    def targets(self, split: str) -> torch.Tensor | None:
        """Segmentation: uint8 class-index masks [N, R, R] (train at the trial's resolution, val/test at the
        reference resolution); None for classification."""
        self._rows(split)
        return self._targets.get(split)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def mean(self) -> torch.Tensor:
        return self.normalizer.mean.flatten()

    @property
    def std(self) -> torch.Tensor:
        return self.normalizer.std.flatten()

    def _rows(self, split: str) -> torch.Tensor:
        if split not in self._positions:
            raise DataError(f"no split '{split}'; use one of {', '.join(SPLITS)}")
        return torch.from_numpy(self._positions[split])

    def images(self, split: str) -> torch.Tensor:
        """uint8 [N, C, r, r] on the CPU (a copy); int32 of 16-bit values (0..65535) for data deeper than 8 bits."""
        return widened(self._entry.images[self._rows(split)])

    def masks(self, split: str) -> torch.Tensor | None:
        """bool [N, r, r], or None when the dataset has no masks."""
        return None if self._entry.masks is None else self._entry.masks[self._rows(split)]

    def labels(self, split: str) -> torch.Tensor:
        self._rows(split)
        return torch.from_numpy(self._labels[split])

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """A batch of `images` (any device) -> float32 normalised exactly like the loaders' batches."""
        return self.normalizer(x)

    def describe(self) -> str:
        sizes = ", ".join(f"{s} {len(self.splits[s])}" for s in SPLITS)
        task = f" ({self.variant})" if self.variant else ""
        depth = f", {self.depth}" if self.depth and not self.depth.startswith("8-bit") else ""
        return (
            f"{self.dataset}{task} at {self.resolution} px, {self.channels} channel(s){depth}: {sizes}; "
            f"{self.num_classes} classes ({', '.join(self.class_names)}); cache: {self.cache_location}"
        )


def _variant(dc: Any) -> str | None:
    """The dataset's options in a few words (`task=defect`), shown with the data description."""
    from resomap.config.groups import group_options

    options = group_options(dc, dc.dataset)
    if options is None:
        return None
    return ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(options).items()) or None


def _pin(system: SystemConfig, device: torch.device) -> bool:
    if system.pin_memory == "off":
        return False
    if system.pin_memory == "on":
        return torch.cuda.is_available()
    return device.type == "cuda"


def _loaders(
    cfg: Config,
    images: torch.Tensor,
    positions: dict[str, np.ndarray],
    labels: dict[str, np.ndarray],
    normalizer: Normalizer,
    resolution: int,
    seed: int,
    device: torch.device,
    train_weights: np.ndarray | None = None,
) -> dict[str, BatchLoader]:
    sy, aug = cfg.system, cfg.data.augmentation
    loaders = {}
    for split in SPLITS:
        train = split == "train"
        weights = torch.from_numpy(train_weights) if train and train_weights is not None else None
        batch_size = cfg.training.batch_size if train else cfg.training.eval_batch_size
        n = len(positions[split])
        loaders[split] = BatchLoader(
            images,
            labels[split] if isinstance(labels[split], torch.Tensor) else torch.from_numpy(labels[split]),
            torch.from_numpy(positions[split]),
            batch_size=batch_size,
            device=device,
            normalizer=normalizer,
            shuffle=train,
            drop_last=train and n > 1 and n % batch_size == 1,  # never a lone sample (BatchNorm fails on it)
            seed=seed,
            augment=BatchAugment(aug, resolution) if train and aug.enabled else None,
            num_workers=sy.num_workers,
            persistent_workers=sy.persistent_workers and sy.num_workers > 0,
            pin_memory=_pin(sy, device),
            weights=weights,
        )
    return loaders


def _train_weights(cfg: Config, raw: Any, subset: np.ndarray, train: np.ndarray) -> np.ndarray | None:
    """Per training image loss weights (training.sample_weights=confidence: the dataset's label confidence), or
    None. The class balance is the criterion's (training.class_weights); the two multiply."""
    if cfg.training.sample_weights == "none":
        return None
    confidence = getattr(raw, "confidence", None)
    if confidence is None:
        raise DataError(
            f"training.sample_weights is 'confidence' but dataset '{cfg.data.dataset}' gives none; use none"
        )
    return np.asarray(confidence, dtype=np.float32)[subset][train]


def train_normalizer(entry: CacheEntry, train: np.ndarray) -> Normalizer:
    """The per-channel normaliser of the training images at `train` (positions into `entry`), computed once per
    cache entry and split (kept on the entry: the sweep's trials and the summary's checkpoints read one entry)."""
    key = hashlib.blake2b(np.ascontiguousarray(train, dtype=np.int64).tobytes(), digest_size=16).digest()
    found = entry.normalizers.get(key)
    if found is None:
        found = entry.normalizers[key] = Normalizer.from_images(entry.images, torch.from_numpy(train))
    return found


def declared_groups(raw: Any) -> dict[str, tuple[np.ndarray, list[str]]]:
    """The groups a raw dataset declares (its `groups`: name -> (a code per image, the codes' names)), {} if none."""
    found = getattr(raw, "groups", None) or {}
    return {name: (np.asarray(codes, dtype=np.int64), list(names)) for name, (codes, names) in found.items()}


def build(
    cfg: Config,
    resolution: int,
    seed: int,
    device: torch.device | str = "cpu",
    check: Callable[[dict[str, np.ndarray]], object] | None = None,
) -> DataBundle:
    """Load (or reuse) the dataset at `resolution`. `seed` (the trial's) drives shuffling and augmentation; the
    split and generated images follow `data_seed(cfg, seed)`. The data's checks (unreadable images, the split) and
    the caller's `check` of the split (positions per split; e.g. enough test images for the probe set) pass before
    the resolution cache keeps newly decoded images: a data error leaves no cache behind."""
    if resolution < 1:
        raise DataError(f"resolution must be a positive number of pixels, got {resolution}")
    dc, device, dseed = cfg.data, torch.device(device), data_seed(cfg, seed)
    raw = open_dataset(dc, seed=dseed)
    labels, class_names, subset = subset_of(raw, dc)
    cache_root = Path(cfg.experiment.output_dir) / cfg.experiment.cache_dir
    split = splitter(raw, subset, labels, class_names, dc, dseed, check)
    checked: list[dict[str, np.ndarray]] = []  # the split made while checking fresh images (not made twice)

    def keep(fresh: CacheEntry) -> None:
        checked.append(split(fresh.bad, fresh.reasons))

    entry = get_resized(raw, subset, resolution, dc.cache, cache_root, check=keep)
    positions = checked[0] if checked else split(entry.bad, entry.reasons)
    split_labels = {s: labels[subset][p] for s, p in positions.items()}
    normalizer = train_normalizer(entry, positions["train"])
    seg: dict[str, Any] = {}
    if has_dense_targets(raw):  # a class per pixel: the loaders yield masks (train side r, val/test reference side)
        from resomap.data.masks import segmentation_targets

        seg = segmentation_targets(cfg, raw, subset, entry, positions, resolution, cache_root)
        positions = seg.pop("positions")
        split_labels = {s: labels[subset][p] for s, p in positions.items()}
    loader_labels = {s: seg["targets"][s] for s in SPLITS} if seg else split_labels
    weights = _train_weights(cfg, raw, subset, positions["train"])
    loaders = _loaders(cfg, entry.images, positions, loader_labels, normalizer, resolution, seed, device, weights)
    bundle = DataBundle(
        **{split: loaders[split] for split in ("train", "val", "test")},
        class_names=class_names,
        channels=raw.channels,
        resolution=resolution,
        train_labels=split_labels["train"].copy(),
        splits={s: subset[p] for s, p in positions.items()},
        normalizer=normalizer,
        dataset=dc.dataset,
        variant=_variant(dc),
        data_seed=dseed,
        cache_location=entry.location,
        _entry=entry,
        _positions=positions,
        _labels=split_labels,
        groups=declared_groups(raw),
        depth=getattr(getattr(raw, "depth", None), "words", None),
    )
    if seg:  # a class per pixel: the masks and what their metrics need
        bundle.task, bundle.reference_resolution = seg["task"], seg["reference_resolution"]
        bundle.train_pixel_counts, bundle._targets = seg["train_pixel_counts"], seg["targets"]
    log.info("data: %s", bundle.describe())
    return bundle
