"""Checkpoint io: atomic writes, truncated files, pickled code refused, metadata mismatch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from resomap.errors import CheckpointError
from resomap.training.checkpoint import (
    FORMAT,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
    write_json_atomic,
)


def _payload(value: float = 1.0, **meta) -> dict:
    return {
        "format": FORMAT,
        "meta": {"model": "resnet18", "resolution": 64, "num_classes": 2, **meta},
        "model": {"w": torch.full((3,), value)},
        "epoch": 0,
    }


def test_roundtrip(tmp_path: Path):
    path = save_checkpoint(tmp_path / "a.pt", _payload(2.0))
    loaded = load_checkpoint(path, expect={"model": "resnet18", "resolution": 64, "num_classes": 2})
    assert torch.equal(loaded["model"]["w"], torch.full((3,), 2.0))


def test_crash_during_replace_keeps_old_file_and_no_temp(tmp_path: Path, monkeypatch):
    path = save_checkpoint(tmp_path / "a.pt", _payload(1.0))

    def boom(src, dst):
        raise OSError("simulated crash")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        save_checkpoint(path, _payload(5.0))
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pt"]
    assert torch.equal(load_checkpoint(path)["model"]["w"], torch.full((3,), 1.0))


def test_crash_during_write_keeps_old_json(tmp_path: Path, monkeypatch):
    path = write_json_atomic(tmp_path / "m.json", {"a": 1})
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError("disk gone")))
    with pytest.raises(OSError):
        write_json_atomic(path, {"a": 2})
    monkeypatch.undo()
    assert path.read_text().replace(" ", "").replace("\n", "") == '{"a":1}'
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]


def test_missing_file(tmp_path: Path):
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "nope.pt")


@pytest.mark.parametrize("keep", [0.5, 0.9, 0.0])
def test_truncated_file(tmp_path: Path, keep: float):
    path = save_checkpoint(tmp_path / "a.pt", _payload())
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_checkpoint(path)


class Evil:
    marker: str = ""

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def test_pickled_code_is_refused_and_not_run(tmp_path: Path):
    marker = tmp_path / "pwned"
    evil = Evil()
    evil.marker = str(marker)
    path = tmp_path / "evil.pt"
    torch.save({"format": FORMAT, "model": {}, "x": evil}, path)
    assert not marker.exists()
    with pytest.raises(CheckpointError, match=r"refused: .*pickled code"):
        load_checkpoint(path)
    assert not marker.exists()


def test_function_in_payload_is_refused(tmp_path: Path):
    path = tmp_path / "fn.pt"
    torch.save({"format": FORMAT, "fn": os.getcwd}, path)
    with pytest.raises(CheckpointError, match="refused"):
        load_checkpoint(path)


def test_expect_mismatch_names_both_sides(tmp_path: Path):
    path = save_checkpoint(tmp_path / "a.pt", _payload())
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(path, expect={"model": "tiny_cnn", "resolution": 32, "num_classes": 2})
    msg = str(err.value)
    assert "resnet18 at 64 px with 2 classes" in msg
    assert "tiny_cnn at 32 px with 2 classes" in msg
    assert "\n" not in msg


def test_not_a_dict(tmp_path: Path):
    path = tmp_path / "t.pt"
    torch.save(torch.zeros(2), path)
    with pytest.raises(CheckpointError, match="not a ResoMap checkpoint"):
        load_checkpoint(path)


def test_rng_state_roundtrip_through_weights_only(tmp_path: Path):
    import random

    import numpy as np

    path = save_checkpoint(tmp_path / "rng.pt", {"format": FORMAT, "rng": rng_state()})
    expected = (random.random(), float(np.random.rand()), float(torch.rand(())))
    set_rng_state(load_checkpoint(path)["rng"])
    assert (random.random(), float(np.random.rand()), float(torch.rand(()))) == expected
