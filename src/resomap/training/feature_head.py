"""What the Trainer does for a head on a frozen backbone's cached features (ModelSpec.fit "feature_head":
resomap.models.pretrained.FrozenHead, and PartialFinetune, whose "features" are the frozen stages' output maps and
whose trained part is the stages above them): the pooled features of every training image under every view of the
dataset's declared symmetries (data.augmentation on; else the image as it is) and of every validation image,
computed once per data, resolution, backbone and numeric path and cached on disk (float16), then the Trainer's own
loop (optimizer, warm-up and schedule, EMA, callbacks, early stopping, resume) over batches of them: each training
image is seen under one view drawn at random per epoch, as augmentation would show it. A later seed, a resumed
fit or another config of the same head reads the cache instead of running the backbone again.

Written here rather than taken from a library: no training library caches a frozen backbone's features per
augmentation view and feeds them to its own loop.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from resomap.atomic import save_atomic
from resomap.data.loader import EpochBatches

if TYPE_CHECKING:
    from resomap.training.host import FitHost

log = logging.getLogger(__name__)

FORMAT = "resomap-features-1"  # the cache files' layout and the pooled features' definition; bump on change
PROBE_BATCHES = 2  # the cost probe's batches of feature extraction (priced per image for all)


class FeatureLoader(EpochBatches):
    """Batches of cached features shaped like a BatchLoader's: (features float32 [B, F], y int64 [B]) and the
    images' loss weights [B] when the loader has them. `features` [V, N, F]: N images under V views; with
    `random_view` each image is taken under one view drawn per epoch, else under the first (the image itself).
    Order and views depend only on (seed, epoch): call `set_epoch(e)` before iterating. `image_order`: the order a
    BatchLoader of the same seed takes (its generator stream 0), so cached maps are trained on in the batches the
    images would be (a partial fine-tune: the same fit as on images); else its own stream, as heads were trained."""

    def __init__(
        self,
        features: torch.Tensor,
        labels: torch.Tensor,
        *,
        batch_size: int,
        device: torch.device,
        shuffle: bool = False,
        drop_last: bool = False,
        seed: int = 0,
        random_view: bool = False,
        weights: torch.Tensor | None = None,
        image_order: bool = False,
    ):
        self.features, self.labels, self.weights, self.image_order = features, labels.long(), weights, image_order
        self.batch_size, self.device = batch_size, torch.device(device)
        self.shuffle, self.drop_last, self.seed, self.random_view = shuffle, drop_last, seed, random_view
        self.epoch, self.rank, self.world_size = 0, 0, 1

    @property
    def num_samples(self) -> int:
        return int(self.features.shape[1])

    def plain(self) -> FeatureLoader:
        """Every image once, in order, under the first view (the image itself), in this process."""
        out = copy.copy(self)
        out.shuffle, out.drop_last, out.random_view, out.rank, out.world_size = False, False, False, 0, 1
        return out

    def __iter__(self):
        gen = self._generator(1)
        n = self.num_samples
        ordered = self._generator(0) if self.image_order else gen  # stream 0: a BatchLoader's order
        order = torch.randperm(n, generator=ordered) if self.shuffle else torch.arange(n)
        views = self.features.shape[0]
        view = torch.randint(views, (n,), generator=gen) if self.random_view and views > 1 else torch.zeros(n).long()
        for rows in self.batched(order):
            x = self.features[view[rows], rows].float().to(self.device)
            y = self.labels[rows].to(self.device)
            if self.weights is not None:
                yield x, y, self.weights[rows].to(self.device)
            else:
                yield x, y


@dataclass
class FeatureData:
    """What the Trainer's loop reads of the data when it trains a head on cached features."""

    train: FeatureLoader
    val: FeatureLoader
    num_classes: int
    resolution: int
    train_labels: np.ndarray
    mean: None = None  # the model adopted the images' normalisation before its features were computed
    std: None = None


def views(cfg: Any, single: bool = False) -> tuple[str, list]:
    """(a name for the views, their transforms: the identity first): the group of the dataset's declared
    symmetries when data.augmentation is on, else (or `single`) the image as it is."""
    from resomap.data.symmetry import declared, group

    names = declared(cfg) if cfg.data.augmentation.enabled and not single else ()
    return ("+".join(names) or "none"), group(names)


def _digest(
    trainer: FitHost, model: nn.Module, data: Any, view_names: str, dtype: torch.dtype, splits: tuple = ("train", "val")
) -> str:
    """What the cached features depend on: the images of the splits (their bytes), their normalisation, the
    backbone and its weights, the input channels, the resolution, the views and the numeric path."""
    h = hashlib.blake2b(digest_size=16)
    parts = [FORMAT, model.backbone_name, model.weights_id, model.in_channels]  # a package's file: checked at load
    parts += [int(data.resolution), view_names, str(dtype), trainer.precision, trainer.channels_last]
    parts.append(trainer.device.type)
    parts += [] if splits == ("train", "val") else list(splits)  # the training caches' keys as they were
    parts += [model.cache_key] if trainer.features == "maps" else []  # a partial fine-tune's maps (pooled: as were)
    h.update(repr(parts).encode())
    for tensor in (model.input_mean, model.input_std):
        h.update(tensor.detach().cpu().numpy().tobytes())
    for loader in (getattr(data, split) for split in splits):
        h.update(loader.images[loader.positions].numpy().tobytes())  # uint8 (uint16: deeper data) [N, C, r, r]
        h.update(loader.labels.numpy().tobytes())
    return h.hexdigest()


def extract(
    trainer: FitHost,
    model: nn.Module,
    loader: Any,
    transforms: list,
    batches: int | None = None,
    dtype: torch.dtype = torch.float16,
) -> torch.Tensor:
    """[V, N, F] in `dtype`: the pooled features of the loader's images (unaugmented, in order) under each view;
    `batches`: only the first so many (the cost probe)."""
    parts: list[list[torch.Tensor]] = [[] for _ in transforms]
    was_training = model.training
    model.eval()
    with torch.no_grad(), trainer.autocast():
        for i, (x, *_) in enumerate(loader.plain()):
            if batches is not None and i >= batches:
                break
            for view, transform in zip(parts, transforms, strict=True):
                feats = model.chunked(model.pooled, trainer.prepare_inputs(transform(x)))
                view.append(feats.to(dtype).cpu())
    model.train(was_training)
    return torch.stack([torch.cat(view) for view in parts])


def _dtype(single: bool) -> torch.dtype:
    return torch.float32 if single else torch.float16


def _cache_path(cfg: Any, key: str) -> Path:
    return Path(cfg.experiment.output_dir) / cfg.experiment.cache_dir / "features" / f"{key}.pt"


def cache_file(trainer: FitHost, model: nn.Module, data: Any, single: bool = False) -> Path:
    """Where the features of this model's backbone on `data` are kept (<output_dir>/<cache_dir>/features/)."""
    cfg = trainer.cfg
    return _cache_path(cfg, _digest(trainer, model, data, views(cfg, single)[0], _dtype(single)))


def _kept(cfg: Any, path: Path, compute: Callable[[], dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The cache file at `path` read back, else `compute()` (with the FORMAT stamp) kept there when
    data.cache.disk; a damaged or older file is computed again, not trusted."""
    if path.is_file():
        try:
            found = torch.load(path, map_location="cpu", weights_only=True)
            if found.get("format") == FORMAT:
                log.info("feature cache hit: %s", path)
                return found
        except Exception as exc:
            log.warning("feature cache %s unreadable (%s): computing the features again", path, exc)
    found = {"format": FORMAT, **compute()}
    if cfg.data.cache.disk:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_atomic(path, lambda tmp: torch.save(found, tmp))
    return found


def cached_features(trainer: FitHost, model: nn.Module, data: Any, single: bool = False) -> dict[str, torch.Tensor]:
    """{"train": [V, N, F], "val": [1, N, F]}: read from the cache, else computed and kept. Every view in float16
    (the head's training data), or with `single` the images as they are in float32 (a closed-form fit's: the
    features it would compute itself, to the bit)."""
    view_names, transforms = views(trainer.cfg, single)
    dtype = _dtype(single)

    def compute() -> dict[str, torch.Tensor]:
        t0 = time.perf_counter()
        found = {
            "train": extract(trainer, model, data.train, transforms, dtype=dtype),
            "val": extract(trainer, model, data.val, transforms[:1], dtype=dtype),
        }
        log.info(
            "features of %d training images x %d view(s) (%s) and %d validation images at %d px: %.1f s",
            found["train"].shape[1], len(transforms), view_names, found["val"].shape[1], int(data.resolution),
            time.perf_counter() - t0,
        )  # fmt: skip
        return found

    return _kept(trainer.cfg, cache_file(trainer, model, data, single), compute)


def feature_data(trainer: FitHost, model: nn.Module, data: Any) -> FeatureData:
    """The model on the trainer's device with the data's normalisation, its feature standardisation set from the
    training features (every view), and the loaders of cached features the Trainer's loop reads."""
    trainer.place(model, data)
    found = cached_features(trainer, model, data)
    train, val = found["train"], found["val"]
    model.adopt_features(train)  # a head's standardisation (lite<N>_head); nothing for cached maps (lite<N>_partial)
    tl, vl = data.train, data.val
    return FeatureData(
        train=FeatureLoader(
            train,
            tl.labels,
            batch_size=tl.batch_size,
            device=trainer.device,
            shuffle=True,
            drop_last=tl.drop_last,
            seed=tl.seed,
            random_view=True,
            weights=tl.weights,
            image_order=trainer.features == "maps",  # cached maps in the images' batches (lite<N>_partial)
        ),
        val=FeatureLoader(val, vl.labels, batch_size=vl.batch_size, device=trainer.device),
        num_classes=int(data.num_classes),
        resolution=int(data.resolution),
        train_labels=data.train_labels,
    )


def test_loader(trainer: FitHost, model: nn.Module, data: Any) -> Any:
    """What a test evaluation of `model` on `data` reads: for a model with a frozen part (the spec's features
    "pooled" or "maps": lite<N>_linear, lite<N>_head, lite<N>_partial) a loader of what that part gives for the test
    images at this resolution, in float32 and in the test loader's order, computed once and cached (every seed's
    trial and every other resolution's cross-resolution test of the same backbone read them: the backbone's passes
    over the test images were most of such a trial's evaluation); else `data.test` itself. The features are the ones
    the model's forward computes on those batches, so the predictions are the same."""
    from resomap.models import unwrap

    plain = unwrap(model)
    if trainer.features == "none":
        return data.test
    loader = data.test
    view_names, transforms = views(trainer.cfg, single=True)
    path = _cache_path(trainer.cfg, _digest(trainer, plain, data, view_names, torch.float32, splits=("test",)))
    features = _kept(
        trainer.cfg, path, lambda: {"test": extract(trainer, plain, loader, transforms, dtype=torch.float32)}
    )["test"]
    return FeatureLoader(features, loader.labels, batch_size=loader.batch_size, device=trainer.device)


def closed_form_arrays(trainer: FitHost, model: nn.Module, data: Any) -> tuple[np.ndarray, np.ndarray, FeatureLoader]:
    """A closed-form fit of a frozen backbone (lite<N>_linear) from the cache: its training features [N, F] and
    labels [N] (BatchLoader.plain()'s order) and a loader of its validation features (each penalty is scored on
    them instead of running the backbone again); a later seed reads them all from the cache."""
    found = cached_features(trainer, model, data, single=True)
    val = FeatureLoader(found["val"], data.val.labels, batch_size=data.val.batch_size, device=trainer.device)
    return found["train"][0].numpy(), data.train.labels.numpy(), val


def probe_seconds(trainer: FitHost, model: nn.Module, data: Any, steps: int = 2) -> tuple[float, float, int]:
    """The cost probe of such a fit (Trainer.probe_seconds): the feature pass timed on PROBE_BATCHES batches under
    every view and priced per image for both splits (nothing when the cache holds them), plus the head's epochs
    from `steps` timed steps on features of that size."""
    _, transforms = views(trainer.cfg)
    trainer.place(model, data)  # as the fit computes its features
    cached = cache_file(trainer, model, data).is_file()
    images = len(transforms) * data.train.num_samples + data.val.num_samples
    per_image = 0.0
    if not cached:
        t0 = time.perf_counter()
        rows = extract(trainer, model, data.train, transforms, PROBE_BATCHES).shape[1]
        per_image = (time.perf_counter() - t0) / max(rows * len(transforms), 1)
    side, was_training = int(data.resolution), model.training
    model.eval()  # batch-norm statistics untouched by the dry image
    with torch.no_grad():  # what one image's cached features hold at this resolution
        size = model.pooled(torch.zeros(1, model.in_channels, side, side, device=trainer.device)).shape[1]
    model.train(was_training)
    fake = torch.randn(data.train.batch_size, size)
    labels = torch.zeros(data.train.batch_size, dtype=torch.long)
    loader = FeatureLoader(fake[None], labels, batch_size=data.train.batch_size, device=trainer.device)
    head = FeatureData(loader, loader, int(data.num_classes), int(data.resolution), data.train_labels)
    trainer.setup(model, head)
    model.train()
    x, y = next(iter(loader))
    times = []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        trainer.train_step(x, y, [], 1, update=True)
        if i:
            times.append((time.perf_counter() - t0) / y.shape[0])
    step = float(np.median(times))
    epochs = trainer.cfg.training.epochs
    training = step * (data.train.num_samples + data.val.num_samples / 3) * epochs
    return per_image * images + training, step, epochs
