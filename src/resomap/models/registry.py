"""The model registry: `@register_model` entries plus `timm:<name>` for any timm model."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import nn

from resomap.config.schema import ModelsConfig
from resomap.registry import Registry

ModelFn = Callable[[int, int, ModelsConfig], nn.Module]

MODELS: Registry[ModelFn] = Registry("model", "resomap models")
FAMILIES = ("vgg", "resnet", "mobilenet", "efficientnet", "cnn", "timm")
TIMM_PREFIX = "timm:"


def register_model(name: str, *, family: str, cam_layers: Sequence[str]) -> Callable[[ModelFn], ModelFn]:
    """Register `fn(num_classes, in_channels, cfg) -> nn.Module`; cam_layers are dotted names, deepest first."""
    if family not in FAMILIES:
        raise ValueError(f"model '{name}': family '{family}' is not one of {FAMILIES}")
    if not cam_layers:
        raise ValueError(f"model '{name}': give at least one CAM layer candidate")
    return MODELS.register(name, family=family, cam_layers=tuple(cam_layers))


def list_models() -> list[str]:
    """Registered names, sorted (any `timm:<name>` works too)."""
    return MODELS.names()


def is_timm_name(name: str) -> bool:
    return str(name).lower().startswith(TIMM_PREFIX)
