"""Image files deeper than 8 bits and EXIF orientation (resomap.data.images): 16-bit grayscale and RGB, 32-bit integer
and float images read at full precision and scaled by one depth for all the data (data.bit_depth), the resolution
cache keeping 16 bits, the mean/std on those values, the data check saying the depth, a depth the files exceed
refused in one line; each image turned upright by its EXIF orientation unless data.exif_orientation is false."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps

from conftest import run_cli, trial_summary
from resomap.config import build as build_config
from resomap.data import build
from resomap.data.cache import resize_image
from resomap.data.images import BitDepthError, header
from resomap.errors import DataError

pytestmark = pytest.mark.usefixtures("fresh_memory_cache")

DIM, BRIGHT = 1500, 3000  # the classes' mean brightness on a 12-bit scale (0..4095)


def _noise_folder(root: Path, eight_bit: bool = False, per_class: int = 40, noise: float = 300.0) -> Path:
    """2 x `per_class` 24 px noise images whose classes differ only in mean brightness (DIM, BRIGHT on 12 bits;
    `noise` the pixels' sd: at 300 not one pixel in 10^4 is under 256), saved as 16-bit PNGs (mode I;16) or,
    `eight_bit`, the same values scaled to 8-bit PNGs (mode L)."""
    rng = np.random.default_rng(7)
    for name, mean in (("bright", BRIGHT), ("dim", DIM)):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            values = np.clip(np.rint(rng.normal(mean, noise, (24, 24))), 0, 4095)
            pixels = np.rint(values * 255 / 4095).astype(np.uint8) if eight_bit else values.astype(np.uint16)
            Image.fromarray(pixels).save(root / name / f"{i:02d}.png")
    return root


def _cfg(tmp_path: Path, root: Path, **data):
    return build_config(
        {
            "data": {"dataset": "imagefolder", "imagefolder": {"root": str(root)}, **data},
            "experiment": {"output_dir": str(tmp_path)},
            "explainability": {"probe_size": 4},
        }
    )


def _test_accuracy(root: Path, model: str, res: int) -> float:
    """The trial's test accuracy at its own resolution, from the predictions.csv the sweep wrote."""
    with (trial_summary(root, model, res) / "predictions.csv").open(newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if int(r["test_resolution"]) == res]
    assert rows
    return sum(r["label"] == r["prediction"] for r in rows) / len(rows)


@pytest.mark.parametrize("eight_bit", [False, True], ids=["16-bit", "8-bit"])
def test_classes_that_differ_only_in_brightness_are_told_apart_in_16_and_8_bit(project: Path, capsys, eight_bit):
    """A real sweep of pixel_logreg on 2 x 40 noise images whose classes differ only in brightness (means 1500 and
    3000 on a 12-bit scale): saved as 16-bit PNGs they reached 0.500 when 16-bit images were cut to 8 bits (every
    pixel over 255 became 255: measured on this very data before the fix); read at full precision they reach >= 0.9,
    as the same images saved as 8-bit do. The
    sweep says the depth it found (16-bit only) and result.json records it."""
    data = _noise_folder(project / "data", eight_bit=eight_bit)
    args = ["sweep", "--preset", "smoke", "sweep.models=[pixel_logreg]", "sweep.resolutions=[16]"]
    args += ["data.dataset=imagefolder", f"data.imagefolder.root={data}", f"experiment.output_dir={project}"]
    args += ["mlflow.enabled=false", "profiling.enabled=false", "explainability.enabled=false", "stats.resamples=200"]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    assert _test_accuracy(project, "pixel_logreg", 16) >= 0.9
    record = json.loads((trial_summary(project, "pixel_logreg", 16) / "result.json").read_text())["data"]
    if eight_bit:
        assert record["bit_depth"] == "8-bit images (data.bit_depth: auto; 80 8-bit files, mode L)"
        assert "data: " not in out
    else:
        words = "16-bit images, 0..65535 read as 0..1 (data.bit_depth: auto; 80 16-bit files, mode I;16)"
        assert record["bit_depth"] == words and f"data: {words}\n" in out


def test_the_cache_keeps_16_bits_and_the_mean_and_std_are_of_the_data_values(tmp_path: Path):
    """Flat 16-bit images (one value each, which resizing keeps): the cache holds them as uint16 at full precision,
    never scaled per image, and the normaliser's mean and std are those of the files' values over the training
    images, on 0..1 of the data's depth (65535 under auto, 4095 with data.bit_depth 12)."""
    from resomap.data.registry import open_dataset

    root = tmp_path / "flat"
    for name, base in (("a", 100), ("b", 3000)):
        (root / name).mkdir(parents=True)
        for i in range(12):
            Image.fromarray(np.full((20, 20), base + 37 * i, dtype=np.uint16)).save(root / name / f"{i:02d}.png")
    for setting, white in (("auto", 65535), (12, 4095)):
        cfg = _cfg(tmp_path, root, bit_depth=setting)
        bundle = build(cfg, 8, seed=0)
        paths = open_dataset(cfg.data).paths
        stored = np.asarray([int(np.asarray(Image.open(paths[i])).flat[0]) for i in bundle.splits["train"]])
        expected = np.rint(stored * (65535 / white))  # the file's value on the cache's 0..65535
        assert bundle._entry.images.dtype.itemsize == 2  # uint16
        assert np.array_equal(bundle.images("train").numpy()[:, 0].reshape(len(stored), -1).max(axis=1), expected)
        assert np.array_equal(bundle.images("train").numpy()[:, 0].reshape(len(stored), -1).min(axis=1), expected)
        assert bundle.mean.item() == pytest.approx(expected.mean() / 65535, rel=1e-6)
        assert bundle.std.item() == pytest.approx(expected.std() / 65535, rel=1e-5)
        x, _ = next(iter(bundle.test))
        assert x.dtype.is_floating_point
        assert bundle.normalize(bundle.images("test")).numpy() == pytest.approx(x.numpy())


def test_a_stale_8_bit_cache_entry_is_not_read_for_16_bit_data(tmp_path: Path):
    """The disk cache of 16-bit data holds uint16; an entry of uint8 found where it is looked up (an 8-bit cache of
    the same files, as the cache held them before) is not served: the images are decoded again at 16 bits."""
    from resomap.data.cache import clear_memory_cache

    root = _noise_folder(tmp_path / "data", per_class=8)
    first = build(_cfg(tmp_path, root), 8, seed=0)
    npy = next((tmp_path / ".cache").rglob("8.npy"))
    assert np.load(npy).dtype == np.uint16
    np.save(npy, (np.load(npy) >> 8).astype(np.uint8))  # an 8-bit entry under the key
    clear_memory_cache()
    again = build(_cfg(tmp_path, root), 8, seed=0)
    assert np.array_equal(again.images("train").numpy(), first.images("train").numpy())
    assert np.load(npy).dtype == np.uint16  # decoded again and written back at 16 bits


def test_deep_resizing_filters_as_the_8_bit_path_does():
    """uint16 images are resized with the filter of uint8 ones (PIL's antialiased bilinear), in float: an 8-bit
    pattern stretched to 16 bits (x 257) comes out as the 8-bit result x 257, to within one 8-bit level."""
    rng = np.random.default_rng(3)
    pattern = rng.integers(0, 256, (37, 29), dtype=np.uint8)
    for side in (8, 16, 29, 64):
        small = resize_image(pattern, side, 1).astype(np.float64)
        deep = resize_image(pattern.astype(np.uint16) * 257, side, 1)
        assert deep.dtype == np.uint16 and deep.shape == small.shape
        gap = np.abs(deep / 257 - small)  # PIL's 8-bit filter rounds after each of its two passes
        assert gap.max() <= 1.0
    rgb = rng.integers(0, 65536, (20, 20, 3), dtype=np.uint16)
    gray = resize_image(rgb, 20, 1)[0].astype(np.float64)
    assert np.allclose(gray, rgb @ np.asarray([0.299, 0.587, 0.114]), atol=0.51)  # PIL's L weights


@pytest.mark.parametrize("mode", ["L", "RGB", "I;16"])
def test_exif_orientation_turns_each_image_as_pillow_does_and_can_be_turned_off(tmp_path: Path, mode: str):
    """A 24 x 20 image saved with each EXIF orientation (1-8) loads as Pillow's ImageOps.exif_transpose shows it
    (turned, mirrored), at its own depth; with data.exif_orientation false it loads as stored."""
    from resomap.data.registry import open_dataset

    base = np.arange(24 * 20).reshape(24, 20)
    pixels = {"L": base.astype(np.uint8), "RGB": np.stack([base % 256, base // 3 % 256, base * 7 % 256], -1)}
    arr = pixels.get(mode, base.astype(np.uint16) * 101).astype(np.uint16 if mode == "I;16" else np.uint8)
    root = tmp_path / "exif"
    for code in range(1, 9):
        (root / f"c{code}").mkdir(parents=True)
        exif = Image.Exif()
        exif[0x0112] = code
        Image.fromarray(arr).save(root / f"c{code}" / "img.png", exif=exif)
    for on in (True, False):
        raw = open_dataset(_cfg(tmp_path, root, exif_orientation=on).data)
        for i, path in enumerate(raw.paths):
            with Image.open(path) as im:
                upright = np.asarray(ImageOps.exif_transpose(im) if on else im)
            got = raw.load(i)  # (16-bit values under auto: 0..65535 as stored)
            assert got.dtype == arr.dtype and got.shape == upright.shape and np.array_equal(got, upright), (path, on)
    keys = {open_dataset(_cfg(tmp_path, root, exif_orientation=on).data).fingerprint for on in (True, False)}
    assert len(keys) == 2  # the cached pixels of the two settings are kept apart


def test_16_bit_rgb_is_read_at_full_precision(tmp_path: Path):
    """A 16-bit per channel RGB PNG and TIFF (which Pillow reads as 8 bits) is read with all 16 bits, as RGB."""
    import cv2

    from resomap.data.registry import open_dataset

    rng = np.random.default_rng(5)
    root = tmp_path / "rgb16"
    stored = {}
    for name in ("a", "b"):
        (root / name).mkdir(parents=True)
        for suffix in (".png", ".tif"):
            stored[name + suffix] = rgb = rng.integers(0, 65536, (18, 22, 3), dtype=np.uint16)
            assert cv2.imwrite(str(root / name / f"x{suffix}"), rgb[..., ::-1])  # OpenCV writes BGR
    raw = open_dataset(_cfg(tmp_path, root).data)
    assert raw.channels == 3 and raw.depth.bits == 16 and "mode RGB" in raw.depth.words
    for i, path in enumerate(raw.paths):
        assert header(path).kind == "16" and np.array(Image.open(path)).dtype == np.uint8  # what Pillow gives
        assert np.array_equal(raw.load(i), stored[path.parent.name + path.suffix])


def test_32_bit_integer_and_float_images_are_scaled_by_the_datas_range(tmp_path: Path):
    """Mode I (32-bit integer) images under auto: the data's largest value rounded up to 12, 16 or 32 bits, said in
    the depth's words; mode F (float): 0..1 when every value lies there, else the data's range; one scale for all."""
    from resomap.data.registry import open_dataset

    def folder(name: str, images: list[np.ndarray]) -> Path:
        root = tmp_path / name
        for k, a in enumerate(images):
            (root / f"c{k % 2}").mkdir(parents=True, exist_ok=True)
            Image.fromarray(a).save(root / f"c{k % 2}" / f"{k}.tif")
        return root

    ints = [np.full((8, 8), v, dtype=np.int32) for v in (10, 3000, 700, 2500)]
    raw = open_dataset(_cfg(tmp_path, folder("int12", ints)).data)
    assert raw.depth.bits == 12 and "the largest value 3000" in raw.depth.words
    assert raw.load(raw.paths.index(next(p for p in raw.paths if p.name == "1.tif"))).max() == round(
        3000 * 65535 / 4095
    )
    big = [np.full((8, 8), v, dtype=np.int32) for v in (10, 70000, 700, 2500)]
    assert open_dataset(_cfg(tmp_path, folder("int32", big)).data).depth.bits == 32
    unit = [np.full((8, 8), v, dtype=np.float32) for v in (0.0, 0.25, 0.5, 1.0)]
    raw = open_dataset(_cfg(tmp_path, folder("unit", unit)).data)
    assert (raw.depth.low, raw.depth.high) == (0.0, 1.0)
    assert sorted(int(raw.load(i).max()) for i in range(4)) == [0, 16384, 32768, 65535]  # never stretched per image
    wide = [np.full((8, 8), v, dtype=np.float32) for v in (-50.0, 0.0, 100.0, 150.0)]
    raw = open_dataset(_cfg(tmp_path, folder("wide", wide)).data)
    assert (raw.depth.low, raw.depth.high) == (-50.0, 150.0) and "-50..150" in raw.depth.words
    with pytest.raises(DataError, match=r"float values \(mode F\), which have no bit depth"):
        open_dataset(_cfg(tmp_path, tmp_path / "unit", bit_depth=16).data)


def test_a_configured_depth_the_files_exceed_is_refused(tmp_path: Path):
    """data.bit_depth 8 with 16-bit files: refused when the data is opened, from the headers; 12 with a file
    holding 4096: refused when the file is read (never skipped as an unreadable image)."""
    from resomap.data.verify import check

    root = _noise_folder(tmp_path / "data", per_class=6)
    with pytest.raises(DataError, match=r"data.bit_depth is 8 but .*\.png is a 16-bit image; set data.bit_depth"):
        check(_cfg(tmp_path, root, bit_depth=8), 0)
    Image.fromarray(np.full((24, 24), 4096, dtype=np.uint16)).save(root / "dim" / "03.png")
    with pytest.raises(
        BitDepthError, match=r"data.bit_depth is 12 but .*03\.png holds values up to 4096 \(over 4095\)"
    ):
        check(_cfg(tmp_path, root, bit_depth=12, max_bad_fraction=0.5), 0)
    assert check(_cfg(tmp_path, root, bit_depth=16), 0).bits == 16


TORCH_PROBE = """
import json, sys
from resomap.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as exc:
    rc = exc.code
print(json.dumps({"rc": rc, "torch": "torch" in sys.modules}), file=sys.stderr)
"""


@pytest.mark.parametrize(("depth", "needle"), [(8, "is a 16-bit image"), (12, "holds values up to 4096")])
def test_the_cli_refuses_a_depth_the_files_exceed_in_one_line_before_torch(project: Path, depth: int, needle: str):
    import subprocess
    import sys

    root = _noise_folder(project / "data", per_class=6)
    Image.fromarray(np.full((24, 24), 4096, dtype=np.uint16)).save(root / "dim" / "03.png")
    args = ["sweep", "--preset", "smoke", "data.dataset=imagefolder", "data.imagefolder.root=data"]
    proc = subprocess.run(
        [sys.executable, "-c", TORCH_PROBE, *args, f"data.bit_depth={depth}"], capture_output=True, text=True
    )
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    errors = [line for line in proc.stderr.splitlines() if line.startswith("resomap: error:")]
    assert report == {"rc": 2, "torch": False} and len(errors) == 1 and needle in errors[0], proc.stderr
    assert sorted(p.name for p in project.iterdir()) == ["configs", "data"]  # nothing written


def test_the_dry_run_says_the_depth_it_found(project: Path, capsys):
    root = _noise_folder(project / "data", per_class=14)
    code, out, err = run_cli(
        ["sweep", "--dry-run", "--preset", "smoke", "data.dataset=imagefolder", f"data.imagefolder.root={root}"],
        capsys,
    )
    assert code == 0, err
    assert "data: 16-bit images, 0..65535 read as 0..1 (data.bit_depth: auto; 28 16-bit files, mode I;16)" in out
