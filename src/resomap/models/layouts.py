"""The layout (resomap.models.recipes.Layout) of a timm or torchvision backbone, read from the model itself.

- timm: the modules its forward applies in order are its top-level children, a Sequential holding its
  `feature_info` stages (`blocks`, `stages`) taken one child at a time (timm's own features_only assumes the same);
  the stages are the `feature_info` modules that hold weights (`act1` of a ResNet is its stem's end), or the
  children of the Sequential they sit in; the sequence ends where it gives what `forward_features` gives.
- torchvision: the children before `avgpool`, a `features` Sequential one child at a time; the stages are `layer<i>`
  (ResNets) or the children of `features`; pooled by a global average.

The pooled features read every stage at a stride of 8 or more and the final map. A model whose forward is not the
sequence of its children (a vision transformer adds position embeddings and a class token) is refused in one line:
`check_sequence` compares the sequence with the model's own features on one image before a recipe uses it.
"""

from __future__ import annotations

import torch
from torch import nn

from resomap.errors import ModelError
from resomap.models.recipes import Layout
from resomap.models.spec import input_channels

TAP_STRIDE = 8  # the pooled features read the stages at this stride and deeper (Lite's taps: its stages 2-6)


def _flattened(model: nn.Module, containers: set[str], stop: str | None = None) -> list[str]:
    names = []
    for name, child in model.named_children():
        if name == stop:
            break
        if name in containers and isinstance(child, nn.Sequential):
            names += [f"{name}.{sub}" for sub, _ in child.named_children()]
        else:
            names.append(name)
    return names


def _run(model: nn.Module, names: list[str], x: torch.Tensor) -> list[torch.Tensor]:
    outs = []
    for name in names:
        x = model.get_submodule(name)(x)
        outs.append(x)
    return outs


def _has_weights(module: nn.Module) -> bool:
    return next(module.parameters(), None) is not None


def _dry(model: nn.Module, fn):
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            return fn(torch.randn(1, input_channels(model), 64, 64, generator=torch.Generator().manual_seed(0)))
    finally:
        model.train(was)


def _taps(outs: list[torch.Tensor], stages: tuple[int, ...], side: int) -> tuple[int, ...]:
    deep = [i for i in stages if outs[i].dim() == 4 and side // max(1, outs[i].shape[-1]) >= TAP_STRIDE]
    return tuple(sorted({*deep, len(outs) - 1}))


def _not_sequential(name: str, why: str) -> ModelError:
    return ModelError(
        f"{name} does not run as the sequence of its stages ({why}), so its frozen-feature and partial recipes "
        "cannot cut it; train it whole: use the plain name without '@'"
    )


def timm_stages(model: nn.Module, name: str) -> tuple[list[str], list[str]]:
    """(the children a timm model's forward applies in order, its stages among them), from names alone (a model on
    the meta device will do: the config check counts the stages so)."""
    infos = [info["module"] for info in getattr(model, "feature_info", None) or [] if info.get("module")]
    if not infos:
        raise _not_sequential(name, "no feature_info")
    containers = {m.split(".")[0] for m in infos if "." in m}
    names = _flattened(model, containers)
    stages = [n for n in names if n.split(".")[0] in containers] if containers else []
    stages = stages or [n for n in infos if n in names and _has_weights(model.get_submodule(n))]
    if not stages:
        raise _not_sequential(name, "its feature_info stages are not among its children")
    return names, stages


def torchvision_stages(model: nn.Module, name: str) -> tuple[list[str], list[str]]:
    """(the children before a torchvision classifier's avgpool, in order; its stages among them), from names alone."""
    if not hasattr(model, "avgpool"):
        raise _not_sequential(name, "no avgpool")
    names = _flattened(model, {"features"}, stop="avgpool")
    stages = [n for n in names if n.startswith("layer")] or [n for n in names if n.startswith("features.")]
    if not stages:
        raise _not_sequential(name, "no layer<i> or features stages")
    return names, stages


def timm_layout(model: nn.Module, name: str) -> Layout:
    """The layout of a timm model built with num_classes=0 (see the module's docstring)."""
    names, stages = timm_stages(model, name)

    def walk(x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        return _run(model, names, x), model.forward_features(x)

    try:
        outs, target = _dry(model, walk)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise _not_sequential(name, f"its children fail in order: {str(exc).splitlines()[0][:120]}") from None
    last = names.index(stages[-1])
    end = next((i for i in range(last, len(outs)) if _same(outs[i], target)), None)
    if end is None:
        raise _not_sequential(name, "its children in order do not give its forward_features")
    sequence = tuple(names[: end + 1])
    positions = tuple(sequence.index(s) for s in stages)
    return Layout(sequence, positions, _taps(outs[: end + 1], positions, 64), pool="timm")


def torchvision_layout(model: nn.Module, name: str) -> Layout:
    """The layout of a torchvision classifier (see the module's docstring), checked against its own forward: the
    input its `avgpool` receives."""
    names, stages = torchvision_stages(model, name)
    seen: list[torch.Tensor] = []
    handle = model.avgpool.register_forward_pre_hook(lambda _m, args: seen.append(args[0]))
    try:
        outs = _dry(model, lambda x: (_run(model, names, x), model(x))[0])
    finally:
        handle.remove()
    if not seen or not _same(outs[-1], seen[0]):
        raise _not_sequential(name, "its children before avgpool in order do not give what avgpool reads")
    positions = tuple(names.index(s) for s in stages)
    return Layout(tuple(names), positions, _taps(outs, positions, 64), pool="avg")


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return isinstance(a, torch.Tensor) and a.shape == b.shape and torch.allclose(a, b, rtol=1e-4, atol=1e-5)
