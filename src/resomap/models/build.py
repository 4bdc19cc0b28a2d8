"""build_model, get_spec and the model table behind `resomap models`."""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Iterable
from typing import NamedTuple

import torch
import torch.utils.checkpoint
from torch import nn

from resomap.config.schema import RECIPE_SEP, ModelsConfig, is_hub, split_recipe
from resomap.errors import ConfigError, ModelError, UnknownNameError
from resomap.models import hub
from resomap.models.layouts import timm_layout, timm_stages, torchvision_layout, torchvision_stages
from resomap.models.recipes import IMAGENET_MEAN, IMAGENET_STD, RECIPE_KIND, Net, build_recipe
from resomap.models.registry import MODELS, TIMM_PREFIX, is_timm_name, list_models
from resomap.models.spec import ModelSpec
from resomap.models.timm_models import create_timm, spec_from_model, timm_arch, timm_spec
from resomap.models.weights import add_grayscale_repeat, first_conv_name, load_pretrained

log = logging.getLogger(__name__)


class ModelRow(NamedTuple):
    name: str
    family: str
    params_m: float  # millions, at 3 input channels and 2 classes
    cam_layer: str  # deepest CAM candidate


def canonical_name(name: str) -> str:
    """Registry key, 'timm:<arch>', or either's '<base>@<recipe>' (resomap.models.recipes: a timm model or a
    torchvision model of the registry); unknown names raise UnknownNameError with close names."""
    base, recipe = split_recipe(name)  # an unknown recipe: UnknownNameError
    if recipe is not None:
        found = canonical_name(base)
        if not is_timm_name(found) and MODELS.meta(found).get("hub") != "torchvision":
            tv = ", ".join(n for n in list_models() if MODELS.meta(n).get("hub") == "torchvision")
            raise UnknownNameError(f"'{name}': recipes take timm:<name> or a torchvision model ({tv})")
        return f"{found}{RECIPE_SEP}{recipe}"
    if is_timm_name(name):
        return TIMM_PREFIX + timm_arch(name)
    return MODELS.resolve(name)


def get_spec(name: str) -> ModelSpec:
    """The ModelSpec of a registered name, of `timm:<name>` or of a recipe name (case-insensitive)."""
    key = canonical_name(name)
    base, recipe = split_recipe(key)
    if recipe is not None:  # the base's CAM candidates, inside the recipe's `backbone`
        own = get_spec(base)
        kind = RECIPE_KIND[recipe]
        cams = tuple(f"backbone.{layer}" for layer in own.cam_layers)
        return ModelSpec(name=key, family=own.family, cam_layers=cams, **kind)
    if is_timm_name(key):
        return timm_spec(key)
    meta = MODELS.meta(key)
    kind = {k: meta[k] for k in ("deterministic", "fit", "features") if k in meta}
    return ModelSpec(name=key, family=meta["family"], cam_layers=meta["cam_layers"], **kind)


def _check_args(num_classes: int, in_channels: int, cfg: ModelsConfig) -> None:
    if not isinstance(num_classes, int) or num_classes < 1:
        raise ConfigError(f"num_classes must be a positive int, got {num_classes!r}")
    if not isinstance(in_channels, int) or in_channels < 1:
        raise ConfigError(f"in_channels must be a positive int, got {in_channels!r}")
    if cfg.grayscale not in ("adapt", "repeat"):
        raise ConfigError(f"models.grayscale must be 'adapt' or 'repeat', got {cfg.grayscale!r}")
    if cfg.grayscale == "repeat" and in_channels not in (1, 3):
        raise ConfigError(f"models.grayscale=repeat needs 1- or 3-channel input, got {in_channels}; use adapt")


def pretrained_entry(key: str, cfg: ModelsConfig) -> str | None:
    """cfg.pretrained's value for the model `key` (canonical; a `timm:<arch>` model also under its bare arch):
    a weights file, `hub`, or None."""
    paths = {str(k).lower(): v for k, v in cfg.pretrained.items()}
    base, recipe = split_recipe(key)
    if recipe is not None and key not in paths:  # a recipe's backbone: the entry of its base model too
        return pretrained_entry(base, cfg)
    return paths.get(key) or (paths.get(key[len(TIMM_PREFIX) :]) if is_timm_name(key) else None)


def build_model(name: str, num_classes: int, in_channels: int, cfg: ModelsConfig) -> tuple[nn.Module, ModelSpec]:
    """Build a model (random init, or cfg.pretrained[name]: a local file, or `hub`, the library's published weights
    from the user's cache, resomap.models.hub) and its spec.

    grayscale 'adapt': the input conv takes `in_channels` (3-channel weights are summed over channels).
    grayscale 'repeat' with 1 channel: the model stays 3-channel, a forward pre-hook repeats the channel; the
    module tree is unchanged, so CAM layer names resolve the same either way.
    """
    _check_args(num_classes, in_channels, cfg)
    key = canonical_name(name)
    base, recipe = split_recipe(key)
    repeat = cfg.grayscale == "repeat" and in_channels == 1
    build_channels = 3 if repeat else in_channels
    path = pretrained_entry(key, cfg)
    published = hub.fetch(hub.locate(base)) if is_hub(path) else None
    if published is not None:
        log.info("%s: pretrained weights from %s", key, published)
    # a recipe's timm backbone without timm's own head dropout: the recipe applies models.dropout
    own = dataclasses.replace(cfg, dropout=0.0) if recipe is not None and is_timm_name(base) else cfg
    model = _build_base(base, num_classes, build_channels, own, published)
    spec = spec_from_model(base, model) if is_timm_name(base) else get_spec(base)
    path = None if published is not None and is_timm_name(base) else (published or path)
    if path:
        target = getattr(model, "backbone", None) if hasattr(model, "adopt_input_stats") else None
        target = target if target is not None else model  # a pretrained entry: the file replaces its backbone's
        first_conv = getattr(target, "pretrained_cfg", {}).get("first_conv") or first_conv_name(target)
        load_pretrained(target, path, num_classes, input_conv=first_conv)
    if recipe is not None:  # the built (and loaded) model as the backbone of the recipe
        model = as_recipe(base, recipe, model, build_channels, num_classes, cfg)
        spec = get_spec(key)
    if repeat:
        add_grayscale_repeat(model)
    log.debug("built %s (%d classes, %d input channels, grayscale=%s)", key, num_classes, in_channels, cfg.grayscale)
    return model, spec


def _build_base(base: str, num_classes: int, in_channels: int, cfg: ModelsConfig, weights=None) -> nn.Module:
    """A registered model or `timm:<arch>` (canonical), `weights` a file of timm's published ones for the latter."""
    if is_timm_name(base):
        return create_timm(timm_arch(base), num_classes, in_channels, cfg, weights=weights)
    return MODELS.get(base)(num_classes, in_channels, cfg)


def as_recipe(base: str, recipe: str, model: nn.Module, in_channels: int, num_classes: int, cfg: ModelsConfig):
    """`recipe` (resomap.models.recipes) on the built model `base` (its weights loaded): its classifier dropped, its
    layout read from the model (resomap.models.layouts)."""
    if is_timm_name(base):
        model.reset_classifier(0)
        layout = timm_layout(model, base)
        mean, std = model.pretrained_cfg.get("mean", IMAGENET_MEAN), model.pretrained_cfg.get("std", IMAGENET_STD)
    else:
        layout = torchvision_layout(model, base)
        for head in ("fc", "classifier"):  # what reads the pooled features: the recipe brings its own
            if hasattr(model, head):
                setattr(model, head, nn.Identity())
        mean, std = IMAGENET_MEAN, IMAGENET_STD
    net = Net(model, layout, tuple(mean), tuple(std), base)
    return build_recipe(recipe, net, in_channels, num_classes, cfg)


@functools.lru_cache(maxsize=64)
def recipe_meta(name: str) -> dict:
    """What the config check reads of a recipe name (resomap.config.checks.check_model_fit): the finetune and partial
    recipes' stages (`blocks`; the partial one must freeze at least one: `min_frozen`), counted on the base model
    built on the meta device (names only: no weights, no forward)."""
    base, recipe = split_recipe(canonical_name(name))
    if recipe not in ("finetune", "partial"):
        return {}
    with torch.device("meta"):
        net = _build_base(base, 2, 3, ModelsConfig())
    _, stages = (timm_stages if is_timm_name(base) else torchvision_stages)(net, base)
    return {"blocks": len(stages), "min_frozen": 1} if recipe == "partial" else {"blocks": len(stages)}


def check_input_size(model: nn.Module, name: str, resolution: int, in_channels: int) -> None:
    """A model whose layers shrink a `resolution` px input below one pixel (pooling without padding) is a ModelError
    naming the smallest side it takes. One forward of one zero image in eval mode; more only when that fails."""
    error = _forward_error(model, resolution, in_channels)
    if error is None:
        return
    smallest = _search(model, in_channels, resolution)
    if smallest is None:
        raise error  # not a matter of size: the model's own error, as a forward would give it
    raise ModelError(
        f"{name} needs inputs of at least {smallest} px (its layers shrink smaller ones away); got {resolution}"
    )


def smallest_input_side(model: nn.Module, in_channels: int) -> int | None:
    """The smallest square input side the model takes (1 when every side does), found by forwards of one zero image
    in eval mode (about 2 log2(side) of them); None when no side up to 1024 works (an error not of size)."""
    if _forward_error(model, 1, in_channels) is None:
        return 1
    return _search(model, in_channels, 1)


def usable_resolutions(model: nn.Module, resolutions: Iterable[int], in_channels: int) -> list[int]:
    """The sides of `resolutions` the model takes, sorted: those at or above its smallest input side. One forward at
    the smallest side when it works; a search only when it does not. A model that fails at every side keeps them
    all (its own error then comes from the forward that uses them)."""
    sides = sorted({int(r) for r in resolutions})
    if not sides or _forward_error(model, sides[0], in_channels) is None:
        return sides
    smallest = _search(model, in_channels, sides[0])
    return sides if smallest is None else [r for r in sides if r >= smallest]


def _search(model: nn.Module, in_channels: int, low: int) -> int | None:
    """The smallest side above `low` (a side that fails) that works: double until one works, then halve the gap
    (the layers' output sides only grow with the input). None when none up to 1024 does."""
    ok = None
    while ok is None and low < 1024:
        side = min(low * 2, 1024)
        if _forward_error(model, side, in_channels) is None:
            ok = side
        else:
            low = side
    if ok is None:
        return None
    while ok - low > 1:
        mid = (low + ok) // 2
        low, ok = (low, mid) if _forward_error(model, mid, in_channels) is None else (mid, ok)
    return ok


def _forward_error(model: nn.Module, side: int, in_channels: int) -> Exception | None:
    """The error of one forward of a zero `side` px image (on the model's device, in its float type), or None."""
    param = next(model.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    dtype = param.dtype if param is not None and param.is_floating_point() else torch.float32
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(torch.zeros(1, in_channels, side, side, device=device, dtype=dtype))
    except (RuntimeError, ValueError) as exc:
        return exc
    finally:
        model.train(was_training)
    return None


def set_grad_checkpointing(model: nn.Module, enabled: bool = True) -> bool:
    """Recompute activations in backward instead of storing them; False when the model has no known stages.

    timm models use their own switch. For torchvision ResNets (layer1..layer4) and the models built on a
    `features` Sequential (VGG, MobileNet, EfficientNet, the small CNNs), each stage's forward is wrapped with
    torch.utils.checkpoint while training, leaving the module tree (and so the CAM layer names) unchanged.
    """
    fn = getattr(model, "set_grad_checkpointing", None)
    if callable(fn):
        fn(enabled)
        return True
    stages = [getattr(model, f"layer{i}") for i in range(1, 5) if hasattr(model, f"layer{i}")]
    features = getattr(model, "features", None)
    if not stages and isinstance(features, nn.Sequential):
        # blocks with weights only: a checkpointed in-place activation would lose the input it saved
        stages = [c for c in features.children() if next(c.parameters(), None) is not None]
    if not stages:
        return False
    for stage in stages:
        if enabled and not hasattr(stage, "_plain_forward"):
            stage._plain_forward = stage.forward
            stage.forward = functools.partial(_checkpointed, stage)
        elif not enabled and hasattr(stage, "_plain_forward"):
            stage.forward = stage._plain_forward
            del stage._plain_forward
    return True


def _checkpointed(stage: nn.Module, *args: torch.Tensor) -> torch.Tensor:
    if stage.training and torch.is_grad_enabled():
        return torch.utils.checkpoint.checkpoint(stage._plain_forward, *args, use_reentrant=False)
    return stage._plain_forward(*args)


@functools.cache
def _row(name: str) -> ModelRow:
    spec = get_spec(name)
    with torch.device("meta"):  # parameter shapes only: no memory, no init cost
        model = MODELS.get(name)(2, 3, ModelsConfig())
    params = sum(p.numel() for p in model.parameters())
    return ModelRow(spec.name, spec.family, round(params / 1e6, 3), spec.cam_layers[0])


def model_table() -> list[ModelRow]:
    """One row per registered model: name, family, parameters (millions), default CAM layer."""
    return [_row(name) for name in list_models()]
