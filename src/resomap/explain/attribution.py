"""Gradient and perturbation attributions from captum.

integrated_gradients, saliency, input_x_gradient, gradient_shap, occlusion, guided_backprop. Each returns the
sum of |attribution| over input channels ([B,C,H,W] -> [B,H,W], see `reduce_channels`), raw magnitudes kept.
"""

from __future__ import annotations

import warnings

import torch
from captum.attr import (
    GradientShap,
    GuidedBackprop,
    InputXGradient,
    IntegratedGradients,
    Occlusion,
    Saliency,
)

from resomap.explain.registry import reduce_channels, register_explainer

NOISE_STD = 0.1  # gradient_shap: std of the noisy baselines (inputs are normalised, so unit scale)


@register_explainer("integrated_gradients", needs_spatial_layer=False, slow=False)
def integrated_gradients(model, images, targets, *, spec, resolution, cfg, min_cam_size=4):
    """Integrated Gradients from a zero (dataset-mean) baseline; cfg.ig_steps steps, cfg.internal_batch_size."""
    attr = IntegratedGradients(model).attribute(
        images,
        baselines=torch.zeros_like(images),
        target=targets,
        n_steps=cfg.ig_steps,
        internal_batch_size=cfg.internal_batch_size,
    )
    return reduce_channels(attr)


@register_explainer("saliency", needs_spatial_layer=False, slow=False)
def saliency(model, images, targets, *, spec, resolution, cfg, min_cam_size=4):
    """|d logit / d input| (Simonyan et al. 2014)."""
    return reduce_channels(Saliency(model).attribute(images, target=targets, abs=True))


@register_explainer("input_x_gradient", needs_spatial_layer=False, slow=False)
def input_x_gradient(model, images, targets, *, spec, resolution, cfg, min_cam_size=4):
    """input * gradient."""
    return reduce_channels(InputXGradient(model).attribute(images, target=targets))


@register_explainer("gradient_shap", needs_spatial_layer=False, slow=False)
def gradient_shap(model, images, targets, *, spec, resolution, cfg, min_cam_size=4):
    """captum GradientShap; baselines: zeros and 3 noisy copies of zeros; cfg.shap_samples samples per image."""
    zeros = torch.zeros_like(images[:1])
    gen = torch.Generator(device="cpu").manual_seed(0)
    noise = torch.randn((3, *images.shape[1:]), generator=gen).to(images.device) * NOISE_STD
    baselines = torch.cat([zeros, zeros + noise])
    attr = GradientShap(model).attribute(
        images, baselines=baselines, target=targets, n_samples=cfg.shap_samples, stdevs=NOISE_STD
    )
    return reduce_channels(attr)


def occlusion_window(resolution: int) -> tuple[int, int]:
    """(window side, stride) derived from the resolution: max(2, res // 8) and half of it."""
    window = max(2, resolution // 8)
    return window, max(1, window // 2)


@register_explainer("occlusion", needs_spatial_layer=False, slow=True)
def occlusion(model, images, targets, *, spec, resolution, cfg, min_cam_size=4):
    """captum Occlusion with a resolution-derived window, zero baseline, cfg.perturbations_per_eval."""
    window, stride = occlusion_window(resolution)
    channels = images.shape[1]
    with torch.no_grad():
        attr = Occlusion(model).attribute(
            images.detach(),
            sliding_window_shapes=(channels, window, window),
            strides=(channels, stride, stride),
            baselines=0.0,
            target=targets,
            perturbations_per_eval=cfg.perturbations_per_eval,
        )
    return reduce_channels(attr)


@register_explainer("guided_backprop", needs_spatial_layer=False, slow=False)
def guided_backprop(model, images, targets, *, spec, resolution, cfg, min_cam_size=4):
    """captum GuidedBackprop (ReLU modules only; functional ReLUs are not guided)."""
    with warnings.catch_warnings():  # captum warns that it sets (and later removes) ReLU backward hooks
        warnings.filterwarnings("ignore", message="Setting backward hooks on ReLU")
        return reduce_channels(GuidedBackprop(model).attribute(images, target=targets))
