"""Datasets read from image files: `imagefolder` (root/<class>/<image>) and `csv` (a path,label manifest).

Files are only listed here (and their headers read, to decide grayscale vs RGB); pixels are decoded once, when
the resolution cache is built. A file that cannot be read there is skipped (see cache.py).
"""

from __future__ import annotations

import csv
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from resomap.config.schema import DataConfig
from resomap.data.registry import digest, register_dataset
from resomap.errors import DataError

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")
GRAY_MODES = ("L", "1")


def _is_gray(path: Path) -> bool:
    """Reads the header only; a file unreadable here counts as gray so it does not force RGB (it is skipped later)."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            return im.mode in GRAY_MODES
    except (OSError, ValueError, Image.DecompressionBombError):
        return True


class FileDataset:
    """Images listed by path with integer labels; decoded with PIL on `load`."""

    has_masks = False

    def __init__(
        self,
        paths: list[Path],
        labels: list[int],
        class_names: list[str],
        kind: str,
        split_of: list[str] | None = None,
    ):
        self.paths = paths
        self.labels = np.asarray(labels, dtype=np.int64)
        self.class_names = class_names
        self.channels = 1 if all(_is_gray(p) for p in paths) else 3
        self.fingerprint = f"{kind}-" + digest(_stat_parts(paths) + class_names + [self.channels])
        # the user's own train/val/test assignment per image (None: ResoMap splits)
        self.predefined_splits = None if split_of is None else np.asarray(split_of)

    def __len__(self) -> int:
        return len(self.paths)

    def load(self, i: int) -> np.ndarray:
        from PIL import Image

        with Image.open(self.paths[i]) as im:
            im = im.convert("L" if self.channels == 1 else "RGB")
            return np.asarray(im, dtype=np.uint8)

    def mask(self, i: int) -> np.ndarray:
        raise DataError("file datasets have no object masks")

    def name(self, i: int) -> str:
        return str(self.paths[i])


def _stat_parts(paths: list[Path]) -> list[object]:
    parts: list[object] = []
    for p in paths:
        try:
            st = p.stat()
            parts += [str(p.resolve()), st.st_size, st.st_mtime_ns]
        except OSError:
            parts += [str(p), "missing"]
    return parts


def _images_in(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


@dataclass(frozen=True)
class ImageFolderOptions:
    root: str | None = None  # folder of class folders (root/<class>/<image>)
    # transforms that keep every image's label (hflip, vflip, rot90): what training.tta may average over
    symmetries: list[str] = field(default_factory=list)


PREDEFINED = ("train", "val", "test")
_SPLIT_NAMES = {"train": "train", "val": "val", "valid": "val", "validation": "val", "test": "test"}


def _class_folders(root: Path) -> tuple[list[str], list[Path], list[int]]:
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise DataError(f"data.imagefolder.root {root} has no class folders; put images under {root}/<class name>/")
    paths: list[Path] = []
    labels: list[int] = []
    for k, name in enumerate(classes):
        files = _images_in(root / name)
        if not files:
            raise DataError(
                f"class folder {root / name} has no images ({', '.join(IMAGE_SUFFIXES)}); add images or remove it"
            )
        paths += files
        labels += [k] * len(files)
    return classes, paths, labels


def _split_folders(root: Path) -> dict[str, Path] | None:
    """root/train/<class>/, root/val/<class>/ (or valid, validation), root/test/<class>/, as torchvision users keep
    them: every subfolder is a split name and there is a train split."""
    subs = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    found = {_SPLIT_NAMES.get(p.name.lower()): p for p in subs}
    if subs and None not in found and "train" in found and len(found) == len(subs) >= 2:
        return found
    return None


def _predefined(root: Path, folders: dict[str, Path]) -> FileDataset:
    per_split = {split: _class_folders(folder) for split, folder in folders.items()}
    classes = sorted({c for names, _, _ in per_split.values() for c in names})
    index = {name: k for k, name in enumerate(classes)}
    paths: list[Path] = []
    labels: list[int] = []
    split_of: list[str] = []
    for split, (names, files, labs) in per_split.items():
        paths += files
        labels += [index[names[k]] for k in labs]
        split_of += [split] * len(files)
    shown = ", ".join(f"{s} {split_of.count(s)}" for s in PREDEFINED if s in folders)
    log.info("imagefolder %s: %d images in %d classes, predefined splits (%s)", root, len(paths), len(classes), shown)
    return FileDataset(paths, labels, classes, "imagefolder", split_of)


def folder_classes(options: ImageFolderOptions) -> list[str] | None:
    """The class names an imagefolder dataset will have (sorted class folder names, over the splits of a predefined
    layout), read from the folder names alone; None where the folder cannot say (its own checks report why)."""
    try:
        root = Path(options.root or "").expanduser()
        if not options.root or not root.is_dir():
            return None
        folders = _split_folders(root)
        tops = list(folders.values()) if folders is not None else [root]
        found = {p.name for top in tops for p in top.iterdir() if p.is_dir() and not p.name.startswith(".")}
        return sorted(found) or None
    except OSError:
        return None


def manifest_classes(options: CsvOptions) -> list[str] | None:
    """The class names a csv dataset will have (its sorted labels), read from the manifest; None where it cannot
    say (the dataset's own checks report why)."""
    try:
        manifest = Path(options.manifest or "").expanduser()
        if not options.manifest or not manifest.is_file():
            return None
        with manifest.open(newline="", encoding="utf-8") as fh:
            rows = [{k.strip(): (v or "").strip() for k, v in row.items() if k} for row in csv.DictReader(fh)]
        return sorted({r["label"] for r in rows if r.get("path") and "label" in r}) or None
    except (OSError, UnicodeDecodeError, csv.Error):
        return None


@register_dataset("imagefolder", options=ImageFolderOptions, masks=False, classes=folder_classes)
def imagefolder(cfg: DataConfig, options: ImageFolderOptions) -> FileDataset:
    if not options.root:
        raise DataError(
            "data.dataset is 'imagefolder' but data.imagefolder.root is not set; "
            "set data.imagefolder.root=<folder of class folders>"
        )
    root = Path(options.root).expanduser()
    if not root.is_dir():
        raise DataError(
            f"data.imagefolder.root {root} does not exist or is not a folder; point it at a folder of class folders"
        )
    folders = _split_folders(root)
    if folders is not None:
        return _predefined(root, folders)
    classes, paths, labels = _class_folders(root)
    log.info("imagefolder %s: %d images in %d classes", root, len(paths), len(classes))
    return FileDataset(paths, labels, classes, "imagefolder")


@dataclass(frozen=True)
class CsvOptions:
    manifest: str | None = None  # file with path,label[,split] rows (paths relative to the file; split: train/val/test)
    # transforms that keep every image's label (hflip, vflip, rot90): what training.tta may average over
    symmetries: list[str] = field(default_factory=list)


@register_dataset("csv", options=CsvOptions, masks=False, classes=manifest_classes)
def csv_manifest(cfg: DataConfig, options: CsvOptions) -> FileDataset:
    if not options.manifest:
        raise DataError(
            "data.dataset is 'csv' but data.csv.manifest is not set; set data.csv.manifest=<file with path,label>"
        )
    manifest = Path(options.manifest).expanduser()
    if not manifest.is_file():
        raise DataError(f"data.csv.manifest {manifest} does not exist; point it at a CSV with path,label rows")
    with manifest.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        fields = [f.strip() for f in reader.fieldnames or []]
        missing = [c for c in ("path", "label") if c not in fields]
        if missing:
            raise DataError(
                f"data.csv.manifest {manifest}: missing column(s) {', '.join(missing)}; the header must be path,label "
                f"(got {','.join(fields) or 'no header'})"
            )
        rows = [{k.strip(): (v or "").strip() for k, v in row.items() if k} for row in reader]
    rows = [r for r in rows if r.get("path")]
    if not rows:
        raise DataError(f"data.csv.manifest {manifest} has no rows; add path,label lines below the header")
    classes = sorted({r["label"] for r in rows})
    index = {name: k for k, name in enumerate(classes)}
    paths = [manifest.parent / r["path"] for r in rows]
    labels = [index[r["label"]] for r in rows]
    split_of = None
    if "split" in fields:  # the user's own train/val/test assignment
        split_of = [_SPLIT_NAMES.get(r.get("split", "").lower()) for r in rows]
        bad = [r.get("split", "") for r, s in zip(rows, split_of) if s is None]
        if bad:
            raise DataError(
                f"data.csv.manifest {manifest}: split {bad[0]!r} is not train, val or test; fix the split column"
            )
        if "train" not in split_of:
            raise DataError(f"data.csv.manifest {manifest}: no row has split 'train'; add training images")
    log.info("csv %s: %d images in %d classes", manifest, len(paths), len(classes))
    return FileDataset(paths, labels, classes, "csv", split_of)
