"""Step-indexed images (MLflow's image grid, whose step slider is ResoMap's resolution) written as MLflow's
`MlflowClient.log_image(key=..., step=...)` writes them, many in one artifact upload.

MLflow has no batch call for such images: each log_image writes its run tag again and uploads its PNG and its WebP
thumbnail one by one. A trial logs its probe maps (36 in the quickstart) and a sweep's parent its maps at every
resolution (288), so `write_step_images` lays the files out in a folder exactly as log_image names them
(images/<key, / written ~>+step+<step>+timestamp+<ms>+<uuid>.png, and +compressed.webp, the thumbnail MLflow's own
compress_image_size makes) and the Tracker uploads the folder once and sets the tag once (Tracker.log_images).
tests/test_mlflow_images.py holds this to what log_image writes, file by file, so an MLflow that changes its layout
fails there."""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

PNG_LEVEL = 1  # zlib level of the PNGs: a 400 px map 3.8 ms, 9.8 ms at 6 (MLflow's default)
_KEY = re.compile(r"^[a-zA-Z0-9_\-./ ]+$")  # the characters log_image accepts in a key


def step_image_stem(key: str, step: int, timestamp: int) -> str:
    """The file name (without suffix) log_image gives the image of `key` at `step`."""
    if not _KEY.match(key):
        raise ValueError(f"image key {key!r}: only letters, digits, _ - . / and spaces")
    return f"{key.replace('/', '~')}+step+{int(step)}+timestamp+{int(timestamp)}+{uuid.uuid4()}"


def write_step_images(folder: Path, images: Iterable[tuple[str, int, Any]]) -> int:
    """Each (key, step, image) of `images` into `folder` (the run's images/ artifact folder, to be uploaded), as
    log_image writes it; `image` a PIL image or the path of an image file (a PNG in RGB is copied as it is, not
    encoded again; a file that does not read is left out, with a warning: the npz and the figures still hold its
    maps). Returns how many were written."""
    from mlflow.tracking.multimedia import compress_image_size
    from mlflow.utils.time import get_current_time_millis
    from PIL import Image

    images = list(images)
    stems = [step_image_stem(key, step, get_current_time_millis()) for key, step, _ in images]  # every key checked
    folder.mkdir(parents=True, exist_ok=True)
    written = 0
    for stem, (_, _, image) in zip(stems, images):
        png = folder / f"{stem}.png"
        if isinstance(image, (str, Path)):
            try:
                with Image.open(image) as opened:
                    picture = opened.convert("RGB") if opened.mode != "RGB" else opened.copy()
                    same = opened.format == "PNG" and opened.mode == "RGB"
            except OSError as exc:
                log.warning("%s not logged: %s", image, exc)
                continue
            if same:
                shutil.copyfile(image, png)
            else:
                picture.save(png, compress_level=PNG_LEVEL)
        else:
            picture = image
            picture.save(png, compress_level=PNG_LEVEL)
        compress_image_size(picture).save(folder / f"{stem}+compressed.webp")
        written += 1
    return written


def upload_step_images(client: Any, run_id: str, images: list[tuple[str, int, Any]]) -> None:
    """`images` (key, step, image) logged to run `run_id` through MlflowClient `client`: written in a fresh folder
    (`write_step_images`; a retry starts again from nothing), uploaded as the run's images/ at once, and the run
    tagged as holding images (the tag log_image sets)."""
    from mlflow.utils.mlflow_tags import MLFLOW_LOGGED_IMAGES

    with tempfile.TemporaryDirectory(prefix="resomap-images-") as tmp:
        if not write_step_images(Path(tmp), images):
            return
        client.log_artifacts(run_id, tmp, "images")
    client.set_tag(run_id, MLFLOW_LOGGED_IMAGES, True)
