"""The model-state guard explainers run inside.

`explaining(model)` (a `ModelGuard`) puts the model in eval mode with out-of-place ReLUs and no parameter grads; on
exit (also on error) every hook added under it is removed and each module's training flag, each ReLU's `inplace`
flag and each parameter's requires_grad and .grad are restored. It is entered once around the whole use of the built
explainers (`explain_probe_set` enters it once per probe set); nested guards of the same model are no-ops, and an
explainer built outside any guard holds its own from build to close.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator

import torch
from torch import nn

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
