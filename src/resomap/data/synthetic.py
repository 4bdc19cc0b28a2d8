"""A synthetic dataset whose class is decided by a detail that only survives above some resolution.

Each grayscale image holds one object (disc or square, random position, radius 0.1-0.2 of the side) with its mask,
on a background textured with random cells of `detail_size` px (each cell +-BACKGROUND_AMPLITUDE, random sign).
Class 1 objects carry a checkerboard of `detail_size` px cells with the same contrast (+-TEXTURE_AMPLITUDE);
class 0 objects are plain. Object and background have the same mean intensity, so only the fine detail (a
regular checkerboard, or no texture) tells the object from the background, and raw-pixel saliency (edges,
intensity) does not single it out (maps of randomly initialised models hit it at about chance). Antialiased
downsampling below ~size / detail_size px averages the cells away: the class becomes unreadable, while the
object remains a smoother patch of the residual background texture.

With `cue` > 0 a coarse cue joins the fine detail: a bright uniform square (CUE_SIDE of the side) in a random
corner, in class-1 images with probability (1 + cue) / 2 and in class-0 images with (1 - cue) / 2. It is visible at
every resolution and predicts the class less well than the detail (at best (1 + cue) / 2), so a model that reads
the detail where it can looks at the object, and where the detail is gone can only look at the corner (the map
decision's known answer: tests/test_where_known.py). `cue_mask(i)` is its square (empty where absent).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from resomap.config.schema import DataConfig
from resomap.data.registry import register_dataset
from resomap.errors import DataError

CLASS_NAMES = ["plain", "textured"]
TEXTURE_AMPLITUDE = 55.0  # +- around the object level; the class signal
BACKGROUND_AMPLITUDE = TEXTURE_AMPLITUDE  # +- per random background cell: the same contrast as the class detail
NOISE_STD = 12.0  # per-pixel Gaussian noise on the whole image (both classes)
COARSE_FACTOR = 4  # a coarse image's cells are this many times detail_size: its class survives 4x smaller images
COARSE_RADIUS = 2.0  # and its object this many times larger (radius 0.2-0.4 of the side), so that it still holds
# several cells at 4x smaller images: with the fine images' radius a coarse object held 1-3 cells and tiny_cnn read
# the coarse images' class at 0.88-0.96 whatever the resolution
CUE_SIDE = 0.2  # the cue square's side as a share of the image side
CUE_LEVEL = 250.0  # its intensity: brighter than any background cell
DETAIL_GROUP = "detail"  # the group the dataset declares when some images are coarse: fine or coarse


@dataclass(frozen=True)
class _Shape:
    cy: float
    cx: float
    radius: float
    square: bool
    level: float  # mean intensity of object and background
    phase_y: int
    phase_x: int


class SyntheticDataset:
    """Images are generated on demand from `(seed, i)`, so `load(i)` and `mask(i)` are cheap and deterministic."""

    channels = 1
    has_masks = True
    class_names = CLASS_NAMES

    def __init__(
        self,
        num_images: int,
        size: int,
        detail_size: int,
        seed: int = 0,
        coarse_share: float = 0.0,
        cue: float = 0.0,
    ):
        if num_images < 2 or size < 8 or detail_size < 1 or not 0.0 <= coarse_share <= 1.0 or not 0.0 <= cue <= 1.0:
            raise DataError(
                "data.synthetic needs num_images >= 2, size >= 8, detail_size >= 1, 0 <= coarse_share <= 1 and "
                f"0 <= cue <= 1; got {num_images}, {size}, {detail_size}, {coarse_share}, {cue}"
            )
        self.size = size
        self.detail_size = detail_size
        self.seed = seed
        labels = np.arange(num_images, dtype=np.int64) % 2  # balanced
        self.labels = np.random.default_rng([seed, 7]).permutation(labels)
        self.fingerprint = f"synthetic-n{num_images}-s{size}-d{detail_size}-seed{seed}-v2"
        # a share of the images (either class) drawn with COARSE_FACTOR x larger cells: a group whose answer
        # survives resolutions at which the fine images' does not (the group test's known answer)
        self.coarse = np.random.default_rng([seed, 11]).random(num_images) < coarse_share
        self.groups: dict[str, tuple[np.ndarray, list[str]]] = {}
        if coarse_share > 0:
            self.fingerprint += f"-coarse{coarse_share:g}-r{COARSE_RADIUS:g}"
            self.groups[DETAIL_GROUP] = (self.coarse.astype(np.int64), ["fine", "coarse"])
        draw = np.random.default_rng([seed, 13]).random(num_images)
        self.has_cue = draw < np.where(self.labels == 1, (1 + cue) / 2, (1 - cue) / 2) if cue > 0 else draw < 0
        self.cue_corner = np.random.default_rng([seed, 17]).integers(0, 4, num_images)
        if cue > 0:
            self.fingerprint += f"-cue{cue:g}"

    def __len__(self) -> int:
        return len(self.labels)

    def _shape(self, i: int) -> _Shape:
        rng = np.random.default_rng([self.seed, i, 1])
        s = self.size
        radius = rng.uniform(0.1, 0.2) * s * (COARSE_RADIUS if self.coarse[i] else 1.0)  # no good centre prior
        cy, cx = rng.uniform(radius + 1, s - radius - 1, size=2)
        phase_y, phase_x = rng.integers(0, 2 * self.detail_size, size=2)
        return _Shape(cy, cx, radius, bool(rng.random() < 0.5), rng.uniform(100, 155), phase_y, phase_x)

    def _mask(self, shape: _Shape) -> np.ndarray:
        yy, xx = np.mgrid[: self.size, : self.size].astype(np.float32) + 0.5
        if shape.square:
            return (np.abs(yy - shape.cy) <= shape.radius) & (np.abs(xx - shape.cx) <= shape.radius)
        return (yy - shape.cy) ** 2 + (xx - shape.cx) ** 2 <= shape.radius**2

    def mask(self, i: int) -> np.ndarray:
        return self._mask(self._shape(i))

    def cue_mask(self, i: int) -> np.ndarray:
        """bool [size, size]: image i's cue square (all False where it has none)."""
        out = np.zeros((self.size, self.size), dtype=bool)
        if self.has_cue[i]:
            side = max(1, round(CUE_SIDE * self.size))
            top, left = divmod(int(self.cue_corner[i]), 2)
            rows = slice(self.size - side, None) if top else slice(0, side)
            cols = slice(self.size - side, None) if left else slice(0, side)
            out[rows, cols] = True
        return out

    def load(self, i: int) -> np.ndarray:
        shape = self._shape(i)
        mask = self._mask(shape)
        d = self.detail_size * (COARSE_FACTOR if self.coarse[i] else 1)
        yy, xx = np.mgrid[: self.size, : self.size]
        cell_y, cell_x = (yy + shape.phase_y) // d, (xx + shape.phase_x) // d
        rng = np.random.default_rng([self.seed, i, 3])
        signs = rng.choice([-1.0, 1.0], size=(int(cell_y.max()) + 1, int(cell_x.max()) + 1))
        img = (shape.level + BACKGROUND_AMPLITUDE * signs[cell_y, cell_x]).astype(np.float32)
        if self.labels[i] == 1:
            obj = shape.level + TEXTURE_AMPLITUDE * (2 * ((cell_y + cell_x) % 2) - 1)
        else:
            obj = np.full_like(img, shape.level)
        img[mask] = obj[mask]
        img[self.cue_mask(i)] = CUE_LEVEL
        img += np.random.default_rng([self.seed, i, 2]).normal(0, NOISE_STD, img.shape)
        return np.clip(np.rint(img), 0, 255).astype(np.uint8)

    def name(self, i: int) -> str:
        return f"synthetic #{i}"


@dataclass(frozen=True)
class SyntheticOptions:
    num_images: int = 600  # images generated
    size: int = 128  # side of the generated images in pixels
    detail_size: int = 3  # side of the class-deciding detail; unreadable below ~size/detail_size px
    # share of images whose detail is 4x coarser on a 2x larger object (the group `detail`: fine / coarse)
    coarse_share: float = 0.0
    # a coarse cue beside the detail: a bright corner square in class 1 with probability (1 + cue) / 2, class 0
    # with (1 - cue) / 2 (visible at every resolution, a weaker predictor than the detail); 0: none
    cue: float = 0.0


@register_dataset(
    "synthetic",
    options=SyntheticOptions,
    channels=1,
    masks=True,
    images=lambda o: o.num_images,
    classes=CLASS_NAMES,
    groups=lambda o: [DETAIL_GROUP] if o.coarse_share > 0 else [],
    symmetries=("hflip", "vflip", "rot90"),  # a checkerboard detail or none: flips and quarter turns keep the class
)
def synthetic(cfg: DataConfig, options: SyntheticOptions, seed: int = 0) -> SyntheticDataset:
    return SyntheticDataset(
        options.num_images,
        options.size,
        options.detail_size,
        seed=seed,
        coarse_share=options.coarse_share,
        cue=options.cue,
    )
