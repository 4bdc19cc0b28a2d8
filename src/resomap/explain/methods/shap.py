"""SHAP explainer: GradientExplainer (expected gradients; DeepExplainer fails on ResNets' in-place adds)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from resomap.explain.methods.registry import Explainer, reduce_channels, register_explainer

log = logging.getLogger(__name__)

NOISE_STD = 0.1  # std of the noisy background copies (inputs are normalised, so unit scale)
BACKGROUND_COPIES = 4  # background: zeros + this many noisy copies


class _TargetLogit(nn.Module):
    """model(x)[:, target] as [N, 1]: shap then computes one output instead of every class."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.target = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)[:, self.target : self.target + 1]


@dataclass(frozen=True)
class ShapOptions:
    samples: int = 16  # expected-gradient samples per image (shap nsamples)


@register_explainer("shap", options=ShapOptions, needs_spatial_layer=False, slow=True)
class ShapExplainer(Explainer):
    """shap.GradientExplainer (expected gradients), background zeros + noisy copies, `samples` per image."""

    options: ShapOptions

    def __init__(self, model: nn.Module, **kw: Any) -> None:
        super().__init__(model, **kw)
        import shap  # heavy import: only when shap is built

        self.shap = shap
        self.wrapper = _TargetLogit(model)
        self.explainers: dict[tuple, Any] = {}  # (image shape, device) -> GradientExplainer on its background

    def _explainer(self, images: torch.Tensor) -> Any:
        key = (tuple(images.shape[1:]), str(images.device))
        if key not in self.explainers:
            gen = torch.Generator(device="cpu").manual_seed(0)
            shape = (BACKGROUND_COPIES, *images.shape[1:])
            noise = torch.randn(shape, generator=gen).to(images) * NOISE_STD
            background = torch.cat([torch.zeros_like(images[:1]).detach(), noise])
            self.explainers[key] = self.shap.GradientExplainer(self.wrapper, background, batch_size=self.cfg.batch_size)
        return self.explainers[key]

    def explain(self, images: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        explainer = self._explainer(images)
        maps = []
        for x, t in zip(images.detach(), targets.tolist()):  # one target per image; shap explains one output
            self.wrapper.target = t
            values = np.asarray(explainer.shap_values(x[None], nsamples=self.options.samples, rseed=0))
            values = values.reshape(1, *images.shape[1:])  # drop the single output axis, wherever shap puts it
            maps.append(reduce_channels(torch.from_numpy(values.astype(np.float32)))[0])
        return torch.stack(maps)

    def release(self) -> None:
        self.explainers.clear()
