"""Checkpoint io: atomic writes, truncated files, pickled code refused (read before torch.load by
resomap.checkpoint_files, then by the safe loader), metadata mismatch."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections import OrderedDict
from pathlib import Path

import pytest
import torch

from conftest import bad_checkpoints
from resomap import checkpoint_files
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


# ---------------------------------------------------------------- read before torch.load (resomap.checkpoint_files)

BAD = ["system-zip", "system-p2", "system-p4", "eval-zip", "eval-p2", "eval-p4", "half", "plain-p4"]


@pytest.mark.parametrize("kind", BAD)
def test_a_bad_file_is_refused_before_torch_load_naming_its_cause(tmp_path: Path, monkeypatch, kind: str):
    """Pickled code (in a torch zip, as a bare pickle of protocol 2 or 4), a torch.save file cut in half and a
    plain pickle: one line naming the cause, raised by the scan before torch.load is called, no warning, no code
    run."""
    path, words = bad_checkpoints(tmp_path)[kind]

    def never(*args, **kwargs):
        raise AssertionError("torch.load reached")

    monkeypatch.setattr(torch, "load", never)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(CheckpointError) as err:
            load_checkpoint(path)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and words in message and "\n" not in message, message
    assert not caught, [str(w.message) for w in caught]
    assert not (tmp_path / "pwned").exists()


def test_the_scan_imports_no_torch(tmp_path: Path):
    files = [str(path) for path, _ in bad_checkpoints(tmp_path).values()]
    code = "import sys; from resomap.checkpoint_files import refusal; "
    code += "print(all(refusal(p) for p in sys.argv[1:]), 'torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code, *files], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["True", "False"], done.stdout + done.stderr


def test_every_global_and_opcode_torchs_safe_loader_accepts_passes_the_scan_and_code_does_not():
    """The scan's lists are torch's (torch/_weights_only_unpickler.py): what torch reads passes, so no checkpoint it
    loads is refused here; functions that share a stem with a dtype, and code, are refused."""
    import inspect
    import re

    from torch import _weights_only_unpickler as safe

    assert [name for name in safe._get_allowed_globals() if not checkpoint_files.allowed_global(name)] == []
    read = set(re.findall(r"\b([A-Z][A-Z0-9_]*)\[0\]", inspect.getsource(safe.Unpickler.load)))
    assert read == checkpoint_files.TORCH_OPCODES
    for name in ("torch.float_power", "torch.int_repr", "torch.load", "torch.hub.load", "torch._C._set_print_stack",
                 "os.system", "posix.system", "builtins.eval", "builtins.getattr", "subprocess.Popen",
                 "numpy.core.multiarray._reconstruct", "torch.serialization.load"):  # fmt: skip
        assert not checkpoint_files.allowed_global(name), name


def test_a_full_resomap_checkpoint_passes_the_scan_and_loads(tmp_path: Path):
    """What the trainer saves (a model's state_dict with its buffers, optimizer and scheduler state, the RNG, an
    OrderedDict, bytes, meta of str / int / float / bool / None / lists) passes the scan and loads."""
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 6 * 6, 2))  # fmt: skip
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-2, total_steps=10)
    model(torch.randn(2, 1, 8, 8)).sum().backward()
    optimizer.step()
    scheduler.step()
    payload = {
        **_payload(),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": rng_state(),
        "callbacks": {"early_stopping": OrderedDict(best=0.5, wait=1), "blob": b"\x00\x01"},
        "history": [{"epoch": 0, "val/accuracy": 0.5, "lr": [1e-3], "nan": None, "ok": True}],
        "should_stop": False,
    }
    path = save_checkpoint(tmp_path / "full.pt", payload)
    assert checkpoint_files.refusal(path) is None
    loaded = load_checkpoint(path)
    assert torch.equal(loaded["model"]["3.weight"], model.state_dict()["3.weight"])
    assert loaded["callbacks"]["early_stopping"] == OrderedDict(best=0.5, wait=1)


def test_torch_saves_legacy_format_and_other_protocols(tmp_path: Path):
    """torch.save's legacy (non-zip) format passes and loads; a torch zip written with pickle protocol 4, which the
    safe loader cannot read, is named as such; a torch.save file cut inside its zip members too."""
    legacy = tmp_path / "legacy.pt"
    torch.save({"w": torch.ones(3)}, legacy, _use_new_zipfile_serialization=False)
    assert checkpoint_files.refusal(legacy) is None and torch.equal(load_checkpoint(legacy)["w"], torch.ones(3))
    cut = tmp_path / "legacy-cut.pt"
    cut.write_bytes(legacy.read_bytes()[:40])
    assert "truncated or corrupt" in checkpoint_files.refusal(cut)
    proto4 = tmp_path / "p4.pt"
    torch.save({"w": torch.ones(3)}, proto4, pickle_protocol=4)
    assert "written with pickle protocol 4" in checkpoint_files.refusal(proto4)
