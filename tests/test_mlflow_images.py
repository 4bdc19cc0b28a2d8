"""Step-indexed images logged in one upload (Tracker.log_images, resomap.tracking.images) are the files MLflow's own
MlflowClient.log_image(key=..., step=...) writes: the same names but for the time stamp and the random id, the same
PNG pixels, the same thumbnail, the same run tag. An MLflow that changes its layout fails here."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from resomap.config import load

KEY, STEP = "probe/lite0_linear/gradcam/03", 96


def _files(client, run_id: str) -> dict[str, Path]:
    """The run's files under images/, by name with the time stamp and id written as <t> and <id>."""
    folder = Path(client.get_run(run_id).info.artifact_uri.removeprefix("file://")) / "images"
    return {re.sub(r"\+timestamp\+\d+\+[0-9a-f-]{36}", "+timestamp+<t>+<id>", p.name): p for p in folder.iterdir()}


def _pixels(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def test_images_logged_in_one_upload_are_the_files_mlflows_log_image_writes(project: Path):
    from PIL import Image

    from resomap.tracking.mlflow_store import Tracker

    rng = np.random.default_rng(0)
    picture = Image.fromarray(rng.integers(0, 256, (120, 90, 3), dtype=np.uint8))
    rgba = project / "overlay.png"
    Image.fromarray(rng.integers(0, 256, (50, 70, 4), dtype=np.uint8)).save(rgba)
    tracker = Tracker(load("configs", "smoke", []))
    ours, theirs = tracker.start_run("ours"), tracker.start_run("theirs")
    tracker.log_images(ours, [(KEY, STEP, picture), ("segmentation/overlays", 64, rgba)])
    with Image.open(rgba) as opened:
        overlay = opened.convert("RGB")
    for key, step, image in ((KEY, STEP, picture), ("segmentation/overlays", 64, overlay)):
        tracker.client.log_image(theirs, image, key=key, step=step, synchronous=True)

    mine, mlflows = _files(tracker.client, ours), _files(tracker.client, theirs)
    assert sorted(mine) == sorted(mlflows) and len(mine) == 4, (sorted(mine), sorted(mlflows))
    for name in mine:
        assert np.array_equal(_pixels(mine[name]), _pixels(mlflows[name])), name
    assert {n for n in mine if n.endswith(".png")} == {
        "probe~lite0_linear~gradcam~03+step+96+timestamp+<t>+<id>.png",
        "segmentation~overlays+step+64+timestamp+<t>+<id>.png",
    }
    tag = "mlflow.loggedImages"
    assert tracker.client.get_run(ours).data.tags[tag] == tracker.client.get_run(theirs).data.tags[tag]
    # a PNG in RGB is copied as it is: its bytes, not encoded again
    plain = project / "plain.png"
    picture.save(plain)
    copy = tracker.start_run("copy")
    tracker.log_images(copy, [(KEY, STEP, plain)])
    (png,) = [p for n, p in _files(tracker.client, copy).items() if n.endswith(".png")]
    assert png.read_bytes() == plain.read_bytes()


def test_a_key_log_image_refuses_is_refused_before_anything_is_written(tmp_path: Path):
    from PIL import Image

    from resomap.tracking.images import write_step_images

    with pytest.raises(ValueError, match="image key 'probe/a:b'"):
        write_step_images(tmp_path, [("probe/a:b", 32, Image.new("RGB", (4, 4)))])
    assert not list(tmp_path.iterdir())


def test_an_image_file_that_does_not_read_is_left_out_with_a_warning(tmp_path: Path, caplog):
    from PIL import Image

    from resomap.tracking.images import write_step_images

    good, cut = tmp_path / "good.png", tmp_path / "cut.png"
    Image.new("RGB", (8, 8), (0, 128, 255)).save(good)
    cut.write_bytes(good.read_bytes()[:20])
    with caplog.at_level("WARNING", logger="resomap"):
        assert write_step_images(tmp_path / "images", [("probe/a/00", 32, cut), ("probe/a/01", 32, good)]) == 1
    assert sorted(p.name.split("+")[0] for p in (tmp_path / "images").iterdir()) == ["probe~a~01", "probe~a~01"]
    assert any("cut.png not logged" in r.getMessage() for r in caplog.records)
