"""A resolution whose activations cannot fit in the free memory is a one-line exit 2 before anything is created
(profiling.fits: sizes from a 32 px probe forward, scaled by the pixel count)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from resomap.cli import main
from resomap.errors import DeviceError
from resomap.models import build_model
from resomap.profiling import fits


def _tiny():
    from resomap.config import load

    return build_model("tiny_cnn", 2, 1, load(None).models)[0]


def test_sizes_scale_with_the_pixel_count():
    sizes = fits.activation_sizes(_tiny(), 1)
    assert sizes is not None and sizes.side == 32 and sizes.total > sizes.largest > 0
    at64 = sizes.bytes(64, 1, 4, training=True)
    assert at64 == pytest.approx(4 * sizes.bytes(32, 1, 4, training=True), rel=1e-6)
    assert sizes.bytes(64, 8, 2, training=True) == pytest.approx(4 * at64, rel=1e-6)  # 8x the batch, half the bytes
    assert sizes.bytes(64, 1, 4, training=False) < at64


def test_check_fits_refuses_only_what_cannot_fit(monkeypatch: pytest.MonkeyPatch):
    model = _tiny()
    monkeypatch.setattr(fits, "available_bytes", lambda device: 10 * 2**20)  # 10 MiB free
    kwargs = {"in_channels": 1, "batches": {"training": 4}, "precision": "fp32", "device": "cpu", "settings": "x"}
    fits.check_fits("tiny_cnn", model, resolutions=[16], **kwargs)
    with pytest.raises(DeviceError, match="tiny_cnn at 512 px: one training batch of 4 needs about"):
        fits.check_fits("tiny_cnn", model, resolutions=[16, 512], **kwargs)
    assert model.training  # the probe restored the mode


def test_a_model_that_refuses_the_probe_is_not_estimated():
    class Fixed(torch.nn.Module):
        def forward(self, x):
            assert x.shape[-1] == 224
            return x

    assert fits.activation_sizes(Fixed(), 3) is None


def test_train_at_a_resolution_that_cannot_fit_creates_nothing(project: Path, capsys, monkeypatch):
    monkeypatch.setattr(fits, "available_bytes", lambda device: 50 * 2**20)
    before = sorted(p.name for p in project.iterdir())
    code = main(["train", "--model", "tiny_cnn", "--resolution", "1024", "--preset", "smoke"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "tiny_cnn at 1024 px" in err[0] and "cannot" not in err[0]
    assert sorted(p.name for p in project.iterdir()) == before  # no mlflow.db, mlartifacts/, model_summaries/
