"""Class activation maps from pytorch-grad-cam: gradcam, gradcam++, xgradcam, layercam, eigencam, scorecam.

The target layer is the model spec's deepest CAM candidate whose feature map is at least `min_cam_size` wide at
the resolution; token models get `spec.reshape_transform(resolution)`.
Note: grad-cam rescales every CAM to [0, 1] per image (its documented behaviour, kept here), so CAM maps carry
no magnitude; magnitude-aware comparisons rely on the captum methods.
"""

from __future__ import annotations

import logging

import torch
from pytorch_grad_cam import EigenCAM, GradCAM, GradCAMPlusPlus, LayerCAM, ScoreCAM, XGradCAM
from pytorch_grad_cam.base_cam import BaseCAM
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget
from torch import nn

from resomap.config.schema import ExplainabilityConfig
from resomap.errors import ExplainError, ModelError
from resomap.explain.registry import register_explainer
from resomap.models import CamLayer, ModelSpec

log = logging.getLogger(__name__)


def cam_layer(model: nn.Module, spec: ModelSpec, resolution: int, min_cam_size: int) -> CamLayer:
    """The spec's CAM layer at this resolution; a model with no spatial layer raises ExplainError."""
    try:
        layer = spec.cam_layer(model, resolution, min_size=min_cam_size)
    except ModelError as exc:
        raise ExplainError(f"CAM methods cannot explain {spec.name}: {exc}") from exc
    log.debug("%s at %dpx: CAM layer %s (%dx%d)", spec.name, resolution, layer.name, *(layer.feature_size,) * 2)
    return layer


def run_cam(
    cam_cls: type[BaseCAM],
    model: nn.Module,
    images: torch.Tensor,
    targets: torch.Tensor,
    *,
    spec: ModelSpec,
    resolution: int,
    cfg: ExplainabilityConfig,
    min_cam_size: int = 4,
) -> torch.Tensor:
    layer = cam_layer(model, spec, resolution, min_cam_size)
    with cam_cls(
        model=model, target_layers=[layer.module], reshape_transform=spec.reshape_transform(resolution)
    ) as cam:
        if hasattr(cam, "batch_size"):
            cam.batch_size = cfg.batch_size  # ScoreCAM: masked images per forward
        maps = cam(input_tensor=images, targets=[ClassifierOutputTarget(int(t)) for t in targets])
    return torch.from_numpy(maps)


def _make(name: str, cam_cls: type[BaseCAM], slow: bool = False) -> None:
    def explain(model, images, targets, *, spec, resolution, cfg, min_cam_size=4):
        return run_cam(
            cam_cls, model, images, targets, spec=spec, resolution=resolution, cfg=cfg, min_cam_size=min_cam_size
        )

    explain.__name__ = explain.__qualname__ = name.replace("+", "p")
    explain.__doc__ = f"{cam_cls.__name__} of pytorch-grad-cam on the spec's CAM layer ([0,1]-scaled per image)."
    register_explainer(name, needs_spatial_layer=True, slow=slow)(explain)


for _name, _cls, _slow in (
    ("gradcam", GradCAM, False),
    ("gradcam++", GradCAMPlusPlus, False),
    ("xgradcam", XGradCAM, False),
    ("layercam", LayerCAM, False),
    ("eigencam", EigenCAM, False),
    ("scorecam", ScoreCAM, True),
):
    _make(_name, _cls, _slow)
