"""`timm:<name>`: any timm architecture (random init, or timm's pretrained weights from a local file:
resomap.models.hub), with CAM candidates derived from the model itself."""

from __future__ import annotations

import difflib
import functools
import logging

import torch
from torch import nn

from resomap.config.schema import ModelsConfig
from resomap.errors import UnknownNameError
from resomap.models.registry import TIMM_PREFIX
from resomap.models.spec import ModelSpec

log = logging.getLogger(__name__)


def timm_arch(name: str) -> str:
    """'timm:ResNet10t' -> 'resnet10t'; an unknown timm name raises UnknownNameError with close names."""
    import timm  # imported where used: timm takes seconds to import

    arch = str(name)[len(TIMM_PREFIX) :].strip().lower()
    if not timm.is_model(arch):
        close = difflib.get_close_matches(arch, timm.list_models(), n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(TIMM_PREFIX + c for c in close)}?" if close else "see timm.list_models()"
        raise UnknownNameError(f"no timm model '{arch}'; {hint}")
    return arch


def create_timm(
    arch: str, num_classes: int, in_channels: int, cfg: ModelsConfig, weights: str | None = None
) -> nn.Module:
    """timm.create_model without downloads; ViT-like models get dynamic_img_size so any resolution works. `weights`:
    a file of timm's published weights for `arch` (resomap.models.hub), loaded by timm itself (its checkpoint filter,
    a head of another class count left at its init, the input convolution adapted to `in_channels`)."""
    import timm

    kwargs = {"pretrained": False, "num_classes": num_classes, "in_chans": in_channels, "drop_rate": cfg.dropout}
    if weights:
        kwargs.update(pretrained=True, pretrained_cfg_overlay={"file": str(weights)})
    try:
        return timm.create_model(arch, dynamic_img_size=True, **kwargs)
    except TypeError as exc:  # architectures without a token grid do not take the argument
        if "dynamic_img_size" not in str(exc):
            raise
    return timm.create_model(arch, **kwargs)


def _cam_candidates(model: nn.Module, token_model: bool) -> tuple[str, ...]:
    names = [info["module"] for info in getattr(model, "feature_info", None) or [] if info.get("module")]
    if not names:  # no feature_info: every top-level child; the dry forward keeps the spatial ones
        names = [name for name, _ in model.named_children()]
    if token_model:  # the last block's output feeds only the class token; its norm1 sees every patch token
        names = [f"{n}.norm1" if hasattr(model.get_submodule(n), "norm1") else n for n in names]
    return tuple(reversed(names))


def spec_from_model(name: str, model: nn.Module) -> ModelSpec:
    """ModelSpec of a built timm model: feature_info modules deepest first, patch grid for token models."""
    patch = getattr(getattr(model, "patch_embed", None), "patch_size", None)
    if isinstance(patch, (tuple, list)):
        patch = patch[0]
    token_model = patch is not None and hasattr(model, "num_prefix_tokens")
    return ModelSpec(
        name=name,
        family="timm",
        cam_layers=_cam_candidates(model, token_model),
        patch_size=int(patch) if token_model else None,
        num_prefix_tokens=int(getattr(model, "num_prefix_tokens", 0)) if token_model else 0,
    )


@functools.lru_cache(maxsize=64)
def timm_spec(name: str) -> ModelSpec:
    """The spec without allocating weights (the model is built on the meta device)."""
    with torch.device("meta"):
        model = create_timm(timm_arch(name), 2, 3, ModelsConfig())
    return spec_from_model(name.lower(), model)
