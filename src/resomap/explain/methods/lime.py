"""LIME explainer: lime_image on a square superpixel grid derived from the resolution."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from resomap.explain.methods.registry import Explainer, register_explainer


def grid_segments(resolution: int) -> np.ndarray:
    """Square superpixels of side max(2, res // 8), numbered row-major."""
    # hand-written: a grid works on any channel count and on normalised (negative) values, unlike slic/quickshift
    cell = max(2, resolution // 8)
    idx = np.arange(resolution) // cell
    return (idx[:, None] * (idx.max() + 1) + idx[None, :]).astype(np.int64)


@dataclass(frozen=True)
class LimeOptions:
    samples: int = 64  # perturbed images per explained image


@register_explainer("lime", options=LimeOptions, needs_spatial_layer=False, slow=True)
class LimeExplainer(Explainer):
    """lime_image on a resolution-derived grid, `samples` samples; map = segment weights of the target."""

    options: LimeOptions

    def __init__(self, model: nn.Module, **kw: Any) -> None:
        super().__init__(model, **kw)
        from lime import lime_image  # heavy import: only when lime is built

        self.lime_image = lime_image
        self.segments = grid_segments(self.resolution)

    def explain(self, images: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        channels = images.shape[1]
        device = images.device
        model = self.model
        segments = self.segments

        def predict(batch: np.ndarray) -> np.ndarray:
            x = torch.from_numpy(batch[..., :channels]).permute(0, 3, 1, 2).to(device, torch.float32)
            with torch.no_grad():
                return torch.softmax(model(x), dim=-1).cpu().numpy()

        maps = []
        for x, t in zip(images.detach().cpu(), targets.tolist()):
            hwc = x.permute(1, 2, 0).double().numpy()
            rgb = np.repeat(hwc, 3, axis=-1) if channels == 1 else hwc  # lime expects 3 channels
            # a fresh explainer per image: every image gets the same random perturbations (random_state=0)
            explanation = self.lime_image.LimeImageExplainer(random_state=0).explain_instance(
                rgb,
                predict,
                labels=(t,),
                top_labels=None,
                hide_color=0.0,
                num_samples=self.options.samples,
                batch_size=self.cfg.batch_size,
                segmentation_fn=lambda _img: segments,
            )
            weights = np.zeros(segments.max() + 1, dtype=np.float32)
            for seg, w in explanation.local_exp[t]:
                weights[seg] = w
            maps.append(torch.from_numpy(weights[segments]))
        return torch.stack(maps)
