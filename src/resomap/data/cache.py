"""Resolution cache: every image decoded once and kept resized per (dataset content, resolution) as uint8, or as
uint16 on 0..65535 for data deeper than 8 bits (resomap.data.images: the dataset's `depth`), so a 16-bit image keeps
its precision; the dataset's fingerprint names its bit-depth setting, and an entry of the other type is not read.

Level 1 is a per-process dict (LRU, up to data.cache.memory_budget_mb); level 2 is
<output_dir>/<cache_dir>/<key>/<resolution>.npy (+ .masks.npy, + .json written last as the commit marker),
written atomically and memory-mapped when an entry does not fit the memory budget. The same folder holds
checked-<settings>.json: the data passed its checks under those settings (data.verify.check), not read again.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from resomap.atomic import write_atomic
from resomap.config.schema import CacheConfig
from resomap.data.images import BitDepthError
from resomap.data.registry import RawDataset, digest
from resomap.errors import DataError

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

FORMAT_VERSION = 1


@dataclass
class CacheEntry:
    images: torch.Tensor  # uint8 (uint16: deep data) [N, C, r, r], N = len(indices); memory-mapped when over budget
    masks: torch.Tensor | None  # bool [N, r, r]
    bad: np.ndarray  # positions (into indices) of images that could not be read (zero-filled)
    location: str  # "memory", or the .npy path
    targets: torch.Tensor | None = None  # uint8 [N, r, r] class-index masks (segmentation datasets)
    reasons: dict[int, str] = field(default_factory=dict)  # bad position -> what is wrong, when not unreadable
    # the training split's normalisers computed from these images (data.loader.Normalizer), by a digest of the
    # split's positions: each trial of a sweep and each checkpoint the summary loads reads the same entry (the
    # statistics of 1,747 ELPV cells at 128 px took 1.1 s each time)
    normalizers: dict[bytes, Any] = field(default_factory=dict, repr=False)

    @property
    def nbytes(self) -> int:
        extra = sum(t.numel() for t in (self.masks, self.targets) if t is not None)
        return self.images.numel() * self.images.element_size() + extra


_MEMORY: OrderedDict[tuple[str, int], CacheEntry] = OrderedDict()
_LOCK = threading.Lock()


def clear_memory_cache() -> None:
    """Forget every in-memory entry (the disk cache stays)."""
    with _LOCK:
        _MEMORY.clear()


def memory_cache_keys() -> list[tuple[str, int]]:
    with _LOCK:
        return list(_MEMORY)


def cache_key(raw: RawDataset, indices: np.ndarray) -> str:
    """Dataset fingerprint plus the subset of images (data.limit) the entry holds."""
    full = len(indices) == len(raw) and bool(np.all(indices == np.arange(len(raw))))
    return f"{raw.fingerprint}-{'all' if full else 'sub' + digest([indices.astype(np.int64).tobytes()], 10)}"


def image_dtype(raw: RawDataset) -> type:
    """What the cache keeps the dataset's pixels as: uint16 for data deeper than 8 bits (its `depth`), else uint8."""
    depth = getattr(raw, "depth", None)
    return np.uint16 if depth is not None and depth.deep else np.uint8


def resize_image(arr: np.ndarray, resolution: int, channels: int) -> np.ndarray:
    """uint8 (H, W[, C]) -> uint8 (C, r, r), antialiased bilinear (PIL filters over the whole source footprint);
    uint16 -> uint16 the same way, in 32-bit float."""
    from PIL import Image

    if arr.dtype == np.uint16:
        return _resize_deep(arr, resolution, channels)
    if arr.ndim == 3 and channels == 1:
        arr = arr[..., 0] if arr.shape[2] != 3 else np.asarray(Image.fromarray(arr).convert("L"))
    im = Image.fromarray(np.ascontiguousarray(arr, dtype=np.uint8))
    if channels == 3 and im.mode != "RGB":
        im = im.convert("RGB")
    if im.size != (resolution, resolution):
        im = im.resize((resolution, resolution), Image.BILINEAR)
    out = np.asarray(im)
    return out[None] if out.ndim == 2 else out.transpose(2, 0, 1)


def _resize_deep(arr: np.ndarray, resolution: int, channels: int) -> np.ndarray:
    """uint16 (H, W[, C]) -> uint16 (C, r, r): each channel resized as PIL's 32-bit float image with the filter the
    8-bit images get (a colour image made gray with PIL's L weights, ITU-R 601-2)."""
    from PIL import Image

    x = np.asarray(arr, dtype=np.float32)
    if x.ndim == 3 and channels == 1:
        x = x[..., 0] if x.shape[2] != 3 else x @ np.asarray([0.299, 0.587, 0.114], dtype=np.float32)
    planes = [x] if x.ndim == 2 else [x[..., k] for k in range(x.shape[2])]
    if channels == 3 and len(planes) == 1:
        planes = planes * 3
    if planes[0].shape != (resolution, resolution):
        size = (resolution, resolution)
        planes = [np.asarray(Image.fromarray(np.ascontiguousarray(p)).resize(size, Image.BILINEAR)) for p in planes]
    return np.clip(np.rint(np.stack(planes[:channels])), 0, 65535).astype(np.uint16)


def resize_mask(mask: np.ndarray, resolution: int) -> np.ndarray:
    """bool (H, W) -> bool (r, r) by thresholding the antialiased area average at one half."""
    from PIL import Image

    im = Image.fromarray(np.asarray(mask, dtype=np.uint8) * 255)
    return np.asarray(im.resize((resolution, resolution), Image.BILINEAR)) >= 128


def resize_targets(mask: np.ndarray, resolution: int) -> np.ndarray:
    """uint8 class-index (H, W) -> (r, r) by nearest-neighbour resampling (classes never mix)."""
    from PIL import Image

    im = Image.fromarray(np.ascontiguousarray(mask, dtype=np.uint8))
    return np.asarray(im.resize((resolution, resolution), Image.NEAREST))


def has_dense_targets(raw: RawDataset) -> bool:
    """True for a dataset with a class per pixel (`seg_mask(i)`): its cache keeps those masks beside the images."""
    return callable(getattr(raw, "seg_mask", None))


def _decode_all(raw: RawDataset, indices: np.ndarray, resolution: int):
    n, c = len(indices), raw.channels
    images = np.zeros((n, c, resolution, resolution), dtype=image_dtype(raw))
    masks = np.zeros((n, resolution, resolution), dtype=bool) if raw.has_masks else None
    targets = np.zeros((n, resolution, resolution), dtype=np.uint8) if has_dense_targets(raw) else None
    bad: list[int] = []
    reasons: dict[int, str] = {}
    for pos, i in enumerate(indices.tolist()):
        try:
            images[pos] = resize_image(raw.load(i), resolution, c)
            if targets is not None:  # a mask that cannot be read or holds unknown classes: the pair is skipped
                targets[pos] = resize_targets(raw.seg_mask(i), resolution)
        except BitDepthError:  # the setting is wrong, not the file: never skipped as unreadable
            raise
        except Exception as exc:  # PIL raises many types (OSError, SyntaxError, ValueError...) for corrupt files
            _unreadable(raw, i, pos, exc, bad, reasons)
            continue
        if masks is not None:
            masks[pos] = resize_mask(raw.mask(i), resolution) if targets is None else targets[pos] > 0
    return images, masks, bad, targets, reasons


def _unreadable(raw: RawDataset, i: int, pos: int, exc: Exception, bad: list[int], reasons: dict[int, str]) -> None:
    log.debug("cannot read %s: %s", raw.name(i), exc)
    bad.append(pos)
    if isinstance(exc, DataError):  # a readable file with wrong content (a mask's class index): says which
        reasons[pos] = str(exc)


def read_all(raw: RawDataset, indices: np.ndarray) -> tuple[np.ndarray, dict[int, str]]:
    """Every image of `indices` read once as the cache reads them (with its class-index mask, for segmentation),
    at its own size and kept nowhere: the `bad` positions and their `reasons`, as a CacheEntry holds them."""
    dense = has_dense_targets(raw)
    bad: list[int] = []
    reasons: dict[int, str] = {}
    for pos, i in enumerate(indices.tolist()):
        try:
            raw.load(i)
            if dense:
                raw.seg_mask(i)
        except BitDepthError:  # as _decode_all
            raise
        except Exception as exc:  # as _decode_all: any error of a corrupt file marks it unreadable
            _unreadable(raw, i, pos, exc, bad, reasons)
    return np.asarray(bad, dtype=np.int64), reasons


def _check_record(cache_root: Path, key: str, settings: str) -> Path:
    return Path(cache_root) / key / f"checked-{settings}.json"


def check_passed(cache_root: Path, key: str, settings: str) -> list[str] | None:
    """The lines of images skipped (data.max_bad_fraction) when the data of cache key `key` passed its checks under
    `settings` (record_check; [] when none was skipped), or None when no pass is recorded."""
    path = _check_record(cache_root, key, settings)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # none, or unreadable: the checks run again
        return None
    skipped = record.get("skipped") if isinstance(record, dict) and record.get("passed") else None  # older: none
    return [str(line) for line in skipped] if isinstance(skipped, list) else None


def record_check(cache_root: Path, key: str, settings: str, skipped: list[str] = ()) -> None:
    """Record that the data of `key` passed its checks under `settings` (a digest of what they read), beside that
    data's resolution cache, with the lines of the images it skipped (said again when the pass is read): the key
    changes with any file's size or mtime, so a changed file is read again."""
    path = _check_record(cache_root, key, settings)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"version": FORMAT_VERSION, "passed": True, "skipped": list(skipped)}
        _atomic_save(path, json.dumps(record).encode())
    except OSError as exc:  # only a shortcut: the next check reads the files again
        log.debug("data check not recorded in %s: %s", path, exc)


def _atomic_save(path: Path, arr: np.ndarray | bytes) -> None:
    write_atomic(path, (lambda fh: fh.write(arr)) if isinstance(arr, bytes) else (lambda fh: np.save(fh, arr)))


def _paths(folder: Path, resolution: int) -> tuple[Path, Path, Path]:
    return folder / f"{resolution}.npy", folder / f"{resolution}.masks.npy", folder / f"{resolution}.json"


def _write_disk(
    folder: Path,
    resolution: int,
    images: np.ndarray,
    masks: np.ndarray | None,
    bad: list,
    targets: np.ndarray | None = None,
    reasons: dict[int, str] | None = None,
) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    img_path, mask_path, meta_path = _paths(folder, resolution)
    _atomic_save(img_path, images)
    if masks is not None:
        _atomic_save(mask_path, masks)
    if targets is not None:
        _atomic_save(folder / f"{resolution}.targets.npy", targets)
    meta = {"version": FORMAT_VERSION, "shape": list(images.shape), "masks": masks is not None, "bad": bad}
    meta["reasons"] = {str(pos): why for pos, why in (reasons or {}).items()}
    if targets is not None:
        meta["targets"] = True
    _atomic_save(meta_path, json.dumps(meta).encode())  # last: its presence means the entry is complete
    log.info("wrote resolution cache %s", img_path)


def _read_disk(folder: Path, resolution: int, n: int, mmap: bool, dtype: type = np.uint8) -> CacheEntry | None:
    import torch  # here: the data's checks (read_all, resomap.data.verify) run before torch is imported

    img_path, mask_path, meta_path = _paths(folder, resolution)
    try:
        meta = json.loads(meta_path.read_text())
        if meta.get("version") != FORMAT_VERSION or meta["shape"][0] != n:
            return None
        mode = "c" if mmap else None  # copy-on-write: writable for torch, never written back to the file
        images = np.load(img_path, mmap_mode=mode)
        masks = np.load(mask_path, mmap_mode=mode) if meta["masks"] else None
        targets = np.load(folder / f"{resolution}.targets.npy", mmap_mode=mode) if meta.get("targets") else None
    except (OSError, ValueError, KeyError, IndexError):
        return None
    if list(images.shape) != meta["shape"] or images.dtype != dtype:
        return None
    location = str(img_path) if mmap else "memory"
    masks_t = torch.from_numpy(masks) if masks is not None else None
    targets_t = torch.from_numpy(targets) if targets is not None else None
    bad = np.asarray(meta["bad"], dtype=np.int64)
    reasons = {int(pos): str(why) for pos, why in (meta.get("reasons") or {}).items()}
    return CacheEntry(torch.from_numpy(images), masks_t, bad, location, targets_t, reasons)


def _remember(key: tuple[str, int], entry: CacheEntry, budget: int) -> None:
    with _LOCK:
        _MEMORY.pop(key, None)
        total = sum(e.nbytes for e in _MEMORY.values())
        while _MEMORY and total + entry.nbytes > budget:
            old_key, old = _MEMORY.popitem(last=False)
            total -= old.nbytes
            log.debug("evicted %s from the memory cache", old_key)
        _MEMORY[key] = entry


def get_resized(
    raw: RawDataset,
    indices: np.ndarray,
    resolution: int,
    cfg: CacheConfig,
    cache_root: Path,
    check: Callable[[CacheEntry], object] | None = None,
) -> CacheEntry:
    """The images `indices` of `raw` at `resolution`, decoding only on a miss of both cache levels. `check` (the
    data's checks: too many unreadable images, a split that cannot be made) sees freshly decoded images before
    either level keeps them: its error leaves no cache folder behind (an entry read from a level is not
    checked here; the caller checks it)."""
    import torch

    key = cache_key(raw, indices)
    mem_key = (key, resolution)
    with _LOCK:
        entry = _MEMORY.get(mem_key)
        if entry is not None:
            _MEMORY.move_to_end(mem_key)
    if entry is not None:
        log.debug("resolution cache hit (memory): %s @ %d px", key, resolution)
        return entry
    budget = cfg.memory_budget_mb * 2**20
    folder = Path(cache_root) / key
    c, n, dtype = raw.channels, len(indices), image_dtype(raw)
    per_pixel = c * np.dtype(dtype).itemsize + (1 if raw.has_masks else 0) + (1 if has_dense_targets(raw) else 0)
    over = n * resolution * resolution * per_pixel > budget
    entry = _read_disk(folder, resolution, n, mmap=over, dtype=dtype)
    if entry is not None and has_dense_targets(raw) and entry.targets is None:
        entry = None  # written without class-index masks: decode again
    if entry is not None:
        log.info("resolution cache hit (disk): %s @ %d px", folder, resolution)
    else:
        log.info("resolution cache miss: decoding %d images of %s at %d px", n, raw.fingerprint, resolution)
        images, masks, bad, targets, reasons = _decode_all(raw, indices, resolution)
        masks_t = torch.from_numpy(masks) if masks is not None else None
        targets_t = torch.from_numpy(targets) if targets is not None else None
        bad_a = np.asarray(bad, dtype=np.int64)
        entry = CacheEntry(torch.from_numpy(images), masks_t, bad_a, "memory", targets_t, reasons)
        if check is not None:
            check(entry)  # a data error ends here: nothing written to disk or kept in memory
        if cfg.disk or over:
            _write_disk(folder, resolution, images, masks, bad, targets, reasons)
        if over:  # over the memory budget: serve from the memory-mapped file instead of RAM
            entry = _read_disk(folder, resolution, n, mmap=True, dtype=dtype) or entry
    if entry.location == "memory" and cfg.disk:
        entry.location = f"memory + {folder}"
    if not over:
        _remember(mem_key, entry, budget)
    return entry
