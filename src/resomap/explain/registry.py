"""The explainer registry, its one signature (a Protocol) and the guard every explainer runs inside.

Every registered explainer is wrapped by `guarded`: inputs are checked, the model is put in eval mode with the
input requiring grad, and on exit (also on error) every hook added during the call is removed and each module's
training flag, each ReLU's `inplace` flag and each parameter's requires_grad and .grad are restored.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch
from torch import nn

from resomap.config.schema import ExplainabilityConfig
from resomap.errors import ExplainError
from resomap.models import ModelSpec
from resomap.registry import Registry

log = logging.getLogger(__name__)

# Hook dicts of nn.Module; new keys added during an explainer call are removed on exit.
_HOOK_DICTS = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks_with_kwargs",
    "_state_dict_hooks",
)


class Explainer(Protocol):
    """explain(model, images [B,C,r,r] float, targets [B] int64, *, spec, resolution, cfg) -> float32 [B,r,r].

    Maps are finite, on the CPU, raw (not rescaled by ResoMap; grad-cam's own [0,1] CAM scaling is kept).
    `min_cam_size` is the smallest feature-map side a CAM layer may have (ModelsConfig.min_cam_size).
    """

    def __call__(
        self,
        model: nn.Module,
        images: torch.Tensor,
        targets: torch.Tensor,
        *,
        spec: ModelSpec,
        resolution: int,
        cfg: ExplainabilityConfig,
        min_cam_size: int = 4,
    ) -> torch.Tensor: ...


EXPLAINERS: Registry[Explainer] = Registry("explainer", "resomap explainers")


def register_explainer(name: str, *, needs_spatial_layer: bool, slow: bool) -> Callable[[Callable], Explainer]:
    """Register an explain function (or a class whose instances are such functions), wrapped by `guarded`."""

    def deco(obj: Callable) -> Explainer:
        fn = obj() if isinstance(obj, type) else obj
        EXPLAINERS.register(name, needs_spatial_layer=needs_spatial_layer, slow=slow)(guarded(fn))
        return obj

    return deco


def get_explainer(name: str) -> Explainer:
    """The guarded explainer; unknown names raise UnknownNameError listing the methods."""
    return EXPLAINERS.get(name)


def list_explainers() -> list[str]:
    return EXPLAINERS.names()


def explainer_meta(name: str) -> dict[str, Any]:
    """{'name', 'needs_spatial_layer', 'slow'} of a registered explainer."""
    return EXPLAINERS.meta(name)


@contextlib.contextmanager
def explaining(model: nn.Module) -> Iterator[None]:
    """Eval mode, no parameter grads, out-of-place ReLUs; restores all of it and removes added hooks on exit."""
    modules = list(model.modules())
    modes = [(m, m.training) for m in modules]
    inplace = [(m, m.inplace) for m in modules if isinstance(getattr(m, "inplace", None), bool)]
    params = [(p, p.requires_grad, p.grad) for p in model.parameters()]
    hooks = [(m, attr, set(getattr(m, attr).keys())) for m in modules for attr in _HOOK_DICTS if hasattr(m, attr)]
    full_bw = [(m, getattr(m, "_is_full_backward_hook", None)) for m in modules]
    try:
        model.eval()
        for m, _ in inplace:
            m.inplace = False  # in-place ReLUs break backward hooks (guided backprop, grad-cam tensor hooks)
        for p, _, _ in params:
            p.requires_grad_(False)  # grads are needed w.r.t. the input only; .grad is never touched
        with torch.enable_grad():
            yield
    finally:
        for m, attr, keys in hooks:
            d = getattr(m, attr)
            for key in [k for k in d if k not in keys]:
                del d[key]
        for m, flag in full_bw:
            m._is_full_backward_hook = flag
        for m, training in modes:
            m.training = training
        for m, flag in inplace:
            m.inplace = flag
        for p, req, grad in params:
            p.requires_grad_(req)
            p.grad = grad


_NUM_OUTPUTS: weakref.WeakKeyDictionary[nn.Module, int] = weakref.WeakKeyDictionary()


def num_outputs(model: nn.Module, images: torch.Tensor) -> int:
    """Classes of the model's output (one single-image forward, cached per model)."""
    if model not in _NUM_OUTPUTS:
        with torch.no_grad():
            out = model(images[:1])
        _NUM_OUTPUTS[model] = int(out.shape[-1])
    return _NUM_OUTPUTS[model]


def check_inputs(model: nn.Module, images: torch.Tensor, targets: torch.Tensor, resolution: int) -> torch.Tensor:
    """Validate shapes and target range; returns targets as int64 on the images' device."""
    if images.dim() != 4 or images.shape[-2:] != (resolution, resolution):
        raise ExplainError(f"images must be [B, C, {resolution}, {resolution}], got {list(images.shape)}")
    targets = torch.as_tensor(targets, dtype=torch.int64, device=images.device).reshape(-1)
    if targets.numel() != images.shape[0]:
        raise ExplainError(f"got {targets.numel()} targets for {images.shape[0]} images; give one per image")
    n = num_outputs(model, images)
    bad = targets[(targets < 0) | (targets >= n)]
    if bad.numel():
        raise ExplainError(f"target class {int(bad[0])} is out of range; valid classes are 0..{n - 1}")
    return targets


def guarded(fn: Callable[..., Any]) -> Explainer:
    """Wrap an explain function: checks inputs, runs it inside `explaining`, returns float32 [B,r,r] on CPU."""

    @functools.wraps(fn)
    def run(model, images, targets, *, spec, resolution, cfg, min_cam_size=4):
        with explaining(model):
            targets = check_inputs(model, images, targets, resolution)
            x = images.detach().clone().float().requires_grad_(True)
            out = fn(model, x, targets, spec=spec, resolution=resolution, cfg=cfg, min_cam_size=min_cam_size)
        maps = torch.as_tensor(out).detach().to("cpu", torch.float32)
        if maps.shape != (images.shape[0], resolution, resolution):
            raise ExplainError(f"{fn.__name__} returned {list(maps.shape)}, expected [B, {resolution}, {resolution}]")
        return torch.nan_to_num(maps, nan=0.0, posinf=0.0, neginf=0.0)

    return run


def reduce_channels(attr: torch.Tensor) -> torch.Tensor:
    """[B,C,H,W] -> [B,H,W]: sum of |attribution| over channels (the captum/shap/lime convention here)."""
    return attr.detach().abs().sum(dim=1)
