"""ModelSpec: what the rest of ResoMap needs to know about a model besides its forward (family, CAM layer)."""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from resomap.errors import ModelError

log = logging.getLogger(__name__)


# How the Trainer fits a model (ModelSpec.fit): "gradient", its loop on images; "closed_form", one solve on the
# training set's arrays (resomap.training.closed_form: the classical baselines, a frozen backbone's linear head);
# "feature_head", its loop on what the model's frozen part gives, computed once per image and view and cached
# (resomap.training.feature_head: a head on pooled features, the top of a partial fine-tune on cached maps)
FitKind = Literal["gradient", "closed_form", "feature_head"]
FIT_KINDS: tuple[str, ...] = ("gradient", "closed_form", "feature_head")
# What a model's frozen part gives and the feature cache keeps (ModelSpec.features): "none" (nothing frozen is
# read apart), "pooled" (a frozen backbone's pooled features: lite<N>_linear, lite<N>_head), "maps" (the output
# maps of its frozen first stages: lite<N>_partial)
FeatureKind = Literal["none", "pooled", "maps"]
FEATURE_KINDS: tuple[str, ...] = ("none", "pooled", "maps")


@dataclass(frozen=True)
class CamLayer:
    """The layer a CAM explainer should hook at one resolution, and the side of its feature map there."""

    name: str
    module: nn.Module
    feature_size: int


def _tokens_to_grid(x: torch.Tensor, grid: int, prefix: int) -> torch.Tensor:
    """[B, prefix + grid*grid, C] tokens -> [B, C, grid, grid] (module level so it pickles)."""
    tokens = x[:, prefix:, :]
    if tokens.shape[1] != grid * grid:
        raise ModelError(
            f"expected {grid}x{grid}={grid * grid} patch tokens after {prefix} prefix tokens, got {tokens.shape[1]};"
            " pass the resolution the model was run at"
        )
    return tokens.reshape(x.shape[0], grid, grid, x.shape[2]).permute(0, 3, 1, 2)


def unwrap(model: nn.Module) -> nn.Module:
    """The plain module behind torch.compile / DataParallel / DDP wrappers (names resolve against it)."""
    model = getattr(model, "_orig_mod", model)
    if isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
        model = model.module
    return model


def input_channels(model: nn.Module) -> int:
    """in_channels of the first Conv2d (the input the model expects), else the model's own `in_channels` (the
    classical baseline), else 3."""
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            return module.in_channels
    own = getattr(model, "in_channels", None)
    return own if isinstance(own, int) else 3


@dataclass(frozen=True)
class ModelSpec:
    """A model's name and family and its CAM candidates (dotted module names, deepest first).

    Token models (ViT-like) set `patch_size` and `num_prefix_tokens`; their CAM activations are reshaped to a
    grid derived from the resolution by `reshape_transform(resolution)`. `cam_resolutions` (set through
    `with_cam_policy`) makes `cam_layer` return one layer valid at all of them (the CAM layer must not change
    with the resolution a sweep compares).
    """

    name: str
    family: str
    cam_layers: tuple[str, ...]
    patch_size: int | None = None
    num_prefix_tokens: int = 0
    cam_resolutions: tuple[int, ...] = ()  # set by with_cam_policy('common', ...): one CAM layer for all of these
    deterministic: bool = False  # its fit does not depend on the training seed, by construction (register_model)
    fit: FitKind = "gradient"  # how the Trainer fits it (FIT_KINDS)
    features: FeatureKind = "none"  # what its frozen part gives, cached (FEATURE_KINDS)

    def reshape_transform(self, resolution: int) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """None for CNNs; for token models a callable [B, N, C] -> [B, C, g, g], g = resolution // patch_size."""
        if self.patch_size is None:
            return None
        grid = resolution // self.patch_size
        if grid < 1:
            raise ModelError(f"resolution {resolution} is smaller than the patch size {self.patch_size} of {self.name}")
        return functools.partial(_tokens_to_grid, grid=grid, prefix=self.num_prefix_tokens)

    @property
    def cam_layer_policy(self) -> str:
        """'common' (one layer valid at every resolution of `cam_resolutions`) or 'per_resolution'."""
        return "common" if self.cam_resolutions else "per_resolution"

    def with_cam_policy(self, policy: str, resolutions: Iterable[int]) -> ModelSpec:
        """This spec with the CAM layer policy of `models.cam_layer_policy`: 'common' pins `cam_layer` to the layer
        `common_cam_layer` picks over `resolutions` (plus the resolution asked for); 'per_resolution' keeps the
        deepest layer valid at each resolution on its own."""
        if policy == "common":
            return dataclasses.replace(self, cam_resolutions=tuple(sorted({int(r) for r in resolutions})))
        if policy == "per_resolution":
            return dataclasses.replace(self, cam_resolutions=())
        raise ModelError(f"unknown CAM layer policy '{policy}'; use 'common' or 'per_resolution'")

    def cam_layer(self, model: nn.Module, resolution: int, min_size: int) -> CamLayer:
        """The CAM layer at `resolution` and the side of its feature map there.

        Per resolution (no `cam_resolutions`): the deepest candidate whose feature side at `resolution` is
        >= min_size, else the largest one. With `cam_resolutions` (policy 'common'): the layer
        `common_cam_layer` picks over those resolutions and this one, so every resolution of a sweep hooks the
        same layer. Runs a dry forward of a zero image under no_grad; hooks are removed and every module's
        train/eval mode restored on exit.
        """
        if self.cam_resolutions:
            name = self.common_cam_layer(model, (*self.cam_resolutions, resolution), min_size).name
            modules = self._modules(unwrap(model))
            side = self._feature_sizes(unwrap(model), {name: modules[name]}, resolution)[name]
            return CamLayer(name, modules[name], int(side or 0))
        return self._deepest(model, resolution, min_size)

    def common_cam_layer(self, model: nn.Module, resolutions: Iterable[int], min_size: int) -> CamLayer:
        """The one layer valid at every resolution: the deepest candidate whose feature side is >= min_size at the
        smallest of `resolutions` (feature maps only grow with the input); feature_size is its side there."""
        found = sorted({int(r) for r in resolutions})
        if not found:
            raise ModelError(f"{self.name}: common_cam_layer needs at least one resolution")
        return self._deepest(model, found[0], min_size)

    def _modules(self, base: nn.Module) -> dict[str, nn.Module]:
        modules = {}
        for name in self.cam_layers:
            try:
                modules[name] = base.get_submodule(name)
            except AttributeError as exc:
                raise ModelError(f"CAM layer '{name}' of {self.name} is not in the model; fix its cam_layers") from exc
        return modules

    def _deepest(self, model: nn.Module, resolution: int, min_size: int) -> CamLayer:
        base = unwrap(model)
        modules = self._modules(base)
        sizes = self._feature_sizes(base, modules, resolution)
        spatial = [(n, s) for n, s in sizes.items() if s is not None]
        if not spatial:
            raise ModelError(
                f"{self.name} has no spatial feature map among {list(self.cam_layers)} at {resolution}px;"
                " use another model or explainer"
            )
        for name, side in spatial:  # candidates are deepest first
            if side >= min_size:
                return CamLayer(name, modules[name], side)
        name, side = max(spatial, key=lambda item: item[1])
        log.warning(
            "%s at %dpx: no CAM layer with side >= %d; using %s (%dx%d)",
            self.name,
            resolution,
            min_size,
            name,
            side,
            side,
        )
        return CamLayer(name, modules[name], side)

    def _feature_sizes(self, model: nn.Module, modules: dict[str, nn.Module], resolution: int) -> dict:
        reshape = self.reshape_transform(resolution)
        sizes: dict[str, int | None] = dict.fromkeys(modules)

        def make_hook(name: str):
            def hook(_module, _inputs, output):
                out = output[0] if isinstance(output, (tuple, list)) else output
                if isinstance(out, torch.Tensor) and out.dim() == 3 and reshape is not None:
                    out = reshape(out)
                if isinstance(out, torch.Tensor) and out.dim() == 4:
                    sizes[name] = int(min(out.shape[-2:]))

            return hook

        param = next(model.parameters(), None)
        device = param.device if param is not None else torch.device("cpu")
        dtype = param.dtype if param is not None and param.is_floating_point() else torch.float32
        x = torch.zeros(1, input_channels(model), resolution, resolution, device=device, dtype=dtype)
        modes = [(m, m.training) for m in model.modules()]
        handles = [m.register_forward_hook(make_hook(n)) for n, m in modules.items()]
        try:
            model.eval()
            with torch.no_grad():
                model(x)
        finally:
            for handle in handles:
                handle.remove()
            for module, training in modes:
                module.training = training
        return sizes
