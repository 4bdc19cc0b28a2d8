"""Class activation maps from pytorch-grad-cam: gradcam, gradcam++, xgradcam, layercam, eigencam, scorecam.

The target layer is `spec.cam_layer(model, resolution, min_cam_size)`. By default (`models.cam_layer_policy:
common`, applied by `sweep_cam_spec`) that is ONE layer for every resolution of the sweep: the deepest candidate
whose feature map is at least `min_cam_size` wide at the smallest resolution (`ModelSpec.common_cam_layer`), so a
cross-resolution comparison does not also compare different layers (on resnet18 the per-resolution choice is
layer2/3/4 at 32/64/128 px). `per_resolution` keeps the deepest layer valid at each resolution on its own.
Token models get `spec.reshape_transform(resolution)`. The layer is found once when the explainer is built (dry
forwards), and the grad-cam object with its hooks lives until the explainer is closed.
Note: grad-cam rescales every CAM to [0, 1] per image (its documented behaviour, kept here), so CAM maps carry
no magnitude; magnitude-aware comparisons rely on the captum methods.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import torch
from torch import nn

from resomap.config.schema import Config
from resomap.errors import ExplainError, ModelError
from resomap.explain.methods.registry import Explainer, register_explainer
from resomap.models import CamLayer, ModelSpec

log = logging.getLogger(__name__)


def sweep_resolutions(cfg: Config, model_name: str) -> list[int]:
    """The resolutions the sweep of `cfg` runs `model_name` at (sweep.resolutions, minus its exclude pairs, plus
    its include pairs)."""
    name = model_name.lower()
    dropped = {int(r) for m, r in cfg.sweep.exclude if str(m).lower() == name}
    added = {int(r) for m, r in cfg.sweep.include if str(m).lower() == name}
    return sorted(({int(r) for r in cfg.sweep.resolutions} - dropped) | added)


def sweep_cam_spec(spec: ModelSpec, cfg: Config, model: nn.Module | None = None) -> ModelSpec:
    """`spec` with `cfg.models.cam_layer_policy` applied over the model's sweep resolutions: 'common' -> one CAM
    layer at every resolution (ModelSpec.common_cam_layer), 'per_resolution' -> the deepest valid one per resolution.
    With the built `model`, only the resolutions it takes count (sweep.skip_invalid_resolutions leaves the others out
    of the grid), so every trial of the model still picks the same layer.
    """
    resolutions = sweep_resolutions(cfg, spec.name)
    if model is not None:
        from resomap.models import unwrap, usable_resolutions
        from resomap.models.spec import input_channels

        plain = unwrap(model)
        resolutions = usable_resolutions(plain, resolutions, input_channels(plain))
    return spec.with_cam_policy(cfg.models.cam_layer_policy, resolutions)


def cam_layer(model: nn.Module, spec: ModelSpec, resolution: int, min_cam_size: int) -> CamLayer:
    """The spec's CAM layer at this resolution (its policy: see the module doc); a model with no spatial layer raises
    ExplainError."""
    try:
        layer = spec.cam_layer(model, resolution, min_size=min_cam_size)
    except ModelError as exc:
        raise ExplainError(f"CAM methods cannot explain {spec.name}: {exc}") from exc
    policy, side = spec.cam_layer_policy, layer.feature_size
    log.debug("%s at %dpx: CAM layer %s (%dx%d, %s)", spec.name, resolution, layer.name, side, side, policy)
    return layer


class CamExplainer(Explainer):
    """A pytorch-grad-cam method on the spec's CAM layer ([0,1]-scaled per image); `cam_class` names its class."""

    cam_class: ClassVar[str]

    def __init__(self, model: nn.Module, **kw: Any) -> None:
        super().__init__(model, **kw)
        import pytorch_grad_cam  # heavy import (matplotlib, scipy, sklearn): only when a CAM method is built

        self.layer = cam_layer(model, self.spec, self.resolution, self.min_cam_size)
        cls = getattr(pytorch_grad_cam, self.cam_class)
        self.cam = cls(
            model=model,
            target_layers=[self.layer.module],
            reshape_transform=self.spec.reshape_transform(self.resolution),
        )
        if hasattr(self.cam, "batch_size"):
            self.cam.batch_size = self.cfg.batch_size  # ScoreCAM: masked images per forward

    def explain(self, images: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        from resomap.explain.methods.targets import cam_targets

        try:  # grad-cam's own targets: a class logit, or a class's logits summed over a region
            maps = self.cam(input_tensor=images, targets=cam_targets(targets))
        finally:
            self.cam.activations_and_grads.clear()  # drop this batch's activations, gradients and graph
            self.cam.outputs = None
        return torch.from_numpy(maps)

    def release(self) -> None:
        # BaseCAM.__exit__ would also swallow (and print) an IndexError: release the hooks directly
        self.cam.activations_and_grads.release()


def _make(name: str, cam_class: str, slow: bool = False, targets: tuple[str, ...] = ("class", "region")) -> None:
    cls = type(
        cam_class + "Explainer",
        (CamExplainer,),
        {
            "cam_class": cam_class,
            "__module__": __name__,
            "__doc__": f"{cam_class} of pytorch-grad-cam on the spec's CAM layer ([0,1]-scaled per image).",
        },
    )
    globals()[cls.__name__] = cls
    register_explainer(name, needs_spatial_layer=True, slow=slow, targets=targets)(cls)


# eigencam ignores its targets (first principal component of the activations): it explains both forms alike
for _name, _cls, _slow in (
    ("gradcam", "GradCAM", False),
    ("gradcam++", "GradCAMPlusPlus", False),
    ("xgradcam", "XGradCAM", False),
    ("layercam", "LayerCAM", False),
    ("eigencam", "EigenCAM", False),
    ("scorecam", "ScoreCAM", True),
):
    _make(_name, _cls, _slow)
