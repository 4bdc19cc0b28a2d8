"""SHAP (GradientExplainer; DeepExplainer fails on ResNets' in-place adds) and LIME (lime_image) explainers."""

from __future__ import annotations

import logging

import numpy as np
import torch
from torch import nn

from resomap.explain.registry import reduce_channels, register_explainer

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


@register_explainer("shap", needs_spatial_layer=False, slow=True)
def shap_gradient(model, images, targets, *, spec, resolution, cfg, min_cam_size=4):
    """shap.GradientExplainer (expected gradients), background zeros + noisy copies, cfg.shap_samples."""
    import shap  # heavy import, only when used

    gen = torch.Generator(device="cpu").manual_seed(0)
    shape = (BACKGROUND_COPIES, *images.shape[1:])
    background = torch.cat([torch.zeros_like(images[:1]), torch.randn(shape, generator=gen).to(images) * NOISE_STD])
    wrapper = _TargetLogit(model)
    explainer = shap.GradientExplainer(wrapper, background, batch_size=cfg.batch_size)
    maps = []
    for x, t in zip(images.detach(), targets.tolist()):  # one target per image; shap explains one output
        wrapper.target = t
        values = np.asarray(explainer.shap_values(x[None], nsamples=cfg.shap_samples, rseed=0))
        values = values.reshape(1, *images.shape[1:])  # drop the single output axis, wherever shap puts it
        maps.append(reduce_channels(torch.from_numpy(values.astype(np.float32)))[0])
    return torch.stack(maps)


def grid_segments(resolution: int) -> np.ndarray:
    """Square superpixels of side max(2, res // 8), numbered row-major."""
    # hand-written: a grid works on any channel count and on normalised (negative) values, unlike slic/quickshift
    cell = max(2, resolution // 8)
    idx = np.arange(resolution) // cell
    return (idx[:, None] * (idx.max() + 1) + idx[None, :]).astype(np.int64)


@register_explainer("lime", needs_spatial_layer=False, slow=True)
def lime(model, images, targets, *, spec, resolution, cfg, min_cam_size=4):
    """lime_image on a resolution-derived grid, cfg.lime_samples samples; map = segment weights of the target."""
    from lime import lime_image  # heavy import, only when used

    channels = images.shape[1]
    device = images.device

    def predict(batch: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(batch[..., :channels]).permute(0, 3, 1, 2).to(device, torch.float32)
        with torch.no_grad():
            return torch.softmax(model(x), dim=-1).cpu().numpy()

    segments = grid_segments(resolution)
    maps = []
    for x, t in zip(images.detach().cpu(), targets.tolist()):
        hwc = x.permute(1, 2, 0).double().numpy()
        rgb = np.repeat(hwc, 3, axis=-1) if channels == 1 else hwc  # lime expects 3 channels
        explanation = lime_image.LimeImageExplainer(random_state=0).explain_instance(
            rgb,
            predict,
            labels=(t,),
            top_labels=None,
            hide_color=0.0,
            num_samples=cfg.lime_samples,
            batch_size=cfg.batch_size,
            segmentation_fn=lambda _img: segments,
        )
        weights = np.zeros(segments.max() + 1, dtype=np.float32)
        for seg, w in explanation.local_exp[t]:
            weights[seg] = w
        maps.append(torch.from_numpy(weights[segments]))
    return torch.stack(maps)
