"""Gradient and perturbation attributions from captum.

integrated_gradients, saliency, input_x_gradient, gradient_shap, occlusion, guided_backprop. Each returns the
sum of |attribution| over input channels ([B,C,H,W] -> [B,H,W], see `reduce_channels`), raw magnitudes kept.
Each captum object is made once per built explainer; captum itself is imported only then. Region targets
(explain.methods.targets: a class's logits summed over a region, for dense outputs) run the same captum method on
`RegionLogits(model)` with the regions as captum's additional_forward_args (expanded by captum with the inputs).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from resomap.explain.methods.registry import Explainer, reduce_channels, register_explainer
from resomap.explain.methods.targets import RegionLogits, classes_and_regions

BOTH = ("class", "region")  # every captum method takes region targets through RegionLogits
NOISE_STD = 0.1  # gradient_shap: std of the noisy baselines (inputs are normalised, so unit scale)


class CaptumExplainer(Explainer):
    """A captum attribution method made once for the model; `attribute` runs it on one batch."""

    captum_class: ClassVar[str]

    def __init__(self, model: nn.Module, **kw: Any) -> None:
        super().__init__(model, **kw)
        import captum.attr  # heavy import: only when a captum method is built

        self._captum = getattr(captum.attr, self.captum_class)
        self._by_form = {False: self._captum(model)}
        self.method = self._by_form[False]

    def explain(self, images: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        classes, region = classes_and_regions(targets)
        form = region is not None
        if form not in self._by_form:  # region targets: the method over the region-summed logits
            self._by_form[form] = self._captum(RegionLogits(self.model))
        self.method = self._by_form[form]
        extra = {"additional_forward_args": (region,)} if form else {}
        return reduce_channels(self.attribute(images, classes, **extra))

    def attribute(self, images: torch.Tensor, targets: torch.Tensor, **extra: Any) -> torch.Tensor:
        return self.method.attribute(images, target=targets, **extra)


@dataclass(frozen=True)
class IntegratedGradientsOptions:
    steps: int = 32  # path steps from the zero baseline to the image
    internal_batch_size: int = 16  # path steps evaluated per forward (bounds memory)


@register_explainer(
    "integrated_gradients", options=IntegratedGradientsOptions, needs_spatial_layer=False, slow=False, targets=BOTH
)
class IntegratedGradientsExplainer(CaptumExplainer):
    """Integrated Gradients from a zero (dataset-mean) baseline; `steps` steps, `internal_batch_size` per forward."""

    captum_class = "IntegratedGradients"
    options: IntegratedGradientsOptions

    def attribute(self, images: torch.Tensor, targets: torch.Tensor, **extra: Any) -> torch.Tensor:
        return self.method.attribute(
            images,
            baselines=torch.zeros_like(images),
            target=targets,
            n_steps=self.options.steps,
            internal_batch_size=self.options.internal_batch_size,
            **extra,
        )


@register_explainer("saliency", needs_spatial_layer=False, slow=False, targets=BOTH)
class SaliencyExplainer(CaptumExplainer):
    """|d logit / d input| (Simonyan et al. 2014)."""

    captum_class = "Saliency"

    def attribute(self, images: torch.Tensor, targets: torch.Tensor, **extra: Any) -> torch.Tensor:
        return self.method.attribute(images, target=targets, abs=True, **extra)


@register_explainer("input_x_gradient", needs_spatial_layer=False, slow=False, targets=BOTH)
class InputXGradientExplainer(CaptumExplainer):
    """input * gradient."""

    captum_class = "InputXGradient"


@dataclass(frozen=True)
class GradientShapOptions:
    samples: int = 16  # noisy samples per image (captum n_samples)


@register_explainer("gradient_shap", options=GradientShapOptions, targets=BOTH)
class GradientShapExplainer(CaptumExplainer):
    """captum GradientShap; baselines: zeros and 3 noisy copies of zeros; `samples` samples per image."""

    captum_class = "GradientShap"
    options: GradientShapOptions

    def attribute(self, images: torch.Tensor, targets: torch.Tensor, **extra: Any) -> torch.Tensor:
        zeros = torch.zeros_like(images[:1])
        gen = torch.Generator(device="cpu").manual_seed(0)
        noise = torch.randn((3, *images.shape[1:]), generator=gen).to(images.device) * NOISE_STD
        baselines = torch.cat([zeros, zeros + noise])
        return self.method.attribute(
            images, baselines=baselines, target=targets, n_samples=self.options.samples, stdevs=NOISE_STD, **extra
        )


def occlusion_window(resolution: int) -> tuple[int, int]:
    """(window side, stride) derived from the resolution: max(2, res // 8) and half of it."""
    window = max(2, resolution // 8)
    return window, max(1, window // 2)


@dataclass(frozen=True)
class OcclusionOptions:
    perturbations_per_eval: int = 16  # occluded copies evaluated per forward (bounds memory)


@register_explainer("occlusion", options=OcclusionOptions, needs_spatial_layer=False, slow=True, targets=BOTH)
class OcclusionExplainer(CaptumExplainer):
    """captum Occlusion with a resolution-derived window, zero baseline, `perturbations_per_eval` per forward."""

    captum_class = "Occlusion"
    options: OcclusionOptions

    def attribute(self, images: torch.Tensor, targets: torch.Tensor, **extra: Any) -> torch.Tensor:
        window, stride = occlusion_window(self.resolution)
        channels = images.shape[1]
        with torch.no_grad():
            return self.method.attribute(
                images.detach(),
                sliding_window_shapes=(channels, window, window),
                strides=(channels, stride, stride),
                baselines=0.0,
                target=targets,
                perturbations_per_eval=self.options.perturbations_per_eval,
                **extra,
            )


@register_explainer("guided_backprop", needs_spatial_layer=False, slow=False, targets=BOTH)
class GuidedBackpropExplainer(CaptumExplainer):
    """captum GuidedBackprop (ReLU modules only; functional ReLUs are not guided)."""

    captum_class = "GuidedBackprop"

    def attribute(self, images: torch.Tensor, targets: torch.Tensor, **extra: Any) -> torch.Tensor:
        with warnings.catch_warnings():  # captum warns that it sets (and later removes) ReLU backward hooks
            warnings.filterwarnings("ignore", message="Setting backward hooks on ReLU")
            return self.method.attribute(images, target=targets, **extra)
