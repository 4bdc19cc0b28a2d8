"""Loss terms as a registry (`register_loss`) and the `loss` config group: cross-entropy, Dice, Focal-Tversky and
focal loss are built in (segmentation: `segmentation.loss` sums them).

A loss term may own an options dataclass (`register_loss(name, options=..., task=...)`): its fields are the config
keys `loss.<name>.<field>` (`loss.focal_tversky.gamma`), validated at config load against the dataclass ("did you
mean" for a misspelt key) and refused when the term's `task` is not experiment.task. A plugin task registers its
own terms the same way and builds them with `build_term(name, classes, cfg)`.

This module imports no torch (the command line checks a config before torch is loaded): the modules the built-in
terms return are built by resomap.tasks.loss_modules, imported when a term is built.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from resomap.config.groups import group_options, register_group
from resomap.errors import ConfigError, UnknownNameError
from resomap.registry import Registry

if TYPE_CHECKING:
    import torch
    from torch import nn

    from resomap.config.schema import Config, SegmentationConfig
    from resomap.tasks.loss_modules import CombinedLoss

# fn(num_classes, options, class weights or None) -> nn.Module; `options`: the term's options dataclass or None
LossFn = Callable[[int, Any, "torch.Tensor | None"], "nn.Module"]
LOSSES: Registry[LossFn] = Registry("loss term", "resomap tasks")
register_group("loss", LOSSES)  # the loader checks loss.<term>.* against the term's options

_MOVED = ("SampleWeightedCrossEntropy", "CombinedLoss", "pixel_class_weights")  # torch classes: loss_modules


def __getattr__(name: str) -> Any:
    if name in _MOVED:  # the torch modules live in loss_modules; read through here without importing torch early
        from resomap.tasks import loss_modules

        return getattr(loss_modules, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register_loss(name: str, *, options: type | None = None, task: str = "segmentation") -> Callable[[LossFn], LossFn]:
    """Register a loss term `fn(num_classes, options, weight) -> nn.Module` of `task`'s outputs; `options`: its
    options dataclass (config keys loss.<name>.<field>; None: it has none), `weight` the class weights or None."""
    return LOSSES.register(name, options=options, task=task)


def check_loss_names(names: Sequence[str], weights: Sequence[float], task: str = "segmentation") -> str | None:
    """None when the loss terms are registered terms of `task`, one weight each (or none), else what is wrong (the
    config loader turns it into a ConfigError)."""
    known = [n for n in LOSSES.names() if LOSSES.meta(n).get("task") == task]
    if not names:
        return f"at least one loss term ({', '.join(known)})"
    for name in names:
        if name not in LOSSES:
            return f"loss terms from {', '.join(known)} (no loss term '{name}'{LOSSES.hint(name)})"
        if LOSSES.meta(name).get("task") != task:
            return f"loss terms of the {task} task ({', '.join(known)}); '{name}' is a {LOSSES.meta(name)['task']} loss"
    if weights and len(weights) != len(names):
        return f"one weight per loss term ({len(names)}) or none"
    return None


def check_loss_options(cfg: Config, task: str, fail: Callable[[str, str, Any], None]) -> None:
    """fail on loss.<term> options set for a term of another task than `task` (their keys were checked at load)."""
    for name in cfg.loss.__dict__.get("options") or {}:
        owner = LOSSES.meta(name).get("task")
        if owner != task:
            mine = [n for n in LOSSES.names() if LOSSES.meta(n).get("task") == task and LOSSES.options(n)]
            have = f"one of {', '.join(mine)}" if mine else f"none of the {task} task's loss terms has options"
            fail(f"loss.{name}", f"options of a {task} loss term ({have})", f"{name}, a {owner} loss term")


def loss_options(cfg: Config | None, name: str) -> Any:
    """The options of loss term `name` in cfg's `loss` group (its defaults without a config)."""
    if cfg is None:
        cls = LOSSES.options(name)
        return cls() if cls is not None else None
    return group_options(cfg.loss, name)


def build_term(name: str, num_classes: int, cfg: Config | None = None, weight: torch.Tensor | None = None) -> nn.Module:
    """One registered loss term with its options from cfg (`loss.<name>.*`; None: the defaults)."""
    try:
        fn = LOSSES.get(name)
    except UnknownNameError as exc:
        raise ConfigError(f"loss: {exc}") from None
    return fn(num_classes, loss_options(cfg, name), weight)


def build_loss(cfg: Config | None, num_classes: int, weight: torch.Tensor | None = None) -> CombinedLoss:
    """The segmentation loss of cfg: the sum of segmentation.loss's terms weighted by segmentation.loss_weights,
    each with its options (loss.<term>.*) and the class weights (None: the default config)."""
    from resomap.config.schema import SegmentationConfig
    from resomap.tasks.loss_modules import CombinedLoss

    seg: SegmentationConfig = cfg.segmentation if cfg is not None else SegmentationConfig()
    problem = check_loss_names(seg.loss, seg.loss_weights)
    if problem:
        raise ConfigError(f"segmentation.loss: expected {problem}, got {list(seg.loss)!r}")
    weights = list(seg.loss_weights) or [1.0] * len(seg.loss)
    terms = {LOSSES.resolve(name): build_term(name, num_classes, cfg, weight) for name in seg.loss}
    return CombinedLoss(terms, weights)


# ---------------------------------------------------------------- the built-in terms (segmentation)


@dataclasses.dataclass(frozen=True)
class FocalTverskyOptions:
    alpha: float = 0.3  # weight of false positives (> 0)
    beta: float = 0.7  # weight of false negatives (> 0)
    gamma: float = 0.75  # loss = (1 - Tversky index) ** gamma, per class (1 = plain Tversky; > 0)


def _class_weights(weight: torch.Tensor | None) -> list[float] | None:
    return None if weight is None else [float(w) for w in weight.detach().cpu()]


@register_loss("ce")
def cross_entropy(num_classes: int, options: None, weight: torch.Tensor | None = None) -> nn.Module:
    from torch import nn

    return nn.CrossEntropyLoss(weight=weight)


@register_loss("dice")
def dice(num_classes: int, options: None, weight: torch.Tensor | None = None) -> nn.Module:
    from segmentation_models_pytorch import losses as smp_losses

    return smp_losses.DiceLoss("multiclass", from_logits=True, class_weights=_class_weights(weight))


@register_loss("focal_tversky", options=FocalTverskyOptions)
def focal_tversky(num_classes: int, options: FocalTverskyOptions, weight: torch.Tensor | None = None) -> nn.Module:
    from resomap.tasks.loss_modules import focal_tversky_class

    return focal_tversky_class()(
        "multiclass",
        from_logits=True,
        alpha=options.alpha,
        beta=options.beta,
        gamma=options.gamma,
        class_weights=_class_weights(weight),
    )


@register_loss("focal")
def focal(num_classes: int, options: None, weight: torch.Tensor | None = None) -> nn.Module:
    from segmentation_models_pytorch import losses as smp_losses

    return smp_losses.FocalLoss("multiclass", class_weights=_class_weights(weight))
