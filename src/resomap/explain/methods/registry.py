"""The explainer registry, built explainers, and the model-state guard they run inside.

An explainer is registered with `@register_explainer(name, options=..., needs_spatial_layer=..., slow=...)` on
either
- a class (preferably a `BaseExplainer` subclass) built once per (model, resolution) with its model-bound state
  (CAM layer, grad-cam object and its hooks, captum object) and then called per batch through `explain(images,
  targets)`; `close()` releases that state; or
- a plain function `fn(model, images, targets, *, spec, resolution, cfg, min_cam_size=4)` (it also gets
  `options=` when it takes that parameter), built as a partial of the function.

`build_explainer(name, model, ...)` returns a `BuiltExplainer`: `maps = explainer(images, targets)` checks the
inputs, runs the method with the input requiring grad and returns finite float32 [B,r,r] maps on the CPU;
`explainer.close()` (or `with build_explainer(...) as explainer:`) releases it.

The guard (`explaining(model)`, a `ModelGuard`) puts the model in eval mode with out-of-place ReLUs and no
parameter grads; on exit (also on error) every hook added under it is removed and each module's training flag,
each ReLU's `inplace` flag and each parameter's requires_grad and .grad are restored. It is entered once around
the whole use of the built explainers (`explain_probe_set` enters it once per probe set); nested guards of the
same model are no-ops, and an explainer built outside any guard holds its own from build to close.

This module imports no explanation library: they are imported where used, when an explainer is built.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch
from torch import nn

from resomap.config.groups import register_group
from resomap.config.schema import ExplainabilityConfig
from resomap.errors import ExplainError
from resomap.explain.methods.targets import IGNORE
from resomap.models import ModelSpec
from resomap.registry import Registry

log = logging.getLogger(__name__)

# Hook dicts of nn.Module; new keys added under a guard are removed on exit.
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


class ExplainFn(Protocol):
    """fn(model, images [B,C,r,r] float, targets [B] int64, *, spec, resolution, cfg, min_cam_size) -> [B,r,r].

    The form of a plain registered function, and of the one-shot callables `get_explainer` and `guarded` return
    (those also take `options=`). Maps are finite, on the CPU, raw (not rescaled by ResoMap; grad-cam's own
    [0,1] CAM scaling is kept). `min_cam_size` is the smallest feature-map side a CAM layer may have.
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


class Explainer(Protocol):
    """A built explainer: `explainer(images, targets) -> float32 [B,r,r]` per batch, `close()` once."""

    def __call__(self, images: torch.Tensor, targets: torch.Tensor) -> torch.Tensor: ...

    def close(self) -> None: ...


class BaseExplainer:
    """Base of class explainers: model-bound state is built in `__init__`, `explain` runs per batch.

    `explain(images, targets)` gets float images [B,C,r,r] that require grad and int64 targets [B] on the
    images' device, inside the guard (eval mode, no parameter grads, grad enabled), and returns [B,r,r] maps
    (any device/dtype). `close()` releases hooks and other model-bound state; it is called once.
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
    ) -> None:
        self.model = model
        self.spec = spec
        self.resolution = resolution
        self.cfg = cfg
        self.options = options
        self.min_cam_size = min_cam_size

    def explain(self, images: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def close(self) -> None:
        """Nothing to release by default."""


class FunctionExplainer(BaseExplainer):
    """A plain registered function bound to its model and settings (a partial of it)."""

    def __init__(self, fn: Callable[..., Any], model: nn.Module, **kw: Any) -> None:
        super().__init__(model, **kw)
        self.fn = fn
        self.name = getattr(fn, "__name__", type(fn).__name__)
        try:
            takes_options = "options" in inspect.signature(fn).parameters
        except (TypeError, ValueError):
            takes_options = False
        extra = {"options": self.options} if takes_options else {}
        self.call = functools.partial(
            fn, spec=self.spec, resolution=self.resolution, cfg=self.cfg, min_cam_size=self.min_cam_size, **extra
        )

    def explain(self, images: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.call(self.model, images, targets)


TARGET_FORMS = ("class", "region")  # resomap.explain.methods.targets
Factory = Callable[..., BaseExplainer]  # factory(model, *, spec, resolution, cfg, options, min_cam_size)
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
    """Register an explainer class (built once per model and resolution) or a plain explain function.

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
            if not callable(getattr(obj, "explain", None)):
                raise TypeError(f"explainer class {obj.__name__} needs an explain(images, targets) method")
            factory: Factory = obj
        elif callable(obj):
            factory = functools.partial(FunctionExplainer, obj)
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


# ------------------------------------------------------------------------------------------------ the guard

_ACTIVE: weakref.WeakKeyDictionary[nn.Module, ModelGuard] = weakref.WeakKeyDictionary()


class ModelGuard:
    """Saves the model's state on `enter`, sets it up for explaining, and restores it on `exit`.

    `reset()` (after a failed method) removes hooks added since `enter` and sets the explaining state again, so
    one failing method cannot leak hooks or flags into the next. Not re-entrant: use `explaining`.
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self._saved: tuple | None = None

    @property
    def active(self) -> bool:
        return self._saved is not None

    def enter(self) -> ModelGuard:
        if self._saved is not None:
            raise RuntimeError("ModelGuard entered twice")
        model = self.model
        modules = list(model.modules())
        modes = [(m, m.training) for m in modules]
        inplace = [(m, m.inplace) for m in modules if isinstance(getattr(m, "inplace", None), bool)]
        params = [(p, p.requires_grad, p.grad) for p in model.parameters()]
        hooks = [(m, attr, set(getattr(m, attr).keys())) for m in modules for attr in _HOOK_DICTS if hasattr(m, attr)]
        full_bw = [(m, getattr(m, "_is_full_backward_hook", None)) for m in modules]
        self._saved = (modes, inplace, params, hooks, full_bw)
        _ACTIVE[model] = self
        try:
            self._setup(self._saved)
        except BaseException:
            self.exit()
            raise
        return self

    def _setup(self, saved: tuple) -> None:
        _, inplace, params, _, _ = saved
        self.model.eval()
        for m, _ in inplace:
            m.inplace = False  # in-place ReLUs break backward hooks (guided backprop, grad-cam tensor hooks)
        for p, _, _ in params:
            p.requires_grad_(False)  # grads are needed w.r.t. the input only; .grad is restored on exit

    def _remove_hooks(self, saved: tuple) -> None:
        _, _, params, hooks, full_bw = saved
        for m, attr, keys in hooks:
            d = getattr(m, attr)
            for key in [k for k in d if k not in keys]:
                del d[key]
        for m, flag in full_bw:
            m._is_full_backward_hook = flag
        for p, _, grad in params:
            p.grad = grad

    def reset(self) -> None:
        """Back to the state right after `enter` (hooks added since removed, explaining flags set again)."""
        if self._saved is None:
            return
        self._remove_hooks(self._saved)
        self._setup(self._saved)

    def exit(self) -> None:
        if self._saved is None:
            return
        try:
            self._remove_hooks(self._saved)
            modes, inplace, params, _, _ = self._saved
            for m, training in modes:
                m.training = training
            for m, flag in inplace:
                m.inplace = flag
            for p, req, _ in params:
                p.requires_grad_(req)
        finally:
            self._saved = None
            if _ACTIVE.get(self.model) is self:
                del _ACTIVE[self.model]


def active_guard(model: nn.Module) -> ModelGuard | None:
    """The guard the model is under, if any."""
    guard = _ACTIVE.get(model)
    return guard if guard is not None and guard.active else None


@contextlib.contextmanager
def explaining(model: nn.Module) -> Iterator[ModelGuard]:
    """Eval mode, no parameter grads, out-of-place ReLUs, grad enabled; restores all of it and removes added
    hooks on exit. Inside another `explaining` of the same model it only enables grad (yields the outer guard)."""
    outer = active_guard(model)
    if outer is not None:
        with torch.enable_grad():
            yield outer
        return
    guard = ModelGuard(model).enter()
    try:
        with torch.enable_grad():
            yield guard
    finally:
        guard.exit()


# ------------------------------------------------------------------------------------------ built explainers

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


class BuiltExplainer:
    """One method bound to one model and resolution: `maps = explainer(images, targets)`, then `close()`.

    Built inside `explaining(model)` it uses that guard; built outside one it holds its own guard from build to
    `close()` (so the model is in explaining state in between: close it, or use it as a context manager).
    """

    def __init__(
        self,
        name: str,
        model: nn.Module,
        factory: Factory,
        *,
        spec: ModelSpec,
        resolution: int,
        cfg: ExplainabilityConfig,
        options: Any,
        min_cam_size: int,
    ) -> None:
        self.name = name
        self.model = model
        self.resolution = resolution
        self.options = options
        self._own_guard = None if active_guard(model) is not None else ModelGuard(model).enter()
        try:
            with torch.enable_grad():
                self.impl = factory(
                    model, spec=spec, resolution=resolution, cfg=cfg, options=options, min_cam_size=min_cam_size
                )
        except BaseException:
            if self._own_guard is not None:
                self._own_guard.exit()
            raise
        self._closed = False

    def __call__(self, images: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self._closed:
            raise ExplainError(f"explainer {self.name} is closed; build it again")
        if active_guard(self.model) is None:
            raise ExplainError(f"explainer {self.name}: its model's guard was exited before the explainer was closed")
        with torch.enable_grad():
            targets = check_inputs(self.model, images, targets, self.resolution)
            x = images.detach().clone().float().requires_grad_(True)
            out = self.impl.explain(x, targets)
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
            self.impl.close()
        finally:
            if self._own_guard is not None:
                self._own_guard.exit()

    def __enter__(self) -> BuiltExplainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def build_explainer(
    name: str,
    model: nn.Module,
    *,
    spec: ModelSpec,
    resolution: int,
    cfg: ExplainabilityConfig,
    min_cam_size: int = 4,
    options: Any = None,
) -> BuiltExplainer:
    """Build method `name` for this model at this resolution; `options` defaults to `cfg`'s options of the method.
    Unknown names raise UnknownNameError listing the methods."""
    key = EXPLAINERS.resolve(name)
    if options is None:
        options = explainer_options(cfg, key)
    return BuiltExplainer(
        key,
        model,
        EXPLAINERS.get(key),
        spec=spec,
        resolution=resolution,
        cfg=cfg,
        options=options,
        min_cam_size=min_cam_size,
    )


class OneShot:
    """The old one-call form: `fn(model, images, targets, *, spec, resolution, cfg, min_cam_size=4, options=None)`
    builds the explainer, explains one batch and closes it (used by `get_explainer`, `guarded`, sanity checks)."""

    def __init__(self, name: str, factory: Factory | None = None) -> None:
        self.name = name
        self.factory = factory
        self.__name__ = name

    def build(self, model: nn.Module, **kw: Any) -> BuiltExplainer:
        if self.factory is None:
            return build_explainer(self.name, model, **kw)
        kw.setdefault("min_cam_size", 4)
        options = kw.pop("options", None)
        return BuiltExplainer(self.name, model, self.factory, options=options, **kw)

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
        options: Any = None,
    ) -> torch.Tensor:
        kw = dict(spec=spec, resolution=resolution, cfg=cfg, min_cam_size=min_cam_size, options=options)
        with explaining(model), self.build(model, **kw) as explainer:
            return explainer(images, targets)

    def __repr__(self) -> str:
        return f"<explainer {self.name}>"


def get_explainer(name: str) -> OneShot:
    """A one-shot callable of method `name` (build, explain one batch, close); unknown names raise
    UnknownNameError listing the methods. To explain several batches, use `build_explainer`."""
    return OneShot(EXPLAINERS.resolve(name))


def guarded(fn: Callable[..., Any]) -> OneShot:
    """A plain explain function as a one-shot explainer: checked inputs, run inside the guard, float32 [B,r,r]
    maps on the CPU (what registered functions get)."""
    return OneShot(getattr(fn, "__name__", "explainer"), functools.partial(FunctionExplainer, fn))


def reduce_channels(attr: torch.Tensor) -> torch.Tensor:
    """[B,C,H,W] -> [B,H,W]: sum of |attribution| over channels (the captum/shap/lime convention here)."""
    return attr.detach().abs().sum(dim=1)
