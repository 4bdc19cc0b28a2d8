"""Segmentation datasets (experiment.task=segmentation): images with class-index masks.

- `synthetic_seg`: generated grayscale scenes with a large blob (class 1) and thin lines (class 2, `line_width` px
  at the native `size`) on a noisy textured background (class 0). The lines are the thin structures the issue asks
  for: below about size / (2 * line_width) px they shrink under one pixel and blur into the background, so a
  model trained there cannot place them at the reference resolution (mIoU and boundary F1 drop).
- `segfolder`: `root/images/<name>.<ext>` with `root/masks/<name>.png` (masks matched by file stem).
- `segcsv`: a manifest with `image,mask[,split]` rows (paths relative to the file).

Masks are class-index PNGs (mode L or P: the pixel value is the class; `classes` names them in order). Every
image needs a mask of its own size: an image without a mask, or a mask whose size differs from its image, is a
DataError when the dataset is opened (file headers only, nothing decoded). A mask holding a class index outside
`classes` is found when the masks are decoded for the resolution cache; that pair is skipped, and counted and named
(the mask file and its class index) beside the unreadable files, up to data.max_bad_fraction. No package in this
environment ships a small real segmentation data set with masks (scikit-image's sample images have no label masks
and its larger data need a download), so the real-data route is these two readers.

Image-level `labels` are all 0 (one stratum for the split); `mask(i)` is the foreground (class > 0) that the
explanation localisation scores use; `seg_mask(i)` the class-index mask.
"""

from __future__ import annotations

import csv
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from resomap.config.schema import DataConfig
from resomap.data.folders import IMAGE_SUFFIXES, _stat_parts
from resomap.data.images import BitDepth, check_setting, depth_of, header, read_pixels
from resomap.data.registry import digest, register_dataset
from resomap.errors import DataError

log = logging.getLogger(__name__)

SEGMENTATION = "segmentation"
SYNTHETIC_CLASSES = ["background", "blob", "line"]


class SegSyntheticDataset:
    """Generated on demand from (seed, i): `load(i)` and `seg_mask(i)` are deterministic and cheap."""

    channels = 1
    has_masks = True
    task = SEGMENTATION
    class_names = SYNTHETIC_CLASSES

    def __init__(self, num_images: int, size: int, line_width: int, max_lines: int, seed: int = 0):
        if num_images < 6 or size < 16 or line_width < 1 or max_lines < 1:
            raise DataError(
                "data.synthetic_seg needs num_images >= 6, size >= 16, line_width >= 1 and max_lines >= 1; "
                f"got {num_images}, {size}, {line_width}, {max_lines}"
            )
        self.size, self.line_width, self.max_lines, self.seed = size, line_width, max_lines, seed
        self.native_size = size
        self.labels = np.zeros(num_images, dtype=np.int64)
        self.fingerprint = f"synthetic_seg-n{num_images}-s{size}-w{line_width}-l{max_lines}-seed{seed}-v1"

    def __len__(self) -> int:
        return len(self.labels)

    def seg_mask(self, i: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, i, 11])
        s = self.size
        yy, xx = np.mgrid[:s, :s].astype(np.float32) + 0.5
        out = np.zeros((s, s), dtype=np.uint8)
        radius = rng.uniform(0.12, 0.22) * s
        cy, cx = rng.uniform(radius, s - radius, size=2)
        if rng.random() < 0.5:
            blob = (yy - cy) ** 2 + (xx - cx) ** 2 <= radius**2
        else:
            blob = (np.abs(yy - cy) <= radius) & (np.abs(xx - cx) <= radius * rng.uniform(0.6, 1.0))
        out[blob] = 1
        for _ in range(int(rng.integers(1, self.max_lines + 1))):  # thin lines drawn over the blob
            y0, x0, y1, x1 = rng.uniform(0.05 * s, 0.95 * s, size=4)
            d = np.hypot(y1 - y0, x1 - x0) + 1e-6
            t = np.clip(((yy - y0) * (y1 - y0) + (xx - x0) * (x1 - x0)) / d**2, 0, 1)
            dist = np.hypot(yy - (y0 + t * (y1 - y0)), xx - (x0 + t * (x1 - x0)))
            out[dist <= self.line_width / 2] = 2
        return out

    def mask(self, i: int) -> np.ndarray:
        return self.seg_mask(i) > 0

    def load(self, i: int) -> np.ndarray:
        seg = self.seg_mask(i)
        rng = np.random.default_rng([self.seed, i, 12])
        level = rng.uniform(110, 140)
        img = np.full(seg.shape, level, dtype=np.float32)
        img[seg == 1] += 55.0
        img[seg == 2] -= 70.0
        img += rng.normal(0, 18.0, img.shape)
        return np.clip(np.rint(img), 0, 255).astype(np.uint8)

    def name(self, i: int) -> str:
        return f"synthetic_seg #{i}"


@dataclass(frozen=True)
class SegSyntheticOptions:
    num_images: int = 300  # images generated
    size: int = 128  # native side in pixels (also the default reference side of the metrics)
    line_width: int = 2  # width of the thin structures (class 'line') in native pixels
    max_lines: int = 3  # lines per image: 1 to this many


@register_dataset(
    "synthetic_seg",
    options=SegSyntheticOptions,
    channels=1,
    masks=True,
    task=SEGMENTATION,
    images=lambda o: o.num_images,
)
def synthetic_seg(cfg: DataConfig, options: SegSyntheticOptions, seed: int = 0) -> SegSyntheticDataset:
    return SegSyntheticDataset(options.num_images, options.size, options.line_width, options.max_lines, seed)


# ---------------------------------------------------------------- user files


def _size(path: Path) -> tuple[int, int] | None:
    from PIL import Image

    try:
        with Image.open(path) as im:
            return im.size
    except (OSError, ValueError, Image.DecompressionBombError):
        return None  # unreadable: skipped with a count when the cache is built


class SegFileDataset:
    """Image/mask file pairs; checked on open (a mask for every image, same sizes), decoded on load."""

    has_masks = True
    task = SEGMENTATION
    native_size = None
    user_files = True  # files that can be missing or corrupt: read ahead by the sweep's check (data.verify.check)

    def __init__(
        self,
        images: list[Path],
        masks: list[Path],
        class_names: list[str],
        kind: str,
        split_of: list[str] | None = None,
        bit_depth: str | int = "auto",
    ):
        if not images:
            raise DataError(f"{kind}: no images found")
        for img, msk in zip(images, masks):
            a, b = _size(img), _size(msk)
            if a is not None and b is not None and a != b:
                raise DataError(
                    f"{kind}: mask {msk} is {b[0]}x{b[1]} but its image {img} is {a[0]}x{a[1]}; "
                    "masks must have their image's size"
                )
        self.images, self.masks = images, masks
        self.class_names = list(class_names)
        self.labels = np.zeros(len(images), dtype=np.int64)
        self.headers = [header(p) for p in images]
        self.channels = 1 if all(h is None or h.gray for h in self.headers) else 3
        self.bit_depth = bit_depth  # data.bit_depth; images and masks are read as stored (no EXIF turn)
        check_setting(bit_depth, images, self.headers)
        parts = _stat_parts(images) + _stat_parts(masks) + self.class_names + [self.channels]
        self.fingerprint = f"{kind}-" + digest(parts + ([] if bit_depth == "auto" else [f"bit_depth={bit_depth}"]))
        self.predefined_splits = None if split_of is None else np.asarray(split_of)

    def __len__(self) -> int:
        return len(self.images)

    @property
    def depth(self) -> BitDepth:
        """The images' bit depth (resomap.data.images), found once per process."""
        return depth_of(self.fingerprint, self.bit_depth, self.images, self.headers)

    def load(self, i: int) -> np.ndarray:
        """uint8 for 8-bit images, uint16 on 0..65535 for deeper ones (scaled by the data's depth)."""
        return self.depth.scaled(read_pixels(self.images[i], self.channels, False), str(self.images[i]))

    def seg_mask(self, i: int) -> np.ndarray:
        from PIL import Image

        with Image.open(self.masks[i]) as im:
            if im.mode not in ("L", "P", "1", "I", "I;16"):
                raise DataError(f"mask {self.masks[i]} is {im.mode}; masks are class-index PNGs (mode L or P)")
            arr = np.asarray(im)
        top = int(arr.max(initial=0))
        if top >= len(self.class_names):
            raise DataError(
                f"mask {self.masks[i]} holds class index {top}, outside the {len(self.class_names)} configured "
                f"classes ({', '.join(self.class_names)})"
            )
        return arr.astype(np.uint8)

    def mask(self, i: int) -> np.ndarray:
        return self.seg_mask(i) > 0

    def name(self, i: int) -> str:
        return str(self.images[i])


def _class_names(classes: list[str], kind: str) -> list[str]:
    if len(classes) < 2:
        raise DataError(
            f"data.{kind}.classes must name at least 2 classes in mask-index order (e.g. [background, crack]); "
            f"got {classes!r}"
        )
    return [str(c) for c in classes]


def _pair_missing(kind: str, missing: list[Path], total: int) -> DataError:
    shown = ", ".join(str(p) for p in missing[:3]) + (", ..." if len(missing) > 3 else "")
    return DataError(f"{kind}: {len(missing)} of {total} images have no mask ({shown}); add their masks or remove them")


@dataclass(frozen=True)
class SegFolderOptions:
    root: str | None = None  # folder holding images/ and masks/ (masks matched by file stem)
    images: str = "images"  # image subfolder of root
    masks: str = "masks"  # mask subfolder of root (class-index PNGs)
    classes: list[str] = field(default_factory=list)  # class names in mask-index order (index 0 first)


@register_dataset("segfolder", options=SegFolderOptions, masks=True, task=SEGMENTATION)
def segfolder(cfg: DataConfig, options: SegFolderOptions) -> SegFileDataset:
    if not options.root:
        raise DataError("data.dataset is 'segfolder' but data.segfolder.root is not set; set data.segfolder.root")
    root = Path(options.root).expanduser()
    img_dir, mask_dir = root / options.images, root / options.masks
    for folder in (img_dir, mask_dir):
        if not folder.is_dir():
            raise DataError(
                f"data.segfolder: {folder} is not a folder; put images in {img_dir} and masks in {mask_dir}"
            )
    classes = _class_names(list(options.classes), "segfolder")
    images = sorted(p for p in img_dir.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    by_stem = {p.stem: p for p in mask_dir.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES}
    missing = [p for p in images if p.stem not in by_stem]
    if missing:
        raise _pair_missing("data.segfolder", missing, len(images))
    log.info("segfolder %s: %d image/mask pairs, %d classes", root, len(images), len(classes))
    return SegFileDataset(images, [by_stem[p.stem] for p in images], classes, "segfolder", bit_depth=cfg.bit_depth)


@dataclass(frozen=True)
class SegCsvOptions:
    manifest: str | None = None  # file with image,mask[,split] rows (paths relative to the file)
    classes: list[str] = field(default_factory=list)  # class names in mask-index order (index 0 first)


@register_dataset("segcsv", options=SegCsvOptions, masks=True, task=SEGMENTATION)
def segcsv(cfg: DataConfig, options: SegCsvOptions) -> SegFileDataset:
    from resomap.data.folders import _SPLIT_NAMES

    if not options.manifest:
        raise DataError("data.dataset is 'segcsv' but data.segcsv.manifest is not set; set data.segcsv.manifest")
    manifest = Path(options.manifest).expanduser()
    if not manifest.is_file():
        raise DataError(f"data.segcsv.manifest {manifest} does not exist; point it at a CSV with image,mask rows")
    classes = _class_names(list(options.classes), "segcsv")
    with manifest.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        fields = [f.strip() for f in reader.fieldnames or []]
        if "image" not in fields or "mask" not in fields:
            raise DataError(
                f"data.segcsv.manifest {manifest}: the header must be image,mask[,split] (got {','.join(fields)})"
            )
        rows = [{k.strip(): (v or "").strip() for k, v in row.items() if k} for row in reader]
    rows = [r for r in rows if r.get("image")]
    if not rows:
        raise DataError(f"data.segcsv.manifest {manifest} has no rows; add image,mask lines below the header")
    images = [manifest.parent / r["image"] for r in rows]
    missing = [img for img, r in zip(images, rows) if not r.get("mask") or not (manifest.parent / r["mask"]).is_file()]
    if missing:
        raise _pair_missing(f"data.segcsv.manifest {manifest}", missing, len(images))
    masks = [manifest.parent / r["mask"] for r in rows]
    split_of = None
    if "split" in fields:
        split_of = [_SPLIT_NAMES.get(r.get("split", "").lower()) for r in rows]
        if None in split_of or "train" not in split_of:
            raise DataError(f"data.segcsv.manifest {manifest}: split must be train, val or test, with some train rows")
    log.info("segcsv %s: %d image/mask pairs, %d classes", manifest, len(images), len(classes))
    return SegFileDataset(images, masks, classes, "segcsv", split_of, bit_depth=cfg.bit_depth)


# ---------------------------------------------------------------- bundle support


def reference_resolution(cfg, raw) -> int:
    """The side the val/test masks (and so every metric) use: segmentation.reference_resolution, else the
    dataset's own mask side (`native_size`, the generated sets), else the largest resolution of the sweep."""
    chosen = cfg.segmentation.reference_resolution
    if chosen:
        return int(chosen)
    native = getattr(raw, "native_size", None)
    return int(native) if native else int(max(cfg.sweep.resolutions))


def segmentation_targets(cfg, raw, subset: np.ndarray, entry, positions: dict, resolution: int, cache_root) -> dict:
    """Class-index masks per split for DataBundle: train at `resolution` (what the model learns from), val and
    test at the reference side (what every metric is computed on). Pairs unreadable at either side are dropped."""
    import torch

    from resomap.data.cache import get_resized

    if getattr(raw, "task", None) != SEGMENTATION or entry.targets is None:
        raise DataError(f"dataset '{cfg.data.dataset}' has no class-index masks; it cannot be used for segmentation")
    ref = reference_resolution(cfg, raw)
    ref_entry = entry if ref == resolution else get_resized(raw, subset, ref, cfg.data.cache, cache_root)
    if len(ref_entry.bad):
        bad = set(ref_entry.bad.tolist())
        positions = {s: np.asarray([p for p in pos if p not in bad], dtype=np.int64) for s, pos in positions.items()}
    targets = {}
    for split, pos in positions.items():
        source = entry if split == "train" else ref_entry
        targets[split] = source.targets[torch.from_numpy(pos)]
    counts = np.bincount(targets["train"].numpy().ravel(), minlength=len(raw.class_names)).astype(np.int64)
    return {
        "positions": positions,
        "targets": targets,
        "task": SEGMENTATION,
        "reference_resolution": ref,
        "train_pixel_counts": counts,
    }
