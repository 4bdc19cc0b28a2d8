"""Argument checks and plain-value conversion shared by the statistics modules.

A bad setting (confidence level outside (0, 1), resamples < 1, arrays of mismatched shapes or non-0/1 values)
raises :class:`~resomap.errors.ConfigError`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from resomap.errors import ConfigError
from resomap.stats.scope import SCOPES


def to_dict(obj: Any) -> dict[str, Any]:
    """A result dataclass as plain, JSON-safe values (numpy scalars -> Python, tuples -> lists)."""
    return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_dict(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def finite(value: Any) -> float | None:
    """A plain float, or None for NaN/inf (results never hold NaN)."""
    value = float(value)
    return value if math.isfinite(value) else None


def check_level(level: Any) -> float:
    if isinstance(level, bool) or not isinstance(level, (int, float, np.floating)):
        raise ConfigError(f"confidence level must be a number in (0, 1), got {level!r}")
    level = float(level)
    if not (0.0 < level < 1.0):
        raise ConfigError(f"confidence level must be in (0, 1) (e.g. 0.95), got {level}")
    return level


def check_resamples(resamples: Any) -> int:
    if isinstance(resamples, bool) or not isinstance(resamples, (int, np.integer)) or resamples < 1:
        raise ConfigError(f"resamples must be a positive integer (e.g. 2000), got {resamples!r}")
    return int(resamples)


def check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ConfigError(f"seed must be an integer, got {seed!r}")
    return int(seed)


def check_choice(value: Any, choices: Sequence[str], what: str) -> str:
    for choice in choices:
        if isinstance(value, str) and value.lower() == choice.lower():
            return choice
    raise ConfigError(f"{what} must be one of {', '.join(choices)}; got {value!r}")


def as_binary(values: Any, name: str) -> np.ndarray:
    """bool or 0/1 array -> bool array; anything else is a ConfigError."""
    arr = np.asarray(values)
    if arr.dtype == bool:
        return arr
    if arr.size and not (np.issubdtype(arr.dtype, np.number) and np.isin(arr, (0, 1)).all()):
        raise ConfigError(f"{name} must hold only True/False (or 0/1) per test image")
    return arr.astype(bool)


def _as_2d(arr: np.ndarray, name: str) -> np.ndarray:
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ConfigError(f"{name} must be 1-D [images] or 2-D [seeds, images], got shape {arr.shape}")
    return arr


def as_runs(values: Any, name: str) -> np.ndarray:
    """bool [N] or [S, N] -> bool [S, N]."""
    return _as_2d(as_binary(values, name), name)


def as_scores(values: Any, name: str) -> np.ndarray:
    """Per-image scores (0/1 correctness, IoU, Dice, ...), [N] or [S, N] -> float64 [S, N]; NaN/inf: ConfigError."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{name} must hold one number per test image") from err
    arr = _as_2d(arr, name)
    if not np.isfinite(arr).all():
        raise ConfigError(f"{name} holds NaN or infinite scores")
    return arr


def check_margin(margin: Any) -> float:
    if isinstance(margin, bool) or not isinstance(margin, (int, float, np.number)) or not (0 < margin < 1):
        raise ConfigError(f"margin must be a difference in (0, 1) on the score's scale (e.g. 0.02), got {margin!r}")
    return float(margin)


def check_power(power: Any) -> float:
    if isinstance(power, bool) or not isinstance(power, (int, float, np.number)) or not (0 < power < 1):
        raise ConfigError(f"power must be a probability in (0, 1) (e.g. 0.8), got {power!r}")
    return float(power)


def check_scope(scope: Any) -> str:
    if scope not in SCOPES:
        raise ConfigError(f"stats.scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    return str(scope)


def check_seed_sd(seed_sd: Any) -> float:
    if isinstance(seed_sd, bool) or not isinstance(seed_sd, (int, float, np.number)) or not 0 <= seed_sd < 1:
        raise ConfigError(
            f"stats.seed_sd must be a standard deviation of accuracy across training seeds in [0, 1) "
            f"(e.g. 0.02), got {seed_sd!r}"
        )
    return float(seed_sd)


def check_alpha(alpha: Any) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)) or not 0 < alpha < 1:
        raise ConfigError(f"alpha must be a one-sided alpha in (0, 1), got {alpha!r}")
    return float(alpha)
