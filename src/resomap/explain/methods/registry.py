"""The explainer type, its registry and its factory.

An explainer is an `Explainer`: one method bound to one model and resolution. It is registered with
`@register_explainer(name, options=..., needs_spatial_layer=..., slow=..., targets=...)` on either
- an `Explainer` subclass, built once per (model, resolution) with its model-bound state (CAM layer, grad-cam object
  and its hooks, captum object) in `__init__`, called per batch through `explain(images, targets)`, its state freed
  by `release()`; or
- a plain function `fn(model, images, targets, *, spec, resolution, cfg, min_cam_size=4)` (it also gets `options=`
  when it takes that parameter), which becomes an `Explainer` calling it.

`build_explainer(name, model, ...)` (the factory) builds it: `maps = explainer(images, targets)` checks the inputs,
runs the method with the input requiring grad and returns finite float32 [B,r,r] maps on the CPU;
`explainer.close()` (or `with build_explainer(...) as explainer:`) releases it. `get_explainer(name)` and
`guarded(fn)` give the one-call form (build, explain one batch, close). The model runs inside the guard
(resomap.explain.methods.guard).

This module imports no explanation library: they are imported where used, when an explainer is built.
"""

from __future__ import annotations

import functools
import inspect
import logging
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from resomap.config.groups import register_group
from resomap.config.schema import ExplainabilityConfig
from resomap.errors import ExplainError
from resomap.explain.methods.guard import ModelGuard, active_guard, explaining
from resomap.explain.methods.targets import IGNORE
from resomap.models import ModelSpec
from resomap.registry import Registry

__all__ = [
    "EXPLAINERS",
    "Explainer",
    "build_explainer",
    "explainer_meta",
    "explainer_options",
    "get_explainer",
    "guarded",
    "list_explainers",
    "per_map_scaled",
    "reduce_channels",
    "register_explainer",
]

log = logging.getLogger(__name__)


class Explainer:
    """One attribution method bound to one model and resolution: the explainer type.

    A method subclasses it (or is a plain function that one calls): model-bound state is built in `__init__`;
    `explain(images, targets)` gets float images [B,C,r,r] that require grad and int64 targets (class [B] or region
    [B, r, r]) on the images' device, inside the guard (eval mode, no parameter grads, grad enabled), and returns
    [B,r,r] maps (any device/dtype); `release()` frees hooks and other model-bound state, once.

    Built by `build_explainer`, it is used as `maps = explainer(images, targets)` (checked inputs; finite float32
    [B,r,r] maps on the CPU) and `close()`. Built inside `explaining(model)` it uses that guard; built outside one
    it holds its own guard from build to `close()` (so the model is in explaining state in between: close it, or
    use it as a context manager).
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        spec: ModelSpec,
        resolution: int,
        cfg: ExplainabilityConfig,
        options: Any = None,
        min_cam_size: int = 4,
        fn: Callable[..., Any] | None = None,
    ) -> None:
        self.model = model
        self.spec = spec
        self.resolution = resolution
        self.cfg = cfg
        self.options = options
        self.min_cam_size = min_cam_size
        self.fn = fn  # a registered plain function: what `explain` calls
        self.name = getattr(fn, "__name__", None) or type(self).__name__  # build_explainer sets the registered name
        self._fn_options = fn is not None and _takes_options(fn)
        self._own_guard: ModelGuard | None = None
        self._closed = False

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        for name, instead in (("close", "release()"), ("__call__", "explain(images, targets)")):
            if name in vars(cls):
                raise TypeError(f"explainer class {cls.__name__}: override {instead}, not {name}")

    def explain(self, images: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self.fn is None:
            raise NotImplementedError(f"explainer class {type(self).__name__} needs an explain(images, targets) method")
        extra = {"options": self.options} if self._fn_options else {}
        kw = dict(spec=self.spec, resolution=self.resolution, cfg=self.cfg, min_cam_size=self.min_cam_size)
        return self.fn(self.model, images, targets, **kw, **extra)

    def release(self) -> None:
        """Nothing to release by default."""

    def __call__(self, images: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self._closed:
            raise ExplainError(f"explainer {self.name} is closed; build it again")
        if active_guard(self.model) is None:
            raise ExplainError(f"explainer {self.name}: its model's guard was exited before the explainer was closed")
        with torch.enable_grad():
            targets = check_inputs(self.model, images, targets, self.resolution)
            x = images.detach().clone().float().requires_grad_(True)
            out = self.explain(x, targets)
        maps = torch.as_tensor(out).detach().to("cpu", torch.float32)
        if maps.shape != (images.shape[0], self.resolution, self.resolution):
            raise ExplainError(
                f"{self.name} returned {list(maps.shape)}, expected [B, {self.resolution}, {self.resolution}]"
            )
        return torch.nan_to_num(maps, nan=0.0, posinf=0.0, neginf=0.0)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.release()
        finally:
            if self._own_guard is not None:
                self._own_guard.exit()

    def __enter__(self) -> Explainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<explainer {self.name}>"


def _takes_options(fn: Callable[..., Any]) -> bool:
    try:
        return "options" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


TARGET_FORMS = ("class", "region")  # resomap.explain.methods.targets
Factory = Callable[..., Explainer]  # factory(model, *, spec, resolution, cfg, options, min_cam_size) -> Explainer
EXPLAINERS: Registry[Factory] = Registry("explainer", "resomap explainers")
register_group("explainability", EXPLAINERS)  # the loader checks the section's selectors and options against it


def register_explainer(
    name: str,
    *,
    options: type | None = None,
    needs_spatial_layer: bool = False,
    slow: bool = False,
    targets: tuple[str, ...] = ("class",),
) -> Callable[[Any], Any]:
    """Register an `Explainer` subclass (built once per model and resolution) or a plain explain function.

    `options`: a frozen dataclass of the method's own settings (config keys `explainability.<name>.<field>`,
    one `# comment` per field); the built explainer gets the configured instance as `options`.
    `targets`: the target forms it explains (methods.targets): "class" (a class logit, targets [B]) and/or
    "region" (a class's logits summed over a region, targets [B, r, r]); a task lists the form its probe
    targets take, and the config check refuses an explainer that does not take it.
    Returns the decorated object unchanged.
    """
    unknown = set(targets) - set(TARGET_FORMS)
    if unknown or not targets:
        raise ValueError(f"explainer '{name}': targets must be a non-empty subset of {TARGET_FORMS}, got {targets!r}")

    def deco(obj: Any) -> Any:
        if isinstance(obj, type):
            if not issubclass(obj, Explainer):
                raise TypeError(f"explainer class {obj.__name__} must subclass resomap.explain.Explainer")
            factory: Factory = obj
        elif callable(obj):
            factory = functools.partial(Explainer, fn=obj)
        else:
            raise TypeError(f"explainer '{name}' must be a class or a function, got {obj!r}")
        EXPLAINERS.register(
            name, options=options, needs_spatial_layer=needs_spatial_layer, slow=slow, targets=tuple(targets)
        )(factory)
        return obj

    return deco


def per_map_scaled(method: str) -> bool:
    """True for a method whose maps are each scaled to [0, 1] (the CAM methods): not comparable across maps."""
    try:
        return bool(EXPLAINERS.meta(method).get("needs_spatial_layer", False))
    except Exception:  # a method no longer registered: treat its maps as per-map
        return True


def list_explainers() -> list[str]:
    return EXPLAINERS.names()


def explainer_meta(name: str) -> dict[str, Any]:
    """{'name', 'options', 'needs_spatial_layer', 'slow', 'targets'} of a registered explainer."""
    return EXPLAINERS.meta(name)


def explainer_options(cfg: Any, name: str) -> Any:
    """The options instance of method `name` in `cfg` (an ExplainabilityConfig): as configured, else the
    defaults of its options dataclass; None when the method has no options."""
    from resomap.config.groups import group_options

    return group_options(cfg, name)


_NUM_OUTPUTS: weakref.WeakKeyDictionary[nn.Module, int] = weakref.WeakKeyDictionary()


def num_outputs(model: nn.Module, images: torch.Tensor) -> int:
    """Classes of the model's output (one single-image forward, cached per model)."""
    if model not in _NUM_OUTPUTS:
        with torch.no_grad():
            out = model(images[:1])
        _NUM_OUTPUTS[model] = int(out.shape[1])  # logits [B, K] or [B, K, r, r]
    return _NUM_OUTPUTS[model]


def check_inputs(model: nn.Module, images: torch.Tensor, targets: torch.Tensor, resolution: int) -> torch.Tensor:
    """Validate shapes and target range; returns targets (class [B] or region [B, r, r], methods.targets)
    as int64 on the images' device."""
    if images.dim() != 4 or images.shape[-2:] != (resolution, resolution):
        raise ExplainError(f"images must be [B, C, {resolution}, {resolution}], got {list(images.shape)}")
    targets = torch.as_tensor(targets, dtype=torch.int64, device=images.device)
    if targets.dim() != 3:
        targets = targets.reshape(-1)
    elif targets.shape[-2:] != images.shape[-2:]:
        raise ExplainError(f"region targets must be [B, {resolution}, {resolution}], got {list(targets.shape)}")
    if targets.shape[0] != images.shape[0]:
        raise ExplainError(f"got {targets.shape[0]} targets for {images.shape[0]} images; give one per image")
    n = num_outputs(model, images)
    classes = targets[targets != IGNORE] if targets.dim() == 3 else targets
    bad = classes[(classes < 0) | (classes >= n)]
    if bad.numel():
        raise ExplainError(f"target class {int(bad[0])} is out of range; valid classes are 0..{n - 1}")
    return targets


def build_explainer(
    name: str,
    model: nn.Module,
    *,
    spec: ModelSpec,
    resolution: int,
    cfg: ExplainabilityConfig,
    min_cam_size: int = 4,
    options: Any = None,
    factory: Factory | None = None,
) -> Explainer:
    """Build method `name` for this model at this resolution (the factory of every explainer); `options` defaults
    to `cfg`'s options of the method. Unknown names raise UnknownNameError listing the methods. `factory` builds an
    unregistered method under `name` instead (`guarded`). Built outside any guard, the explainer holds its own
    until closed; it is built with grad enabled."""
    if factory is None:
        name = EXPLAINERS.resolve(name)
        factory = EXPLAINERS.get(name)
        options = explainer_options(cfg, name) if options is None else options
    own_guard = None if active_guard(model) is not None else ModelGuard(model).enter()
    try:
        with torch.enable_grad():
            explainer = factory(
                model, spec=spec, resolution=resolution, cfg=cfg, options=options, min_cam_size=min_cam_size
            )
    except BaseException:
        if own_guard is not None:
            own_guard.exit()
        raise
    explainer.name, explainer._own_guard = name, own_guard
    return explainer


def explain_once(
    name: str, factory: Factory | None, model: nn.Module, images: torch.Tensor, targets: torch.Tensor, **settings: Any
) -> torch.Tensor:
    """Build method `name` (or `factory`) with `settings` (build_explainer's: spec, resolution, cfg, and
    min_cam_size and options when given), explain one batch and close it, inside the guard."""
    with explaining(model), build_explainer(name, model, factory=factory, **settings) as explainer:
        return explainer(images, targets)


def get_explainer(name: str) -> Callable[..., torch.Tensor]:
    """The one-call form of method `name`: `fn(model, images, targets, *, spec, resolution, cfg, min_cam_size=4,
    options=None)` builds it, explains one batch and closes it; unknown names raise UnknownNameError listing the
    methods. To explain several batches, use `build_explainer`."""
    return functools.partial(explain_once, EXPLAINERS.resolve(name), None)


def guarded(fn: Callable[..., Any]) -> Callable[..., torch.Tensor]:
    """A plain explain function in the one-call form of `get_explainer`: checked inputs, run inside the guard,
    float32 [B,r,r] maps on the CPU (what registered functions get)."""
    return functools.partial(explain_once, getattr(fn, "__name__", "explainer"), functools.partial(Explainer, fn=fn))


def reduce_channels(attr: torch.Tensor) -> torch.Tensor:
    """[B,C,H,W] -> [B,H,W]: sum of |attribution| over channels (the captum/shap/lime convention here)."""
    return attr.detach().abs().sum(dim=1)
