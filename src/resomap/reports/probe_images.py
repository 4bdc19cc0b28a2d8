"""The captioned probe maps logged as MLflow images: a trial's `probe_images/<method>/<nn>.png` (drawn from its
explanations.npz by the caller of the explain stage) and the sweep parent's grid of every resolution side by side.
Pictures made with PIL from `probe_overlays` (reports.explain_figures), at one size whatever the trial resolution."""

from __future__ import annotations

import logging
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from resomap.reports.explain_figures import ProbeOverlay, probe_overlays, shared_scales

__all__ = [
    "PARENT_PROBES",
    "PROBE_IMAGE_SIZE",
    "captioned",
    "side_by_side",
    "sweep_probe_images",
    "trial_probe_images",
    "write_probe_images",
]

log = logging.getLogger(__name__)

PROBE_IMAGE_SIZE = 256  # px of the captioned probe maps logged as MLflow images (any trial resolution, one size)
PARENT_PROBES = 4  # probe images per model and method in the parent run's image grid (all: report.html, trial runs)


def _caption_font(width: int) -> Any:
    """A caption font about 1/22 of the image wide (FreeType's default font), else PIL's small bitmap font."""
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=max(11, width // 22))
    except (TypeError, OSError):  # Pillow < 10.1, or no FreeType
        return ImageFont.load_default()


def captioned(overlay: ProbeOverlay) -> np.ndarray:
    """uint8 [H, W, 3]: the overlay with its caption (truth, prediction, probability, right or wrong) in a strip
    below it."""

    from PIL import Image, ImageDraw

    image = Image.fromarray(overlay.image)
    width, height = image.size
    font = _caption_font(width)
    size = getattr(font, "size", 11)
    step = int(size * 1.2)
    lines = textwrap.wrap(str(overlay.caption), max(8, int(width / (0.55 * size)))) or [""]
    canvas = Image.new("RGB", (width, height + step * len(lines) + 4), "white")
    canvas.paste(image, (0, 0))
    draw = ImageDraw.Draw(canvas)
    colour = (0, 110, 0) if overlay.correct else (180, 0, 0)
    for i, line in enumerate(lines):
        draw.text((2, height + 2 + step * i), line, fill=colour, font=font)
    return np.asarray(canvas)


def side_by_side(pictures: Sequence[np.ndarray], gap: int = 6) -> np.ndarray:
    """uint8 [H, W, 3]: captioned pictures in a row, top-aligned on white (the parent run's step-0 overview of a
    probe map at every resolution)."""
    height = max(p.shape[0] for p in pictures)
    width = sum(p.shape[1] for p in pictures) + gap * (len(pictures) - 1)
    row = np.full((height, width, 3), 255, dtype=np.uint8)
    x = 0
    for p in pictures:
        row[: p.shape[0], x : x + p.shape[1]] = p
        x += p.shape[1] + gap
    return row


def write_probe_images(maps_path: str | Path, folder: str | Path, size: int = PROBE_IMAGE_SIZE) -> list[Path]:
    """Each probe image x method of one explanations.npz, captioned, as `folder/<method>/<position:02d>.png`
    (written atomically): what resomap.tracking logs as the trial run's MLflow images `probe/<method>/<nn>`.
    Unreadable maps are logged as a warning and give no file (the figures and the npz still hold them)."""
    from PIL import Image

    from resomap.atomic import write_atomic

    try:
        overlays = probe_overlays(maps_path, size=size)
    except Exception as exc:
        log.warning("probe images of %s not written: %s", maps_path, exc)
        return []
    written = []
    for overlay in overlays:
        picture = Image.fromarray(captioned(overlay))
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
    """For a sweep's parent run: (model, method, probe position) -> {resolution: captioned map, and 0: the maps
    of every resolution side by side (the image card's step-0 overview)}, the first `limit` probe positions, from
    `maps` ((model, resolution) -> the explanations.npz shown; missing files are left out). A model's
    raw-magnitude maps share one colour scale across its resolutions (`shared_scales`; grad-cam's CAMs are each on
    their own [0, 1]). A model whose maps cannot be read is logged as a warning and left out."""
    by_model: dict[str, dict[int, Path]] = {}
    for (model, resolution), path in maps.items():
        if Path(path).is_file():
            by_model.setdefault(model, {})[int(resolution)] = Path(path)
    out: dict[tuple[str, str, int], dict[int, np.ndarray]] = {}
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
                    out.setdefault((model, overlay.method, overlay.position), {})[resolution] = captioned(overlay)
    for by_res in out.values():
        by_res[0] = side_by_side([by_res[r] for r in sorted(by_res)])
    return out
