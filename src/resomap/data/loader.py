"""In-memory batch loaders over the resolution cache (no per-sample Python transforms): uint8 images, or uint16 on
0..65535 for data deeper than 8 bits, widened to int32 on the host (`widened`: torch's uint16 has few operations on
any device) and divided by the data's white (`Normalizer.white`) into [0, 1]."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import DataLoader

from resomap.data.augment import BatchAugment

WHITE = {torch.uint8: 255.0, torch.uint16: 65535.0}  # the cached value of white, by the cache's type


def widened(images: torch.Tensor) -> torch.Tensor:
    """Cached images as the loaders hand them on: uint8 as they are, uint16 as int32 (same values)."""
    return images.to(torch.int32) if images.dtype == torch.uint16 else images


def as_uint8(images: torch.Tensor) -> torch.Tensor:
    """Images for figures (the probe overlays): uint8 as they are, 16-bit values (uint16, or int32 from `widened`)
    scaled to 0..255."""
    if images.dtype == torch.uint8:
        return images
    return (images.to(torch.float32) * (255.0 / 65535.0)).round().clamp(0, 255).to(torch.uint8)


class Normalizer:
    """Cached images [B, C, r, r] -> float32 normalised with per-channel mean/std (in 0..1 units, from the train
    split); `white`: the cached value read as 1 (255 for uint8, 65535 for 16-bit data)."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, white: float = 255.0):
        self.mean = mean.float().view(1, -1, 1, 1)
        self.std = std.float().clamp(min=1e-6).view(1, -1, 1, 1)
        self.white = float(white)

    @classmethod
    def from_images(cls, images: torch.Tensor, positions: torch.Tensor, chunk: int = 1024) -> Normalizer:
        """Per-channel mean/std over `images[positions]` on the 0..1 scale of their type, read in chunks (the cache
        may be memory-mapped)."""
        c, white = images.shape[1], WHITE[images.dtype]
        total = torch.zeros(c, dtype=torch.float64)
        total_sq = torch.zeros(c, dtype=torch.float64)
        for start in range(0, len(positions), chunk):
            x = images[positions[start : start + chunk]].to(torch.float64) / white
            total += x.sum(dim=(0, 2, 3))
            total_sq += (x * x).sum(dim=(0, 2, 3))
        count = max(1, len(positions) * images.shape[2] * images.shape[3])
        mean = total / count
        std = (total_sq / count - mean**2).clamp(min=0).sqrt()
        return cls(mean, std, white)

    def unit(self, x: torch.Tensor) -> torch.Tensor:
        """Cached values (any device) -> float [0, 1]."""
        return x.float() / self.white

    def scaled(self, x: torch.Tensor) -> torch.Tensor:
        """float [0, 1] -> normalised."""
        return (x - self.mean.to(x.device)) / self.std.to(x.device)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.scaled(self.unit(x))


class _Batches(torch.utils.data.Dataset):
    """Map-style dataset whose item is a whole batch: one bulk index of the uint8 tensor per list of positions."""

    def __init__(
        self, images: torch.Tensor, labels: torch.Tensor, positions: torch.Tensor, weights: torch.Tensor | None
    ):
        self.images, self.labels, self.positions, self.weights = images, labels, positions, weights

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, rows: list[int]) -> tuple[torch.Tensor, ...]:
        index = torch.as_tensor(rows, dtype=torch.long)
        x, y = widened(self.images[self.positions[index]]), self.labels[index]
        return (x, y) if self.weights is None else (x, y, self.weights[index])


class _EpochSampler:
    """Yields the loader's index batches for its current epoch (iterated in the main process each epoch)."""

    def __init__(self, loader: BatchLoader):
        self.loader = loader

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.loader.batch_positions():
            yield batch.tolist()

    def __len__(self) -> int:
        return len(self.loader)


class EpochBatches:
    """An epoch's batches of a split's rows in a seeded order, each rank of a distributed fit taking its share: what
    BatchLoader and the Trainer's loader of cached features (resomap.training.feature_head) share. Subclasses set
    batch_size, drop_last, seed, epoch, rank and world_size, and give num_samples."""

    batch_size: int
    drop_last: bool
    seed: int
    epoch: int
    rank: int
    world_size: int

    @property
    def num_samples(self) -> int:
        raise NotImplementedError

    def _all_batches(self) -> int:
        n, b = self.num_samples, self.batch_size
        return n // b if self.drop_last else -(-n // b)

    def __len__(self) -> int:
        """Batches this rank iterates per epoch (all of them in a single process)."""
        return -(-self._all_batches() // self.world_size)

    def shard(self, rank: int, world_size: int) -> EpochBatches:
        """Iterate only this rank's batches: every rank draws the same seeded order and takes batches
        rank::world_size; the list is padded by wrapping around so every rank gets the same count."""
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"bad shard: rank {rank} of world size {world_size}")
        self.rank, self.world_size = rank, world_size
        return self

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def _generator(self, stream: int) -> torch.Generator:
        return torch.Generator().manual_seed((self.seed * 1_000_003 + self.epoch * 7919 + stream) % 2**63)

    def batched(self, order: torch.Tensor) -> list[torch.Tensor]:
        """`order` (the epoch's rows) cut into this rank's batches."""
        b = self.batch_size
        batches = [order[i : i + b] for i in range(0, self._all_batches() * b, b)]
        if self.world_size == 1 or not batches:
            return batches
        padded = [batches[i % len(batches)] for i in range(len(self) * self.world_size)]
        return padded[self.rank :: self.world_size]


class BatchLoader(EpochBatches):
    """Batches of one split: `(x float32 [B, C, r, r] normalised, y int64 [B])` on the device, and a third item,
    the images' loss weights float32 [B], when the loader has `weights` (training.sample_weights).

    `images` is the whole cache tensor (CPU, possibly memory-mapped) and `positions` the split's rows in it.
    Shuffling and augmentation depend only on (seed, epoch): call `set_epoch(e)` before iterating.
    """

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        positions: torch.Tensor,
        *,
        batch_size: int,
        device: torch.device,
        normalizer: Normalizer,
        shuffle: bool = False,
        drop_last: bool = False,
        seed: int = 0,
        augment: BatchAugment | None = None,
        num_workers: int = 0,
        persistent_workers: bool = False,
        pin_memory: bool = False,
        weights: torch.Tensor | None = None,
    ):
        self.images, self.positions = images, positions.long()
        self.weights = None if weights is None else weights.float()  # aligned with positions
        # aligned with positions: int64 [N] class labels, or uint8 [N, R, R] class-index masks (segmentation)
        self.labels = labels if labels.dim() > 1 else labels.long()
        self.batch_size, self.device = batch_size, torch.device(device)
        self.normalizer, self.augment = normalizer, augment
        self.shuffle, self.drop_last, self.seed = shuffle, drop_last, seed
        self.num_workers, self.persistent_workers = num_workers, persistent_workers
        self.pin_memory = pin_memory
        self.epoch = 0
        self.rank, self.world_size = 0, 1
        self._workers: DataLoader | None = None

    @property
    def num_samples(self) -> int:
        return len(self.positions)

    def shard(self, rank: int, world_size: int) -> BatchLoader:
        super().shard(rank, world_size)
        self._workers = None
        return self

    def plain(self) -> BatchLoader:
        """The same images, every one, in order, unaugmented, in this process (a closed-form fit's training set)."""
        import copy

        out = copy.copy(self)
        out.augment, out.shuffle, out.drop_last = None, False, False
        out.num_workers, out.persistent_workers, out._workers = 0, False, None
        out.rank, out.world_size = 0, 1
        return out

    def batch_positions(self) -> list[torch.Tensor]:
        """Row indices (into the split) of each batch of the current epoch."""
        n = self.num_samples
        return self.batched(torch.randperm(n, generator=self._generator(0)) if self.shuffle else torch.arange(n))

    def _host_batches(self) -> Iterator[tuple[torch.Tensor, ...]]:
        if self.num_workers > 0:
            if self._workers is None or not self.persistent_workers:
                self._workers = DataLoader(
                    _Batches(self.images, self.labels, self.positions, self.weights),
                    batch_size=None,
                    sampler=_EpochSampler(self),
                    num_workers=self.num_workers,
                    persistent_workers=self.persistent_workers,
                    pin_memory=self.pin_memory,
                )
            yield from self._workers
            return
        for rows in self.batch_positions():
            batch = (widened(self.images[self.positions[rows]]), self.labels[rows])
            if self.weights is not None:
                batch = (*batch, self.weights[rows])
            yield tuple(t.pin_memory() for t in batch) if self.pin_memory else batch

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        gen = self._generator(1 + self.rank)  # each rank augments its batches differently
        non_blocking = self.pin_memory and self.device.type == "cuda"
        for batch in self._host_batches():
            x, y = (t.to(self.device, non_blocking=non_blocking) for t in batch[:2])
            extra = tuple(t.to(self.device, non_blocking=non_blocking) for t in batch[2:])  # the loss weights
            if y.dim() > 1:  # segmentation masks: moved with the image, int64 for the losses
                y = y.long()
                if self.augment is not None:
                    x, y = self.augment.pair(self.normalizer.unit(x), y, gen)
                    yield self.normalizer.scaled(x), y, *extra
                    continue
            if self.augment is None:
                yield self.normalizer(x), y, *extra
            else:
                yield self.normalizer.scaled(self.augment(self.normalizer.unit(x), gen)), y, *extra
