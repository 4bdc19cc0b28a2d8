"""A module that extends ResoMap the way a user's package would: one decorated function each, with its options.

Imported as a ResoMap plugin (entry-point group `resomap.plugins`) or with `pytest -p extension_example`; nothing
else in ResoMap names these entries, yet they appear in `resomap datasets / explainers / executors`, in the config
reference, in config validation and in the registry-parametrized tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from resomap.data import register_dataset
from resomap.explain import register_explainer
from resomap.sweep.executors import get_executor, register_executor


@dataclass(frozen=True)
class ToyStripesOptions:
    num_images: int = 48  # images generated
    size: int = 32  # side of the generated images in pixels


class ToyStripes:
    """Horizontal (class 0) or vertical (class 1) stripes with noise; 1 channel, no masks."""

    channels = 1
    has_masks = False

    def __init__(self, options: ToyStripesOptions):
        self.options = options
        self.class_names = ["horizontal", "vertical"]
        self.labels = np.arange(options.num_images, dtype=np.int64) % 2
        self.fingerprint = f"toy_stripes-{options.num_images}-{options.size}"

    def __len__(self) -> int:
        return len(self.labels)

    def load(self, i: int) -> np.ndarray:
        n = self.options.size
        stripes = (np.arange(n) // 2 % 2 * 160 + 40).astype(np.float64)
        img = np.tile(stripes[:, None], (1, n)) if self.labels[i] == 0 else np.tile(stripes[None, :], (n, 1))
        img += np.random.default_rng(i).normal(0, 10, img.shape)
        return np.clip(img, 0, 255).astype(np.uint8)

    def mask(self, i: int) -> np.ndarray:
        raise NotImplementedError

    def name(self, i: int) -> str:
        return f"toy_stripes #{i}"


@register_dataset("toy_stripes", options=ToyStripesOptions)
def toy_stripes(cfg, options: ToyStripesOptions) -> ToyStripes:
    return ToyStripes(options)


@dataclass(frozen=True)
class EdgeMapOptions:
    power: float = 1.0  # maps are the input's gradient magnitude to this power


@register_explainer("edge_map", options=EdgeMapOptions)
def edge_map(model, images, targets, *, spec, resolution, cfg, options: EdgeMapOptions, min_cam_size=4):
    """A model-free map: the image's gradient magnitude (a reference that ignores what the model learned)."""
    x = images.detach().float().mean(dim=1)
    gy = torch.zeros_like(x)
    gx = torch.zeros_like(x)
    gy[:, 1:-1] = (x[:, 2:] - x[:, :-2]) / 2
    gx[:, :, 1:-1] = (x[:, :, 2:] - x[:, :, :-2]) / 2
    return torch.sqrt(gx**2 + gy**2).pow(options.power).cpu()


@dataclass(frozen=True)
class ReversedOptions:
    note: str = "last trial first"  # shown in the log when the executor starts


@register_executor("reversed", options=ReversedOptions)
def reversed_executor(trials, *, cfg, tracker, parent_run_id, progress, report):
    """The local executor over the trials in reverse order."""
    from resomap.config.groups import group_options

    report(f"[reversed] {group_options(cfg.sweep, 'reversed').note}")
    local = get_executor("local")
    return local(
        list(reversed(trials)), cfg=cfg, tracker=tracker, parent_run_id=parent_run_id, progress=progress, report=report
    )
