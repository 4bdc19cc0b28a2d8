"""The floor every model's maps have: how much a method's map of an image moves under a nuisance that keeps the
image's content, here a shift of the image by a few pixels (edges replicated) whose map is shifted back.

A deterministic model (a frozen backbone with a closed-form head) has no cross-seed floor; this one it has at every
resolution: a map compared with the map of its own image shifted by one pixel and undone tells how much agreement
is lost to the method and the pixel grid alone, the yardstick for the agreement across resolutions
(resomap.explain.evaluation.where decides against it). The shifted maps are saved in the trial's npz beside the
maps, under FLOOR_PREFIX + method.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from resomap.explain.methods.probe import explain_probe_set

FLOOR_PREFIX = "floor__"  # npz key of a method's shift-floor maps: FLOOR_PREFIX + method


def shift_images(images: torch.Tensor, pixels: int) -> torch.Tensor:
    """[N,C,H,W] -> the same images moved `pixels` down and right, the top rows and left columns replicated (no
    wrap-around: nothing from the far edge enters)."""
    h, w = images.shape[-2:]
    padded = F.pad(images.float(), (pixels, 0, pixels, 0), mode="replicate")
    return padded[..., :h, :w].to(images.dtype)


def shift_targets(targets: torch.Tensor, pixels: int) -> torch.Tensor:
    """Region targets [N,r,r] moved with their images (a class per image [N] is left as it is)."""
    if targets.dim() != 3:
        return targets
    moved = shift_images(targets[:, None].to(torch.float32), pixels)[:, 0]
    return moved.round().to(targets.dtype)


def unshift_maps(maps: np.ndarray, pixels: int) -> np.ndarray:
    """Maps [N,H,W] of shifted images moved back onto the original pixel grid (the last rows and columns, which
    the shift pushed out, replicated from their neighbours)."""
    x = torch.as_tensor(np.asarray(maps, dtype=np.float32))[:, None]
    padded = F.pad(x, (0, pixels, 0, pixels), mode="replicate")
    return padded[:, 0, pixels:, pixels:].numpy()


def shift_floor_maps(
    model: Any, images: torch.Tensor, targets: torch.Tensor, methods: Sequence[str], pixels: int, **kw: Any
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """(method -> the maps of the shifted probe images, moved back; method -> why it failed) for `methods`, run
    the way the probe set was explained (`kw`: explain_probe_set's spec, resolution, cfg, min_cam_size)."""
    if not methods:
        return {}, {}
    side = int(images.shape[-1])
    pixels = max(1, min(int(pixels), side - 1))
    maps, failed = explain_probe_set(
        model, shift_images(images, pixels), shift_targets(targets, pixels), list(methods), **kw
    )
    return {m: unshift_maps(v, pixels) for m, v in maps.items()}, failed
