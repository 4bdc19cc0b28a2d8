"""The probe maps logged as MLflow images, each with its words beside it: a trial's
`probe_images/<method>/<nn>.png` (drawn from its explanations.npz by the caller of the explain stage), and the sweep
parent's at each resolution with, at step 0, every resolution in one titled row. Pictures made with PIL from
`probe_overlays` (reports.explain_figures), at one size whatever the trial resolution, laid out and lettered for
MLflow's image card (which shows a copy at most 256 px on its longer side, centred in a square box)."""

from __future__ import annotations

import logging
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from resomap.reports.explain_figures import ProbeOverlay, probe_overlays, shared_scales

__all__ = [
    "PARENT_PROBES",
    "PROBE_IMAGE_SIZE",
    "all_resolutions",
    "beside",
    "sweep_probe_images",
    "trial_probe_images",
    "write_probe_images",
]

log = logging.getLogger(__name__)

PROBE_IMAGE_SIZE = 256  # px of the overlays drawn from the maps (any trial resolution, one size), then resized
PARENT_PROBES = 4  # probe images per model and method in the parent run's image grid (all: report.html, trial runs)


def _caption_font(width: int) -> Any:
    """A caption font about 1/22 of the image wide (FreeType's default font), else PIL's small bitmap font."""
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=max(11, width // 22))
    except (TypeError, OSError):  # Pillow < 10.1, or no FreeType
        return ImageFont.load_default()


OVERVIEW_TILE = 180  # px of each resolution's map in the parent's overview
OVERVIEW_WIDTH = 600  # px: the overview's least width
OVERVIEW_FONT = 28  # px of their words: MLflow's image card shows a copy at most 256 px on its longer side
# (mlflow.tracking.multimedia.compress_image_size)
OVERVIEW_COLUMNS = 4  # resolutions in a row of the overview


def _words(draw: Any, xy: tuple[int, int], lines: list[tuple[str, tuple[int, int, int]]], font: Any) -> None:
    step = int(getattr(font, "size", 11) * 1.2)
    for i, (text, colour) in enumerate(lines):
        draw.text((xy[0], xy[1] + step * i), text, fill=colour, font=font)


def _verdict(overlay: ProbeOverlay, prob: bool = True) -> tuple[str, tuple[int, int, int]]:
    """'right 0.93' in green or 'wrong 0.61' in red (with `prob`, the predicted class's probability)."""
    colour = (0, 110, 0) if overlay.correct else (180, 0, 0)
    said = "right" if overlay.correct else "wrong"
    return (f"{said} {overlay.prob:.2f}" if prob else said), colour


def all_resolutions(overlays: Mapping[int, ProbeOverlay]) -> np.ndarray:
    """uint8 [H, W, 3]: one probe image's map at every resolution (`overlays`: resolution -> its overlay), the
    parent run's step-0 overview: titled "all resolutions" with the true class, up to OVERVIEW_COLUMNS maps a row,
    each labelled with its resolution and right or wrong (green, red; the probabilities are in the pictures at each
    resolution), at least OVERVIEW_WIDTH wide so that one row is under 2/5 as high as wide: MLflow's image card
    centres a picture in a square box, and a low one shows whole in it."""
    from PIL import Image, ImageDraw

    font = _caption_font(OVERVIEW_FONT * 22)  # _caption_font sizes a font at 1/22 of a width
    line = int(getattr(font, "size", 11) * 1.2)
    order = sorted(overlays)
    cols = min(len(order), OVERVIEW_COLUMNS)
    gap = 12
    width = max(cols * (OVERVIEW_TILE + gap) - gap, OVERVIEW_WIDTH)
    first = overlays[order[0]]
    top = line + 4
    cell = OVERVIEW_TILE + line + gap
    canvas = Image.new("RGB", (width, top + -(-len(order) // cols) * cell - gap), "white")
    draw = ImageDraw.Draw(canvas)
    _words(draw, (2, 2), [(f"all resolutions (true {first.true})", (0, 0, 0))], font)
    for i, resolution in enumerate(order):
        x, y = (i % cols) * (OVERVIEW_TILE + gap), top + (i // cols) * cell
        tile = Image.fromarray(overlays[resolution].image)
        canvas.paste(tile.resize((OVERVIEW_TILE, OVERVIEW_TILE), Image.Resampling.LANCZOS), (x, y))
        said, colour = _verdict(overlays[resolution], prob=False)
        draw.text((x + 2, y + OVERVIEW_TILE + 2), f"{resolution} px {said}", fill=colour, font=font)
    return np.asarray(canvas)


BESIDE_SIDE = 400  # px of a probe image's square picture: its map (BESIDE_MAP) and words in the top half
BESIDE_MAP = 192
BESIDE_FONT = 20


def beside(overlay: ProbeOverlay) -> np.ndarray:
    """uint8 [BESIDE_SIDE, BESIDE_SIDE, 3]: one resolution's map with its words to its right (resolution, true
    class, predicted class, right or wrong with its probability) and under it, in grey, its dataset index and colour
    scale: a probe image's MLflow picture at step = resolution (the trial's and the parent's). MLflow 3.17's image
    card draws a picture at most 256 px wide, centred in a square box as wide as the card, below the run's name and
    params; in a run page's card (three cards a row) about the top half of the picture is in view without
    scrolling, so the map and its words fill the top 48%."""
    from PIL import Image, ImageDraw

    font = _caption_font(BESIDE_FONT * 22)
    line = int(getattr(font, "size", 11) * 1.2)
    canvas = Image.new("RGB", (BESIDE_SIDE, BESIDE_SIDE), "white")
    tile = Image.fromarray(overlay.image).resize((BESIDE_MAP, BESIDE_MAP), Image.Resampling.LANCZOS)
    canvas.paste(tile, (0, 0))
    chars = max(6, int((BESIDE_SIDE - BESIDE_MAP - 8) / (0.55 * line / 1.2)))
    lines = [(f"{overlay.resolution} px", (0, 0, 0))]
    for text in (f"true {overlay.true}", f"predicted {overlay.pred}"):
        lines += [(t, (0, 0, 0)) for t in textwrap.wrap(text, chars)]
    lines.append(_verdict(overlay))
    draw = ImageDraw.Draw(canvas)
    _words(draw, (BESIDE_MAP + 8, 2), lines, font)
    scale = "one colour scale across resolutions" if overlay.shared_scale else "a colour scale of its own"
    below = textwrap.wrap(f"dataset image #{overlay.index}; {scale}", int(BESIDE_SIDE / (0.55 * line / 1.2)))
    _words(draw, (2, BESIDE_MAP + 6), [(t, (90, 90, 90)) for t in below], font)
    return np.asarray(canvas)


def write_probe_images(maps_path: str | Path, folder: str | Path, size: int = PROBE_IMAGE_SIZE) -> list[Path]:
    """Each probe image x method of one explanations.npz, with its words (`beside`), as
    `folder/<method>/<position:02d>.png` (written atomically): what resomap.tracking logs as the trial run's MLflow
    images `probe/<method>/<nn>`. Unreadable maps are logged as a warning and give no file (the figures and the npz
    still hold them)."""
    from PIL import Image

    from resomap.atomic import write_atomic

    try:
        overlays = probe_overlays(maps_path, size=size)
    except Exception as exc:
        log.warning("probe images of %s not written: %s", maps_path, exc)
        return []
    written = []
    for overlay in overlays:
        picture = Image.fromarray(beside(overlay))
        path = Path(folder) / overlay.method / f"{overlay.position:02d}.png"
        written.append(write_atomic(path, lambda f, picture=picture: picture.save(f, format="PNG")))
    return written


def trial_probe_images(evaluation: Any, out_dir: str | Path) -> list[Path]:
    """The probe images of one evaluated model (resomap.stages.Evaluation: its explanations.npz) as
    `out_dir/probe_images/<method>/<nn>.png` (`write_probe_images`); nothing when it was not explained."""
    from resomap.records import PROBE_IMAGES_DIR

    explain = getattr(evaluation, "explain", None)
    if explain is None or not explain.maps:
        return []
    return write_probe_images(explain.maps, Path(out_dir) / PROBE_IMAGES_DIR)


def sweep_probe_images(
    maps: Mapping[tuple[str, int], str | Path], size: int = PROBE_IMAGE_SIZE, limit: int = PARENT_PROBES
) -> dict[tuple[str, str, int], dict[int, np.ndarray]]:
    """For a sweep's parent run: (model, method, probe position) -> {resolution: its map with its words
    (`beside`), and 0: the maps of every resolution in one picture (`all_resolutions`: the image card's step-0
    overview)}, the first `limit` probe positions, from `maps` ((model, resolution) -> the explanations.npz shown;
    missing files are left out). A model's raw-magnitude maps share one colour scale across its resolutions
    (`shared_scales`; grad-cam's CAMs are each on their own [0, 1]). A model whose maps cannot be read is logged
    as a warning and left out."""
    by_model: dict[str, dict[int, Path]] = {}
    for (model, resolution), path in maps.items():
        if Path(path).is_file():
            by_model.setdefault(model, {})[int(resolution)] = Path(path)
    out: dict[tuple[str, str, int], dict[int, np.ndarray]] = {}
    shown: dict[tuple[str, str, int], dict[int, ProbeOverlay]] = {}
    for model, paths in sorted(by_model.items()):
        try:
            scales = shared_scales(paths.values())
            overlays = {res: probe_overlays(path, size=size, scales=scales) for res, path in paths.items()}
        except Exception as exc:  # unreadable maps: the figures and npz artifacts still hold them
            log.warning("probe images of %s not drawn: %s", model, exc)
            continue
        for resolution, found in sorted(overlays.items()):
            for overlay in found:
                if overlay.position < limit:
                    key = (model, overlay.method, overlay.position)
                    out.setdefault(key, {})[resolution] = beside(overlay)
                    shown.setdefault(key, {})[resolution] = overlay
    for key, by_res in out.items():
        by_res[0] = all_resolutions(shown[key])
    return out
