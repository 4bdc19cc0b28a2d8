"""A synthetic dataset whose class is decided by a detail that only survives above some resolution.

Each grayscale image holds one bright object (disc or square, random position and size) over a noisy background,
with its ground-truth mask. Class 1 objects carry a checkerboard texture of `detail_size` px cells; class 0
objects have the same mean intensity and no texture. Antialiased downsampling below ~size / detail_size px
averages the checkerboard away, so the class becomes unreadable while the object (and its mask) stays visible.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from resomap.config.schema import DataConfig
from resomap.data.registry import register_dataset
from resomap.errors import DataError

CLASS_NAMES = ["plain", "textured"]
TEXTURE_AMPLITUDE = 55.0  # +- around the object level; the class signal
NOISE_STD = 12.0  # per-pixel Gaussian noise on the whole image (both classes)


@dataclass(frozen=True)
class _Shape:
    cy: float
    cx: float
    radius: float
    square: bool
    background: float
    level: float
    phase_y: int
    phase_x: int


class SyntheticDataset:
    """Images are generated on demand from `(seed, i)`, so `load(i)` and `mask(i)` are cheap and deterministic."""

    channels = 1
    has_masks = True
    class_names = CLASS_NAMES

    def __init__(self, num_images: int, size: int, detail_size: int, seed: int = 0):
        if num_images < 2 or size < 8 or detail_size < 1:
            raise DataError(
                "data.synthetic needs num_images >= 2, size >= 8 and detail_size >= 1; "
                f"got {num_images}, {size}, {detail_size}"
            )
        self.size = size
        self.detail_size = detail_size
        self.seed = seed
        labels = np.arange(num_images, dtype=np.int64) % 2  # balanced
        self.labels = np.random.default_rng([seed, 7]).permutation(labels)
        self.fingerprint = f"synthetic-n{num_images}-s{size}-d{detail_size}-seed{seed}-v1"

    def __len__(self) -> int:
        return len(self.labels)

    def _shape(self, i: int) -> _Shape:
        rng = np.random.default_rng([self.seed, i, 1])
        s = self.size
        radius = rng.uniform(0.15, 0.3) * s
        cy, cx = rng.uniform(radius + 1, s - radius - 1, size=2)
        phase_y, phase_x = rng.integers(0, 2 * self.detail_size, size=2)
        return _Shape(
            cy, cx, radius, bool(rng.random() < 0.5), rng.uniform(30, 80), rng.uniform(140, 190), phase_y, phase_x
        )

    def _mask(self, shape: _Shape) -> np.ndarray:
        yy, xx = np.mgrid[: self.size, : self.size].astype(np.float32) + 0.5
        if shape.square:
            return (np.abs(yy - shape.cy) <= shape.radius) & (np.abs(xx - shape.cx) <= shape.radius)
        return (yy - shape.cy) ** 2 + (xx - shape.cx) ** 2 <= shape.radius**2

    def mask(self, i: int) -> np.ndarray:
        return self._mask(self._shape(i))

    def load(self, i: int) -> np.ndarray:
        shape = self._shape(i)
        mask = self._mask(shape)
        img = np.full((self.size, self.size), shape.background, dtype=np.float32)
        if self.labels[i] == 1:
            yy, xx = np.mgrid[: self.size, : self.size]
            d = self.detail_size
            checker = ((yy + shape.phase_y) // d + (xx + shape.phase_x) // d) % 2
            obj = shape.level + TEXTURE_AMPLITUDE * (2 * checker - 1)
        else:
            obj = np.full_like(img, shape.level)
        img[mask] = obj[mask]
        img += np.random.default_rng([self.seed, i, 2]).normal(0, NOISE_STD, img.shape)
        return np.clip(np.rint(img), 0, 255).astype(np.uint8)

    def name(self, i: int) -> str:
        return f"synthetic #{i}"


@dataclass(frozen=True)
class SyntheticOptions:
    num_images: int = 600  # images generated
    size: int = 128  # side of the generated images in pixels
    detail_size: int = 3  # side of the class-deciding detail; unreadable below ~size/detail_size px


@register_dataset("synthetic", options=SyntheticOptions, channels=1, masks=True)
def synthetic(cfg: DataConfig, options: SyntheticOptions, seed: int = 0) -> SyntheticDataset:
    return SyntheticDataset(options.num_images, options.size, options.detail_size, seed=seed)
