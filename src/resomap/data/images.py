"""Image files read at their full precision: what each file holds (`header`: its mode and bits per channel), the
data's bit depth (`resolve_depth`, data.bit_depth), the EXIF orientation (data.exif_orientation) and the pixels
(`read_pixels`), scaled by that depth (`BitDepth.scaled`).

8-bit files (L, RGB, P, ...) are read as 8-bit images always were: uint8, converted by Pillow. Deeper ones, 16-bit
grayscale (I;16), 16-bit RGB (which Pillow would cut to 8 bits: read with OpenCV), 32-bit integer (I) and float (F)
images, are read at their own precision and scaled by one depth for all the data, never per image, so brightness
that tells classes apart survives: value `high` of the depth is white. They become uint16 on 0..65535, what the
resolution cache keeps for such data (16 bits; resomap.data.cache) and the loaders divide by 65535. No torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from resomap.errors import DataError

GRAY_MODES = ("L", "1", "I;16", "I;16B", "I;16L", "I;16N", "I", "F")
DEEP_GRAY = {"I;16": "16", "I;16B": "16", "I;16L": "16", "I;16N": "16", "I": "int", "F": "float"}
KIND_WORDS = {"8": "8-bit", "16": "16-bit", "int": "32-bit integer (mode I)", "float": "32-bit float (mode F)"}
FULL = 65535  # the uint16 value deep data's white is stored as
_ORIENTATION_TAG = 0x0112  # EXIF Orientation


class BitDepthError(DataError):
    """An image holds values over the configured data.bit_depth: a setting to fix, never a file to skip."""


@dataclass(frozen=True)
class Header:
    mode: str  # Pillow's mode
    kind: str  # "8", "16" (16 bits per channel), "int" (32-bit integer, mode I) or "float" (32-bit float, mode F)
    gray: bool


def header(path: Path) -> Header | None:
    """What the file holds, from its header (Pillow decodes nothing); None for a file Pillow cannot open (skipped
    with the unreadable ones when the images are read)."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            if _rgb16(im):
                return Header(im.mode, "16", False)
            return Header(im.mode, DEEP_GRAY.get(im.mode, "8"), im.mode in GRAY_MODES)
    except (OSError, ValueError, Image.DecompressionBombError):
        return None


def _rgb16(im) -> bool:
    """Whether an opened (not yet decoded) image is RGB(A) of 16 bits per channel, which Pillow would read as 8: the
    layout its decoder reads the file's pixels in ('RGB;16B')."""
    try:
        args = im.tile[0][-1]
    except (IndexError, TypeError):
        return False
    rawmode = str(args if isinstance(args, str) else (args[0] if args else ""))
    return im.mode in ("RGB", "RGBA") and rawmode.startswith(("RGB;16", "RGBA;16"))


def read_pixels(path: Path, channels: int, exif: bool) -> np.ndarray:
    """The file's pixels (H, W) or (H, W, 3) at their own precision: uint8 for an 8-bit file (as L or RGB, as the
    dataset's `channels` say), uint16 for 16 bits, int32 for mode I, float32 for mode F; turned upright as its EXIF
    orientation says when `exif`."""
    from PIL import Image

    with Image.open(path) as im:
        rgb16 = _rgb16(im)  # before the EXIF is read: reading it may decode the image
        turn = _orientation(im) if exif else 1  # (a PNG's EXIF may follow its pixels: Pillow decodes them to find it)
        if rgb16:
            arr = _read_rgb16(path)
        elif im.mode in DEEP_GRAY:
            arr = np.asarray(im)
            arr = arr.astype(arr.dtype.newbyteorder("="))  # I;16B: big-endian in the file
            if channels == 3:
                arr = np.repeat(arr[..., None], 3, axis=2)
        else:
            arr = np.asarray(im.convert("L" if channels == 1 else "RGB"), dtype=np.uint8)
    return oriented(arr, turn)


def _read_rgb16(path: Path) -> np.ndarray:
    """A 16-bit per channel RGB(A) PNG or TIFF as uint16 (H, W, 3), alpha dropped; OpenCV (a dependency of
    grad-cam) reads what Pillow cuts to 8 bits. The bytes are read by Python, so any path works."""
    import cv2

    arr = cv2.imdecode(np.frombuffer(Path(path).read_bytes(), dtype=np.uint8), cv2.IMREAD_UNCHANGED)
    if arr is None or arr.ndim != 3 or arr.shape[2] < 3:
        raise OSError(f"cannot decode {path} as a 16-bit RGB image")
    return np.ascontiguousarray(arr[..., 2::-1])  # OpenCV's BGR(A) -> RGB


def _orientation(im) -> int:
    try:
        value = int(im.getexif().get(_ORIENTATION_TAG, 1))
    except (OSError, ValueError, TypeError, SyntaxError):  # a damaged EXIF block: the image as stored
        return 1
    return value if 1 <= value <= 8 else 1


def oriented(arr: np.ndarray, orientation: int) -> np.ndarray:
    """`arr` (H, W[, C]) turned upright for EXIF orientation 1-8, as Pillow's ImageOps.exif_transpose turns an
    image (2: mirrored, 3: upside down, 4: flipped, 5: transposed, 6: turned 90 degrees left, 7: transversed, 8:
    turned 90 degrees right): done on the array so that every precision gets the same turn."""
    turned = {
        2: lambda a: a[:, ::-1],
        3: lambda a: a[::-1, ::-1],
        4: lambda a: a[::-1],
        5: lambda a: a.swapaxes(0, 1),
        6: lambda a: np.rot90(a, -1),
        7: lambda a: a[::-1, ::-1].swapaxes(0, 1),
        8: lambda a: np.rot90(a, 1),
    }.get(orientation)
    return arr if turned is None else np.ascontiguousarray(turned(arr))


@dataclass(frozen=True)
class BitDepth:
    """The data's depth: values from `low` to `high` are read as 0..1 (uint16 0..65535 for deep data)."""

    bits: int | None  # 8, 12, 16 or 32; None: float images, scaled from their range
    high: float = 255.0
    low: float = 0.0
    words: str = "8-bit images"  # what was found and how it is read, for the data check and result.json

    @property
    def deep(self) -> bool:
        return self.bits != 8

    def scaled(self, arr: np.ndarray, name: str) -> np.ndarray:
        """`arr` as the cache takes it: uint8 for 8-bit data (as read), else uint16 with `high` at 65535. Values
        over an integer depth's `high` (only a configured depth can be exceeded) raise BitDepthError."""
        if not self.deep:
            return arr
        top = arr.max(initial=0)
        if self.bits is not None and top > self.high:
            raise BitDepthError(
                f"data.bit_depth is {self.bits} but {name} holds values up to {top:g} (over {self.high:g}); "
                f"set data.bit_depth to {_bits_for(float(top))} or auto"
            )
        x = (np.asarray(arr, dtype=np.float64) - self.low) * (FULL / (self.high - self.low))
        return np.clip(np.rint(np.nan_to_num(x)), 0, FULL).astype(np.uint16)  # NaN read as black


def _bits_for(top: float) -> int:
    """The smallest of 8, 12, 16 and 32 bits that holds integer values up to `top`."""
    return next((b for b in (8, 12, 16) if top <= 2**b - 1), 32)


def _found(kinds: Sequence[str], modes: Sequence[str]) -> str:
    """The files' depths in words ('80 16-bit files, mode I;16', '40 8-bit and 40 16-bit files, modes I;16, L')."""
    counts = {k: kinds.count(k) for k in KIND_WORDS if k in kinds}
    shown = " and ".join(f"{n} {KIND_WORDS[k]}" for k, n in counts.items())
    names = sorted(set(modes))
    return f"{shown} files, mode{'s' if len(names) > 1 else ''} {', '.join(names)}"


def check_setting(setting: str | int, paths: Sequence[Path], headers: Sequence[Header | None]) -> None:
    """From the headers alone, a DataError naming a file when data.bit_depth `setting` cannot hold the files' kind
    (8 for deeper files, any depth for float images) or float images are mixed with integer ones."""
    seen = [(p, h) for p, h in zip(paths, headers) if h is not None]
    deeper = next(((p, h) for p, h in seen if h.kind != "8"), None)
    if setting == 8 and deeper is not None:
        p, h = deeper
        raise DataError(
            f"data.bit_depth is 8 but {p} is a {KIND_WORDS[h.kind]} image; set data.bit_depth to auto (or 12, 16)"
        )
    floats = next((p for p, h in seen if h.kind == "float"), None)
    if floats is not None and setting != "auto":
        raise DataError(
            f"data.bit_depth is {setting} but {floats} holds 32-bit float values (mode F), which have no "
            "bit depth; set data.bit_depth to auto"
        )
    if floats is not None and len({h.kind for _, h in seen}) > 1:
        raise DataError(
            f"{floats} holds 32-bit float values (mode F) and other files integer ones; convert the data to one kind"
        )


def resolve_depth(
    setting: str | int, paths: Sequence[Path], headers: Sequence[Header | None], values: Callable[[Path], np.ndarray]
) -> BitDepth:
    """The data's depth under data.bit_depth `setting` (auto, 8, 12, 16) for these files; `values(path)` reads a
    file's pixels, needed only for 32-bit integer and float files under auto (the data's smallest and largest
    values). A setting that cannot hold the files' kind (8 for 16-bit files, any depth for float images), or float
    images mixed with integer ones, is a DataError naming a file."""
    check_setting(setting, paths, headers)
    seen = [(p, h) for p, h in zip(paths, headers) if h is not None]
    kinds = [h.kind for _, h in seen]
    found = _found(kinds, [h.mode for _, h in seen]) if seen else "no readable files"
    floats = next((p for p, h in seen if h.kind == "float"), None)
    if setting != "auto":
        bits = int(setting)
        return BitDepth(bits, 2.0**bits - 1, words=f"{_read_as(bits)} (data.bit_depth: {bits}; {found})")
    if not kinds or set(kinds) == {"8"}:
        return BitDepth(8, words=f"8-bit images (data.bit_depth: {setting}; {found})")
    if floats is not None:
        return _float_range(_readable([p for p, _ in seen], values), found)
    ints = _readable([p for p, h in seen if h.kind == "int"], values)
    top = max((float(a.max(initial=0)) for a in ints), default=0.0)
    bits = max(_bits_for(top), 16 if "16" in kinds else 8)
    largest = f", the largest value {top:g}" if "int" in kinds else ""
    return BitDepth(bits, 2.0**bits - 1, words=f"{_read_as(bits)} (data.bit_depth: auto; {found}{largest})")


def _readable(paths: Sequence[Path], values: Callable[[Path], np.ndarray]) -> list[np.ndarray]:
    """The pixels of each file that decodes (one that does not is skipped as unreadable when the images are read)."""
    found = []
    for path in paths:
        try:
            found.append(values(path))
        except Exception:  # PIL raises many types for a corrupt file (resomap.data.cache)
            continue
    return found


def _read_as(bits: int) -> str:
    return f"{bits}-bit images, 0..{2**bits - 1} read as 0..1"


_FOUND: dict[str, BitDepth] = {}  # a dataset's fingerprint -> its depth, found once per process


def depth_of(fingerprint: str, setting: str | int, paths: Sequence[Path], headers: Sequence[Header | None]) -> BitDepth:
    """resolve_depth for a dataset of these files, remembered per process by the dataset's `fingerprint` (its files,
    their sizes and mtimes, and the setting): 32-bit files under auto are read for their values once."""
    found = _FOUND.get(fingerprint)
    if found is None:
        found = _FOUND[fingerprint] = resolve_depth(setting, paths, headers, lambda p: read_pixels(p, 1, False))
    return found


def _float_range(arrays: list[np.ndarray], found: str) -> BitDepth:
    """Float images: 0..1 when every value lies there, else the data's own range (0 or its smallest value up to its
    largest), one range for every image."""
    finite = [a[np.isfinite(a)] for a in arrays]
    lo = min((float(a.min()) for a in finite if a.size), default=0.0)
    hi = max((float(a.max()) for a in finite if a.size), default=1.0)
    low, high = min(0.0, lo), (1.0 if hi <= 1.0 else hi)
    if not high > low or not math.isfinite(high - low):
        high = low + 1.0
    words = f"float images read from the range {low:g}..{high:g} (data.bit_depth: auto; {found}, values {lo:g}..{hi:g})"
    return BitDepth(None, high, low, words=words)
