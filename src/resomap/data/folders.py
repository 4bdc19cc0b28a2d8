"""Datasets read from image files: `imagefolder` (root/<class>/<image>) and `csv` (a path,label manifest).

Files are only listed here (and their headers read, to decide grayscale vs RGB and the data's bit depth); pixels
are decoded once, when the resolution cache is built, at their full precision and turned upright by their EXIF
orientation (resomap.data.images). A file that cannot be read there is skipped (see cache.py).
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from resomap.config import register_check
from resomap.config.schema import DataConfig
from resomap.data.images import BitDepth, check_setting, depth_of, header, read_pixels
from resomap.data.registry import digest, register_dataset
from resomap.errors import DataError

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")


class FileDataset:
    """Images listed by path with integer labels; decoded on `load` at the data's bit depth (`depth`)."""

    has_masks = False
    user_files = True  # files that can be missing or corrupt: read ahead by the sweep's check (data.verify.check)

    def __init__(
        self,
        paths: list[Path],
        labels: list[int],
        class_names: list[str],
        kind: str,
        split_of: list[str] | None = None,
        bit_depth: str | int = "auto",
        exif: bool = True,
    ):
        self.paths = paths
        self.labels = np.asarray(labels, dtype=np.int64)
        self.class_names = class_names
        self.headers = [header(p) for p in paths]  # an unreadable file counts as gray (it is skipped later)
        self.channels = 1 if all(h is None or h.gray for h in self.headers) else 3
        self.bit_depth, self.exif = bit_depth, exif  # data.bit_depth, data.exif_orientation
        settings = [f"bit_depth={bit_depth}", f"exif={exif}"]  # what the cached pixels also depend on
        self.fingerprint = f"{kind}-" + digest(_stat_parts(paths) + class_names + [self.channels, *settings])
        check_setting(bit_depth, paths, self.headers)  # a setting the files cannot take: refused when opened
        # the user's own train/val/test assignment per image (None: ResoMap splits)
        self.predefined_splits = None if split_of is None else np.asarray(split_of)
        # the groups the summary also decides each model on (stats.groups): name -> (a code per image, the names)
        self.groups: dict[str, tuple[np.ndarray, list[str]]] = {}

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def depth(self) -> BitDepth:
        """The data's bit depth (resomap.data.images.resolve_depth), found once per process: from the headers, and
        for 32-bit integer or float files under auto from their values."""
        return depth_of(self.fingerprint, self.bit_depth, self.paths, self.headers)

    def load(self, i: int) -> np.ndarray:
        """uint8 (H, W[, 3]) for 8-bit data, uint16 on 0..65535 for deeper data (scaled by its depth)."""
        return self.depth.scaled(read_pixels(self.paths[i], self.channels, self.exif), str(self.paths[i]))

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


def _images_in(folder: Path, levels: int = 0) -> list[Path]:
    """The images `levels` folders below `folder` (0: directly in it; root/<class>/<site>/<image> is 1 below the
    class folder), sorted. An image at another depth, with levels > 0, is a DataError naming it."""
    if levels == 0:
        return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    found = _nested_images(folder)
    wrong = next(((p, depth) for p, depth in found if depth != levels), None)
    if wrong is not None:
        raise DataError(
            f"data.imagefolder.groups names {levels} folder level(s) below each class folder, but "
            f"{_misplaced_words(folder, *wrong)}; put every image at <class>/{'/'.join(['<group>'] * levels)}/<image>"
        )
    return [p for p, _ in found]


def _nested_images(folder: Path) -> list[tuple[Path, int]]:
    """Every image below `folder` outside hidden folders, sorted, with its depth (0: directly in it)."""
    found = []
    for p in sorted(folder.rglob("*")):
        parts = p.relative_to(folder).parts
        if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES and not any(part.startswith(".") for part in parts):
            found.append((p, len(parts) - 1))
    return found


def _misplaced_words(folder: Path, path: Path, depth: int) -> str:
    return f"{path} is {depth} below {folder}"


def group_codes(values: list[tuple[str, ...]], names: list[str]) -> dict[str, tuple[np.ndarray, list[str]]]:
    """name -> (a code per image, the group's values in sorted order), from each image's value of every group (an
    empty value is its own value, "(empty)")."""
    out = {}
    for k, name in enumerate(names):
        column = [v[k] or EMPTY_VALUE for v in values]
        levels = sorted(set(column))
        index = {v: i for i, v in enumerate(levels)}
        out[name] = (np.asarray([index[v] for v in column], dtype=np.int64), levels)
    return out


EMPTY_VALUE = "(empty)"


@dataclass(frozen=True)
class ImageFolderOptions:
    root: str | None = None  # folder of class folders (root/<class>/<image>)
    # transforms that keep every image's label (hflip, vflip, rot90): what training.tta may average over
    symmetries: list[str] = field(default_factory=list)
    # names of the folder levels between each class folder and its images, each a group the summary also decides
    # each model on (stats.groups): [site] reads root/<class>/<site>/<image>; [] (default): images in the class folder
    groups: list[str] = field(default_factory=list)


PREDEFINED = ("train", "val", "test")
_SPLIT_NAMES = {"train": "train", "val": "val", "valid": "val", "validation": "val", "test": "test"}


def _class_folders(root: Path, levels: int = 0) -> tuple[list[str], list[Path], list[int]]:
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise DataError(f"data.imagefolder.root {root} has no class folders; put images under {root}/<class name>/")
    paths: list[Path] = []
    labels: list[int] = []
    for k, name in enumerate(classes):
        files = _images_in(root / name, levels)
        if not files:
            raise DataError(
                f"class folder {root / name} has no images ({', '.join(IMAGE_SUFFIXES)}); add images or remove it"
            )
        paths += files
        labels += [k] * len(files)
    return classes, paths, labels


def _two_classes(classes: list[str], where: str, add: str) -> None:
    """A classifier needs two classes at least: one is a DataError naming it (a sweep on one class trains and scores
    1.0 on every image, deciding nothing)."""
    if len(classes) < 2:
        raise DataError(f"{where} one class ({classes[0]}); a classifier needs at least two: add {add}")


def _split_folders(root: Path) -> dict[str, Path] | None:
    """root/train/<class>/, root/val/<class>/ (or valid, validation), root/test/<class>/, as torchvision users keep
    them: every subfolder is a split name and there is a train split."""
    subs = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    found = {_SPLIT_NAMES.get(p.name.lower()): p for p in subs}
    if subs and None not in found and "train" in found and len(found) == len(subs) >= 2:
        return found
    return None


def _predefined(root: Path, folders: dict[str, Path], levels: int = 0, **settings: Any) -> FileDataset:
    per_split = {split: _class_folders(folder, levels) for split, folder in folders.items()}
    classes = sorted({c for names, _, _ in per_split.values() for c in names})
    _two_classes(classes, f"data.imagefolder.root {root} holds", "a folder of images per class in each split")
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
    return FileDataset(paths, labels, classes, "imagefolder", split_of, **settings)


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


def _with_folder_groups(found: FileDataset, names: list[str]) -> FileDataset:
    """The dataset with the groups named by the folder levels below each image's class folder."""
    if names:
        found.groups = group_codes([p.parts[-1 - len(names) : -1] for p in found.paths], names)
    return found


def file_settings(cfg: DataConfig) -> dict[str, Any]:
    """How the data section reads image files: data.bit_depth and data.exif_orientation, as FileDataset takes them."""
    return {"bit_depth": cfg.bit_depth, "exif": cfg.exif_orientation}


@register_dataset(
    "imagefolder", options=ImageFolderOptions, masks=False, classes=folder_classes, groups=lambda o: list(o.groups)
)
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
    folders, levels = _split_folders(root), len(options.groups)
    if folders is not None:
        return _with_folder_groups(_predefined(root, folders, levels, **file_settings(cfg)), options.groups)
    classes, paths, labels = _class_folders(root, levels)
    _two_classes(classes, f"data.imagefolder.root {root} holds", "a folder of images per class")
    log.info("imagefolder %s: %d images in %d classes", root, len(paths), len(classes))
    found = FileDataset(paths, labels, classes, "imagefolder", **file_settings(cfg))
    return _with_folder_groups(found, options.groups)


@dataclass(frozen=True)
class CsvOptions:
    manifest: str | None = None  # file with path,label[,split] rows (paths relative to the file; split: train/val/test)
    # transforms that keep every image's label (hflip, vflip, rot90): what training.tta may average over
    symmetries: list[str] = field(default_factory=list)
    # manifest columns whose values group the images, each a group the summary also decides each model on
    # (stats.groups): [site] reads a column `site`; an empty cell is the value "(empty)"
    groups: list[str] = field(default_factory=list)


@register_dataset("csv", options=CsvOptions, masks=False, classes=manifest_classes, groups=lambda o: list(o.groups))
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
        absent = [g for g in options.groups if g not in fields]
        if absent:
            raise DataError(
                f"data.csv.groups names column {absent[0]!r} that data.csv.manifest {manifest} does not have; "
                f"its columns: {', '.join(fields)}"
            )
        rows = [{k.strip(): (v or "").strip() for k, v in row.items() if k} for row in reader]
    rows = [r for r in rows if r.get("path")]
    if not rows:
        raise DataError(f"data.csv.manifest {manifest} has no rows; add path,label lines below the header")
    classes = sorted({r["label"] for r in rows})
    _two_classes(classes, f"data.csv.manifest {manifest} labels", "rows of another label")
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
    found = FileDataset(paths, labels, classes, "csv", split_of, **file_settings(cfg))
    if options.groups:
        found.groups = group_codes([tuple(r.get(g, "") for g in options.groups) for r in rows], options.groups)
    return found


def _manifest_columns(manifest: Path) -> list[str] | None:
    try:
        with manifest.open(newline="", encoding="utf-8") as fh:
            return [f.strip() for f in csv.DictReader(fh).fieldnames or []]
    except (OSError, UnicodeDecodeError, csv.Error):
        return None  # the dataset's own checks say why


def _misplaced(root: Path, levels: int) -> str | None:
    """The first image not `levels` folders below its class folder, in words; None when every image is."""
    folders = _split_folders(root)
    for top in folders.values() if folders is not None else [root]:
        for folder in sorted(p for p in top.iterdir() if p.is_dir() and not p.name.startswith(".")):
            wrong = next(((p, depth) for p, depth in _nested_images(folder) if depth != levels), None)
            if wrong is not None:
                return _misplaced_words(folder, *wrong)
    return None


def check_file_groups(cfg: Any, fail: Callable[[str, str, Any], None]) -> None:
    """At load: fail on a data.csv.groups column the manifest lacks, or data.imagefolder.groups naming more or fewer
    folder levels than an image sits below its class folder (a missing manifest or root: the dataset says why)."""
    from resomap.config.groups import group_options

    dc = cfg.data
    if dc.dataset not in ("csv", "imagefolder"):
        return
    options = group_options(dc, dc.dataset)
    key = f"data.{dc.dataset}.groups"
    if len(set(options.groups)) < len(options.groups):
        fail(key, "distinct names", options.groups)
    if dc.dataset == "csv" and options.groups and options.manifest:
        manifest = Path(options.manifest).expanduser()
        fields = _manifest_columns(manifest) if manifest.is_file() else None
        absent = [g for g in options.groups if fields is not None and g not in fields]
        if absent:
            fail(key, f"columns of {manifest} ({', '.join(fields or [])})", absent[0])
    if dc.dataset == "imagefolder" and options.groups and options.root:
        root = Path(options.root).expanduser()
        where = _misplaced(root, len(options.groups)) if root.is_dir() else None
        if where:
            fail(key, f"{len(options.groups)} folder level(s) between each class folder and its images", where)


register_check(check_file_groups)
