"""Checkpoint files: atomic writes, safe loads (weights_only), and RNG state as plain tensors/lists.

Payload layout (only tensors, dicts, lists, str, int, float, bool and None inside, so weights_only loading works):
{"format": FORMAT, "meta": {...}, "model": state_dict, "optimizer": ..., "scheduler": ..., "scaler": ...,
 "callbacks": {...}, "rng": {...}, "epoch": int, "history": [...], "should_stop": bool}
"""

from __future__ import annotations

import json
import logging
import pickle
import random
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from resomap.atomic import write_atomic
from resomap.checkpoint_files import check as check_file
from resomap.errors import CheckpointError

log = logging.getLogger(__name__)

FORMAT = "resomap-ckpt-1"
_MATCH_KEYS = ("model", "resolution", "num_classes")


def save_checkpoint(path: str | Path, payload: Mapping[str, Any]) -> Path:
    """Save `payload` with torch.save atomically: a crash leaves the old file or the new one, never a torn one."""
    return write_atomic(path, lambda fh: torch.save(dict(payload), fh))


def write_json_atomic(path: str | Path, data: Any) -> Path:
    text = json.dumps(data, indent=2, sort_keys=True, default=str).encode("utf-8")
    return write_atomic(path, lambda fh: fh.write(text))


def _forbidden_global(message: str) -> str | None:
    """The global (a function or class) torch's safe loader refused, named in its message ("Unsupported global:
    GLOBAL builtins.print", "unsupported GLOBAL posix.system"); None when it failed on something else (random or
    torn bytes: "Unsupported operand 149")."""
    found = re.search(r"\bGLOBAL\s+([\w.]+)", message)
    return found.group(1) if found else None


def _describe(meta: Mapping[str, Any]) -> str:
    return f"{meta.get('model', '?')} at {meta.get('resolution', '?')} px with {meta.get('num_classes', '?')} classes"


def load_checkpoint(
    path: str | Path, expect: Mapping[str, Any] | None = None, map_location: str | torch.device = "cpu"
) -> dict:
    """Load a checkpoint with torch.load(weights_only=True); problems raise one-line CheckpointErrors.

    `expect` (model, resolution, num_classes; any subset) must match the checkpoint's meta.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found; check the path or train first")
    check_file(path)  # format and pickled globals read first (one line naming the cause, no torch warnings)
    try:  # the safe loader stays the second line of defence
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        code = _forbidden_global(str(exc))
        if code is None:
            raise CheckpointError(f"{path}: corrupt or not a checkpoint; delete it or retrain") from None
        raise CheckpointError(
            f"{path}: refused: the file contains pickled code ({code}); only plain tensors and containers "
            "are loaded (re-save it as a plain state_dict)"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile, KeyError, IndexError):
        raise CheckpointError(f"{path}: checkpoint is truncated or corrupt; delete it or retrain") from None
    if not isinstance(payload, dict):
        raise CheckpointError(f"{path}: not a ResoMap checkpoint (holds a {type(payload).__name__}, not a dict)")
    if "format" in payload and payload["format"] != FORMAT:
        raise CheckpointError(f"{path}: unknown checkpoint format {payload['format']!r}; expected {FORMAT!r}")
    if expect:
        meta = payload.get("meta") or {}
        diff = [k for k in _MATCH_KEYS if k in expect and str(meta.get(k)) != str(expect[k])]
        if diff:
            raise CheckpointError(
                f"{path}: checkpoint is for {_describe(meta)}, not {_describe({**meta, **expect})}; "
                "pick the checkpoint of this model/resolution/classes or retrain"
            )
    return payload


# ---------------------------------------------------------------- RNG state as weights_only-safe values


def rng_state() -> dict:
    """Python, numpy, torch (and CUDA) RNG states as tensors/lists/ints."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    py_version, py_state, py_gauss = random.getstate()
    state = {
        "python": {"version": py_version, "state": list(py_state), "gauss": py_gauss},
        "numpy": {
            "name": str(name),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "gauss": float(gauss),
        },
        "torch": torch.get_rng_state(),
        "cuda": [],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    py = state["python"]
    random.setstate((py["version"], tuple(py["state"]), py["gauss"]))
    npy = state["numpy"]
    keys = npy["keys"].numpy().astype(np.uint32)
    np.random.set_state((npy["name"], keys, npy["pos"], npy["has_gauss"], npy["gauss"]))
    torch.set_rng_state(state["torch"].cpu())
    cuda = state.get("cuda") or []
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([s.cpu() for s in cuda])


def load_best_model(result: Mapping[str, Any]) -> tuple[Any, Any] | None:
    """(model, input example) of a trial's result (its dict: model, resolution, best_checkpoint): the model rebuilt
    and loaded from the best checkpoint, with its config.yaml beside it when there is one (the caller has the
    registries registered: resomap.sweep.builtins), and a zero batch of two images as the example; None without a
    checkpoint file. What `resomap sync` logs with mlflow.log_model (resomap.tracking.publish's `load_model`)."""
    from resomap.config import Config, load
    from resomap.models import build_model
    from resomap.models.spec import input_channels

    best = result.get("best_checkpoint")
    if not best or not Path(best).is_file():
        return None
    payload = load_checkpoint(best)
    meta = payload.get("meta") or {}
    cfg = load(Path(best).parent, None, ()) if (Path(best).parent / "config.yaml").is_file() else Config()
    model, _ = build_model(result["model"], int(meta["num_classes"]), int(meta["in_channels"]), cfg.models)
    model.load_state_dict(payload["model"])
    size = int(result["resolution"])
    return model, torch.zeros(2, input_channels(model), size, size).numpy()
